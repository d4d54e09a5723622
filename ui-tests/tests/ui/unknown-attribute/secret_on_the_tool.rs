use effect_tool::{tool, ToolError};

/// Log in.
#[tool(effect = "idempotent", secret)]
async fn login(user: String, password: String) -> Result<String, ToolError> {
    Ok(format!("{user}{password}"))
}

fn main() {}
