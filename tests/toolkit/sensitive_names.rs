//! A `#[sensitive]` value is masked under every name serde accepts for it, not only its
//! serialized one: a deserialize-only rename (`rename(deserialize = "card")`) and an `alias`.
//! A wrong-typed card number sent under such a name is never quoted back to the model, neither
//! by the schema check (the dispatcher) nor by serde's decoding (`DynTool::call_json`).

use std::sync::atomic::{AtomicUsize, Ordering};

use effect_tool::toolkit::ToolCall;
use effect_tool::{
    CallOptions, Disposition, DynTool, EffectCtx, Engine, MemoryStore, RunContext, Tool, ToolError, tool, toolkit,
};
use serde_json::json;

const CARD: &str = "4111111111111111";
const CARD_NUMBER: u64 = 4_111_111_111_111_111;

static CHARGED: AtomicUsize = AtomicUsize::new(0);

/// The tests of this file share [`CHARGED`]: each holds this lock while it counts.
static COUNTING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Charge an order to the card the user typed.
#[tool(effect = "irreversible")]
async fn charge(
    _ctx: &EffectCtx,
    /// The order.
    order: String,
    /// The card number, as the user typed it.
    #[sensitive]
    #[serde(rename(deserialize = "card"))]
    card_number: String,
) -> Result<String, ToolError> {
    CHARGED.fetch_add(1, Ordering::SeqCst);
    Ok(format!("charged {order} to a card of {} digits", card_number.len()))
}

/// Refund an order to a card.
#[tool(effect = "irreversible")]
async fn refund_card(
    _ctx: &EffectCtx,
    /// The order.
    order: String,
    /// The card number (also accepted as `pan`).
    #[sensitive]
    #[serde(alias = "pan")]
    card_number: String,
) -> Result<String, ToolError> {
    CHARGED.fetch_add(1, Ordering::SeqCst);
    Ok(format!("refunded {order} to a card of {} digits", card_number.len()))
}

#[test]
fn every_name_serde_accepts_is_declared_sensitive() {
    assert_eq!(Charge::SENSITIVE, ["card_number", "card"]);
    assert_eq!(RefundCard::SENSITIVE, ["card_number", "pan"]);
}

#[tokio::test]
async fn a_wrong_typed_value_under_a_deserialize_name_is_not_quoted_to_the_model() {
    let dispatcher = toolkit![Charge, RefundCard].dispatcher(Engine::new(MemoryStore::new()));
    let run = RunContext::new("sensitive-names");
    let _counting = COUNTING.lock().await;
    let before = CHARGED.load(Ordering::SeqCst);
    for (i, (tool, args)) in [
        ("charge", json!({"order": "o-1", "card": CARD_NUMBER})),
        ("charge", json!({"order": "o-1", "card": [CARD]})),
        ("charge", json!({"order": "o-1", "card": {"number": CARD}})),
        ("refund_card", json!({"order": "o-1", "pan": CARD_NUMBER})),
        ("refund_card", json!({"order": "o-1", "card_number": CARD_NUMBER})),
    ]
    .into_iter()
    .enumerate()
    {
        let call = ToolCall::new(format!("c{i}"), tool, args.to_string());
        let result = dispatcher.call(&run, &call).await;
        let content = result.content();
        assert!(
            matches!(result.disposition, Disposition::Rejected | Disposition::Failed),
            "#{i} {args}: {} {content}",
            result.disposition
        );
        assert!(
            !content.contains(CARD),
            "#{i} {args}: the model reads the card number: {content}"
        );
    }
    assert_eq!(CHARGED.load(Ordering::SeqCst), before, "a refused call ran");
}

#[tokio::test]
async fn serdes_own_error_is_scrubbed_under_every_name() {
    let engine = Engine::new(MemoryStore::new());
    let run = RunContext::new("sensitive-names-serde");
    let _counting = COUNTING.lock().await;
    let before = CHARGED.load(Ordering::SeqCst);
    let out = DynTool::call_json(
        &Charge,
        &engine,
        &run,
        CallOptions::call_id("c1"),
        json!({"order": "o-2", "card": CARD_NUMBER}),
    )
    .await;
    let err = out.result.unwrap_err().to_string();
    assert!(!err.contains(CARD), "the error quotes the card number: {err}");
    assert!(err.contains("[sensitive]"), "{err}");
    let out = DynTool::call_json(
        &RefundCard,
        &engine,
        &run,
        CallOptions::call_id("c2"),
        json!({"order": "o-2", "pan": CARD_NUMBER}),
    )
    .await;
    let err = out.result.unwrap_err().to_string();
    assert!(!err.contains(CARD), "the error quotes the card number: {err}");
    assert!(err.contains("[sensitive]"), "{err}");
    // Well-typed, under the accepted names, the calls run.
    for (tool, args) in [
        (&Charge as &dyn DynTool, json!({"order": "o-3", "card": CARD})),
        (&RefundCard, json!({"order": "o-3", "pan": CARD})),
    ] {
        let out = tool.call_json(&engine, &run, CallOptions::call_id("c3"), args).await;
        assert!(out.result.is_ok(), "{:?}", out.result);
    }
    assert_eq!(CHARGED.load(Ordering::SeqCst), before + 2);
}
