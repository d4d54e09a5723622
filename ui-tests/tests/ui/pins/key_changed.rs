use effect_tool::{assert_declared, tool, ToolError};

/// Refund part of an order.
#[tool(effect = "idempotent", key(order_id, amount_cents), recover = find_refund)]
async fn issue_refund(order_id: String, amount_cents: u64) -> Result<String, ToolError> {
    Ok(format!("{order_id}{amount_cents}"))
}

async fn find_refund(
    _ctx: &effect_tool::EffectCtx,
    _args: &IssueRefundArgs,
) -> Result<Option<String>, ToolError> {
    Ok(None)
}

assert_declared! {
    IssueRefund: idempotent, recover, key(order_id);
}

fn main() {}
