use effect_tool::{tool, EffectClass, EffectCtx, Tool, ToolError};

/// Look up an order.
#[tool(effect = "pure")]
async fn lookup(order_id: String) -> Result<String, ToolError> {
    Ok(order_id)
}

/// Refund an order.
#[tool(effect = "idempotent")]
async fn refund(order_id: String) -> Result<String, ToolError> {
    Ok(order_id)
}

/// Hold a seat.
#[tool(effect = "compensable", compensate = release)]
async fn hold(seat: String) -> Result<String, ToolError> {
    Ok(seat)
}

async fn release(_ctx: &EffectCtx, _args: &HoldArgs, _out: &String) -> Result<(), ToolError> {
    Ok(())
}

/// Send an email.
#[tool(effect = "irreversible")]
async fn send(to: String) -> Result<String, ToolError> {
    Ok(to)
}

fn main() {
    assert_eq!(Lookup::CLASS, EffectClass::Pure);
    assert_eq!(Refund::CLASS, EffectClass::Idempotent);
    assert_eq!(Hold::CLASS, EffectClass::Compensable);
    assert_eq!(Send::CLASS, EffectClass::Irreversible);
}
