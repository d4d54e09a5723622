use effect_tool::tool;

/// Refund an order.
#[tool(effect = "idempotent")]
async fn refund(order_id: String) -> String {
    order_id
}

fn main() {}
