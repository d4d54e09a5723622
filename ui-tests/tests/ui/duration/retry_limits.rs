use effect_tool::{tool, ToolError};

/// Refund an order.
#[tool(effect = "idempotent", retry(max_attempts = 0, base_delay = "1m", max_delay = "1s"))]
async fn refund(order_id: String) -> Result<String, ToolError> {
    Ok(order_id)
}

fn main() {}
