//! The set-up of the tests of what code and the model are told at the edges
//! (`engine::truth_edges`, `toolkit::dispatch_truth`): an irreversible email keyed by its
//! ticket, whose `recover` asks a mail log that can be down (a transient error) or crash (a
//! panic). Every email that went out is a line in the ledger, which the engine cannot see.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use effect_tool::{EffectClass, EffectCtx, Tool, ToolError};
use serde::{Deserialize, Serialize};

use super::ledger::Downstream;

/// The email's arguments.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct EmailArgs {
    /// The ticket, which keys the email (`email:{ticket}`).
    pub ticket: String,
    /// Always `ann@example.com` in [`email`].
    pub to: String,
    /// The refund the email announces.
    pub amount_eur: u32,
}

/// An email to ann@example.com about `ticket`.
pub fn email(ticket: &str, amount_eur: u32) -> EmailArgs {
    EmailArgs {
        ticket: ticket.into(),
        to: "ann@example.com".into(),
        amount_eur,
    }
}

/// `send_email`: irreversible, keyed `email:{ticket}`, with a `recover` that asks the mail log.
#[derive(Default)]
pub struct SendEmail {
    /// The mail server: one line `email:{ticket}` per email that went out.
    pub ledger: Arc<Downstream>,
    /// The send times out after the mail went out (the outcome is unknown).
    pub time_out: AtomicBool,
    /// The mail log is down: `recover` fails with a transient error.
    pub log_down: AtomicBool,
    /// The mail log's client crashes: `recover` panics.
    pub log_panics: AtomicBool,
}

impl Tool for SendEmail {
    type Args = EmailArgs;
    type Output = String;
    type Error = ToolError;
    const NAME: &'static str = "send_email";
    const CLASS: EffectClass = EffectClass::Irreversible;
    const HAS_RECOVER: bool = true;

    fn key(&self, a: &EmailArgs) -> Option<String> {
        Some(format!("email:{}", a.ticket))
    }

    async fn call(&self, _ctx: &EffectCtx, a: EmailArgs) -> Result<String, ToolError> {
        self.ledger.apply(&format!("email:{}", a.ticket));
        if self.time_out.load(Ordering::SeqCst) {
            return Err(ToolError::unknown("timed out after sending"));
        }
        Ok(format!("sent {} EUR to {}", a.amount_eur, a.to))
    }

    async fn recover(&self, _ctx: &EffectCtx, a: &EmailArgs) -> Result<Option<String>, ToolError> {
        if self.log_panics.load(Ordering::SeqCst) {
            panic!("the mail log client crashed");
        }
        if self.log_down.load(Ordering::SeqCst) {
            return Err(ToolError::transient("the mail log is down"));
        }
        let found = self.ledger.has(&format!("email:{}", a.ticket));
        Ok(found.then(|| format!("found the email to {}", a.to)))
    }
}
