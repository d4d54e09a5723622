use effect_tool::{tool, ToolError};

/// Refund an order.
#[tool(effect = idempotent, timeout = 30, window = run, ttl = 24h, name = refund_order)]
async fn refund(order_id: String) -> Result<String, ToolError> {
    Ok(order_id)
}

fn main() {}
