use std::collections::BTreeMap;

use effect_tool::{tool, EffectCtx, Tool, ToolError};
use serde::{Deserialize, Serialize};

#[derive(Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Line {
    pub sku: String,
    pub qty: u32,
}

pub struct PaymentToken(pub String);

#[derive(Clone)]
pub struct PaymentClient;

/// Place an order.
#[tool(effect = "idempotent")]
pub async fn place_order(
    /// Who orders.
    customer: String,
    /// What they order.
    lines: Vec<Line>,
    /// A note, if any.
    note: Option<String>,
    #[serde(default)] tags: BTreeMap<String, String>,
    ctx: &EffectCtx,
    /// The card number the customer typed (kept out of the journal).
    #[sensitive]
    #[serde(rename = "cardNumber")]
    card: String,
    /// The payment service's token, held by the application (not in the schema).
    #[secret]
    token: &PaymentToken,
    #[secret] client: PaymentClient,
    r#type: u8,
) -> Result<u32, ToolError> {
    let _ = (customer, note, tags, ctx.run_id(), card, &token.0, client, r#type);
    Ok(lines.iter().map(|l| l.qty).sum())
}

/// No arguments at all.
#[tool(effect = "pure")]
async fn ping() -> Result<String, ToolError> {
    Ok("pong".into())
}

/// Only the context.
#[tool(effect = "pure")]
async fn whoami(ctx: &EffectCtx) -> Result<String, ToolError> {
    Ok(ctx.run_id().to_owned())
}

fn main() {
    assert_eq!(PlaceOrder::SENSITIVE, &["cardNumber"]);
    assert_eq!(PlaceOrder::INJECTED.len(), 2);
    assert_eq!(PlaceOrder::INJECTED[0].type_name, "PaymentToken");
    let schema = PlaceOrder::input_schema();
    assert!(schema["properties"].get("token").is_none());
    assert!(schema["properties"].get("client").is_none());
    assert!(schema["properties"].get("cardNumber").is_some());
    assert!(schema["properties"].get("ctx").is_none());
    assert!(schema["properties"].get("type").is_some());
    let _ = PingArgs {};
    let _ = WhoamiArgs {};
}
