use effect_tool::{tool, ToolError};

/// Refund an order.
#[tool(effect = "idempotent", key(order, amount_cents))]
async fn refund(order_id: String, amount_cents: u64) -> Result<String, ToolError> {
    Ok(format!("{order_id}{amount_cents}"))
}

fn main() {}
