//! The engine on the in-memory store: a recorded-result hit and a miss (claim, execute a
//! no-op, record) for a ~100-byte input, beside a baseline measured in the same run:
//! serde_json + SHA-256 of the same input (the least any keyed journal must do).
//!
//! A second group times a model's call through the dispatcher (its arguments checked against
//! the tool's schema) beside decoding the same arguments with serde alone.
//!
//! A third group (`observe`) times the engine's spans and metrics with and without a subscriber
//! or recorder installed.
//!
//! Run: `cargo bench --bench engine` (`-- dispatch` for the second group alone)

mod common;

use std::sync::atomic::{AtomicU64, Ordering};

use criterion::{Criterion, criterion_group, criterion_main};
use effect_tool::{CallOptions, Engine, MemoryStore, RunContext, Tool};
use sha2::{Digest, Sha256};

use common::{Refund, RefundArgs, input};

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let json_len = serde_json::to_vec(&input(0)).unwrap().len();
    let mut group = c.benchmark_group(format!("engine_memory_{json_len}B_input"));

    group.bench_function("baseline_serde_json_sha256", |b| {
        let args = input(0);
        b.iter(|| {
            let bytes = serde_json::to_vec(std::hint::black_box(&args)).unwrap();
            std::hint::black_box(Sha256::digest(&bytes));
        })
    });

    let engine = Engine::new(MemoryStore::new());
    let run = RunContext::new("bench-run");
    rt.block_on(engine.call(&Refund, &run, CallOptions::default(), input(0)))
        .unwrap();
    group.bench_function("hit_recorded_result", |b| {
        let args = input(0);
        b.iter(|| {
            rt.block_on(engine.call(&Refund, &run, CallOptions::default(), args.clone()))
                .unwrap()
        })
    });

    // A miss adds a record; the journal is replaced by an empty one every 10,000 calls (the
    // replacement and the drop of the old one are not timed), so the figure is that of a journal
    // of up to 10,000 records rather than of an ever-growing map's reallocations.
    let next = AtomicU64::new(1);
    group.bench_function("miss_claim_execute_record", |b| {
        b.iter_custom(|iters| {
            let mut total = std::time::Duration::ZERO;
            let mut left = iters;
            while left > 0 {
                let chunk = left.min(10_000);
                left -= chunk;
                let engine = Engine::new(MemoryStore::new());
                let inputs: Vec<RefundArgs> = (0..chunk)
                    .map(|_| input(next.fetch_add(1, Ordering::Relaxed)))
                    .collect();
                let start = std::time::Instant::now();
                rt.block_on(async {
                    for args in inputs {
                        engine.call(&Refund, &run, CallOptions::default(), args).await.unwrap();
                    }
                });
                total += start.elapsed();
            }
            total
        })
    });
    group.finish();
}

/// A model's call through the dispatcher (parse, normalize, check against the schema, then the
/// engine), beside what any dispatcher must do in the same run: decode the arguments' text into
/// the tool's type. The call's result is recorded, so the engine's part is a replay (the hit
/// above).
fn dispatch(c: &mut Criterion) {
    use effect_tool::{Dispatcher, ToolCall, Toolkit};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let text = serde_json::to_string(&input(0)).unwrap();
    let mut group = c.benchmark_group(format!("dispatch_{}B_arguments", text.len()));
    group.bench_function("baseline_serde_json_decode", |b| {
        b.iter(|| serde_json::from_str::<RefundArgs>(std::hint::black_box(&text)).unwrap())
    });
    let schema = <Refund as Tool>::input_schema();
    let validator = jsonschema::options()
        .should_validate_formats(true)
        .build(&schema)
        .unwrap();
    let value: serde_json::Value = serde_json::from_str(&text).unwrap();
    group.bench_function("jsonschema_is_valid_alone", |b| {
        b.iter(|| assert!(validator.is_valid(std::hint::black_box(&value))))
    });
    let dispatcher = Dispatcher::new(Toolkit::new().with(Refund), Engine::new(MemoryStore::new()));
    let run = RunContext::new("bench-run");
    let call = ToolCall::new("call_1", Refund::NAME, text.clone());
    assert!(!rt.block_on(dispatcher.call(&run, &call)).is_error());
    group.bench_function("dispatcher_call_recorded", |b| {
        b.iter(|| rt.block_on(dispatcher.call(&run, &call)))
    });
    let wrong = ToolCall::new("call_2", Refund::NAME, text.replace("12345", "\"twelve\""));
    assert!(rt.block_on(dispatcher.call(&run, &wrong)).is_error());
    group.bench_function("dispatcher_call_rejected", |b| {
        b.iter(|| rt.block_on(dispatcher.call(&run, &wrong)))
    });
    group.finish();
}

/// What the spans and metrics cost: a recorded-result hit (the fastest path, where their share
/// is largest) with nothing installed,
/// with a `tracing` subscriber (a registry and a formatting layer at INFO, writing to a sink:
/// every span is built and entered), with the Prometheus recorder (feature `prometheus`), and
/// with both. Run: `cargo bench --bench engine --features prometheus -- observe`.
fn observe(c: &mut Criterion) {
    use tracing_subscriber::layer::SubscriberExt;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut group = c.benchmark_group("observe");
    let engine = Engine::new(MemoryStore::new());
    let run = RunContext::new("bench-run");
    rt.block_on(engine.call(&Refund, &run, CallOptions::default(), input(0)))
        .unwrap();
    let hit = || {
        rt.block_on(engine.call(&Refund, &run, CallOptions::default(), input(0)))
            .unwrap()
    };
    let subscriber = || {
        tracing_subscriber::registry()
            .with(tracing_subscriber::fmt::layer().with_writer(std::io::sink))
            .with(tracing_subscriber::filter::LevelFilter::INFO)
    };
    #[cfg(feature = "prometheus")]
    let recorder = effect_tool::ops::prometheus::PrometheusMetrics::builder()
        .unwrap()
        .build_recorder();

    group.bench_function("hit_nothing_installed", |b| b.iter(hit));
    group.bench_function("hit_tracing_subscriber", |b| {
        tracing::subscriber::with_default(subscriber(), || b.iter(hit))
    });
    #[cfg(feature = "prometheus")]
    {
        group.bench_function("hit_prometheus_recorder", |b| {
            metrics::with_local_recorder(&recorder, || b.iter(hit))
        });
        group.bench_function("hit_both", |b| {
            tracing::subscriber::with_default(subscriber(), || metrics::with_local_recorder(&recorder, || b.iter(hit)))
        });
    }
    group.finish();
}

criterion_group!(benches, bench, dispatch, observe);
criterion_main!(benches);
