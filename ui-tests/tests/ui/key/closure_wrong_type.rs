use effect_tool::{tool, ToolError};

struct Other {
    id: String,
}

/// Refund an order.
#[tool(effect = "idempotent", key = |a: &Other| a.id.clone())]
async fn refund(order_id: String) -> Result<String, ToolError> {
    Ok(order_id)
}

fn main() {}
