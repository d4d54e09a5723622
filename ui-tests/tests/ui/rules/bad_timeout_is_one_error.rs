// A `timeout` written wrong is reported once, as a bad duration: the rule that asks for a
// `timeout` does not fire on top of it.
use effect_tool::{tool, ToolError};

/// Hold a seat.
#[tool(effect = "compensable", key(seat), compensate = release, timeout = "30 sec")]
async fn reserve_seat(seat: String) -> Result<String, ToolError> {
    Ok(seat)
}

async fn release(_ctx: &effect_tool::EffectCtx, _args: &ReserveSeatArgs, _out: &String) -> Result<(), ToolError> {
    Ok(())
}

fn main() {}
