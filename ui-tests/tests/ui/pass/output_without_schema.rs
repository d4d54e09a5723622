use effect_tool::{tool, ToolError};

// A JSON form but no JSON Schema: the tool compiles (as before output schemas existed), and
// declares no output shape (no MCP `outputSchema`, no manifest `# output:` line).
#[derive(serde::Serialize, serde::Deserialize)]
pub struct Receipt {
    pub id: String,
}

/// Refund an order.
#[tool(effect = "idempotent")]
async fn refund(order_id: String) -> Result<Receipt, ToolError> {
    Ok(Receipt { id: order_id })
}

fn main() {
    use effect_tool::Tool;
    assert!(Refund::output_schema().is_none());
}
