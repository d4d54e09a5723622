use effect_tool::{tool, ToolError};

#[derive(Clone, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct Card {
    pub number: String,
    pub cvc: String,
}

/// Pay an order.
#[tool(effect = "irreversible", key(order))]
async fn pay(
    /// The order.
    order: String,
    /// The card the user typed.
    #[sensitive]
    #[serde(flatten)]
    card: Card,
) -> Result<String, ToolError> {
    Ok(format!("{order}{}", card.number))
}

fn main() {}
