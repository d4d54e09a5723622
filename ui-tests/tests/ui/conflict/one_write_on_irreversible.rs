use effect_tool::{tool, ToolError};

// Without a claim while it runs, an identical call in another process would send it again.
/// Send an email.
#[tool(effect = "irreversible", key(to), approval = "support", one_write)]
async fn send_email(to: String) -> Result<String, ToolError> {
    Ok(to)
}

// A compensable one, likewise.
/// Book a room.
#[tool(effect = "compensable", compensate = cancel, one_write)]
async fn book(room: String) -> Result<String, ToolError> {
    Ok(room)
}

async fn cancel(_ctx: &effect_tool::EffectCtx, _args: &BookArgs, _out: &String) -> Result<(), ToolError> {
    Ok(())
}

// A pure tool is not journaled: there is no write to spare.
/// Look an order up.
#[tool(effect = "pure", one_write)]
async fn lookup(order_id: String) -> Result<String, ToolError> {
    Ok(order_id)
}

fn main() {}
