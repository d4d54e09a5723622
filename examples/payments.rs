//! A support agent's money tools: a refund keyed by its intent, and an email behind approval.
//!
//! Run: `cargo run --example payments` (no set-up, no network).
//!
//! - `issue_refund` is `idempotent` with a key made of the intent (order and amount) in a
//!   `cross-run` window: however often the refund is asked for, in this run or a later one, the
//!   payment provider sees one refund under one idempotency key. The provider is rate limited
//!   on the first request: the engine retries with the same key.
//! - `email_customer` is `irreversible` and needs approval by `support` when it promises money.
//!   The first call parks (`ApprovalPending`, carrying the key); a person approves through the
//!   store's API (the CLI's `effect-tool approve` does the same); the next call sends it, once.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use effect_tool::toolkit::ToolOutcome;
use effect_tool::{EffectCtx, Engine, MemoryStore, RunContext, StoreExt, ToolCall, ToolError, Toolkit, tools};

/// A payment provider that honours idempotency keys, and a mail server.
#[derive(Default)]
struct Backends {
    /// Refunds by idempotency key.
    refunds: Mutex<HashMap<String, String>>,
    /// Requests the payment API received (retries included).
    payment_requests: AtomicUsize,
    /// Emails delivered.
    sent: Mutex<Vec<String>>,
}

#[tools]
impl Backends {
    /// Refund part of an order. The same refund intent is applied once, across runs.
    #[tool(
        effect = "idempotent",
        key = |a| format!("refund:{}:{}", a.order_id, a.amount_cents),
        window = "cross-run",
        ttl = "30d",
        retry(max_attempts = 3, base_delay = "10ms", max_delay = "50ms")
    )]
    async fn issue_refund(&self, ctx: &EffectCtx, order_id: String, amount_cents: u64) -> Result<String, ToolError> {
        if self.payment_requests.fetch_add(1, Ordering::SeqCst) == 0 {
            return Err(ToolError::transient("429 Too Many Requests"));
        }
        let mut refunds = self.refunds.lock().unwrap();
        let n = refunds.len() + 1;
        let id = refunds
            .entry(ctx.idempotency_key())
            .or_insert_with(|| format!("re_{n:04}"));
        Ok(format!("refund {id}: {amount_cents} cents on order {order_id}"))
    }

    /// Email a customer. Emails that promise money wait for approval by support.
    #[tool(effect = "irreversible", key(to, body), approval = "support", when = |a| a.body.contains("refund"))]
    async fn email_customer(&self, to: String, body: String) -> Result<String, ToolError> {
        self.sent.lock().unwrap().push(format!("to {to}: {body}"));
        Ok(format!("sent to {to}"))
    }
}

fn show(step: &str, r: &effect_tool::ToolResult) {
    let tag = match &r.outcome {
        ToolOutcome::Output(_) => "ok",
        ToolOutcome::AwaitingApproval(_) => "waiting",
        ToolOutcome::Blocked(_) => "blocked",
        _ => "error",
    };
    println!("{step}\n  {} [{tag}, {}] -> {}", r.name, r.disposition, r.content());
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let backends = Arc::new(Backends::default());
    let toolkit = Toolkit::new()
        .with(backends.issue_refund_tool())
        .with(backends.email_customer_tool());
    let engine = Engine::new(MemoryStore::new());
    let agent = toolkit.dispatcher(engine.clone());
    let refund = r#"{"order_id": "A-1042", "amount_cents": 1999}"#;
    let email = r#"{"to": "ann@example.com", "body": "Your refund of 19.99 EUR is on its way."}"#;

    let run1 = RunContext::new("ticket-311-run-1");
    let r = agent
        .call(&run1, &ToolCall::new("call_1", "issue_refund", refund))
        .await;
    show(
        "1. refund (the provider answers 429 first; retried with the same key)",
        &r,
    );
    let r = agent
        .call(&run1, &ToolCall::new("call_2", "issue_refund", refund))
        .await;
    show("2. the model asks for the same refund again", &r);

    let run2 = RunContext::new("ticket-311-run-2");
    let r = agent
        .call(&run2, &ToolCall::new("call_1", "issue_refund", refund))
        .await;
    show("3. a later run of the same ticket asks again (cross-run key)", &r);

    let parked = agent
        .call(&run1, &ToolCall::new("call_3", "email_customer", email))
        .await;
    show(
        "4. the confirmation email promises money: it waits for approval",
        &parked,
    );
    let pending = parked.approval_pending().expect("the email waits for approval").clone();

    // A person approves it (in production: `effect-tool approve '<key>' --as support`, which shows
    // the input and approves it by its fingerprint).
    engine
        .store()
        .approve(
            &pending.key,
            "alice",
            &pending.role,
            &engine.store().get(&pending.key).await.unwrap().unwrap().fingerprint,
        )
        .await?;
    println!("5. alice approves `{}` as {}", pending.key, pending.role);

    let r = agent
        .call(&run1, &ToolCall::new("call_4", "email_customer", email))
        .await;
    show("6. the model calls it again: it runs", &r);
    let r = agent
        .call(&run1, &ToolCall::new("call_4", "email_customer", email))
        .await;
    show("7. a retry of the same call is replayed, not re-sent", &r);

    let refunds = backends.refunds.lock().unwrap().len();
    let sent = backends.sent.lock().unwrap().clone();
    println!(
        "\npayment provider: {} request(s), {refunds} refund(s); mail server: {} email(s) {:?}",
        backends.payment_requests.load(Ordering::SeqCst),
        sent.len(),
        sent
    );
    assert_eq!(refunds, 1, "one refund");
    assert_eq!(sent.len(), 1, "one email");
    Ok(())
}
