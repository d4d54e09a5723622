//! Telling people that a record waits for them, and waiting for their answer.
//!
//! - [`Engine::on_needs_person`] calls a function each time a call of this engine finds a
//!   record that needs a person: it went in doubt, it parked for approval, or its claim is stale
//!   and the call may not take it over. Built on [`Engine::events`]: a call that ended
//!   `blocked` or `awaiting-approval` is looked up in the journal, and each (record, state,
//!   last change) is notified once per engine, however many calls find it.
//!   [`Engine::on_needs_person_sweeping`] also sweeps the journal now and then, for the stale
//!   claims of workers that died and that no call meets again.
//! - [`webhook`] (feature `webhook`) delivers those notifications as signed JSON POSTs, retried
//!   until the receiver acknowledges them.
//! - [`RunHandle::wait_for_approval`](crate::RunHandle::wait_for_approval) parks a task until a
//!   person approves or denies a call, without calling the tool again to find out.
//!
//! The [`NeedsPerson::id`] of a notification is the same in every process that sends it (the
//! key, the state and the record's last change), so a receiver can drop the repeats that
//! at-least-once delivery and several workers bring.

use std::collections::{HashSet, VecDeque};
use std::time::Duration;

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::call::error::StoreError;
use crate::decide::record::{EffectRecord, Millis, RecordState};
use crate::engine::{Disposition, Engine, EngineEvent};
use crate::store::Store;

#[cfg(feature = "webhook")]
pub mod webhook;

/// A record that needs a person, as notified.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct NeedsPerson {
    /// Stable across processes and repeats: SHA-256 (hex, 32 characters) of the key, the state
    /// and the record's last change.
    pub id: String,
    /// Why: `in-doubt`, `awaiting-approval` or `stale`.
    pub state: &'static str,
    /// The effect key.
    pub key: String,
    /// The tool.
    pub tool: String,
    /// The run.
    pub run_id: String,
    /// The role whose approval the call needs (`awaiting-approval`).
    pub approval_role: Option<String>,
    /// Why the record is in doubt, in words, if known.
    pub reason: Option<String>,
    /// The call's input, sensitive fields removed (as journaled).
    pub input: serde_json::Value,
    /// When the record went into this state (milliseconds since the Unix epoch; for a stale
    /// claim, when its lease ended).
    pub since: Millis,
    /// What a person runs to act on it.
    pub next_step: String,
    /// One line for chat tools (Slack's incoming webhooks show `text`), with `&`, `<` and `>`
    /// escaped as Slack requires (`&amp;`, `&lt;`, `&gt;`): a run id or key chosen by a client
    /// cannot mention `<!channel>` or disguise a link. The other fields are as recorded.
    pub text: String,
}

impl NeedsPerson {
    /// The notification for `rec` at `now`, if it needs a person.
    pub fn of(rec: &EffectRecord, now: Millis) -> Option<NeedsPerson> {
        let (state, since, next_step) = match rec.state {
            RecordState::InDoubt => (
                "in-doubt",
                rec.updated_at,
                format!(
                    "effect-tool show {key}, then effect-tool resolve {key} --applied --output JSON (or --not-applied)",
                    key = crate::value::shell::quote(&rec.key)
                ),
            ),
            RecordState::AwaitingApproval => (
                "awaiting-approval",
                rec.updated_at,
                format!(
                    "effect-tool approve {key} --as {role} (or effect-tool deny {key} --reason TEXT)",
                    key = crate::value::shell::quote(&rec.key),
                    role = crate::value::shell::quote(rec.approval_role.as_deref().unwrap_or("ROLE"))
                ),
            ),
            RecordState::Claimed if rec.is_stale(now) => (
                "stale",
                rec.lease_until.unwrap_or(rec.updated_at),
                format!("effect-tool show {}", crate::value::shell::quote(&rec.key)),
            ),
            _ => return None,
        };
        let id = {
            let digest = Sha256::digest(format!("{}\n{state}\n{}", rec.key, rec.updated_at));
            digest[..16].iter().map(|b| format!("{b:02x}")).collect::<String>()
        };
        let text = match state {
            "in-doubt" => format!(
                "{} is in doubt: its effect may or may not have happened. {}",
                rec.tool,
                rec.reason.as_deref().unwrap_or("")
            ),
            "awaiting-approval" => format!(
                "{} waits for approval by {}.",
                rec.tool,
                rec.approval_role.as_deref().unwrap_or("a person")
            ),
            _ => format!(
                "{} has a stale claim: its worker stopped before recording a result.",
                rec.tool
            ),
        };
        Some(NeedsPerson {
            id,
            state,
            key: rec.key.clone(),
            tool: rec.tool.clone(),
            run_id: rec.run_id.clone(),
            approval_role: rec.approval_role.clone(),
            reason: rec.reason.clone(),
            input: rec.input.clone(),
            since,
            text: slack_escape(&format!("{} Next: {next_step}", text.trim_end())),
            next_step,
        })
    }
}

/// `text` with the three characters Slack's message formatting gives a meaning escaped, as
/// Slack asks (<https://api.slack.com/reference/surfaces/formatting#escaping>).
fn slack_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            c => out.push(c),
        }
    }
    out
}

/// How many notification ids an engine remembers, to notify each once.
const REMEMBERED: usize = 10_000;

/// The ids notified lately (at most [`REMEMBERED`], oldest forgotten first).
#[derive(Default)]
struct Seen {
    order: VecDeque<String>,
    ids: HashSet<String>,
}

impl Seen {
    /// Whether `id` is new (and remember it).
    fn first(&mut self, id: &str) -> bool {
        if self.ids.contains(id) {
            return false;
        }
        if self.order.len() == REMEMBERED
            && let Some(old) = self.order.pop_front()
        {
            self.ids.remove(&old);
        }
        self.order.push_back(id.to_owned());
        self.ids.insert(id.to_owned());
        true
    }
}

/// The task behind [`Engine::on_needs_person`]; dropping it stops the notifications.
#[derive(Debug)]
pub struct NeedsPersonWatch {
    task: tokio::task::JoinHandle<()>,
}

impl NeedsPersonWatch {
    /// Stop notifying.
    pub fn stop(self) {}
}

impl Drop for NeedsPersonWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Engine {
    /// Call `notify` for every record a call of this engine finds needing a person (see the
    /// [`notify`](crate::ops::notify) module), once per record and state. Runs until the returned
    /// watch is dropped. Needs a tokio runtime.
    ///
    /// Only records that a call of this engine meets are notified: a claim whose worker died
    /// and that no call meets again goes stale unnoticed. [`Engine::on_needs_person_sweeping`]
    /// also looks through the journal.
    pub fn on_needs_person(&self, notify: impl Fn(NeedsPerson) + Send + Sync + 'static) -> NeedsPersonWatch {
        self.watch_needs_person(None, notify)
    }

    /// [`Engine::on_needs_person`], and every `every` a sweep of the journal for the records
    /// that need a person (in doubt, awaiting approval, a claim whose lease ended), whoever made
    /// them: a worker that died mid-call, another process's calls. Each is still notified once
    /// per record and state (per engine: run one sweeping watch, not one per worker). A sweep
    /// lists those records; on a large journal give it minutes, not seconds.
    pub fn on_needs_person_sweeping(
        &self,
        every: Duration,
        notify: impl Fn(NeedsPerson) + Send + Sync + 'static,
    ) -> NeedsPersonWatch {
        self.watch_needs_person(Some(every), notify)
    }

    fn watch_needs_person(
        &self,
        sweep: Option<Duration>,
        notify: impl Fn(NeedsPerson) + Send + Sync + 'static,
    ) -> NeedsPersonWatch {
        let mut events = self.events();
        let store = self.store().clone();
        let task = tokio::spawn(async move {
            let mut seen = Seen::default();
            let mut ticks = sweep.map(|every| {
                let mut t = tokio::time::interval(every);
                t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                t
            });
            loop {
                let event = tokio::select! {
                    biased;
                    event = events.recv() => event,
                    _ = async { ticks.as_mut().expect("only polled with a sweep").tick().await }, if ticks.is_some() => {
                        match sweep_journal(store.as_ref()).await {
                            Ok(found) => found.into_iter().filter(|n| seen.first(&n.id)).for_each(&notify),
                            Err(e) => tracing::warn!(error = %e, "could not sweep the journal for records that need a person"),
                        }
                        continue;
                    }
                };
                let key = match event {
                    Ok(EngineEvent::Call(call))
                        if matches!(call.disposition, Disposition::Blocked | Disposition::AwaitingApproval) =>
                    {
                        match call.key {
                            Some(key) => key,
                            None => continue,
                        }
                    }
                    Ok(_) => continue,
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(missed)) => {
                        tracing::warn!(missed, "needs-person notifications fell behind the engine's events");
                        continue;
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                };
                match needs_person(store.as_ref(), &key).await {
                    Ok(Some(n)) if seen.first(&n.id) => notify(n),
                    Ok(_) => {}
                    Err(e) => tracing::warn!(key = %key, error = %e, "could not read a record that needs a person"),
                }
            }
        });
        NeedsPersonWatch { task }
    }
}

/// The records of the journal that need a person now, oldest change first.
async fn sweep_journal(store: &dyn Store) -> Result<Vec<NeedsPerson>, StoreError> {
    let filter = crate::store::Filter {
        states: vec![
            RecordState::InDoubt,
            RecordState::AwaitingApproval,
            RecordState::Claimed,
        ],
        ..Default::default()
    };
    let now = store.now();
    let mut found: Vec<NeedsPerson> = store
        .list(&filter)
        .await?
        .iter()
        .filter_map(|rec| NeedsPerson::of(rec, now))
        .collect();
    found.sort_by_key(|n| n.since);
    Ok(found)
}

async fn needs_person(store: &dyn Store, key: &str) -> Result<Option<NeedsPerson>, StoreError> {
    Ok(store.get(key).await?.and_then(|rec| NeedsPerson::of(&rec, store.now())))
}

pub use crate::store::approval::ApprovalAnswer;
