//! Integers past 2^53 never merge two effects (issue 11, item 3).
//!
//! RFC 8785 writes numbers as doubles, so `9007199254740993` and `9007199254740992` have one
//! canonical text. effect-tool refuses such an integer before anything runs, naming the field
//! and saying to send it as a string; integers within ±(2^53 − 1) are keyed as they are. The
//! refunds are counted at a payments ledger the engine cannot see.

use crate::common;

use std::sync::Arc;

use common::ledger::Downstream;
use effect_tool::{CallOptions, EffectError, Engine, MemoryStore, RunContext, ToolCall, ToolError, Toolkit, tools};

struct Payments {
    ledger: Arc<Downstream>,
}

#[tools]
impl Payments {
    /// Refund an order.
    #[tool(effect = "irreversible")]
    async fn refund(&self, order: u64) -> Result<String, ToolError> {
        self.ledger.apply(&order.to_string());
        Ok(format!("refunded order {order}"))
    }

    /// Refund the orders of a batch.
    #[tool(effect = "irreversible")]
    async fn refund_batch(&self, batch: String, orders: Vec<u64>) -> Result<String, ToolError> {
        for o in &orders {
            self.ledger.apply(&format!("{batch}:{o}"));
        }
        Ok(format!("refunded {} orders", orders.len()))
    }
}

fn payments() -> (Arc<Payments>, Arc<Downstream>) {
    let ledger = Arc::new(Downstream::default());
    (Arc::new(Payments { ledger: ledger.clone() }), ledger)
}

#[tokio::test]
async fn integers_past_2_pow_53_are_refused_naming_the_field_never_merged() {
    let (p, ledger) = payments();
    let engine = Engine::new(MemoryStore::new());
    let run = RunContext::new("run-big");
    let tool = p.refund_tool();
    for (i, order) in [9_007_199_254_740_993u64, 9_007_199_254_740_992]
        .into_iter()
        .enumerate()
    {
        let err = engine
            .call(
                &tool,
                &run,
                CallOptions::call_id(format!("c{i}")),
                PaymentsRefundArgs { order },
            )
            .await
            .expect_err("an integer a double cannot hold is refused");
        let EffectError::InvalidArguments { tool, message } = &err else {
            panic!("expected invalid arguments, got {err:?}");
        };
        assert_eq!(tool, "refund");
        assert!(message.contains("`$.order`"), "names the field: {message}");
        assert!(message.contains(&order.to_string()), "names the value: {message}");
        assert!(message.contains("as a string"), "says what to use instead: {message}");
    }
    // Refused before anything ran or was journaled.
    assert_eq!(ledger.requests(), 0);
    let store = engine.store();
    assert!(store.list(&effect_tool::Filter::all()).await.unwrap().is_empty());
}

#[tokio::test]
async fn integers_within_2_pow_53_are_keyed_as_they_are() {
    let (p, ledger) = payments();
    let engine = Engine::new(MemoryStore::new());
    let run = RunContext::new("run-safe");
    let tool = p.refund_tool();
    let max = 9_007_199_254_740_991u64;
    for (i, order) in [max, max - 1].into_iter().enumerate() {
        let out = engine
            .call(
                &tool,
                &run,
                CallOptions::call_id(format!("c{i}")),
                PaymentsRefundArgs { order },
            )
            .await
            .expect("refunded");
        assert_eq!(out, format!("refunded order {order}"));
    }
    assert_eq!(ledger.effects(), 2, "two orders, two refunds");
    assert!(ledger.has(&max.to_string()) && ledger.has(&(max - 1).to_string()));
}

#[tokio::test]
async fn a_model_sending_a_big_integer_in_a_list_is_told_its_path() {
    let (p, ledger) = payments();
    let toolkit = Toolkit::new().with(p.refund_batch_tool());
    let dispatcher = toolkit.dispatcher(Engine::new(MemoryStore::new()));
    let run = RunContext::new("run-model");
    let first = r#"{"batch": "b1", "orders": [1, 9007199254740993]}"#;
    let second = r#"{"batch": "b1", "orders": [1, 9007199254740992]}"#;
    let results = dispatcher
        .dispatch(
            &run,
            &[
                ToolCall::new("call_1", "refund_batch", first),
                ToolCall::new("call_2", "refund_batch", second),
            ],
        )
        .await;
    // The dispatcher's validation refuses them first: the schema states the range keys hold
    // exactly (`maximum` 2^53 - 1), and the message names the element and that bound.
    for r in &results {
        assert!(r.is_error(), "refused: {}", r.content());
        assert!(r.content().contains("`orders[1]`"), "{}", r.content());
        assert!(r.content().contains("9007199254740991"), "{}", r.content());
    }
    assert_eq!(ledger.requests(), 0, "nothing ran");
}
