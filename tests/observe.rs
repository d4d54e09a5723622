//! What the engine tells the world besides results (issue 15): the event stream, the metrics
//! (through the `metrics` facade, read back with metrics-util's in-memory recorder), and the
//! call span's OpenTelemetry GenAI attributes (captured with a real `tracing` subscriber). The
//! effects themselves are counted on a downstream ledger the engine cannot see, so the events
//! are checked against what really happened.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::desk::Refund;
use common::journal::{FailWhen, Faulty};
use common::ledger::Downstream;
use effect_tool::decide::record::{Intent, Op};
use effect_tool::{
    CallOptions, Disposition, EffectClass, EffectCtx, Engine, EngineConfig, EngineEvent, MemoryStore, RunContext,
    Store, StoreExt, Tool, ToolError,
};

/// An irreversible send, with no `recover`: a stale claim of it blocks.
#[derive(Clone)]
struct Send(Arc<Downstream>);

impl Tool for Send {
    type Args = String;
    type Output = String;
    type Error = ToolError;
    const NAME: &'static str = "send";
    const CLASS: EffectClass = EffectClass::Irreversible;

    async fn call(&self, ctx: &EffectCtx, to: String) -> Result<String, ToolError> {
        self.0.apply(&ctx.idempotency_key());
        Ok(format!("sent to {to}"))
    }
}

/// The tests of this file run one at a time: `tracing` caches whether a span's callsite is
/// wanted when the callsite is first hit, and a callsite first hit by a test without a
/// subscriber while another test installs one can miss that subscriber.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

fn config() -> EngineConfig {
    EngineConfig {
        lease: Duration::from_millis(50),
        poll_interval: Duration::from_millis(2),
    }
}

/// A runtime on the calling thread, so a thread-local recorder or subscriber sees the calls.
fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn drain(rx: &mut tokio::sync::broadcast::Receiver<EngineEvent>) -> Vec<EngineEvent> {
    let mut out = Vec::new();
    while let Ok(e) = rx.try_recv() {
        out.push(e);
    }
    out
}

/// A stale claim of `tool`'s call with `args` in `run`, as a crashed worker leaves it.
async fn stale_claim<T: Tool>(store: &dyn Store, tool: &T, run: &RunContext, args: &T::Args) -> String {
    let id = effect_tool::call::key::identify(tool, run, args).unwrap();
    let intent = Intent {
        tool: T::NAME.into(),
        class: T::CLASS,
        run_id: run.run_id().into(),
        fingerprint: id.fingerprint.clone(),
        input: id.input.clone(),
        ..common::intent(run.run_id())
    };
    store.claim(&id.key, intent, 1, false).await.unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;
    id.key
}

#[test]
fn every_decision_reaches_the_event_stream() {
    let _serial = one_at_a_time();
    current_thread().block_on(async {
        let down = Arc::new(Downstream::default());
        let store = Arc::new(MemoryStore::new());
        let engine = Engine::with_config(store.clone(), config());
        let mut events = engine.events();
        let run = RunContext::new("events");
        let refund = Refund(down.clone());

        let first = engine
            .call(&refund, &run, CallOptions::call_id("call_1"), "o-1".into())
            .await
            .unwrap();
        let again = engine
            .call(&refund, &run, CallOptions::call_id("call_1"), "o-1".into())
            .await
            .unwrap();
        assert_eq!((first.as_str(), again.as_str()), ("refunded o-1", "refunded o-1"));

        // A crashed worker's claim of an irreversible send: taken over, then blocked.
        let send = Send(down.clone());
        let key = stale_claim(store.as_ref(), &send, &run, &"ann".to_owned()).await;
        let blocked = engine.call(&send, &run, CallOptions::default(), "ann".into()).await;
        assert!(
            matches!(blocked, Err(effect_tool::EffectError::Blocked(_))),
            "{blocked:?}"
        );

        let seen = drain(&mut events);
        let calls: Vec<(&str, Disposition, Option<&str>, Option<&str>)> = seen
            .iter()
            .filter_map(|e| match e {
                EngineEvent::Call(c) => Some((c.tool, c.disposition, c.error, c.call_id.as_deref())),
                _ => None,
            })
            .collect();
        assert_eq!(
            calls,
            [
                ("refund", Disposition::Executed, None, Some("call_1")),
                ("refund", Disposition::Replayed, None, Some("call_1")),
                ("send", Disposition::Blocked, Some("Blocked"), None),
            ]
        );
        assert!(
            seen.iter()
                .any(|e| matches!(e, EngineEvent::TakenOver { tool: "send", key: k, attempt: 2 } if *k == key)),
            "{seen:?}"
        );
        // The ledger agrees: one refund applied, the blocked send never ran.
        assert_eq!((down.requests(), down.effects()), (1, 1));
    })
}

#[test]
fn an_effect_whose_record_failed_is_an_event_and_a_metric_not_only_a_log_line() {
    let _serial = one_at_a_time();
    let down = Arc::new(Downstream::default());
    let store = Faulty::new(
        Arc::new(MemoryStore::new()),
        FailWhen::new(|op| matches!(op, Op::Complete { .. }), "disk full", true),
    );
    let engine = Engine::with_config(store, config()).with_store_retry(Duration::from_millis(60));
    let mut events = engine.events();
    let recorder = metrics_util::debugging::DebuggingRecorder::new();
    let snapshots = recorder.snapshotter();
    let run = RunContext::new("record-failed");
    let out = {
        let refund = Refund(down.clone());
        let call = engine.call(&refund, &run, CallOptions::default(), "o-9".into());
        metrics::with_local_recorder(&recorder, || current_thread().block_on(call))
    };
    assert_eq!(out.unwrap(), "refunded o-9", "the effect happened: the call succeeds");
    assert_eq!(down.effects(), 1);
    let seen = drain(&mut events);
    assert!(
        seen.iter().any(
            |e| matches!(e, EngineEvent::RecordFailed { tool: "refund", error, .. } if error.contains("disk full"))
        ),
        "{seen:?}"
    );
    let counters = counters(&snapshots.snapshot().into_vec());
    assert_eq!(counters.get("effect_tool_record_failures_total{tool=refund}"), Some(&1));
    assert!(
        counters
            .get("effect_tool_record_retries_total{tool=refund}")
            .is_some_and(|n| *n >= 1),
        "{counters:?}"
    );
    assert_eq!(
        counters.get("effect_tool_calls_total{class=idempotent,disposition=executed,tool=refund}"),
        Some(&1),
        "{counters:?}"
    );
}

type Snapshot = Vec<(
    metrics_util::CompositeKey,
    Option<metrics::Unit>,
    Option<metrics::SharedString>,
    metrics_util::debugging::DebugValue,
)>;

/// Counters as `name{label=value,...}` (labels sorted) → value.
fn counters(snapshot: &Snapshot) -> HashMap<String, u64> {
    use metrics_util::debugging::DebugValue;
    snapshot
        .iter()
        .filter_map(|(key, _, _, value)| {
            let DebugValue::Counter(n) = value else { return None };
            let n = *n;
            let mut labels: Vec<String> = key
                .key()
                .labels()
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            labels.sort();
            Some((format!("{}{{{}}}", key.key().name(), labels.join(",")), n))
        })
        .collect()
}

#[test]
fn calls_count_by_tool_class_and_disposition_with_their_latency() {
    let _serial = one_at_a_time();
    let recorder = metrics_util::debugging::DebuggingRecorder::new();
    let snapshots = recorder.snapshotter();
    let down = Arc::new(Downstream::default());
    let engine = Engine::with_config(MemoryStore::new(), config());
    let run = RunContext::new("metrics");
    let refund = Refund(down.clone());
    metrics::with_local_recorder(&recorder, || {
        current_thread().block_on(async {
            for order in ["a", "b", "a", "a"] {
                engine
                    .call(&refund, &run, CallOptions::default(), order.into())
                    .await
                    .unwrap();
            }
        })
    });
    let snapshot = snapshots.snapshot().into_vec();
    let c = counters(&snapshot);
    assert_eq!(
        c.get("effect_tool_calls_total{class=idempotent,disposition=executed,tool=refund}"),
        Some(&2)
    );
    assert_eq!(
        c.get("effect_tool_calls_total{class=idempotent,disposition=replayed,tool=refund}"),
        Some(&2)
    );
    assert_eq!(down.effects(), 2);
    let samples = |name: &str, label: Option<(&str, &str)>| {
        snapshot
            .iter()
            .filter(|(key, ..)| key.key().name() == name)
            .filter(|(key, ..)| label.is_none_or(|(k, v)| key.key().labels().any(|l| l.key() == k && l.value() == v)))
            .map(|(_, _, _, value)| match value {
                metrics_util::debugging::DebugValue::Histogram(samples) => samples.len(),
                _ => 0,
            })
            .sum::<usize>()
    };
    assert_eq!(
        samples("effect_tool_call_duration_seconds", None),
        4,
        "one latency sample per call"
    );
    // The store's operations: two new calls claimed and completed, labelled with the store.
    let store_op = "effect_tool_store_operation_duration_seconds";
    assert_eq!(samples(store_op, Some(("operation", "claim"))), 2);
    assert_eq!(samples(store_op, Some(("operation", "complete"))), 2);
    assert_eq!(samples(store_op, Some(("store", "memory"))), samples(store_op, None));
}

/// Fails transiently on its first run, then refunds (counted at the bank).
struct FlakyRefund(Arc<Downstream>, std::sync::atomic::AtomicBool);

impl Tool for FlakyRefund {
    type Args = String;
    type Output = String;
    type Error = ToolError;
    const NAME: &'static str = "flaky_refund";
    const CLASS: EffectClass = EffectClass::Idempotent;
    const RETRY: effect_tool::RetryPolicy = effect_tool::RetryPolicy {
        max_attempts: 3,
        base_delay: Duration::from_millis(1),
        max_delay: Duration::from_millis(1),
    };

    async fn call(&self, ctx: &EffectCtx, order: String) -> Result<String, ToolError> {
        if !self.1.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return Err(ToolError::transient("the bank is busy"));
        }
        self.0.apply(&ctx.idempotency_key());
        Ok(format!("refunded {order}"))
    }
}

#[test]
fn a_transient_failure_retried_by_the_policy_is_counted() {
    let _serial = one_at_a_time();
    let recorder = metrics_util::debugging::DebuggingRecorder::new();
    let snapshots = recorder.snapshotter();
    let down = Arc::new(Downstream::default());
    let engine = Engine::with_config(MemoryStore::new(), config());
    let run = RunContext::new("retries");
    let tool = FlakyRefund(down.clone(), Default::default());
    metrics::with_local_recorder(&recorder, || {
        current_thread().block_on(async {
            engine
                .call(&tool, &run, CallOptions::default(), "o-9".into())
                .await
                .unwrap();
        })
    });
    let c = counters(&snapshots.snapshot().into_vec());
    assert_eq!(
        c.get("effect_tool_tool_retries_total{tool=flaky_refund}"),
        Some(&1),
        "{c:?}"
    );
    assert_eq!(
        c.get("effect_tool_calls_total{class=idempotent,disposition=executed,tool=flaky_refund}"),
        Some(&1)
    );
    assert_eq!(down.requests(), 1);
}

/// A span's name and its fields (name → value as text).
type SpanFields = (String, HashMap<String, String>);

/// Spans and their fields as a real subscriber sees them.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<SpanFields>>>);

struct FieldsOf<'a>(&'a mut HashMap<String, String>);

impl tracing::field::Visit for FieldsOf<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl<S> tracing_subscriber::Layer<S> for Captured
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        id: &tracing::span::Id,
        ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        let mut fields = HashMap::new();
        attrs.record(&mut FieldsOf(&mut fields));
        if let Some(parent) = ctx.span(id).and_then(|s| s.parent()) {
            fields.insert("parent".to_owned(), parent.name().to_owned());
        }
        let mut spans = self.0.lock().unwrap();
        spans.push((attrs.metadata().name().to_owned(), fields));
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(spans.len() - 1);
        }
    }
    fn on_record(
        &self,
        id: &tracing::span::Id,
        values: &tracing::span::Record<'_>,
        ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        let Some(at) = ctx.span(id).and_then(|s| s.extensions().get::<usize>().copied()) else {
            return;
        };
        values.record(&mut FieldsOf(&mut self.0.lock().unwrap()[at].1));
    }
}

#[test]
fn the_call_span_carries_the_genai_tool_attributes() {
    let _serial = one_at_a_time();
    use tracing_subscriber::layer::SubscriberExt;
    let captured = Captured::default();
    let subscriber = tracing_subscriber::registry().with(captured.clone());
    let down = Arc::new(Downstream::default());
    let store = Arc::new(MemoryStore::new());
    let engine = Engine::with_config(store.clone(), config());
    let run = RunContext::new("spans");
    tracing::subscriber::with_default(subscriber, || {
        current_thread().block_on(async {
            engine
                .call(
                    &Refund(down.clone()),
                    &run,
                    CallOptions::call_id("call_7"),
                    "o-7".into(),
                )
                .await
                .unwrap();
            let send = Send(down.clone());
            stale_claim(store.as_ref(), &send, &run, &"bob".to_owned()).await;
            let _ = engine.call(&send, &run, CallOptions::default(), "bob".into()).await;
        })
    });
    let spans = captured.0.lock().unwrap().clone();
    let tools: Vec<&HashMap<String, String>> = spans
        .iter()
        .filter(|(name, _)| name == "execute_tool")
        .map(|(_, f)| f)
        .collect();
    assert_eq!(tools.len(), 2, "{spans:?}");
    let refund = tools[0];
    for (field, value) in [
        ("otel.name", "execute_tool refund"),
        ("gen_ai.operation.name", "execute_tool"),
        ("gen_ai.tool.name", "refund"),
        ("gen_ai.tool.call.id", "call_7"),
        ("gen_ai.tool.type", "function"),
        ("effect_tool.class", "idempotent"),
        ("effect_tool.disposition", "executed"),
        ("effect_tool.attempt", "1"),
    ] {
        assert_eq!(
            refund.get(field).map(String::as_str),
            Some(value),
            "{field} in {refund:?}"
        );
    }
    assert!(
        refund.get("effect_tool.key").is_some_and(|k| k.contains(":refund:")),
        "{refund:?}"
    );
    assert!(!refund.contains_key("error.type"));
    assert_eq!(refund.get("effect_tool.store").map(String::as_str), Some("memory"));
    // Each journal operation of the refund is a child span of its call, named for OpenTelemetry
    // after the operation: the claim, then the completion.
    let refund_key = &refund["effect_tool.key"];
    let ops: Vec<&str> = spans
        .iter()
        .filter(|(name, f)| name == "store" && f.get("effect_tool.key") == Some(refund_key))
        .map(|(_, f)| {
            assert_eq!(f.get("parent").map(String::as_str), Some("execute_tool"), "{f:?}");
            assert_eq!(f.get("db.system.name").map(String::as_str), Some("memory"), "{f:?}");
            assert_eq!(
                f.get("otel.name"),
                Some(&format!("effect_tool.store {}", f["db.operation.name"]))
            );
            f["db.operation.name"].as_str()
        })
        .collect();
    assert!(ops.ends_with(&["claim", "complete"]), "{ops:?}");
    let send = tools[1];
    assert_eq!(send.get("error.type").map(String::as_str), Some("Blocked"), "{send:?}");
    assert_eq!(send.get("effect_tool.disposition").map(String::as_str), Some("blocked"));
    assert_eq!(down.effects(), 1);
}

/// A call a run's budget refuses is counted by tool and budget (and nothing runs).
#[test]
fn a_call_refused_by_a_budget_is_counted_by_budget() {
    let _serial = one_at_a_time();
    let recorder = metrics_util::debugging::DebuggingRecorder::new();
    let snapshots = recorder.snapshotter();
    let down = Arc::new(Downstream::default());
    let engine = Engine::with_config(MemoryStore::new(), config())
        .with_budgets(effect_tool::Budgets::new().calls_of("flaky_refund", 1));
    let run = RunContext::new("budgeted");
    let tool = FlakyRefund(down.clone(), std::sync::atomic::AtomicBool::new(true));
    metrics::with_local_recorder(&recorder, || {
        current_thread().block_on(async {
            engine
                .call(&tool, &run, CallOptions::default(), "o-1".into())
                .await
                .unwrap();
            let refused = engine.call(&tool, &run, CallOptions::default(), "o-2".into()).await;
            assert_eq!(refused.unwrap_err().kind(), "BudgetExceeded");
        })
    });
    assert_eq!(down.effects(), 1, "the refused call did not run");
    let c = counters(&snapshots.snapshot().into_vec());
    assert_eq!(
        c.get("effect_tool_budget_exceeded_total{budget=calls_of:flaky_refund,tool=flaky_refund}"),
        Some(&1),
        "{c:?}"
    );
    assert_eq!(
        c.get("effect_tool_calls_total{class=idempotent,disposition=rejected,tool=flaky_refund}"),
        Some(&1),
        "{c:?}"
    );
}
