//! One whole turn per wire format (the request with tools, the response with calls, the results
//! sent back), each checked against the provider's documented shapes; turns that did not finish
//! run nothing; the provider's own tools are recorded in the run's journal and never dispatched.
//!
//! A scripted model plays provider responses through [`Dispatcher::dispatch_turn`] on a real
//! SQLite journal; effects are counted in a ledger file the engine cannot see.

use std::path::PathBuf;

use effect_tool::store::sqlite::SqliteStore;
use effect_tool::toolkit::{Dispatcher, ProviderRecorded, Rejection, Stop, ToolOutcome, Turn, TurnResults, WireFormat};
use effect_tool::{
    Disposition, EffectClass, EffectCtx, Engine, Filter, RecordState, RunContext, Store, Tool, ToolCall, ToolError,
    Toolkit,
};
use effect_tool_core::testing::conformance::{ScratchDir, ledger_append, ledger_lines};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
struct EmailArgs {
    to: String,
    body: String,
}

/// Send an email: irreversible, no key. Each execution writes a line to the ledger.
struct SendEmail {
    ledger: PathBuf,
}

impl Tool for SendEmail {
    type Args = EmailArgs;
    type Output = String;
    type Error = ToolError;
    const NAME: &'static str = "send_email";
    const CLASS: EffectClass = EffectClass::Irreversible;
    const DESCRIPTION: &'static str = "Send an email to a customer.";

    async fn call(&self, _ctx: &EffectCtx, a: EmailArgs) -> Result<String, ToolError> {
        ledger_append(&self.ledger, &format!("email to {}: {}", a.to, a.body));
        Ok(format!("sent to {}", a.to))
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
struct RefundArgs {
    order_id: String,
    amount_cents: u64,
}

/// Refund an order: idempotent, keyed by the order. Each execution writes a line to the ledger.
struct Refund {
    ledger: PathBuf,
}

impl Tool for Refund {
    type Args = RefundArgs;
    type Output = Value;
    type Error = ToolError;
    const NAME: &'static str = "issue_refund";
    const CLASS: EffectClass = EffectClass::Idempotent;
    const DESCRIPTION: &'static str = "Refund part of an order.";

    fn key(&self, a: &RefundArgs) -> Option<String> {
        Some(format!("refund:{}", a.order_id))
    }

    async fn call(&self, _ctx: &EffectCtx, a: RefundArgs) -> Result<Value, ToolError> {
        ledger_append(&self.ledger, &format!("refund {} of {}", a.order_id, a.amount_cents));
        Ok(json!({"refund_id": format!("re_{}", a.order_id), "amount_cents": a.amount_cents}))
    }
}

/// A toolkit, a dispatcher on a SQLite journal, and the ledger, in a scratch directory.
struct Bench {
    _dir: ScratchDir,
    ledger: PathBuf,
    dispatcher: Dispatcher,
}

impl Bench {
    fn new(what: &str) -> Bench {
        let dir = ScratchDir::new(what);
        let ledger = dir.path().join("ledger");
        let kit = Toolkit::new()
            .with(SendEmail { ledger: ledger.clone() })
            .with(Refund { ledger: ledger.clone() });
        let engine = Engine::new(SqliteStore::open(dir.path().join("journal.db")).unwrap());
        Bench {
            _dir: dir,
            ledger,
            dispatcher: kit.dispatcher(engine),
        }
    }

    fn effects(&self) -> Vec<String> {
        ledger_lines(&self.ledger)
    }

    fn store(&self) -> &std::sync::Arc<dyn Store> {
        self.dispatcher.engine().store()
    }

    async fn records(&self, run: &RunContext) -> Vec<effect_tool::EffectRecord> {
        let filter = Filter {
            run_id: Some(run.run_id().to_owned()),
            ..Filter::all()
        };
        self.store().list(&filter).await.unwrap()
    }
}

/// A model that answers with scripted provider responses, one a turn: each is parsed in its
/// format, dispatched, and the reply appended to the conversation it keeps (as an
/// application would send it).
struct ScriptedProvider {
    format: WireFormat,
    responses: Vec<Value>,
}

impl ScriptedProvider {
    fn new(format: WireFormat, responses: Vec<Value>) -> Self {
        ScriptedProvider { format, responses }
    }

    async fn play(&self, dispatcher: &Dispatcher, run: &RunContext) -> Vec<TurnResults> {
        let mut turns = Vec::new();
        for response in &self.responses {
            let turn = Turn::parse(self.format, response).unwrap();
            turns.push(dispatcher.dispatch_turn(run, &turn).await);
        }
        turns
    }
}

/// `instance` fits `schema` (a shape transcribed from the provider's API reference).
fn check(what: &str, schema: &Value, instance: &Value) {
    let validator = jsonschema::draft202012::new(schema).unwrap();
    let errors: Vec<String> = validator
        .iter_errors(instance)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "{what} does not fit the documented shape: {errors:#?}\n{instance:#}"
    );
}

/// A JSON Schema object with exactly these properties, `required` of them required.
fn object(properties: Value, required: &[&str]) -> Value {
    json!({"type": "object", "properties": properties, "required": required, "additionalProperties": false})
}

/// Any JSON Schema object (the exported parameters: checked by the schema dialect tests).
fn any_object() -> Value {
    json!({"type": "object"})
}

fn string() -> Value {
    json!({"type": "string"})
}

fn constant(v: &str) -> Value {
    json!({"const": v})
}

fn email(id: &str) -> (String, Value) {
    (
        id.to_owned(),
        json!({"to": "ann@example.com", "body": "Your refund is on its way."}),
    )
}

// --- One whole turn per wire format -------------------------------------------------------

#[tokio::test]
async fn openai_chat_completions_whole_turn() {
    let bench = Bench::new("wire-openai-chat");
    let run = RunContext::new("run-chat");
    // The request: `tools` as Chat Completions documents them.
    let request = json!({
        "model": "gpt-4.1",
        "messages": [{"role": "user", "content": "Refund order o-1 and tell Ann."}],
        "tools": bench.dispatcher.toolkit().openai_tools(),
    });
    let tool = object(
        json!({
            "type": constant("function"),
            "function": object(
                json!({"name": string(), "description": string(), "parameters": any_object(), "strict": {"type": "boolean"}}),
                &["name"],
            ),
        }),
        &["type", "function"],
    );
    check(
        "the request's tools",
        &json!({"type": "array", "items": tool}),
        &request["tools"],
    );

    // The response, as the API reference shows a tool-calling completion.
    let (_, email_args) = email("");
    let response = json!({
        "id": "chatcmpl-abc123",
        "object": "chat.completion",
        "created": 1_741_570_283,
        "model": "gpt-4.1-2025-04-14",
        "choices": [{
            "index": 0,
            "message": {
                "role": "assistant",
                "content": null,
                "refusal": null,
                "tool_calls": [
                    {"id": "call_refund", "type": "function", "function": {"name": "issue_refund", "arguments": "{\"order_id\":\"o-1\",\"amount_cents\":500}"}},
                    {"id": "call_email", "type": "function", "function": {"name": "send_email", "arguments": email_args.to_string()}}
                ]
            },
            "logprobs": null,
            "finish_reason": "tool_calls"
        }],
        "usage": {"prompt_tokens": 82, "completion_tokens": 40, "total_tokens": 122}
    });
    let turn = Turn::from_openai_chat(&response).unwrap();
    assert_eq!(turn.stop, Stop::Finished);
    assert_eq!(turn.response_id.as_deref(), Some("chatcmpl-abc123"));
    let done = bench.dispatcher.dispatch_turn(&run, &turn).await;
    assert_eq!(bench.effects().len(), 2, "both calls ran once: {:?}", bench.effects());

    // The results sent back: one `tool` message a call, in call order.
    let reply = done.reply();
    let message = object(
        json!({"role": constant("tool"), "tool_call_id": string(), "content": string()}),
        &["role", "tool_call_id", "content"],
    );
    check(
        "the tool messages",
        &json!({"type": "array", "items": message}),
        &Value::Array(reply.clone()),
    );
    assert_eq!(reply[0]["tool_call_id"], "call_refund");
    assert_eq!(reply[1]["tool_call_id"], "call_email");
    assert_eq!(reply[1]["content"], "sent to ann@example.com");
}

#[tokio::test]
async fn openai_responses_whole_turn() {
    let bench = Bench::new("wire-openai-responses");
    let run = RunContext::new("run-responses");
    let request = json!({
        "model": "gpt-4.1",
        "input": [{"role": "user", "content": "Refund order o-1."}],
        "tools": bench.dispatcher.toolkit().openai_responses_tools(),
    });
    let tool = object(
        json!({"type": constant("function"), "name": string(), "description": string(), "parameters": any_object(), "strict": {"type": "boolean"}}),
        &["type", "name", "parameters"],
    );
    check(
        "the request's tools",
        &json!({"type": "array", "items": tool}),
        &request["tools"],
    );

    let response = json!({
        "id": "resp_67ccd2bed1ec8190",
        "object": "response",
        "created_at": 1_741_476_542,
        "status": "completed",
        "error": null,
        "incomplete_details": null,
        "model": "gpt-4.1-2025-04-14",
        "output": [{
            "type": "function_call",
            "id": "fc_12345xyz",
            "call_id": "call_12345xyz",
            "name": "issue_refund",
            "arguments": "{\"order_id\":\"o-1\",\"amount_cents\":500}",
            "status": "completed"
        }],
        "usage": {"input_tokens": 291, "output_tokens": 23, "total_tokens": 314}
    });
    let turn = Turn::from_openai_responses(&response).unwrap();
    assert_eq!(turn.stop, Stop::Finished);
    let done = bench.dispatcher.dispatch_turn(&run, &turn).await;
    assert_eq!(bench.effects(), vec!["refund o-1 of 500"]);

    let reply = done.reply();
    let item = object(
        json!({"type": constant("function_call_output"), "call_id": string(), "output": string()}),
        &["type", "call_id", "output"],
    );
    check(
        "the input items",
        &json!({"type": "array", "items": item}),
        &Value::Array(reply.clone()),
    );
    assert_eq!(reply[0]["call_id"], "call_12345xyz");
    let output: Value = serde_json::from_str(reply[0]["output"].as_str().unwrap()).unwrap();
    assert_eq!(output["refund_id"], "re_o-1");
}

#[tokio::test]
async fn anthropic_messages_whole_turn() {
    let bench = Bench::new("wire-anthropic");
    let run = RunContext::new("run-anthropic");
    let request = json!({
        "model": "claude-sonnet-4-5",
        "max_tokens": 1024,
        "messages": [{"role": "user", "content": "Tell Ann her refund is on its way."}],
        "tools": bench.dispatcher.toolkit().anthropic_tools(),
    });
    let tool = object(
        json!({"name": string(), "description": string(), "input_schema": any_object()}),
        &["name", "input_schema"],
    );
    check(
        "the request's tools",
        &json!({"type": "array", "items": tool}),
        &request["tools"],
    );

    let (_, email_args) = email("");
    let response = json!({
        "id": "msg_01Aq9w938a90dw8q",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [
            {"type": "text", "text": "I'll email Ann."},
            {"type": "tool_use", "id": "toolu_01A09q90qw90lq917835lq9", "name": "send_email", "input": email_args}
        ],
        "stop_reason": "tool_use",
        "stop_sequence": null,
        "usage": {"input_tokens": 472, "output_tokens": 91}
    });
    let turn = Turn::from_anthropic(&response).unwrap();
    assert_eq!(turn.stop, Stop::Finished);
    let done = bench.dispatcher.dispatch_turn(&run, &turn).await;
    assert_eq!(bench.effects().len(), 1);

    let reply = done.reply();
    assert_eq!(reply.len(), 1, "one user message carries every result");
    let block = object(
        json!({
            "type": constant("tool_result"),
            "tool_use_id": string(),
            "content": {"type": ["string", "array"]},
            "is_error": {"type": "boolean"},
        }),
        &["type", "tool_use_id"],
    );
    let message = object(
        json!({"role": constant("user"), "content": {"type": "array", "items": block, "minItems": 1}}),
        &["role", "content"],
    );
    check("the user message", &message, &reply[0]);
    assert_eq!(reply[0]["content"][0]["tool_use_id"], "toolu_01A09q90qw90lq917835lq9");
    assert_eq!(reply[0]["content"][0]["is_error"], false);
}

/// Gemini's `functionResponse` part and the content carrying them, as the API reference
/// documents them (`id` optional, `name` and `response` required, `response` an object).
fn gemini_reply_shape() -> Value {
    let function_response = object(
        json!({"id": string(), "name": string(), "response": {"type": "object"}}),
        &["name", "response"],
    );
    let part = object(json!({"functionResponse": function_response}), &["functionResponse"]);
    object(
        json!({"role": constant("user"), "parts": {"type": "array", "items": part, "minItems": 1}}),
        &["role", "parts"],
    )
}

#[tokio::test]
async fn gemini_whole_turn_with_call_ids() {
    let bench = Bench::new("wire-gemini");
    let run = RunContext::new("run-gemini");
    let request = json!({
        "contents": [{"role": "user", "parts": [{"text": "Refund order o-1 and tell Ann."}]}],
        "tools": [{"functionDeclarations": bench.dispatcher.toolkit().gemini_tools()}],
    });
    let declaration = object(
        json!({"name": string(), "description": string(), "parameters": any_object()}),
        &["name"],
    );
    let tools = json!({"type": "array", "items": object(
        json!({"functionDeclarations": {"type": "array", "items": declaration}}),
        &["functionDeclarations"],
    )});
    check("the request's tools", &tools, &request["tools"]);
    assert_eq!(
        request["tools"][0]["functionDeclarations"][0]["parameters"]["type"],
        "OBJECT"
    );

    let (_, email_args) = email("");
    let response = json!({
        "candidates": [{
            "content": {"role": "model", "parts": [
                {"functionCall": {"id": "fc-refund-1", "name": "issue_refund", "args": {"order_id": "o-1", "amount_cents": 500}}},
                {"functionCall": {"id": "fc-email-1", "name": "send_email", "args": email_args}}
            ]},
            "finishReason": "STOP",
            "index": 0
        }],
        "usageMetadata": {"promptTokenCount": 120, "candidatesTokenCount": 40, "totalTokenCount": 160},
        "modelVersion": "gemini-2.5-flash",
        "responseId": "mAitaLmkHPPlz7IPvtfUqQ4"
    });
    let turn = Turn::from_gemini(&response).unwrap();
    assert_eq!(turn.stop, Stop::Finished);
    assert_eq!(turn.calls[0].id, "fc-refund-1");
    let done = bench.dispatcher.dispatch_turn(&run, &turn).await;
    assert_eq!(bench.effects().len(), 2);

    let reply = done.reply();
    assert_eq!(reply.len(), 1, "one content carries every result");
    check("the function responses", &gemini_reply_shape(), &reply[0]);
    let parts = &reply[0]["parts"];
    assert_eq!(parts[0]["functionResponse"]["id"], "fc-refund-1");
    assert_eq!(parts[0]["functionResponse"]["name"], "issue_refund");
    assert_eq!(
        parts[0]["functionResponse"]["response"]["output"]["refund_id"],
        "re_o-1"
    );
    assert_eq!(
        parts[1]["functionResponse"]["response"]["output"],
        "sent to ann@example.com"
    );
}

/// An older Gemini response: calls without ids. Each gets an id derived from the response and
/// its place; the same response handled again maps to the same calls (a replay: nothing runs
/// twice), and a later response with the same call is a new call (blocked as an identical
/// re-plan of an irreversible tool without a key). The results go back without ids.
#[tokio::test]
async fn gemini_calls_without_ids_get_stable_ids() {
    let bench = Bench::new("wire-gemini-no-ids");
    let run = RunContext::new("run-gemini-no-ids");
    let (_, email_args) = email("");
    let response = |id: &str| {
        json!({
            "candidates": [{
                "content": {"role": "model", "parts": [
                    {"text": "Sending it now."},
                    {"functionCall": {"name": "send_email", "args": email_args}},
                    {"functionCall": {"name": "send_email", "args": {"to": "bob@example.com", "body": "Hello"}}}
                ]},
                "finishReason": "STOP"
            }],
            "responseId": id
        })
    };
    let first = Turn::from_gemini(&response("resp-1")).unwrap();
    let again = Turn::from_gemini(&response("resp-1")).unwrap();
    assert_eq!(first.calls, again.calls, "the same response gives the same call ids");
    assert_ne!(first.calls[0].id, first.calls[1].id);
    assert!(!first.calls[0].id.is_empty());
    // The part-level parser gives the same ids for the same place when there is no response id.
    let part = json!({"functionCall": {"name": "send_email", "args": email_args}});
    assert_eq!(ToolCall::from_gemini(&part, 0), ToolCall::from_gemini(&part, 0));
    assert_ne!(
        ToolCall::from_gemini(&part, 0).unwrap().id,
        ToolCall::from_gemini(&part, 1).unwrap().id
    );

    let done = bench.dispatcher.dispatch_turn(&run, &first).await;
    assert_eq!(bench.effects().len(), 2);
    let reply = done.reply();
    check("the function responses", &gemini_reply_shape(), &reply[0]);
    for part in reply[0]["parts"].as_array().unwrap() {
        assert!(
            part["functionResponse"].get("id").is_none(),
            "a derived id is not sent back: {part}"
        );
    }
    assert_eq!(reply[0]["parts"][1]["functionResponse"]["name"], "send_email");

    // The same response handled again (a worker restarted after the calls ran): replayed.
    let replayed = bench.dispatcher.dispatch_turn(&run, &again).await;
    assert_eq!(bench.effects().len(), 2, "nothing ran twice: {:?}", bench.effects());
    assert!(replayed.results.iter().all(|r| r.disposition == Disposition::Replayed));

    // A later response making the first call again: a new call of an unkeyed irreversible tool.
    let later = Turn::from_gemini(&response("resp-2")).unwrap();
    assert_ne!(later.calls[0].id, first.calls[0].id);
    let replanned = bench.dispatcher.dispatch_turn(&run, &later).await;
    assert_eq!(bench.effects().len(), 2, "nothing ran twice: {:?}", bench.effects());
    assert!(
        replanned.results[0].blocked().is_some(),
        "{}",
        replanned.results[0].content()
    );
}

// --- Turns that did not finish run nothing ---------------------------------------------------

/// A call of each tool, in `format`'s response shape, ending with `stop` (the provider's own
/// field and value).
fn response_with_calls(format: WireFormat, stop: &str) -> Value {
    let refund = json!({"order_id": "o-9", "amount_cents": 90000});
    let (_, mail) = email("");
    match format {
        WireFormat::OpenAiChat => json!({
            "id": "chatcmpl-cut",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "issue_refund", "arguments": refund.to_string()}},
                {"id": "call_2", "type": "function", "function": {"name": "send_email", "arguments": mail.to_string()}}
            ]}, "finish_reason": stop}]
        }),
        WireFormat::OpenAiResponses => {
            let (status, details) = match stop {
                "completed" => ("completed", Value::Null),
                "in_progress" => ("in_progress", Value::Null),
                reason => ("incomplete", json!({"reason": reason})),
            };
            json!({
                "id": "resp_cut", "object": "response", "status": status, "incomplete_details": details,
                "output": [
                    {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "issue_refund", "arguments": refund.to_string()},
                    {"type": "function_call", "id": "fc_2", "call_id": "call_2", "name": "send_email", "arguments": mail.to_string()}
                ]
            })
        }
        WireFormat::Anthropic => json!({
            "id": "msg_cut", "type": "message", "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "toolu_1", "name": "issue_refund", "input": refund},
                {"type": "tool_use", "id": "toolu_2", "name": "send_email", "input": mail}
            ],
            "stop_reason": stop
        }),
        WireFormat::Gemini => json!({
            "candidates": [{"content": {"role": "model", "parts": [
                {"functionCall": {"id": "g1", "name": "issue_refund", "args": refund}},
                {"functionCall": {"id": "g2", "name": "send_email", "args": mail}}
            ]}, "finishReason": stop}],
            "responseId": "gem-cut"
        }),
    }
}

/// Each way a turn can end without finishing, per format, with the stop it is read as.
fn unfinished_turns() -> Vec<(WireFormat, &'static str, &'static str)> {
    use WireFormat::*;
    vec![
        (OpenAiChat, "length", "truncated"),
        (OpenAiChat, "content_filter", "filtered"),
        (OpenAiResponses, "max_output_tokens", "truncated"),
        (OpenAiResponses, "content_filter", "filtered"),
        (OpenAiResponses, "in_progress", "unfinished"),
        (Anthropic, "max_tokens", "truncated"),
        (Anthropic, "model_context_window_exceeded", "truncated"),
        (Anthropic, "refusal", "refused"),
        (Anthropic, "pause_turn", "unfinished"),
        (Gemini, "MAX_TOKENS", "truncated"),
        (Gemini, "SAFETY", "filtered"),
        (Gemini, "RECITATION", "filtered"),
        (Gemini, "MALFORMED_FUNCTION_CALL", "unfinished"),
    ]
}

#[tokio::test]
async fn a_turn_that_did_not_finish_runs_none_of_its_calls() {
    let bench = Bench::new("wire-cut");
    for (i, (format, stop, kind)) in unfinished_turns().into_iter().enumerate() {
        let run = RunContext::new(format!("run-cut-{i}"));
        let model = ScriptedProvider::new(format, vec![response_with_calls(format, stop)]);
        let turns = model.play(&bench.dispatcher, &run).await;
        let results = &turns[0].results;
        assert_eq!(results.len(), 2, "{format} `{stop}`: every call gets a result");
        for r in results {
            let case = format!("{format} `{stop}`, call {}", r.call_id);
            assert_eq!(r.disposition, Disposition::Rejected, "{case}");
            assert!(r.is_error(), "{case}");
            assert!(r.key.is_none(), "{case}: nothing reached the journal");
            match &r.outcome {
                ToolOutcome::Rejected(Rejection::TurnCut { stop: s, calls }) => {
                    assert_eq!(s.kind(), kind, "{case}");
                    assert_eq!(s.reason(), Some(stop), "{case}");
                    assert_eq!(*calls, 2, "{case}");
                }
                other => panic!("{case}: {other:?}"),
            }
            let text = r.content();
            assert!(
                text.contains(&format!("`{stop}`")),
                "{case}: the text names the stop: {text}"
            );
            assert!(text.contains("Nothing happened"), "{case}: {text}");
            assert!(text.contains(&format!("`{}`", r.name)), "{case}: {text}");
        }
        // The reply is still one result a call, in the provider's shape.
        let reply = turns[0].reply();
        assert!(!reply.is_empty(), "{format} `{stop}`");
        assert!(
            bench.records(&run).await.is_empty(),
            "{format} `{stop}`: nothing journaled"
        );
    }
    assert!(bench.effects().is_empty(), "nothing ran: {:?}", bench.effects());
}

/// What the model is told for each kind of stop says what to do next.
#[tokio::test]
async fn the_model_is_told_how_the_turn_ended_and_what_to_do() {
    let bench = Bench::new("wire-cut-text");
    let run = RunContext::new("run-cut-text");
    let text = |format, stop| {
        let turn = Turn::parse(format, &response_with_calls(format, stop)).unwrap();
        let dispatcher = bench.dispatcher.clone();
        let run = run.clone();
        async move { dispatcher.dispatch_turn(&run, &turn).await.results[1].content() }
    };
    let cut = text(WireFormat::OpenAiChat, "length").await;
    assert_eq!(
        cut,
        "Error: your previous response was cut off by its output token limit (`length`) before it was complete, so none of its 2 tool calls ran, `send_email` included: the arguments may be incomplete. Nothing happened. Make the calls again in a shorter response: fewer calls at once, or shorter arguments."
    );
    let refused = text(WireFormat::Anthropic, "refusal").await;
    assert!(refused.contains("ended in a refusal (`refusal`)"), "{refused}");
    assert!(refused.contains("only if it is still what the user wants"), "{refused}");
    let filtered = text(WireFormat::Gemini, "SAFETY").await;
    assert!(filtered.contains("content filter (`SAFETY`)"), "{filtered}");
    assert!(filtered.contains("tell the user the request was blocked"), "{filtered}");
    let paused = text(WireFormat::Anthropic, "pause_turn").await;
    assert!(paused.contains("did not finish (`pause_turn`)"), "{paused}");
    assert!(bench.effects().is_empty());
}

/// A scripted model whose first response is cut and whose second is whole: the cut calls run
/// nothing, the whole ones run once.
#[tokio::test]
async fn after_a_cut_turn_the_whole_turn_runs_once() {
    for format in [
        WireFormat::OpenAiChat,
        WireFormat::OpenAiResponses,
        WireFormat::Anthropic,
        WireFormat::Gemini,
    ] {
        let bench = Bench::new("wire-cut-then-whole");
        let run = RunContext::new("run-cut-then-whole");
        let (cut, whole) = match format {
            WireFormat::OpenAiChat => ("length", "tool_calls"),
            WireFormat::OpenAiResponses => ("max_output_tokens", "completed"),
            WireFormat::Anthropic => ("max_tokens", "tool_use"),
            WireFormat::Gemini => ("MAX_TOKENS", "STOP"),
        };
        let mut second = response_with_calls(format, whole);
        // The model's second response carries new call ids (a new turn).
        let mut retagged = second.to_string();
        for id in ["call_1", "call_2", "toolu_1", "toolu_2", "g1", "g2", "gem-cut"] {
            retagged = retagged.replace(&format!("\"{id}\""), &format!("\"{id}-b\""));
        }
        second = serde_json::from_str(&retagged).unwrap();
        let model = ScriptedProvider::new(format, vec![response_with_calls(format, cut), second]);
        let turns = model.play(&bench.dispatcher, &run).await;
        assert!(turns[0].results.iter().all(|r| r.is_rejected()), "{format}");
        assert_eq!(turns[1].results.len(), 2, "{format}");
        assert!(
            turns[1].results.iter().all(|r| !r.is_error()),
            "{format}: {:?}",
            turns[1].results
        );
        assert_eq!(bench.effects().len(), 2, "{format}: {:?}", bench.effects());
    }
}

#[test]
fn a_response_without_a_finish_reason_is_unfinished() {
    // A stream read before its last chunk: the calls parse, but nothing says they are whole.
    let chat = json!({"choices": [{"message": {"tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "send_email", "arguments": "{\"to\":\"a\",\"body\":\"b\"}"}}
    ]}, "finish_reason": null}]});
    assert_eq!(
        Turn::from_openai_chat(&chat).unwrap().stop,
        Stop::Unfinished {
            reason: "no finish reason".into()
        }
    );
    let anthropic =
        json!({"content": [{"type": "tool_use", "id": "t", "name": "send_email", "input": {}}], "stop_reason": null});
    assert!(!Turn::from_anthropic(&anthropic).unwrap().stop.runs_calls());
    let gemini =
        json!({"candidates": [{"content": {"parts": [{"functionCall": {"name": "send_email", "args": {}}}]}}]});
    assert!(!Turn::from_gemini(&gemini).unwrap().stop.runs_calls());
    // A call of the deprecated functions API is the application's to answer, not dispatched.
    let legacy = json!({"choices": [{"message": {"function_call": {"name": "send_email", "arguments": "{}"}}, "finish_reason": "function_call"}]});
    let legacy = Turn::from_openai_chat(&legacy).unwrap();
    assert!(legacy.calls.is_empty());
    assert_eq!(legacy.unhandled.len(), 1);
    // An OpenAI refusal on a finished message is a refusal.
    let refusal = json!({"choices": [{"message": {"content": null, "refusal": "I can't help with that."}, "finish_reason": "stop"}]});
    assert_eq!(Turn::from_openai_chat(&refusal).unwrap().stop.kind(), "refused");
    let refusal = json!({"status": "completed", "output": [{"type": "message", "role": "assistant", "content": [{"type": "refusal", "refusal": "No."}]}]});
    assert_eq!(Turn::from_openai_responses(&refusal).unwrap().stop.kind(), "refused");
    // A Gemini prompt blocked before any candidate.
    let blocked = json!({"promptFeedback": {"blockReason": "PROHIBITED_CONTENT"}});
    assert_eq!(
        Turn::from_gemini(&blocked).unwrap().stop,
        Stop::Filtered {
            reason: "PROHIBITED_CONTENT".into()
        }
    );
    // An error body is not a response.
    let error = json!({"error": {"message": "Rate limit reached", "type": "requests"}});
    let e = Turn::from_openai_chat(&error).unwrap_err();
    assert_eq!(
        e.to_string(),
        "not an OpenAI Chat Completions response: it has no `choices` list"
    );
    assert!(Turn::from_anthropic(&error).is_err());
    assert!(Turn::from_gemini(&error).is_err());
    assert!(Turn::from_openai_responses(&error).is_err());
    // A call that could not be answered (no id) makes the whole response unreadable: no call
    // of it runs, rather than one silently left without a result.
    let no_id =
        json!({"status": "completed", "output": [{"type": "function_call", "name": "send_email", "arguments": "{}"}]});
    assert_eq!(
        Turn::from_openai_responses(&no_id).unwrap_err().problem,
        "`output[0]` is a `function_call` without a `call_id`, so its result could not be sent back"
    );
    let no_id =
        json!({"content": [{"type": "tool_use", "name": "send_email", "input": {}}], "stop_reason": "tool_use"});
    assert!(Turn::from_anthropic(&no_id).is_err());
}

// --- The provider's own tools ----------------------------------------------------------------

/// `rec` is the completed record of a provider's call in `run`.
fn assert_provider_record(rec: &effect_tool::EffectRecord, run: &RunContext, tool: &str, class: EffectClass) {
    assert_eq!(rec.tool, tool);
    assert_eq!(rec.class, class, "{tool}");
    assert_eq!(rec.run_id, run.run_id(), "{tool}");
    assert_eq!(rec.state, RecordState::Completed, "{tool}");
    assert!(rec.output.is_some(), "{tool}: the result is recorded");
}

#[tokio::test]
async fn anthropic_server_tools_are_recorded_never_dispatched() {
    let bench = Bench::new("wire-anthropic-server-tools");
    let run = RunContext::new("run-server-tools");
    let long_page = "x".repeat(10_000);
    let response = json!({
        "id": "msg_search",
        "type": "message",
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Let me check the refund policy."},
            {"type": "server_tool_use", "id": "srvtoolu_01WYG3ziw53XMcoyKL4XcZmE", "name": "web_search", "input": {"query": "acme refund policy"}},
            {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_01WYG3ziw53XMcoyKL4XcZmE", "content": [
                {"type": "web_search_result", "title": "Refunds", "url": "https://acme.example/refunds", "encrypted_content": long_page, "page_age": "April 30, 2025"}
            ]},
            {"type": "mcp_tool_use", "id": "mcptoolu_014Q35RayjACSWkSj4X2yov1", "name": "create_ticket", "server_name": "helpdesk", "input": {"title": "Refund o-1"}},
            {"type": "mcp_tool_result", "tool_use_id": "mcptoolu_014Q35RayjACSWkSj4X2yov1", "is_error": false, "content": [{"type": "text", "text": "ticket T-7"}]},
            {"type": "tool_use", "id": "toolu_refund", "name": "issue_refund", "input": {"order_id": "o-1", "amount_cents": 500}}
        ],
        "stop_reason": "tool_use"
    });
    let turn = Turn::from_anthropic(&response).unwrap();
    assert_eq!(turn.calls.len(), 1, "only the client tool is a call");
    assert_eq!(turn.provider_calls.len(), 2);
    let done = bench.dispatcher.dispatch_turn(&run, &turn).await;
    assert_eq!(
        done.results.len(),
        1,
        "no result for a provider's tool, no unknown tool"
    );
    assert_eq!(done.results[0].name, "issue_refund");
    assert!(!done.results[0].is_error());
    assert_eq!(
        bench.effects(),
        vec!["refund o-1 of 500"],
        "only the client tool ran here"
    );
    assert!(
        done.provider.iter().all(|p| p.recorded == ProviderRecorded::Recorded),
        "{:?}",
        done.provider
    );

    // The run's journal shows every effect: the refund and both of the provider's calls.
    let records = bench.records(&run).await;
    let mut tools: Vec<&str> = records.iter().map(|r| r.tool.as_str()).collect();
    tools.sort();
    assert_eq!(
        tools,
        vec![
            "issue_refund",
            "provider:anthropic/mcp.helpdesk.create_ticket",
            "provider:anthropic/web_search"
        ]
    );
    let search = records
        .iter()
        .find(|r| r.tool == "provider:anthropic/web_search")
        .unwrap();
    assert_provider_record(search, &run, "provider:anthropic/web_search", EffectClass::Pure);
    assert_eq!(search.input["query"], "acme refund policy");
    assert_eq!(search.call_id.as_deref(), Some("srvtoolu_01WYG3ziw53XMcoyKL4XcZmE"));
    let kept = search.output.as_ref().unwrap()["content"][0]["encrypted_content"]
        .as_str()
        .unwrap();
    assert!(
        kept.len() < 3000 && kept.ends_with("[10000 bytes in all]"),
        "long results are cut: {kept:.80}"
    );
    let mcp = records.iter().find(|r| r.tool.contains("mcp.")).unwrap();
    assert_provider_record(
        mcp,
        &run,
        "provider:anthropic/mcp.helpdesk.create_ticket",
        EffectClass::Irreversible,
    );

    // The same response handled again records nothing twice and runs nothing twice.
    let again = bench.dispatcher.dispatch_turn(&run, &turn).await;
    assert!(
        again
            .provider
            .iter()
            .all(|p| p.recorded == ProviderRecorded::AlreadyRecorded)
    );
    assert_eq!(bench.records(&run).await.len(), 3);
    assert_eq!(bench.effects().len(), 1);
}

/// A server tool beside a client tool runs after the client's results are sent: it is not
/// recorded until its result comes, in the next response, which records it.
#[tokio::test]
async fn an_anthropic_server_tool_is_recorded_when_its_result_comes() {
    let bench = Bench::new("wire-anthropic-pending");
    let run = RunContext::new("run-pending");
    let first = json!({
        "content": [
            {"type": "server_tool_use", "id": "srvtoolu_late", "name": "web_fetch", "input": {"url": "https://acme.example"}},
            {"type": "tool_use", "id": "toolu_mail", "name": "send_email", "input": {"to": "ann@example.com", "body": "Hi"}}
        ],
        "stop_reason": "tool_use"
    });
    let model = ScriptedProvider::new(
        WireFormat::Anthropic,
        vec![
            first,
            json!({
                "content": [
                    {"type": "web_fetch_tool_result", "tool_use_id": "srvtoolu_late", "content": {"type": "web_fetch_result", "url": "https://acme.example"}},
                    {"type": "text", "text": "Done."}
                ],
                "stop_reason": "end_turn"
            }),
        ],
    );
    let turns = model.play(&bench.dispatcher, &run).await;
    assert_eq!(turns[0].provider[0].recorded, ProviderRecorded::NotRunYet);
    assert_eq!(turns[1].provider[0].recorded, ProviderRecorded::Recorded);
    let records = bench.records(&run).await;
    let fetch = records
        .iter()
        .find(|r| r.tool == "provider:anthropic/web_fetch")
        .unwrap();
    assert_provider_record(fetch, &run, "provider:anthropic/web_fetch", EffectClass::Pure);
    assert_eq!(bench.effects().len(), 1);
}

#[tokio::test]
async fn openai_hosted_tools_are_recorded_never_dispatched() {
    let bench = Bench::new("wire-openai-hosted");
    let run = RunContext::new("run-hosted");
    let response = json!({
        "id": "resp_hosted",
        "object": "response",
        "status": "completed",
        "incomplete_details": null,
        "output": [
            {"type": "web_search_call", "id": "ws_67c9fa0502748190b7dd390736892e100be649c1a5ff9609", "status": "completed",
             "action": {"type": "search", "query": "acme refund policy"}},
            {"type": "code_interpreter_call", "id": "ci_123", "status": "completed", "code": "print(500 * 2)",
             "container_id": "cntr_1", "outputs": [{"type": "logs", "logs": "1000"}]},
            {"type": "mcp_call", "id": "mcp_1", "server_label": "stripe", "name": "create_refund",
             "arguments": "{\"charge\":\"ch_1\"}", "output": "re_9", "error": null},
            {"type": "computer_call", "id": "cu_1", "call_id": "call_cu", "action": {"type": "click", "x": 1, "y": 2}, "status": "completed"},
            {"type": "function_call", "id": "fc_1", "call_id": "call_refund", "name": "issue_refund",
             "arguments": "{\"order_id\":\"o-2\",\"amount_cents\":200}", "status": "completed"},
            {"type": "message", "id": "msg_1", "role": "assistant", "content": [{"type": "output_text", "text": "Working on it."}]}
        ]
    });
    let turn = Turn::from_openai_responses(&response).unwrap();
    assert_eq!(turn.calls.len(), 1);
    assert_eq!(
        turn.unhandled.len(),
        1,
        "the computer call is the application's, not a function call"
    );
    // A hosted call still running in a streamed snapshot has no result yet: not recorded.
    let running = json!({"status": "in_progress", "output": [{"type": "web_search_call", "id": "ws_live", "status": "searching"}]});
    let live = Turn::from_openai_responses(&running).unwrap();
    assert_eq!(live.provider_calls[0].result, None);
    let live = bench.dispatcher.dispatch_turn(&run, &live).await;
    assert_eq!(live.provider[0].recorded, ProviderRecorded::NotRunYet);
    let done = bench.dispatcher.dispatch_turn(&run, &turn).await;
    assert_eq!(done.results.len(), 1, "no result for a hosted tool, no unknown tool");
    assert!(!done.results[0].is_error(), "{}", done.results[0].content());
    assert_eq!(bench.effects(), vec!["refund o-2 of 200"]);

    let records = bench.records(&run).await;
    let mut tools: Vec<&str> = records.iter().map(|r| r.tool.as_str()).collect();
    tools.sort();
    assert_eq!(
        tools,
        vec![
            "issue_refund",
            "provider:openai/code_interpreter",
            "provider:openai/mcp.stripe.create_refund",
            "provider:openai/web_search"
        ]
    );
    let search = records.iter().find(|r| r.tool == "provider:openai/web_search").unwrap();
    assert_provider_record(search, &run, "provider:openai/web_search", EffectClass::Pure);
    assert_eq!(search.input["action"]["query"], "acme refund policy");
    let code = records
        .iter()
        .find(|r| r.tool == "provider:openai/code_interpreter")
        .unwrap();
    assert_eq!(code.input["code"], "print(500 * 2)");
    assert_eq!(code.output.as_ref().unwrap()["outputs"][0]["logs"], "1000");
    let mcp = records.iter().find(|r| r.tool.contains("mcp.")).unwrap();
    assert_provider_record(
        mcp,
        &run,
        "provider:openai/mcp.stripe.create_refund",
        EffectClass::Irreversible,
    );
    assert_eq!(mcp.output.as_ref().unwrap()["output"], "re_9");
}

/// The provider's calls of a turn that was cut still happened: they are recorded, while the
/// turn's own calls run nothing.
#[tokio::test]
async fn gemini_code_execution_and_search_are_recorded_even_when_the_turn_is_cut() {
    let bench = Bench::new("wire-gemini-hosted");
    let run = RunContext::new("run-gemini-hosted");
    let response = json!({
        "candidates": [{
            "content": {"role": "model", "parts": [
                {"executableCode": {"language": "PYTHON", "code": "print(sum(range(10)))"}},
                {"codeExecutionResult": {"outcome": "OUTCOME_OK", "output": "45\n"}},
                {"functionCall": {"name": "send_email", "args": {"to": "ann@example.com", "body": "The total is"}}}
            ]},
            "finishReason": "MAX_TOKENS",
            "groundingMetadata": {
                "webSearchQueries": ["acme refund policy"],
                "groundingChunks": [{"web": {"uri": "https://acme.example/refunds", "title": "acme.example"}}]
            }
        }],
        "responseId": "gem-hosted"
    });
    let turn = Turn::from_gemini(&response).unwrap();
    let done = bench.dispatcher.dispatch_turn(&run, &turn).await;
    assert!(done.results[0].is_rejected(), "{}", done.results[0].content());
    assert!(bench.effects().is_empty());
    let records = bench.records(&run).await;
    let mut tools: Vec<&str> = records.iter().map(|r| r.tool.as_str()).collect();
    tools.sort();
    assert_eq!(
        tools,
        vec!["provider:gemini/code_execution", "provider:gemini/google_search"]
    );
    let code = records
        .iter()
        .find(|r| r.tool == "provider:gemini/code_execution")
        .unwrap();
    assert_provider_record(code, &run, "provider:gemini/code_execution", EffectClass::Pure);
    assert_eq!(code.output.as_ref().unwrap()["output"], "45\n");
    // Handled again: the same derived ids, nothing recorded twice.
    let again = bench
        .dispatcher
        .dispatch_turn(&run, &Turn::from_gemini(&response).unwrap())
        .await;
    assert!(
        again
            .provider
            .iter()
            .all(|p| p.recorded == ProviderRecorded::AlreadyRecorded)
    );
    assert_eq!(bench.records(&run).await.len(), 2);
}

/// The old per-item parsers still work, and the provider's items are not calls for them.
#[test]
fn item_parsers_leave_provider_tools_out() {
    let server = json!({"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}});
    assert_eq!(ToolCall::from_anthropic(&server), None);
    let hosted = json!({"type": "web_search_call", "id": "ws_1", "status": "completed"});
    assert_eq!(ToolCall::from_openai_responses(&hosted), None);
    let part = json!({"executableCode": {"language": "PYTHON", "code": "1"}});
    assert_eq!(ToolCall::from_gemini(&part, 0), None);
    let with_id = json!({"functionCall": {"id": "abc", "name": "send_email", "args": {"to": "a", "body": "b"}}});
    let call = ToolCall::from_gemini(&with_id, 3).unwrap();
    assert_eq!(call.id, "abc");
    let args: Value = serde_json::from_str(&call.arguments).unwrap();
    assert_eq!(args, json!({"to": "a", "body": "b"}));
}

// --- Two worker processes on one journal -------------------------------------------------------

use effect_tool_core::testing::conformance::{Availability, Harness, SqliteHarness};

/// The environment variable carrying a worker's job.
const WORKER_JOB: &str = "EFFECT_TOOL_WIRE_WORKER_JOB";

/// What a worker process does: open the journal, handle one provider response, and write what
/// came of it.
#[derive(Serialize, Deserialize)]
struct Job {
    /// `sqlite` or `postgres`.
    backend: String,
    /// How the journal is opened ([`Harness::locator`]).
    locator: String,
    ledger: PathBuf,
    /// The response, and its format (`anthropic`, `gemini`).
    response: Value,
    format: String,
    run: String,
    /// Where the worker writes its report: the dispositions and the provider records.
    out: PathBuf,
}

fn format_named(name: &str) -> WireFormat {
    match name {
        "anthropic" => WireFormat::Anthropic,
        "gemini" => WireFormat::Gemini,
        "openai-chat" => WireFormat::OpenAiChat,
        _ => WireFormat::OpenAiResponses,
    }
}

/// The entry point of the worker processes of `two_workers_*`.
#[test]
#[ignore = "entry point of the worker processes of the two-worker wire tests"]
fn worker() {
    let Ok(job) = std::env::var(WORKER_JOB) else {
        return;
    };
    let job: Job = serde_json::from_str(&job).expect("the worker's job");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async move {
        let store: std::sync::Arc<dyn Store> = match job.backend.as_str() {
            "sqlite" => SqliteHarness::open(&job.locator).await,
            #[cfg(feature = "postgres")]
            "postgres" => effect_tool_core::testing::conformance::PostgresHarness::open(&job.locator).await,
            other => panic!("no backend {other}"),
        };
        let kit = Toolkit::new()
            .with(SendEmail { ledger: job.ledger.clone() })
            .with(Refund { ledger: job.ledger.clone() });
        let dispatcher = kit.dispatcher(Engine::new(store));
        let turn = Turn::parse(format_named(&job.format), &job.response).expect("the response");
        let done = dispatcher.dispatch_turn(&RunContext::new(job.run.clone()), &turn).await;
        let report = json!({
            "results": done.results.iter().map(|r| json!({"id": r.call_id, "disposition": r.disposition.to_string(), "error": r.is_error()})).collect::<Vec<_>>(),
            "provider": done.provider.iter().map(|p| format!("{:?}", p.recorded)).collect::<Vec<_>>(),
        });
        std::fs::write(&job.out, report.to_string()).expect("the report");
    });
}

/// Two worker processes handle the same response at once on one journal of backend `H`; their
/// reports.
async fn two_workers<H: Harness>(
    h: &H,
    dir: &std::path::Path,
    name: &str,
    format: &str,
    response: &Value,
    run: &str,
) -> Vec<Value> {
    let backend = H::NAME.to_owned();
    let mut workers: Vec<_> = ["a", "b"]
        .iter()
        .map(|role| {
            let job = Job {
                backend: backend.clone(),
                locator: h.locator().expect("a journal other processes open"),
                ledger: dir.join("ledger"),
                response: response.clone(),
                format: format.to_owned(),
                run: run.to_owned(),
                out: dir.join(format!("{name}-{role}.json")),
            };
            crate::common::worker::spawn(module_path!(), WORKER_JOB, &serde_json::to_string(&job).unwrap())
        })
        .collect();
    for w in &mut workers {
        assert!(w.wait().unwrap().success(), "a worker failed");
    }
    ["a", "b"]
        .iter()
        .map(|role| {
            serde_json::from_str(&std::fs::read_to_string(dir.join(format!("{name}-{role}.json"))).unwrap()).unwrap()
        })
        .collect()
}

/// A cut Anthropic turn with a server tool, then an id-less Gemini turn, each handled by two
/// worker processes at once on one journal: the cut turn runs nothing and its server tool is
/// recorded once; the whole turn's calls get the same derived ids in both processes, so each
/// effect happens once (the email has no key: only its call id tells the two apart from a
/// re-plan).
async fn two_workers_one_journal<H: Harness>() {
    match H::availability() {
        Availability::Ready => {}
        Availability::Unavailable { reason, required } => {
            assert!(!required, "{}: {reason}", H::NAME);
            eprintln!("\n*** SKIPPED {} two-worker wire test: {reason} ***\n", H::NAME);
            return;
        }
    }
    let h = H::fresh().await;
    let dir = ScratchDir::new(&format!("wire-two-workers-{}", H::NAME));
    let run = RunContext::new("run-two-workers");
    let cut = json!({
        "id": "msg_cut_two", "type": "message", "role": "assistant",
        "content": [
            {"type": "server_tool_use", "id": "srvtoolu_two", "name": "web_search", "input": {"query": "acme"}},
            {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_two", "content": []},
            {"type": "tool_use", "id": "toolu_two", "name": "issue_refund", "input": {"order_id": "o-3", "amount_cents": 300}}
        ],
        "stop_reason": "max_tokens"
    });
    let reports = two_workers(&h, dir.path(), "cut", "anthropic", &cut, run.run_id()).await;
    assert!(
        ledger_lines(&dir.path().join("ledger")).is_empty(),
        "the cut turn ran nothing"
    );
    for r in &reports {
        assert_eq!(r["results"][0]["disposition"], "rejected", "{r}");
    }
    let mut recorded: Vec<&str> = reports.iter().map(|r| r["provider"][0].as_str().unwrap()).collect();
    recorded.sort();
    assert_eq!(
        recorded,
        vec!["AlreadyRecorded", "Recorded"],
        "recorded once: {reports:?}"
    );

    let whole = json!({
        "candidates": [{"content": {"role": "model", "parts": [
            {"functionCall": {"name": "send_email", "args": {"to": "ann@example.com", "body": "Refunded."}}},
            {"functionCall": {"name": "issue_refund", "args": {"order_id": "o-3", "amount_cents": 300}}}
        ]}, "finishReason": "STOP"}],
        "responseId": "gem-two-workers"
    });
    let reports = two_workers(&h, dir.path(), "whole", "gemini", &whole, run.run_id()).await;
    let mut effects = ledger_lines(&dir.path().join("ledger"));
    effects.sort();
    assert_eq!(
        effects,
        vec!["email to ann@example.com: Refunded.", "refund o-3 of 300"],
        "each effect once: {reports:?}"
    );
    for r in &reports {
        for result in r["results"].as_array().unwrap() {
            assert_eq!(result["error"], false, "{r}");
        }
    }
    assert_eq!(
        reports[0]["results"][0]["id"], reports[1]["results"][0]["id"],
        "the same derived ids"
    );

    let store = h.store();
    let filter = Filter {
        run_id: Some(run.run_id().to_owned()),
        ..Filter::all()
    };
    let mut tools: Vec<String> = store.list(&filter).await.unwrap().into_iter().map(|r| r.tool).collect();
    tools.sort();
    assert_eq!(
        tools,
        vec!["issue_refund", "provider:anthropic/web_search", "send_email"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_workers_one_sqlite_journal() {
    two_workers_one_journal::<SqliteHarness>().await;
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_workers_one_postgres_journal() {
    two_workers_one_journal::<effect_tool_core::testing::conformance::PostgresHarness>().await;
}
