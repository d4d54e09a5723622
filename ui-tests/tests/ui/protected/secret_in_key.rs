use effect_tool::{tool, ToolError};

#[derive(Clone)]
pub struct ApiToken(String);

/// Send an email.
#[tool(effect = "irreversible", key(to, token))]
async fn send_email(to: String, #[secret] token: ApiToken) -> Result<String, ToolError> {
    Ok(format!("{to}{}", token.0))
}

/// Send a text message.
#[tool(effect = "irreversible", key = |a| format!("{}:{}", a.to, a.token.0))]
async fn send_text(to: String, #[secret] token: ApiToken) -> Result<String, ToolError> {
    Ok(format!("{to}{}", token.0))
}

fn main() {}
