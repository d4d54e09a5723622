use effect_tool::{tool, EffectCtx, ToolError};

/// Refund an order.
#[tool(effect = "idempotent")]
async fn refund(#[secret] ctx: &EffectCtx, order_id: String) -> Result<String, ToolError> {
    Ok(format!("{}{order_id}", ctx.run_id()))
}

fn main() {}
