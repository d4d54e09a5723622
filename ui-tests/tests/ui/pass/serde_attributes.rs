//! serde attributes on arguments: the key and the sensitive fields follow the serialized names.
use effect_tool::{tool, Tool, ToolError};

mod upper {
    pub fn serialize<S: serde::Serializer>(v: &str, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&v.to_uppercase())
    }
    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
        let s: String = serde::Deserialize::deserialize(d)?;
        Ok(s.to_uppercase())
    }
}

#[derive(Clone, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct Extra {
    pub note: String,
}

/// Ship an item.
#[tool(effect = "irreversible", key(item_code, country))]
async fn ship(
    /// The item.
    #[serde(rename = "sku", alias = "item")]
    item_code: String,
    /// The destination country.
    #[serde(with = "upper")]
    #[schemars(with = "String")]
    country: String,
    /// How many.
    #[serde(default)]
    quantity: u32,
    /// A note, if any (not part of the key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    note: Option<String>,
    /// More, merged into the input (not part of the key).
    #[serde(flatten)]
    extra: Extra,
) -> Result<String, ToolError> {
    Ok(format!("{item_code} {country} {quantity} {note:?} {}", extra.note))
}

fn main() {
    assert_eq!(Ship::KEY_RULE, effect_tool::KeyRule::Fields(&["sku", "country"]));
}
