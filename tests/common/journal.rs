//! Journals for tests: a wrapper that fails or hangs chosen operations, and helpers that put a
//! journal into the state a crash or an expired lease leaves.

use std::ops::Deref;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use effect_tool::decide::record::{AuditEntry, Intent, Op, OpOutcome};
use effect_tool::{EffectRecord, Engine, Filter, RunContext, Store, StoreError, StoreExt, Tool};

/// What a [`Faulty`] journal does with one operation.
pub enum Then {
    /// Pass it on to the inner journal.
    Forward,
    /// Fail it with [`StoreError::Backend`] and this message; the inner journal never sees it.
    Fail(&'static str),
    /// Never answer (a write that hangs; the caller may give up on it).
    Hang,
    /// Apply it, then fail its answer with [`StoreError::Backend`] and this message (a
    /// connection cut between the commit and its reply).
    ForwardThenFail(&'static str),
    /// Wait for a permit of this gate, then pass it on (a slow write the test holds open).
    Gated(Arc<tokio::sync::Semaphore>),
    /// Wait this long (on tokio's clock), then pass it on (a slow journal).
    Delayed(Duration),
}

/// The test's hand on a [`Faulty`] journal: asked about every operation before it is applied.
pub trait Fault: Send + Sync + 'static {
    /// What to do with `op`.
    fn on(&self, op: &Op) -> Then;
}

/// A journal that forwards to `inner` except where its [`Fault`] says otherwise. It derefs to
/// the fault, so a test flips the fault's switches through the journal it handed the engine.
pub struct Faulty<F> {
    inner: Arc<dyn Store>,
    fault: F,
}

impl<F: Fault> Faulty<F> {
    /// `inner`, with `fault` asked before each operation.
    pub fn new(inner: Arc<dyn Store>, fault: F) -> Arc<Self> {
        Arc::new(Faulty { inner, fault })
    }
}

impl<F> Deref for Faulty<F> {
    type Target = F;
    fn deref(&self) -> &F {
        &self.fault
    }
}

#[async_trait::async_trait]
impl<F: Fault> Store for Faulty<F> {
    async fn get(&self, key: &str) -> Result<Option<EffectRecord>, StoreError> {
        self.inner.get(key).await
    }
    async fn apply(&self, key: &str, op: Op) -> Result<OpOutcome, StoreError> {
        match self.fault.on(&op) {
            Then::Forward => self.inner.apply(key, op).await,
            Then::Fail(message) => Err(StoreError::Backend(message.into())),
            Then::Hang => std::future::pending().await,
            Then::ForwardThenFail(message) => {
                self.inner.apply(key, op).await?;
                Err(StoreError::Backend(message.into()))
            }
            Then::Gated(gate) => {
                let _permit = gate.acquire().await.expect("the test's gate is never closed");
                self.inner.apply(key, op).await
            }
            Then::Delayed(delay) => {
                tokio::time::sleep(delay).await;
                self.inner.apply(key, op).await
            }
        }
    }
    async fn list(&self, f: &Filter) -> Result<Vec<EffectRecord>, StoreError> {
        self.inner.list(f).await
    }
    async fn gc(&self, now: i64) -> Result<u64, StoreError> {
        self.inner.gc(now).await
    }
    async fn audit(&self, k: Option<&str>) -> Result<Vec<AuditEntry>, StoreError> {
        self.inner.audit(k).await
    }
    async fn append_audit(&self, entry: AuditEntry) -> Result<(), StoreError> {
        self.inner.append_audit(entry).await
    }
    fn now(&self) -> i64 {
        self.inner.now()
    }
    async fn marker_secret(&self) -> Result<Option<effect_tool::value::marker::MarkerSecret>, StoreError> {
        self.inner.marker_secret().await
    }
}

/// A [`Fault`] that fails the operations `which` picks with `message` while `fail` is set (a
/// full disk, a journal that cannot be reached for a while).
pub struct FailWhen {
    which: fn(&Op) -> bool,
    message: &'static str,
    /// Whether the picked operations fail now.
    pub fail: AtomicBool,
}

impl FailWhen {
    /// Fails the operations `which` picks with `message`, from the start if `fail`.
    pub fn new(which: fn(&Op) -> bool, message: &'static str, fail: bool) -> Self {
        FailWhen {
            which,
            message,
            fail: AtomicBool::new(fail),
        }
    }
}

impl Fault for FailWhen {
    fn on(&self, op: &Op) -> Then {
        if (self.which)(op) && self.fail.load(Ordering::SeqCst) {
            Then::Fail(self.message)
        } else {
            Then::Forward
        }
    }
}

/// Wait until the record of `key` is a stale claim on the store's clock (its lease ran out).
pub async fn until_stale(store: &dyn Store, key: &str) {
    loop {
        let rec = store.get(key).await.unwrap().unwrap();
        if rec.is_stale(store.now()) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Leave a claim as a crashed process would: `tool` called with `args` in `run`, claimed at
/// attempt 1, lease already over. Returns its key.
pub async fn crashed_claim<T: Tool>(engine: &Engine, tool: &T, run: &RunContext, args: &T::Args) -> String {
    claim_elsewhere(engine, tool, run, args, 0).await
}

/// Claim as another process would: `tool` called with `args` in `run`, claimed at attempt 1
/// with a lease of `lease_ms` (0: already over, a crashed claim). Returns its key.
pub async fn claim_elsewhere<T: Tool>(
    engine: &Engine,
    tool: &T,
    run: &RunContext,
    args: &T::Args,
    lease_ms: u64,
) -> String {
    let id = effect_tool::call::key::identify(tool, run, args).unwrap();
    let intent = Intent {
        tool: T::NAME.into(),
        class: T::CLASS,
        run_id: run.run_id().into(),
        thread_id: run.thread_id().map(str::to_owned),
        call_id: None,
        fingerprint: id.fingerprint,
        input: id.input,
        ttl_ms: None,
        approval: None,
        approval_ttl_ms: None,
        holder: None,
    };
    let claimed = engine.store().claim(&id.key, intent, lease_ms, false).await.unwrap();
    assert!(matches!(claimed, OpOutcome::Claimed { attempt: 1, .. }), "{claimed:?}");
    id.key
}
