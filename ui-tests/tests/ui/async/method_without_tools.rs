use effect_tool::{tool, ToolError};

pub struct Shop;

impl Shop {
    /// Look up an order.
    #[tool(effect = "pure")]
    pub async fn lookup(&self, order_id: String) -> Result<String, ToolError> {
        Ok(order_id)
    }
}

fn main() {}
