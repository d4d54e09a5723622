use effect_tool::{assert_declared, tool, ToolError};

/// Charge a card.
#[tool(effect = "irreversible", approval = "finance")]
async fn send_payment(invoice_id: String) -> Result<String, ToolError> {
    Ok(invoice_id)
}

assert_declared!(SendPayment: irreversable, aproval = "finance", recover = find_payment);

fn main() {}
