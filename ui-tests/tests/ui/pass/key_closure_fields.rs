//! A key closure of a tool with `#[sensitive]` arguments that reads fields by name (directly,
//! through a helper taking them, in a nested closure, beside a lifetime of the same name)
//! compiles; a tool without sensitive arguments may pass its arguments on whole.
use effect_tool::{Tool, ToolError, tool};

fn login_key(user: &str, realm: &str) -> String {
    format!("login:{realm}:{user}")
}

/// Log in.
#[tool(effect = "idempotent", key = |a| login_key(&a.user, &a.realm))]
async fn login(user: String, realm: String, #[sensitive] password: String) -> Result<String, ToolError> {
    Ok(format!("{user}{realm}{}", password.len()))
}

/// Log out.
#[tool(effect = "idempotent", key = |a| { let n = a.user.len(); [n].iter().map(|x| format!("{}:{x}", a.realm)).collect::<String>() })]
async fn logout(user: String, realm: String, #[sensitive] token: String) -> Result<String, ToolError> {
    Ok(format!("{user}{realm}{}", token.len()))
}

fn refund_key(args: &RefundArgs) -> String {
    format!("refund:{}", args.order_id)
}

/// Refund an order.
#[tool(effect = "idempotent", key = |a| refund_key(a))]
async fn refund(order_id: String) -> Result<String, ToolError> {
    Ok(order_id)
}

fn main() {
    let args = LoginArgs { user: "ann".into(), realm: "eu".into(), password: "hunter2".into() };
    assert_eq!(Login.key(&args).as_deref(), Some("login:eu:ann"));
    let args = LogoutArgs { user: "ann".into(), realm: "eu".into(), token: "t".into() };
    assert_eq!(Logout.key(&args).as_deref(), Some("eu:3"));
    let args = RefundArgs { order_id: "o-1".into() };
    assert_eq!(Refund.key(&args).as_deref(), Some("refund:o-1"));
}
