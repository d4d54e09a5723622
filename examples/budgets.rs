//! Budgets of a run: at most so many tool calls, so many refunds, so many cents refunded, so
//! many retries, checked and spent through the journal before a call is claimed.
//!
//! Run: `cargo run --example budgets` (no set-up: an in-memory journal, a scripted model).
//!
//! The model asks for four refunds in one run whose refund budget is 25,000 cents. The third
//! asks more than is left and is refused with a tool result that says so ("refund_cents budget
//! of this run: 5,000 left, this call asks 30,000"); the model reads it and asks for what is
//! left. A re-sent call (the same refund, a new call id) replays its result and spends nothing.
//! The payment backend's own count (outside the engine) shows what was refunded.

use std::sync::atomic::{AtomicU64, Ordering};

use effect_tool::testing::ScriptedModel;
use effect_tool::{Budgets, EffectCtx, Engine, EngineEvent, MemoryStore, RunContext, ToolError, Toolkit, tool};
use serde_json::json;

/// Cents the payment backend refunded (the external ledger the engine cannot see).
static REFUNDED_CENTS: AtomicU64 = AtomicU64::new(0);

/// Refund part of an order, in cents. Each call costs its amount in `refund_cents`.
#[tool(
    effect = "idempotent",
    key(order_id, amount_cents),
    cost(refund_cents = |a| a.amount_cents)
)]
async fn issue_refund(ctx: &EffectCtx, order_id: String, amount_cents: u64) -> Result<String, ToolError> {
    // A real backend would get `ctx.idempotency_key()` and dedupe on it.
    let _ = ctx.idempotency_key();
    REFUNDED_CENTS.fetch_add(amount_cents, Ordering::SeqCst);
    Ok(format!("refunded {amount_cents} cents on {order_id}"))
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let toolkit = Toolkit::new().with(IssueRefund);
    println!("manifest:\n{}", toolkit.manifest());
    let engine = Engine::new(MemoryStore::new()).with_budgets(
        Budgets::new()
            .calls(20)
            .calls_of("issue_refund", 4)
            .spend("refund_cents", 25_000)
            .retries(5),
    );
    let mut events = engine.events();
    let dispatcher = toolkit.dispatcher(engine);
    let refund = |order: &str, cents: u64| json!({"order_id": order, "amount_cents": cents});
    let transcript = ScriptedModel::new()
        .call("issue_refund", refund("A-1", 10_000))
        .call("issue_refund", refund("A-2", 10_000))
        .replan()
        .call("issue_refund", refund("A-3", 30_000))
        .call("issue_refund", refund("A-3", 5_000))
        .play(&dispatcher, &RunContext::new("run-1"))
        .await;
    for result in transcript.results() {
        println!(
            "{:<8} {:<10} {}",
            result.call_id,
            result.disposition.as_str(),
            result.content()
        );
    }
    while let Ok(event) = events.try_recv() {
        if let EngineEvent::BudgetExceeded { tool, overdraft, .. } = event {
            println!(
                "event: {tool} refused by {} ({} of {} spent, asked {})",
                overdraft.budget, overdraft.spent, overdraft.limit, overdraft.asks
            );
        }
    }
    let refunded = REFUNDED_CENTS.load(Ordering::SeqCst);
    println!("payment backend refunded {refunded} cents");
    assert_eq!(refunded, 25_000, "exactly the run's budget");
}
