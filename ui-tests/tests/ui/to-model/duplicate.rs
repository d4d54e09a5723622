use effect_tool::{tool, ModelOutput, ToolError};

/// Look up an order.
#[tool(effect = "pure", to_model = summary, to_model = summary)]
async fn lookup_order(order_id: String) -> Result<String, ToolError> {
    Ok(order_id)
}

fn summary(output: &String) -> ModelOutput {
    ModelOutput::text(format!("{} characters", output.len()))
}

fn main() {}
