use effect_tool::{tool, ToolError};

/// Add two numbers.
#[tool(effect = "pure")]
async fn add((a, b): (u32, u32)) -> Result<u32, ToolError> {
    Ok(a + b)
}

fn main() {}
