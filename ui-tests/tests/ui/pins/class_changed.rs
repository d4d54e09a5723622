use effect_tool::{assert_declared, tool, ToolError};

/// Charge a card. (Reviewed as irreversible with finance's approval; since changed.)
#[tool(effect = "idempotent", key(invoice_id))]
async fn send_payment(invoice_id: String) -> Result<String, ToolError> {
    Ok(invoice_id)
}

assert_declared!(SendPayment: irreversible, approval = "finance");

fn main() {}
