//! Where an irreversible new call's time goes on SQLite `FULL` (issue 16): its target is ≤ 1.2 ×
//! two raw commits. Three measurements, interleaved round by round on one journal:
//!
//! - `engine`: sequential new calls of an irreversible no-op tool through the `Engine` (the
//!   lookup, the claim flushed, the tool, the record flushed);
//! - `its SQL`: the same statements sent by hand on a plain connection (`common::SqliteFloor`,
//!   both commits flushed), checkpointed as the store does it;
//! - `2 raw commits`: two one-row `INSERT` commits on a plain connection.
//!
//! Beside each wall time, the calling thread's CPU time per call (`/proc/thread-self/schedstat`,
//! kernel and user) and its user part (`/proc/thread-self/stat`, in 10 ms ticks: a round is
//! thousands of calls). Every measurement runs on the main thread (the engine through
//! `block_on`, where the store's leader commits on the caller's thread), so the difference
//! between them is work that thread did, or waited for. Linux only.
//!
//! Run: `cargo bench --bench irreversible`. `EFFECT_TOOL_BENCH_CALLS` calls per round (default
//! 2000), 9 rounds; each figure is the median over the rounds, each ratio the median of the
//! ratios within a round.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use effect_tool::store::sqlite::SqliteStore;
use effect_tool::{Engine, RunContext, Store};

use common::{Charge, SqliteFloor, input, median, new_calls};

const ROUNDS: usize = 9;

/// The calling thread's CPU time and its user part, in µs.
fn thread_cpu() -> (f64, f64) {
    let schedstat = std::fs::read_to_string("/proc/thread-self/schedstat").expect("Linux's schedstat");
    let cpu_ns: f64 = schedstat.split_whitespace().next().unwrap().parse().unwrap();
    let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
    // After the command's name (in parentheses): state, then fields 4.., utime is field 14.
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split_whitespace().collect();
    let ticks: f64 = fields[11].parse().unwrap();
    (cpu_ns / 1e3, ticks * 1e4)
}

/// One measurement of `n` calls: wall, CPU and user time per call, in µs.
fn measured(n: u64, run: impl FnOnce(u64) -> Duration) -> [f64; 3] {
    let (cpu, user) = thread_cpu();
    let wall = run(n);
    let (cpu_after, user_after) = thread_cpu();
    let n = n as f64;
    [
        wall.as_secs_f64() * 1e6 / n,
        (cpu_after - cpu) / n,
        (user_after - user) / n,
    ]
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else is read from the arguments.
    let n: u64 = std::env::var("EFFECT_TOOL_BENCH_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("irreversible.db");
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&path).unwrap());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let engine = Engine::new(store);
    let run = RunContext::new("bench");
    let engine_calls = |k: u64| new_calls(&rt, &engine, &Charge, &run, k);
    let payload = serde_json::to_string(&input(0)).unwrap();
    let floor = SqliteFloor::open(&path, "FULL");
    let raw = rusqlite::Connection::open(&path).unwrap();
    raw.execute_batch(
        "PRAGMA synchronous = FULL;
         CREATE TABLE IF NOT EXISTS bench_raw (id INTEGER PRIMARY KEY, v TEXT NOT NULL);",
    )
    .unwrap();
    let raw_commits = |k: u64| {
        let mut st = raw.prepare_cached("INSERT INTO bench_raw (v) VALUES (?1)").unwrap();
        let start = Instant::now();
        for _ in 0..2 * k {
            st.execute([&payload]).unwrap();
        }
        start.elapsed()
    };
    // Warm: the WAL grown to its bound, every statement cached.
    engine_calls(1500);
    floor.new_calls(1500, &payload, false);
    raw_commits(1500);
    let rounds: Vec<[[f64; 3]; 3]> = (0..ROUNDS)
        .map(|_| {
            [
                measured(n, engine_calls),
                measured(n, |k| floor.new_calls(k, &payload, false)),
                measured(n, raw_commits),
            ]
        })
        .collect();
    let col = |op: usize, what: usize| median(rounds.iter().map(|r| r[op][what]).collect());
    let ratio = |a: usize, b: usize| median(rounds.iter().map(|r| r[a][0] / r[b][0]).collect());
    println!("\nSQLite FULL, irreversible new call, {n} calls per round, medians of {ROUNDS} rounds:\n");
    println!("| measurement | wall per call | CPU per call (calling thread) | of it user |");
    println!("|---|---|---|---|");
    for (i, name) in ["engine", "its SQL", "2 raw commits"].iter().enumerate() {
        println!(
            "| {name} | {:.1} µs | {:.1} µs | {:.1} µs |",
            col(i, 0),
            col(i, 1),
            col(i, 2)
        );
    }
    println!(
        "\nengine ÷ its SQL {:.2}; its SQL ÷ 2 raw commits {:.2}; engine ÷ 2 raw commits {:.2} (target ≤ 1.2)",
        ratio(0, 1),
        ratio(1, 2),
        ratio(0, 2)
    );
}
