use effect_tool::{tool, Tool, ToolError};

/// Pay an invoice, always approved first.
#[tool(effect = "irreversible", approval = "finance")]
async fn pay(invoice: String) -> Result<String, ToolError> {
    Ok(invoice)
}

/// Refund; large refunds wait for a person.
#[tool(effect = "idempotent", approval = "support-lead", when = |a| a.amount_cents > 10_000)]
async fn refund(order_id: String, amount_cents: u64) -> Result<String, ToolError> {
    Ok(format!("{order_id}{amount_cents}"))
}

fn main() {
    assert_eq!(Pay::APPROVAL, Some("finance"));
    assert!(Pay.needs_approval(&PayArgs { invoice: "i".into() }));
    let small = RefundArgs { order_id: "o".into(), amount_cents: 5 };
    let large = RefundArgs { order_id: "o".into(), amount_cents: 50_000 };
    assert!(!Refund.needs_approval(&small));
    assert!(Refund.needs_approval(&large));
}
