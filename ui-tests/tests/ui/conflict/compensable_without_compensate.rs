use effect_tool::{tool, ToolError};

/// Hold a seat.
#[tool(effect = "compensable")]
async fn reserve_seat(seat: String) -> Result<String, ToolError> {
    Ok(seat)
}

fn main() {}
