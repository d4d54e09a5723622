// A declaration with an error still emits the function and a minimal tool type, so the code
// that uses them reports nothing more than the one error in the attribute.
use effect_tool::{tool, EffectClass, EffectCtx, RunContext, Tool, ToolError};

/// Refund an order.
#[tool(effect = "idempotnt", key(order_id))]
async fn refund(order_id: String) -> Result<String, ToolError> {
    Ok(order_id)
}

async fn use_it() -> Result<String, ToolError> {
    let ctx = EffectCtx::detached(RunContext::new("r"), "refund", EffectClass::Idempotent);
    let direct = refund("o-1".into()).await?;
    let through_the_tool = Refund.call(&ctx, RefundArgs { order_id: "o-2".into() }).await?;
    Ok(format!("{direct}{through_the_tool}{}", Refund::NAME))
}

fn main() {
    let _ = use_it();
}
