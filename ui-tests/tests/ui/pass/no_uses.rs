// No `use` at all: everything the expansion needs is named by absolute paths.

/// Refund an order.
#[effect_tool::tool(effect = "idempotent", key = |a| a.order_id.clone(), ttl = "1h", approval = "ops", when = |a| a.order_id.len() > 3)]
pub async fn refund(ctx: &effect_tool::EffectCtx, order_id: String) -> Result<String, effect_tool::ToolError> {
    Ok(format!("{}:{order_id}", ctx.run_id()))
}

pub struct Shop;

#[effect_tool::tools]
impl Shop {
    /// Look something up.
    #[effect_tool::tool(effect = "pure")]
    pub async fn lookup(&self, id: u64) -> Result<u64, effect_tool::ToolError> {
        Ok(id)
    }
}

fn main() {
    let _ = Refund;
    let _ = RefundArgs { order_id: String::new() };
    let _ = ShopLookupArgs { id: 1 };
}
