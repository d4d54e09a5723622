use effect_tool::{tool, Tool, ToolError};

#[tool(effect = "idempotent", description = "Refund an order.")]
async fn refund(order_id: String) -> Result<String, ToolError> {
    Ok(order_id)
}

fn main() {
    assert_eq!(Refund::DESCRIPTION, "Refund an order.");
}
