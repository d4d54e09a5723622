//! The reconciler that needs no caller (`toolkit::Reconciler`), with real processes on one
//! journal (SQLite and PostgreSQL): records in doubt and stale claims nobody calls again are
//! reconciled by exactly one of two reconciler processes; a reconciler killed with SIGKILL
//! loses its lease and another takes over. The effects are counted in outside ledger files
//! (the remote system's own state and a log of every `recover` asked), never the engine's
//! bookkeeping. Also: `recover_first` semantics (`Tool::RECOVER_FIRST`) with a journal
//! restored from a copy of its file, and an inconclusive `recover` (`Recovery::Inconclusive`).

use crate::common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::worker::{Worker, spawn};
use effect_tool::store::election::{LEASE_TOOL, lease_key};
use effect_tool::store::sqlite::SqliteStore;
use effect_tool::testing::conformance::{ScratchDir, ledger_append, ledger_lines};
use effect_tool::toolkit::{Reconciler, ReconcilerOptions};
use effect_tool::{
    CallOptions, Disposition, EffectClass, EffectCtx, Engine, EngineConfig, RecordState, Recovery, RunContext, Store,
    StoreExt, Tool, ToolError, Toolkit,
};

const WORKER_JOB: &str = "EFFECT_TOOL_RECONCILE_NO_CALLER";
const RUN: &str = "reconcile-test";
const RECORDS: usize = 12;

/// A refund: applied when the remote system's ledger (`<dir>/ledger`) has its line. `recover`
/// logs each time it is asked (`<dir>/recovers`: order and pid), waits `slow_ms`, and reads the
/// ledger.
struct Refund {
    dir: PathBuf,
    slow_ms: u64,
}

impl Tool for Refund {
    type Args = String;
    type Output = String;
    type Error = ToolError;
    const NAME: &'static str = "refund";
    const CLASS: EffectClass = EffectClass::Irreversible;
    const HAS_RECOVER: bool = true;

    async fn call(&self, _ctx: &EffectCtx, order: String) -> Result<String, ToolError> {
        ledger_append(&self.dir.join("ledger"), &format!("refund {order}"));
        Ok(format!("refunded {order}"))
    }

    async fn recover(&self, _ctx: &EffectCtx, order: &String) -> Result<Option<String>, ToolError> {
        ledger_append(&self.dir.join("recovers"), &format!("{order} {}", std::process::id()));
        tokio::time::sleep(Duration::from_millis(self.slow_ms)).await;
        let found = ledger_lines(&self.dir.join("ledger"))
            .iter()
            .any(|l| l == &format!("refund {order}"));
        Ok(found.then(|| format!("refund of {order} found")))
    }
}

#[derive(Clone, serde::Serialize, serde::Deserialize)]
enum Journal {
    Sqlite(PathBuf),
    Postgres { url: String, schema: String },
}

impl Journal {
    async fn open(&self) -> std::sync::Arc<dyn Store> {
        match self {
            Journal::Sqlite(path) => std::sync::Arc::new(SqliteStore::open(path).expect("the journal")),
            #[cfg(feature = "postgres")]
            Journal::Postgres { url, schema } => {
                use effect_tool::store::postgres::{PgOptions, PostgresStore};
                let options = PgOptions {
                    schema: schema.clone(),
                    pool_size: 4,
                    ..PgOptions::default()
                };
                std::sync::Arc::new(PostgresStore::connect_with(url, options).await.expect("the journal"))
            }
            #[cfg(not(feature = "postgres"))]
            Journal::Postgres { .. } => unreachable!("PostgreSQL cases need the feature"),
        }
    }
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Job {
    journal: Journal,
    dir: PathBuf,
    slow_ms: u64,
    concurrency: usize,
}

fn engine_on(store: std::sync::Arc<dyn Store>) -> Engine {
    let config = EngineConfig {
        lease: Duration::from_secs(5),
        ..EngineConfig::default()
    };
    Engine::with_config(store, config)
}

#[test]
#[ignore = "entry point of the worker processes of the reconciler tests"]
fn worker() {
    let Some(job) = common::worker::job::<Job>(WORKER_JOB) else {
        return;
    };
    common::worker::block_on(async move {
        let engine = engine_on(job.journal.open().await);
        let toolkit = Toolkit::new().with(Refund {
            dir: job.dir.clone(),
            slow_ms: job.slow_ms,
        });
        let options = ReconcilerOptions {
            lease: Duration::from_secs(2),
            interval: Duration::from_millis(100),
            pace: Duration::from_millis(5),
            concurrency: job.concurrency,
            ..ReconcilerOptions::default()
        };
        let reconciler = Reconciler::new(engine, toolkit, options);
        // Runs until the test kills it.
        reconciler.run(effect_tool::CancellationToken::new()).await;
    });
}

fn start(journal: &Journal, dir: &Path, slow_ms: u64, concurrency: usize) -> Worker {
    let job = Job {
        journal: journal.clone(),
        dir: dir.to_owned(),
        slow_ms,
        concurrency,
    };
    spawn(module_path!(), WORKER_JOB, &serde_json::to_string(&job).unwrap())
}

/// `RECORDS` refunds left as crashed processes leave them: stale claims, every third marked in
/// doubt; the even ones applied at the remote system (their line in the ledger). Returns the
/// orders and their keys.
async fn setup(journal: &Journal, dir: &Path) -> Vec<(String, String)> {
    let engine = engine_on(journal.open().await);
    let tool = Refund {
        dir: dir.to_owned(),
        slow_ms: 0,
    };
    let run = RunContext::new(RUN);
    let mut keys = Vec::new();
    for i in 0..RECORDS {
        let order = format!("order-{i}");
        let key = common::journal::claim_elsewhere(&engine, &tool, &run, &order, 0).await;
        if i % 3 == 0 {
            engine
                .store()
                .mark_in_doubt(&key, 1, "the process crashed after sending".to_owned())
                .await
                .unwrap();
        }
        if i % 2 == 0 {
            ledger_append(&dir.join("ledger"), &format!("refund {order}"));
        }
        keys.push((order, key));
    }
    keys
}

/// Wait (at most two minutes) until every record is settled, completed (applied) or released
/// (not applied), and its verdict audited: the reconciler appends the audit entry after the
/// record's own write, so a record may be seen settled a moment before its entry is.
async fn until_settled(store: &dyn Store, keys: &[(String, String)]) {
    let until = Instant::now() + Duration::from_secs(120);
    loop {
        let mut open = 0;
        for (_, key) in keys {
            let rec = store.get(key).await.unwrap().unwrap();
            let audited = store
                .audit(Some(key))
                .await
                .unwrap()
                .iter()
                .any(|e| e.action == "reconcile");
            if !matches!(rec.state, RecordState::Completed | RecordState::Released) || !audited {
                open += 1;
            }
        }
        if open == 0 {
            return;
        }
        assert!(
            Instant::now() < until,
            "{open} records still unsettled (or their verdicts unaudited) after two minutes"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Every record settled as the remote system says, nothing run again, each verdict audited.
async fn check_settled(store: &dyn Store, dir: &Path, keys: &[(String, String)]) {
    for (i, (order, key)) in keys.iter().enumerate() {
        let rec = store.get(key).await.unwrap().unwrap();
        if i % 2 == 0 {
            assert_eq!(rec.state, RecordState::Completed, "{order}: {rec:?}");
            assert_eq!(rec.output, Some(serde_json::json!(format!("refund of {order} found"))));
        } else {
            assert_eq!(rec.state, RecordState::Released, "{order}: {rec:?}");
        }
        let verdicts: Vec<_> = store
            .audit(Some(key))
            .await
            .unwrap()
            .into_iter()
            .filter(|e| e.action == "reconcile")
            .collect();
        let expected = if i % 2 == 0 { "applied" } else { "not-applied" };
        let last = verdicts.last().expect("the verdict is audited");
        assert_eq!(last.detail.as_ref().unwrap()["verdict"], expected, "{order}");
    }
    // The reconciler never runs a tool: the ledger holds only the effects made before.
    let ledger = ledger_lines(&dir.join("ledger"));
    assert_eq!(ledger.len(), RECORDS.div_ceil(2), "{ledger:?}");
}

fn recovers(dir: &Path) -> Vec<(String, u32)> {
    ledger_lines(&dir.join("recovers"))
        .into_iter()
        .map(|l| {
            let (order, pid) = l.split_once(' ').unwrap();
            (order.to_owned(), pid.parse().unwrap())
        })
        .collect()
}

async fn two_reconcilers_reconcile_each_record_once(journal: Journal, dir: &Path) {
    let store = journal.open().await;
    let keys = setup(&journal, dir).await;
    let mut a = start(&journal, dir, 30, 2);
    let mut b = start(&journal, dir, 30, 2);
    until_settled(&*store, &keys).await;
    check_settled(&*store, dir, &keys).await;
    let asked = recovers(dir);
    for (order, _) in &keys {
        let n = asked.iter().filter(|(o, _)| o == order).count();
        assert_eq!(n, 1, "{order} was asked {n} times: {asked:?}");
    }
    // One process was the journal's reconciler: every recover was asked by the same pid.
    let pids: std::collections::BTreeSet<u32> = asked.iter().map(|(_, p)| *p).collect();
    assert_eq!(pids.len(), 1, "{asked:?}");
    let lease = store.get(&lease_key("reconciler")).await.unwrap().unwrap();
    assert_eq!(lease.tool, LEASE_TOOL);
    let holder = lease.holder.expect("the lease names its holder").pid;
    assert!(
        pids.contains(&holder),
        "the lease's holder {holder} reconciled: {asked:?}"
    );
    assert!([a.id(), b.id()].contains(&holder));
    let _ = (a.kill(), b.kill());
}

async fn a_killed_reconciler_is_replaced(journal: Journal, dir: &Path) {
    let store = journal.open().await;
    let keys = setup(&journal, dir).await;
    // A slow reconciler, one record at a time: killed while it checks its first.
    let mut first = start(&journal, dir, 1_500, 1);
    let first_pid = first.id();
    let until = Instant::now() + Duration::from_secs(120);
    while !recovers(dir).iter().any(|(_, p)| *p == first_pid) {
        assert!(Instant::now() < until, "the first reconciler never started");
        assert!(first.try_wait().unwrap().is_none(), "the first reconciler exited");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    first.kill().unwrap(); // SIGKILL
    first.wait().unwrap();
    let mut second = start(&journal, dir, 0, 2);
    until_settled(&*store, &keys).await;
    check_settled(&*store, dir, &keys).await;
    let asked = recovers(dir);
    assert!(asked.iter().any(|(_, p)| *p == second.id()), "{asked:?}");
    let lease = store.get(&lease_key("reconciler")).await.unwrap().unwrap();
    assert_eq!(lease.holder.unwrap().pid, second.id(), "the lease passed to the second");
    let _ = second.kill();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_reconciler_processes_on_sqlite_reconcile_each_record_once() {
    let dir = ScratchDir::new("reconcile");
    let journal = Journal::Sqlite(dir.path().join("journal.db"));
    two_reconcilers_reconcile_each_record_once(journal, dir.path()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_reconciler_on_sqlite_loses_its_lease_to_another() {
    let dir = ScratchDir::new("reconcile");
    let journal = Journal::Sqlite(dir.path().join("journal.db"));
    a_killed_reconciler_is_replaced(journal, dir.path()).await;
}

#[cfg(feature = "postgres")]
fn postgres(case: &str) -> Option<Journal> {
    let Ok(url) = std::env::var("EFFECT_TOOL_PG_URL") else {
        assert!(
            std::env::var("EFFECT_TOOL_REQUIRE_PG").is_err(),
            "EFFECT_TOOL_PG_URL is not set but PostgreSQL is required"
        );
        eprintln!("SKIPPED: {case} (no EFFECT_TOOL_PG_URL)");
        return None;
    };
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let schema = format!("et_reconcile_{}_{nanos:08x}", std::process::id());
    Some(Journal::Postgres { url, schema })
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_reconciler_processes_on_postgres_reconcile_each_record_once() {
    let Some(journal) = postgres("two_reconciler_processes_on_postgres_reconcile_each_record_once") else {
        return;
    };
    let dir = ScratchDir::new("reconcile");
    two_reconcilers_reconcile_each_record_once(journal, dir.path()).await;
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_reconciler_on_postgres_loses_its_lease_to_another() {
    let Some(journal) = postgres("a_killed_reconciler_on_postgres_loses_its_lease_to_another") else {
        return;
    };
    let dir = ScratchDir::new("reconcile");
    a_killed_reconciler_is_replaced(journal, dir.path()).await;
}

/// An invoice, with `RECOVER_FIRST` (`#[tool(recover_first)]`); the remote system's ledger is
/// `<dir>/ledger`.
struct SendInvoice {
    dir: PathBuf,
}

impl Tool for SendInvoice {
    type Args = String;
    type Output = String;
    type Error = ToolError;
    const NAME: &'static str = "send_invoice";
    const CLASS: EffectClass = EffectClass::Irreversible;
    const HAS_RECOVER: bool = true;
    const RECOVER_FIRST: bool = true;

    async fn call(&self, _ctx: &EffectCtx, to: String) -> Result<String, ToolError> {
        ledger_append(&self.dir.join("ledger"), &format!("invoice {to}"));
        Ok(format!("sent to {to}"))
    }

    async fn recover(&self, _ctx: &EffectCtx, to: &String) -> Result<Option<String>, ToolError> {
        let found = ledger_lines(&self.dir.join("ledger"))
            .iter()
            .any(|l| l == &format!("invoice {to}"));
        Ok(found.then(|| format!("found the invoice to {to}")))
    }
}

/// Copy the journal's files (the database, its WAL) from `from` to `to`.
fn copy_journal(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with("journal.db") {
            std::fs::copy(&path, to.join(&name)).unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restored_journal_asks_recover_first_and_runs_nothing_again() {
    let dir = ScratchDir::new("reconcile-first");
    let live = dir.path().join("live");
    let backup = dir.path().join("backup");
    std::fs::create_dir_all(&live).unwrap();
    let run = RunContext::new(RUN);
    let tool = SendInvoice {
        dir: dir.path().to_owned(),
    };
    {
        // The journal exists (one other call), then is backed up before the invoice is sent.
        let engine = Engine::new(SqliteStore::open(live.join("journal.db")).unwrap());
        let first = engine
            .call(&tool, &run, CallOptions::default(), "warm-up".to_owned())
            .await;
        assert!(first.is_ok(), "{first:?}");
        engine.shutdown(Duration::from_secs(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    copy_journal(&live, &backup);
    {
        let engine = Engine::new(SqliteStore::open(live.join("journal.db")).unwrap());
        let report = engine
            .call_with_report(&tool, &run, CallOptions::default(), "ana@example.com".to_owned())
            .await;
        assert_eq!(report.disposition, Disposition::Executed, "{report:?}");
        engine.shutdown(Duration::from_secs(5)).await;
    }
    let sent = |dir: &Path| {
        ledger_lines(&dir.join("ledger"))
            .iter()
            .filter(|l| *l == "invoice ana@example.com")
            .count()
    };
    assert_eq!(sent(dir.path()), 1);
    // The journal is restored from the backup: it does not know of the invoice.
    tokio::time::sleep(Duration::from_millis(200)).await;
    copy_journal(&backup, &live);
    let engine = Engine::new(SqliteStore::open(live.join("journal.db")).unwrap());
    let report = engine
        .call_with_report(&tool, &run, CallOptions::default(), "ana@example.com".to_owned())
        .await;
    assert_eq!(report.disposition, Disposition::Reconciled, "{report:?}");
    assert_eq!(report.result.unwrap(), "found the invoice to ana@example.com");
    assert_eq!(sent(dir.path()), 1, "recover found the invoice: nothing was sent again");
    let key = report.key.unwrap();
    let rec = engine.store().get(&key).await.unwrap().unwrap();
    assert_eq!(rec.state, RecordState::Completed);
}

/// A lookup behind its writes (a search index): `verify` answers inconclusive.
struct SearchIndexed;

impl Tool for SearchIndexed {
    type Args = String;
    type Output = String;
    type Error = ToolError;
    const NAME: &'static str = "post_listing";
    const CLASS: EffectClass = EffectClass::Irreversible;
    const HAS_RECOVER: bool = true;

    async fn call(&self, _ctx: &EffectCtx, _title: String) -> Result<String, ToolError> {
        panic!("a reconciler or a blocked call never runs the tool")
    }

    async fn verify(&self, _ctx: &EffectCtx, _title: &String) -> Result<Recovery<String>, ToolError> {
        Ok(Recovery::inconclusive_after(
            "the search index lags",
            Duration::from_secs(60),
        ))
    }
}

/// The same tool with a settle delay of an hour.
struct Settling;

impl Tool for Settling {
    type Args = String;
    type Output = String;
    type Error = ToolError;
    const NAME: &'static str = "post_listing";
    const CLASS: EffectClass = EffectClass::Irreversible;
    const HAS_RECOVER: bool = true;
    const RECOVER_SETTLE: Option<Duration> = Some(Duration::from_secs(3600));

    async fn call(&self, _ctx: &EffectCtx, _title: String) -> Result<String, ToolError> {
        panic!("never run")
    }

    async fn recover(&self, _ctx: &EffectCtx, _title: &String) -> Result<Option<String>, ToolError> {
        panic!("not asked before the settle delay")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inconclusive_recover_leaves_the_record_in_doubt_and_audits_it() {
    let dir = ScratchDir::new("reconcile-inconclusive");
    let engine = engine_on(std::sync::Arc::new(
        SqliteStore::open(dir.path().join("journal.db")).unwrap(),
    ));
    let run = RunContext::new(RUN);
    let tool = SearchIndexed;
    let key = common::journal::claim_elsewhere(&engine, &tool, &run, &"bike".to_owned(), 0).await;
    let store = engine.store();
    store.mark_in_doubt(&key, 1, "crashed".to_owned()).await.unwrap();

    // A settle delay not yet passed: not asked at all.
    let rec = store.get(&key).await.unwrap().unwrap();
    let verdict = engine.reconcile_record(&Settling, &rec, run.clone()).await.unwrap();
    assert!(
        matches!(verdict, effect_tool::engine::ReconcileVerdict::Settling { wait } if wait > Duration::from_secs(3000)),
        "{verdict:?}"
    );

    let verdict = engine.reconcile_record(&tool, &rec, run.clone()).await.unwrap();
    assert_eq!(
        verdict,
        effect_tool::engine::ReconcileVerdict::Inconclusive {
            reason: "the search index lags".to_owned(),
            retry_after: Some(Duration::from_secs(60)),
        }
    );
    let rec = store.get(&key).await.unwrap().unwrap();
    assert_eq!(rec.state, RecordState::InDoubt);
    assert!(rec.reason.as_deref().unwrap().contains("inconclusive"), "{rec:?}");
    let audit = store.audit(Some(&key)).await.unwrap();
    let last = audit.iter().rfind(|e| e.action == "reconcile").expect("audited");
    assert_eq!(last.detail.as_ref().unwrap()["verdict"], "inconclusive");

    // A caller of the same input is blocked, the record still in doubt: never run.
    let report = engine
        .call_with_report(&tool, &run, CallOptions::default(), "bike".to_owned())
        .await;
    assert_eq!(report.disposition, Disposition::Blocked, "{report:?}");
    let rec = store.get(&key).await.unwrap().unwrap();
    assert_eq!(rec.state, RecordState::InDoubt);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_is_held_by_one_holder_at_a_time_and_lapses() {
    use effect_tool::store::election::LeaseAnswer;
    let store = effect_tool::MemoryStore::new();
    let (a, b) = (
        Engine::new(effect_tool::MemoryStore::new()),
        Engine::new(effect_tool::MemoryStore::new()),
    );
    let LeaseAnswer::Held(held) = store.acquire_lease("x", a.holder(), 200).await.unwrap() else {
        panic!("a free lease is taken")
    };
    match store.acquire_lease("x", b.holder(), 200).await.unwrap() {
        LeaseAnswer::HeldBy { holder, .. } => assert_eq!(holder.unwrap().instance, a.holder().instance),
        other => panic!("{other:?}"),
    }
    store.renew_lease(&held, 200).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let LeaseAnswer::Held(taken) = store.acquire_lease("x", b.holder(), 200).await.unwrap() else {
        panic!("a lapsed lease is taken over")
    };
    assert!(taken.attempt > held.attempt);
    assert!(store.renew_lease(&held, 200).await.is_err(), "the old holder is fenced");
    store.release_lease(&taken).await.unwrap();
    assert!(matches!(
        store.acquire_lease("x", a.holder(), 200).await.unwrap(),
        LeaseAnswer::Held(_)
    ));
}
