use effect_tool::{tool, ToolError};

#[derive(Clone, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct Address {
    pub street: String,
    pub city: String,
}

/// Ship a parcel to an address.
#[tool(effect = "irreversible", key(address))]
async fn ship(
    /// Where to.
    #[serde(flatten)]
    address: Address,
) -> Result<String, ToolError> {
    Ok(address.city)
}

fn main() {}
