use effect_tool::{tool, ToolError};

/// Charge a card.
#[tool(effect = "irreversible", key(invoice_id), approval = "finanse", timeout = "30s")]
async fn send_payment(invoice_id: String) -> Result<String, ToolError> {
    Ok(invoice_id)
}

/// Close an account.
#[tool(effect = "irreversible", key(account_id), approval = "legal", timeout = "30s")]
async fn close_account(account_id: String) -> Result<String, ToolError> {
    Ok(account_id)
}

fn main() {}
