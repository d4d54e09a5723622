use effect_tool::{tool, ToolError};

// A JSON form but no JSON Schema: the tool could not declare its output's shape (MCP
// `outputSchema`, the manifest's `# output:` line).
#[derive(serde::Serialize, serde::Deserialize)]
pub struct Receipt {
    pub id: String,
}

/// Refund an order.
#[tool(effect = "idempotent")]
async fn refund(order_id: String) -> Result<Receipt, ToolError> {
    Ok(Receipt { id: order_id })
}

fn main() {}
