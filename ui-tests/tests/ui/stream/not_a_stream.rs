use effect_tool::{ToolError, tool};

// `stream` on a tool that returns one output.
/// Deploy a service.
#[tool(effect = "idempotent", stream)]
async fn deploy(service: String) -> Result<String, ToolError> {
    Ok(service)
}

fn main() {}
