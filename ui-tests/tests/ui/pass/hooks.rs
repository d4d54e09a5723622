use effect_tool::{tool, EffectCtx, Tool, ToolError};

/// Refund an order.
#[tool(effect = "idempotent", recover = find_refund)]
async fn refund(order_id: String) -> Result<String, ToolError> {
    Ok(order_id)
}

async fn find_refund(_ctx: &EffectCtx, args: &RefundArgs) -> Result<Option<String>, ToolError> {
    Ok(Some(args.order_id.clone()))
}

mod hooks {
    use effect_tool::{EffectCtx, ToolError};

    pub async fn find(_ctx: &EffectCtx, _args: &super::HoldArgs) -> Result<Option<String>, ToolError> {
        Ok(None)
    }

    pub async fn release(_ctx: &EffectCtx, _args: &super::HoldArgs, _out: &String) -> Result<(), ToolError> {
        Ok(())
    }
}

/// Hold a seat; hooks given by path (string form too).
#[tool(effect = "compensable", recover = hooks::find, compensate = "hooks::release")]
async fn hold(seat: String) -> Result<String, ToolError> {
    Ok(seat)
}

fn main() {
    const { assert!(Refund::HAS_RECOVER && !Refund::HAS_COMPENSATE) };
    const { assert!(Hold::HAS_RECOVER && Hold::HAS_COMPENSATE) };
}
