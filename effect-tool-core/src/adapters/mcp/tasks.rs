//! MCP tasks for calls that wait for a person: the Tasks extension
//! (`io.modelcontextprotocol/tasks`, SEP-2663, as rmcp 3.x implements it).
//!
//! A `tools/call` that parks for a person's approval, or stops in doubt (the effect may or may
//! not have happened, and a person must resolve the record), is answered with a task instead
//! of an error result when the client declared the extension (in its capabilities at
//! `initialize`, or in the request's own `_meta`). Any other call, and every call of a client
//! that did not declare it, is answered as before.
//!
//! # The task is the journal's record
//!
//! The task id names the record's effect key and the principal that called, bound by an HMAC
//! under the journal's secret ([`Store::marker_secret`](crate::Store::marker_secret), a
//! context of its own): `effect-tool-task-v1.<key, hex>.<128-bit MAC>`. The key is no secret
//! (every result's `_meta` carries it), the MAC is: nobody without the secret makes an id, and
//! an id made for one principal is "task not found" (`-32602`) for every other one, as an id
//! that does not exist. The same call made again (same key, same principal) gets the same task.
//!
//! `tasks/get` reads the record each time, so a task outlives the server process (and is the
//! same task on every server of the journal):
//!
//! | record | task |
//! |---|---|
//! | awaiting approval | `working`, `statusMessage` names the role and the command a person runs; `_meta` `effect-tool/state: awaiting-approval` |
//! | in doubt | `working`, likewise (`in-doubt`) |
//! | claimed (running) | `working` |
//! | completed | `completed`, `result` the `CallToolResult` a direct call made again returns (the recorded output, disposition `replayed`) |
//! | denied, compensated | `completed`, an error result saying so (`isError: true`, as a direct call's) |
//! | approved or released, and this server no longer holds the call | `completed`, an error result: call again with the same arguments to run it once |
//! | gone (collected) | "task not found" |
//!
//! Waiting for a person is `working`, not `input_required`: that status asks the *client* to
//! answer `inputRequests` through `tasks/update`, and an approval is not the client's to give
//! (it is a person's with the record's role, through the CLI, the API or the console); a
//! client shown `input_required` with nothing to answer could only poll anyway. In doubt is not
//! `failed` either: `failed` is terminal and for JSON-RPC errors only, and a person's
//! resolution still settles the call.
//!
//! # Who runs the call after a person's decision
//!
//! The server does. With the task it keeps the call as it was dispatched (run, arguments) and
//! waits on the journal (`store::approval::wait_while`, woken by the store's change
//! notifications) until the record leaves the approval queue or its doubt, then dispatches the
//! call once more through the engine: an approved call runs, a denied one fails with the
//! person's reason, one resolved as applied replays the person's output, one resolved as not
//! applied runs. Its result is the task's (`completed`). A call that parks again (an approval
//! voided by an edit, a run that ends in doubt) is waited for again. The wait is bounded
//! ([`McpServer::with_task_wait`](super::McpServer::with_task_wait), a day by default; then the
//! task completes with the answer the call first got) and `tasks/cancel` ends it (the task is
//! `cancelled`; a call already running gets the run's cancellation, and the task ends as that
//! call does). The record stays in the approval queue either way: only a person takes it out.
//! A server that restarts no longer holds the call: its tasks still answer from the journal,
//! and one a person approved after the restart completes with "call again", today's rule (the
//! arguments are not in the journal as sent: `#[sensitive]` ones are digests there).
//!
//! `tasks/update` is acknowledged and ignored (no task of this server asks the client for
//! input). At most 1024 tasks are waited for at once per server; past that, a call is answered
//! as without tasks.

use crate::value::digest::{hex, unhex};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use hmac::{Hmac, Mac};
use rmcp::model::{
    CallToolResult, ContentBlock, CreateTaskResult, DetailedTask, GetTaskResult, JsonObject, MetaObject, Task,
    TaskPayload, TaskStatus,
};
use serde_json::{Map, Value, json};
use sha2::Sha256;
use tokio_util::sync::CancellationToken;

use super::{Caller, Dispatched, McpServer, is_input_mismatch, to_call_tool_result_with};
use crate::decide::record::{EffectRecord, Millis, RecordState};
use crate::engine::Disposition;
use crate::store::approval::wait_while;
use crate::toolkit::{Dispatcher, ToolOutcome, ToolResult};

/// What every task id of this server starts with.
const ID_PREFIX: &str = "effect-tool-task-v1.";
/// What a task id's MAC covers before the principal and the key, so that it means "a task" and
/// nothing else made with the journal's secret (marker ids have contexts of their own).
const ID_CONTEXT: &[u8] = b"effect-tool mcp task id v1\n";
/// The bytes of the MAC in a task id (128 bits: nothing to guess).
const MAC_BYTES: usize = 16;
/// The polling interval suggested to clients.
const POLL_INTERVAL_MS: u64 = 1_000;
/// How long a task waits for a person by default ([`McpServer::with_task_wait`]).
pub(super) const DEFAULT_TASK_WAIT: Duration = Duration::from_secs(24 * 60 * 60);
/// How many tasks one server waits for at once.
const MAX_LIVE: usize = 1024;
/// How long a finished task's answer is kept in memory (after that, the journal answers).
const KEEP_FINISHED: Duration = Duration::from_secs(60 * 60);
/// The record states in which a call waits for a person.
const WAITING: [RecordState; 2] = [RecordState::AwaitingApproval, RecordState::InDoubt];

/// The tasks of one server (shared by its sessions).
pub(super) struct Tasks {
    /// The key task ids are made with: the journal's secret, else 32 random bytes of this
    /// process (a journal that keeps no secret keeps no task across a restart either).
    secret: tokio::sync::OnceCell<[u8; 32]>,
    /// The calls this server waits for or ran for a task, by task id.
    live: Mutex<HashMap<String, Live>>,
    /// How long a task waits for a person.
    wait: Duration,
}

/// A task this server holds.
struct Live {
    state: LiveState,
    cancel: CancellationToken,
    created: Millis,
    updated: Millis,
    /// When it finished, for forgetting it.
    finished: Option<Instant>,
}

enum LiveState {
    /// Waiting for a person (the journal says for what).
    Waiting,
    /// Running after a person's decision.
    Running,
    /// Answered.
    Done(CallToolResult),
    /// Cancelled by the client while it waited.
    Cancelled,
}

impl Tasks {
    pub(super) fn new(wait: Duration) -> Self {
        Tasks {
            secret: tokio::sync::OnceCell::new(),
            live: Mutex::new(HashMap::new()),
            wait,
        }
    }

    fn live(&self) -> std::sync::MutexGuard<'_, HashMap<String, Live>> {
        self.live.lock().unwrap_or_else(PoisonError::into_inner)
    }

    async fn secret(&self, server: &McpServer) -> Result<[u8; 32], crate::call::error::StoreError> {
        self.secret
            .get_or_try_init(|| async {
                match server.dispatcher.engine().marker_secret().await? {
                    Some(secret) => Ok(*secret.as_bytes()),
                    None => {
                        let mut bytes = [0u8; 32];
                        if let Err(e) = getrandom::fill(&mut bytes) {
                            panic!("the operating system's random generator failed ({e}): no MCP task id can be made");
                        }
                        Ok(bytes)
                    }
                }
            })
            .await
            .copied()
    }

    /// The task id of `key` for `principal`.
    fn id(secret: &[u8; 32], principal: Option<&str>, key: &str) -> String {
        let mac = mac(secret, principal, key).finalize().into_bytes();
        format!("{ID_PREFIX}{}.{}", hex(key.as_bytes()), hex(&mac[..MAC_BYTES]))
    }

    /// The key a task id names, when it was made for `principal` under this journal's secret.
    fn key_of(secret: &[u8; 32], principal: Option<&str>, id: &str) -> Option<String> {
        let (key, tag) = id.strip_prefix(ID_PREFIX)?.split_once('.')?;
        let key = String::from_utf8(unhex(key)?).ok()?;
        let tag = unhex(tag)?;
        if tag.len() != MAC_BYTES {
            return None;
        }
        mac(secret, principal, &key).verify_truncated_left(&tag).ok()?;
        Some(key)
    }

    /// Answer a dispatched call with a task when it waits for a person and the client can
    /// poll; `None`: answer it as without tasks.
    pub(super) async fn park(
        self: &Arc<Self>,
        server: &McpServer,
        caller: &Caller,
        dispatched: &Dispatched,
        answer: &CallToolResult,
    ) -> Option<CreateTaskResult> {
        let result = &dispatched.result;
        let key = result.key.as_deref()?;
        // An output or a refusal is the answer; so is another input under the key (the record
        // that waits is another call's).
        if matches!(result.outcome, ToolOutcome::Output(_) | ToolOutcome::Rejected(_)) || is_input_mismatch(result) {
            return None;
        }
        let store = server.dispatcher.engine().store();
        let record = match store.get(key).await {
            Ok(Some(record)) if WAITING.contains(&record.state) => record,
            Ok(_) => return None,
            Err(e) => {
                tracing::warn!(tool = %result.name, key, error = %e, "the journal could not be read to make an MCP task; the call is answered without one");
                return None;
            }
        };
        let secret = match self.secret(server).await {
            Ok(secret) => secret,
            Err(e) => {
                tracing::warn!(tool = %result.name, key, error = %e, "the journal's secret could not be read to make an MCP task id; the call is answered without one");
                return None;
            }
        };
        let id = Tasks::id(&secret, caller.principal.as_ref().map(|p| p.id()), key);
        {
            let mut live = self.live();
            live.retain(|_, t| t.finished.is_none_or(|at| at.elapsed() < KEEP_FINISHED));
            let waiting = live.get(&id).is_some_and(|t| t.finished.is_none());
            if !waiting {
                if live.values().filter(|t| t.finished.is_none()).count() >= MAX_LIVE {
                    tracing::warn!(tool = %result.name, key, "this MCP server already waits for {MAX_LIVE} tasks; the call is answered without one");
                    return None;
                }
                let cancel = CancellationToken::new();
                live.insert(
                    id.clone(),
                    Live {
                        state: LiveState::Waiting,
                        cancel: cancel.clone(),
                        created: record.created_at,
                        updated: record.updated_at,
                        finished: None,
                    },
                );
                self.spawn(
                    server.dispatcher.clone(),
                    id.clone(),
                    dispatched,
                    answer.clone(),
                    cancel,
                );
            }
        }
        let (message, state) = waiting_message(&record);
        let task = Task::new(&id, TaskStatus::Working, iso(record.created_at), iso(record.updated_at))
            .with_status_message(message)
            .with_poll_interval_ms(POLL_INTERVAL_MS);
        let mut meta = answer.meta.clone().unwrap_or_default();
        meta.0.insert("effect-tool/state".into(), json!(state));
        Some(CreateTaskResult::new(task).with_meta(meta))
    }

    /// Wait for a person's decision on the call's record, then run the call once more through
    /// the engine; its result is the task's.
    fn spawn(
        self: &Arc<Self>,
        dispatcher: Dispatcher,
        id: String,
        dispatched: &Dispatched,
        first: CallToolResult,
        cancel: CancellationToken,
    ) {
        let tasks = Arc::clone(self);
        let run = dispatched.run.clone().with_cancellation(cancel.child_token());
        let call = dispatched.call.clone();
        let Some(key) = dispatched.result.key.clone() else {
            return;
        };
        let deadline = tokio::time::Instant::now() + self.wait;
        tokio::spawn(async move {
            let store = dispatcher.engine().store().clone();
            loop {
                let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                let decided = tokio::select! {
                    () = cancel.cancelled() => {
                        tasks.set(&id, LiveState::Cancelled);
                        return;
                    }
                    decided = wait_while(&store, &key, &WAITING, left) => decided,
                };
                match decided {
                    Ok(Some(_)) => {}
                    Ok(None) => {
                        tasks.set(&id, LiveState::Done(first));
                        return;
                    }
                    Err(e) => {
                        tracing::warn!(key = %key, error = %e, "an MCP task could not read the journal; it stops waiting, and its state is read from the journal");
                        tasks.forget(&id);
                        return;
                    }
                }
                tasks.set(&id, LiveState::Running);
                let result = dispatcher.call(&run, &call).await;
                let answer = to_call_tool_result_with(&result, dispatcher.toolkit().output(&result.name));
                let again = !matches!(result.outcome, ToolOutcome::Output(_) | ToolOutcome::Rejected(_))
                    && !cancel.is_cancelled()
                    && matches!(store.get(&key).await, Ok(Some(r)) if WAITING.contains(&r.state));
                if !again {
                    tasks.set(&id, LiveState::Done(answer));
                    return;
                }
                tasks.set(&id, LiveState::Waiting);
            }
        });
    }

    fn set(&self, id: &str, state: LiveState) {
        if let Some(t) = self.live().get_mut(id) {
            if matches!(state, LiveState::Done(_) | LiveState::Cancelled) {
                t.finished = Some(Instant::now());
            }
            t.state = state;
            t.updated = now_millis();
        }
    }

    fn forget(&self, id: &str) {
        self.live().remove(id);
    }

    /// `tasks/get`: the task's state, read from the journal unless this server holds its answer.
    pub(super) async fn get(
        &self,
        server: &McpServer,
        caller: &Caller,
        id: &str,
    ) -> Result<GetTaskResult, rmcp::ErrorData> {
        let secret = self.secret(server).await.map_err(internal)?;
        let key = Tasks::key_of(&secret, caller.principal.as_ref().map(|p| p.id()), id).ok_or_else(not_found)?;
        let record = server.dispatcher.engine().store().get(&key).await.map_err(internal)?;
        // What this server holds of it, if anything.
        let held = self.live().get(id).map(|t| {
            let payload = match &t.state {
                LiveState::Done(answer) => Some(TaskPayload::Completed { result: object(answer) }),
                LiveState::Cancelled => Some(TaskPayload::Cancelled),
                LiveState::Waiting | LiveState::Running => None,
            };
            (payload, t.created, t.updated, matches!(t.state, LiveState::Running))
        });
        let task = |status, created, updated| Task::new(id, status, iso(created), iso(updated));
        let detailed = match (held, record) {
            (Some((Some(payload), created, updated, _)), _) => {
                DetailedTask::new(task(payload.status(), created, updated), payload)
            }
            (_, None) => return Err(not_found()),
            (held, Some(record)) => {
                let running = held.as_ref().is_some_and(|h| h.3);
                let holds = held.is_some();
                let (payload, message, state) = from_record(server, &record, holds, running);
                let t = task(payload.status(), record.created_at, record.updated_at)
                    .with_status_message(message)
                    .with_poll_interval_ms(POLL_INTERVAL_MS);
                let mut result = GetTaskResult::new(DetailedTask::new(t, payload));
                let mut meta = Map::new();
                meta.insert("effect-tool/key".into(), json!(key));
                meta.insert("effect-tool/state".into(), json!(state));
                result.meta = Some(MetaObject(meta));
                return Ok(result);
            }
        };
        Ok(GetTaskResult::new(detailed))
    }

    /// `tasks/cancel`: stop waiting for the task's call (acknowledged whatever the id).
    pub(super) async fn cancel(&self, server: &McpServer, caller: &Caller, id: &str) {
        let Ok(secret) = self.secret(server).await else {
            return;
        };
        if Tasks::key_of(&secret, caller.principal.as_ref().map(|p| p.id()), id).is_none() {
            return;
        }
        if let Some(t) = self.live().get(id) {
            t.cancel.cancel();
        }
    }
}

/// A task's state from its record alone (`holds`: this server waits for, or runs, its call).
fn from_record(
    server: &McpServer,
    record: &EffectRecord,
    holds: bool,
    running: bool,
) -> (TaskPayload, String, &'static str) {
    let tool = &record.tool;
    let state = record.state.as_str();
    let done = |text: String, outcome: &str| {
        let mut meta = Map::new();
        meta.insert("effect-tool/outcome".into(), json!(outcome));
        meta.insert("effect-tool/disposition".into(), json!("not-run"));
        meta.insert("effect-tool/key".into(), json!(record.key));
        let r = CallToolResult::error(vec![ContentBlock::text(text)]).with_meta(Some(MetaObject(meta)));
        TaskPayload::Completed { result: object(&r) }
    };
    match record.state {
        RecordState::AwaitingApproval | RecordState::InDoubt => {
            let (message, _) = waiting_message(record);
            (TaskPayload::Working, message, state)
        }
        _ if running => (
            TaskPayload::Working,
            format!("a person decided; the server is running `{tool}`"),
            state,
        ),
        RecordState::Claimed => (TaskPayload::Working, format!("`{tool}` is running"), state),
        RecordState::Pending => (
            TaskPayload::Working,
            format!("`{tool}` started its effect; its provider has not called back yet"),
            state,
        ),
        RecordState::Completed => {
            let output = record.output.clone().unwrap_or(Value::Null);
            let toolkit = server.dispatcher.toolkit();
            let view = toolkit.get(tool).and_then(|t| t.to_model_json(&output));
            let replay = ToolResult {
                call_id: record.call_id.clone().unwrap_or_default(),
                name: tool.clone(),
                outcome: ToolOutcome::Output(output),
                disposition: Disposition::Replayed,
                key: Some(record.key.clone()),
                input_differs: None,
                edited: None,
                recorded: None,
                view,
            };
            let answer = to_call_tool_result_with(&replay, toolkit.output(tool));
            let message = format!("`{tool}` completed; its result is recorded");
            (
                TaskPayload::Completed {
                    result: object(&answer),
                },
                message,
                state,
            )
        }
        _ if holds => (
            TaskPayload::Working,
            format!("a person decided; the server continues `{tool}`"),
            state,
        ),
        RecordState::Denied => {
            let by = record.decided_by.as_deref().unwrap_or("a person");
            let why = record.reason.as_deref().unwrap_or("no reason given");
            let text = format!(
                "Error: `{tool}` was not run: {by} denied it ({why}). Do not call it again for this work; tell the user it was denied and why."
            );
            (done(text.clone(), "failed"), text, state)
        }
        RecordState::Compensated => {
            let text = format!(
                "Error: `{tool}` ran, and its effect was undone (compensated) when its run was abandoned. Do not call it again for this work."
            );
            (done(text.clone(), "failed"), text, state)
        }
        RecordState::Approved | RecordState::Released => {
            let decided = if record.state == RecordState::Approved {
                "a person approved it"
            } else {
                "a person found it had not happened"
            };
            let text = format!(
                "`{tool}` has not run yet: {decided}, and this server no longer holds the call (it restarted, or stopped waiting). Call `{tool}` again with the same arguments, in the same run: it runs once."
            );
            (done(text.clone(), "call-again"), text, state)
        }
    }
}

/// What a task waiting for a person says, and its `effect-tool/state`.
fn waiting_message(record: &EffectRecord) -> (String, &'static str) {
    let tool = &record.tool;
    match record.state {
        RecordState::InDoubt => (
            format!(
                "`{tool}` is in doubt: it may or may not have happened, and a person must resolve it: {}; the server continues the call then",
                crate::value::commands::resolve_commands(&record.key, false)
            ),
            "in-doubt",
        ),
        _ => {
            let key = crate::value::shell::quote(&record.key);
            let role = record.approval_role.as_deref().unwrap_or("approver");
            (
                format!(
                    "`{tool}` waits for approval by a person of role `{role}` (`effect-tool approve {key} --as {}`, or the console); the server runs it once approved",
                    crate::value::shell::quote(role)
                ),
                "awaiting-approval",
            )
        }
    }
}

fn mac(secret: &[u8; 32], principal: Option<&str>, key: &str) -> Hmac<Sha256> {
    // HMAC takes a key of any length: this cannot fail.
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(secret).unwrap_or_else(|_| unreachable!());
    mac.update(ID_CONTEXT);
    match principal {
        // The length first, so that no principal and key run into another pair.
        Some(p) => mac.update(format!("principal {}:{p}\n", p.len()).as_bytes()),
        None => mac.update(b"no principal\n"),
    }
    mac.update(key.as_bytes());
    mac
}

fn object(result: &CallToolResult) -> JsonObject {
    match serde_json::to_value(result) {
        Ok(Value::Object(o)) => o,
        _ => JsonObject::new(),
    }
}

fn not_found() -> rmcp::ErrorData {
    rmcp::ErrorData::invalid_params(
        "task not found: no task of yours has this id (it may have been collected with its journal record); call the tool again",
        None,
    )
}

fn internal(e: crate::call::error::StoreError) -> rmcp::ErrorData {
    rmcp::ErrorData::internal_error(format!("the journal could not be read ({e}); poll again later"), None)
}

fn now_millis() -> Millis {
    chrono::Utc::now().timestamp_millis()
}

/// A journal time (milliseconds since the epoch) as ISO 8601.
fn iso(ms: Millis) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_id_names_its_key_for_its_principal_only() {
        let secret = [7u8; 32];
        let key = "alice/run-1:send_email:3f2a";
        let id = Tasks::id(&secret, Some("alice"), key);
        assert!(id.starts_with(ID_PREFIX), "{id}");
        assert_eq!(Tasks::key_of(&secret, Some("alice"), &id).as_deref(), Some(key));
        // Another principal, no principal, another secret: not found.
        assert_eq!(Tasks::key_of(&secret, Some("bob"), &id), None);
        assert_eq!(Tasks::key_of(&secret, None, &id), None);
        assert_eq!(Tasks::key_of(&[8u8; 32], Some("alice"), &id), None);
        // The key changed under the same MAC, or the MAC changed: not found.
        let (head, tag) = id.rsplit_once('.').unwrap();
        let other = format!("{ID_PREFIX}{}.{tag}", hex(b"alice/run-1:send_email:0000"));
        assert_eq!(Tasks::key_of(&secret, Some("alice"), &other), None);
        let flipped = format!("{head}.{}{}", if tag.starts_with('0') { "1" } else { "0" }, &tag[1..]);
        assert_eq!(Tasks::key_of(&secret, Some("alice"), &flipped), None);
        assert_eq!(Tasks::key_of(&secret, Some("alice"), "not-a-task"), None);
        assert_eq!(iso(0), "1970-01-01T00:00:00.000Z");
    }
}
