//! Declarations that keep every rule of `tests/rules/team.toml`, and the pins of their classes.

use effect_tool::{assert_declared, tool, tools, EffectCtx, Tool, ToolError};

/// Look up an order (pure: the rules about effects do not apply).
#[tool(effect = "pure")]
async fn lookup_order(order_id: String) -> Result<String, ToolError> {
    Ok(order_id)
}

/// Charge a card, approved by finance.
#[tool(effect = "irreversible", key(invoice_id), approval = "finance", timeout = "30s")]
async fn send_payment(invoice_id: String) -> Result<String, ToolError> {
    Ok(invoice_id)
}

/// Send a receipt: a `recover` hook instead of an approval.
#[tool(effect = "irreversible", key(order_id), recover = find_receipt, timeout = "10s")]
async fn send_receipt(order_id: String) -> Result<String, ToolError> {
    Ok(order_id)
}

async fn find_receipt(_ctx: &EffectCtx, _args: &SendReceiptArgs) -> Result<Option<String>, ToolError> {
    Ok(None)
}

/// Open one support ticket per customer, across runs.
#[tool(effect = "idempotent", key = |a| format!("ticket:{}", a.customer_id), window = "cross-run", timeout = "10s")]
async fn open_ticket(customer_id: String) -> Result<String, ToolError> {
    Ok(customer_id)
}

pub struct Mailer;

#[tools]
impl Mailer {
    /// Send an email, approved by support.
    #[tool(effect = "irreversible", key(message_id), approval = "support", timeout = "5s")]
    pub async fn send(&self, message_id: String) -> Result<String, ToolError> {
        Ok(message_id)
    }
}

assert_declared! {
    LookupOrder: pure;
    SendPayment: irreversible, approval = "finance", key(invoice_id);
    SendReceipt: irreversible, recover;
    OpenTicket: idempotent, key = |a| format!("ticket:{}", a.customer_id), window = "cross-run";
    MailerSend: irreversible, approval = "support";
}

fn main() {
    assert_eq!(SendPayment::APPROVAL, Some("finance"));
}
