use effect_tool::{tool, KeyRule, Tool, ToolError};

/// Refund with a key closure.
#[tool(effect = "idempotent", key = |a| format!("refund:{}:{}", a.order_id, a.amount_cents))]
async fn refund(order_id: String, amount_cents: u64) -> Result<String, ToolError> {
    Ok(format!("{order_id}{amount_cents}"))
}

/// Refund with a key of fields.
#[tool(effect = "idempotent", key(order_id, amount_cents))]
async fn refund_fields(order_id: String, amount_cents: u64) -> Result<String, ToolError> {
    Ok(format!("{order_id}{amount_cents}"))
}

/// A key closure whose value is any `Display`, with an annotated parameter.
#[tool(effect = "irreversible", key = |a: &ChargeArgs| a.invoice)]
async fn charge(invoice: u64) -> Result<u64, ToolError> {
    Ok(invoice)
}

/// The default key.
#[tool(effect = "idempotent")]
async fn refund_default(order_id: String) -> Result<String, ToolError> {
    Ok(order_id)
}

fn main() {
    let args = RefundArgs { order_id: "o".into(), amount_cents: 3 };
    assert_eq!(Refund.key(&args).as_deref(), Some("refund:o:3"));
    assert_eq!(RefundFields::KEY_RULE, KeyRule::Fields(&["order_id", "amount_cents"]));
    assert_eq!(Charge.key(&ChargeArgs { invoice: 7 }).as_deref(), Some("7"));
    assert_eq!(RefundDefault::KEY_RULE, KeyRule::Default);
}
