use effect_tool::{tool, ToolError};

// A person's decision needs the claim that parks the call.
/// Refund part of an order.
#[tool(effect = "idempotent", key(order_id), approval = "finance", when = |a| a.amount_cents > 10_000, one_write)]
async fn issue_refund(order_id: String, amount_cents: u64) -> Result<String, ToolError> {
    Ok(format!("{order_id}:{amount_cents}"))
}

fn main() {}
