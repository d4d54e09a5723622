use effect_tool::{tool, ToolError};

/// Refund an order.
#[tool(effect = "idempotent", strict_input = true)]
async fn refund(order_id: String) -> Result<String, ToolError> {
    Ok(order_id)
}

fn main() {}
