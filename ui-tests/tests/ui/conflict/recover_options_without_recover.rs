use effect_tool::{ToolError, tool};

// `recover_first` and `recover_settle` say when `recover` is asked: there is none.
/// Send an invoice.
#[tool(effect = "irreversible", key(number), recover_first, recover_settle = "30s")]
async fn send_invoice(number: String) -> Result<String, ToolError> {
    Ok(number)
}

fn main() {}
