use effect_tool::{tool, ToolError};

/// Hold a seat.
#[tool(effect = "compensable", key(seat), compensate = release)]
async fn reserve_seat(seat: String) -> Result<String, ToolError> {
    Ok(seat)
}

async fn release(_ctx: &effect_tool::EffectCtx, _args: &ReserveSeatArgs, _out: &String) -> Result<(), ToolError> {
    Ok(())
}

fn main() {}
