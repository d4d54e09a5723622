use effect_tool::{tool, EffectCtx, ToolError};

/// Look up an order.
#[tool(effect = "pure", recover = find, compensate = undo, approval = "ops", ttl = "1h")]
async fn lookup_order(order_id: String) -> Result<String, ToolError> {
    Ok(order_id)
}

async fn find(_: &EffectCtx, _: &LookupOrderArgs) -> Result<Option<String>, ToolError> {
    Ok(None)
}

async fn undo(_: &EffectCtx, _: &LookupOrderArgs, _: &String) -> Result<(), ToolError> {
    Ok(())
}

fn main() {}
