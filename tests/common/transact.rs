//! Transactional tools (`#[tool(transactional)]`, issue 34 item 1), the scenarios every journal
//! with transactions passes: SQLite (`tests/store/transactional.rs`), PostgreSQL (the same
//! file) and PostgreSQL through PgBouncer in transaction mode
//! (`tests/pg_production/transactional_bouncer.rs`).
//!
//! The effect is a row in the application's own table (`payments`), in the database that holds
//! the journal; every count is read from that table on a connection of its own (the server's,
//! never the pooler's, never the engine's bookkeeping).
//!
//! The crash cases run a child process (the test binary itself, `--ignored --exact <child
//! test>`), which stops for good at one step of the call and is SIGKILLed there: after the
//! claim, after the tool's write, after the record, after the commit. The restarted call must
//! find exactly one payment and a completed record, and nothing in doubt, ever.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use effect_tool::store::{Filter, Store};
use effect_tool::{
    CallOptions, Disposition, EffectCtx, Engine, EngineConfig, RecordState, RunContext, ToolError, tool,
};
use serde::{Deserialize, Serialize};

/// The table the tool writes to, schema-qualified where the journal is in a schema.
#[derive(Clone, Debug)]
pub struct AppTable(pub String);

/// Where a step of the call pauses for good, in a child process: `<step>:<file>`.
pub const PAUSE_ENV: &str = "EFFECT_TOOL_TX_PAUSE";
/// The child's job, as JSON.
pub const JOB_ENV: &str = "EFFECT_TOOL_TX_JOB";

/// Record a payment of an order in the application's own table, in the journal's transaction.
#[tool(effect = "irreversible", transactional, key = |a| format!("pay:{}", a.order))]
pub async fn pay(
    ctx: &EffectCtx,
    #[secret] table: &AppTable,
    /// The order.
    order: String,
    /// The amount, in cents.
    cents: i64,
    /// Fail after the write (the write must not survive).
    fail_after_write: bool,
    /// Milliseconds to wait after the write (so that racing calls overlap).
    linger_ms: u64,
) -> Result<String, ToolError> {
    let definitive = |e: &dyn std::fmt::Display| ToolError::definitive(e.to_string());
    #[cfg(feature = "sqlite")]
    if let Ok(tx) = ctx.transaction::<effect_tool::store::sqlite::SqliteTransaction>() {
        let sql = format!("INSERT INTO {} (order_id, cents) VALUES (?1, ?2)", table.0);
        tx.with(|conn| conn.execute(&sql, (&order, cents)))
            .map_err(|e| definitive(&e))?;
        return after_write(order, fail_after_write, linger_ms).await;
    }
    #[cfg(feature = "postgres")]
    if let Ok(tx) = ctx.transaction::<effect_tool::store::postgres::PgTransaction>() {
        use effect_tool::store::postgres::tokio_postgres::types::Type;
        let sql = format!("INSERT INTO {} (order_id, cents) VALUES ($1, $2)", table.0);
        // Unnamed (`query_typed`): carried by any pooler mode.
        tx.client()
            .query_typed(&sql, &[(&order, Type::TEXT), (&cents, Type::INT8)])
            .await
            .map_err(|e| definitive(&e))?;
        return after_write(order, fail_after_write, linger_ms).await;
    }
    let err = ctx
        .transaction::<AppTable>()
        .expect_err("no store hands out an AppTable");
    Err(definitive(&err))
}

async fn after_write(order: String, fail: bool, linger_ms: u64) -> Result<String, ToolError> {
    pause_at("written");
    if linger_ms > 0 {
        tokio::time::sleep(Duration::from_millis(linger_ms)).await;
    }
    if fail {
        return Err(ToolError::definitive("the card was declined after the row was written"));
    }
    Ok(format!("paid {order}"))
}

/// In a child process: stop for good at `step` when told to (the engine's own steps are
/// `claimed`, `recorded`, `committed`; `written` is the tool's).
fn pause_at(step: &str) {
    if let Ok(pause) = std::env::var(PAUSE_ENV)
        && let Some((at, file)) = pause.split_once(':')
        && at == step
    {
        std::fs::write(file, step).unwrap();
        loop {
            std::thread::sleep(Duration::from_secs(3600));
        }
    }
}

/// A journal with transactions, and the application's table beside it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Db {
    /// A SQLite file: the journal's tables and `payments`.
    Sqlite { path: PathBuf },
    /// A PostgreSQL schema: the journal's tables and `payments`. `store_url` is what the
    /// store connects to (a pooler, maybe); `server_url` the server itself, for counting.
    Postgres {
        store_url: String,
        server_url: String,
        schema: String,
    },
}

impl Db {
    /// A fresh SQLite journal in `dir`.
    pub fn sqlite(dir: &std::path::Path) -> Db {
        Db::Sqlite {
            path: dir.join("journal.db"),
        }
    }

    /// A fresh PostgreSQL schema, the store connecting through `store_url`.
    pub fn postgres(store_url: &str, server_url: &str) -> Db {
        Db::Postgres {
            store_url: store_url.to_owned(),
            server_url: server_url.to_owned(),
            schema: format!("et_tx_{}_{:08x}", std::process::id(), unique()),
        }
    }

    /// The journal, opened as an application would (its tables created on first open).
    pub async fn store(&self) -> Arc<dyn Store> {
        match self {
            #[cfg(feature = "sqlite")]
            Db::Sqlite { path } => Arc::new(effect_tool::store::sqlite::SqliteStore::open(path).unwrap()),
            #[cfg(feature = "postgres")]
            Db::Postgres { store_url, schema, .. } => {
                use effect_tool::store::postgres::{PgOptions, PostgresStore};
                let options = PgOptions {
                    schema: schema.clone(),
                    pool_size: 4,
                    ..PgOptions::default()
                };
                Arc::new(PostgresStore::connect_with(store_url, options).await.unwrap())
            }
            #[allow(unreachable_patterns)]
            _ => panic!("this backend's feature is off"),
        }
    }

    /// The application's table, as the tool names it.
    pub fn table(&self) -> AppTable {
        match self {
            Db::Sqlite { .. } => AppTable("payments".to_owned()),
            Db::Postgres { schema, .. } => AppTable(format!("{schema}.payments")),
        }
    }

    /// Open the journal (creating it) and create the application's table beside it.
    pub async fn create(&self) -> Arc<dyn Store> {
        let store = self.store().await;
        self.sql(&format!(
            "CREATE TABLE {} (order_id TEXT NOT NULL, cents BIGINT NOT NULL)",
            self.table().0
        ))
        .await;
        store
    }

    /// How many payments the application's table holds for `order`, read on a connection of
    /// its own.
    pub async fn payments(&self, order: &str) -> i64 {
        match self {
            #[cfg(feature = "sqlite")]
            Db::Sqlite { path } => {
                let conn = rusqlite::Connection::open(path).unwrap();
                conn.query_row("SELECT count(*) FROM payments WHERE order_id = ?1", [order], |r| {
                    r.get(0)
                })
                .unwrap()
            }
            #[cfg(feature = "postgres")]
            Db::Postgres { server_url, schema, .. } => {
                let client = raw(server_url).await;
                let row = client
                    .query_one(
                        &format!("SELECT count(*) FROM {schema}.payments WHERE order_id = $1"),
                        &[&order],
                    )
                    .await
                    .unwrap();
                row.get(0)
            }
            #[allow(unreachable_patterns)]
            _ => panic!("this backend's feature is off"),
        }
    }

    async fn sql(&self, sql: &str) {
        match self {
            #[cfg(feature = "sqlite")]
            Db::Sqlite { path } => {
                rusqlite::Connection::open(path).unwrap().execute_batch(sql).unwrap();
            }
            #[cfg(feature = "postgres")]
            Db::Postgres { server_url, .. } => {
                raw(server_url).await.batch_execute(sql).await.unwrap();
            }
            #[allow(unreachable_patterns)]
            _ => panic!("this backend's feature is off"),
        }
    }

    /// Remove the PostgreSQL schema (a SQLite file goes with its folder).
    pub async fn drop_schema(&self) {
        if let Db::Postgres { schema, .. } = self {
            self.sql(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE")).await;
        }
    }
}

/// A number no other schema of this process took (time and a counter).
fn unique() -> u32 {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    nanos
        ^ N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            .wrapping_mul(0x9e37_79b9)
}

#[cfg(feature = "postgres")]
async fn raw(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(conn);
    client
}

/// The engine settings of these cases: a short lease (unused by transactional calls, which
/// hold none) and a quick poll.
pub fn config() -> EngineConfig {
    EngineConfig {
        lease: Duration::from_millis(400),
        poll_interval: Duration::from_millis(10),
    }
}

/// Call `pay` for `order` on `engine`.
pub async fn call_pay(
    engine: &Engine,
    db: &Db,
    order: &str,
    fail_after_write: bool,
    linger_ms: u64,
) -> (Disposition, Result<String, effect_tool::EffectError<ToolError>>) {
    let run = RunContext::new("tx-run").with_value(db.table());
    let args = pay_args(order, fail_after_write, linger_ms);
    let report = engine.call_with_report(&Pay, &run, CallOptions::default(), args).await;
    (report.disposition, report.result)
}

fn pay_args(order: &str, fail_after_write: bool, linger_ms: u64) -> PayArgs {
    PayArgs {
        order: order.to_owned(),
        cents: 2500,
        fail_after_write,
        linger_ms,
    }
}

/// The journal key of `pay` for `order` (in the run [`call_pay`] uses).
pub fn key(db: &Db, order: &str) -> String {
    let run = RunContext::new("tx-run").with_value(db.table());
    super::key_of(&Pay, &run, &pay_args(order, false, 0))
}

/// Records a person would have to look at: in doubt, or claims (live or stale).
pub async fn records_in_doubt(store: &dyn Store) -> usize {
    let filter = Filter {
        states: vec![RecordState::InDoubt, RecordState::Claimed],
        ..Filter::all()
    };
    store.list(&filter).await.unwrap().len()
}

/// One call executes, a second replays; one payment, one completed record.
pub async fn executes_once_then_replays(db: &Db) {
    let store = db.create().await;
    let engine = Engine::with_config(store.clone(), config());
    let (d, r) = call_pay(&engine, db, "A-1", false, 0).await;
    assert_eq!(r.as_deref().ok(), Some("paid A-1"), "{r:?}");
    assert_eq!(d, Disposition::Executed);
    // A new engine (another worker): the record, not a second payment.
    let engine = Engine::with_config(db.store().await, config());
    let (d, r) = call_pay(&engine, db, "A-1", false, 0).await;
    assert_eq!(r.as_deref().ok(), Some("paid A-1"), "{r:?}");
    assert_eq!(d, Disposition::Replayed);
    assert_eq!(db.payments("A-1").await, 1);
    let rec = store.get(&key(db, "A-1")).await.unwrap().expect("the record");
    assert_eq!(rec.state, RecordState::Completed);
    assert_eq!(rec.attempt, 1);
    assert_eq!(records_in_doubt(&*store).await, 0);
    db.drop_schema().await;
}

/// A tool that fails after its write leaves neither the write nor a record; the next call
/// then pays once.
pub async fn a_failure_after_the_write_leaves_nothing(db: &Db) {
    let store = db.create().await;
    let engine = Engine::with_config(store.clone(), config());
    let (d, r) = call_pay(&engine, db, "B-1", true, 0).await;
    let err = r.expect_err("the tool failed");
    assert_eq!(d, Disposition::Failed);
    assert!(err.to_string().contains("declined"), "{err}");
    assert_eq!(db.payments("B-1").await, 0, "the write was rolled back");
    assert!(
        store.get(&key(db, "B-1")).await.unwrap().is_none(),
        "no record, not even a claim"
    );
    assert!(
        store.audit(Some(&key(db, "B-1"))).await.unwrap().is_empty(),
        "no audit entry either"
    );
    let (d, r) = call_pay(&engine, db, "B-1", false, 0).await;
    assert_eq!(r.as_deref().ok(), Some("paid B-1"), "{r:?}");
    assert_eq!(d, Disposition::Executed);
    assert_eq!(db.payments("B-1").await, 1);
    assert_eq!(records_in_doubt(&*store).await, 0);
    db.drop_schema().await;
}

/// Two calls of one key on two store objects (two workers, no shared memory) race: one
/// commits, the other waits for that commit and replays it.
pub async fn racing_calls_of_one_key_pay_once(db: &Db) {
    let store = db.create().await;
    let a = Engine::with_config(store.clone(), config());
    let b = Engine::with_config(db.store().await, config());
    for round in 0..3 {
        let order = format!("C-{round}");
        let (ra, rb) = tokio::join!(
            call_pay(&a, db, &order, false, 150),
            call_pay(&b, db, &order, false, 150)
        );
        let mut dispositions = [ra.0, rb.0];
        dispositions.sort_by_key(|d| format!("{d:?}"));
        assert_eq!(
            dispositions,
            [Disposition::Executed, Disposition::Replayed],
            "{ra:?} {rb:?}"
        );
        assert_eq!(ra.1.as_deref().ok(), Some(format!("paid {order}").as_str()));
        assert_eq!(rb.1.as_deref().ok(), Some(format!("paid {order}").as_str()));
        assert_eq!(db.payments(&order).await, 1, "exactly one payment for {order}");
    }
    assert_eq!(records_in_doubt(&*store).await, 0);
    db.drop_schema().await;
}

/// The steps a child process is killed at.
pub const STEPS: [&str; 4] = ["claimed", "written", "recorded", "committed"];

/// What a child process does.
#[derive(Debug, Serialize, Deserialize)]
struct Job {
    db: Db,
    order: String,
}

/// The body of the child test: call `pay` as told, and stop where `PAUSE_ENV` says.
pub fn child_main() {
    let Ok(job) = std::env::var(JOB_ENV) else {
        eprintln!("the entry point of the transactional crash cases' child processes; nothing to do");
        return;
    };
    let job: Job = serde_json::from_str(&job).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let engine = Engine::with_config(job.db.store().await, config());
        let result = call_pay(&engine, &job.db, &job.order, false, 0).await;
        panic!("the child should have stopped inside the call, but it returned {result:?}");
    });
}

/// The crash cases: for every step, a child process calls `pay` and is SIGKILLed there; the
/// restarted call pays exactly once and nothing is ever in doubt. `child_test` is the full
/// name of the test that runs [`child_main`] (`<file>::<fn>`).
pub async fn crash_at_every_step(db: &Db, child_test: &str, dir: &std::path::Path) {
    let store = db.create().await;
    for step in STEPS {
        let order = format!("D-{step}");
        let paused = dir.join(format!("paused-{step}"));
        let job = Job {
            db: db.clone(),
            order: order.clone(),
        };
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--ignored", "--exact", child_test, "--nocapture", "--test-threads=1"])
            .env(JOB_ENV, serde_json::to_string(&job).unwrap())
            .env(PAUSE_ENV, format!("{step}:{}", paused.display()))
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        while !paused.exists() {
            if let Ok(Some(status)) = child.try_wait() {
                panic!("the child exited ({status}) before reaching `{step}`");
            }
            assert!(Instant::now() < deadline, "the child never reached `{step}`");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        child.kill().unwrap(); // SIGKILL
        let status = child.wait().unwrap();
        assert!(!status.success(), "killed at `{step}`: {status}");

        // What the dead process left: everything or nothing, never half, never in doubt.
        let committed = step == "committed";
        let key = key(db, &order);
        let left = db.payments(&order).await;
        assert_eq!(left, i64::from(committed), "payments after a kill at `{step}`");
        let rec = store.get(&key).await.unwrap();
        match &rec {
            Some(rec) => {
                assert!(committed, "a record after a kill at `{step}`: {rec:?}");
                assert_eq!(rec.state, RecordState::Completed, "{rec:?}");
            }
            None => assert!(!committed, "no record after the commit"),
        }
        assert_eq!(records_in_doubt(&*store).await, 0, "nothing in doubt after `{step}`");

        // The restarted call: pays if nothing was committed, replays if it was.
        let engine = Engine::with_config(db.store().await, config());
        let (d, r) = call_pay(&engine, db, &order, false, 0).await;
        assert_eq!(
            r.as_deref().ok(),
            Some(format!("paid {order}").as_str()),
            "after `{step}`: {r:?}"
        );
        let expected = if committed {
            Disposition::Replayed
        } else {
            Disposition::Executed
        };
        assert_eq!(d, expected, "after a kill at `{step}`");
        assert_eq!(db.payments(&order).await, 1, "exactly one payment after `{step}`");
        let rec = store.get(&key).await.unwrap().unwrap();
        assert_eq!(rec.state, RecordState::Completed);
    }
    assert_eq!(records_in_doubt(&*store).await, 0);
    db.drop_schema().await;
}
