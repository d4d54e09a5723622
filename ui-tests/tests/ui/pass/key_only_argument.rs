//! An argument read only by the key is not unused (rustc's `_` prefix would rename the field).
#![deny(unused_variables)]

use effect_tool::{tool, EffectCtx, ToolError};

/// Charge an invoice.
#[tool(effect = "irreversible", key(invoice))]
async fn charge(ctx: &EffectCtx, invoice: String) -> Result<String, ToolError> {
    Ok(ctx.idempotency_key())
}

/// Post a comment.
#[tool(effect = "irreversible", key = |a| format!("comment:{}", a.issue))]
async fn comment(ctx: &EffectCtx, issue: u64, body: String) -> Result<String, ToolError> {
    Ok(format!("{body} {}", ctx.idempotency_key()))
}

fn main() {}
