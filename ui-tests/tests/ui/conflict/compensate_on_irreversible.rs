use effect_tool::{tool, EffectCtx, ToolError};

/// Send an email.
#[tool(effect = "irreversible", compensate = unsend)]
async fn send_email(to: String) -> Result<String, ToolError> {
    Ok(to)
}

async fn unsend(_: &EffectCtx, _: &SendEmailArgs, _: &String) -> Result<(), ToolError> {
    Ok(())
}

fn main() {}
