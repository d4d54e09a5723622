use effect_tool::{tool, ToolError};

/// Refund an order.
#[tool(effect = "idempotent", key = |ctx, a| a.order_id.clone())]
async fn refund(order_id: String) -> Result<String, ToolError> {
    Ok(order_id)
}

fn main() {}
