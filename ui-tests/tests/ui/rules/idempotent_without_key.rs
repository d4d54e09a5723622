use effect_tool::{tool, ToolError};

/// Refund part of an order.
#[tool(effect = "idempotent", timeout = "30s")]
async fn issue_refund(order_id: String, amount_cents: u64) -> Result<String, ToolError> {
    Ok(format!("{order_id}{amount_cents}"))
}

fn main() {}
