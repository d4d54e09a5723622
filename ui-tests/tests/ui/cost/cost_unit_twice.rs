use effect_tool::{tool, ToolError};

/// A refund that declares its cost in one unit twice.
#[tool(effect = "idempotent", key(order_id), cost(refund_cents = |a| a.amount_cents, refund_cents = |_| 1u64))]
async fn issue_refund(order_id: String, amount_cents: u64) -> Result<String, ToolError> {
    Ok(format!("{order_id}: {amount_cents}"))
}

fn main() {}
