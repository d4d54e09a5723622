//! `#[tool(stream)]` and `#[tool(recover_first, recover_settle = ...)]` through the engine: a
//! streaming tool's items reach the run's progress callback and its last item is recorded (a
//! replay returns it and reports no progress); a stream that yields nothing, or fails part way,
//! follows its class's rules; a `recover_first` tool asks `recover` before its first execution
//! on an emptied journal. Effects are counted by a ledger the engine cannot see (statics).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use effect_tool::{
    CallOptions, EffectCtx, EffectError, Engine, Filter, MemoryStore, RunContext, Store, Tool, ToolCall, ToolError,
    tool, toolkit,
};
use futures::Stream;
use futures::stream::{self, StreamExt};

/// One step of a deployment, as the deploy tool reports it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct Step {
    /// What was done.
    pub stage: String,
    /// How many stages are done.
    pub done: u32,
}

/// Steps actually made on the (pretend) cluster: the outside ledger.
static ROLLED: AtomicUsize = AtomicUsize::new(0);

/// Roll a service out in three stages, reporting each.
#[tool(effect = "idempotent", key(service), stream)]
async fn roll_out(ctx: &EffectCtx, service: String) -> impl Stream<Item = Result<Step, ToolError>> {
    let _ = ctx;
    stream::iter(["built", "pushed", "live"])
        .enumerate()
        .map(move |(i, stage)| {
            ROLLED.fetch_add(1, Ordering::SeqCst);
            Ok(Step {
                stage: format!("{service}: {stage}"),
                done: i as u32 + 1,
            })
        })
}

/// The progress values a run receives, as JSON.
fn progress_log() -> (RunContext, Arc<Mutex<Vec<serde_json::Value>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    let run = RunContext::new("run-stream").with_progress(Arc::new(move |event| {
        sink.lock().unwrap().push(event.value.clone());
    }));
    (run, seen)
}

#[tokio::test]
async fn a_stream_tool_reports_progress_and_records_its_last_item() {
    assert_eq!(RollOut::output_type(), "Step");
    let schema = RollOut::output_schema().expect("a stream tool declares its item as its output");
    assert!(schema.to_string().contains("stage"), "{schema}");

    let engine = Engine::new(MemoryStore::new());
    let (run, seen) = progress_log();
    let args = RollOutArgs {
        service: "billing".into(),
    };
    let out = engine
        .call(&RollOut, &run, CallOptions::call_id("c1"), args.clone())
        .await
        .unwrap();
    assert_eq!(
        out,
        Step {
            stage: "billing: live".into(),
            done: 3
        }
    );
    assert_eq!(ROLLED.load(Ordering::SeqCst), 3);
    let progress: Vec<u64> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|v| v["done"].as_u64().unwrap())
        .collect();
    assert_eq!(progress, [1, 2, 3], "every item is progress, in order");
    let records = engine.store().list(&Filter::default()).await.unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!(
        records[0].output,
        Some(serde_json::json!({"stage": "billing: live", "done": 3})),
        "the journal records the last item"
    );

    // The same key again: the recorded last item, no step made, no progress reported.
    seen.lock().unwrap().clear();
    let again = engine
        .call(&RollOut, &run, CallOptions::call_id("c2"), args)
        .await
        .unwrap();
    assert_eq!(again, out);
    assert_eq!(ROLLED.load(Ordering::SeqCst), 3, "a replay makes no step");
    assert!(seen.lock().unwrap().is_empty(), "a replay reports no progress");

    // Through a toolkit's dispatcher, as a model's call: the output is the last item.
    let kit = toolkit![RollOut];
    let (run, seen) = progress_log();
    let results = kit
        .dispatcher(engine.clone())
        .dispatch(&run, &[ToolCall::new("c3", "roll_out", r#"{"service": "search"}"#)])
        .await;
    assert_eq!(results[0].output().unwrap()["stage"], "search: live");
    assert_eq!(seen.lock().unwrap().len(), 3);
    assert_eq!(ROLLED.load(Ordering::SeqCst), 6);
}

/// Look for nothing at all.
#[tool(effect = "idempotent", stream)]
async fn find_nothing(query: String) -> impl Stream<Item = Result<Step, ToolError>> {
    let _ = query;
    stream::empty()
}

#[tokio::test]
async fn a_stream_that_yields_nothing_fails_definitively() {
    let engine = Engine::new(MemoryStore::new());
    let err = engine
        .call(
            &FindNothing,
            &RunContext::new("run-empty"),
            CallOptions::call_id("c1"),
            FindNothingArgs { query: "x".into() },
        )
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(text.contains("`find_nothing`'s stream ended without a value"), "{text}");
    assert!(
        matches!(&err, EffectError::Tool { failure, .. } if failure.to_string().contains("definitive")),
        "{err:?}"
    );
}

/// Made by the set-up of `migrate`, before its stream.
static MIGRATIONS_OPENED: AtomicUsize = AtomicUsize::new(0);

/// Migrate a database; the set-up checks the target first.
#[tool(effect = "idempotent", key(database), stream)]
async fn migrate(database: String) -> Result<impl Stream<Item = Result<Step, ToolError>>, ToolError> {
    if database.is_empty() {
        return Err(ToolError::definitive("name the database to migrate"));
    }
    MIGRATIONS_OPENED.fetch_add(1, Ordering::SeqCst);
    Ok(stream::iter(1..=2u32).map(move |done| {
        Ok(Step {
            stage: format!("{database}: migration {done}"),
            done,
        })
    }))
}

#[tokio::test]
async fn a_stream_with_a_set_up_fails_before_its_first_item_or_streams() {
    let engine = Engine::new(MemoryStore::new());
    let run = RunContext::new("run-migrate");
    let err = engine
        .call(
            &Migrate,
            &run,
            CallOptions::call_id("c1"),
            MigrateArgs { database: "".into() },
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("name the database to migrate"), "{err}");
    assert_eq!(MIGRATIONS_OPENED.load(Ordering::SeqCst), 0);
    let out = engine
        .call(
            &Migrate,
            &run,
            CallOptions::call_id("c2"),
            MigrateArgs {
                database: "orders".into(),
            },
        )
        .await
        .unwrap();
    assert_eq!(out.stage, "orders: migration 2");
    assert_eq!(MIGRATIONS_OPENED.load(Ordering::SeqCst), 1);
}

/// Attempts of `sync_mirror`, and the items it yielded: the outside ledger.
static MIRROR_ATTEMPTS: AtomicUsize = AtomicUsize::new(0);

/// Sync a mirror: the first attempt loses its connection after one item.
#[tool(
    effect = "idempotent",
    key(mirror),
    stream,
    retry(max_attempts = 3, base_delay = "5ms", max_delay = "20ms")
)]
async fn sync_mirror(mirror: String) -> impl Stream<Item = Result<Step, ToolError>> {
    let attempt = MIRROR_ATTEMPTS.fetch_add(1, Ordering::SeqCst) + 1;
    stream::iter(1..=3u32).map(move |done| {
        if attempt == 1 && done == 2 {
            Err(ToolError::transient("connection reset"))
        } else {
            Ok(Step {
                stage: format!("{mirror}: {done}"),
                done,
            })
        }
    })
}

#[tokio::test]
async fn an_idempotent_stream_that_fails_part_way_is_run_again() {
    let engine = Engine::new(MemoryStore::new());
    let (run, seen) = progress_log();
    let out = engine
        .call(
            &SyncMirror,
            &run,
            CallOptions::call_id("c1"),
            SyncMirrorArgs { mirror: "eu".into() },
        )
        .await
        .unwrap();
    assert_eq!(out.done, 3);
    assert_eq!(
        MIRROR_ATTEMPTS.load(Ordering::SeqCst),
        2,
        "retried once after the transient failure"
    );
    let progress: Vec<u64> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|v| v["done"].as_u64().unwrap())
        .collect();
    assert_eq!(
        progress,
        [1, 1, 2, 3],
        "the first attempt's item, then the second attempt's"
    );
}

/// Payments sent, as the bank sees them: the outside ledger.
static PAYOUTS: AtomicUsize = AtomicUsize::new(0);

/// Pay out in two transfers; the connection drops after the first one left.
#[tool(effect = "irreversible", key(batch), stream)]
async fn pay_out(batch: String) -> impl Stream<Item = Result<Step, ToolError>> {
    stream::iter(1..=2u32).map(move |done| {
        if done == 2 {
            return Err(ToolError::unknown("connection dropped after sending"));
        }
        PAYOUTS.fetch_add(1, Ordering::SeqCst);
        Ok(Step {
            stage: format!("{batch}: transfer {done}"),
            done,
        })
    })
}

#[tokio::test]
async fn an_irreversible_stream_that_fails_part_way_is_not_run_again() {
    let engine = Engine::new(MemoryStore::new());
    let (run, seen) = progress_log();
    let args = PayOutArgs { batch: "b-9".into() };
    let err = engine
        .call(&PayOut, &run, CallOptions::call_id("c1"), args.clone())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, EffectError::Blocked(b) if b.reason.to_string().contains("unknown outcome")),
        "an unknown outcome of an irreversible tool is in doubt: {err:?}"
    );
    assert_eq!(
        seen.lock().unwrap().len(),
        1,
        "the item before the failure was reported"
    );
    assert_eq!(PAYOUTS.load(Ordering::SeqCst), 1);
    let again = engine
        .call(&PayOut, &run, CallOptions::call_id("c2"), args)
        .await
        .unwrap_err();
    assert!(matches!(again, EffectError::Blocked(_)), "{again:?}");
    assert_eq!(
        PAYOUTS.load(Ordering::SeqCst),
        1,
        "an unknown outcome is never run again"
    );
}

/// Invoices the billing system holds, by number: the outside ledger `recover` reads.
static INVOICES: Mutex<Vec<String>> = Mutex::new(Vec::new());
/// How often `find_invoice` asked.
static INVOICE_LOOKUPS: AtomicUsize = AtomicUsize::new(0);

/// Send an invoice.
#[tool(effect = "irreversible", key(number), recover = find_invoice, recover_first, recover_settle = "1ms")]
async fn send_invoice(number: String) -> Result<String, ToolError> {
    INVOICES.lock().unwrap().push(number.clone());
    Ok(format!("sent {number}"))
}

/// Asks the billing system whether the invoice exists.
async fn find_invoice(_ctx: &EffectCtx, args: &SendInvoiceArgs) -> Result<Option<String>, ToolError> {
    INVOICE_LOOKUPS.fetch_add(1, Ordering::SeqCst);
    let found = INVOICES.lock().unwrap().contains(&args.number);
    Ok(found.then(|| format!("sent {}", args.number)))
}

#[tokio::test]
async fn a_recover_first_tool_finds_its_effect_on_an_emptied_journal() {
    const { assert!(SendInvoice::RECOVER_FIRST) };
    assert_eq!(SendInvoice::RECOVER_SETTLE, Some(Duration::from_millis(1)));
    let manifest = toolkit![SendInvoice, RollOut].manifest();
    assert!(
        manifest.contains(" recover=yes recover_first=yes recover_settle=1ms compensate=no "),
        "{manifest}"
    );
    assert!(manifest.contains("# output: roll_out: Step schema="), "{manifest}");
    let args = SendInvoiceArgs { number: "INV-1".into() };
    let run = RunContext::new("run-invoice");
    let first = Engine::new(MemoryStore::new());
    let out = first
        .call(&SendInvoice, &run, CallOptions::call_id("c1"), args.clone())
        .await
        .unwrap();
    assert_eq!(out, "sent INV-1");
    assert_eq!(
        INVOICE_LOOKUPS.load(Ordering::SeqCst),
        1,
        "asked before the first execution"
    );
    assert_eq!(INVOICES.lock().unwrap().len(), 1);

    // The journal is restored from a backup taken before the call: it knows nothing of it.
    let restored = Engine::new(MemoryStore::new());
    let again = restored
        .call(&SendInvoice, &run, CallOptions::call_id("c1"), args)
        .await
        .unwrap();
    assert_eq!(again, "sent INV-1");
    assert_eq!(INVOICE_LOOKUPS.load(Ordering::SeqCst), 2);
    assert_eq!(INVOICES.lock().unwrap().len(), 1, "found by recover, not sent again");
}
