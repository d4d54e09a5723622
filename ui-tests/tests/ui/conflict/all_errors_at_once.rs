use effect_tool::{tool, ToolError};

// Every problem of one declaration is reported in the same build.
/// Refund an order.
#[tool(effect = "compensable", windw = "run", ttl = "1 day", when = |a| a.order_id.is_empty(), key(order))]
async fn refund(order_id: String) -> Result<String, ToolError> {
    Ok(order_id)
}

fn main() {}
