use effect_tool::{tool, ToolError};

// A transactional tool cannot park for a person: the call would wait outside the transaction.
/// Record a payment in the application's table.
#[tool(effect = "irreversible", transactional, approval = "finance")]
async fn pay(order_id: String) -> Result<String, ToolError> {
    Ok(order_id)
}

// A pure tool writes nothing, so it has no transaction to run in.
/// Look an order up.
#[tool(effect = "pure", transactional)]
async fn lookup(order_id: String) -> Result<String, ToolError> {
    Ok(order_id)
}

fn main() {}
