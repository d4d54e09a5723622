use effect_tool::{tool, EffectCtx, ToolError};

/// Hold a room for a guest.
#[tool(effect = "compensable", key(room), compensate = release)]
async fn hold_room(
    /// The room.
    room: String,
    /// The guest's passport number.
    #[sensitive]
    passport: String,
) -> Result<String, ToolError> {
    Ok(format!("{room}{passport}"))
}

async fn release(_ctx: &EffectCtx, _args: &HoldRoomArgs, _hold: &String) -> Result<(), ToolError> {
    Ok(())
}

fn main() {}
