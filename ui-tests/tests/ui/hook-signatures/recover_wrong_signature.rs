use effect_tool::{tool, ToolError};

/// Refund an order.
#[tool(effect = "idempotent", recover = find_refund)]
async fn refund(order_id: String) -> Result<String, ToolError> {
    Ok(order_id)
}

async fn find_refund(order_id: String) -> Result<Option<String>, ToolError> {
    Ok(Some(order_id))
}

fn main() {}
