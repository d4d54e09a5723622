use effect_tool::{tool, ToolError};

/// Send a note to a customer.
#[tool(effect = "irreversible", key(customer, reference))]
async fn send_note(
    /// Who.
    customer: String,
    /// The ticket it is about, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    reference: Option<String>,
) -> Result<String, ToolError> {
    Ok(format!("{customer} {reference:?}"))
}

fn main() {}
