use effect_tool::{tool, tools, unique_tool_names, ToolError};

/// Refund an order.
#[tool(effect = "idempotent")]
async fn refund(order_id: String) -> Result<String, ToolError> {
    Ok(order_id)
}

mod v2 {
    use effect_tool::{tool, ToolError};

    /// Refund an order, the new way.
    #[tool(effect = "idempotent", name = "refund_v2")]
    pub async fn refund(order_id: String) -> Result<String, ToolError> {
        Ok(order_id)
    }
}

pub struct Shop;

#[tools]
impl Shop {
    /// Look up.
    #[tool(effect = "pure")]
    pub async fn lookup(&self, id: u64) -> Result<u64, ToolError> {
        Ok(id)
    }
}

unique_tool_names!(Refund, v2::Refund, ShopLookup);

fn main() {}
