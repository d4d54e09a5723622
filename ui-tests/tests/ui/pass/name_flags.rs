use effect_tool::{tool, Tool, ToolError};

/// Send an email.
#[tool(effect = "irreversible", name = "send_email-v2", strict_input, open_world = false)]
async fn send_email(to: String) -> Result<String, ToolError> {
    Ok(to)
}

fn main() {
    assert_eq!(SendEmail::NAME, "send_email-v2");
    const { assert!(SendEmail::STRICT_INPUT) };
    assert_eq!(SendEmail::OPEN_WORLD, Some(false));
}
