use effect_tool::{tool, ToolError};

/// Refund an order.
#[tool(effect = "idempotent")]
async fn refund(order_id: &str) -> Result<String, ToolError> {
    Ok(order_id.to_owned())
}

fn main() {}
