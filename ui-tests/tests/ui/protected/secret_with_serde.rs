use effect_tool::{tool, ToolError};

#[derive(Clone)]
pub struct ApiToken(String);

/// Send an email.
#[tool(effect = "irreversible", key(to))]
async fn send_email(to: String, #[secret] #[serde(rename = "apiKey")] token: ApiToken) -> Result<String, ToolError> {
    Ok(format!("{to}{}", token.0))
}

fn main() {}
