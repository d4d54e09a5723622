//! The engine on the in-memory store with 64 concurrent callers (issue 36, item 6), beside a
//! baseline measured in the same rounds: the same 64 tasks deriving the same key
//! (`key::identify`: the input's canonical JSON and SHA-256) and claiming then recording it in
//! a plain `Mutex<HashMap>`, with no engine. The sequential pair (one caller) is measured in the
//! same rounds too.
//!
//! Each measurement starts from an empty journal (a new engine on a new `MemoryStore`, or a new
//! map, made before the clock starts), runs `n` new idempotent calls of the bench's no-op refund
//! (a new ~100-byte input each), and reports the time per call. Rounds are interleaved
//! (baseline, engine, baseline, engine, ...) so that the machine's load hits both alike; each
//! ratio is the median of the per-round ratios (`benches/common`).
//!
//! ```sh
//! cargo bench --bench callers                              # 9 interleaved rounds
//! EFFECT_TOOL_BENCH_COUNT=engine64:20000 target/release/deps/callers-<hash> --bench
//! ```
//!
//! The second form runs one measurement once, on a current-thread runtime, inside
//! `counted` (no calibration, no other work): for `valgrind --tool=callgrind
//! --collect-atstart=no --toggle-collect=callers::counted` instruction counts, which the load
//! of a shared machine does not move (`EFFECT_TOOL_BENCH_WORKERS=2` runs it on a multi-thread
//! runtime instead). Names: `engine64`, `baseline64`, `engine1`, `baseline1`, `hit64`.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use effect_tool::{CallOptions, Engine, MemoryStore, RunContext};
use serde_json::Value;

use common::{Calibration, Op, Refund, input, measure_interleaved, median};

/// Concurrent callers.
const CALLERS: u64 = 64;

/// Rounds; each figure is the median over them.
const ROUNDS: usize = 9;

/// The key of `n`'s input, as the engine derives it.
fn derive(run: &RunContext, n: u64) -> (String, Value) {
    let args = input(n);
    let id = effect_tool::call::key::identify(&Refund, run, &args).unwrap();
    (id.key, id.input)
}

/// What the baseline's map holds per key: claimed (`None`) or the recorded output.
type Map = Mutex<HashMap<String, Option<Value>>>;

/// One baseline call: derive the key, claim it in the map if absent, "execute" (the amount),
/// record the output under it. Two lock acquisitions, as a claim and a record.
fn baseline_call(map: &Map, run: &RunContext, n: u64) {
    let (key, input) = derive(run, n);
    let amount = input["amount_cents"].as_u64().unwrap();
    {
        let mut m = map.lock().unwrap();
        if m.contains_key(&key) {
            return;
        }
        m.insert(key.clone(), None);
    }
    let output = serde_json::to_value(amount).unwrap();
    map.lock().unwrap().insert(key, Some(output));
}

/// `n` calls spread over `callers` tasks (`call(i)` makes call `i`): the time per call.
fn spread<F, Fut>(rt: &tokio::runtime::Runtime, n: u64, callers: u64, first: u64, call: F) -> Duration
where
    F: Fn(u64) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    rt.block_on(async {
        let per_task = n.div_ceil(callers);
        let start = Instant::now();
        let tasks: Vec<_> = (0..callers)
            .map(|t| {
                let call = call.clone();
                tokio::spawn(async move {
                    for i in 0..per_task {
                        call(first + t * per_task + i).await;
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        start.elapsed().mul_f64(n as f64 / (per_task * callers) as f64)
    })
}

/// Numbers inputs so that every call of every measurement has a new key.
static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

fn take(n: u64) -> u64 {
    NEXT.fetch_add(n + CALLERS, std::sync::atomic::Ordering::Relaxed)
}

/// New calls through an engine on a new in-memory store, with `callers` tasks.
fn engine_calls(rt: &tokio::runtime::Runtime, n: u64, callers: u64) -> Duration {
    let engine = Engine::new(MemoryStore::new());
    let run = RunContext::new("bench-callers");
    let first = take(n);
    spread(rt, n, callers, first, move |i| {
        let (engine, run) = (engine.clone(), run.clone());
        async move {
            engine
                .call(&Refund, &run, CallOptions::default(), input(i))
                .await
                .unwrap();
        }
    })
}

/// The baseline: the same key derivation into a new map, with `callers` tasks.
fn baseline_calls(rt: &tokio::runtime::Runtime, n: u64, callers: u64) -> Duration {
    let map: Arc<Map> = Arc::default();
    let run = RunContext::new("bench-callers");
    let first = take(n);
    spread(rt, n, callers, first, move |i| {
        let (map, run) = (map.clone(), run.clone());
        async move { baseline_call(&map, &run, i) }
    })
}

/// Replays of one recorded call by `callers` tasks.
fn hit_calls(rt: &tokio::runtime::Runtime, n: u64, callers: u64) -> Duration {
    let engine = Engine::new(MemoryStore::new());
    let run = RunContext::new("bench-callers");
    rt.block_on(engine.call(&Refund, &run, CallOptions::default(), input(0)))
        .unwrap();
    spread(rt, n, callers, 0, move |_| {
        let (engine, run) = (engine.clone(), run.clone());
        async move {
            engine
                .call(&Refund, &run, CallOptions::default(), input(0))
                .await
                .unwrap();
        }
    })
}

/// The measurement `name` with `n` calls, once: the code callgrind counts.
#[inline(never)]
fn counted(rt: &tokio::runtime::Runtime, name: &str, n: u64) -> Duration {
    match name {
        "engine64" => engine_calls(rt, n, CALLERS),
        "baseline64" => baseline_calls(rt, n, CALLERS),
        "engine1" => engine_calls(rt, n, 1),
        "baseline1" => baseline_calls(rt, n, 1),
        "hit64" => hit_calls(rt, n, CALLERS),
        other => panic!("unknown measurement {other:?}: engine64, baseline64, engine1, baseline1 or hit64"),
    }
}

fn us(secs: f64) -> String {
    format!("{:.2} µs", secs * 1e6)
}

fn main() {
    if let Ok(spec) = std::env::var("EFFECT_TOOL_BENCH_COUNT") {
        let (name, n) = spec
            .split_once(':')
            .expect("EFFECT_TOOL_BENCH_COUNT=<measurement>:<calls>, e.g. engine64:20000");
        let n: u64 = n.parse().expect("a number of calls");
        // `EFFECT_TOOL_BENCH_WORKERS=2`: a multi-thread runtime (callgrind runs its threads one
        // at a time, so what contention costs shows as the instructions of locks and wake-ups,
        // not as waiting); unset: a current-thread runtime.
        let rt = match std::env::var("EFFECT_TOOL_BENCH_WORKERS")
            .ok()
            .and_then(|w| w.parse().ok())
        {
            Some(workers) => tokio::runtime::Builder::new_multi_thread()
                .worker_threads(workers)
                .enable_all()
                .build()
                .unwrap(),
            None => tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap(),
        };
        // One warm-up call outside the counted function (the engine's first call loads its
        // marker secret; the allocator's first pages).
        counted(&rt, name, 1);
        let took = counted(&rt, name, n);
        println!("{name}: {n} calls, {} per call", us(took.as_secs_f64() / n as f64));
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let ms = std::env::var("EFFECT_TOOL_BENCH_ROUND_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(250);
    let cal = Calibration {
        budget: Duration::from_millis(ms),
        min: 1_000,
        max: 1 << 20,
    };
    let rt = &rt;
    let mut ops: Vec<Op<'_>> = vec![
        Box::new(move |n| baseline_calls(rt, n, CALLERS)),
        Box::new(move |n| engine_calls(rt, n, CALLERS)),
        Box::new(move |n| baseline_calls(rt, n, 1)),
        Box::new(move |n| engine_calls(rt, n, 1)),
        Box::new(move |n| hit_calls(rt, n, CALLERS)),
    ];
    let rounds = measure_interleaved(&mut ops, ROUNDS, &cal);
    let col = |i: usize| median(rounds.iter().map(|r| r[i]).collect());
    let ratio = |a: usize, b: usize| median(rounds.iter().map(|r| r[a] / r[b]).collect());
    println!("| measurement | per call | ÷ its baseline (same rounds) |");
    println!("|---|---|---|");
    println!("| baseline, 64 callers: key + `Mutex<HashMap>` | {} | 1 |", us(col(0)));
    println!(
        "| engine on `MemoryStore`, 64 callers, new calls | {} | {:.2} |",
        us(col(1)),
        ratio(1, 0)
    );
    println!("| baseline, 1 caller | {} | 1 |", us(col(2)));
    println!(
        "| engine on `MemoryStore`, 1 caller, new calls | {} | {:.2} |",
        us(col(3)),
        ratio(3, 2)
    );
    println!(
        "| engine, 64 callers, replays of one record | {} | {:.2} (÷ the 64-caller baseline) |",
        us(col(4)),
        ratio(4, 0)
    );
    println!("\n(medians of {ROUNDS} interleaved rounds; each ratio is the median of its per-round ratios)");
}
