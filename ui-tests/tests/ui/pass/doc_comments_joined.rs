//! Doc comments reach the model as markdown shows them: the lines of a paragraph joined with a
//! space, paragraph breaks, hard breaks and list items kept.
use effect_tool::{Tool, ToolError, tool};

/// Refund part of an order, or all of it on
/// request.
///
/// Steps:
/// - look the order up
/// - refund it
#[tool(effect = "idempotent")]
async fn refund(
    /// The order to refund, as printed on
    /// the invoice.
    order_id: String,
    /// First line  
    /// second line.
    note: String,
) -> Result<String, ToolError> {
    Ok(format!("{order_id}{note}"))
}

fn main() {
    assert_eq!(
        Refund::DESCRIPTION,
        "Refund part of an order, or all of it on request.\n\nSteps:\n- look the order up\n- refund it"
    );
    let schema = Refund::input_schema();
    assert_eq!(
        schema["properties"]["order_id"]["description"],
        "The order to refund, as printed on the invoice."
    );
    assert_eq!(schema["properties"]["note"]["description"], "First line\nsecond line.");
}
