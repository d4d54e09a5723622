//! The fixture the bench binaries share: an idempotent refund tool whose body is a no-op, with
//! a ~100-byte input, so that only the engine and the journal are measured.

// Each bench binary uses its own part of the fixture.
#![allow(dead_code)]

use effect_tool::{EffectClass, EffectCtx, Tool, ToolError};
use serde::{Deserialize, Serialize};

/// The refund's arguments.
#[derive(Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RefundArgs {
    pub order_id: String,
    pub amount_cents: u64,
    pub currency: String,
    pub reason: String,
}

/// About 100 bytes of JSON; `n` makes each input (and so each key) new.
pub fn input(n: u64) -> RefundArgs {
    RefundArgs {
        order_id: format!("ord_{n:016}"),
        amount_cents: 12_345,
        currency: "EUR".into(),
        reason: "customer returned the damaged item".into(),
    }
}

/// An idempotent no-op: its output is the amount.
pub struct Refund;

impl Tool for Refund {
    type Args = RefundArgs;
    type Output = u64;
    type Error = ToolError;
    const NAME: &'static str = "issue_refund";
    const CLASS: EffectClass = EffectClass::Idempotent;

    async fn call(&self, _ctx: &EffectCtx, args: RefundArgs) -> Result<u64, ToolError> {
        Ok(args.amount_cents)
    }
}
