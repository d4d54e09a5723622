mod payments {
    use effect_tool::{tools, ToolError};

    pub struct Payments;

    // Not `pub`: the `pub` tool method below makes a `pub` tool type, whose `Tool` impl names it.
    #[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
    struct Receipt {
        id: String,
    }

    #[tools]
    impl Payments {
        /// Refund an order.
        #[tool(effect = "idempotent", key(order_id))]
        pub async fn refund(&self, order_id: String) -> Result<Receipt, ToolError> {
            Ok(Receipt { id: order_id })
        }
    }
}

fn main() {
    let _ = payments::Payments;
}
