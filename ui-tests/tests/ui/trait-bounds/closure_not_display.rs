use effect_tool::{tool, ToolError};

/// Refund an order.
#[tool(effect = "idempotent", key = |a| vec![a.order_id.clone()])]
async fn refund(order_id: String) -> Result<String, ToolError> {
    Ok(order_id)
}

fn main() {}
