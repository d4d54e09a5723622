//! A journal outage must not cost a person step (issue 12, fault 2).
//!
//! - A PostgreSQL server (started by this test on its own port and data folder, with
//!   `.ci/postgres.sh`) is stopped with `pg_ctl stop -m immediate` while an irreversible tool
//!   runs, and started again a moment after the tool's effect: the record write that failed is
//!   retried, so the call returns Ok only once the result is recorded, and the record is
//!   completed (no claim left behind to go in doubt).
//! - A claim whose answer is lost (the journal wrote it, the connection failed before the
//!   answer) is released once the journal answers, so the next call runs the tool instead of
//!   blocking on a stale claim.
//!
//! Run: `cargo test -p effect-tool --features postgres --test engine engine_faults_store::`
//! (PostgreSQL server binaries are needed; `.ci/postgres.sh` installs them if missing).

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use common::ledger::Downstream;
use effect_tool::decide::record::{AuditEntry, Op, OpOutcome};
use effect_tool::{
    CallOptions, Disposition, EffectClass, EffectCtx, EffectError, EffectRecord, Engine, EngineConfig, Filter,
    MemoryStore, RecordState, RunContext, Store, StoreError, Tool, ToolError,
};

/// An irreversible tool: it announces that it started, waits for the test's go-ahead, then
/// applies its effect downstream.
#[derive(Clone)]
struct Transfer {
    down: Arc<Downstream>,
    started: Arc<tokio::sync::Notify>,
    go: Arc<tokio::sync::Semaphore>,
    runs: Arc<AtomicUsize>,
}

impl Transfer {
    fn new(down: &Arc<Downstream>) -> Self {
        Transfer {
            down: down.clone(),
            started: Arc::new(tokio::sync::Notify::new()),
            go: Arc::new(tokio::sync::Semaphore::new(0)),
            runs: Arc::new(AtomicUsize::new(0)),
        }
    }
}

impl Tool for Transfer {
    type Args = String;
    type Output = String;
    type Error = ToolError;
    const NAME: &'static str = "transfer";
    const CLASS: EffectClass = EffectClass::Irreversible;

    async fn call(&self, ctx: &EffectCtx, to: String) -> Result<String, ToolError> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        self.started.notify_one();
        self.go
            .acquire()
            .await
            .map_err(|e| ToolError::definitive(e.to_string()))?
            .forget();
        self.down.apply(&ctx.idempotency_key());
        Ok(format!("sent to {to}"))
    }
}

// ---------------------------------------------------------------------------------------------
// A PostgreSQL server stopped and started while the tool runs
// ---------------------------------------------------------------------------------------------

#[cfg(feature = "postgres")]
const PG_DIR: &str = "/tmp/engine-pg";
#[cfg(feature = "postgres")]
const PG_PORT: &str = "25432";

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_postgres_outage_after_the_effect_is_retried_until_recorded() {
    use common::own_postgres::OwnPostgres;
    use effect_tool::store::postgres::PostgresStore;
    let pg = OwnPostgres::start(PG_DIR, PG_PORT);
    let store = PostgresStore::connect(&pg.url)
        .await
        .expect("connecting to the test's server");
    let engine = Engine::with_config(
        store,
        EngineConfig {
            lease: Duration::from_secs(2),
            poll_interval: Duration::from_millis(10),
        },
    )
    .with_store_retry(Duration::from_secs(60));
    let down = Arc::new(Downstream::default());
    let tool = Transfer::new(&down);
    let run = RunContext::new(format!("pg-outage-{}", std::process::id()));
    for round in 0..2 {
        let to = format!("ann-{round}");
        let call = {
            let (engine, tool, run, to) = (engine.clone(), tool.clone(), run.clone(), to.clone());
            tokio::spawn(async move { engine.call_with_report(&tool, &run, CallOptions::default(), to).await })
        };
        tool.started.notified().await;
        // The server dies while the tool runs; the effect happens while it is down.
        tokio::task::block_in_place(|| pg.kill());
        tool.go.add_permits(1);
        while down.requests() <= round {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        tokio::task::block_in_place(|| pg.revive());

        let report = call.await.unwrap();
        assert_eq!(
            report.result.as_deref().ok(),
            Some(format!("sent to {to}").as_str()),
            "{report:?}"
        );
        // Returned only once recorded: the record is completed (nothing for a person).
        let key = report.key.clone().unwrap();
        let rec = engine.store().get(&key).await.unwrap().unwrap();
        assert_eq!(rec.state, RecordState::Completed, "{rec:?}");
        assert_eq!(rec.output, Some(serde_json::json!(format!("sent to {to}"))));
        // The next call replays it; nothing runs again.
        let again = engine
            .call_with_report(&tool, &run, CallOptions::default(), to.clone())
            .await;
        assert_eq!(again.disposition, Disposition::Replayed, "{again:?}");
    }
    assert_eq!((down.requests(), down.effects()), (2, 2));
    assert_eq!(tool.runs.load(Ordering::SeqCst), 2);
    drop(pg);
}

#[cfg(not(feature = "postgres"))]
#[test]
fn a_postgres_outage_after_the_effect_is_retried_until_recorded() {
    common::postgres_feature_disabled("engine_faults_store (a PostgreSQL outage after the effect)");
}

// ---------------------------------------------------------------------------------------------
// A claim whose answer was lost
// ---------------------------------------------------------------------------------------------

/// A journal that writes the next claim and then fails its answer ("connection lost"), as a
/// connection cut between the commit and its reply does.
struct LosesClaimAnswer {
    inner: MemoryStore,
    armed: AtomicBool,
    /// Whether the live claim of attempt 1 is renewed right after the lost claim (its holder's
    /// renewal loop landing between the lost claim and the look for it).
    renew_attempt_1: bool,
    /// How many reads fail after the lost claim (the journal still not answering).
    failing_reads: usize,
    /// Reads since the lost claim.
    reads_after: AtomicUsize,
    lost: AtomicBool,
}

impl LosesClaimAnswer {
    fn new(armed: bool, renew_attempt_1: bool, failing_reads: usize) -> Self {
        LosesClaimAnswer {
            inner: MemoryStore::new(),
            armed: AtomicBool::new(armed),
            renew_attempt_1,
            failing_reads,
            reads_after: AtomicUsize::new(0),
            lost: AtomicBool::new(false),
        }
    }
}

#[async_trait::async_trait]
impl Store for LosesClaimAnswer {
    async fn get(&self, key: &str) -> Result<Option<EffectRecord>, StoreError> {
        if self.lost.load(Ordering::SeqCst) && self.reads_after.fetch_add(1, Ordering::SeqCst) < self.failing_reads {
            return Err(StoreError::Backend("the server is not answering yet".into()));
        }
        self.inner.get(key).await
    }
    async fn apply(&self, key: &str, op: Op) -> Result<OpOutcome, StoreError> {
        let claim = matches!(op, Op::Claim { .. });
        let outcome = self.inner.apply(key, op).await?;
        if claim && self.armed.swap(false, Ordering::SeqCst) {
            self.lost.store(true, Ordering::SeqCst);
            if self.renew_attempt_1 {
                self.inner
                    .apply(
                        key,
                        Op::Renew {
                            attempt: 1,
                            lease_ms: 10_000,
                        },
                    )
                    .await?;
            }
            return Err(StoreError::Backend(
                "connection lost: the server closed the connection unexpectedly".into(),
            ));
        }
        Ok(outcome)
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
}

#[tokio::test]
async fn a_claim_whose_answer_was_lost_is_released_before_the_tool_runs() {
    let store = Arc::new(LosesClaimAnswer::new(true, false, 0));
    let engine = Engine::with_config(
        store.clone(),
        EngineConfig {
            lease: Duration::from_millis(100),
            ..EngineConfig::default()
        },
    );
    let down = Arc::new(Downstream::default());
    let tool = Transfer::new(&down);
    tool.go.add_permits(1);
    let run = RunContext::new("lost-answer");
    let first = engine
        .call_with_report(&tool, &run, CallOptions::call_id("c1"), "ann".into())
        .await;
    assert!(
        matches!(first.result, Err(EffectError::Store { .. })),
        "{:?}",
        first.result
    );
    assert_eq!(tool.runs.load(Ordering::SeqCst), 0, "the tool did not run");
    let key = effect_tool::call::key::identify(&tool, &run, &"ann".to_owned())
        .unwrap()
        .key;
    let rec = store.get(&key).await.unwrap().expect("the claim was written");
    assert_eq!(
        rec.state,
        RecordState::Released,
        "the hidden claim is released: {rec:?}"
    );

    // The model calls again once the journal answers: the tool runs once, nobody is asked.
    let again = engine
        .call_with_report(&tool, &run, CallOptions::call_id("c1"), "ann".into())
        .await;
    assert_eq!(again.result.as_deref().ok(), Some("sent to ann"), "{again:?}");
    assert_eq!(again.disposition, Disposition::Executed);
    assert_eq!((down.requests(), tool.runs.load(Ordering::SeqCst)), (1, 1));
}

/// The same call sent to two processes at once (a client's retry): the first claims and runs
/// its tool; the second's claim is answered with the first's live claim, and that answer is
/// lost; the first process's lease renewal lands just after. The second must not take the live
/// claim it then finds for its own lost one (same run, tool-call id and input, written since it
/// sent, but another holder's): it is left alone, the first process records its effect, and the
/// effect happened once.
#[tokio::test]
async fn a_lost_claim_answer_never_releases_another_processs_live_claim() {
    let store = Arc::new(LosesClaimAnswer::new(false, true, 0));
    let config = EngineConfig {
        lease: Duration::from_secs(10),
        ..EngineConfig::default()
    };
    let (first, second) = (
        Engine::with_config(store.clone(), config),
        Engine::with_config(store.clone(), config),
    );
    let down = Arc::new(Downstream::default());
    let tool = Transfer::new(&down);
    let run = RunContext::new("lost-answer-twice");
    let running = {
        let (tool, run) = (tool.clone(), run.clone());
        tokio::spawn(async move {
            first
                .call_with_report(&tool, &run, CallOptions::call_id("c1"), "ann".into())
                .await
        })
    };
    tool.started.notified().await;
    store.armed.store(true, Ordering::SeqCst);
    let retry = second
        .call_with_report(&tool, &run, CallOptions::call_id("c1"), "ann".into())
        .await;
    assert!(
        matches!(retry.result, Err(EffectError::Store { .. })),
        "{:?}",
        retry.result
    );
    let key = effect_tool::call::key::identify(&tool, &run, &"ann".to_owned())
        .unwrap()
        .key;
    let rec = store.get(&key).await.unwrap().unwrap();
    assert_eq!(
        (rec.state, rec.attempt),
        (RecordState::Claimed, 1),
        "the first process's claim is still its own: {rec:?}"
    );
    tool.go.add_permits(1);
    let done = running.await.unwrap();
    assert_eq!(done.result.as_deref().ok(), Some("sent to ann"), "{done:?}");
    assert_eq!(store.get(&key).await.unwrap().unwrap().state, RecordState::Completed);
    assert_eq!((down.requests(), tool.runs.load(Ordering::SeqCst)), (1, 1));
}

/// The look for a claim whose answer was lost, when the journal does not answer it either:
/// `failing` reads fail, within a store-retry window of `window`. The call's claim state after
/// it, and how many reads the look made. On tokio's paused clock (backoff 20, 40, ... ms).
async fn look_for_a_lost_claim_through(failing: usize, window: Duration) -> (RecordState, usize) {
    let store = Arc::new(LosesClaimAnswer::new(true, false, failing));
    let engine = Engine::with_config(
        store.clone(),
        EngineConfig {
            lease: Duration::from_secs(30),
            ..EngineConfig::default()
        },
    )
    .with_store_retry(window);
    let down = Arc::new(Downstream::default());
    let tool = Transfer::new(&down);
    let run = RunContext::new("lost-answer-slow");
    let first = engine
        .call_with_report(&tool, &run, CallOptions::call_id("c1"), "ann".into())
        .await;
    assert!(
        matches!(first.result, Err(EffectError::Store { .. })),
        "{:?}",
        first.result
    );
    assert_eq!(tool.runs.load(Ordering::SeqCst), 0, "the tool did not run");
    let reads = store.reads_after.load(Ordering::SeqCst);
    store.lost.store(false, Ordering::SeqCst);
    let key = effect_tool::call::key::identify(&tool, &run, &"ann".to_owned())
        .unwrap()
        .key;
    (store.get(&key).await.unwrap().unwrap().state, reads)
}

/// The journal answers the look on its third try: the hidden claim is found and released.
#[tokio::test(start_paused = true)]
async fn a_lost_claim_is_looked_for_again_while_the_journal_does_not_answer() {
    let (state, reads) = look_for_a_lost_claim_through(2, Duration::from_secs(1)).await;
    assert_eq!((state, reads), (RecordState::Released, 3));
}

/// The journal never answers within the window: the look gives up after its backoff (20 + 40
/// + 80 + 160 + 320 ms fit in 1 s: six reads), and the claim is left for the next attempt to
/// reconcile. (The first 100 reads fail: a look that never gave up would end there, the count
/// showing it.)
#[tokio::test(start_paused = true)]
async fn the_look_for_a_lost_claim_gives_up_when_its_window_ends() {
    let (state, reads) = look_for_a_lost_claim_through(100, Duration::from_secs(1)).await;
    assert_eq!((state, reads), (RecordState::Claimed, 6));
}

/// The look waits again only if that wait ends before the window does: with a window of
/// 300 ms, the reads at 0, 20, 60 and 140 ms fail, and the next wait (160 ms) would end at
/// 300 ms, the window's end, so the look stops there: four reads, the claim left claimed.
#[tokio::test(start_paused = true)]
async fn the_look_for_a_lost_claim_does_not_wait_past_the_end_of_its_window() {
    let (state, reads) = look_for_a_lost_claim_through(100, Duration::from_millis(300)).await;
    assert_eq!((state, reads), (RecordState::Claimed, 4));
}
