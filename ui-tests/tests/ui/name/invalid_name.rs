use effect_tool::{tool, ToolError};

/// Send an email.
#[tool(effect = "irreversible", name = "send email")]
async fn send_email(to: String) -> Result<String, ToolError> {
    Ok(to)
}

fn main() {}
