use effect_tool::tool;

#[derive(Debug)]
pub struct PayError;

impl std::fmt::Display for PayError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("payment failed")
    }
}

/// Refund an order.
#[tool(effect = "idempotent")]
async fn refund(order_id: String) -> Result<String, PayError> {
    Ok(order_id)
}

fn main() {}
