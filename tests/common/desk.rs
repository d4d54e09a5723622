//! Tools of a support desk that the tests of people and observability share (the console that
//! serves them is [`super::console`]).

use std::sync::Arc;

use effect_tool::{EffectClass, EffectCtx, Tool, ToolError};

use super::ledger::Downstream;

/// A refund keyed by its order: applied at the bank (the ledger) once per idempotency key.
#[derive(Clone)]
pub struct Refund(pub Arc<Downstream>);

impl Tool for Refund {
    type Args = String;
    type Output = String;
    type Error = ToolError;
    const NAME: &'static str = "refund";
    const CLASS: EffectClass = EffectClass::Idempotent;

    async fn call(&self, ctx: &EffectCtx, order: String) -> Result<String, ToolError> {
        self.0.apply(&ctx.idempotency_key());
        Ok(format!("refunded {order}"))
    }
}

/// Sends an email; the connection drops after sending, so the outcome is unknown (the call goes
/// in doubt). Its mail server (the ledger) counts every email that went out.
pub struct SendEmail(pub Arc<Downstream>);

impl Tool for SendEmail {
    type Args = String;
    type Output = String;
    type Error = ToolError;
    const NAME: &'static str = "send_email";
    const CLASS: EffectClass = EffectClass::Irreversible;

    async fn call(&self, ctx: &EffectCtx, to: String) -> Result<String, ToolError> {
        self.0.apply(&ctx.idempotency_key());
        Err(ToolError::unknown(format!(
            "the connection dropped after sending to {to}"
        )))
    }
}

/// A refund of `cents` that waits for a manager's approval; answers the refund's id
/// (`cents + 1`). Applied at the bank (the ledger) once per idempotency key.
pub struct ApprovedRefund(pub Arc<Downstream>);

impl Tool for ApprovedRefund {
    type Args = u64;
    type Output = u64;
    type Error = ToolError;
    const NAME: &'static str = "refund";
    const CLASS: EffectClass = EffectClass::Irreversible;
    const APPROVAL: Option<&'static str> = Some("manager");

    async fn call(&self, ctx: &EffectCtx, cents: u64) -> Result<u64, ToolError> {
        self.0.apply(&ctx.idempotency_key());
        Ok(cents + 1)
    }
}
