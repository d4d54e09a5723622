use effect_tool::{tool, ToolError};

fn login_key(args: &LoginArgs) -> String {
    format!("login:{}:{}", args.user, args.password)
}

/// Log in.
#[tool(effect = "idempotent", key = |a| login_key(a))]
async fn login(user: String, #[sensitive] password: String) -> Result<String, ToolError> {
    Ok(format!("{user}{password}"))
}

/// Log in again: the arguments reach the key through a method and a format string.
#[tool(effect = "idempotent", key = |a| { let whole = a.clone(); format!("{a}:{}", whole.user) })]
async fn login_again(user: String, #[sensitive] password: String) -> Result<String, ToolError> {
    Ok(format!("{user}{password}"))
}

impl std::fmt::Display for LoginAgainArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.user, self.password)
    }
}

/// Log in a third way: the key destructures the arguments.
#[tool(effect = "idempotent", key = |LoginThirdArgs { user, .. }| user.clone())]
async fn login_third(user: String, #[sensitive] password: String) -> Result<String, ToolError> {
    Ok(format!("{user}{password}"))
}

fn main() {}
