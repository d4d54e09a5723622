use std::sync::Arc;

use effect_tool::{tool, toolkit, tools, ToolError};

/// Charge an invoice.
#[tool(effect = "irreversible")]
async fn charge(invoice: String) -> Result<String, ToolError> {
    Ok(invoice)
}

pub struct Payments;

#[tools]
impl Payments {
    /// Charge an invoice, with the client.
    #[tool(effect = "irreversible")]
    pub async fn charge(&self, invoice: String) -> Result<String, ToolError> {
        Ok(invoice)
    }
}

fn main() {
    let payments = Arc::new(Payments);
    let _kit = toolkit![Charge, PaymentsCharge = payments.charge_tool()];
}
