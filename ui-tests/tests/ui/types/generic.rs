use effect_tool::{tool, ToolError};

/// Echo a value.
#[tool(effect = "pure")]
async fn echo<T: Clone>(value: T) -> Result<T, ToolError> {
    Ok(value)
}

fn main() {}
