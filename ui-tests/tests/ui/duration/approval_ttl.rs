use effect_tool::{tool, ToolError};

/// Pay an invoice; an approval lasts two hours.
#[tool(effect = "irreversible", approval = "finance", approval_ttl = "2 hours")]
async fn pay(invoice: String) -> Result<String, ToolError> {
    Ok(invoice)
}

fn main() {}
