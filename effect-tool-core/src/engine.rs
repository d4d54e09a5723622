//! The call engine: DESIGN §4 for every call of a tool.
//!
//! 1. Compute the key; look it up (a claim is the lookup).
//! 2. Recorded → return it; nothing runs.
//! 3. In flight → wait for it and share its result (in this process through a channel, across
//!    processes by polling the journal until the claim completes or its lease expires).
//! 4. Stale claim or in doubt → `recover` if declared; else `idempotent` re-runs with the same
//!    key; `compensable`/`irreversible` stop with [`SideEffectRetryBlocked`].
//! 5. Approval required → the call parks ([`ApprovalPending`]) until a person approves.
//! 6. Claim, execute, record; the [`crate::policy`] decides what a failure leads to.
//! 7. Fencing: only the attempt holding the claim can complete it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::Notify;
use tracing::Instrument;

use crate::class::EffectClass;
use crate::context::{EffectCtx, RunContext};
use crate::error::{ApprovalPending, BlockReason, EffectError, SideEffectRetryBlocked, StoreError};
use crate::key;
use crate::outcome::{ClassifyError, Failure, Outcome};
use crate::policy::{Decision, PolicyInput, decide};
use crate::record::{Intent, Op, OpOutcome, RecordState};
use crate::store::{Recorded, Store, StoreExt};
use crate::tool::Tool;

/// Settings of an [`Engine`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineConfig {
    /// How long a claim is held before another attempt may take it over; renewed while the
    /// tool runs.
    pub lease: Duration,
    /// How often a call waiting for another process's claim looks at the journal again.
    pub poll_interval: Duration,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            lease: Duration::from_secs(30),
            poll_interval: Duration::from_millis(25),
        }
    }
}

/// What happened to a call, for callers that report it (the quickstart prints it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Disposition {
    /// The tool ran (a pure tool, or a new effect that was recorded).
    Executed,
    /// A recorded result was returned; nothing ran.
    Replayed,
    /// An identical call was running; its result was shared.
    Shared,
    /// The outcome of an earlier attempt was unknown; `recover` found the effect.
    Reconciled,
    /// The call was stopped with [`SideEffectRetryBlocked`].
    Blocked,
    /// The call waits for approval.
    AwaitingApproval,
    /// The call failed (see the error).
    Failed,
}

impl Disposition {
    /// A word for the disposition (`executed`, `replayed`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Disposition::Executed => "executed",
            Disposition::Replayed => "replayed",
            Disposition::Shared => "shared",
            Disposition::Reconciled => "reconciled",
            Disposition::Blocked => "blocked",
            Disposition::AwaitingApproval => "awaiting-approval",
            Disposition::Failed => "failed",
        }
    }
}

impl std::fmt::Display for Disposition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The result of a call with what happened to it.
#[derive(Debug)]
pub struct CallReport<O, E> {
    /// The output or the error.
    pub result: Result<O, EffectError<E>>,
    /// What happened.
    pub disposition: Disposition,
    /// The effect key (`None` for pure tools).
    pub key: Option<String>,
}

/// Per-call options.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallOptions {
    /// The model's tool-call id.
    pub call_id: Option<String>,
}

impl CallOptions {
    /// Options with a tool-call id.
    pub fn call_id(id: impl Into<String>) -> Self {
        CallOptions {
            call_id: Some(id.into()),
        }
    }
}

type Shared = (Result<Value, EffectError<String>>, Disposition);

/// Where the leading call of a key publishes its result for the identical calls waiting on it
/// in this process.
struct Slot {
    state: Mutex<SlotState>,
    notify: Notify,
    /// The leader's input fingerprint: a custom key can join calls with different inputs.
    fingerprint: String,
    /// The leader's tool-call id: an unkeyed irreversible call under another id is not the
    /// same work, as far as anyone can tell.
    call_id: Option<String>,
}

enum SlotState {
    Running,
    Done(Shared),
    /// The leader ended without a result (cancelled or panicked): a follower takes its place.
    Abandoned,
}

impl Slot {
    fn set(&self, state: SlotState) {
        *self.state.lock().unwrap_or_else(|e| e.into_inner()) = state;
        self.notify.notify_waiters();
    }

    /// Wait for the leader: `Some` with its result, `None` if it ended without one.
    async fn wait(&self) -> Option<Shared> {
        loop {
            let notified = self.notify.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            match &*self.state.lock().unwrap_or_else(|e| e.into_inner()) {
                SlotState::Done(shared) => return Some(shared.clone()),
                SlotState::Abandoned => return None,
                SlotState::Running => {}
            }
            notified.await;
        }
    }
}

/// Runs tool calls through the journal. Cheap to clone; clones share the journal and the
/// in-process sharing of identical calls.
#[derive(Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

struct Inner {
    store: Arc<dyn Store>,
    config: EngineConfig,
    inflight: Mutex<HashMap<String, Arc<Slot>, foldhash::fast::RandomState>>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

/// Removes the in-process claim when the leading call ends, however it ends.
struct Leader<'a> {
    engine: &'a Inner,
    key: &'a str,
    slot: Arc<Slot>,
    finished: bool,
}

impl Leader<'_> {
    /// Leave the in-process map; `true` if identical calls are waiting for the result.
    fn leave(&mut self) -> bool {
        if !self.finished {
            self.finished = true;
            let mut map = self.engine.inflight.lock().unwrap_or_else(|e| e.into_inner());
            map.remove(self.key);
        }
        // After leaving the map nobody new can join; whoever holds the slot waits on it.
        Arc::strong_count(&self.slot) > 1
    }

    fn publish(mut self, shared: impl FnOnce() -> Shared) {
        if self.leave() {
            self.slot.set(SlotState::Done(shared()));
        }
    }
}

impl Drop for Leader<'_> {
    fn drop(&mut self) {
        if !self.finished && self.leave() {
            self.slot.set(SlotState::Abandoned);
        }
    }
}

enum Role<'a> {
    Leader(Leader<'a>),
    Follower(Arc<Slot>),
}

enum Exec<O, E> {
    Done(Result<O, E>),
    /// Ended without an answer: timed out or panicked. The outcome is unknown.
    Lost(Lost),
    Cancelled,
}

/// How an execution ended without an answer.
enum Lost {
    TimedOut(Duration),
    Panicked(String),
}

impl Lost {
    fn reason(&self) -> String {
        match self {
            Lost::TimedOut(after) => format!("timed out after {after:?}"),
            Lost::Panicked(message) => format!("panicked: {message}"),
        }
    }

    fn into_error<E>(self, tool: &str, key: Option<&str>) -> EffectError<E> {
        let (tool, key) = (tool.to_owned(), key.map(str::to_owned));
        match self {
            Lost::TimedOut(after) => EffectError::TimedOut { tool, key, after },
            Lost::Panicked(message) => EffectError::Panicked { tool, key, message },
        }
    }
}

impl Engine {
    /// An engine over `store` with default settings.
    pub fn new(store: impl Store) -> Self {
        Engine::with_config(store, EngineConfig::default())
    }

    /// An engine over `store` with `config`.
    pub fn with_config(store: impl Store, config: EngineConfig) -> Self {
        Engine {
            inner: Arc::new(Inner {
                store: Arc::new(store),
                config,
                inflight: Mutex::new(HashMap::default()),
            }),
        }
    }

    /// The journal.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.inner.store
    }

    /// The settings.
    pub fn config(&self) -> EngineConfig {
        self.inner.config
    }

    /// Bind this engine to one run: call tools without passing the run each time.
    pub fn run(&self, run: RunContext) -> RunHandle {
        RunHandle {
            engine: self.clone(),
            run,
        }
    }

    /// Call `tool` with `args` in `run`.
    pub async fn call<T: Tool>(
        &self,
        tool: &T,
        run: &RunContext,
        opts: CallOptions,
        args: T::Args,
    ) -> Result<T::Output, EffectError<T::Error>> {
        self.call_with_report(tool, run, opts, args).await.result
    }

    /// Call `tool` and report what happened (executed, replayed, shared, ...).
    pub async fn call_with_report<T: Tool>(
        &self,
        tool: &T,
        run: &RunContext,
        opts: CallOptions,
        args: T::Args,
    ) -> CallReport<T::Output, T::Error> {
        let span = tracing::info_span!(
            "effect_tool.call",
            tool = T::NAME,
            class = T::CLASS.as_str(),
            key = tracing::field::Empty,
            attempt = tracing::field::Empty,
            decision = tracing::field::Empty,
        );
        let work = async move {
            // A value the tool takes from the run is missing: nothing runs, nothing is claimed.
            if let Err(err) = crate::tool::check_values::<T>(run) {
                return CallReport {
                    result: Err(err),
                    disposition: Disposition::Failed,
                    key: None,
                };
            }
            let report = if T::CLASS == EffectClass::Pure {
                self.call_pure(tool, run, opts, args).await
            } else {
                self.call_journaled(tool, run, opts, args).await
            };
            tracing::Span::current().record("decision", report.disposition.as_str());
            report
        };
        if span.is_disabled() {
            work.await
        } else {
            work.instrument(span).await
        }
    }

    async fn call_pure<T: Tool>(
        &self,
        tool: &T,
        run: &RunContext,
        opts: CallOptions,
        args: T::Args,
    ) -> CallReport<T::Output, T::Error> {
        let report = |result, disposition| CallReport {
            result,
            disposition,
            key: None,
        };
        let mut ctx = EffectCtx {
            run: run.clone(),
            tool: T::NAME,
            class: T::CLASS,
            call_id: opts.call_id,
            key: None,
            attempt: 1,
        };
        for exec in 1.. {
            if run.cancellation().is_cancelled() {
                return report(
                    Err(EffectError::Cancelled {
                        tool: T::NAME.to_owned(),
                        key: None,
                    }),
                    Disposition::Failed,
                );
            }
            ctx.attempt = exec;
            tracing::Span::current().record("attempt", exec);
            let (outcome, result) = match execute(tool, &ctx, args.clone()).await {
                Exec::Done(Ok(out)) => return report(Ok(out), Disposition::Executed),
                Exec::Done(Err(e)) => (classify(&e), Err(e)),
                Exec::Lost(lost) => (Outcome::Failed(Failure::Unknown), Ok(lost)),
                Exec::Cancelled => {
                    return report(
                        Err(EffectError::Cancelled {
                            tool: T::NAME.to_owned(),
                            key: None,
                        }),
                        Disposition::Failed,
                    );
                }
            };
            match decide(policy_input::<T>(outcome, exec)) {
                Decision::Retry { after } => {
                    tracing::debug!(after_ms = after.as_millis() as u64, "retrying pure tool");
                    tokio::select! {
                        _ = tokio::time::sleep(after) => {}
                        _ = run.cancellation().cancelled() => {}
                    }
                }
                _ => {
                    let err = match result {
                        Err(e) => tool_error::<T>(None, outcome, e),
                        Ok(lost) => lost.into_error(T::NAME, None),
                    };
                    return report(Err(err), Disposition::Failed);
                }
            }
        }
        unreachable!("the retry loop only ends by returning")
    }

    async fn call_journaled<T: Tool>(
        &self,
        tool: &T,
        run: &RunContext,
        opts: CallOptions,
        args: T::Args,
    ) -> CallReport<T::Output, T::Error> {
        let key::CallIdentity {
            key,
            fingerprint,
            input,
            keyed,
        } = match key::identify(tool, run, &args) {
            Ok(identity) => identity,
            Err(e) => {
                let err = EffectError::InvalidArguments {
                    tool: T::NAME.to_owned(),
                    message: format!("arguments do not serialize: {e}"),
                };
                return CallReport {
                    result: Err(err),
                    disposition: Disposition::Failed,
                    key: None,
                };
            }
        };
        tracing::Span::current().record("key", key.as_str());

        let call = Call {
            tool,
            run,
            call_id: opts.call_id.clone(),
            key: &key,
            fingerprint: &fingerprint,
            keyed,
        };

        // A recorded result needs no claim: a read-only lookup first, so replays never take the
        // journal's write lock (unless the store's claim answers replays as cheaply).
        // Whether that lookup found no record at all: the first claim may then skip the store's
        // own read (`Store::claim_unseen`).
        let mut unseen = false;
        if !self.inner.store.claim_answers_replays() {
            match self.inner.store.lookup_recorded(&key).await {
                Ok(Some(rec))
                    if rec.state() == RecordState::Completed
                        && (rec.expires_at().is_none() || !rec.is_expired(self.inner.store.now())) =>
                {
                    let (result, disposition) = self.replay(&call, &rec);
                    return CallReport {
                        result,
                        disposition,
                        key: Some(key.clone()),
                    };
                }
                Ok(None) => unseen = true,
                _ => {}
            }
        }

        loop {
            match self.join(&key, &fingerprint, opts.call_id.as_deref()) {
                Role::Follower(slot) => {
                    // Whatever the leader did, the key has been seen since the lookup.
                    unseen = false;
                    let shared = slot.wait().await;
                    let leader_input = slot.fingerprint.clone();
                    let leader_call = slot.call_id.clone();
                    drop(slot);
                    // The leader ended without a result (cancelled or panicked): take its place.
                    let Some((result, _)) = shared else { continue };
                    // The leader's run was cancelled, not this one: take over (the journal says
                    // what is left to do: run, wait, or block on a record in doubt).
                    if matches!(
                        result,
                        Err(EffectError::Cancelled { .. } | EffectError::Interrupted { .. })
                    ) && !run.cancellation().is_cancelled()
                    {
                        continue;
                    }
                    // What a replay of the leader's record would check (DESIGN §4): a new tool-call
                    // id of an unkeyed irreversible tool, another input under a custom key.
                    if let Some((result, disposition)) =
                        reuse_refused(&call, &leader_input, leader_call.as_deref(), result.is_ok())
                    {
                        return CallReport {
                            result,
                            disposition,
                            key: Some(key.clone()),
                        };
                    }
                    let result = match result {
                        Ok(v) => decode_output::<T>(&key, v),
                        Err(e) => Err(from_shared::<T>(e, run)),
                    };
                    let disposition = if result.is_ok() {
                        Disposition::Shared
                    } else {
                        disposition_of(&result)
                    };
                    return CallReport {
                        result,
                        disposition,
                        key: Some(key.clone()),
                    };
                }
                Role::Leader(leader) => {
                    // Boxed: the claim-execute-record path is large; keeping it out of this future keeps
                    // replays (the common case) cheap to poll and move.
                    let (result, disposition) = Box::pin(self.lead(&call, input, args, unseen)).await;
                    leader.publish(|| {
                        let shared = match &result {
                            Ok(out) => serde_json::to_value(out).map_err(|e| EffectError::Codec {
                                tool: T::NAME.to_owned(),
                                key: key.clone(),
                                message: format!("output does not serialize: {e}"),
                            }),
                            Err(e) => Err(to_shared(e)),
                        };
                        (shared, disposition)
                    });
                    return CallReport {
                        result,
                        disposition,
                        key: Some(key.clone()),
                    };
                }
            }
        }
    }

    fn join<'a>(&'a self, key: &'a str, fingerprint: &str, call_id: Option<&str>) -> Role<'a> {
        let mut map = self.inner.inflight.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(slot) = map.get(key) {
            return Role::Follower(slot.clone());
        }
        let slot = Arc::new(Slot {
            state: Mutex::new(SlotState::Running),
            notify: Notify::new(),
            fingerprint: fingerprint.to_owned(),
            call_id: call_id.map(str::to_owned),
        });
        map.insert(key.to_owned(), slot.clone());
        Role::Leader(Leader {
            engine: &self.inner,
            key,
            slot,
            finished: false,
        })
    }

    async fn lead<T: Tool>(
        &self,
        call: &Call<'_, T>,
        input: Value,
        args: T::Args,
        unseen: bool,
    ) -> (Result<T::Output, EffectError<T::Error>>, Disposition) {
        let store = &self.inner.store;
        let key = call.key;
        let mut approval = if call.tool.needs_approval(&args) {
            T::APPROVAL
        } else {
            None
        };
        // The first claim takes the redacted input; a re-claim (after a retry) encodes it again
        // rather than every call paying for a copy.
        let mut first_input = Some(input);
        let make_intent = |approval: Option<&str>, input: Value| Intent {
            tool: T::NAME.to_owned(),
            class: T::CLASS,
            run_id: call.run.run_id().to_owned(),
            thread_id: call.run.thread_id().map(str::to_owned),
            call_id: call.call_id.clone(),
            fingerprint: call.fingerprint.to_owned(),
            input,
            ttl_ms: T::TTL.map(|d| d.as_millis() as u64),
            approval: approval.map(str::to_owned),
        };
        let takeover_in_doubt = T::HAS_RECOVER || T::CLASS == EffectClass::Idempotent;
        let lease_ms = self.inner.config.lease.as_millis() as u64;
        let mut exec = 0u32;
        let mut poll = self.inner.config.poll_interval;

        loop {
            if call.run.cancellation().is_cancelled() {
                return (
                    Err(EffectError::Cancelled {
                        tool: T::NAME.to_owned(),
                        key: Some(key.to_owned()),
                    }),
                    Disposition::Failed,
                );
            }
            let first = first_input.is_some();
            let input = match first_input.take() {
                Some(input) => input,
                None => match serde_json::to_value(&args) {
                    Ok(v) => key::redact(v, T::SENSITIVE),
                    Err(e) => {
                        let message = format!("arguments do not serialize: {e}");
                        return (
                            Err(EffectError::InvalidArguments {
                                tool: T::NAME.to_owned(),
                                message,
                            }),
                            Disposition::Failed,
                        );
                    }
                },
            };
            let claim = Op::Claim {
                intent: make_intent(approval, input),
                lease_ms,
                takeover_in_doubt,
            };
            let claimed = if first && unseen {
                store.claim_unseen(key, claim).await
            } else {
                store.apply(key, claim).await
            };
            let outcome = match claimed {
                Ok(o) => o,
                Err(e) => return (Err(store_error::<T>(e)), Disposition::Failed),
            };
            let (attempt, previous) = match outcome {
                OpOutcome::Recorded(rec) => return self.replay(call, &Recorded::from(rec)),
                OpOutcome::InFlight(rec) => {
                    // Another process holds a live claim: wait, then look again.
                    let until_expiry = rec.lease_until.map(|l| (l - store.now()).max(1) as u64).unwrap_or(1);
                    tokio::select! {
                        _ = tokio::time::sleep(poll.min(Duration::from_millis(until_expiry))) => {}
                        _ = call.run.cancellation().cancelled() => {}
                    }
                    poll = (poll * 2).min(Duration::from_millis(500));
                    continue;
                }
                OpOutcome::InDoubt(_) => return blocked(call, BlockReason::AwaitingResolution),
                OpOutcome::AwaitingApproval(rec) => {
                    let pending = ApprovalPending {
                        key: key.to_owned(),
                        tool: T::NAME.to_owned(),
                        run_id: call.run.run_id().to_owned(),
                        role: rec.approval_role.unwrap_or_default(),
                    };
                    return (
                        Err(EffectError::ApprovalPending(pending)),
                        Disposition::AwaitingApproval,
                    );
                }
                OpOutcome::Denied(rec) => {
                    let err = EffectError::Denied {
                        tool: T::NAME.to_owned(),
                        key: key.to_owned(),
                        by: rec.decided_by.unwrap_or_else(|| "a person".to_owned()),
                        reason: rec.reason,
                    };
                    return (Err(err), Disposition::Failed);
                }
                OpOutcome::Compensated(_) => {
                    return (
                        Err(EffectError::Compensated {
                            tool: T::NAME.to_owned(),
                            key: key.to_owned(),
                        }),
                        Disposition::Failed,
                    );
                }
                OpOutcome::Claimed {
                    attempt,
                    previous,
                    before,
                } => {
                    // A person approved this call: its retries within this call (after a
                    // transient failure, or a recover that found nothing) need no new approval.
                    if before.is_some_and(|b| b.state == RecordState::Approved) {
                        approval = None;
                    }
                    (attempt, previous)
                }
                OpOutcome::Done(_) => {
                    let e = StoreError::Backend("claim answered with a non-claim outcome".to_owned());
                    return (Err(store_error::<T>(e)), Disposition::Failed);
                }
            };
            tracing::Span::current().record("attempt", attempt);
            let ctx = EffectCtx {
                run: call.run.clone(),
                tool: T::NAME,
                class: T::CLASS,
                call_id: call.call_id.clone(),
                key: Some(key.to_owned()),
                attempt,
            };

            // An earlier attempt's outcome is unknown: reconcile before anything else.
            if let Some(previous) = previous {
                tracing::info!(?previous, "taking over a claim whose outcome is unknown");
                if T::HAS_RECOVER {
                    match self.recover_leased(call.tool, &ctx, &args).await {
                        Ok(Ok(Some(out))) => {
                            return self.record(call, attempt, out, Disposition::Reconciled).await;
                        }
                        Ok(Ok(None)) => {
                            // Recover ran under the lease, but a lease can still be lost (a paused
                            // process, a store that could not renew): only run while the claim is
                            // ours, else look again at what the newer attempt did.
                            if let Err(e) = store.renew(key, attempt, lease_ms).await {
                                tracing::warn!(error = %e, "lost the claim while reconciling; not running");
                                if matches!(e, StoreError::Rejected(_)) {
                                    continue;
                                }
                                return (Err(store_error::<T>(e)), Disposition::Failed);
                            }
                        }
                        Ok(Err(e)) => {
                            let reason = format!("recover failed: {e}");
                            let _ = store.mark_in_doubt(key, attempt, reason).await;
                            return (Err(tool_error::<T>(Some(key), classify(&e), e)), Disposition::Failed);
                        }
                        Err(lost) => {
                            let reason = format!("recover {}", lost.reason());
                            let _ = store.mark_in_doubt(key, attempt, reason).await;
                            return (Err(lost.into_error(T::NAME, Some(key))), Disposition::Failed);
                        }
                    }
                } else if T::CLASS != EffectClass::Idempotent {
                    let reason = BlockReason::InDoubtAfterCrash;
                    let _ = store.mark_in_doubt(key, attempt, reason.to_string()).await;
                    return blocked(call, reason);
                }
            }

            // Cancelled while claiming or reconciling: the tool has not started, so it must not.
            if call.run.cancellation().is_cancelled() {
                let reason = "the run was cancelled before the tool started".to_owned();
                let _ = if previous.is_some() && !T::HAS_RECOVER {
                    // Taken over from an unknown outcome that nothing checked: still unknown.
                    store.mark_in_doubt(key, attempt, reason).await
                } else {
                    store.release(key, attempt, Some(reason)).await
                };
                let err = EffectError::Cancelled {
                    tool: T::NAME.to_owned(),
                    key: Some(key.to_owned()),
                };
                return (Err(err), Disposition::Failed);
            }

            exec += 1;
            let result = self.execute_leased(call.tool, &ctx, args.clone()).await;
            let (outcome, failure) = match result {
                Exec::Done(Ok(out)) => return self.record(call, attempt, out, Disposition::Executed).await,
                Exec::Done(Err(e)) => (classify(&e), Err(e)),
                Exec::Lost(lost) => (Outcome::Failed(Failure::Unknown), Ok(lost)),
                Exec::Cancelled => {
                    let _ = store
                        .mark_in_doubt(
                            key,
                            attempt,
                            "cancelled while running: the outcome is unknown".to_owned(),
                        )
                        .await;
                    let err = EffectError::Interrupted {
                        tool: T::NAME.to_owned(),
                        key: key.to_owned(),
                    };
                    return (Err(err), Disposition::Failed);
                }
            };
            let reason = match &failure {
                Err(e) => e.to_string(),
                Ok(lost) => lost.reason(),
            };
            let as_error = |failure: Result<Lost, T::Error>| match failure {
                Err(e) => tool_error::<T>(Some(key), outcome, e),
                Ok(lost) => lost.into_error(T::NAME, Some(key)),
            };
            let decision = decide(policy_input::<T>(outcome, exec));
            tracing::debug!(?decision, %reason, "tool failed");
            match decision {
                Decision::Retry { after } => {
                    if let Err(e) = store.release(key, attempt, Some(reason)).await {
                        tracing::warn!(error = %e, "could not release the claim before retrying");
                    }
                    // A cancelled run does not wait out the backoff (the loop then stops).
                    tokio::select! {
                        _ = tokio::time::sleep(after) => {}
                        _ = call.run.cancellation().cancelled() => {}
                    }
                }
                Decision::Reconcile => {
                    match self.recover_leased(call.tool, &ctx, &args).await {
                        Ok(Ok(Some(out))) => {
                            return self.record(call, attempt, out, Disposition::Reconciled).await;
                        }
                        Ok(Ok(None)) if exec < T::RETRY.max_attempts => {
                            // The effect did not land: safe to try again.
                            let _ = store.release(key, attempt, Some(reason)).await;
                            continue;
                        }
                        Ok(Ok(None)) => {
                            let _ = store.release(key, attempt, Some(reason)).await;
                            return (Err(as_error(failure)), Disposition::Failed);
                        }
                        Ok(Err(e)) => tracing::warn!(error = %e, "recover failed after an unknown outcome"),
                        Err(lost) => tracing::warn!(reason = %lost.reason(), "recover failed after an unknown outcome"),
                    }
                    let _ = store.mark_in_doubt(key, attempt, reason).await;
                    return blocked(call, BlockReason::UnknownOutcome);
                }
                Decision::Block => {
                    let _ = store.mark_in_doubt(key, attempt, reason).await;
                    return blocked(call, BlockReason::UnknownOutcome);
                }
                Decision::FailInDoubt => {
                    let _ = store.mark_in_doubt(key, attempt, reason).await;
                    return (Err(as_error(failure)), Disposition::Failed);
                }
                Decision::Fail | Decision::Complete | Decision::Compensate => {
                    let _ = store.release(key, attempt, Some(reason)).await;
                    return (Err(as_error(failure)), Disposition::Failed);
                }
            }
        }
    }

    /// Execute with the tool's timeout, the run's cancellation, and lease renewal.
    async fn execute_leased<T: Tool>(&self, tool: &T, ctx: &EffectCtx, args: T::Args) -> Exec<T::Output, T::Error> {
        self.leased(ctx, execute(tool, ctx, args)).await
    }

    /// Ask the tool's `recover` hook while holding the claim (its lease renewed, like an
    /// execution), within the tool's timeout; a panic is an answer nobody can trust (`Err`).
    async fn recover_leased<T: Tool>(
        &self,
        tool: &T,
        ctx: &EffectCtx,
        args: &T::Args,
    ) -> Result<Result<Option<T::Output>, T::Error>, Lost> {
        use futures::FutureExt;
        let asked = std::panic::AssertUnwindSafe(tool.recover(ctx, args)).catch_unwind();
        let asked = async {
            let answer = match T::TIMEOUT {
                Some(limit) => match tokio::time::timeout(limit, asked).await {
                    Ok(answer) => answer,
                    Err(_) => return Err(Lost::TimedOut(limit)),
                },
                None => asked.await,
            };
            answer.map_err(|panic| Lost::Panicked(panic_message(panic.as_ref())))
        };
        self.leased(ctx, asked).await
    }

    /// Drive `work` while renewing the lease of the claim `ctx` holds.
    pub(crate) async fn leased<F: std::future::Future>(&self, ctx: &EffectCtx, work: F) -> F::Output {
        let mut run = std::pin::pin!(work);
        // Most work that finishes at once needs no lease renewal (nor its timer).
        if let std::task::Poll::Ready(r) = futures::poll!(run.as_mut()) {
            return r;
        }
        let key = ctx.key.clone().unwrap_or_default();
        let lease = self.inner.config.lease;
        let store = self.inner.store.clone();
        let attempt = ctx.attempt;
        let renew = async move {
            loop {
                tokio::time::sleep(lease / 3).await;
                if let Err(e) = store.renew(&key, attempt, lease.as_millis() as u64).await {
                    tracing::warn!(error = %e, "could not renew the claim's lease");
                }
            }
        };
        tokio::select! {
            r = run => r,
            _ = renew => unreachable!("lease renewal loops until the execution ends"),
        }
    }

    fn replay<T: Tool>(
        &self,
        call: &Call<'_, T>,
        rec: &Recorded,
    ) -> (Result<T::Output, EffectError<T::Error>>, Disposition) {
        if let Some(refused) = reuse_refused(call, rec.fingerprint(), rec.call_id(), true) {
            return refused;
        }
        let Some(output) = rec.output() else {
            let e = StoreError::Corrupt {
                key: call.key.to_owned(),
                message: "completed without an output".to_owned(),
            };
            return (Err(store_error::<T>(e)), Disposition::Failed);
        };
        let decoded = <T::Output as serde::Deserialize>::deserialize(output).map_err(|e| codec_error::<T>(call.key, e));
        (decoded, Disposition::Replayed)
    }

    async fn record<T: Tool>(
        &self,
        call: &Call<'_, T>,
        attempt: u32,
        out: T::Output,
        disposition: Disposition,
    ) -> (Result<T::Output, EffectError<T::Error>>, Disposition) {
        match serde_json::to_value(&out) {
            Ok(value) => {
                // `apply`, not `complete`: the written record is not needed back (no copy of it).
                if let Err(e) = self
                    .inner
                    .store
                    .apply(call.key, Op::Complete { attempt, output: value })
                    .await
                {
                    // The effect happened: the call succeeds. The claim left behind makes the
                    // next attempt reconcile.
                    tracing::warn!(error = %e, key = call.key, "effect applied but its record failed; the next attempt will reconcile");
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, key = call.key, "effect applied but its output does not serialize; marking it in doubt");
                let _ = self
                    .inner
                    .store
                    .mark_in_doubt(call.key, attempt, format!("output does not serialize: {e}"))
                    .await;
            }
        }
        (Ok(out), disposition)
    }
}

/// How a call ended: its result and what happened to it.
type Settled<O, E> = (Result<O, EffectError<E>>, Disposition);

/// Whether a result made for another call (recorded, or being made by an identical call
/// running in this process) may not be given to `call`: an unkeyed irreversible tool under a
/// new tool-call id is blocked as an identical re-plan, and (when `check_input`) another input
/// under the same key fails with `InputMismatch` for `STRICT_INPUT` tools and is logged for
/// others. `None`: the result may be reused.
fn reuse_refused<T: Tool, O>(
    call: &Call<'_, T>,
    fingerprint: &str,
    call_id: Option<&str>,
    check_input: bool,
) -> Option<Settled<O, T::Error>> {
    if check_input && fingerprint != call.fingerprint {
        if T::STRICT_INPUT {
            let err = EffectError::InputMismatch {
                tool: T::NAME.to_owned(),
                key: call.key.to_owned(),
                recorded: fingerprint.to_owned(),
                given: call.fingerprint.to_owned(),
            };
            return Some((Err(err), Disposition::Failed));
        }
        tracing::warn!(
            recorded = %fingerprint,
            given = %call.fingerprint,
            "key is recorded under a different input; returning its result"
        );
    }
    let new_call = matches!((call.call_id.as_deref(), call_id), (Some(a), Some(b)) if a != b);
    if T::CLASS == EffectClass::Irreversible && !call.keyed && new_call {
        return Some(blocked(call, BlockReason::IdenticalReplan));
    }
    None
}

struct Call<'a, T> {
    tool: &'a T,
    run: &'a RunContext,
    call_id: Option<String>,
    key: &'a str,
    fingerprint: &'a str,
    keyed: bool,
}

/// An engine bound to one run: call tools without passing the run each time.
#[derive(Debug, Clone)]
pub struct RunHandle {
    engine: Engine,
    run: RunContext,
}

impl RunHandle {
    /// The run.
    pub fn context(&self) -> &RunContext {
        &self.run
    }

    /// The engine.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Call `tool` in this run.
    pub async fn call<T: Tool>(&self, tool: &T, args: T::Args) -> Result<T::Output, EffectError<T::Error>> {
        self.engine.call(tool, &self.run, CallOptions::default(), args).await
    }

    /// Call `tool` in this run as the model's tool call `call_id`.
    pub async fn call_as<T: Tool>(
        &self,
        tool: &T,
        call_id: &str,
        args: T::Args,
    ) -> Result<T::Output, EffectError<T::Error>> {
        self.engine
            .call(tool, &self.run, CallOptions::call_id(call_id), args)
            .await
    }

    /// Call `tool` and report what happened.
    pub async fn call_with_report<T: Tool>(
        &self,
        tool: &T,
        opts: CallOptions,
        args: T::Args,
    ) -> CallReport<T::Output, T::Error> {
        self.engine.call_with_report(tool, &self.run, opts, args).await
    }
}

async fn execute<T: Tool>(tool: &T, ctx: &EffectCtx, args: T::Args) -> Exec<T::Output, T::Error> {
    use futures::FutureExt;
    // A panicking tool is an execution that ended without an answer: its effect may have
    // happened, so the policy treats it as an unknown outcome and the claim is never left
    // behind for others to wait on.
    let run = std::panic::AssertUnwindSafe(tool.call(ctx, args)).catch_unwind();
    let timed = async {
        let result = match T::TIMEOUT {
            Some(limit) => match tokio::time::timeout(limit, run).await {
                Ok(r) => r,
                Err(_) => return Exec::Lost(Lost::TimedOut(limit)),
            },
            None => run.await,
        };
        match result {
            Ok(r) => Exec::Done(r),
            Err(panic) => Exec::Lost(Lost::Panicked(panic_message(panic.as_ref()))),
        }
    };
    tokio::select! {
        biased;
        r = timed => r,
        _ = ctx.cancellation().cancelled() => Exec::Cancelled,
    }
}

pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    match (panic.downcast_ref::<&str>(), panic.downcast_ref::<String>()) {
        (Some(s), _) => (*s).to_owned(),
        (_, Some(s)) => s.clone(),
        _ => "a non-string panic payload".to_owned(),
    }
}

fn classify<E: ClassifyError>(e: &E) -> Outcome {
    match e.failure() {
        Some(f) => Outcome::Failed(f),
        None => Outcome::Unclassified,
    }
}

fn policy_input<T: Tool>(outcome: Outcome, exec: u32) -> PolicyInput {
    PolicyInput {
        class: T::CLASS,
        outcome,
        attempt: exec,
        retry: T::RETRY,
        has_recover: T::HAS_RECOVER,
        abandoned: false,
        jitter: fastrand::f64(),
    }
}

fn tool_error<T: Tool>(key: Option<&str>, outcome: Outcome, error: T::Error) -> EffectError<T::Error> {
    EffectError::Tool {
        tool: T::NAME.to_owned(),
        key: key.map(str::to_owned),
        failure: outcome.effective_failure().unwrap_or(Failure::Unknown),
        error,
    }
}

fn store_error<T: Tool>(source: StoreError) -> EffectError<T::Error> {
    EffectError::Store {
        tool: T::NAME.to_owned(),
        source,
    }
}

fn blocked<T: Tool, O>(call: &Call<'_, T>, reason: BlockReason) -> (Result<O, EffectError<T::Error>>, Disposition) {
    let err = SideEffectRetryBlocked {
        key: call.key.to_owned(),
        tool: T::NAME.to_owned(),
        run_id: call.run.run_id().to_owned(),
        reason,
    };
    tracing::warn!(%err, "blocked");
    (Err(EffectError::Blocked(err)), Disposition::Blocked)
}

fn decode_output<T: Tool>(key: &str, v: Value) -> Result<T::Output, EffectError<T::Error>> {
    serde_json::from_value(v).map_err(|e| codec_error::<T>(key, e))
}

fn codec_error<T: Tool>(key: &str, e: serde_json::Error) -> EffectError<T::Error> {
    EffectError::Codec {
        tool: T::NAME.to_owned(),
        key: key.to_owned(),
        message: output_mismatch(key, &e),
    }
}

/// What to say when the output recorded under `key` does not decode as the tool's output type:
/// how a person corrects a resolution of the wrong shape, and what else may have changed.
pub(crate) fn output_mismatch(key: &str, e: &serde_json::Error) -> String {
    format!(
        "the recorded output does not decode as this tool's output type: {e}. If a person resolved it with an output of the wrong shape (or as applied by mistake), correct it with {} (`StoreExt::amend` in code; `effect-tool show` shows the record); if the output type changed since it was recorded, use a new key or window",
        crate::record::resolve_commands(key, true)
    )
}

fn to_shared<E: std::fmt::Display>(e: &EffectError<E>) -> EffectError<String> {
    use EffectError::*;
    match e {
        Tool {
            tool,
            key,
            failure,
            error,
        } => Tool {
            tool: tool.clone(),
            key: key.clone(),
            failure: *failure,
            error: error.to_string(),
        },
        Blocked(b) => Blocked(b.clone()),
        ApprovalPending(a) => ApprovalPending(a.clone()),
        Denied { tool, key, by, reason } => Denied {
            tool: tool.clone(),
            key: key.clone(),
            by: by.clone(),
            reason: reason.clone(),
        },
        InvalidArguments { tool, message } => InvalidArguments {
            tool: tool.clone(),
            message: message.clone(),
        },
        MissingValue { tool, type_name } => MissingValue {
            tool: tool.clone(),
            type_name: type_name.clone(),
        },
        InputMismatch {
            tool,
            key,
            recorded,
            given,
        } => InputMismatch {
            tool: tool.clone(),
            key: key.clone(),
            recorded: recorded.clone(),
            given: given.clone(),
        },
        Compensated { tool, key } => Compensated {
            tool: tool.clone(),
            key: key.clone(),
        },
        Cancelled { tool, key } => Cancelled {
            tool: tool.clone(),
            key: key.clone(),
        },
        Interrupted { tool, key } => Interrupted {
            tool: tool.clone(),
            key: key.clone(),
        },
        Panicked { tool, key, message } => Panicked {
            tool: tool.clone(),
            key: key.clone(),
            message: message.clone(),
        },
        TimedOut { tool, key, after } => TimedOut {
            tool: tool.clone(),
            key: key.clone(),
            after: *after,
        },
        Store { tool, source } => Store {
            tool: tool.clone(),
            source: source.clone(),
        },
        Codec { tool, key, message } => Codec {
            tool: tool.clone(),
            key: key.clone(),
            message: message.clone(),
        },
        SharedFailure {
            tool,
            key,
            failure,
            message,
        } => SharedFailure {
            tool: tool.clone(),
            key: key.clone(),
            failure: *failure,
            message: message.clone(),
        },
    }
}

/// The leader's error as this follower's: tool errors become [`EffectError::SharedFailure`]
/// (the tool's own error type cannot be cloned), and the run named is the follower's own.
fn from_shared<T: Tool>(e: EffectError<String>, run: &RunContext) -> EffectError<T::Error> {
    let e = match e {
        EffectError::Blocked(b) => EffectError::Blocked(SideEffectRetryBlocked {
            run_id: run.run_id().to_owned(),
            ..b
        }),
        EffectError::ApprovalPending(a) => EffectError::ApprovalPending(ApprovalPending {
            run_id: run.run_id().to_owned(),
            ..a
        }),
        other => other,
    };
    match e {
        EffectError::Tool {
            tool,
            key,
            failure,
            error,
        } => EffectError::SharedFailure {
            tool,
            key: key.unwrap_or_default(),
            failure,
            message: error,
        },
        other => other.map_tool_error(|_| unreachable!("tool errors are mapped above")),
    }
}

fn disposition_of<O, E>(r: &Result<O, EffectError<E>>) -> Disposition {
    match r {
        Ok(_) => Disposition::Executed,
        Err(EffectError::Blocked(_)) => Disposition::Blocked,
        Err(EffectError::ApprovalPending(_)) => Disposition::AwaitingApproval,
        Err(_) => Disposition::Failed,
    }
}
