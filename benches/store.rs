//! The durable journals under the engine, each beside raw baselines measured in the same run
//! on the same database: a bare one-row INSERT commit and a point SELECT by primary key.
//!
//! Measured, per backend (SQLite `synchronous = FULL`, SQLite `NORMAL`, PostgreSQL):
//! - `raw insert commit`: one autocommitted one-row INSERT (the least a durable write costs);
//! - `raw point select`: one SELECT by primary key;
//! - `new call, sequential`: one new idempotent call through the engine (lookup, claim,
//!   execute a no-op, record), one caller;
//! - `new call, 64 callers`: the same with 64 concurrent callers (time per call, amortized);
//! - `replay`: a call whose result is recorded;
//! - `one_write new call`: one new call of the same idempotent tool declared `one_write`
//!   (lookup, the no-op, the record as the call's one write), and its SQL alone;
//! - `irreversible new call`: one new call of an irreversible tool (same input, same no-op),
//!   one caller: its claim is flushed before the tool runs, as the idempotent one's is not;
//! - `journal SQL alone`: the statements the journal runs for a new call (the lookup on
//!   SQLite, the claim's INSERT, the record's UPDATE) on the baseline's plain connection, with
//!   no engine: what a new call costs in the database itself, whoever sends it; and the same
//!   with the claim committed unflushed, as for an idempotent tool (SQLite: `PRAGMA synchronous
//!   = NORMAL` for the claim, back to `FULL` for the record; PostgreSQL: the claim's statement
//!   sets `synchronous_commit = off` for its transaction).
//!
//! Targets: an idempotent new call (sequential) ≤ 1.3 × one raw commit on SQLite FULL, ≤ 1.2 ×
//! one raw commit plus one raw point SELECT on PostgreSQL (its claim needs no flush of its own);
//! an irreversible new call ≤ 1.2 × two raw commits; 64 callers ≥ 4 × the sequential
//! throughput; replay ≤ 2 × a raw point SELECT.
//!
//! `EFFECT_TOOL_BENCH_ONLY=fresh` measures instead the first 2,000 new calls of a new SQLite
//! journal (FULL) against 2,000 on a warm one, in alternating blocks of 100, and against the
//! same journal's next 2,000 calls (its own steady state, as a harness outside measures it)
//! (target: fresh ≤ 1.2 × either).
//!
//! Run: `cargo bench --bench store` (SQLite), and with PostgreSQL:
//! `eval "$(.ci/postgres.sh start)" && cargo bench --features postgres --bench store`.
//! Each figure is the median of 9 rounds of ~0.25 s each (`EFFECT_TOOL_BENCH_ROUND_MS` changes it);
//! the measurements of one backend run interleaved, round by round, and each ratio is the
//! median of the ratios within a round, so a change in the machine's load skews them less.

mod common;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use effect_tool::store::sqlite::{SqliteOptions, SqliteStore, Synchronous};
use effect_tool::{CallOptions, Engine, RunContext, Store};

use common::{
    Calibration, Charge, NEXT, Op, Refund, RefundOneWrite, SqliteFloor, input, measure_interleaved, median, new_calls,
};

/// Rounds per measurement; each figure is the median over them.
const ROUNDS: usize = 9;

/// Each op of a round calibrated to about `EFFECT_TOOL_BENCH_ROUND_MS` (250 ms).
fn calibration() -> Calibration {
    let ms = std::env::var("EFFECT_TOOL_BENCH_ROUND_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(250);
    Calibration {
        budget: Duration::from_millis(ms),
        min: 64,
        max: 1 << 22,
    }
}

struct Figures {
    backend: String,
    /// What an idempotent new call is held to on this backend.
    target: IdempotentTarget,
    /// Where the `one_write` new call and its SQL alone are in each round.
    one_write: (usize, usize),
    /// Per round: raw commit, raw select, sequential, 64 callers, replay, irreversible
    /// sequential, the journal's SQL alone, the same with the claim unflushed (seconds per op);
    /// on SQLite also the replay's SQL alone and the store's lookup alone; then the `one_write`
    /// new call and its SQL alone.
    rounds: Vec<Vec<f64>>,
}

/// What an idempotent new call (whose claim needs no flush) is compared with.
#[derive(Clone, Copy)]
enum IdempotentTarget {
    /// ≤ this × one raw commit (SQLite FULL: the record's commit is the one fsync).
    OneCommit(Option<f64>),
    /// ≤ this × one raw commit plus one raw point select (PostgreSQL: the claim is a round
    /// trip that does not wait for the disk).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    CommitAndSelect(f64),
}

impl IdempotentTarget {
    /// The baseline of round `r`.
    fn base(self, r: &[f64]) -> f64 {
        match self {
            IdempotentTarget::OneCommit(_) => r[0],
            IdempotentTarget::CommitAndSelect(_) => r[0] + r[1],
        }
    }

    /// The most an idempotent new call may cost, in baselines (`None`: no target).
    fn limit(self) -> Option<f64> {
        match self {
            IdempotentTarget::OneCommit(t) => t,
            IdempotentTarget::CommitAndSelect(t) => Some(t),
        }
    }

    /// `ratio` (in baselines) against the limit: `≤ 1.3 ✓`, or `none`.
    fn verdict(self, ratio: f64) -> String {
        match self.limit() {
            Some(t) => format!("≤ {t} {}", if ratio <= t { "✓" } else { "✗" }),
            None => "none".to_owned(),
        }
    }

    fn label(self) -> &'static str {
        match self {
            IdempotentTarget::OneCommit(_) => "1 raw commit",
            IdempotentTarget::CommitAndSelect(_) => "1 raw commit + 1 raw select",
        }
    }
}

impl Figures {
    /// The median of measurement `i` over the rounds.
    fn col(&self, i: usize) -> f64 {
        median(self.rounds.iter().map(|r| r[i]).collect())
    }

    /// The median over the rounds of a ratio taken within each round.
    fn ratio(&self, within: impl Fn(&[f64]) -> f64) -> f64 {
        median(self.rounds.iter().map(|r| within(r)).collect())
    }
}

/// The engine measurements over `store`: a new call with one caller, with 64, a replay, a new
/// call of the irreversible tool.
fn engine_ops<'a>(rt: &'a tokio::runtime::Runtime, store: Arc<dyn Store>) -> Vec<Op<'a>> {
    let engine = Engine::new(store);
    let run = RunContext::new("bench");
    let (e1, r1) = (engine.clone(), run.clone());
    let sequential: Op<'a> = Box::new(move |n| new_calls(rt, &e1, &Refund, &r1, n));
    let (e3, r3) = (engine.clone(), run.clone());
    let irreversible: Op<'a> = Box::new(move |n| new_calls(rt, &e3, &Charge, &r3, n));
    let (e2, r2) = (engine.clone(), run.clone());
    let concurrent: Op<'a> = Box::new(move |n| {
        rt.block_on(async {
            let per_task = n.div_ceil(64);
            let start = Instant::now();
            let tasks: Vec<_> = (0..64)
                .map(|_| {
                    let (engine, run) = (e2.clone(), r2.clone());
                    tokio::spawn(async move {
                        for _ in 0..per_task {
                            let i = NEXT.fetch_add(1, Ordering::Relaxed);
                            engine
                                .call(&Refund, &run, CallOptions::default(), input(i))
                                .await
                                .unwrap();
                        }
                    })
                })
                .collect();
            for t in tasks {
                t.await.unwrap();
            }
            // Per call: the time of all of them over their number.
            start.elapsed().mul_f64(n as f64 / (per_task * 64) as f64)
        })
    });
    let recorded = NEXT.fetch_add(1, Ordering::Relaxed);
    rt.block_on(engine.call(&Refund, &run, CallOptions::default(), input(recorded)))
        .unwrap();
    let replay: Op<'a> = Box::new(move |n| {
        rt.block_on(async {
            let start = Instant::now();
            for _ in 0..n {
                engine
                    .call(&Refund, &run, CallOptions::default(), input(recorded))
                    .await
                    .unwrap();
            }
            start.elapsed()
        })
    });
    vec![sequential, concurrent, replay, irreversible]
}

/// A new call of the idempotent tool declared `one_write`, one caller: a lookup, the no-op,
/// the record (its one write).
fn one_write_op<'a>(rt: &'a tokio::runtime::Runtime, store: Arc<dyn Store>) -> Op<'a> {
    let (engine, run) = (Engine::new(store), RunContext::new("bench-one-write"));
    Box::new(move |n| new_calls(rt, &engine, &RefundOneWrite, &run, n))
}

fn synchronous_sql(synchronous: Synchronous) -> &'static str {
    match synchronous {
        Synchronous::Full => "FULL",
        Synchronous::Normal => "NORMAL",
    }
}

fn sqlite(rt: &tokio::runtime::Runtime, dir: &std::path::Path, synchronous: Synchronous) -> Figures {
    let path = dir.join(format!("bench-{synchronous:?}.db").to_lowercase());
    let options = SqliteOptions {
        synchronous,
        ..SqliteOptions::default()
    };
    let store = SqliteStore::open_with(&path, options).unwrap();
    // The raw baselines, on the same file with the same settings, from a plain connection.
    let raw = rusqlite::Connection::open(&path).unwrap();
    raw.busy_timeout(Duration::from_secs(10)).unwrap();
    raw.execute_batch(&format!(
        "PRAGMA journal_mode = WAL; PRAGMA synchronous = {};
         CREATE TABLE IF NOT EXISTS bench_raw (id INTEGER PRIMARY KEY, v TEXT NOT NULL);",
        synchronous_sql(synchronous)
    ))
    .unwrap();
    let payload = serde_json::to_string(&input(0)).unwrap();
    for _ in 0..1000 {
        raw.execute("INSERT INTO bench_raw (v) VALUES (?1)", [&payload])
            .unwrap();
    }
    let raw_commit: Op<'_> = Box::new(|n| {
        let mut st = raw.prepare_cached("INSERT INTO bench_raw (v) VALUES (?1)").unwrap();
        let start = Instant::now();
        for _ in 0..n {
            st.execute([&payload]).unwrap();
        }
        start.elapsed()
    });
    let raw_select: Op<'_> = Box::new(|n| {
        let mut st = raw.prepare_cached("SELECT v FROM bench_raw WHERE id = ?1").unwrap();
        let start = Instant::now();
        for i in 0..n {
            let id = 1 + (i as i64 * 7919) % 1000;
            let v: String = st.query_row([id], |r| r.get(0)).unwrap();
            std::hint::black_box(v);
        }
        start.elapsed()
    });
    // The journal's own SQL for a new call, no engine (`common::SqliteFloor`). `unflushed`: the
    // claim commits under `synchronous = NORMAL`, the record under the configured level, as the
    // store does for an idempotent tool.
    let floor = SqliteFloor::open(&path, synchronous_sql(synchronous));
    let journal_sql = |unflushed: bool| -> Op<'_> {
        let (floor, payload) = (&floor, &payload);
        let switch = unflushed && synchronous == Synchronous::Full;
        Box::new(move |n| floor.new_calls(n, payload, switch))
    };
    // Where a replay's time goes: a call recorded through the engine, then (a) the store's
    // replay SELECT of it on the plain connection (its columns read, nothing decoded): the SQL
    // alone; (b) the store's own `lookup_recorded` of it, the engine's first look at a key.
    let store: Arc<dyn Store> = Arc::new(store);
    let replayed = {
        let run = RunContext::new("bench-replay");
        let args = input(NEXT.fetch_add(1, Ordering::Relaxed));
        rt.block_on(Engine::new(store.clone()).call(&Refund, &run, CallOptions::default(), args.clone()))
            .unwrap();
        effect_tool::call::key::identify(&Refund, &run, &args).unwrap().key
    };
    let replay_sql: Op<'_> = {
        let (floor, key) = (floor.conn(), replayed.clone());
        Box::new(move |n| {
            let mut st = floor
                .prepare_cached(
                    "SELECT version, state, fingerprint, call_id, output, expires_at, call_ids FROM effect_records WHERE key = ?1",
                )
                .unwrap();
            let start = Instant::now();
            for _ in 0..n {
                let mut rows = st.query([&key]).unwrap();
                let r = rows.next().unwrap().unwrap();
                for i in 0..7 {
                    std::hint::black_box(r.get_ref(i).unwrap());
                }
            }
            start.elapsed()
        })
    };
    let store_lookup: Op<'_> = {
        let (store, key) = (store.clone(), replayed);
        Box::new(move |n| {
            rt.block_on(async {
                let start = Instant::now();
                for _ in 0..n {
                    std::hint::black_box(store.lookup_recorded(&key).await.unwrap().unwrap());
                }
                start.elapsed()
            })
        })
    };
    let one_write_sql: Op<'_> = {
        let (floor, payload) = (&floor, &payload);
        Box::new(move |n| floor.one_write_calls(n, payload))
    };
    let mut ops = vec![raw_commit, raw_select];
    ops.extend(engine_ops(rt, store.clone()));
    ops.push(journal_sql(false));
    ops.push(journal_sql(true));
    ops.push(replay_sql);
    ops.push(store_lookup);
    ops.push(one_write_op(rt, store));
    ops.push(one_write_sql);
    let one_write = (ops.len() - 2, ops.len() - 1);
    let target = match synchronous {
        Synchronous::Full => IdempotentTarget::OneCommit(Some(1.3)),
        Synchronous::Normal => IdempotentTarget::OneCommit(None),
    };
    Figures {
        backend: format!("SQLite, synchronous = {}", format!("{synchronous:?}").to_uppercase()),
        target,
        one_write,
        rounds: measure_interleaved(&mut ops, ROUNDS, &calibration()),
    }
}

#[cfg(feature = "postgres")]
fn postgres(rt: &tokio::runtime::Runtime) -> Option<Figures> {
    use common::RECORD_COLUMNS;
    use effect_tool::store::postgres::{PgOptions, PostgresStore};
    let Ok(url) = std::env::var("EFFECT_TOOL_PG_URL") else {
        eprintln!("*** SKIPPED PostgreSQL: EFFECT_TOOL_PG_URL is not set (eval \"$(.ci/postgres.sh start)\") ***");
        return None;
    };
    let (raw, store) = rt.block_on(async {
        let (raw, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.unwrap();
        tokio::spawn(conn);
        raw.batch_execute(
            "DROP SCHEMA IF EXISTS effect_tool_bench CASCADE;
             DROP TABLE IF EXISTS bench_raw;
             CREATE TABLE bench_raw (id bigserial PRIMARY KEY, v text NOT NULL);",
        )
        .await
        .unwrap();
        // Plain TCP, as the raw baseline's connection: the journal is measured, not TLS.
        let options = PgOptions {
            schema: "effect_tool_bench".to_owned(),
            pool_size: 32,
            ssl_mode: Some(effect_tool::store::postgres::SslMode::Disable),
            ..PgOptions::default()
        };
        (raw, PostgresStore::connect_with(&url, options).await.unwrap())
    });
    let payload = serde_json::to_string(&input(0)).unwrap();
    let insert = rt
        .block_on(raw.prepare("INSERT INTO bench_raw (v) VALUES ($1)"))
        .unwrap();
    rt.block_on(async {
        for _ in 0..1000 {
            raw.execute(&insert, &[&payload]).await.unwrap();
        }
    });
    let select = rt
        .block_on(raw.prepare("SELECT v FROM bench_raw WHERE id = $1"))
        .unwrap();
    let raw_commit: Op<'_> = Box::new(|n| {
        rt.block_on(async {
            let start = Instant::now();
            for _ in 0..n {
                raw.execute(&insert, &[&payload]).await.unwrap();
            }
            start.elapsed()
        })
    });
    let raw_select: Op<'_> = Box::new(|n| {
        rt.block_on(async {
            let start = Instant::now();
            for i in 0..n {
                let id = 1 + (i as i64 * 7919) % 1000;
                let row = raw.query_one(&select, &[&id]).await.unwrap();
                std::hint::black_box(row.get::<_, String>(0));
            }
            start.elapsed()
        })
    });
    // The journal's own SQL for a new call, on the plain connection, no engine: the claim's
    // INSERT (the engine does no lookup first on PostgreSQL: a claim answers replays) and the
    // record's compare-and-set UPDATE.
    let (claim, claim_unflushed, record) = rt.block_on(async {
        let claim = raw
            .prepare(&format!(
                "INSERT INTO effect_tool_bench.records ({RECORD_COLUMNS})
                 VALUES ($1, 1, 'issue_refund', 'idempotent', 'bench-floor', NULL, NULL, $2, $3::text::json, 'claimed',
                   1, $4, NULL, NULL, NULL, NULL, $5, $5, NULL)
                 ON CONFLICT (key) DO NOTHING RETURNING row_version"
            ))
            .await
            .unwrap();
        // The same insert, committed without waiting for its WAL flush, as the store sends
        // an idempotent tool's claim (the setting made inside the one statement).
        let claim_unflushed = raw
            .prepare(&format!(
                "INSERT INTO effect_tool_bench.records ({RECORD_COLUMNS})
                 SELECT $1::text, 1, 'issue_refund', 'idempotent', 'bench-floor', NULL, NULL, $2::text, $3::text::json,
                   'claimed', 1, $4::bigint, NULL, NULL, NULL, NULL, $5::bigint, $5::bigint, NULL
                 FROM (SELECT set_config('synchronous_commit', 'off', true)) AS one
                 ON CONFLICT (key) DO NOTHING RETURNING row_version"
            ))
            .await
            .unwrap();
        let record = raw
            .prepare(
                "UPDATE effect_tool_bench.records SET state = 'completed', lease_until = NULL, output = $2::text::json,
                   updated_at = $3, row_version = nextval('effect_tool_bench.row_version_seq')
                 WHERE key = $1 AND row_version = $4 AND attempt = 1 RETURNING row_version",
            )
            .await
            .unwrap();
        (claim, claim_unflushed, record)
    });
    let journal_sql = |unflushed: bool| -> Op<'_> {
        let (raw, record) = (&raw, &record);
        let (claim, payload) = (if unflushed { &claim_unflushed } else { &claim }, &payload);
        Box::new(move |n| {
            let keys = common::new_keys(n);
            rt.block_on(async {
                let start = Instant::now();
                for key in &keys {
                    let now = effect_tool::decide::record::now_millis();
                    let row = raw
                        .query_one(claim, &[key, &common::FINGERPRINT, payload, &(now + 30_000), &now])
                        .await
                        .unwrap();
                    let version: i64 = row.get(0);
                    raw.query_one(record, &[key, &"12345", &(now + 1), &version])
                        .await
                        .unwrap();
                }
                start.elapsed()
            })
        })
    };
    // A `one_write` call's SQL alone: the lookup that finds nothing (the store's whole-row
    // read), then the record's insert-if-new, flushed.
    let (lookup, insert_completed) = rt.block_on(async {
        let lookup = raw
            .prepare("SELECT * FROM effect_tool_bench.records WHERE key = $1")
            .await
            .unwrap();
        let insert = raw
            .prepare(&format!(
                "INSERT INTO effect_tool_bench.records ({RECORD_COLUMNS})
                 VALUES ($1, 1, 'issue_refund', 'idempotent', 'bench-floor', NULL, NULL, $2, $3::text::json,
                   'completed', 1, NULL, '12345'::json, NULL, NULL, NULL, $4, $4, NULL)
                 ON CONFLICT (key) DO NOTHING RETURNING row_version"
            ))
            .await
            .unwrap();
        (lookup, insert)
    });
    let store: Arc<dyn Store> = Arc::new(store);
    let mut ops = vec![raw_commit, raw_select];
    ops.extend(engine_ops(rt, store.clone()));
    ops.push(journal_sql(false));
    ops.push(journal_sql(true));
    ops.push(one_write_op(rt, store));
    let one_write_sql: Op<'_> = {
        let (raw, lookup, insert, payload) = (&raw, &lookup, &insert_completed, &payload);
        Box::new(move |n| {
            let keys = common::new_keys(n);
            rt.block_on(async {
                let start = Instant::now();
                for key in &keys {
                    let now = effect_tool::decide::record::now_millis();
                    assert!(raw.query_opt(lookup, &[key]).await.unwrap().is_none());
                    raw.query_one(insert, &[key, &common::FINGERPRINT, payload, &now])
                        .await
                        .unwrap();
                }
                start.elapsed()
            })
        })
    };
    ops.push(one_write_sql);
    let one_write = (ops.len() - 2, ops.len() - 1);
    Some(Figures {
        backend: "PostgreSQL 15, loopback TCP".to_owned(),
        target: IdempotentTarget::CommitAndSelect(1.2),
        one_write,
        rounds: measure_interleaved(&mut ops, ROUNDS, &calibration()),
    })
}

#[cfg(not(feature = "postgres"))]
fn postgres(_rt: &tokio::runtime::Runtime) -> Option<Figures> {
    eprintln!("*** SKIPPED PostgreSQL: built without `--features postgres` ***");
    None
}

fn us(secs: f64) -> String {
    format!("{:.1} µs", secs * 1e6)
}

/// The table of durability by class: an idempotent new call (its claim unflushed) against its
/// baseline, an irreversible one (its claim flushed) against two raw commits.
fn print_by_class(all: &[Figures], in_memory_irreversible: f64) {
    let mark = |ok: bool| if ok { "✓" } else { "✗" };
    println!("\nDurability by class, in the same rounds:\n");
    println!(
        "| backend | idempotent new call | ÷ its baseline (target) | its SQL alone (claim unflushed) | SQL ÷ baseline | call ÷ its SQL | irreversible new call | ÷ 2 raw commits (target ≤ 1.2) |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for f in all {
        let idem = f.ratio(|r| r[2] / f.target.base(r));
        let idem_target = f.target.verdict(idem);
        let irr = f.ratio(|r| r[5] / (2.0 * r[0]));
        println!(
            "| {} | {} | {idem:.2} ÷ {} ({idem_target}) | {} | {:.2} | {:.2} | {} | {irr:.2} {} |",
            f.backend,
            us(f.col(2)),
            f.target.label(),
            us(f.col(7)),
            f.ratio(|r| r[7] / f.target.base(r)),
            f.ratio(|r| r[2] / r[7]),
            us(f.col(5)),
            mark(irr <= 1.2),
        );
    }
    println!(
        "| in-memory store | — | — | — | — | — | {} | — |",
        us(in_memory_irreversible)
    );
}

/// The idempotent new call declared `one_write` (its one write is its record) beside the
/// same call with a claim, the idempotent target's baseline and its own SQL sent by hand (the
/// lookup, then the record's insert: on SQLite in a transaction that reads the key again).
fn print_one_write(all: &[Figures]) {
    println!("\nAn idempotent new call declared `one_write`, in the same rounds:\n");
    println!(
        "| backend | one_write new call | ÷ its baseline (target) | with a claim (the same tool undeclared) | one_write ÷ with a claim | its SQL alone | SQL ÷ baseline | call ÷ its SQL |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for f in all {
        let (call, sql) = f.one_write;
        let ratio = f.ratio(|r| r[call] / f.target.base(r));
        let target = f.target.verdict(ratio);
        println!(
            "| {} | {} | {ratio:.2} ÷ {} ({target}) | {} | {:.2} | {} | {:.2} | {:.2} |",
            f.backend,
            us(f.col(call)),
            f.target.label(),
            us(f.col(2)),
            f.ratio(|r| r[call] / r[2]),
            us(f.col(sql)),
            f.ratio(|r| r[sql] / f.target.base(r)),
            f.ratio(|r| r[call] / r[sql]),
        );
    }
}

/// Calls in a fresh journal's first stretch, and in each warm sample.
const FRESH_CALLS: u64 = 2_000;

/// `n` sequential new calls through `engine`: the time per call (seconds).
fn timed_calls(rt: &tokio::runtime::Runtime, engine: &Engine, n: u64) -> f64 {
    new_calls(rt, engine, &Refund, &RunContext::new("bench-fresh"), n).as_secs_f64() / n as f64
}

/// Calls per block: the fresh and the warm journal take turns, a block each.
const FRESH_BLOCK: u64 = 100;

/// A fresh journal against a warm one (SQLite FULL): per round, the first `FRESH_CALLS` new
/// calls of a journal just created (its files growing from nothing) and `FRESH_CALLS` on a
/// journal warmed by 10,000 calls, in alternating blocks of `FRESH_BLOCK` calls, so that the
/// disk's swings (its fsync latency moves by 10× from one minute to the next on a shared
/// machine) hit both alike.
fn fresh_vs_warm(rt: &tokio::runtime::Runtime, dir: &std::path::Path) {
    let warm = Engine::new(SqliteStore::open(dir.join("warm.db")).unwrap());
    timed_calls(rt, &warm, 10_000);
    // Per round: the fresh journal's first calls, the warm journal's calls beside them, and the
    // same fresh journal's next calls (its own steady state, as a harness outside measures it).
    let rounds: Vec<(f64, f64, f64)> = (0..ROUNDS)
        .map(|i| {
            let path = dir.join(format!("fresh-{i}.db"));
            let fresh = Engine::new(SqliteStore::open(&path).unwrap());
            let (mut f, mut w, mut later) = (0.0, 0.0, 0.0);
            for _ in 0..FRESH_CALLS / FRESH_BLOCK {
                f += timed_calls(rt, &fresh, FRESH_BLOCK);
                w += timed_calls(rt, &warm, FRESH_BLOCK);
            }
            for _ in 0..FRESH_CALLS / FRESH_BLOCK {
                later += timed_calls(rt, &fresh, FRESH_BLOCK);
                w += timed_calls(rt, &warm, FRESH_BLOCK);
            }
            drop(fresh);
            for suffix in ["", "-wal", "-shm"] {
                let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
            }
            let blocks = (FRESH_CALLS / FRESH_BLOCK) as f64;
            (f / blocks, w / (2.0 * blocks), later / blocks)
        })
        .collect();
    let col = |pick: fn(&(f64, f64, f64)) -> f64| median(rounds.iter().map(pick).collect());
    let (fresh, warm, later) = (col(|r| r.0), col(|r| r.1), col(|r| r.2));
    let ratio = col(|r| r.0 / r.1);
    let own = col(|r| r.0 / r.2);
    println!(
        "\n| SQLite FULL | fresh: first {FRESH_CALLS} calls | warm: another journal | fresh ÷ warm (target ≤ 1.2) | the same journal's next {FRESH_CALLS} calls | first ÷ next (target ≤ 1.2) |"
    );
    println!("|---|---|---|---|---|---|");
    let mark = |r: f64| if r <= 1.2 { "✓" } else { "✗" };
    println!(
        "| per call | {} | {} | {ratio:.2} {} | {} | {own:.2} {} |",
        us(fresh),
        us(warm),
        mark(ratio),
        us(later),
        mark(own)
    );
    println!("\n(medians of {ROUNDS} interleaved rounds; each ratio is the median of its per-round ratios)");
}

fn main() {
    // `cargo bench` passes `--bench`; a filter argument is not supported, everything runs.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    // `EFFECT_TOOL_BENCH_ONLY=sqlite` or `=postgres` runs one backend; `=fresh` the fresh journal.
    let only = std::env::var("EFFECT_TOOL_BENCH_ONLY").unwrap_or_default();
    if only == "fresh" {
        fresh_vs_warm(&rt, dir.path());
        return;
    }
    let mut all = Vec::new();
    if only.is_empty() || only == "sqlite" {
        all.push(sqlite(&rt, dir.path(), Synchronous::Full));
        all.push(sqlite(&rt, dir.path(), Synchronous::Normal));
    }
    if only.is_empty() || only == "postgres" {
        all.extend(postgres(&rt));
    }
    // The engine's own cost, without a database: what no backend can go below.
    let floor = {
        let mut ops = engine_ops(&rt, Arc::new(effect_tool::MemoryStore::new()));
        measure_interleaved(&mut ops, ROUNDS, &calibration())
    };
    println!(
        "\n| backend | raw insert commit | raw point select | new call, sequential | ÷ 2 raw commits | new call, 64 callers (per call) | speed-up (target ≥ 4) | replay | ÷ raw select (target ≤ 2) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for f in &all {
        let seq_ratio = f.ratio(|r| r[2] / (2.0 * r[0]));
        let speedup = f.ratio(|r| r[2] / r[3]);
        let replay_ratio = f.ratio(|r| r[4] / r[1]);
        let mark = |ok: bool| if ok { "✓" } else { "✗" };
        println!(
            "| {} | {} | {} | {} | {:.2} | {} | {:.1}× {} | {} | {:.2} {} |",
            f.backend,
            us(f.col(0)),
            us(f.col(1)),
            us(f.col(2)),
            seq_ratio,
            us(f.col(3)),
            speedup,
            mark(speedup >= 4.0),
            us(f.col(4)),
            replay_ratio,
            mark(replay_ratio <= 2.0),
        );
    }
    let col = |i: usize| median(floor.iter().map(|r| r[i]).collect());
    let engine_row = format!(
        "| in-memory store (the engine alone, no database) | — | — | {} | — | {} | {:.1}× | {} | — |",
        us(col(0)),
        us(col(1)),
        col(0) / col(1),
        us(col(2))
    );
    println!("{engine_row}");
    print_by_class(&all, col(3));
    println!(
        "\nWhere a new call's time goes: the journal's own SQL for it (lookup on SQLite, claim, record) sent by hand \
         on a plain connection, no engine, in the same rounds:\n"
    );
    println!(
        "| backend | journal SQL alone | ÷ 2 raw commits (the SQL's own cost) | new call, sequential ÷ journal SQL (the engine's) |"
    );
    println!("|---|---|---|---|");
    for f in &all {
        println!(
            "| {} | {} | {:.2} | {:.2} |",
            f.backend,
            us(f.col(6)),
            f.ratio(|r| r[6] / (2.0 * r[0])),
            f.ratio(|r| r[2] / r[6]),
        );
    }
    println!(
        "\nWhere a replay's time goes (SQLite): the store's replay SELECT sent by hand on a plain connection, \
         and the store's own `lookup_recorded`, in the same rounds:\n"
    );
    println!(
        "| backend | replay | ÷ raw select (target ≤ 1.5) | its SQL alone | SQL ÷ raw select | the store's lookup | lookup ÷ raw select | replay ÷ lookup (the engine's) |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for f in all.iter().filter(|f| f.backend.starts_with("SQLite")) {
        println!(
            "| {} | {} | {:.2} | {} | {:.2} | {} | {:.2} | {:.2} |",
            f.backend,
            us(f.col(4)),
            f.ratio(|r| r[4] / r[1]),
            us(f.col(8)),
            f.ratio(|r| r[8] / r[1]),
            us(f.col(9)),
            f.ratio(|r| r[9] / r[1]),
            f.ratio(|r| r[4] / r[9]),
        );
    }
    print_one_write(&all);
    println!("\n(medians of {ROUNDS} interleaved rounds; each ratio is the median of its per-round ratios)");
}
