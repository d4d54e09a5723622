use effect_tool::{tool, EffectCtx, ToolError};

/// Refund part of an order: its cost names no unit, so no budget of a run could match it.
#[tool(effect = "idempotent", key(order_id), cost = |a| a.amount_cents)]
async fn issue_refund(ctx: &EffectCtx, order_id: String, amount_cents: u64) -> Result<String, ToolError> {
    let _ = ctx;
    Ok(format!("{order_id}: {amount_cents}"))
}

fn main() {}
