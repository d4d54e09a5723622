use effect_tool::{tool, ToolError};

/// Look up an order.
#[tool(effect = "pure", to_model = summary)]
async fn lookup_order(order_id: String) -> Result<String, ToolError> {
    Ok(order_id)
}

// Returns a number, not what the model reads.
fn summary(output: &String) -> usize {
    output.len()
}

fn main() {}
