use effect_tool::{tool, ToolError};

/// Open a support ticket for a customer, once across every run.
#[tool(effect = "idempotent", key(customer_id), window = "cross-run", timeout = "10s")]
async fn open_ticket(customer_id: String) -> Result<String, ToolError> {
    Ok(customer_id)
}

fn main() {}
