use effect_tool::{tool, EffectCtx, ToolError};

/// Refund an order.
#[tool(effect = "idempotent", recover = find_refund)]
async fn refund(order_id: String) -> Result<String, ToolError> {
    Ok(order_id)
}

async fn find_refund(_ctx: &EffectCtx, args: &RefundArgs) -> Result<String, ToolError> {
    Ok(args.order_id.clone())
}

fn main() {}
