use effect_tool::{tool, ToolError};

/// Refund an order.
#[tool(effect = "idempotent", when = |a| a.amount_cents > 10_000)]
async fn refund(order_id: String, amount_cents: u64) -> Result<String, ToolError> {
    Ok(format!("{order_id}{amount_cents}"))
}

fn main() {}
