//! What `#[tool]` generates, at run time through the engine and a toolkit: secrets kept out of
//! the journal, the `recover` and `compensate` hooks wired to the declared functions, JSON
//! arguments decoded (unknown fields refused before anything runs). Effects are counted with
//! counters the engine cannot see.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use effect_tool::{
    CallOptions, EffectCtx, Engine, Filter, MemoryStore, RunContext, Store, ToolCall, ToolError, tool, toolkit, tools,
};

static SENT: AtomicUsize = AtomicUsize::new(0);

/// Send a message with an API token.
#[tool(effect = "irreversible", key(to))]
async fn send_message(to: String, body: String, #[sensitive] api_token: String) -> Result<String, ToolError> {
    SENT.fetch_add(1, Ordering::SeqCst);
    Ok(format!(
        "sent to {to}: {} chars, token of {} chars",
        body.len(),
        api_token.len()
    ))
}

#[tokio::test]
async fn a_secret_argument_never_reaches_the_journal() {
    let engine = Engine::new(MemoryStore::new());
    let store = engine.store().clone();
    let run = RunContext::new("run-secret");
    let out = engine
        .call(
            &SendMessage,
            &run,
            CallOptions::call_id("c1"),
            SendMessageArgs {
                to: "ada@example.com".into(),
                body: "hello".into(),
                api_token: "hunter2-very-secret".into(),
            },
        )
        .await
        .unwrap();
    assert!(out.contains("token of 19 chars"));
    let records = store.list(&Filter::default()).await.unwrap();
    assert_eq!(records.len(), 1);
    let stored = serde_json::to_string(&records[0].input).unwrap();
    assert!(stored.contains("ada@example.com"), "{stored}");
    assert!(!stored.contains("hunter2"), "the secret was stored: {stored}");
    let audit = format!("{:?}", store.audit(None).await.unwrap());
    assert!(!audit.contains("hunter2"), "the secret is in the audit trail: {audit}");
}

static CHARGES: AtomicUsize = AtomicUsize::new(0);
static LOOKUPS: AtomicUsize = AtomicUsize::new(0);

/// Charge a card; the network times out after the request left.
#[tool(effect = "irreversible", key(invoice), recover = find_charge)]
async fn charge(invoice: String) -> Result<String, ToolError> {
    CHARGES.fetch_add(1, Ordering::SeqCst);
    let _ = invoice;
    Err(ToolError::unknown("timed out after sending"))
}

/// Asks the payment system: the charge did land.
async fn find_charge(_ctx: &EffectCtx, args: &ChargeArgs) -> Result<Option<String>, ToolError> {
    LOOKUPS.fetch_add(1, Ordering::SeqCst);
    Ok(Some(format!("ch_{}", args.invoice)))
}

#[tokio::test]
async fn an_unknown_outcome_is_reconciled_through_the_declared_recover_hook() {
    let engine = Engine::new(MemoryStore::new());
    let run = RunContext::new("run-recover");
    let out = engine
        .call(
            &Charge,
            &run,
            CallOptions::call_id("c1"),
            ChargeArgs {
                invoice: "inv-7".into(),
            },
        )
        .await
        .unwrap();
    assert_eq!(out, "ch_inv-7");
    assert_eq!(
        CHARGES.load(Ordering::SeqCst),
        1,
        "an irreversible effect runs at most once"
    );
    assert_eq!(LOOKUPS.load(Ordering::SeqCst), 1);

    // Asked again: the reconciled result is recorded; neither the charge nor the lookup runs.
    let again = engine
        .call(
            &Charge,
            &run,
            CallOptions::call_id("c2"),
            ChargeArgs {
                invoice: "inv-7".into(),
            },
        )
        .await
        .unwrap();
    assert_eq!(again, "ch_inv-7");
    assert_eq!(CHARGES.load(Ordering::SeqCst), 1);
    assert_eq!(LOOKUPS.load(Ordering::SeqCst), 1);
}

/// Seats currently held, as the airline sees them.
static HELD: AtomicUsize = AtomicUsize::new(0);

/// Hold a seat until the booking completes.
#[tool(effect = "compensable", key(flight, seat), compensate = release_seat)]
async fn hold_seat(flight: String, seat: String) -> Result<String, ToolError> {
    HELD.fetch_add(1, Ordering::SeqCst);
    Ok(format!("{flight}/{seat}"))
}

async fn release_seat(_ctx: &EffectCtx, _args: &HoldSeatArgs, _hold: &String) -> Result<(), ToolError> {
    HELD.fetch_sub(1, Ordering::SeqCst);
    Ok(())
}

#[tokio::test]
async fn abandoning_a_run_calls_the_declared_compensation() {
    let engine = Engine::new(MemoryStore::new());
    let run = RunContext::new("run-abandon");
    let kit = toolkit![HoldSeat];
    let calls = [ToolCall {
        id: "c1".into(),
        name: "hold_seat".into(),
        arguments: r#"{"flight": "LH400", "seat": "12A"}"#.into(),
    }];
    let results = kit.dispatcher(engine.clone()).dispatch(&run, &calls).await;
    assert_eq!(results[0].output().and_then(|v| v.as_str()), Some("LH400/12A"));
    assert_eq!(HELD.load(Ordering::SeqCst), 1);

    let report = kit.abandon_run(&engine, &run).await.unwrap();
    assert_eq!(report.compensated.len(), 1, "{report:?}");
    assert!(report.is_complete());
    assert_eq!(HELD.load(Ordering::SeqCst), 0, "the seat was released");
}

/// A counter service whose tools share state.
pub struct Counter {
    hits: AtomicUsize,
}

#[tools]
impl Counter {
    /// Count one hit for a page.
    #[tool(effect = "idempotent", key(page))]
    pub async fn hit(&self, page: String) -> Result<usize, ToolError> {
        let _ = page;
        Ok(self.hits.fetch_add(1, Ordering::SeqCst) + 1)
    }
}

#[tokio::test]
async fn json_arguments_are_decoded_and_unknown_fields_refused_before_anything_runs() {
    let counter = Arc::new(Counter {
        hits: AtomicUsize::new(0),
    });
    let kit = toolkit![CounterHit = counter.hit_tool()];
    let dispatcher = kit.dispatcher(Engine::new(MemoryStore::new()));
    let run = RunContext::new("run-json");
    let call = |id: &str, arguments: &str| ToolCall {
        id: id.into(),
        name: "hit".into(),
        arguments: arguments.into(),
    };
    let results = dispatcher
        .dispatch(
            &run,
            &[
                call("c1", r#"{"page": "/home"}"#),
                call("c2", r#"{"page": "/home", "extra": true}"#),
                call("c3", r#"{"page": "/home"}"#),
            ],
        )
        .await;
    assert_eq!(results[0].output().and_then(|v| v.as_u64()), Some(1));
    assert!(results[1].output().is_none(), "{}", results[1].content());
    assert!(results[1].content().contains("extra"), "{}", results[1].content());
    assert_eq!(
        results[2].output().and_then(|v| v.as_u64()),
        Some(1),
        "same key: the recorded result"
    );
    assert_eq!(counter.hits.load(Ordering::SeqCst), 1);
}
