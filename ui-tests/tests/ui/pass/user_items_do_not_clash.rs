// The user's own items named like the runtime's (`Tool`, `Result`, `Option`, `String`, `serde`,
// `Some`...) do not confuse the expansion.
#![allow(dead_code, non_camel_case_types)]

use effect_tool::ToolError;

struct Tool;
struct Option;
struct Some;
struct Duration;
mod serde {}
mod schemars {}
mod core {}
type Result<T> = std::result::Result<T, ToolError>;
type String = std::string::String;

/// Refund an order.
#[effect_tool::tool(effect = "idempotent", key = |a| a.order_id.clone(), ttl = "1h", timeout = "5s")]
async fn refund(order_id: String) -> Result<String> {
    Ok(order_id)
}

fn main() {}
