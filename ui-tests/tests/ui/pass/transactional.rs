// A transactional tool compiles, declares `TRANSACTIONAL`, and reaches its transaction through
// the context.
use effect_tool::{EffectCtx, Tool, ToolError, tool};

/// Record a payment in the application's table, in the journal's transaction.
#[tool(effect = "irreversible", transactional, key(order_id))]
async fn pay(ctx: &EffectCtx, order_id: String) -> Result<String, ToolError> {
    let _tx = ctx
        .transaction::<effect_tool::store::sqlite::SqliteTransaction>()
        .map_err(|e| ToolError::definitive(e.to_string()))?;
    Ok(order_id)
}

fn main() {
    const { assert!(<Pay as Tool>::TRANSACTIONAL) };
}
