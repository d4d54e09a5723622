use effect_tool::{tool, ToolError};

/// Refund an order.
#[tool(effect = "idempotent", timeout = "30 sec")]
async fn refund(order_id: String) -> Result<String, ToolError> {
    Ok(order_id)
}

fn main() {}
