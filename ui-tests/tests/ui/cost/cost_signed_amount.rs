use effect_tool::{tool, ToolError};

/// A credit whose cost is a signed number: a budget counts unsigned units.
#[tool(effect = "idempotent", key(account), cost(credit_cents = |a| a.delta_cents))]
async fn adjust_credit(account: String, delta_cents: i64) -> Result<String, ToolError> {
    Ok(format!("{account}: {delta_cents}"))
}

fn main() {}
