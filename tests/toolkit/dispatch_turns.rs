//! Dispatch of a model turn's tool calls: order, bounded concurrency, rejected calls that run
//! nothing, caught panics, cancellation, blocked and approval results that carry the key.
//! Effects are counted by counters the engine cannot see.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use effect_tool::toolkit::{Rejection, ToolOutcome, anthropic_tool_results_message};
use effect_tool::{
    ClassifyError, Disposition, EffectClass, EffectCtx, EffectError, Engine, Failure, MemoryStore, RunContext,
    StoreExt, Tool, ToolCall, ToolError, Toolkit,
};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
struct RefundArgs {
    order_id: String,
    amount_cents: u64,
}

/// Refund part of an order.
struct Refund {
    applied: Arc<AtomicUsize>,
}

impl Tool for Refund {
    type Args = RefundArgs;
    type Output = String;
    type Error = ToolError;
    const NAME: &'static str = "issue_refund";
    const CLASS: EffectClass = EffectClass::Idempotent;
    const DESCRIPTION: &'static str = "Refund part of an order.";

    fn key(&self, a: &RefundArgs) -> Option<String> {
        Some(format!("refund:{}:{}", a.order_id, a.amount_cents))
    }

    async fn call(&self, _ctx: &EffectCtx, a: RefundArgs) -> Result<String, ToolError> {
        // Yield so that identical calls of one turn overlap.
        tokio::time::sleep(Duration::from_millis(20)).await;
        let n = self.applied.fetch_add(1, Ordering::SeqCst) + 1;
        Ok(format!("refund #{n} of {} on {}", a.amount_cents, a.order_id))
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
struct EmailArgs {
    to: String,
    body: String,
}

/// Send an email (irreversible, no key, approval by support when the body mentions a refund).
struct SendEmail {
    sent: Arc<AtomicUsize>,
}

impl Tool for SendEmail {
    type Args = EmailArgs;
    type Output = String;
    type Error = ToolError;
    const NAME: &'static str = "send_email";
    const CLASS: EffectClass = EffectClass::Irreversible;
    const APPROVAL: Option<&'static str> = Some("support");

    fn needs_approval(&self, a: &EmailArgs) -> bool {
        a.body.contains("refund")
    }

    async fn call(&self, _ctx: &EffectCtx, a: EmailArgs) -> Result<String, ToolError> {
        self.sent.fetch_add(1, Ordering::SeqCst);
        Ok(format!("sent to {}", a.to))
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
struct SleepArgs {
    label: String,
    millis: u64,
}

/// Sleeps, and tracks how many run at once.
struct Sleeper {
    running: Arc<AtomicUsize>,
    peak: Arc<AtomicUsize>,
}

impl Tool for Sleeper {
    type Args = SleepArgs;
    type Output = String;
    type Error = ToolError;
    const NAME: &'static str = "sleep";
    const CLASS: EffectClass = EffectClass::Pure;

    async fn call(&self, _ctx: &EffectCtx, a: SleepArgs) -> Result<String, ToolError> {
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(a.millis)).await;
        self.running.fetch_sub(1, Ordering::SeqCst);
        Ok(a.label)
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
struct NoArgs {}

/// Panics when called.
struct Boom;

impl Tool for Boom {
    type Args = NoArgs;
    type Output = String;
    type Error = ToolError;
    const NAME: &'static str = "boom";
    const CLASS: EffectClass = EffectClass::Idempotent;

    async fn call(&self, _ctx: &EffectCtx, _a: NoArgs) -> Result<String, ToolError> {
        panic!("the boom tool exploded")
    }
}

/// Waits until the run is cancelled, and says it saw it.
struct WaitForCancel {
    started: Arc<AtomicUsize>,
    saw_cancel: Arc<AtomicBool>,
}

#[derive(Debug)]
struct Stopped(String);
impl std::fmt::Display for Stopped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "stopped: {}", self.0)
    }
}
impl ClassifyError for Stopped {
    fn failure(&self) -> Option<Failure> {
        Some(Failure::Definitive)
    }
}

impl Tool for WaitForCancel {
    type Args = NoArgs;
    type Output = String;
    type Error = Stopped;
    const NAME: &'static str = "wait_for_cancel";
    const CLASS: EffectClass = EffectClass::Pure;

    async fn call(&self, ctx: &EffectCtx, _a: NoArgs) -> Result<String, Stopped> {
        self.started.fetch_add(1, Ordering::SeqCst);
        let flag = self.saw_cancel.clone();
        // Drop-guard: the engine drops the future when the run is cancelled; the flag is set
        // either by the tool's own select or by the guard that observes the token on drop.
        struct Guard(Arc<AtomicBool>, effect_tool::CancellationToken);
        impl Drop for Guard {
            fn drop(&mut self) {
                if self.1.is_cancelled() {
                    self.0.store(true, Ordering::SeqCst);
                }
            }
        }
        let _guard = Guard(flag.clone(), ctx.cancellation().clone());
        ctx.cancellation().cancelled().await;
        flag.store(true, Ordering::SeqCst);
        Err(Stopped("the run was cancelled".into()))
    }
}

struct Fixture {
    refunds: Arc<AtomicUsize>,
    emails: Arc<AtomicUsize>,
    running: Arc<AtomicUsize>,
    peak: Arc<AtomicUsize>,
    started: Arc<AtomicUsize>,
    saw_cancel: Arc<AtomicBool>,
    engine: Engine,
    toolkit: Toolkit,
}

fn fixture() -> Fixture {
    let refunds = Arc::new(AtomicUsize::new(0));
    let emails = Arc::new(AtomicUsize::new(0));
    let running = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let started = Arc::new(AtomicUsize::new(0));
    let saw_cancel = Arc::new(AtomicBool::new(false));
    let toolkit = Toolkit::new()
        .with(Refund {
            applied: refunds.clone(),
        })
        .with(SendEmail { sent: emails.clone() })
        .with(Sleeper {
            running: running.clone(),
            peak: peak.clone(),
        })
        .with(Boom)
        .with(WaitForCancel {
            started: started.clone(),
            saw_cancel: saw_cancel.clone(),
        });
    Fixture {
        refunds,
        emails,
        running,
        peak,
        started,
        saw_cancel,
        engine: Engine::new(MemoryStore::new()),
        toolkit,
    }
}

fn call(id: &str, name: &str, args: &str) -> ToolCall {
    ToolCall::new(id, name, args)
}

#[tokio::test]
async fn dispatch_returns_results_in_call_order_under_bounded_concurrency() {
    let f = fixture();
    let dispatcher = f.toolkit.dispatcher(f.engine.clone()).with_concurrency(2);
    let run = RunContext::new("run-order");
    // Later calls finish first; results still come back in call order.
    let calls: Vec<ToolCall> = (0..6)
        .map(|i| {
            let args = format!(r#"{{"label": "c{i}", "millis": {}}}"#, 60 - i * 10);
            call(&format!("call_{i}"), "sleep", &args)
        })
        .collect();
    let results = dispatcher.dispatch(&run, &calls).await;
    let ids: Vec<&str> = results.iter().map(|r| r.call_id.as_str()).collect();
    assert_eq!(ids, ["call_0", "call_1", "call_2", "call_3", "call_4", "call_5"]);
    let outputs: Vec<String> = results.iter().map(|r| r.content()).collect();
    assert_eq!(outputs, ["c0", "c1", "c2", "c3", "c4", "c5"]);
    // Exactly two at once: bounded (never more), and concurrent (a dispatcher that ran the
    // calls one by one would reach only one).
    assert_eq!(f.peak.load(Ordering::SeqCst), 2, "two calls run at once, never more");
    assert_eq!(f.running.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn dispatch_rejects_malformed_truncated_unknown_and_invalid_calls_without_running_anything() {
    let f = fixture();
    let dispatcher = f.toolkit.dispatcher(f.engine.clone());
    let run = RunContext::new("run-bad");
    let calls = [
        call("t1", "issue_refund", r#"{"order_id": "o-1", "amount_c"#),
        call("t2", "issue_refund", r#"{"order_id": "o-1", amount_cents: 5}"#),
        call("t3", "issue_refnd", r#"{"order_id": "o-1", "amount_cents": 5}"#),
        call("t4", "issue_refund", r#"{"order_id": "o-1", "amount_cents": "five"}"#),
        call("t5", "issue_refund", r#"{"order_id": "o-1"}"#),
        call("t6", "issue_refund", r#"{"order_id": "o-1", "amount_cents": -3}"#),
        call("t7", "issue_refund", r#"["o-1", 5]"#),
    ];
    let results = dispatcher.dispatch(&run, &calls).await;
    assert_eq!(f.refunds.load(Ordering::SeqCst), 0, "nothing may run");
    assert!(
        results
            .iter()
            .all(|r| r.is_rejected() && r.is_error() && r.key.is_none())
    );
    assert!(
        f.engine
            .store()
            .list(&effect_tool::Filter::all())
            .await
            .unwrap()
            .is_empty()
    );

    let text: Vec<String> = results.iter().map(|r| r.content()).collect();
    assert!(
        text[0].contains("truncated") && text[0].contains("Nothing was run"),
        "{}",
        text[0]
    );
    assert!(text[1].contains("not valid JSON"), "{}", text[1]);
    assert!(
        matches!(&results[2].outcome, ToolOutcome::Rejected(Rejection::UnknownTool { suggestions, .. }) if suggestions == &["issue_refund"])
    );
    assert!(text[2].contains("Did you mean `issue_refund`?"), "{}", text[2]);
    assert!(
        text[3].contains("`amount_cents`: expected integer, got string \"five\""),
        "{}",
        text[3]
    );
    assert!(text[4].contains("missing required field `amount_cents`"), "{}", text[4]);
    assert!(text[5].contains("`amount_cents`"), "{}", text[5]);
    assert!(text[6].contains("expected object, got an array"), "{}", text[6]);

    // A correct call afterwards runs once.
    let ok = dispatcher
        .dispatch(
            &run,
            &[call("t8", "issue_refund", r#"{"order_id": "o-1", "amount_cents": 5}"#)],
        )
        .await;
    assert_eq!(ok[0].content(), "refund #1 of 5 on o-1");
    assert_eq!(f.refunds.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn dispatch_lists_the_tools_when_no_name_is_close() {
    let f = fixture();
    let results = f
        .toolkit
        .dispatcher(f.engine.clone())
        .dispatch(&RunContext::new("r"), &[call("x", "deploy_to_prod", "{}")])
        .await;
    let text = results[0].content();
    assert!(text.contains("no tool named `deploy_to_prod`"), "{text}");
    assert!(text.contains("Available tools: `issue_refund`, `send_email`"), "{text}");
}

#[tokio::test]
async fn dispatch_catches_a_panicking_tool_and_runs_the_rest_of_the_turn() {
    let f = fixture();
    let dispatcher = f.toolkit.dispatcher(f.engine.clone());
    let run = RunContext::new("run-panic");
    let calls = [
        call("p1", "boom", "{}"),
        call("p2", "issue_refund", r#"{"order_id": "o-2", "amount_cents": 7}"#),
    ];
    let results = dispatcher.dispatch(&run, &calls).await;
    match &results[0].outcome {
        ToolOutcome::Panicked { message } => assert_eq!(message, "the boom tool exploded"),
        other => panic!("expected a caught panic, got {other:?}"),
    }
    assert!(results[0].content().contains("crashed while running"));
    assert_eq!(
        results[1].output().and_then(|v| v.as_str()),
        Some("refund #1 of 7 on o-2")
    );
    // The run goes on: the next turn still works.
    let again = dispatcher
        .dispatch(
            &run,
            &[call("p3", "issue_refund", r#"{"order_id": "o-3", "amount_cents": 1}"#)],
        )
        .await;
    assert!(!again[0].is_error(), "{}", again[0].content());
    assert_eq!(f.refunds.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn dispatch_replanned_and_parallel_identical_calls_apply_one_effect() {
    let f = fixture();
    let dispatcher = f.toolkit.dispatcher(f.engine.clone());
    let run = RunContext::new("run-replan");
    let args = r#"{"order_id": "o-9", "amount_cents": 250}"#;
    // Two identical calls in one turn (parallel), then the same call re-planned under a new id.
    let turn1 = dispatcher
        .dispatch(
            &run,
            &[call("a", "issue_refund", args), call("b", "issue_refund", args)],
        )
        .await;
    let turn2 = dispatcher.dispatch(&run, &[call("c", "issue_refund", args)]).await;
    assert_eq!(f.refunds.load(Ordering::SeqCst), 1, "one refund for three calls");
    for r in turn1.iter().chain(&turn2) {
        assert_eq!(r.content(), "refund #1 of 250 on o-9");
        assert_eq!(r.key.as_deref(), Some("run-replan:refund:o-9:250"));
    }
    let mut dispositions: Vec<Disposition> = turn1.iter().map(|r| r.disposition).collect();
    dispositions.sort_by_key(|d| d.as_str());
    assert_eq!(dispositions, [Disposition::Executed, Disposition::Shared]);
    assert_eq!(turn2[0].disposition, Disposition::Replayed);
}

#[tokio::test]
async fn dispatch_reports_blocked_calls_with_their_key() {
    let f = fixture();
    let dispatcher = f.toolkit.dispatcher(f.engine.clone());
    let run = RunContext::new("run-block");
    let args = r#"{"to": "ann@example.com", "body": "hello"}"#;
    let first = dispatcher.dispatch(&run, &[call("e1", "send_email", args)]).await;
    assert_eq!(first[0].content(), "sent to ann@example.com");
    // The model re-plans the same irreversible call under a new id: not run silently.
    let second = dispatcher.dispatch(&run, &[call("e2", "send_email", args)]).await;
    assert_eq!(f.emails.load(Ordering::SeqCst), 1);
    let blocked = second[0].blocked().expect("blocked");
    assert_eq!(Some(blocked.key.as_str()), second[0].key.as_deref());
    assert_eq!(blocked.tool, "send_email");
    assert_eq!(second[0].disposition, Disposition::Blocked);
    let text = second[0].content();
    assert!(text.contains("was not run") && text.contains(&blocked.key), "{text}");
    assert!(text.contains("Do not call it again"), "{text}");
}

#[tokio::test]
async fn dispatch_parks_calls_awaiting_approval_and_runs_them_once_approved() {
    let f = fixture();
    let dispatcher = f.toolkit.dispatcher(f.engine.clone());
    let run = RunContext::new("run-approve");
    let args = r#"{"to": "bob@example.com", "body": "your refund is on its way"}"#;
    let parked = dispatcher.dispatch(&run, &[call("m1", "send_email", args)]).await;
    let pending = parked[0].approval_pending().expect("awaiting approval").clone();
    assert_eq!(pending.role, "support");
    assert_eq!(parked[0].disposition, Disposition::AwaitingApproval);
    assert!(parked[0].content().contains("waits for approval by `support`"));
    assert_eq!(f.emails.load(Ordering::SeqCst), 0);

    f.engine
        .store()
        .approve(
            &pending.key,
            "alice",
            "support",
            &f.engine.store().get(&pending.key).await.unwrap().unwrap().fingerprint,
        )
        .await
        .unwrap();
    let done = dispatcher.dispatch(&run, &[call("m2", "send_email", args)]).await;
    assert_eq!(done[0].content(), "sent to bob@example.com");
    assert_eq!(f.emails.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn dispatch_cancellation_reaches_running_tools_and_stops_the_rest() {
    let f = fixture();
    let dispatcher = f.toolkit.dispatcher(f.engine.clone()).with_concurrency(1);
    let run = RunContext::new("run-cancel");
    let calls = [
        call("w1", "wait_for_cancel", "{}"),
        call("w2", "issue_refund", r#"{"order_id": "o-5", "amount_cents": 5}"#),
    ];
    let canceller = {
        let run = run.clone();
        let started = f.started.clone();
        tokio::spawn(async move {
            while started.load(Ordering::SeqCst) == 0 {
                tokio::task::yield_now().await;
            }
            run.cancel();
        })
    };
    let results = tokio::time::timeout(Duration::from_secs(30), dispatcher.dispatch(&run, &calls))
        .await
        .expect("cancellation ends the turn");
    canceller.await.unwrap();
    assert!(
        f.saw_cancel.load(Ordering::SeqCst),
        "the running tool saw the cancellation"
    );
    assert!(results.iter().all(|r| r.is_error()));
    assert!(matches!(
        &results[1].outcome,
        ToolOutcome::Failed(EffectError::Cancelled { .. })
    ));
    assert_eq!(
        f.refunds.load(Ordering::SeqCst),
        0,
        "a call that had not started does not start"
    );
}

#[tokio::test]
async fn dispatch_results_become_provider_messages() {
    let f = fixture();
    let dispatcher = f.toolkit.dispatcher(f.engine.clone());
    let run = RunContext::new("run-msg");
    let openai_calls = serde_json::json!([
        {"id": "call_a", "type": "function", "function": {"name": "issue_refund", "arguments": "{\"order_id\":\"o\",\"amount_cents\":1}"}},
        {"id": "call_b", "type": "function", "function": {"name": "nope", "arguments": "{}"}}
    ]);
    let calls: Vec<ToolCall> = openai_calls
        .as_array()
        .unwrap()
        .iter()
        .map(|c| ToolCall::from_openai(c).unwrap())
        .collect();
    let results = dispatcher.dispatch(&run, &calls).await;
    assert_eq!(
        results[0].to_openai_message(),
        serde_json::json!({"role": "tool", "tool_call_id": "call_a", "content": "refund #1 of 1 on o"})
    );
    assert_eq!(
        results[0].to_openai_responses_item(),
        serde_json::json!({"type": "function_call_output", "call_id": "call_a", "output": "refund #1 of 1 on o"})
    );
    let msg = anthropic_tool_results_message(&results);
    assert_eq!(msg["role"], "user");
    assert_eq!(msg["content"][0]["tool_use_id"], "call_a");
    assert_eq!(msg["content"][0]["is_error"], false);
    assert_eq!(msg["content"][1]["type"], "tool_result");
    assert_eq!(msg["content"][1]["is_error"], true);

    let block = serde_json::json!({"type": "tool_use", "id": "toolu_1", "name": "issue_refund", "input": {"order_id": "o", "amount_cents": 1}});
    let from_anthropic = ToolCall::from_anthropic(&block).unwrap();
    let again = dispatcher.dispatch(&run, &[from_anthropic]).await;
    assert_eq!(again[0].disposition, Disposition::Replayed);
    assert_eq!(f.refunds.load(Ordering::SeqCst), 1);
}

#[test]
fn dispatch_toolkit_refuses_two_tools_of_one_name() {
    struct OtherRefund;
    impl Tool for OtherRefund {
        type Args = NoArgs;
        type Output = String;
        type Error = ToolError;
        const NAME: &'static str = "issue_refund";
        const CLASS: EffectClass = EffectClass::Irreversible;
        async fn call(&self, _ctx: &EffectCtx, _a: NoArgs) -> Result<String, ToolError> {
            Ok(String::new())
        }
    }
    let f = fixture();
    let mut toolkit = f.toolkit.clone();
    let err = toolkit.try_add(OtherRefund).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("`issue_refund`"), "{text}");
    assert!(text.contains("Refund`, idempotent"), "{text}");
    assert!(text.contains("OtherRefund`, irreversible"), "{text}");
    assert_eq!(toolkit.len(), 5);
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || f.toolkit.with(OtherRefund)));
    assert!(panicked.is_err());
}

#[test]
fn dispatch_toolkit_exports_every_provider_format() {
    let f = fixture();
    let openai = f.toolkit.openai_tools();
    let refund = &openai[0];
    assert_eq!(refund["type"], "function");
    assert_eq!(refund["function"]["name"], "issue_refund");
    assert_eq!(refund["function"]["description"], "Refund part of an order.");
    assert_eq!(refund["function"]["strict"], true);
    let params = &refund["function"]["parameters"];
    assert_eq!(params["additionalProperties"], false);
    // Every property is required in strict mode (the order follows serde_json's map order).
    let mut required: Vec<&str> = params["required"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    required.sort();
    assert_eq!(required, ["amount_cents", "order_id"]);
    assert!(
        params["properties"]["amount_cents"].get("format").is_none(),
        "strict mode rejects uint formats"
    );

    let responses = f.toolkit.openai_responses_tools();
    assert_eq!(responses[0]["name"], "issue_refund");
    assert_eq!(responses[0]["strict"], true);

    let anthropic = f.toolkit.anthropic_tools();
    assert_eq!(anthropic[1]["name"], "send_email");
    assert_eq!(anthropic[1]["input_schema"]["type"], "object");
    assert!(anthropic[1]["input_schema"].get("$schema").is_none());

    let mcp = f.toolkit.mcp_tools();
    let by_name = |n: &str| mcp.iter().find(|t| t["name"] == n).unwrap().clone();
    assert_eq!(
        by_name("issue_refund")["annotations"],
        serde_json::json!({"readOnlyHint": false, "destructiveHint": false, "idempotentHint": true})
    );
    assert_eq!(by_name("send_email")["annotations"]["destructiveHint"], true);
    assert_eq!(by_name("sleep")["annotations"]["readOnlyHint"], true);
    assert_eq!(by_name("send_email")["_meta"]["effect-tool/approval"], "support");
    assert_eq!(
        by_name("issue_refund")["inputSchema"]["required"],
        serde_json::json!(["order_id", "amount_cents"])
    );
}
