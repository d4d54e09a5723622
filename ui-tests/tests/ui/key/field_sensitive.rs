use effect_tool::{tool, ToolError};

/// Log in.
#[tool(effect = "idempotent", key(user, password))]
async fn login(user: String, #[sensitive] password: String) -> Result<String, ToolError> {
    Ok(format!("{user}{password}"))
}

fn main() {}
