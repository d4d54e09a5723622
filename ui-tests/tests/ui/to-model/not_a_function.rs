use effect_tool::{tool, ToolError};

/// Look up an order.
#[tool(effect = "pure", to_model = 42)]
async fn lookup_order(order_id: String) -> Result<String, ToolError> {
    Ok(order_id)
}

fn main() {}
