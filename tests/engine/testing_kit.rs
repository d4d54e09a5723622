//! The testing kit on declared tools: run twice, across a crash, and a scripted model. Each
//! fake downstream counts its own effects; the engine never sees those counters.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use effect_tool::testing::{EffectHarness, ScriptedModel, assert_once_across_crash, assert_once_when_run_twice};
use effect_tool::toolkit::{Rejection, ToolOutcome};
use effect_tool::{Disposition, EffectCtx, Engine, MemoryStore, RunContext, ToolError, Toolkit, tool, tools};
use serde_json::json;

/// A payment provider that dedupes refunds on the idempotency key it is given.
#[derive(Default)]
struct Payments {
    seen: Mutex<HashSet<String>>,
    refunds: AtomicUsize,
}

impl Payments {
    fn refund(&self, idempotency_key: &str) -> String {
        if self.seen.lock().unwrap().insert(idempotency_key.to_owned()) {
            self.refunds.fetch_add(1, Ordering::SeqCst);
        }
        format!("re_{}", &idempotency_key[idempotency_key.len().saturating_sub(6)..])
    }

    fn count(&self) -> usize {
        self.refunds.load(Ordering::SeqCst)
    }
}

#[tools]
impl Payments {
    /// Refund part of an order, passing the effect's idempotency key to the provider.
    #[tool(effect = "idempotent", key = |a| format!("refund:{}:{}", a.order_id, a.amount_cents))]
    async fn issue_refund(&self, ctx: &EffectCtx, order_id: String, amount_cents: u64) -> Result<String, ToolError> {
        let _ = (order_id, amount_cents);
        Ok(self.refund(&ctx.idempotency_key()))
    }

    /// A careless refund: a new provider key on every attempt.
    #[tool(effect = "idempotent", key = |a| format!("careless:{}", a.order_id))]
    async fn careless_refund(&self, ctx: &EffectCtx, order_id: String) -> Result<String, ToolError> {
        let _ = order_id;
        Ok(self.refund(&format!("{}:attempt-{}", ctx.idempotency_key(), ctx.attempt())))
    }

    /// A refund behind approval by finance.
    #[tool(effect = "idempotent", key(order_id), approval = "finance")]
    async fn big_refund(&self, ctx: &EffectCtx, order_id: String) -> Result<String, ToolError> {
        let _ = order_id;
        Ok(self.refund(&ctx.idempotency_key()))
    }
}

static NONCE: AtomicUsize = AtomicUsize::new(0);

/// A key rule that gives identical calls different keys (a bug the kit must catch).
#[derive(Default)]
struct Sloppy {
    applied: AtomicUsize,
}

#[tools]
impl Sloppy {
    /// Refund with a key that changes on every call.
    #[tool(effect = "idempotent", key = |a| format!("sloppy:{}:{}", a.order_id, NONCE.fetch_add(1, Ordering::SeqCst)))]
    async fn sloppy_refund(&self, order_id: String) -> Result<String, ToolError> {
        self.applied.fetch_add(1, Ordering::SeqCst);
        Ok(order_id)
    }
}

/// An outbox that sends every email it is given.
#[derive(Default)]
struct Outbox {
    sent: Mutex<Vec<String>>,
}

#[tools]
impl Outbox {
    /// Send an email (irreversible, no recover).
    #[tool(effect = "irreversible")]
    async fn send_email(&self, to: String, body: String) -> Result<String, ToolError> {
        self.sent.lock().unwrap().push(format!("{to}: {body}"));
        Ok(format!("sent to {to}"))
    }

    /// Post a comment carrying the effect's marker; `recover` finds it.
    #[tool(effect = "irreversible", recover = find_comment)]
    async fn post_comment(&self, ctx: &EffectCtx, issue: u64, body: String) -> Result<String, ToolError> {
        self.sent
            .lock()
            .unwrap()
            .push(format!("#{issue}: {body}\n{}", ctx.marker()));
        Ok(format!("commented on #{issue}"))
    }

    async fn find_comment(&self, ctx: &EffectCtx, args: &OutboxPostCommentArgs) -> Result<Option<String>, ToolError> {
        let found = self.sent.lock().unwrap().iter().any(|c| ctx.contains_marker(c));
        Ok(found.then(|| format!("commented on #{}", args.issue)))
    }

    fn count(&self) -> usize {
        self.sent.lock().unwrap().len()
    }
}

static LOOKUPS: AtomicUsize = AtomicUsize::new(0);
static STOCK_LOOKUPS: AtomicUsize = AtomicUsize::new(0);

/// Look up the stock of an item (pure).
#[tool(effect = "pure")]
async fn lookup_stock(sku: String) -> Result<String, ToolError> {
    STOCK_LOOKUPS.fetch_add(1, Ordering::SeqCst);
    Ok(format!("stock of {sku}: 3"))
}

/// Look up an order (pure).
#[tool(effect = "pure")]
async fn lookup_order(order_id: String) -> Result<String, ToolError> {
    LOOKUPS.fetch_add(1, Ordering::SeqCst);
    Ok(format!("order {order_id}"))
}

#[tokio::test]
async fn testing_refund_applies_once_when_run_twice() {
    let payments = Arc::new(Payments::default());
    let tool = payments.issue_refund_tool();
    let args = PaymentsIssueRefundArgs {
        order_id: "o-1".into(),
        amount_cents: 500,
    };
    let report = assert_once_when_run_twice(&tool, args, || payments.count()).await;
    assert_eq!(report.effects(), 1);
    assert!(report.dispositions.contains(&Disposition::Executed));
    assert!(report.dispositions.contains(&Disposition::Replayed));
}

#[tokio::test]
async fn testing_refund_applies_once_across_a_crash() {
    let payments = Arc::new(Payments::default());
    let tool = payments.issue_refund_tool();
    let args = PaymentsIssueRefundArgs {
        order_id: "o-2".into(),
        amount_cents: 700,
    };
    let report = assert_once_across_crash(&tool, args, || payments.count()).await;
    // Idempotent without recover: re-run with the same key; the provider deduped.
    assert_eq!(report.disposition, Disposition::Executed);
    assert!(report.key.ends_with(":refund:o-2:700"), "{}", report.key);
    assert_eq!(payments.count(), 1);
}

#[tokio::test]
#[should_panic(expected = "applied 2 effects across a crash")]
async fn testing_kit_catches_a_tool_that_does_not_pass_its_key_downstream() {
    let payments = Arc::new(Payments::default());
    let tool = payments.careless_refund_tool();
    let args = PaymentsCarelessRefundArgs { order_id: "o-3".into() };
    assert_once_across_crash(&tool, args, || payments.count()).await;
}

#[tokio::test]
#[should_panic(expected = "identical calls must map to one key")]
async fn testing_kit_catches_a_key_rule_that_splits_identical_calls() {
    let sloppy = Arc::new(Sloppy::default());
    let tool = sloppy.sloppy_refund_tool();
    let args = SloppySloppyRefundArgs { order_id: "o-4".into() };
    assert_once_when_run_twice(&tool, args, || sloppy.applied.load(Ordering::SeqCst)).await;
}

#[tokio::test]
async fn testing_approval_is_granted_by_the_harness_and_applies_once() {
    let payments = Arc::new(Payments::default());
    let tool = payments.big_refund_tool();
    let args = PaymentsBigRefundArgs { order_id: "o-5".into() };
    assert_once_when_run_twice(&tool, args.clone(), || payments.count()).await;
    let crash = EffectHarness::new()
        .run_across_crash(&tool, args, || payments.count())
        .await;
    assert_eq!(crash.effects(), 1);
}

#[tokio::test]
async fn testing_irreversible_email_is_blocked_after_a_crash_and_sent_once() {
    let outbox = Arc::new(Outbox::default());
    let tool = outbox.send_email_tool();
    let args = OutboxSendEmailArgs {
        to: "ann@example.com".into(),
        body: "hello".into(),
    };
    let twice = assert_once_when_run_twice(&tool, args.clone(), || outbox.count()).await;
    // The re-plan under a new call id of an irreversible tool without a key is blocked.
    assert_eq!(twice.dispositions.last(), Some(&Disposition::Blocked));

    let outbox = Arc::new(Outbox::default());
    let tool = outbox.send_email_tool();
    let crash = assert_once_across_crash(&tool, args, || outbox.count()).await;
    assert_eq!(crash.disposition, Disposition::Blocked);
    let blocked = crash.result.as_ref().unwrap_err().as_blocked().expect("blocked");
    assert_eq!(blocked.key, crash.key);
}

#[tokio::test]
async fn testing_recover_reconciles_a_comment_after_a_crash() {
    let outbox = Arc::new(Outbox::default());
    let tool = outbox.post_comment_tool();
    let args = OutboxPostCommentArgs {
        issue: 42,
        body: "Fixed in 1.2.3".into(),
    };
    let crash = assert_once_across_crash(&tool, args, || outbox.count()).await;
    assert_eq!(crash.disposition, Disposition::Reconciled);
    assert_eq!(crash.result.unwrap(), json!("commented on #42"));
}

#[tokio::test]
async fn testing_pure_tool_changes_nothing() {
    // The harness counts with the tool's own counter (used by this test only): a pure tool is
    // not journaled, so each of the four calls runs, and the report counts all four. A harness
    // or engine that replayed pure calls would count one.
    let report = EffectHarness::new()
        .run_twice(&LookupStock, LookupStockArgs { sku: "s-6".into() }, || {
            STOCK_LOOKUPS.load(Ordering::SeqCst)
        })
        .await;
    assert_eq!(report.effects(), report.dispositions.len(), "{report:?}");
    assert_eq!(report.effects(), 4, "pure tools run every time: {report:?}");
    assert!(report.dispositions.iter().all(|d| *d == Disposition::Executed));
}

#[tokio::test]
async fn testing_scripted_model_plays_the_turns_that_make_tools_run_twice() {
    let payments = Arc::new(Payments::default());
    let toolkit = Toolkit::new().with(payments.issue_refund_tool()).with(LookupOrder);
    let dispatcher = toolkit.dispatcher(Engine::new(MemoryStore::new()));
    let run = RunContext::new("scripted-run");
    let model = ScriptedModel::adversarial("issue_refund", json!({"order_id": "o-7", "amount_cents": 900}))
        .call("lookup_order", json!({"order_id": "o-7"}));
    assert_eq!(model.turns().len(), 5);
    assert_eq!(model.turns()[2].len(), 3, "three identical calls in one turn");

    let transcript = model.play(&dispatcher, &run).await;
    assert_eq!(payments.count(), 1, "one refund for five refund calls");

    let refunds: Vec<_> = transcript.turns[..3].iter().flatten().collect();
    assert_eq!(refunds.len(), 5);
    let first = refunds[0].content();
    assert!(refunds.iter().all(|r| !r.is_error() && r.content() == first));
    assert_eq!(refunds[0].disposition, Disposition::Executed);
    assert!(refunds[1..].iter().all(|r| r.disposition == Disposition::Replayed));

    let truncated = &transcript.turns[3][0];
    assert!(matches!(
        truncated.outcome,
        ToolOutcome::Rejected(Rejection::MalformedArguments { .. })
    ));
    assert!(truncated.content().contains("truncated"), "{}", truncated.content());
    assert_eq!(transcript.result("call_7").unwrap().content(), "order o-7");
    assert_eq!(transcript.contents().len(), 7);
}

#[tokio::test]
async fn testing_scripted_model_parallel_identical_calls_share_one_execution() {
    let payments = Arc::new(Payments::default());
    let toolkit = Toolkit::new().with(payments.issue_refund_tool());
    let dispatcher = toolkit.dispatcher(Engine::new(MemoryStore::new()));
    let transcript = ScriptedModel::new()
        .parallel("issue_refund", json!({"order_id": "o-8", "amount_cents": 1}), 4)
        .play(&dispatcher, &RunContext::new("parallel-run"))
        .await;
    assert_eq!(payments.count(), 1);
    let mut dispositions: Vec<&str> = transcript.results().map(|r| r.disposition.as_str()).collect();
    dispositions.sort();
    assert_eq!(
        dispositions.iter().filter(|d| **d == "executed").count(),
        1,
        "{dispositions:?}"
    );
    assert!(
        dispositions
            .iter()
            .all(|d| *d == "executed" || *d == "shared" || *d == "replayed")
    );
}
