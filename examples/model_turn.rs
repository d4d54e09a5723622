//! A whole model turn in each wire format the toolkit speaks (OpenAI Chat Completions, OpenAI
//! Responses, Anthropic Messages, Gemini `generateContent`): the tools exported in the provider's
//! shape, the provider's response JSON in, the calls dispatched through the engine, the tool
//! results out in the provider's shape, and a second turn in which the model re-plans.
//!
//! Run: `cargo run --example model_turn` (no set-up, no network, no API key).
//!
//! The model is scripted: its responses are the JSON each provider's API returns, written out
//! below, so the example shows exactly what goes over the wire. In the first turn the model
//! looks up an order and asks for a refund with an amount of the wrong type; it reads the
//! rejection, and in the second turn it re-plans: it sends the refund again, fixed, twice under
//! two new call ids (parallel tool calls). The refund runs once; the duplicate gets its recorded
//! result (replayed, or shared while it runs).
//! The payment backend's own count (outside the engine) proves it.
//!
//! Along the way: the Responses conversation starts with a response cut by its token limit
//! (`incomplete`, `max_output_tokens`), whose calls do not run; the Anthropic one has the
//! provider run its own web search (a `server_tool_use` block), recorded in the run's journal as
//! `provider:anthropic/web_search` and never dispatched here; the Gemini one sends calls without
//! ids, as older models do, and gets stable ids derived for them.

use std::sync::atomic::{AtomicUsize, Ordering};

use effect_tool::toolkit::{Dispatcher, Turn, WireFormat};
use effect_tool::{EffectCtx, Engine, MemoryStore, RunContext, ToolError, tool};
use serde_json::{Value, json};

/// Refunds the payment backend applied (the external ledger the engine cannot see).
static REFUNDS_APPLIED: AtomicUsize = AtomicUsize::new(0);

/// Look up an order by its id.
#[tool(effect = "pure")]
async fn lookup_order(order_id: String) -> Result<Value, ToolError> {
    Ok(json!({"order_id": order_id, "total_cents": 4200, "status": "delivered"}))
}

/// Refund part of an order, in cents.
#[tool(effect = "idempotent", key(order_id, amount_cents))]
async fn issue_refund(ctx: &EffectCtx, order_id: String, amount_cents: u64) -> Result<String, ToolError> {
    // A real backend would get `ctx.idempotency_key()` and dedupe on it.
    let _ = ctx.idempotency_key();
    let n = REFUNDS_APPLIED.fetch_add(1, Ordering::SeqCst) + 1;
    Ok(format!("refund re_{n:03}: {amount_cents} cents on order {order_id}"))
}

/// What OpenAI Chat Completions returns, turn by turn.
fn openai_chat_script() -> Vec<Value> {
    vec![
        json!({"id": "chatcmpl-1", "object": "chat.completion", "choices": [{"index": 0, "finish_reason": "tool_calls",
        "message": {"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_A1", "type": "function", "function": {"name": "lookup_order", "arguments": "{\"order_id\":\"o-17\"}"}},
            {"id": "call_A2", "type": "function", "function": {"name": "issue_refund", "arguments": "{\"order_id\":\"o-17\",\"amount_cents\":\"twelve hundred\"}"}}
        ]}}]}),
        json!({"id": "chatcmpl-2", "object": "chat.completion", "choices": [{"index": 0, "finish_reason": "tool_calls",
        "message": {"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_B1", "type": "function", "function": {"name": "issue_refund", "arguments": "{\"order_id\":\"o-17\",\"amount_cents\":1200.0}"}},
            {"id": "call_B2", "type": "function", "function": {"name": "issue_refund", "arguments": "{\"order_id\":\"o-17\",\"amount_cents\":1200}"}}
        ]}}]}),
    ]
}

/// What the OpenAI Responses API returns, turn by turn: the first response is cut by its token
/// limit in the middle of the refund's arguments (they still parse: `amount_cents` is missing
/// its last digits).
fn openai_responses_script() -> Vec<Value> {
    vec![
        json!({"id": "resp_0", "object": "response", "status": "incomplete",
        "incomplete_details": {"reason": "max_output_tokens"}, "output": [
            {"type": "function_call", "id": "fc_0", "call_id": "call_Z1", "name": "issue_refund", "arguments": "{\"order_id\":\"o-17\",\"amount_cents\":12}"}
        ]}),
        json!({"id": "resp_1", "object": "response", "status": "completed", "incomplete_details": null, "output": [
            {"type": "function_call", "id": "fc_1", "call_id": "call_A1", "name": "lookup_order", "arguments": "{\"order_id\":\"o-17\"}"},
            {"type": "function_call", "id": "fc_2", "call_id": "call_A2", "name": "issue_refund", "arguments": "{\"order_id\":\"o-17\",\"amount_cents\":\"twelve hundred\"}"}
        ]}),
        json!({"id": "resp_2", "object": "response", "status": "completed", "incomplete_details": null, "output": [
            {"type": "function_call", "id": "fc_3", "call_id": "call_B1", "name": "issue_refund", "arguments": "{\"order_id\":\"o-17\",\"amount_cents\":1200}"},
            {"type": "function_call", "id": "fc_4", "call_id": "call_B2", "name": "issue_refund", "arguments": "{\"order_id\":\"o-17\",\"amount_cents\":1200}"}
        ]}),
    ]
}

/// What the Anthropic Messages API returns, turn by turn; the first turn has the provider run
/// its own web search.
fn anthropic_script() -> Vec<Value> {
    vec![
        json!({"id": "msg_1", "type": "message", "role": "assistant", "stop_reason": "tool_use", "content": [
            {"type": "text", "text": "Let me check the refund policy and the order first."},
            {"type": "server_tool_use", "id": "srvtoolu_01", "name": "web_search", "input": {"query": "acme refund policy"}},
            {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_01", "content": [
                {"type": "web_search_result", "title": "Refunds", "url": "https://acme.example/refunds", "encrypted_content": "Eo8BCioIAh..."}
            ]},
            {"type": "tool_use", "id": "toolu_A1", "name": "lookup_order", "input": {"order_id": "o-17"}},
            {"type": "tool_use", "id": "toolu_A2", "name": "issue_refund", "input": {"order_id": "o-17", "amount_cents": "twelve hundred"}}
        ]}),
        json!({"id": "msg_2", "type": "message", "role": "assistant", "stop_reason": "tool_use", "content": [
            {"type": "tool_use", "id": "toolu_B1", "name": "issue_refund", "input": {"order_id": "o-17", "amount_cents": 1200}},
            {"type": "tool_use", "id": "toolu_B2", "name": "issue_refund", "input": {"order_id": "o-17", "amount_cents": 1200}}
        ]}),
    ]
}

/// What Gemini `generateContent` returns, turn by turn: `functionCall` parts without ids.
fn gemini_script() -> Vec<Value> {
    vec![
        json!({"responseId": "gem-1", "candidates": [{"finishReason": "STOP", "content": {"role": "model", "parts": [
            {"functionCall": {"name": "lookup_order", "args": {"order_id": "o-17"}}},
            {"functionCall": {"name": "issue_refund", "args": {"order_id": "o-17", "amount_cents": "twelve hundred"}}}
        ]}}]}),
        json!({"responseId": "gem-2", "candidates": [{"finishReason": "STOP", "content": {"role": "model", "parts": [
            {"functionCall": {"name": "issue_refund", "args": {"order_id": "o-17", "amount_cents": 1200}}},
            {"functionCall": {"name": "issue_refund", "args": {"order_id": "o-17", "amount_cents": 1200}}}
        ]}}]}),
    ]
}

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default()
}

/// The request's `tools`, in `format`'s shape.
fn request_tools(dispatcher: &Dispatcher, format: WireFormat) -> Value {
    let kit = dispatcher.toolkit();
    match format {
        WireFormat::OpenAiChat => json!(kit.openai_tools()),
        WireFormat::OpenAiResponses => json!(kit.openai_responses_tools()),
        WireFormat::Anthropic => json!(kit.anthropic_tools()),
        WireFormat::Gemini => json!([{"functionDeclarations": kit.gemini_tools()}]),
    }
}

/// The model's own message, as the conversation keeps it (what the next request sends back).
fn model_message(format: WireFormat, response: &Value) -> Vec<Value> {
    match format {
        WireFormat::OpenAiChat => vec![response["choices"][0]["message"].clone()],
        WireFormat::OpenAiResponses => response["output"].as_array().cloned().unwrap_or_default(),
        WireFormat::Anthropic => vec![json!({"role": "assistant", "content": response["content"].clone()})],
        WireFormat::Gemini => vec![response["candidates"][0]["content"].clone()],
    }
}

/// One conversation in `format`: every scripted response parsed, its calls dispatched in `run`,
/// and the results appended in the provider's shape.
async fn conversation(dispatcher: &Dispatcher, run: &RunContext, format: WireFormat, script: Vec<Value>) {
    println!("\n=== {format} ===");
    println!("request tools:\n{}", pretty(&request_tools(dispatcher, format)));
    let mut conversation = vec![json!({"role": "user", "content": "Refund $12 on order o-17, please."})];
    for (i, response) in script.iter().enumerate() {
        let turn = Turn::parse(format, response).expect("a response of the documented shape");
        conversation.extend(model_message(format, response));
        let done = dispatcher.dispatch_turn(run, &turn).await;
        println!(
            "\n-- turn {}: {} tool calls in, the turn {} --",
            i + 1,
            turn.calls.len(),
            turn.stop.kind()
        );
        for p in &done.provider {
            println!(
                "{} (the provider's own call) -> recorded as `{}`: {:?}",
                p.call_id, p.tool, p.recorded
            );
        }
        for r in &done.results {
            println!("{} {} -> {}", r.call_id, r.name, r.disposition);
        }
        let reply = done.reply();
        println!("{}", pretty(&Value::Array(reply.clone())));
        conversation.extend(reply);
    }
    println!("\nthe next request carries {} messages", conversation.len());
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let toolkit = effect_tool::toolkit![LookupOrder, IssueRefund];
    let dispatcher = toolkit.dispatcher(Engine::new(MemoryStore::new()));

    let scripts = [
        (WireFormat::OpenAiChat, openai_chat_script()),
        (WireFormat::OpenAiResponses, openai_responses_script()),
        (WireFormat::Anthropic, anthropic_script()),
        (WireFormat::Gemini, gemini_script()),
    ];
    let mut applied = Vec::new();
    for (format, script) in scripts {
        let before = REFUNDS_APPLIED.load(Ordering::SeqCst);
        let run = RunContext::new(format!("support-{}-{}", format.provider(), applied.len() + 1));
        conversation(&dispatcher, &run, format, script).await;
        applied.push((format, REFUNDS_APPLIED.load(Ordering::SeqCst) - before));
    }

    // Each conversation (its own run) asked for the refund three times: once malformed, then
    // twice in the re-plan (the Responses one a fourth time, in the cut turn). The backend
    // applied it once per conversation.
    println!();
    for (format, n) in &applied {
        println!("refunds applied by the backend in the {format} run: {n}");
        assert_eq!(*n, 1, "the {format} conversation refunded once");
    }
}
