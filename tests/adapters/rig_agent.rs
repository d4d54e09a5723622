//! Declared tools inside a real rig agent (rig-agent's runtime), driven by a scripted
//! completion model: no network. Effects are counted by counters the engine cannot see.

#![cfg(feature = "rig-agent-tests")]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use effect_tool::adapters::rig::rig_core::message::{AssistantContent, ToolCall, ToolFunction, ToolName};
use effect_tool::adapters::rig::rig_core::test_utils::{MockCompletionModel, MockTurn};
use effect_tool::adapters::rig::rig_core::tool::ToolContext;
use effect_tool::adapters::rig::{EffectRun, RigTool, dynamic_tools};
use effect_tool::{EffectClass, EffectCtx, Engine, Filter, MemoryStore, RunContext, Tool, ToolError, Toolkit};
use rig_agent::AgentBuilder;
use serde::{Deserialize, Serialize};
use serde_json::json;

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
struct RefundArgs {
    order_id: String,
    amount_cents: u64,
}

/// Refund part of an order.
struct IssueRefund {
    applied: Arc<AtomicUsize>,
}

impl Tool for IssueRefund {
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
        let n = self.applied.fetch_add(1, Ordering::SeqCst) + 1;
        Ok(format!("refund #{n}: {} cents on {}", a.amount_cents, a.order_id))
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
struct EmailArgs {
    to: String,
    body: String,
}

/// Send an email.
struct SendEmail {
    sent: Arc<AtomicUsize>,
}

impl Tool for SendEmail {
    type Args = EmailArgs;
    type Output = String;
    type Error = ToolError;
    const NAME: &'static str = "send_email";
    const CLASS: EffectClass = EffectClass::Irreversible;
    const DESCRIPTION: &'static str = "Send an email to a customer.";

    async fn call(&self, _ctx: &EffectCtx, a: EmailArgs) -> Result<String, ToolError> {
        self.sent.fetch_add(1, Ordering::SeqCst);
        Ok(format!("sent to {}", a.to))
    }
}

fn tool_call(id: &str, name: &str, args: serde_json::Value) -> MockTurn {
    MockTurn::from_contents([AssistantContent::ToolCall(ToolCall::from_wire(
        id,
        ToolFunction::new(ToolName::new(name.to_owned()).unwrap(), args),
    ))])
}

async fn within<T>(f: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(30), f)
        .await
        .expect("the agent run ends")
}

#[tokio::test]
async fn rig_agent_replanned_calls_apply_one_effect_and_blocked_calls_reach_the_model() {
    let refunds = Arc::new(AtomicUsize::new(0));
    let emails = Arc::new(AtomicUsize::new(0));
    let engine = Engine::new(MemoryStore::new());
    let run = RunContext::new("rig-run-1");
    let refund = json!({"order_id": "A-7", "amount_cents": 250});
    let email = json!({"to": "ann@example.com", "body": "Your refund is on its way."});
    let model = MockCompletionModel::from_turns([
        tool_call("c1", "issue_refund", refund.clone()),
        // The model re-plans the same refund under a new call id.
        tool_call("c2", "issue_refund", refund),
        tool_call("c3", "send_email", email.clone()),
        // ...and the same email: irreversible, no key: blocked, not sent again.
        tool_call("c4", "send_email", email),
        // Arguments that do not fit the schema: rejected, nothing runs.
        tool_call("c5", "issue_refund", json!({"order_id": "A-7", "amount_cents": "lots"})),
        MockTurn::text("All done."),
    ]);
    let agent = AgentBuilder::new(model.clone())
        .tool(RigTool::new(
            IssueRefund {
                applied: refunds.clone(),
            },
            engine.clone(),
            run.clone(),
        ))
        .tool(RigTool::new(SendEmail { sent: emails.clone() }, engine.clone(), run))
        .build();

    let response = within(agent.prompt("Refund A-7 and tell Ann.").max_turns(10).run())
        .await
        .expect("the run succeeds");
    assert_eq!(response.output(), "All done.");
    assert_eq!(refunds.load(Ordering::SeqCst), 1, "one refund for two calls");
    assert_eq!(emails.load(Ordering::SeqCst), 1, "one email for two calls");

    // What the model was shown, in order, through rig's own history.
    let transcript = format!("{:?}", response.messages);
    let first = transcript
        .find("refund #1: 250 cents on A-7")
        .expect("the refund result");
    let again = transcript[first + 1..].find("refund #1: 250 cents on A-7");
    assert!(
        again.is_some(),
        "the re-planned call got the recorded result: {transcript}"
    );
    assert!(transcript.contains("sent to ann@example.com"), "{transcript}");
    assert!(transcript.contains("`send_email` was not run"), "{transcript}");
    assert!(
        transcript.contains("`amount_cents`: expected integer, got string"),
        "{transcript}"
    );
    assert_eq!(model.request_count(), 6);

    let records = engine.store().list(&Filter::all()).await.unwrap();
    assert_eq!(records.len(), 2, "one record per effect: {records:?}");
}

#[tokio::test]
async fn rig_dynamic_tools_take_the_run_from_the_tool_context() {
    let refunds = Arc::new(AtomicUsize::new(0));
    let emails = Arc::new(AtomicUsize::new(0));
    let engine = Engine::new(MemoryStore::new());
    let toolkit = Toolkit::new()
        .with(IssueRefund {
            applied: refunds.clone(),
        })
        .with(SendEmail { sent: emails.clone() });
    let dispatcher = toolkit.dispatcher(engine.clone());
    let refund = json!({"order_id": "B-1", "amount_cents": 99});

    for run_id in ["ctx-run-a", "ctx-run-a", "ctx-run-b"] {
        let model =
            MockCompletionModel::from_turns([tool_call("r1", "issue_refund", refund.clone()), MockTurn::text("ok")]);
        let agent = AgentBuilder::new(model)
            .dynamic_tools(dynamic_tools(&dispatcher, RunContext::new("adapter-default-run")))
            .build();
        let mut context = ToolContext::new();
        context.insert(EffectRun::new(run_id)).unwrap();
        let response = within(agent.prompt("refund").tool_context(context).max_turns(4).run())
            .await
            .expect("the run succeeds");
        assert_eq!(response.output(), "ok");
    }
    // One refund per run: run a twice (replayed), run b once.
    assert_eq!(refunds.load(Ordering::SeqCst), 2);
    for run_id in ["ctx-run-a", "ctx-run-b"] {
        let filter = Filter {
            run_id: Some(run_id.to_owned()),
            ..Filter::all()
        };
        let records = engine.store().list(&filter).await.unwrap();
        assert_eq!(records.len(), 1, "{run_id}: {records:?}");
        assert_eq!(records[0].key, format!("{run_id}:refund:B-1:99"));
    }
    let default_run = Filter {
        run_id: Some("adapter-default-run".to_owned()),
        ..Filter::all()
    };
    assert!(engine.store().list(&default_run).await.unwrap().is_empty());
    assert_eq!(emails.load(Ordering::SeqCst), 0);
}

/// The mail relay's password, which the application holds.
#[derive(Clone)]
struct RelayPassword(String);

/// The passwords the relay was given.
static RELAY_LOGINS: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// Send a note through the relay.
#[effect_tool::tool(effect = "irreversible", key(to))]
async fn send_note(
    /// Who to write to.
    to: String,
    #[secret] relay: RelayPassword,
) -> Result<String, ToolError> {
    RELAY_LOGINS.lock().unwrap().push(relay.0.clone());
    Ok(format!("noted {to}"))
}

/// Issue 30.4: an adapter whose run lacks a value a tool takes is refused when it is built, and
/// a run named per prompt (`EffectRun`) keeps the adapter run's values, which it used to drop.
#[tokio::test]
async fn rig_tools_that_take_a_secret_get_it_from_the_adapters_run_even_in_a_run_named_per_prompt() {
    let engine = Engine::new(MemoryStore::new());
    let toolkit = Toolkit::new().with(SendNote);
    let dispatcher = toolkit.dispatcher(engine.clone());
    let refused = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        dynamic_tools(&dispatcher, RunContext::new("no-values"))
    }))
    .err()
    .and_then(|p| p.downcast::<String>().ok())
    .expect("an adapter without the value is refused");
    assert!(refused.contains("`send_note` takes a `RelayPassword`"), "{refused}");
    assert!(refused.contains("RunContext::with_value"), "{refused}");
    let refused = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        RigTool::new(SendNote, engine.clone(), RunContext::new("no-values"))
    }));
    assert!(refused.is_err());

    let run = RunContext::new("adapter-run").with_value(RelayPassword("relay-pw".into()));
    let model = MockCompletionModel::from_turns([
        tool_call("n1", "send_note", json!({"to": "ann@example.com"})),
        MockTurn::text("ok"),
    ]);
    let agent = AgentBuilder::new(model)
        .dynamic_tools(dynamic_tools(&dispatcher, run))
        .build();
    let mut context = ToolContext::new();
    context.insert(EffectRun::new("prompt-run")).unwrap();
    let response = within(agent.prompt("note").tool_context(context).max_turns(4).run())
        .await
        .expect("the run succeeds");
    assert!(format!("{:?}", response.messages).contains("noted ann@example.com"));
    assert_eq!(*RELAY_LOGINS.lock().unwrap(), vec!["relay-pw".to_owned()]);
    let records = engine.store().list(&Filter::all()).await.unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].run_id, "prompt-run");
}
