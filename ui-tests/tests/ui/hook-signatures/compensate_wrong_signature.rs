use effect_tool::{tool, EffectCtx, ToolError};

/// Hold a seat.
#[tool(effect = "compensable", key(seat), compensate = release)]
async fn hold_seat(seat: String) -> Result<String, ToolError> {
    Ok(seat)
}

async fn release(_ctx: &EffectCtx, _args: &HoldSeatArgs) -> Result<(), ToolError> {
    Ok(())
}

fn main() {}
