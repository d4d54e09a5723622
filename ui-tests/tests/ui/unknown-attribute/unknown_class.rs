use effect_tool::{tool, ToolError};

/// Refund an order.
#[tool(effect = "idempotnt")]
async fn refund(order_id: String) -> Result<String, ToolError> {
    Ok(order_id)
}

fn main() {}
