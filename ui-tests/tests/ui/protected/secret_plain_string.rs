use effect_tool::{tool, ToolError};

/// Send an email.
#[tool(effect = "irreversible", key(to))]
async fn send_email(to: String, #[secret] smtp_password: String) -> Result<String, ToolError> {
    Ok(format!("{to}{smtp_password}"))
}

fn main() {}
