//! The engine's spans as an OpenTelemetry backend receives them: through `tracing-opentelemetry`
//! into the OpenTelemetry SDK, exported to its in-memory exporter. Names and attributes follow
//! the GenAI semantic conventions for tool execution (`execute_tool {tool}`, `gen_ai.*`,
//! `error.type`), and every journal operation is a child span of its call, in the same trace.

mod common;

use std::sync::Arc;

use common::desk::{Refund, SendEmail};
use common::ledger::Downstream;
use effect_tool::{CallOptions, Engine, MemoryStore, RunContext};
use opentelemetry::trace::{SpanId, TracerProvider as _};
use opentelemetry::{Key, Value};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use tracing_subscriber::layer::SubscriberExt;

fn attr<'a>(span: &'a SpanData, key: &str) -> Option<&'a Value> {
    span.attributes
        .iter()
        .find(|kv| kv.key == Key::new(key.to_owned()))
        .map(|kv| &kv.value)
}

fn text(span: &SpanData, key: &str) -> Option<String> {
    attr(span, key).map(|v| v.as_str().into_owned())
}

#[test]
fn spans_reach_the_opentelemetry_sdk_named_by_the_genai_conventions_with_store_children() {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("effect-tool-tests")));
    let bank = Arc::new(Downstream::default());
    let mail = Arc::new(Downstream::default());
    let engine = Engine::new(MemoryStore::new());
    let run = RunContext::new("otel");
    tracing::subscriber::with_default(subscriber, || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(async {
                for _ in 0..2 {
                    engine
                        .call(
                            &Refund(bank.clone()),
                            &run,
                            CallOptions::call_id("call_1"),
                            "o-1".into(),
                        )
                        .await
                        .unwrap();
                }
                let err = engine
                    .call(
                        &SendEmail(mail.clone()),
                        &run,
                        CallOptions::call_id("call_2"),
                        "ann".into(),
                    )
                    .await
                    .unwrap_err();
                assert!(err.as_blocked().is_some(), "{err}");
            })
    });
    provider.force_flush().unwrap();
    assert_eq!((bank.effects(), mail.requests()), (1, 1));
    let spans = exporter.get_finished_spans().unwrap();

    let calls: Vec<&SpanData> = spans.iter().filter(|s| s.name.starts_with("execute_tool ")).collect();
    assert_eq!(
        calls.len(),
        3,
        "{:?}",
        spans.iter().map(|s| &s.name).collect::<Vec<_>>()
    );
    let (executed, replayed, blocked) = (calls[0], calls[1], calls[2]);
    assert_eq!(executed.name, "execute_tool refund");
    for (key, want) in [
        ("gen_ai.operation.name", "execute_tool"),
        ("gen_ai.tool.name", "refund"),
        ("gen_ai.tool.call.id", "call_1"),
        ("gen_ai.tool.type", "function"),
        ("effect_tool.class", "idempotent"),
        ("effect_tool.disposition", "executed"),
        ("effect_tool.store", "memory"),
    ] {
        assert_eq!(
            text(executed, key).as_deref(),
            Some(want),
            "{key}: {:?}",
            executed.attributes
        );
    }
    assert_eq!(attr(executed, "effect_tool.attempt"), Some(&Value::I64(1)));
    assert!(text(executed, "effect_tool.key").is_some_and(|k| k.contains(":refund:")));
    assert_eq!(attr(executed, "error.type"), None);
    assert_eq!(text(replayed, "effect_tool.disposition").as_deref(), Some("replayed"));
    assert_eq!(blocked.name, "execute_tool send_email");
    assert_eq!(text(blocked, "error.type").as_deref(), Some("Blocked"));
    assert_eq!(text(blocked, "effect_tool.disposition").as_deref(), Some("blocked"));

    // The executed call's journal operations: children of its span, in its trace.
    let children: Vec<&SpanData> = spans
        .iter()
        .filter(|s| s.parent_span_id == executed.span_context.span_id() && s.parent_span_id != SpanId::INVALID)
        .collect();
    let names: Vec<&str> = children.iter().map(|s| s.name.as_ref()).collect();
    assert!(
        names.ends_with(&["effect_tool.store claim", "effect_tool.store complete"]),
        "{names:?}"
    );
    for child in &children {
        assert_eq!(child.span_context.trace_id(), executed.span_context.trace_id());
        assert_eq!(text(child, "db.system.name").as_deref(), Some("memory"));
        // Every operation on the call's record names its key (the journal's marker secret,
        // read once per engine, has none).
        if text(child, "db.operation.name").as_deref() != Some("marker-secret") {
            assert_eq!(
                text(child, "effect_tool.key"),
                text(executed, "effect_tool.key"),
                "{child:?}"
            );
        }
    }
    // Each call is a trace of its own (no span was left open across calls).
    assert_ne!(executed.span_context.trace_id(), replayed.span_context.trace_id());
}
