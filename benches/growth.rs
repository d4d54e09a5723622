//! How a journal's size changes a call's latency (issue 16, "Growth"), and what `gc` of a large
//! journal costs.
//!
//! For one backend (`GROWTH_BACKEND=sqlite`, SQLite `synchronous = FULL`, or `postgres`), the
//! journal is filled to each size of `GROWTH_SIZES` (default 10^4, 10^5, 10^6, 10^7 records) in
//! turn, and at each size four measurements run interleaved, round by round (as in
//! `benches/store.rs`), each ratio taken within a round:
//! - `raw commit`: one autocommitted one-row INSERT into a small table of the same database;
//! - `raw select`: one point SELECT by key of a random record of the journal's own table;
//! - `new call`: a new idempotent call through the real `Engine` (its key lands at a random place
//!   of the journal's key index);
//! - `replay`: a call whose result is recorded, of a random record of the journal.
//!
//! The journal is filled with real records: one call through the engine makes the template row;
//! every other row is that row with the key, fingerprint, input, run and times of another call
//! (the key and fingerprint computed as the engine computes them, `key::identify`), so every
//! row is a completed record the engine replays, keys are spread over the key index as real
//! ones are, and the other indexes (run, expiry) hold what real rows put there. 9 in 10 records
//! carry an expiry in the future (a tool with a ttl): `gc` at a `now` past it (the store's
//! `gc(now)`) makes them collectable without touching them.
//!
//! SQLite: the rows are inserted with the store closed, from one connection with
//! `synchronous = OFF` and a 2 GB page cache, in transactions of 100,000 rows sorted by key
//! (still in WAL: leaving it for `journal_mode = OFF` failed with `SQLITE_BUSY` while the
//! closed store's threads still held the file); then the WAL is checkpointed and truncated and
//! the store opened again. PostgreSQL: the journal's
//! indexes are dropped, the rows inserted 10,000 per statement (`unnest`), the indexes created
//! again from their own definitions, then `VACUUM ANALYZE` (what autovacuum would have done).
//!
//! With `GROWTH_GC=1`, after the last size: `gc` of the whole journal (records per second),
//! while one caller makes new calls beside it: the longest call it saw during the collection.
//!
//! Output: a Markdown table on stdout, and a line per size (tab-separated) appended to
//! `GROWTH_OUT` (default `target/growth/results.tsv`) for `benches/growth.sh`'s plot.
//!
//! Run: `benches/growth.sh` (both backends and the plot), or
//! `GROWTH_BACKEND=sqlite cargo bench --bench growth`.

mod common;

use std::io::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use effect_tool::store::sqlite::{SqliteOptions, SqliteStore};
use effect_tool::{CallOptions, Engine, RunContext, Store};

use common::{Calibration, Op, Refund, RefundArgs, input, measure_interleaved, median};

/// Records per run in the filled journal.
const PER_RUN: u64 = 1_000;

/// The run of filled record `n`.
fn run_of(n: u64) -> String {
    format!("growth-{}", n / PER_RUN)
}

/// Inputs of new calls start here, far above any filled record's.
const NEW_BASE: u64 = 1 << 40;
static NEXT: AtomicU64 = AtomicU64::new(NEW_BASE);

/// When the filled records expire: a day from now (so none has during the measurements);
/// `gc` is run at a `now` past it.
fn expiry_base() -> i64 {
    effect_tool::decide::record::now_millis() + 86_400_000
}

/// SplitMix64: random record numbers without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// What varies from one filled row to the next.
struct Row {
    key: String,
    fingerprint: String,
    input: String,
    run_id: String,
    created_at: i64,
    expires_at: Option<i64>,
}

/// Filled record `n`: the key and fingerprint the engine computes for its call.
fn row(n: u64, expires: i64) -> Row {
    let run_id = run_of(n);
    let id = effect_tool::call::key::identify(&Refund, &RunContext::new(run_id.clone()), &input(n)).unwrap();
    let created_at = 1_700_000_000_000 + n as i64;
    Row {
        key: id.key,
        fingerprint: id.fingerprint,
        input: serde_json::to_string(&id.input).unwrap(),
        run_id,
        created_at,
        // 9 in 10 carry an expiry (in the future until gc's `now`).
        expires_at: (!n.is_multiple_of(10)).then_some(expires + (n % 1000) as i64),
    }
}

/// Rows `from..to`, sorted by key, in chunks of at most `chunk`.
fn rows_sorted(from: u64, to: u64, expires: i64) -> Vec<Row> {
    let mut rows: Vec<Row> = (from..to).map(|n| row(n, expires)).collect();
    rows.sort_by(|a, b| a.key.cmp(&b.key));
    rows
}

/// Rounds per size; each figure is the median over them.
fn rounds() -> usize {
    env_or("GROWTH_ROUNDS", 7)
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Each op of a round calibrated to about `GROWTH_ROUND_MS` (300 ms).
fn calibration() -> Calibration {
    Calibration {
        budget: Duration::from_millis(env_or("GROWTH_ROUND_MS", 300)),
        min: 32,
        max: 1 << 20,
    }
}

/// Measure one size, `size` records filled in `fill_secs`: the two raw baselines `raw` and the
/// engine's ops over `engine`, interleaved. The figures go to `results` and to stderr.
fn measure_size(
    rt: &tokio::runtime::Runtime,
    raw: [Op<'_>; 2],
    engine: Engine,
    size: u64,
    fill_secs: f64,
    seed: u64,
    results: &mut Vec<Size>,
) {
    let mut ops = Vec::from(raw);
    ops.extend(engine_ops(rt, engine, size, seed));
    let rounds = measure_interleaved(&mut ops, rounds(), &calibration());
    drop(ops);
    results.push(Size {
        records: size,
        fill_secs,
        rounds,
    });
    progress(results.last().unwrap());
}

/// Whether gc is measured after `size`: at the last size, with `GROWTH_GC=1`.
fn gc_at(size: u64, last: u64) -> bool {
    size == last && std::env::var("GROWTH_GC").is_ok_and(|v| v == "1")
}

/// The engine's two measurements over `engine`: new calls, and replays of random filled
/// records among the first `filled`.
fn engine_ops<'a>(rt: &'a tokio::runtime::Runtime, engine: Engine, filled: u64, seed: u64) -> [Op<'a>; 2] {
    let e1 = engine.clone();
    let new_run = RunContext::new("growth-new");
    let new_call: Op<'a> = Box::new(move |n| {
        rt.block_on(async {
            let start = Instant::now();
            for _ in 0..n {
                let i = NEXT.fetch_add(1, Ordering::Relaxed);
                e1.call(&Refund, &new_run, CallOptions::default(), input(i))
                    .await
                    .expect("a new call failed");
            }
            start.elapsed()
        })
    });
    let mut rng = Rng(seed);
    let replay: Op<'a> = Box::new(move |n| {
        let picks: Vec<(RunContext, RefundArgs)> = (0..n)
            .map(|_| {
                let k = rng.below(filled);
                (RunContext::new(run_of(k)), input(k))
            })
            .collect();
        rt.block_on(async {
            let start = Instant::now();
            for (run, args) in picks {
                let report = engine
                    .call_with_report(&Refund, &run, CallOptions::default(), args)
                    .await;
                assert!(report.result.is_ok(), "a replay failed");
                assert_eq!(report.disposition, effect_tool::Disposition::Replayed, "not a replay");
            }
            start.elapsed()
        })
    });
    [new_call, replay]
}

/// The figures of one size.
struct Size {
    records: u64,
    fill_secs: f64,
    /// Per round: raw commit, raw select, new call, replay (seconds per op).
    rounds: Vec<Vec<f64>>,
}

impl Size {
    fn col(&self, i: usize) -> f64 {
        median(self.rounds.iter().map(|r| r[i]).collect())
    }

    fn ratio(&self, f: impl Fn(&[f64]) -> f64) -> f64 {
        median(self.rounds.iter().map(|r| f(r)).collect())
    }
}

/// `n` random keys of filled records among the first `filled`.
fn random_keys(rng: &mut Rng, filled: u64, n: u64) -> Vec<String> {
    (0..n)
        .map(|_| {
            let k = rng.below(filled);
            effect_tool::call::key::identify(&Refund, &RunContext::new(run_of(k)), &input(k))
                .unwrap()
                .key
        })
        .collect()
}

/// What `gc_under_load` saw: records deleted (or gc's error), seconds, the caller's stall.
type Gc = (Result<u64, String>, f64, Stall);

/// The longest single call a caller making new calls saw while `gc` ran, and how many it made.
#[derive(Clone, Copy)]
struct Stall {
    longest: Duration,
    calls: u64,
    over_100ms: u64,
}

/// Run `gc` (at a `now` past every filled record's expiry) while one task makes new calls;
/// returns (records deleted, or gc's error; seconds; the caller's stall).
fn gc_under_load(rt: &tokio::runtime::Runtime, store: Arc<dyn Store>, expires: i64) -> Gc {
    let engine = Engine::new(store.clone());
    rt.block_on(async {
        let done = Arc::new(AtomicBool::new(false));
        let probe = {
            let (engine, done) = (engine.clone(), done.clone());
            tokio::spawn(async move {
                let run = RunContext::new("growth-gc-probe");
                let mut stall = Stall {
                    longest: Duration::ZERO,
                    calls: 0,
                    over_100ms: 0,
                };
                while !done.load(Ordering::Relaxed) {
                    let i = NEXT.fetch_add(1, Ordering::Relaxed);
                    let t = Instant::now();
                    engine
                        .call(&Refund, &run, CallOptions::default(), input(i))
                        .await
                        .expect("a call beside gc failed");
                    let took = t.elapsed();
                    stall.longest = stall.longest.max(took);
                    stall.calls += 1;
                    stall.over_100ms += u64::from(took > Duration::from_millis(100));
                }
                stall
            })
        };
        // Let the probe start.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let start = Instant::now();
        let gc = tokio::spawn(async move { store.gc(expires + 1_000_000).await });
        let deleted = gc.await.unwrap().map_err(|e| e.to_string());
        let secs = start.elapsed().as_secs_f64();
        done.store(true, Ordering::Relaxed);
        (deleted, secs, probe.await.unwrap())
    })
}

fn report(backend: &str, sizes: &[Size], gc: Option<&Gc>) {
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let us = |s: f64| format!("{:.1} µs", s * 1e6);
    println!("\n{backend} (load average now: {})\n", load.trim());
    println!("| records | fill | raw commit | raw select | new call | ÷ raw commit | replay | ÷ raw select |");
    println!("|---|---|---|---|---|---|---|---|");
    for s in sizes {
        println!(
            "| {} | {:.0} s | {} | {} | {} | {:.2} | {} | {:.2} |",
            s.records,
            s.fill_secs,
            us(s.col(0)),
            us(s.col(1)),
            us(s.col(2)),
            s.ratio(|r| r[2] / r[0]),
            us(s.col(3)),
            s.ratio(|r| r[3] / r[1]),
        );
    }
    if let (Some(first), Some(last)) = (sizes.first(), sizes.last()) {
        println!(
            "\nGrowth from {} to {} records (target ≤ 1.5): new call {:.2}× (its raw commit {:.2}×), replay {:.2}× (its raw select {:.2}×)",
            first.records,
            last.records,
            last.col(2) / first.col(2),
            last.col(0) / first.col(0),
            last.col(3) / first.col(3),
            last.col(1) / first.col(1),
        );
    }
    if let Some((deleted, secs, stall)) = gc {
        let what = match deleted {
            Ok(n) => format!("{n} records in {secs:.1} s = {:.0} records/s", *n as f64 / secs),
            Err(e) => format!("FAILED after {secs:.1} s: {e}"),
        };
        println!(
            "\ngc: {what}; a caller beside it: {} calls, the longest {:.1} ms, {} over 100 ms",
            stall.calls,
            stall.longest.as_secs_f64() * 1e3,
            stall.over_100ms,
        );
    }
    let out = std::env::var("GROWTH_OUT").unwrap_or_else(|_| "target/growth/results.tsv".to_owned());
    if let Some(dir) = std::path::Path::new(&out).parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&out)
        .unwrap();
    let at = effect_tool::decide::record::now_millis() / 1000;
    for s in sizes {
        writeln!(
            f,
            "{backend}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
            s.records,
            s.col(0),
            s.col(1),
            s.col(2),
            s.col(3),
            s.ratio(|r| r[2] / r[0]),
            s.ratio(|r| r[3] / r[1]),
            at
        )
        .unwrap();
    }
    if let Some((deleted, secs, stall)) = gc {
        writeln!(
            f,
            "{backend}-gc\t{}\t{secs}\t{}\t{}\t{}\t\t\t{at}",
            deleted.as_ref().map_or(-1, |n| *n as i64),
            stall.longest.as_secs_f64(),
            stall.calls,
            stall.over_100ms
        )
        .unwrap();
    }
}

/// One size's figures on stderr as soon as they are measured (a long `gc` comes after them).
fn progress(s: &Size) {
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    eprintln!(
        "growth: {} records: raw commit {:.1} µs, raw select {:.1} µs, new call {:.1} µs ({:.2}×), replay {:.1} µs ({:.2}×); load {}",
        s.records,
        s.col(0) * 1e6,
        s.col(1) * 1e6,
        s.col(2) * 1e6,
        s.ratio(|r| r[2] / r[0]),
        s.col(3) * 1e6,
        s.ratio(|r| r[3] / r[1]),
        load.trim()
    );
}

fn sizes() -> Vec<u64> {
    std::env::var("GROWTH_SIZES")
        .unwrap_or_else(|_| "10000,100000,1000000,10000000".to_owned())
        .split(',')
        .map(|s| s.trim().parse().expect("GROWTH_SIZES: numbers, comma-separated"))
        .collect()
}

/// Insert filled records `from..to` into the SQLite journal at `path` (the store closed).
fn sqlite_fill(path: &std::path::Path, template: &str, from: u64, to: u64, expires: i64) {
    let conn = rusqlite::Connection::open(path).unwrap();
    // The store's threads (its checkpointer) may still be closing their connections.
    conn.busy_timeout(Duration::from_secs(60)).unwrap();
    conn.execute_batch("PRAGMA synchronous = OFF; PRAGMA cache_size = -2000000;")
        .unwrap();
    const CHUNK: u64 = 100_000;
    let mut at = from;
    while at < to {
        let end = (at + CHUNK).min(to);
        let rows = rows_sorted(at, end, expires);
        let tx = conn.unchecked_transaction().unwrap();
        {
            let mut insert = tx
                .prepare_cached(
                    "INSERT INTO effect_records (key, version, tool, class, run_id, thread_id, call_id, fingerprint, input,
                       state, attempt, lease_until, output, reason, approval_role, decided_by, created_at, updated_at,
                       expires_at, call_ids, holder)
                     SELECT ?1, version, tool, class, ?2, thread_id, call_id, ?3, ?4, state, attempt, lease_until,
                       output, reason, approval_role, decided_by, ?5, ?5 + 1, ?6, call_ids, holder
                     FROM effect_records WHERE key = ?7",
                )
                .unwrap();
            for r in &rows {
                let n = insert
                    .execute(rusqlite::params![
                        r.key,
                        r.run_id,
                        r.fingerprint,
                        r.input,
                        r.created_at,
                        r.expires_at,
                        template
                    ])
                    .unwrap();
                assert_eq!(n, 1);
            }
        }
        tx.commit().unwrap();
        at = end;
    }
    // Start the measurements with the WAL copied back and emptied, as a journal at rest.
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .unwrap();
}

fn sqlite(rt: &tokio::runtime::Runtime, dir: &std::path::Path) {
    let path = dir.join("growth.db");
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    let expires = expiry_base();
    // The template: one real call's row.
    let template = {
        let engine = Engine::new(SqliteStore::open(&path).unwrap());
        let run = RunContext::new(run_of(0));
        rt.block_on(engine.call(&Refund, &run, CallOptions::default(), input(0)))
            .unwrap();
        effect_tool::call::key::identify(&Refund, &run, &input(0)).unwrap().key
    };
    {
        // The template row is record 0 itself: check that a generated row equals the real one.
        let conn = rusqlite::Connection::open(&path).unwrap();
        let (fp, inp, run): (String, String, String) = conn
            .query_row(
                "SELECT fingerprint, input, run_id FROM effect_records WHERE key = ?1",
                [&template],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .unwrap();
        let r0 = row(0, expires);
        assert_eq!(
            (fp, inp, run),
            (r0.fingerprint, r0.input, r0.run_id),
            "generated rows differ from real ones"
        );
    }
    let mut filled = 1u64;
    let mut results = Vec::new();
    let all = sizes();
    let last = *all.last().unwrap();
    let mut gc = None;
    for (seed, size) in (1u64..).zip(all) {
        let t = Instant::now();
        sqlite_fill(&path, &template, filled, size, expires);
        let fill_secs = t.elapsed().as_secs_f64();
        filled = size;
        eprintln!("growth: SQLite filled to {size} in {fill_secs:.1} s");
        let store = SqliteStore::open_with(&path, SqliteOptions::default()).unwrap();
        let raw = rusqlite::Connection::open(&path).unwrap();
        raw.busy_timeout(Duration::from_secs(10)).unwrap();
        raw.execute_batch(
            "PRAGMA synchronous = FULL;
             CREATE TABLE IF NOT EXISTS bench_raw (id INTEGER PRIMARY KEY, v TEXT NOT NULL);",
        )
        .unwrap();
        let payload = serde_json::to_string(&input(0)).unwrap();
        let raw_commit: Op<'_> = Box::new(|n| {
            let mut st = raw.prepare_cached("INSERT INTO bench_raw (v) VALUES (?1)").unwrap();
            let start = Instant::now();
            for _ in 0..n {
                st.execute([&payload]).unwrap();
            }
            start.elapsed()
        });
        let mut rng = Rng(seed ^ 0xABCD);
        let raw_select: Op<'_> = Box::new(|n| {
            let keys = random_keys(&mut rng, filled, n);
            // The columns the engine's lookup reads.
            let mut st = raw
                .prepare_cached(
                    "SELECT version, state, fingerprint, call_id, output, expires_at, call_ids FROM effect_records WHERE key = ?1",
                )
                .unwrap();
            let start = Instant::now();
            for k in &keys {
                let v: Option<String> = st.query_row([k], |r| r.get(4)).unwrap();
                std::hint::black_box(v);
            }
            start.elapsed()
        });
        let engine = Engine::new(store.clone());
        measure_size(
            rt,
            [raw_commit, raw_select],
            engine,
            size,
            fill_secs,
            seed,
            &mut results,
        );
        if gc_at(size, last) {
            gc = Some(gc_under_load(rt, Arc::new(store.clone()), expires));
        }
        drop(store);
        drop(raw);
    }
    let db = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    eprintln!("growth: SQLite file {} MB", db >> 20);
    report("SQLite FULL", &results, gc.as_ref());
    if std::env::var("GROWTH_KEEP").is_err() {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
        }
    }
}

#[cfg(feature = "postgres")]
fn postgres(rt: &tokio::runtime::Runtime) {
    use effect_tool::store::postgres::{PgOptions, PostgresStore, SslMode};
    let url = std::env::var("EFFECT_TOOL_PG_URL").expect("EFFECT_TOOL_PG_URL (eval \"$(.ci/postgres.sh start)\")");
    const S: &str = "effect_tool_growth";
    let expires = expiry_base();
    let (raw, store) = rt.block_on(async {
        let (raw, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.unwrap();
        tokio::spawn(conn);
        raw.batch_execute(&format!(
            "DROP SCHEMA IF EXISTS {S} CASCADE; DROP TABLE IF EXISTS growth_raw;
             CREATE TABLE growth_raw (id bigserial PRIMARY KEY, v text NOT NULL);"
        ))
        .await
        .unwrap();
        let options = PgOptions {
            schema: S.to_owned(),
            pool_size: 8,
            ssl_mode: Some(SslMode::Disable),
            ..PgOptions::default()
        };
        (raw, PostgresStore::connect_with(&url, options).await.unwrap())
    });
    let engine = Engine::new(store.clone());
    let run = RunContext::new(run_of(0));
    rt.block_on(engine.call(&Refund, &run, CallOptions::default(), input(0)))
        .unwrap();
    let template = effect_tool::call::key::identify(&Refund, &run, &input(0)).unwrap().key;
    rt.block_on(async {
        let row0 = raw
            .query_one(
                &format!("SELECT fingerprint, input::text, run_id FROM {S}.records WHERE key = $1"),
                &[&template],
            )
            .await
            .unwrap();
        let r0 = row(0, expires);
        assert_eq!(
            (
                row0.get::<_, String>(0),
                row0.get::<_, String>(1),
                row0.get::<_, String>(2)
            ),
            (r0.fingerprint, r0.input, r0.run_id),
            "generated rows differ from real ones"
        );
    });
    let mut filled = 1u64;
    let mut results = Vec::new();
    let all = sizes();
    let last = *all.last().unwrap();
    let mut gc = None;
    let payload = serde_json::to_string(&input(0)).unwrap();
    for (seed, size) in (1u64..).zip(all) {
        let t = Instant::now();
        rt.block_on(pg_fill(&raw, S, &template, filled, size, expires));
        let fill_secs = t.elapsed().as_secs_f64();
        filled = size;
        eprintln!("growth: PostgreSQL filled to {size} in {fill_secs:.1} s");
        let insert = rt
            .block_on(raw.prepare("INSERT INTO growth_raw (v) VALUES ($1)"))
            .unwrap();
        let select = rt
            .block_on(raw.prepare(&format!(
                "SELECT state, fingerprint, output::text, expires_at FROM {S}.records WHERE key = $1"
            )))
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
        let mut rng = Rng(seed ^ 0xABCD);
        let raw_select: Op<'_> = Box::new(|n| {
            let keys = random_keys(&mut rng, filled, n);
            rt.block_on(async {
                let start = Instant::now();
                for k in &keys {
                    let row = raw.query_one(&select, &[k]).await.unwrap();
                    std::hint::black_box(row.get::<_, Option<String>>(2));
                }
                start.elapsed()
            })
        });
        measure_size(
            rt,
            [raw_commit, raw_select],
            engine.clone(),
            size,
            fill_secs,
            seed,
            &mut results,
        );
        if gc_at(size, last) {
            gc = Some(gc_under_load(rt, Arc::new(store.clone()), expires));
        }
    }
    if let Some((Err(_), _, _)) = &gc {
        let left: i64 = rt
            .block_on(raw.query_one(
                &format!("SELECT count(*) FROM {S}.records WHERE expires_at IS NOT NULL AND expires_at <= $1"),
                &[&(expires + 1_000_000)],
            ))
            .unwrap()
            .get(0);
        eprintln!("growth: gc failed with {left} collectable records left");
    }
    report("PostgreSQL 15", &results, gc.as_ref());
    if std::env::var("GROWTH_KEEP").is_err() {
        rt.block_on(raw.batch_execute(&format!("DROP SCHEMA {S} CASCADE; DROP TABLE growth_raw;")))
            .unwrap();
    }
}

/// Insert filled records `from..to` into the PostgreSQL journal in schema `s`: its indexes
/// dropped first and made again from their own definitions after, then `VACUUM ANALYZE`.
#[cfg(feature = "postgres")]
async fn pg_fill(raw: &tokio_postgres::Client, s: &str, template: &str, from: u64, to: u64, expires: i64) {
    let defs: Vec<(String, String)> = raw
        .query(
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = $1 AND tablename = 'records' AND indexname <> 'records_pkey'",
            &[&s],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    // The template row, where a statement finds it without the key's index.
    raw.execute(
        &format!("CREATE TEMP TABLE IF NOT EXISTS growth_template AS SELECT * FROM {s}.records WHERE key = $1"),
        &[&template],
    )
    .await
    .unwrap();
    for (name, _) in &defs {
        raw.batch_execute(&format!("DROP INDEX {s}.{name}")).await.unwrap();
    }
    raw.batch_execute(&format!("ALTER TABLE {s}.records DROP CONSTRAINT records_pkey"))
        .await
        .unwrap();
    let insert = raw
        .prepare(&format!(
            "INSERT INTO {s}.records (key, version, tool, class, run_id, thread_id, call_id, fingerprint, input,
               state, attempt, lease_until, output, reason, approval_role, decided_by, created_at, updated_at,
               expires_at, call_ids, holder)
             SELECT u.key, t.version, t.tool, t.class, u.run_id, t.thread_id, t.call_id, u.fingerprint, u.input::json,
               t.state, t.attempt, t.lease_until, t.output, t.reason, t.approval_role, t.decided_by, u.created_at,
               u.created_at + 1, u.expires_at, t.call_ids, t.holder
             FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::int8[], $6::int8[])
               AS u(key, run_id, fingerprint, input, created_at, expires_at)
             CROSS JOIN growth_template t"
        ))
        .await
        .unwrap();
    const CHUNK: u64 = 10_000;
    let mut at = from;
    while at < to {
        let end = (at + CHUNK).min(to);
        let rows: Vec<Row> = (at..end).map(|n| row(n, expires)).collect();
        let keys: Vec<&str> = rows.iter().map(|r| r.key.as_str()).collect();
        let runs: Vec<&str> = rows.iter().map(|r| r.run_id.as_str()).collect();
        let fps: Vec<&str> = rows.iter().map(|r| r.fingerprint.as_str()).collect();
        let inputs: Vec<&str> = rows.iter().map(|r| r.input.as_str()).collect();
        let created: Vec<i64> = rows.iter().map(|r| r.created_at).collect();
        let exp: Vec<Option<i64>> = rows.iter().map(|r| r.expires_at).collect();
        let n = raw
            .execute(&insert, &[&keys, &runs, &fps, &inputs, &created, &exp])
            .await
            .unwrap();
        assert_eq!(n, end - at);
        at = end;
    }
    raw.batch_execute(&format!(
        "SET maintenance_work_mem = '1GB'; ALTER TABLE {s}.records ADD PRIMARY KEY (key);"
    ))
    .await
    .unwrap();
    for (_, def) in &defs {
        raw.batch_execute(def).await.unwrap();
    }
    raw.batch_execute("RESET maintenance_work_mem").await.unwrap();
    raw.batch_execute(&format!("VACUUM ANALYZE {s}.records")).await.unwrap();
}

#[cfg(not(feature = "postgres"))]
fn postgres(_rt: &tokio::runtime::Runtime) {
    eprintln!("*** SKIPPED PostgreSQL: built without `--features postgres` ***");
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else is read from the arguments.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let backend = std::env::var("GROWTH_BACKEND").unwrap_or_else(|_| "sqlite".to_owned());
    match backend.as_str() {
        "sqlite" => {
            let dir = std::env::var("GROWTH_DIR").map_or_else(|_| std::env::temp_dir(), std::path::PathBuf::from);
            std::fs::create_dir_all(&dir).unwrap();
            sqlite(&rt, &dir);
        }
        "postgres" => postgres(&rt),
        other => panic!("GROWTH_BACKEND: sqlite or postgres, not {other}"),
    }
}
