//! effect-tool in one screen: four tools (a pure lookup, an idempotent refund, two irreversible
//! sends, one of them with a `recover` hook) called the way an agent calls them (again, in
//! parallel, after a timeout), journaled in a SQLite file.
//!
//! Run: `cargo run --example quickstart` (no set-up; the journal goes to a folder of its own in
//! the temp folder, removed at the end with SQLite's `-wal` and `-shm` files).
//!
//! The "outside world" is simulated in this file: a payments API that honours idempotency
//! keys, a mail server whose first send times out after the message left, and an issue tracker
//! whose first reply is lost after the comment was posted.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use effect_tool::store::sqlite::SqliteStore;
use effect_tool::{CallOptions, CallReport, EffectCtx, Engine, RunContext, StoreExt, ToolError, Verdict, tools};

/// The outside world, as seen by the tools.
#[derive(Default)]
struct World {
    /// Payment API: refunds by idempotency key, and every request it received.
    refunds: Mutex<HashMap<String, String>>,
    payment_requests: AtomicUsize,
    /// Mail server: messages delivered.
    outbox: Mutex<Vec<String>>,
    /// Issue tracker: comment bodies.
    comments: Mutex<Vec<String>>,
}

#[tools]
impl World {
    /// Look up an order's status.
    #[tool(effect = "pure")]
    async fn lookup_order(&self, order_id: String) -> Result<String, ToolError> {
        Ok(format!("order {order_id}: delivered, 25.00 EUR"))
    }

    /// Refund part of an order.
    #[tool(effect = "idempotent", key = |a| format!("refund:{}:{}", a.order_id, a.amount_cents))]
    async fn issue_refund(&self, ctx: &EffectCtx, order_id: String, amount_cents: u64) -> Result<String, ToolError> {
        self.payment_requests.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        let mut refunds = self.refunds.lock().unwrap();
        let n = refunds.len() + 1;
        let id = refunds
            .entry(ctx.idempotency_key())
            .or_insert_with(|| format!("re_{n:04}"));
        Ok(format!("refund {id}: {amount_cents} cents on {order_id}"))
    }

    /// Email the customer a receipt.
    #[tool(effect = "irreversible")]
    async fn send_receipt(&self, to: String, body: String) -> Result<String, ToolError> {
        let mut outbox = self.outbox.lock().unwrap();
        outbox.push(format!("{to}: {body}"));
        if outbox.len() == 1 {
            // The message left, the server's answer did not arrive.
            return Err(ToolError::unknown("SMTP server timed out after DATA"));
        }
        Ok(format!("receipt sent to {to}"))
    }

    /// Reply on the customer's support ticket.
    #[tool(effect = "irreversible", recover = find_comment)]
    async fn post_comment(&self, ctx: &EffectCtx, ticket: u64, text: String) -> Result<String, ToolError> {
        let mut comments = self.comments.lock().unwrap();
        comments.push(format!("{text}\n{}", ctx.marker()));
        if comments.len() == 1 {
            return Err(ToolError::unknown("connection reset after the comment was posted"));
        }
        Ok(format!("comment #{} on ticket {ticket}", comments.len()))
    }

    /// Did a comment with this call's marker land already? (The marker is signed with the
    /// journal's secret: one planted by someone else does not count. A real tracker would also
    /// check that the comment's author is the agent's account.)
    async fn find_comment(&self, ctx: &EffectCtx, _args: &WorldPostCommentArgs) -> Result<Option<String>, ToolError> {
        let comments = self.comments.lock().unwrap();
        Ok(comments
            .iter()
            .position(|c| ctx.contains_marker(c))
            .map(|i| format!("comment #{} (found by its marker)", i + 1)))
    }
}

fn show<O: std::fmt::Debug>(step: &str, report: &CallReport<O, ToolError>) {
    let what = match &report.result {
        Ok(out) => format!("{out:?}"),
        Err(effect_tool::EffectError::Blocked(b)) => format!("SideEffectRetryBlocked: {}", b.reason),
        Err(e) => e.to_string(),
    };
    println!("{step:<44} {:<10} {what}", report.disposition);
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // A folder of its own: SQLite keeps its write-ahead log (`-wal`) and shared-memory index
    // (`-shm`) beside the database file while the journal is open.
    let dir = std::env::temp_dir().join(format!("effect-tool-quickstart-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("journal.db");
    let engine = Engine::new(SqliteStore::open(&path)?);
    println!("journal: {}\n", path.display());

    let world = Arc::new(World::default());
    let run = RunContext::new("run-1").with_thread("ticket-4711");
    let call = |id: &str| CallOptions::call_id(id);

    let lookup = world.lookup_order_tool();
    let args = WorldLookupOrderArgs {
        order_id: "A-1001".into(),
    };
    show(
        "lookup_order (pure)",
        &engine.call_with_report(&lookup, &run, call("c1"), args).await,
    );

    let refund = world.issue_refund_tool();
    let args = WorldIssueRefundArgs {
        order_id: "A-1001".into(),
        amount_cents: 2500,
    };
    show(
        "issue_refund",
        &engine.call_with_report(&refund, &run, call("c2"), args.clone()).await,
    );
    show(
        "issue_refund, re-planned as a new call",
        &engine.call_with_report(&refund, &run, call("c3"), args).await,
    );

    let parallel = (0..10).map(|i| {
        let (engine, refund, run) = (engine.clone(), refund.clone(), run.clone());
        let args = WorldIssueRefundArgs {
            order_id: "A-1002".into(),
            amount_cents: 990,
        };
        tokio::spawn(async move {
            engine
                .call_with_report(&refund, &run, CallOptions::call_id(format!("p{i}")), args)
                .await
        })
    });
    let mut seen: Vec<&str> = Vec::new();
    for task in parallel.collect::<Vec<_>>() {
        seen.push(task.await?.disposition.as_str());
    }
    seen.sort();
    println!("{:<44} {:<10} {}", "issue_refund x10 in parallel", "", seen.join(", "));
    println!(
        "{:<44} {:<10} {} requests, {} refunds\n",
        "payments API saw",
        "",
        world.payment_requests.load(Ordering::SeqCst),
        world.refunds.lock().unwrap().len()
    );

    let receipt = world.send_receipt_tool();
    let args = WorldSendReceiptArgs {
        to: "ann@example.com".into(),
        body: "Refunded 25.00 EUR".into(),
    };
    let first = engine.call_with_report(&receipt, &run, call("c4"), args.clone()).await;
    show("send_receipt (the server times out)", &first);
    show(
        "send_receipt again",
        &engine.call_with_report(&receipt, &run, call("c4"), args.clone()).await,
    );
    // A person checks the mail log and resolves the key (or: `effect-tool resolve KEY --applied --output JSON`).
    let key = first.key.clone().unwrap_or_default();
    let confirmed = serde_json::json!("receipt sent to ann@example.com (confirmed by ops)");
    let verdict = Verdict::Applied {
        output: confirmed.clone(),
    };
    engine.store().resolve(&key, "ops@example.com", verdict).await?;
    println!(
        "{:<44} {:<10} effect-tool resolve '{key}' --applied --output '{}'",
        "a person checks the mail log", "", confirmed
    );
    show(
        "send_receipt after a person resolved it",
        &engine.call_with_report(&receipt, &run, call("c4"), args).await,
    );
    println!(
        "{:<44} {:<10} {} message(s)\n",
        "mail server delivered",
        "",
        world.outbox.lock().unwrap().len()
    );

    let comment = world.post_comment_tool();
    let args = WorldPostCommentArgs {
        ticket: 4711,
        text: "Your refund is on its way.".into(),
    };
    show(
        "post_comment (the reply is lost)",
        &engine.call_with_report(&comment, &run, call("c5"), args.clone()).await,
    );
    show(
        "post_comment again",
        &engine.call_with_report(&comment, &run, call("c5"), args).await,
    );
    println!(
        "{:<44} {:<10} {} comment(s)",
        "issue tracker holds",
        "",
        world.comments.lock().unwrap().len()
    );

    // Close the journal before removing its files: the engine (every clone) holds the store.
    engine.shutdown(std::time::Duration::from_secs(5)).await;
    drop(engine);
    std::fs::remove_dir_all(&dir)?;
    println!("\njournal removed: {}", dir.display());
    Ok(())
}
