//! Make a SQLite journal a person has to look at, for trying the `effect-tool` command.
//!
//! ```text
//! cargo run -p effect-tool-cli --example support_desk_journal -- /tmp/desk.db
//! effect-tool --store /tmp/desk.db list
//! effect-tool --store /tmp/desk.db show '<key>'
//! effect-tool --store /tmp/desk.db resolve '<key>' --applied --output '{"message_id":"msg-7731"}'
//! cargo run -p effect-tool-cli --example support_desk_journal -- /tmp/desk.db
//! ```
//!
//! An agent at a support desk refunds an order, sends an invoice (the mail API times out after
//! the request left: the outcome is unknown, so the retry is blocked and the record stays in
//! doubt) and asks to close an account (which waits for a support lead's approval). Running it
//! again retries the same tool calls and prints what each one did: replayed, blocked, waiting,
//! or executed, once a person has decided with the `effect-tool` command.

use std::sync::atomic::{AtomicBool, Ordering};

use effect_tool::store::sqlite::SqliteStore;
use effect_tool::{CallOptions, EffectError, Engine, RunContext, ToolError, tool};
use serde::{Deserialize, Serialize};

/// What the mail API answered.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Sent {
    /// The message id.
    pub message_id: String,
}

/// A refund.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Refund {
    /// The refund id.
    pub refund_id: String,
}

/// Whether the mail API is timing out (it is on the first run of this example).
static MAIL_API_DOWN: AtomicBool = AtomicBool::new(true);

/// Refund part of an order.
#[tool(effect = "idempotent", key = |a| format!("refund:{}:{}", a.order_id, a.amount_cents))]
async fn issue_refund(order_id: String, amount_cents: u64) -> Result<Refund, ToolError> {
    Ok(Refund {
        refund_id: format!("re_{order_id}_{amount_cents}"),
    })
}

/// Email the invoice of an order to the customer.
#[tool(effect = "irreversible")]
async fn send_invoice(order_id: String, to: String) -> Result<Sent, ToolError> {
    if MAIL_API_DOWN.load(Ordering::SeqCst) {
        return Err(ToolError::unknown(format!(
            "mail API timed out after 30s; the invoice of {order_id} to {to} may have been sent"
        )));
    }
    Ok(Sent {
        message_id: format!("msg-{order_id}"),
    })
}

/// Close a customer's account.
#[tool(effect = "irreversible", approval = "support-lead")]
async fn close_account(customer: String) -> Result<String, ToolError> {
    Ok(format!("account of {customer} closed"))
}

fn said<T: std::fmt::Debug>(what: &str, result: Result<T, EffectError>) {
    match result {
        Ok(v) => println!("{what}: ok: {v:?}"),
        Err(EffectError::Blocked(b)) => println!("{what}: blocked: {b}"),
        Err(EffectError::ApprovalPending(p)) => println!("{what}: waiting: {p}"),
        Err(e) => println!("{what}: failed: {e}"),
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| std::env::temp_dir().join("desk.db").display().to_string());
    let first_run = !std::path::Path::new(&path).exists();
    MAIL_API_DOWN.store(first_run, Ordering::SeqCst);
    let engine = Engine::new(SqliteStore::open(&path)?);
    let run = RunContext::new("run-42").with_agent("support-desk");
    println!("journal {path}, run run-42");

    let refund = IssueRefundArgs {
        order_id: "A-1001".into(),
        amount_cents: 2_500,
    };
    let r = engine
        .call(&IssueRefund, &run, CallOptions::call_id("call_1"), refund)
        .await;
    said("issue_refund A-1001 2500", r);

    let invoice = SendInvoiceArgs {
        order_id: "A-1002".into(),
        to: "bob@example.com".into(),
    };
    let r = engine
        .call(&SendInvoice, &run, CallOptions::call_id("call_2"), invoice.clone())
        .await;
    said("send_invoice A-1002", r);
    if first_run {
        // The agent retries the same tool call.
        let r = engine
            .call(&SendInvoice, &run, CallOptions::call_id("call_2"), invoice)
            .await;
        said("send_invoice A-1002 (retry)", r);
    }

    let close = CloseAccountArgs {
        customer: "carol@example.com".into(),
    };
    let r = engine
        .call(&CloseAccount, &run, CallOptions::call_id("call_3"), close)
        .await;
    said("close_account carol@example.com", r);
    Ok(())
}
