use std::time::Duration;

use effect_tool::{tool, Tool, ToolError};

/// Pay an invoice; an approval lasts two hours.
#[tool(effect = "irreversible", approval = "finance", approval_ttl = "2h")]
async fn pay(invoice: String) -> Result<String, ToolError> {
    Ok(invoice)
}

/// Refund; no ttl declared: the journal's default (24 h).
#[tool(effect = "idempotent", approval = "support")]
async fn refund(order_id: String) -> Result<String, ToolError> {
    Ok(order_id)
}

fn main() {
    assert_eq!(Pay::APPROVAL_TTL, Some(Duration::from_secs(2 * 3600)));
    assert_eq!(Refund::APPROVAL_TTL, None);
}
