// A crate that re-exports effect-tool points the generated code at its re-export.

mod sdk {
    pub mod effect {
        pub use ::effect_tool::*;
    }
}

/// Refund an order.
#[effect_tool::tool(effect = "idempotent", crate = "crate::sdk::effect")]
async fn refund(order_id: String) -> Result<String, effect_tool::ToolError> {
    Ok(order_id)
}

fn main() {
    assert_eq!(<Refund as sdk::effect::Tool>::NAME, "refund");
}
