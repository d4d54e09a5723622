use effect_tool::{tool, unique_tool_names, ToolError};

/// Refund an order.
#[tool(effect = "idempotent")]
async fn refund(order_id: String) -> Result<String, ToolError> {
    Ok(order_id)
}

mod v2 {
    use effect_tool::{tool, ToolError};

    /// Refund an order, the new way.
    #[tool(effect = "idempotent")]
    pub async fn refund(order_id: String) -> Result<String, ToolError> {
        Ok(order_id)
    }
}

unique_tool_names!(Refund, v2::Refund);

fn main() {}
