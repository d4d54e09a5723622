//! The engine's configuration and lifecycle: [`Engine`] and its settings, who its claims say
//! holds them, its marker secret, and [`Engine::shutdown`], which drains it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::instrumented;
use super::join::Inflight;
use super::observe::{self, EngineEvent};
use super::report::ShutdownReport;
use crate::call::error::StoreError;
use crate::store::Store;

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

/// Runs tool calls through the journal. Cheap to clone; clones share the journal and the
/// in-process sharing of identical calls.
#[derive(Clone)]
pub struct Engine {
    pub(super) inner: Arc<Inner>,
}

/// What the clones of an engine share.
pub(super) struct Inner {
    pub(super) store: Arc<dyn Store>,
    pub(super) config: EngineConfig,
    /// The keys led by a call in this process (stage 3, the join).
    pub(super) inflight: Inflight,
    /// Fired when a shutdown starts: new calls are refused, unstarted ones stop.
    pub(super) draining: CancellationToken,
    /// Set just before `draining` fires: what the call path checks (an atomic load, where
    /// `CancellationToken::is_cancelled` takes the token's lock, which every caller of the
    /// engine shares).
    shutting_down: std::sync::atomic::AtomicBool,
    /// Fired at the shutdown's deadline: running tools are cancelled.
    pub(super) abort: CancellationToken,
    /// Calls in flight (counted for the shutdown), and their last one's signal.
    active: AtomicUsize,
    idle: Notify,
    /// The marker secret: the application's ([`Engine::with_marker_secret`]), or the journal's
    /// ([`Store::marker_secret`]), loaded before the first journaled call.
    pub(super) marker_secret: tokio::sync::OnceCell<Option<crate::value::marker::MarkerSecret>>,
    /// The tools whose output schema this engine has written to the journal
    /// ([`Store::put_output_schema`]), or that have none.
    pub(super) output_schemas: Mutex<std::collections::HashSet<&'static str, foldhash::fast::RandomState>>,
    /// [`Engine::with_store_retry`], in milliseconds.
    store_retry_ms: std::sync::atomic::AtomicU64,
    /// Who this engine's claims say holds them ([`Engine::with_worker`], [`Engine::holder`]).
    pub(super) holder: crate::decide::record::Holder,
    /// The decisions, for [`Engine::events`].
    pub(super) events: observe::Events,
    /// The deployment's policies ([`Engine::with_policies`]), asked at stage 1b.
    #[cfg(feature = "policy")]
    pub(super) policies: std::sync::RwLock<Option<Arc<crate::decide::cedar::Policies>>>,
    /// Every run's budgets unless the run has its own ([`Engine::with_budgets`]).
    pub(super) budgets: Option<Arc<crate::call::budget::Budgets>>,
    /// The redaction hook ([`Engine::with_redactor`]), shared with the store's layer.
    pub(super) redactor: instrumented::RedactorSlot,
}

/// One call in flight, counted while it lives.
pub(super) struct Active<'a>(&'a Inner);

impl Drop for Active<'_> {
    fn drop(&mut self) {
        if self.0.active.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

impl Inner {
    /// Whether a shutdown has started ([`Engine::shutdown`]): new calls are refused, unstarted
    /// ones stop.
    pub(super) fn shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::SeqCst)
    }

    /// How long a journal write the engine must not drop is retried.
    pub(super) fn store_retry(&self) -> Duration {
        Duration::from_millis(self.store_retry_ms.load(Ordering::Relaxed))
    }

    /// Count a new call in, unless the engine is shutting down.
    pub(super) fn enter(&self) -> Option<Active<'_>> {
        self.active.fetch_add(1, Ordering::SeqCst);
        let active = Active(self);
        (!self.shutting_down()).then_some(active)
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
    /// A call of `tool` on `key` that is about to run (or claim) again stops here when its run
    /// was cancelled or the engine is shutting down: its answer, else `None`.
    pub(super) fn stopped<T: crate::call::tool::Tool>(
        &self,
        run: &crate::RunContext,
        tool: &str,
        key: &str,
    ) -> Option<super::report::Settled<T::Output, T::Error>> {
        if run.cancellation().is_cancelled() {
            return Some(super::errors::cancelled::<T>(tool, key));
        }
        if self.inner.shutting_down() {
            return Some(super::errors::shutting_down::<T>(tool, key));
        }
        None
    }

    /// Wait `after` (a retry's backoff, a poll for another holder) unless the run is cancelled
    /// or the engine starts shutting down first (the caller's next step then stops).
    pub(super) async fn back_off(&self, run: &crate::RunContext, after: Duration) {
        tokio::select! {
            biased;
            _ = tokio::time::sleep(after) => {}
            _ = run.cancellation().cancelled() => {}
            _ = self.inner.draining.cancelled() => {}
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
        let redactor = instrumented::RedactorSlot::default();
        Engine {
            inner: Arc::new(Inner {
                store: Arc::new(instrumented::instrumented(Arc::new(store), redactor.clone())),
                redactor,
                config,
                inflight: Inflight::default(),
                draining: CancellationToken::new(),
                shutting_down: std::sync::atomic::AtomicBool::new(false),
                abort: CancellationToken::new(),
                active: AtomicUsize::new(0),
                idle: Notify::new(),
                marker_secret: tokio::sync::OnceCell::new(),
                output_schemas: Mutex::new(Default::default()),
                store_retry_ms: std::sync::atomic::AtomicU64::new(DEFAULT_STORE_RETRY.as_millis() as u64),
                holder: new_holder(),
                events: observe::Events::new(),
                #[cfg(feature = "policy")]
                policies: std::sync::RwLock::new(None),
                budgets: None,
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

    /// Give every run `budgets` ([`crate::call::budget::Budgets`]): at most so many calls, calls
    /// of one tool, units of a declared cost, retries. A run given its own
    /// ([`RunContext::with_budgets`](crate::RunContext::with_budgets)) uses those instead.
    /// The journal keeps what each run spent ([`Store::spend`]), so every engine on it, in
    /// any process, counts against the same totals; give them the same limits.
    ///
    /// # Panics
    ///
    /// When the engine has been cloned already: set the budgets when building the engine.
    pub fn with_budgets(mut self, budgets: crate::call::budget::Budgets) -> Self {
        let Some(inner) = Arc::get_mut(&mut self.inner) else {
            panic!(
                "Engine::with_budgets was called on an engine that has been cloned: set the budgets when building the engine, before cloning it"
            );
        };
        inner.budgets = Some(Arc::new(budgets));
        self
    }

    /// Give every text and value this engine stores or logs to `redactor` first (see
    /// [`crate::call::redact`]): inputs and outputs before they are journaled, reasons (a
    /// tool's error text on a released claim or a record in doubt), the details of audit
    /// entries, and the engine's log lines that quote a tool's or a hook's error or a panic.
    /// Values of `#[sensitive]` fields are cut out of error texts by value whether or not a
    /// hook is set.
    ///
    /// It applies to every write through [`Engine::store`] (this engine's calls, the
    /// dispatcher's, a person's resolution made through it), not to the store used directly.
    ///
    /// # Panics
    ///
    /// When a redaction hook is already set on this engine (or a clone): set it once, when
    /// building the engine, before the first call.
    pub fn with_redactor(self, redactor: impl crate::call::redact::Redactor) -> Self {
        if self.inner.redactor.set(Arc::new(redactor)).is_err() {
            panic!(
                "Engine::with_redactor was called twice on one engine: give it one redaction hook (a hook can call several) when building the engine"
            );
        }
        self
    }

    /// `text`, going to `site`, through the redaction hook ([`Engine::with_redactor`]), if one
    /// is set.
    pub fn redact_text(&self, site: crate::call::redact::Site, text: String) -> String {
        self.inner.redactor.text(site, text)
    }

    /// Every decision of this engine (and its clones) from now on: each call's end, takeovers,
    /// lost claims, effects whose record failed. The integration point for notifications,
    /// consoles and alerting; see [`EngineEvent`]. A receiver more than [`EVENT_BUFFER`](super::EVENT_BUFFER) events
    /// behind misses the oldest (`RecvError::Lagged`); with no receiver, no event is built.
    pub fn events(&self) -> tokio::sync::broadcast::Receiver<EngineEvent> {
        self.inner.events.subscribe()
    }

    /// Who this engine's claims say holds them: its worker identity ([`Engine::with_worker`]),
    /// its instance id (random per engine), host and process id.
    pub fn holder(&self) -> &crate::decide::record::Holder {
        &self.inner.holder
    }

    /// Sign markers ([`EffectCtx::marker`](crate::call::context::EffectCtx::marker)) with `secret` instead of the journal's own
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
    /// [`EffectError::ShuttingDown`](crate::call::error::EffectError::ShuttingDown); calls whose tool has not started stop and release their
    /// claims; calls whose tool is running get until `deadline` to finish and record. A tool
    /// still running then is cancelled, as a cancelled run is (its record is in doubt until the
    /// next call reconciles it or a person resolves it).
    ///
    /// Returns once no call is in flight (after the deadline, at most
    /// [`Engine::with_store_retry`] more for the cancelled calls' journal writes). Applies to
    /// every clone of this engine; it cannot be undone (make a new engine).
    pub async fn shutdown(&self, deadline: Duration) -> ShutdownReport {
        let inner = &self.inner;
        inner.shutting_down.store(true, Ordering::SeqCst);
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
        self.inner.shutting_down()
    }
}

#[cfg(test)]
mod tests {
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
