use effect_tool::{tool, ToolError};

pub struct Money {
    pub cents: u64,
}

/// Refund an order.
#[tool(effect = "idempotent")]
async fn refund(order_id: String, amount: Money) -> Result<String, ToolError> {
    Ok(format!("{order_id}{}", amount.cents))
}

fn main() {}
