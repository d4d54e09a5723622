use effect_tool::{tool, ToolError};

/// Pay an invoice; an approval lasts two hours.
#[tool(effect = "irreversible", approval = "finance", approval_ttl = "2 hours")]
async fn pay(invoice: String) -> Result<String, ToolError> {
    Ok(invoice)
}

/// Send a letter; an approval's ttl without an approval.
#[tool(effect = "irreversible", recover = find_letter, approval_ttl = "2h")]
async fn send_letter(to: String) -> Result<String, ToolError> {
    Ok(to)
}

async fn find_letter(_ctx: &effect_tool::EffectCtx, _args: &SendLetterArgs) -> Result<Option<String>, ToolError> {
    Ok(None)
}

fn main() {}
