use std::sync::Arc;

use effect_tool::{tool, toolkit, tools, ToolError};

/// Refund an order.
#[tool(effect = "idempotent")]
async fn refund(order_id: String) -> Result<String, ToolError> {
    Ok(order_id)
}

/// Look up an order.
#[tool(effect = "pure")]
async fn lookup(order_id: String) -> Result<String, ToolError> {
    Ok(order_id)
}

pub struct Payments;

#[tools]
impl Payments {
    /// Charge an invoice.
    #[tool(effect = "irreversible")]
    pub async fn charge(&self, invoice: String) -> Result<String, ToolError> {
        Ok(invoice)
    }
}

fn main() {
    let payments = Arc::new(Payments);
    let kit = toolkit![Refund, Lookup, PaymentsCharge = payments.charge_tool()];
    assert_eq!(kit.names(), ["refund", "lookup", "charge"]);
}
