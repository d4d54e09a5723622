use effect_tool::{tools, EffectCtx, ToolError};

pub struct Payments;

#[tools]
impl Payments {
    /// Charge an invoice.
    #[tool(effect = "irreversible", key(invoice), recover = find_charge)]
    pub async fn charge(&self, invoice: String) -> Result<String, ToolError> {
        Ok(invoice)
    }

    async fn find_charge(&self, _ctx: &EffectCtx, invoice: String) -> Result<Option<String>, ToolError> {
        Ok(Some(invoice))
    }
}

fn main() {}
