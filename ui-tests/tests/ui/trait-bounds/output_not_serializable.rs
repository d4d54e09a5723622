use effect_tool::{tool, ToolError};

#[derive(schemars::JsonSchema)]
pub struct Receipt;

/// Refund an order.
#[tool(effect = "idempotent")]
async fn refund(order_id: String) -> Result<Receipt, ToolError> {
    let _ = order_id;
    Ok(Receipt)
}

fn main() {}
