//! The call engine: what happens to every call of a tool.
//!
//! 1. Compute the key; look it up (a read-only lookup, or the claim itself where the store's
//!    claim answers replays as cheaply).
//! 2. Recorded → return it; nothing runs. A record of another tool under the key is refused
//!    ([`EffectError::KeyOfAnotherTool`]): a key names one effect of one tool.
//! 3. In flight → wait for it and share its result (in this process through a channel, across
//!    processes by polling the journal until the claim completes or its lease expires).
//! 4. Stale claim or in doubt (a crash between the effect and its record, a lapsed lease) →
//!    `recover` if declared; else `idempotent` re-runs with the same key;
//!    `compensable`/`irreversible` stop with [`SideEffectRetryBlocked`].
//! 5. Approval required → the call parks ([`ApprovalPending`]) until a person approves.
//! 6. Claim, execute, record (the stages of `engine/lead.rs`); the [`crate::decide::policy`] decides what a
//!    failure leads to. A record write the journal fails is retried for a while
//!    ([`Engine::with_store_retry`]).
//! 7. Fencing: only the attempt holding the claim can complete it. The engine also keeps each
//!    claim's lease on its own monotonic clock (`engine/lease.rs`): a tool is not started, and its
//!    future is not polled further, once its lease has lapsed, so a paused process does not
//!    act after another attempt took the key over.
//!
//! [`Engine::shutdown`] drains the engine: new calls are refused, calls that have not started
//! their tool release their claims, running tools get a deadline.

pub mod compensation;
pub mod dyn_tool;
mod lead;
mod observe;

pub use observe::{CallEvent, EVENT_BUFFER, EngineEvent, METRICS, MetricInfo, MetricKind, describe_metrics};
mod instrumented;
pub(crate) mod lease;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::call::context::{EffectCtx, RunContext};
use crate::call::error::{ApprovalPending, BlockReason, EffectError, SideEffectRetryBlocked, StoreError};
use crate::call::key;
use crate::call::tool::Tool;
use crate::decide::policy::{Decision, PolicyInput, decide};
use crate::decide::record::RecordState;
use crate::store::{Recorded, Store, StoreExt};
use crate::value::class::EffectClass;
use crate::value::outcome::{ClassifyError, Failure, Outcome};

/// Settings of an [`Engine`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineConfig {
    /// How long a claim is held before another attempt may take it over; renewed while the
    /// tool runs.
    pub lease: Duration,
    /// How often a call waiting for another process's claim looks at the journal again.
    pub poll_interval: Duration,
}

/// How long the engine retries a journal write it must not drop, unless
/// [`Engine::with_store_retry`] says otherwise.
pub const DEFAULT_STORE_RETRY: Duration = Duration::from_secs(30);

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            lease: Duration::from_secs(30),
            poll_interval: Duration::from_millis(25),
        }
    }
}

/// How [`Engine::shutdown`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Whether every call in flight finished before the deadline. `false`: the tools still
    /// running at the deadline were cancelled (their records are in doubt).
    pub drained: bool,
    /// How many calls were still in flight when the shutdown returned (0 unless a journal write
    /// of a cancelled call did not answer in time).
    pub left: usize,
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
    /// The call was refused before anything ran or was journaled: malformed or too large
    /// arguments, an unknown tool, arguments that do not fit the schema. The model can fix it.
    Rejected,
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
            Disposition::Rejected => "rejected",
        }
    }
}

impl std::fmt::Display for Disposition {
    /// The name of [`Disposition::as_str`], honouring width and alignment (`{:<10}`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
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
    /// `Some` when the result was made for another input under the same key (a custom key
    /// maps both calls to one effect): this call did not run, and the result returned is the
    /// recorded (or shared) call's, disposition [`Disposition::Replayed`] or
    /// [`Disposition::Shared`]. It holds the paths of the fields whose (redacted) values differ
    /// between the two inputs (`amount_cents`, `to.name`, `lines[2]`), never a value; empty
    /// when the journal could not say which. `None` for every other call.
    pub input_differs: Option<Vec<String>>,
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
    /// The leader's tool: a call of another tool under the same key never joins it.
    tool: &'static str,
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
    /// Fired when a shutdown starts: new calls are refused, unstarted ones stop.
    draining: CancellationToken,
    /// Fired at the shutdown's deadline: running tools are cancelled.
    abort: CancellationToken,
    /// Calls in flight (counted for the shutdown), and their last one's signal.
    active: AtomicUsize,
    idle: Notify,
    /// The marker secret: the application's ([`Engine::with_marker_secret`]), or the journal's
    /// ([`Store::marker_secret`]), loaded before the first journaled call.
    marker_secret: tokio::sync::OnceCell<Option<crate::value::marker::MarkerSecret>>,
    /// The tools whose output schema this engine has written to the journal
    /// ([`Store::put_output_schema`]), or that have none.
    output_schemas: Mutex<std::collections::HashSet<&'static str, foldhash::fast::RandomState>>,
    /// [`Engine::with_store_retry`], in milliseconds.
    store_retry_ms: std::sync::atomic::AtomicU64,
    /// Who this engine's claims say holds them ([`Engine::with_worker`], [`Engine::holder`]).
    holder: crate::decide::record::Holder,
    /// The decisions, for [`Engine::events`].
    events: observe::Events,
}

/// One call in flight, counted while it lives.
struct Active<'a>(&'a Inner);

impl Drop for Active<'_> {
    fn drop(&mut self) {
        if self.0.active.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

impl Inner {
    /// How long a journal write the engine must not drop is retried.
    fn store_retry(&self) -> Duration {
        Duration::from_millis(self.store_retry_ms.load(Ordering::Relaxed))
    }

    /// Count a new call in, unless the engine is shutting down.
    fn enter(&self) -> Option<Active<'_>> {
        self.active.fetch_add(1, Ordering::SeqCst);
        let active = Active(self);
        (!self.draining.is_cancelled()).then_some(active)
    }

    /// Wait until no call is in flight, or `until`; `true` if none is.
    async fn wait_idle(&self, until: tokio::time::Instant) -> bool {
        loop {
            let idle = self.idle.notified();
            let mut idle = std::pin::pin!(idle);
            idle.as_mut().enable();
            if self.active.load(Ordering::SeqCst) == 0 {
                return true;
            }
            tokio::select! {
                biased;
                _ = idle => {}
                _ = tokio::time::sleep_until(until) => return self.active.load(Ordering::SeqCst) == 0,
            }
        }
    }
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
    /// The run was cancelled, or the engine's shutdown deadline passed.
    Cancelled,
    /// The claim's lease lapsed: the tool was stopped (dropped) at an await point.
    Lapsed,
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

/// A new engine instance's holder: a random 128-bit instance id, the host and the pid.
fn new_holder() -> crate::decide::record::Holder {
    let mut bytes = [0u8; 16];
    if getrandom::fill(&mut bytes).is_err() {
        static COUNT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = COUNT.fetch_add(1, Ordering::Relaxed);
        bytes = fallback_instance(crate::decide::record::now_millis() as u64, n, std::process::id());
    }
    let instance = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown".to_owned());
    crate::decide::record::Holder {
        worker: None,
        instance,
        host,
        pid: std::process::id(),
    }
}

/// An instance id without OS randomness: the time, a per-process counter and the process id
/// (8, 4 and 4 bytes) still tell instances apart (of one process, and of processes started in
/// the same millisecond).
fn fallback_instance(millis: u64, count: u32, pid: u32) -> [u8; 16] {
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&millis.to_le_bytes());
    bytes[8..12].copy_from_slice(&count.to_le_bytes());
    bytes[12..].copy_from_slice(&pid.to_le_bytes());
    bytes
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
                store: Arc::new(instrumented::instrumented(Arc::new(store))),
                config,
                inflight: Mutex::new(HashMap::default()),
                draining: CancellationToken::new(),
                abort: CancellationToken::new(),
                active: AtomicUsize::new(0),
                idle: Notify::new(),
                marker_secret: tokio::sync::OnceCell::new(),
                output_schemas: Mutex::new(Default::default()),
                store_retry_ms: std::sync::atomic::AtomicU64::new(DEFAULT_STORE_RETRY.as_millis() as u64),
                holder: new_holder(),
                events: observe::Events::new(),
            }),
        }
    }

    /// Keep retrying (with backoff) a journal write the engine must not drop for at most
    /// `window` (default [`DEFAULT_STORE_RETRY`], 30 s): the record of an effect that happened
    /// (the claim's lease renewed meanwhile; the call returns once the result is recorded or
    /// this time has passed), and the release of a claim whose answer was lost before its tool
    /// ran. A journal outage shorter than this costs no person step. Applies to every clone of
    /// the engine.
    pub fn with_store_retry(self, window: Duration) -> Self {
        let ms = u64::try_from(window.as_millis()).unwrap_or(u64::MAX);
        self.inner.store_retry_ms.store(ms, Ordering::Relaxed);
        self
    }

    /// The window of [`Engine::with_store_retry`].
    pub fn store_retry(&self) -> Duration {
        self.inner.store_retry()
    }

    /// Give this engine a stable worker identity (e.g. a pod, host or service-instance name
    /// that a restart keeps). Its claims record it ([`crate::decide::record::Holder`]), and a claim
    /// this worker's previous incarnation left (the same worker, another engine instance) is
    /// taken over at once instead of after its lease: its `recover` and block rules apply to
    /// it as to any stale claim. Engines with another or no worker identity still wait for
    /// the lease.
    ///
    /// Give each identity to one running engine at a time: two live engines with the same
    /// worker identity take each other's claims over, as two attempts of a stale claim.
    ///
    /// # Panics
    ///
    /// When the engine has been cloned already: set it when building the engine.
    pub fn with_worker(mut self, worker: impl Into<String>) -> Self {
        let Some(inner) = Arc::get_mut(&mut self.inner) else {
            panic!(
                "Engine::with_worker was called on an engine that has been cloned: set the worker identity when building the engine, before cloning it"
            );
        };
        inner.holder.worker = Some(worker.into());
        self
    }

    /// Every decision of this engine (and its clones) from now on: each call's end, takeovers,
    /// lost claims, effects whose record failed. The integration point for notifications,
    /// consoles and alerting; see [`EngineEvent`]. A receiver more than [`EVENT_BUFFER`] events
    /// behind misses the oldest (`RecvError::Lagged`); with no receiver, no event is built.
    pub fn events(&self) -> tokio::sync::broadcast::Receiver<EngineEvent> {
        self.inner.events.subscribe()
    }

    /// Who this engine's claims say holds them: its worker identity ([`Engine::with_worker`]),
    /// its instance id (random per engine), host and process id.
    pub fn holder(&self) -> &crate::decide::record::Holder {
        &self.inner.holder
    }

    /// Sign markers ([`EffectCtx::marker`]) with `secret` instead of the journal's own
    /// ([`Store::marker_secret`]): for applications that keep their own secret, or a store
    /// that keeps none. Every process that checks these markers needs the same secret.
    ///
    /// # Panics
    ///
    /// When this engine (or a clone) has already loaded its secret: set it when building the
    /// engine, before the first call.
    pub fn with_marker_secret(mut self, secret: crate::value::marker::MarkerSecret) -> Self {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.marker_secret = tokio::sync::OnceCell::new_with(Some(Some(secret)));
        } else if self.inner.marker_secret.set(Some(secret)).is_err() {
            panic!(
                "Engine::with_marker_secret was called after the engine had loaded its marker secret: set it when building the engine, before the first call"
            );
        }
        self
    }

    /// Write `T`'s output schema ([`Tool::output_schema`]) to the journal, once per tool and
    /// engine, so that a person recording an output by hand is checked against it. A failed
    /// write is logged and tried again on the next call: the call itself goes on (its claim
    /// meets the same journal, and says so if it is down).
    async fn write_output_schema<T: Tool>(&self) {
        let written = |inner: &Inner| {
            inner
                .output_schemas
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(T::NAME)
        };
        if self
            .inner
            .output_schemas
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(T::NAME)
        {
            return;
        }
        let Some(schema) = T::output_schema() else {
            written(&self.inner);
            return;
        };
        match self.inner.store.put_output_schema(T::NAME, &schema).await {
            Ok(()) => {
                written(&self.inner);
            }
            Err(e) => {
                tracing::warn!(tool = T::NAME, error = %e, "could not write the tool's output schema to the journal; an output a person records by hand is not checked until it is")
            }
        }
    }

    /// The secret markers are signed with: the one given to [`Engine::with_marker_secret`],
    /// else the journal's ([`Store::marker_secret`], loaded once), `None` if it keeps none.
    /// For checking markers outside a tool ([`crate::value::marker::contains_marker`]).
    pub async fn marker_secret(&self) -> Result<Option<crate::value::marker::MarkerSecret>, StoreError> {
        self.inner
            .marker_secret
            .get_or_try_init(|| self.inner.store.marker_secret())
            .await
            .cloned()
    }

    /// The journal (the store given to [`Engine::new`], behind the engine's instrumentation:
    /// each operation through it is traced and timed like the engine's own).
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.inner.store
    }

    /// The settings.
    pub fn config(&self) -> EngineConfig {
        self.inner.config
    }

    /// Drain the engine for a shutdown (a SIGTERM, a rollout): new calls are refused with
    /// [`EffectError::ShuttingDown`]; calls whose tool has not started stop and release their
    /// claims; calls whose tool is running get until `deadline` to finish and record. A tool
    /// still running then is cancelled, as a cancelled run is (its record is in doubt until the
    /// next call reconciles it or a person resolves it).
    ///
    /// Returns once no call is in flight (after the deadline, at most
    /// [`Engine::with_store_retry`] more for the cancelled calls' journal writes). Applies to
    /// every clone of this engine; it cannot be undone (make a new engine).
    pub async fn shutdown(&self, deadline: Duration) -> ShutdownReport {
        let inner = &self.inner;
        inner.draining.cancel();
        tracing::info!(
            deadline_ms = deadline.as_millis() as u64,
            "shutting down: refusing new calls"
        );
        let now = tokio::time::Instant::now();
        let drained = inner.wait_idle(now + deadline).await;
        if !drained {
            tracing::warn!(
                calls = inner.active.load(Ordering::SeqCst),
                "shutdown deadline passed: cancelling the tools still running"
            );
            inner.abort.cancel();
            inner.wait_idle(tokio::time::Instant::now() + inner.store_retry()).await;
        }
        ShutdownReport {
            drained,
            left: inner.active.load(Ordering::SeqCst),
        }
    }

    /// Whether [`Engine::shutdown`] was called: new calls are refused.
    pub fn is_shutting_down(&self) -> bool {
        self.inner.draining.is_cancelled()
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
            "execute_tool",
            otel.name = %observe::OtelName(T::NAME),
            gen_ai.operation.name = "execute_tool",
            gen_ai.tool.name = T::NAME,
            gen_ai.tool.call.id = opts.call_id.as_deref(),
            gen_ai.tool.type = "function",
            gen_ai.agent.name = run.agent(),
            error.type = tracing::field::Empty,
            effect_tool.class = T::CLASS.as_str(),
            effect_tool.key = tracing::field::Empty,
            effect_tool.attempt = tracing::field::Empty,
            effect_tool.disposition = tracing::field::Empty,
            effect_tool.store = self.inner.store.backend_name(),
        );
        let started = std::time::Instant::now();
        let call_id = opts.call_id.clone();
        let work = async move {
            let Some(_active) = self.inner.enter() else {
                let err = EffectError::ShuttingDown {
                    tool: T::NAME.to_owned(),
                    key: None,
                };
                return CallReport {
                    result: Err(err),
                    disposition: Disposition::Failed,
                    key: None,
                    input_differs: None,
                };
            };
            // A value the tool takes from the run is missing: nothing runs, nothing is claimed.
            if let Err(err) = crate::call::tool::check_values::<T>(run) {
                return CallReport {
                    result: Err(err),
                    disposition: Disposition::Failed,
                    key: None,
                    input_differs: None,
                };
            }
            let report = if T::CLASS == EffectClass::Pure {
                self.call_pure(tool, run, opts, args).await
            } else {
                self.call_journaled(tool, run, opts, args).await
            };
            observe::call_ended(
                &self.inner.events,
                T::NAME,
                T::CLASS,
                report.disposition,
                report.result.as_ref().err().map(EffectError::kind),
                started.elapsed(),
                || (run.run_id().to_owned(), call_id, report.key.clone()),
            );
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
            input_differs: None,
        };
        let mut ctx = EffectCtx::new(run.clone(), T::NAME, T::CLASS, opts.call_id, None, 1, None);
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
            tracing::Span::current().record("effect_tool.attempt", i64::from(exec));
            let (outcome, result) = match execute(tool, &ctx, args.clone(), &self.inner.abort).await {
                Exec::Done(Ok(out)) => return report(Ok(out), Disposition::Executed),
                Exec::Done(Err(e)) => (classify(&e), Err(e)),
                Exec::Lost(lost) => (Outcome::Failed(Failure::Unknown), Ok(lost)),
                Exec::Cancelled | Exec::Lapsed => {
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
                    observe::tool_retried(T::NAME);
                    tracing::debug!(after_ms = after.as_millis() as u64, "retrying pure tool");
                    tokio::select! {
                        biased;
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
                    input_differs: None,
                };
            }
        };
        tracing::Span::current().record("effect_tool.key", key.as_str());
        // Loaded before anything is claimed: the tool's context carries it (its markers), and
        // the fingerprint binds sensitive values under it.
        let (fingerprint, input) = match self.marker_secret().await {
            Err(e) => {
                return CallReport {
                    result: Err(store_error::<T>(e)),
                    disposition: Disposition::Failed,
                    key: Some(key),
                    input_differs: None,
                };
            }
            Ok(secret) if !T::SENSITIVE.is_empty() => match key::identify_with(tool, run, &args, secret.as_ref()) {
                Ok(bound) => (bound.fingerprint, bound.input),
                Err(_) => (fingerprint, input),
            },
            Ok(_) => (fingerprint, input),
        };
        self.write_output_schema::<T>().await;

        let call = Call {
            tool,
            run,
            call_id: opts.call_id.clone(),
            key: &key,
            fingerprint: &fingerprint,
            keyed,
            input_differs: std::sync::OnceLock::new(),
        };

        let report = |(result, disposition): Settled<T::Output, T::Error>| CallReport {
            input_differs: call
                .input_differs
                .get()
                .filter(|_| result.is_ok() && matches!(disposition, Disposition::Replayed | Disposition::Shared))
                .cloned(),
            result,
            disposition,
            key: Some(key.clone()),
        };
        let mut unseen = match self.lookup(&call, &input).await {
            Ok(unseen) => unseen,
            Err(replayed) => return report(replayed),
        };
        loop {
            match self.join(&key, &fingerprint, opts.call_id.as_deref(), T::NAME) {
                Role::Follower(slot) => {
                    if slot.tool != T::NAME {
                        let err = key_of_another_tool::<T>(&key, slot.tool);
                        return report((Err(err), Disposition::Failed));
                    }
                    // Whatever the leader did, the key has been seen since the lookup.
                    unseen = false;
                    if let Some(shared) = self.follow(&call, slot, &input).await {
                        return report(shared);
                    }
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
                    return report((result, disposition));
                }
            }
        }
    }

    /// Step 1 and 2: a recorded result needs no claim. A read-only lookup first, so replays
    /// never take the journal's write lock (unless the store's claim answers replays as
    /// cheaply). `Err`: the replayed result. `Ok`: whether the lookup found no record at all
    /// (the first claim may then skip the store's own read, `Store::claim_unseen`).
    async fn lookup<T: Tool>(&self, call: &Call<'_, T>, input: &Value) -> Result<bool, Settled<T::Output, T::Error>> {
        let store = &self.inner.store;
        if store.claim_answers_replays() {
            return Ok(false);
        }
        match store.lookup_recorded(call.key).await {
            // Another tool's record: the claim would refuse it too (a backend that does not say
            // whose record it is leaves that to the claim).
            Ok(Some(rec)) if rec.tool() != Some(T::NAME) => match rec.tool() {
                // An expired record counts as absent for the claim (unless it waits for a person
                // or is claimed): the claim decides.
                Some(recorded_tool) if !rec.is_expired(store.now()) => Err((
                    Err(key_of_another_tool::<T>(call.key, recorded_tool)),
                    Disposition::Failed,
                )),
                _ => Ok(false),
            },
            Ok(Some(rec))
                if rec.state() == RecordState::Completed
                    && (rec.expires_at().is_none() || !rec.is_expired(store.now())) =>
            {
                let replayed = self.replay(call, &rec);
                if replayed.1 == Disposition::Replayed && rec.fingerprint() != call.fingerprint {
                    self.note_input_differs(call, rec.record().map(|r| &r.input), input)
                        .await;
                }
                Err(replayed)
            }
            Ok(None) => Ok(true),
            _ => Ok(false),
        }
    }

    /// Step 3 in this process: wait for the identical call leading `call`'s key and share its
    /// result. `None`: take the leader's place instead (it ended without a result, its run was
    /// cancelled, or it lost its claim: the journal says what is left to do).
    async fn follow<T: Tool>(
        &self,
        call: &Call<'_, T>,
        slot: Arc<Slot>,
        input: &Value,
    ) -> Option<Settled<T::Output, T::Error>> {
        let shared = slot.wait().await;
        let leader_input = slot.fingerprint.clone();
        let leader_call = slot.call_id.clone();
        drop(slot);
        let (result, _) = shared?;
        if matches!(
            result,
            Err(EffectError::Cancelled { .. } | EffectError::Interrupted { .. } | EffectError::ClaimLost { .. })
        ) && !call.run.cancellation().is_cancelled()
        {
            return None;
        }
        // What a replay of the leader's record would check: a new tool-call id of an unkeyed
        // irreversible tool, another input under a custom key.
        if let Some(refused) = reuse_refused(call, &leader_input, leader_call.as_deref(), result.is_ok()) {
            return Some(refused);
        }
        let result = match result {
            Ok(v) => decode_output::<T>(call.key, v),
            Err(e) => Err(from_shared::<T>(e, call.run)),
        };
        if result.is_ok() && leader_input != call.fingerprint {
            // The leader has recorded its result by now: the journal holds its input.
            self.note_input_differs(call, None, input).await;
        }
        let disposition = if result.is_ok() {
            Disposition::Shared
        } else {
            disposition_of(&result)
        };
        Some((result, disposition))
    }

    fn join<'a>(&'a self, key: &'a str, fingerprint: &str, call_id: Option<&str>, tool: &'static str) -> Role<'a> {
        let mut map = self.inner.inflight.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(slot) = map.get(key) {
            return Role::Follower(slot.clone());
        }
        let slot = Arc::new(Slot {
            state: Mutex::new(SlotState::Running),
            notify: Notify::new(),
            fingerprint: fingerprint.to_owned(),
            call_id: call_id.map(str::to_owned),
            tool,
        });
        map.insert(key.to_owned(), slot.clone());
        Role::Leader(Leader {
            engine: &self.inner,
            key,
            slot,
            finished: false,
        })
    }

    /// Drive `work` while renewing the lease of the claim `ctx` holds (compensations; calls run
    /// under a guarded lease instead, see `engine/lead.rs`).
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
            biased;
            r = run => r,
            _ = renew => unreachable!("lease renewal loops until the execution ends"),
        }
    }

    /// Keep on `call` which fields of its (redacted) `given` input differ from the recorded
    /// call's, whose result it gets: `recorded` when the caller has the record's input at hand,
    /// else read from the journal (only a replay whose input differs pays for that read).
    async fn note_input_differs<T: Tool>(&self, call: &Call<'_, T>, recorded: Option<&Value>, given: &Value) {
        let fetched;
        let recorded = match recorded {
            Some(input) => Some(input),
            None => {
                fetched = self.inner.store.lookup(call.key).await.ok().flatten();
                fetched.as_deref().map(|rec| &rec.input)
            }
        };
        let mut fields = Vec::new();
        if let Some(recorded) = recorded {
            differing_fields(&mut String::new(), recorded, given, &mut fields);
        }
        tracing::info!(
            ?fields,
            "returning a result recorded under the same key for another input"
        );
        let _ = call.input_differs.set(fields);
    }

    fn replay<T: Tool>(
        &self,
        call: &Call<'_, T>,
        rec: &Recorded,
    ) -> (Result<T::Output, EffectError<T::Error>>, Disposition) {
        // Any tool call that received the recorded result replays it (not only the last one).
        let recorded_call = match call.call_id.as_deref() {
            Some(id) if rec.received_by(id) => Some(id),
            _ => rec.call_id(),
        };
        if let Some(refused) = reuse_refused(call, rec.fingerprint(), recorded_call, true) {
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
    /// Set when the call gets a result made for another input ([`CallReport::input_differs`]).
    input_differs: std::sync::OnceLock<Vec<String>>,
}

/// The paths (`a.b`, `lines[2]`) under `path` where `recorded` and `given` differ, in key
/// order: a field one side lacks, a value that differs, an array of another length. Never a
/// value.
fn differing_fields(path: &mut String, recorded: &Value, given: &Value, out: &mut Vec<String>) {
    match (recorded, given) {
        (Value::Object(a), Value::Object(b)) => {
            let names: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for name in names {
                let len = path.len();
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(name);
                match (a.get(name), b.get(name)) {
                    (Some(x), Some(y)) => differing_fields(path, x, y, out),
                    _ => out.push(path.clone()),
                }
                path.truncate(len);
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                differing_fields(path, x, y, out);
                path.truncate(len);
            }
        }
        _ if recorded == given => {}
        _ if path.is_empty() => out.push("arguments".to_owned()),
        _ => out.push(path.clone()),
    }
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

    /// Wait until a person approves or denies the call parked under `key` (the key of its
    /// [`ApprovalPending`]), or `timeout` passes, without calling the
    /// tool again. Then call it again: an approved call runs (once), a denied one fails with the
    /// reason. Reads the journal with backoff (20 ms, doubling, at most 1 s), and at once when a
    /// decision goes through the same [`MemoryStore`](crate::MemoryStore), or through any
    /// PostgreSQL store on the journal, in any process (`NOTIFY`; not behind a pooler in
    /// transaction mode) ([`Store::changed`]). Cancel it by dropping the future (e.g. in a `tokio::select!`).
    pub async fn wait_for_approval(
        &self,
        key: &str,
        timeout: Duration,
    ) -> Result<crate::store::approval::ApprovalAnswer, StoreError> {
        crate::store::approval::wait_for_approval(self.engine.store(), key, timeout).await
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

async fn execute<T: Tool>(
    tool: &T,
    ctx: &EffectCtx,
    args: T::Args,
    abort: &CancellationToken,
) -> Exec<T::Output, T::Error> {
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
        _ = abort.cancelled() => Exec::Cancelled,
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

/// `key` holds a record (or a running call) of `recorded_tool`, not of `T`.
fn key_of_another_tool<T: Tool>(key: &str, recorded_tool: &str) -> EffectError<T::Error> {
    tracing::warn!(key, recorded_tool, "the key holds a record of another tool");
    EffectError::KeyOfAnotherTool {
        tool: T::NAME.to_owned(),
        key: key.to_owned(),
        recorded_tool: recorded_tool.to_owned(),
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

/// A recorded output that does not decode as `T`'s output type. The error is for people (its
/// message says how a person corrects the record, as `Blocked`'s does); the model reads the
/// dispatcher's own text for it (`ToolResult::content`), never this message. Logged too, for the
/// operator who watches the logs rather than the calls.
fn codec_error<T: Tool>(key: &str, e: serde_json::Error) -> EffectError<T::Error> {
    let message = output_mismatch(key, &e);
    tracing::error!(tool = T::NAME, key, fix = %message, "a recorded output does not decode as the tool's output type");
    EffectError::Codec {
        tool: T::NAME.to_owned(),
        key: key.to_owned(),
        message,
    }
}

/// What to say when the output recorded under `key` does not decode as the tool's output type:
/// how a person corrects a resolution of the wrong shape, and what else may have changed.
pub(crate) fn output_mismatch(key: &str, e: &serde_json::Error) -> String {
    format!(
        "the recorded output does not decode as this tool's output type: {e}. If a person resolved it with an output of the wrong shape (or as applied by mistake), correct it with {} (`StoreExt::amend` in code; `effect-tool show` shows the record); if the output type changed since it was recorded, use a new key or window",
        crate::decide::record::resolve_commands(key, true)
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
        KeyOfAnotherTool {
            tool,
            key,
            recorded_tool,
        } => KeyOfAnotherTool {
            tool: tool.clone(),
            key: key.clone(),
            recorded_tool: recorded_tool.clone(),
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
        ClaimLost {
            tool,
            key,
            attempt,
            finished,
            current,
            recorded,
        } => ClaimLost {
            tool: tool.clone(),
            key: key.clone(),
            attempt: *attempt,
            finished: *finished,
            current: *current,
            recorded: recorded.clone(),
        },
        ShuttingDown { tool, key } => ShuttingDown {
            tool: tool.clone(),
            key: key.clone(),
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

#[cfg(test)]
mod tests {
    #[test]
    fn differing_fields_are_paths_never_values() {
        let recorded = serde_json::json!({"to": {"name": "ann", "mail": "a@x"}, "amount": 900, "lines": [1, 2], "tags": [1], "note": "x"});
        let given = serde_json::json!({"to": {"name": "ann", "mail": "b@x"}, "amount": 100, "lines": [1, 3], "tags": [1, 2], "extra": true});
        let mut out = Vec::new();
        super::differing_fields(&mut String::new(), &recorded, &given, &mut out);
        assert_eq!(out, ["amount", "extra", "lines[1]", "note", "tags", "to.mail"]);
        let mut same = Vec::new();
        super::differing_fields(&mut String::new(), &recorded, &recorded, &mut same);
        assert!(same.is_empty());
    }

    #[test]
    fn without_os_randomness_instances_differ_by_time_count_and_process() {
        let base = super::fallback_instance(1_700_000_000_000, 0, 4_242);
        assert_eq!(&base[..8], &1_700_000_000_000u64.to_le_bytes());
        for other in [
            super::fallback_instance(1_700_000_000_001, 0, 4_242),
            super::fallback_instance(1_700_000_000_000, 1, 4_242),
            super::fallback_instance(1_700_000_000_000, 0, 4_243),
        ] {
            assert_ne!(base, other);
        }
        // The count and the process id do not mix: each has its own four bytes.
        assert_eq!(&super::fallback_instance(0, 7, 9)[8..], &[7, 0, 0, 0, 9, 0, 0, 0]);
    }
}

#[cfg(test)]
mod disposition_display {
    use super::Disposition;

    #[test]
    fn width_and_alignment_are_honoured() {
        assert_eq!(format!("{:<10}|", Disposition::Executed), "executed  |");
        assert_eq!(format!("{:>10}|", Disposition::Replayed), "  replayed|");
        assert_eq!(format!("{:.4}|", Disposition::Replayed), "repl|");
        assert_eq!(Disposition::Executed.to_string(), Disposition::Executed.as_str());
    }
}
