//! What the model reads at the edges (issue 30 items 1, 2 and 6; issue 29 item 3), in the
//! OpenAI and Anthropic formats: a record in doubt whose `recover` fails is a blocked call
//! whose text says the effect may have happened and must not be retried in another form; a
//! replay whose arguments differ says the call did not run and which fields differ (never a
//! value); each failure says one thing once, as sentences, with no operator's command; a
//! blocked re-plan gives the earlier result; a key of another tool is refused. Effects are
//! counted by a ledger the engine cannot see.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use common::ledger::Downstream;
use common::mail::{EmailArgs, SendEmail};
use effect_tool::{
    BlockReason, Disposition, EffectClass, EffectCtx, Engine, MemoryStore, RunContext, Tool, ToolCall, ToolError,
    ToolResult, Toolkit,
};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
struct NoteArgs {
    text: String,
}

/// An unkeyed irreversible tool, and one that fails as its argument says.
struct PostNote(Arc<Downstream>);

impl Tool for PostNote {
    type Args = NoteArgs;
    type Output = String;
    type Error = ToolError;
    const NAME: &'static str = "post_note";
    const CLASS: EffectClass = EffectClass::Irreversible;

    async fn call(&self, _ctx: &EffectCtx, a: NoteArgs) -> Result<String, ToolError> {
        match a.text.as_str() {
            "refused" => Err(ToolError::definitive("the board refuses empty notes.")),
            "busy" => Err(ToolError::transient("the board is busy")),
            _ => {
                self.0.apply(&a.text);
                Ok(format!("note #{} posted", self.0.requests()))
            }
        }
    }
}

/// A tool whose custom key is the email's (`email:{ticket}`): the key rules collide.
struct Escalate(Arc<Downstream>);

impl Tool for Escalate {
    type Args = EmailArgs;
    type Output = String;
    type Error = ToolError;
    const NAME: &'static str = "escalate";
    const CLASS: EffectClass = EffectClass::Irreversible;

    fn key(&self, a: &EmailArgs) -> Option<String> {
        Some(format!("email:{}", a.ticket))
    }

    async fn call(&self, _ctx: &EffectCtx, a: EmailArgs) -> Result<String, ToolError> {
        self.0.apply(&format!("escalate:{}", a.ticket));
        Ok("escalated".into())
    }
}

fn email_call(id: &str, amount: u32) -> ToolCall {
    ToolCall::new(
        id,
        "send_email",
        format!(r#"{{"ticket": "T-90", "to": "ann@example.com", "amount_eur": {amount}}}"#),
    )
}

/// The text in both provider formats, which must carry the same text.
fn texts(r: &ToolResult) -> String {
    let openai = r.to_openai_message();
    let anthropic = r.to_anthropic_block();
    assert_eq!(openai["content"], anthropic["content"]);
    assert_eq!(anthropic["is_error"], serde_json::json!(r.is_error()));
    r.content()
}

/// What no model-facing text may carry: an operator's command, a hint said twice, a sentence
/// without its full stop before the next.
fn assert_for_a_model(text: &str) {
    for forbidden in ["effect-tool ", "--applied", "--amend", "StoreExt", "journal (its path"] {
        assert!(
            !text.contains(forbidden),
            "operator instructions reached the model: {text}"
        );
    }
    let lower = text.to_lowercase();
    assert!(lower.matches("nothing happened").count() <= 1, "said twice: {text}");
    assert!(!text.contains("again Nothing"), "a missing full stop: {text}");
    assert!(!text.contains(".."), "a doubled full stop: {text}");
}

/// Issue 30 item 1: an email that timed out after sending, then a mail log that is down. The
/// model is told the call was blocked, that it may have happened, and never to retry it in
/// another form; never "nothing happened" nor "you may try again".
#[tokio::test]
async fn a_failing_recover_tells_the_model_it_may_have_happened() {
    let tool = SendEmail::default();
    tool.time_out.store(true, Ordering::SeqCst);
    tool.log_down.store(true, Ordering::SeqCst);
    let ledger = tool.ledger.clone();
    let dispatcher = Toolkit::new().with(tool).dispatcher(Engine::new(MemoryStore::new()));
    let run = RunContext::new("conv-1");
    for id in ["c1", "c2"] {
        let r = dispatcher.dispatch(&run, &[email_call(id, 900)]).await.remove(0);
        assert_eq!(r.disposition, Disposition::Blocked, "{id}: {}", r.content());
        assert_eq!(r.blocked().unwrap().reason, BlockReason::RecoverFailed);
        let text = texts(&r);
        assert!(r.is_error());
        assert!(text.contains("may already have taken effect"), "{text}");
        assert!(text.contains("Do not call it in another form"), "{text}");
        assert!(!text.to_lowercase().contains("nothing happened"), "{text}");
        assert!(!text.contains("try again"), "{text}");
        assert_for_a_model(&text);
    }
    assert_eq!(ledger.requests(), 1, "the email went out once");
}

/// Issue 30 item 2: a call for 100 EUR under the key of the 900 EUR email is not run; the model
/// reads that its call did not run, that the result is the earlier call's, and which field
/// differs, without the values.
#[tokio::test]
async fn a_replay_with_other_arguments_tells_the_model_which_fields_differ() {
    let tool = SendEmail::default();
    let ledger = tool.ledger.clone();
    let dispatcher = Toolkit::new().with(tool).dispatcher(Engine::new(MemoryStore::new()));
    let run = RunContext::new("conv-1");
    let first = dispatcher.dispatch(&run, &[email_call("c1", 900)]).await.remove(0);
    assert_eq!(texts(&first), "sent 900 EUR to ann@example.com");
    assert_eq!(first.input_differs, None);

    let other = dispatcher.dispatch(&run, &[email_call("c2", 100)]).await.remove(0);
    assert_eq!(other.disposition, Disposition::Replayed);
    assert_eq!(other.input_differs, Some(vec!["amount_eur".to_owned()]));
    assert!(!other.is_error());
    let text = texts(&other);
    assert!(text.contains("did not run"), "{text}");
    assert!(text.contains("`amount_eur`"), "{text}");
    assert!(!text.contains("100"), "a value reached the text: {text}");
    assert!(text.ends_with("sent 900 EUR to ann@example.com"), "{text}");
    assert_for_a_model(&text);

    // The same arguments again: the plain result, no note.
    let same = dispatcher.dispatch(&run, &[email_call("c3", 900)]).await.remove(0);
    assert_eq!(texts(&same), "sent 900 EUR to ann@example.com");
    assert_eq!(ledger.requests(), 1);
}

/// Issue 30 item 6: each failure says what happened and what to do, once, as sentences.
#[tokio::test]
async fn each_failure_says_one_thing_once() {
    let ledger = Arc::new(Downstream::default());
    let dispatcher = Toolkit::new()
        .with(PostNote(ledger.clone()))
        .dispatcher(Engine::new(MemoryStore::new()));
    let run = RunContext::new("conv-1");
    let calls = [
        ToolCall::new("c1", "post_note", r#"{"text": "refused"}"#),
        ToolCall::new("c2", "post_note", r#"{"text": "busy"}"#),
    ];
    let results = dispatcher.dispatch(&run, &calls).await;
    let refused = texts(&results[0]);
    assert_eq!(
        refused,
        "Error: `post_note` failed: the board refuses empty notes. Nothing happened, and the same call will fail the same way: change the arguments or choose another action."
    );
    let busy = texts(&results[1]);
    assert_eq!(
        busy,
        "Error: `post_note` failed: the board is busy. Nothing happened; calling it again later with the same arguments is safe."
    );
    for text in [refused, busy] {
        assert_for_a_model(&text);
    }
    assert_eq!(ledger.requests(), 0);
}

/// Issue 30 item 6: a blocked re-plan of an unkeyed irreversible tool gives the model the
/// earlier call's result, which stands.
#[tokio::test]
async fn a_blocked_replan_gives_the_earlier_result() {
    let ledger = Arc::new(Downstream::default());
    let dispatcher = Toolkit::new()
        .with(PostNote(ledger.clone()))
        .dispatcher(Engine::new(MemoryStore::new()));
    let run = RunContext::new("conv-1");
    let note = |id: &str| ToolCall::new(id, "post_note", r#"{"text": "shipped today"}"#);
    let first = dispatcher.dispatch(&run, &[note("c1")]).await.remove(0);
    assert_eq!(texts(&first), "note #1 posted");
    let replan = dispatcher.dispatch(&run, &[note("c2")]).await.remove(0);
    assert_eq!(replan.blocked().unwrap().reason, BlockReason::IdenticalReplan);
    assert_eq!(replan.recorded, Some(serde_json::json!("note #1 posted")));
    let text = texts(&replan);
    assert!(text.contains("its result stands"), "{text}");
    assert!(text.ends_with("The earlier call's result: note #1 posted"), "{text}");
    assert_for_a_model(&text);
    assert_eq!(ledger.requests(), 1);
}

/// Issue 29 item 3: a tool whose key rule collides with another's is refused; the model reads
/// that nothing happened and that the fault is the application's, not the other tool's result.
#[tokio::test]
async fn a_key_of_another_tool_is_refused_for_the_model() {
    let email = SendEmail::default();
    let ledger = email.ledger.clone();
    let dispatcher = Toolkit::new()
        .with(email)
        .with(Escalate(ledger.clone()))
        .dispatcher(Engine::new(MemoryStore::new()));
    let run = RunContext::new("conv-1");
    dispatcher.dispatch(&run, &[email_call("c1", 900)]).await;
    let call = ToolCall::new(
        "c2",
        "escalate",
        r#"{"ticket": "T-90", "to": "ann@example.com", "amount_eur": 900}"#,
    );
    let r = dispatcher.dispatch(&run, &[call]).await.remove(0);
    assert_eq!(r.disposition, Disposition::Failed);
    let text = texts(&r);
    assert!(r.is_error());
    assert!(text.contains("already used by another tool, `send_email`"), "{text}");
    assert!(
        !text.contains("sent 900"),
        "the other tool's result reached the model: {text}"
    );
    assert_for_a_model(&text);
    assert_eq!(ledger.requests(), 1, "escalate never ran");
}
