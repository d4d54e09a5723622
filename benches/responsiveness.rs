//! What the journal's writes cost the *other* tasks of the runtime they run on (issue 16, "the
//! executor stays responsive").
//!
//! A SQLite leader applies its batch on a caller's thread (see the store's `writer.rs`): under
//! `synchronous = FULL` that is a commit and an fsync, which on a multi-thread runtime runs
//! inside `tokio::task::block_in_place`, so the worker's other tasks move to another thread
//! meanwhile. This bench measures what unrelated work on the same multi-thread runtime sees
//! while tasks make new idempotent calls in a loop:
//! - **timer**: the lateness of a 1 ms `tokio::time::interval` (each tick's wake-up time minus
//!   its scheduled time; tokio's timer wheel has a 1 ms resolution, so even an idle runtime
//!   shows up to ~1 ms);
//! - **http**: the latency of a trivial axum request (`GET /ping`), served on the same runtime
//!   to a client on its own OS thread (a plain keep-alive HTTP/1.1 connection), one request
//!   every millisecond.
//!
//! Loads, interleaved round by round so that the machine's load hits them alike: **idle** (no
//! callers, the baseline), 64 callers on the **in-memory** store (the engine's CPU, no I/O), 64
//! on **SQLite FULL**, 64 on **SQLite NORMAL**, **one caller** on FULL, and a **busy** runtime
//! (64 in-memory callers beside 64 on FULL). The runtime has 2 worker threads (the bench
//! machine's cores; `EFFECT_TOOL_BENCH_WORKERS=1` is the case the placement matters most for),
//! a fresh one per measurement.
//!
//! Bound (BENCHMARKS.md): under 64 SQLite FULL callers, the timer's p99 lateness and the
//! request's p99 latency stay within 5 ms of the idle runtime's in the same run, with one worker
//! thread or two.
//!
//! Run: `cargo bench --bench responsiveness` (`EFFECT_TOOL_BENCH_SECS` per measurement, default
//! 2; `EFFECT_TOOL_BENCH_ROUNDS`, default 3).

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use effect_tool::store::sqlite::{SqliteOptions, SqliteStore, Synchronous};
use effect_tool::{CallOptions, Engine, MemoryStore, RunContext, Store};

use common::{Refund, input};

static NEXT: AtomicU64 = AtomicU64::new(1);

/// The load beside the measured tasks.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Load {
    Idle,
    Memory,
    Sqlite(Synchronous),
    /// One caller on SQLite FULL.
    OneCaller,
    /// A busy runtime: 64 callers on the in-memory store beside 64 on SQLite FULL.
    Busy,
}

impl Load {
    fn label(self) -> &'static str {
        match self {
            Load::Idle => "idle (no callers)",
            Load::Memory => "64 callers, in-memory store",
            Load::Sqlite(Synchronous::Full) => "64 callers, SQLite FULL",
            Load::Sqlite(Synchronous::Normal) => "64 callers, SQLite NORMAL",
            Load::OneCaller => "1 caller, SQLite FULL",
            Load::Busy => "64 in-memory + 64 SQLite FULL callers (calls/s: SQLite's)",
        }
    }

    fn callers(self) -> usize {
        match self {
            Load::Idle => 0,
            Load::OneCaller => 1,
            _ => 64,
        }
    }
}

/// One measurement's samples.
#[derive(Default)]
struct Samples {
    /// Timer lateness per tick, seconds.
    timer: Vec<f64>,
    /// Request latency per request, seconds.
    http: Vec<f64>,
    /// New calls completed per second.
    calls_per_sec: f64,
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// A request every millisecond on one keep-alive connection, until `stop`: each latency.
fn client(addr: std::net::SocketAddr, stop: Arc<AtomicBool>) -> Vec<f64> {
    let stream = TcpStream::connect(addr).unwrap();
    stream.set_nodelay(true).unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut writer = stream;
    let mut latencies = Vec::new();
    let request = b"GET /ping HTTP/1.1\r\nHost: bench\r\n\r\n";
    while !stop.load(Ordering::Relaxed) {
        let start = Instant::now();
        writer.write_all(request).unwrap();
        // Status line and headers, then the body by its length.
        let mut length = 0usize;
        let mut line = String::new();
        loop {
            line.clear();
            reader.read_line(&mut line).unwrap();
            if line == "\r\n" {
                break;
            }
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                length = v.trim().parse().unwrap();
            }
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body).unwrap();
        latencies.push(start.elapsed().as_secs_f64());
        std::thread::sleep(Duration::from_millis(1));
    }
    latencies
}

/// `n` tasks making new calls through an engine on `store` until `stop`, each counted in `calls`.
fn spawn_callers(
    store: Arc<dyn Store>,
    n: usize,
    stop: &Arc<AtomicBool>,
    calls: &Arc<AtomicU64>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let engine = Engine::new(store);
    let run = RunContext::new("responsiveness");
    (0..n)
        .map(|_| {
            let (engine, run, stop, calls) = (engine.clone(), run.clone(), stop.clone(), calls.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let i = NEXT.fetch_add(1, Ordering::Relaxed);
                    engine
                        .call(&Refund, &run, CallOptions::default(), input(i))
                        .await
                        .unwrap();
                    calls.fetch_add(1, Ordering::Relaxed);
                    // A real agent's loop awaits something between calls (the model, the
                    // network); on the in-memory store a call never waits, and without this
                    // the callers would starve the timer driver.
                    tokio::task::yield_now().await;
                }
            })
        })
        .collect()
}

/// Run one measurement of `secs` under `load` on a fresh runtime.
fn measure(load: Load, dir: &std::path::Path, secs: f64, workers: usize) -> Samples {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .unwrap();
    let store: Option<Arc<dyn Store>> = match load {
        Load::Idle => None,
        Load::Memory => Some(Arc::new(MemoryStore::new())),
        Load::OneCaller | Load::Busy | Load::Sqlite(_) => {
            let synchronous = match load {
                Load::Sqlite(synchronous) => synchronous,
                _ => Synchronous::Full,
            };
            let path = dir.join(format!("responsiveness-{load:?}.db").to_lowercase());
            let options = SqliteOptions {
                synchronous,
                ..SqliteOptions::default()
            };
            Some(Arc::new(SqliteStore::open_with(&path, options).unwrap()))
        }
    };
    let duration = Duration::from_secs_f64(secs);
    rt.block_on(async move {
        let stop = Arc::new(AtomicBool::new(false));
        let calls = Arc::new(AtomicU64::new(0));
        let busy = load == Load::Busy;
        let memory_calls = Arc::new(AtomicU64::new(0));
        let mut extra = Vec::new();
        if busy {
            extra = spawn_callers(Arc::new(MemoryStore::new()), 64, &stop, &memory_calls);
        }
        let callers = store
            .map(|store| spawn_callers(store, load.callers(), &stop, &calls))
            .unwrap_or_default();
        // Let the callers reach their steady state (the first batches, the WAL's first pages).
        tokio::time::sleep(Duration::from_millis(200)).await;
        let calls_before = calls.load(Ordering::Relaxed);
        let started = Instant::now();

        let ticker = {
            let stop = stop.clone();
            tokio::spawn(async move {
                let mut interval = tokio::time::interval(Duration::from_millis(1));
                interval.tick().await;
                let mut lateness = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let scheduled = interval.tick().await;
                    lateness.push(scheduled.elapsed().as_secs_f64());
                }
                lateness
            })
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = axum::Router::new().route("/ping", axum::routing::get(|| async { "pong" }));
        let server = tokio::spawn(async move { axum::serve(listener, app).await });
        let client = {
            let stop = stop.clone();
            std::thread::spawn(move || client(addr, stop))
        };

        tokio::time::sleep(duration).await;
        stop.store(true, Ordering::Relaxed);
        let elapsed = started.elapsed().as_secs_f64();
        let calls_per_sec = (calls.load(Ordering::Relaxed) - calls_before) as f64 / elapsed;
        let timer = ticker.await.unwrap();
        let http = tokio::task::spawn_blocking(move || client.join().unwrap())
            .await
            .unwrap();
        server.abort();
        for c in callers.into_iter().chain(extra) {
            c.await.unwrap();
        }
        if busy {
            eprintln!(
                "  in-memory calls/s beside: {:.0}",
                memory_calls.load(Ordering::Relaxed) as f64 / elapsed
            );
        }
        Samples {
            timer,
            http,
            calls_per_sec,
        }
    })
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i]
}

fn ms(secs: f64) -> String {
    format!("{:.2} ms", secs * 1e3)
}

fn main() {
    // `cargo bench` passes `--bench`; a filter argument is not supported, everything runs.
    let secs = env_or("EFFECT_TOOL_BENCH_SECS", 2.0);
    let rounds = env_or("EFFECT_TOOL_BENCH_ROUNDS", 3usize);
    let workers = env_or("EFFECT_TOOL_BENCH_WORKERS", 2usize);
    let dir = tempfile::tempdir().unwrap();
    let loads = [
        Load::Idle,
        Load::Memory,
        Load::Sqlite(Synchronous::Full),
        Load::Sqlite(Synchronous::Normal),
        Load::OneCaller,
        Load::Busy,
    ];
    let mut all: Vec<Samples> = loads.iter().map(|_| Samples::default()).collect();
    for round in 0..rounds {
        for (load, into) in loads.iter().zip(&mut all) {
            let s = measure(*load, dir.path(), secs, workers);
            eprintln!(
                "round {round}: {}: {} ticks, {} requests, {:.0} calls/s",
                load.label(),
                s.timer.len(),
                s.http.len(),
                s.calls_per_sec
            );
            into.timer.extend(s.timer);
            into.http.extend(s.http);
            into.calls_per_sec += s.calls_per_sec / rounds as f64;
        }
    }
    println!(
        "\n{workers} worker threads, {rounds} rounds of {secs} s per load, interleaved\n\n\
         | load | calls/s | timer lateness p50 | p99 | p99.9 | max | request p50 | p99 | p99.9 | max |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for (load, s) in loads.iter().zip(&mut all) {
        s.timer.sort_by(f64::total_cmp);
        s.http.sort_by(f64::total_cmp);
        let (t, h) = (&s.timer, &s.http);
        println!(
            "| {} | {:.0} | {} | {} | {} | {} | {} | {} | {} | {} |",
            load.label(),
            s.calls_per_sec,
            ms(quantile(t, 0.5)),
            ms(quantile(t, 0.99)),
            ms(quantile(t, 0.999)),
            ms(quantile(t, 1.0)),
            ms(quantile(h, 0.5)),
            ms(quantile(h, 0.99)),
            ms(quantile(h, 0.999)),
            ms(quantile(h, 1.0)),
        );
    }
}
