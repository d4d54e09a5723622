use effect_tool::{tool, ToolError};

#[tool(effect = "idempotent", description = "  ")]
async fn refund(order_id: String) -> Result<String, ToolError> {
    Ok(order_id)
}

fn main() {}
