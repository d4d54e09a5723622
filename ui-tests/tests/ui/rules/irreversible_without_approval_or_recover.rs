use effect_tool::{tool, ToolError};

/// Charge a card.
#[tool(effect = "irreversible", key(invoice_id), timeout = "30s")]
async fn send_payment(invoice_id: String) -> Result<String, ToolError> {
    Ok(invoice_id)
}

fn main() {}
