use effect_tool::{tool, ToolError};

fn login_key(args: &LoginArgs) -> String {
    format!("login:{}:{}", args.user, args.password)
}

/// Log in: the key closure tries the generated code's own name for the arguments.
#[tool(effect = "idempotent", key = |_| login_key(__args))]
async fn login(user: String, #[sensitive] password: String) -> Result<String, ToolError> {
    Ok(format!("{user}{password}"))
}

fn main() {}
