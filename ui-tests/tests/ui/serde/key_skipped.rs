use effect_tool::{tool, ToolError};

/// Charge an invoice.
#[tool(effect = "irreversible", key(invoice))]
async fn charge(
    /// Which invoice.
    #[serde(skip)]
    invoice: String,
) -> Result<String, ToolError> {
    Ok(invoice)
}

fn main() {}
