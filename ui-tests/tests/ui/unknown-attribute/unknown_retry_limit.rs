use effect_tool::{tool, ToolError};

/// Refund an order.
#[tool(effect = "idempotent", retry(attempts = 3))]
async fn refund(order_id: String) -> Result<String, ToolError> {
    Ok(order_id)
}

fn main() {}
