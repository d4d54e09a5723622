//! Generated code must be clean in a user's crate that denies lints: this file denies warnings,
//! missing docs and clippy's `all` and `pedantic` groups, and declares every attribute form.
//! `cargo clippy --all-targets -- -D warnings` checks it (plain `cargo test` checks the rustc
//! lints).

#![deny(warnings, missing_docs, clippy::all, clippy::pedantic)]
// About the hand-written functions, not the generated code: a tool's doc comment is its
// description for the model, where an `# Errors` section does not belong.
#![allow(clippy::missing_errors_doc)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use effect_tool::{EffectCtx, Tool, ToolError, assert_declared, tool, tools, unique_tool_names};

/// A refund.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct Refund {
    /// The refund id.
    pub id: String,
}

/// Look up an order.
#[tool(
    effect = "pure",
    timeout = "5s",
    retry(max_attempts = 5, base_delay = "50ms", max_delay = "2s")
)]
pub async fn lookup_order(
    /// The order.
    order_id: String,
) -> Result<String, ToolError> {
    tokio::task::yield_now().await;
    Ok(order_id)
}

/// Refund part of an order.
#[tool(
    effect = "idempotent",
    key = |a| format!("refund:{}:{}", a.order_id, a.amount_cents),
    window = "cross-run",
    ttl = "24h",
    recover = find_refund,
    approval = "support-lead",
    when = |a| a.amount_cents > 10_000,
    name = "issue_refund",
    strict_input,
    open_world = true,
)]
pub async fn issue_refund(ctx: &EffectCtx, order_id: String, amount_cents: u64) -> Result<Refund, ToolError> {
    tokio::task::yield_now().await;
    Ok(Refund {
        id: format!("{}:{order_id}:{amount_cents}", ctx.idempotency_key()),
    })
}

/// Ask the payment system whether the refund exists.
///
/// # Errors
///
/// Never.
pub async fn find_refund(_ctx: &EffectCtx, _args: &IssueRefundArgs) -> Result<Option<Refund>, ToolError> {
    tokio::task::yield_now().await;
    Ok(None)
}

/// Hold a seat.
#[tool(effect = "compensable", key(flight, seat), compensate = release_seat, window = "thread")]
pub async fn hold_seat(flight: String, seat: String) -> Result<String, ToolError> {
    tokio::task::yield_now().await;
    Ok(format!("{flight}/{seat}"))
}

/// Release a held seat.
///
/// # Errors
///
/// Never.
pub async fn release_seat(_ctx: &EffectCtx, _args: &HoldSeatArgs, _hold: &String) -> Result<(), ToolError> {
    tokio::task::yield_now().await;
    Ok(())
}

/// The SMTP password the application holds (given to the run, never to the model).
#[derive(Clone)]
pub struct SmtpPassword(pub String);

/// Send an email.
#[tool(effect = "irreversible", key(to), timeout = "30s", retry(max_attempts = 1))]
pub async fn send_email(
    to: String,
    #[sensitive] card: String,
    #[secret] password: SmtpPassword,
    #[secret] relay: &SmtpPassword,
    ctx: &EffectCtx,
) -> Result<u64, ToolError> {
    tokio::task::yield_now().await;
    Ok(u64::from(ctx.attempt()) + (to.len() + card.len() + password.0.len() + relay.0.len()) as u64)
}

/// A ledger whose tools share a counter.
pub struct Ledger {
    next: AtomicU64,
}

#[tools]
impl Ledger {
    /// Post an entry.
    #[tool(effect = "compensable", key(account), recover = find_entry, compensate = reverse)]
    pub async fn post(&self, ctx: &EffectCtx, account: String, cents: i64) -> Result<u64, ToolError> {
        tokio::task::yield_now().await;
        let _ = (ctx, account, cents);
        Ok(self.next.fetch_add(1, Ordering::SeqCst))
    }

    async fn find_entry(&self, _ctx: &EffectCtx, _args: &LedgerPostArgs) -> Result<Option<u64>, ToolError> {
        tokio::task::yield_now().await;
        Ok(None)
    }

    async fn reverse(&self, _ctx: &EffectCtx, _args: &LedgerPostArgs, _entry: &u64) -> Result<(), ToolError> {
        tokio::task::yield_now().await;
        Ok(())
    }

    /// The next entry id.
    #[tool(effect = "pure")]
    pub async fn peek(&self) -> Result<u64, ToolError> {
        tokio::task::yield_now().await;
        Ok(self.next.load(Ordering::SeqCst))
    }
}

unique_tool_names!(LookupOrder, IssueRefund, HoldSeat, SendEmail, LedgerPost, LedgerPeek);

// Pins, in every form: their constants must be as clean as the declarations.
assert_declared! {
    LookupOrder: pure;
    IssueRefund: idempotent, approval = "support-lead", recover, window = "cross-run",
        key = |a| format!("refund:{}:{}", a.order_id, a.amount_cents);
    HoldSeat: compensable, compensate, key(flight, seat), window = "thread";
    SendEmail: irreversible, key(to);
    LedgerPost: compensable, recover, compensate, key(account);
}

#[test]
fn the_declarations_compile_cleanly() {
    let ledger = Arc::new(Ledger {
        next: AtomicU64::new(1),
    });
    assert_eq!(ledger.post_tool().name_of(), "post");
    assert_eq!(LedgerPeek::new(ledger).name_of(), "peek");
    assert_eq!(IssueRefund::NAME, "issue_refund");
}

trait Named {
    fn name_of(&self) -> &'static str;
}

impl<T: Tool> Named for T {
    fn name_of(&self) -> &'static str {
        T::NAME
    }
}
