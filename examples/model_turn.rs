//! A whole model turn, in the OpenAI and the Anthropic wire formats: the tools exported in the
//! provider's shape, the provider's response JSON in, the calls dispatched through the engine, the
//! tool results out in the provider's shape, and a second turn in which the model re-plans.
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

use std::sync::atomic::{AtomicUsize, Ordering};

use effect_tool::toolkit::{Dispatcher, ToolCall, anthropic_tool_results_message};
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

/// What OpenAI Chat Completions returns, turn by turn (`choices[0].message`).
fn openai_script() -> Vec<Value> {
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

/// What the Anthropic Messages API returns, turn by turn.
fn anthropic_script() -> Vec<Value> {
    vec![
        json!({"id": "msg_1", "type": "message", "role": "assistant", "stop_reason": "tool_use", "content": [
            {"type": "text", "text": "Let me check the order first."},
            {"type": "tool_use", "id": "toolu_A1", "name": "lookup_order", "input": {"order_id": "o-17"}},
            {"type": "tool_use", "id": "toolu_A2", "name": "issue_refund", "input": {"order_id": "o-17", "amount_cents": "twelve hundred"}}
        ]}),
        json!({"id": "msg_2", "type": "message", "role": "assistant", "stop_reason": "tool_use", "content": [
            {"type": "tool_use", "id": "toolu_B1", "name": "issue_refund", "input": {"order_id": "o-17", "amount_cents": 1200}},
            {"type": "tool_use", "id": "toolu_B2", "name": "issue_refund", "input": {"order_id": "o-17", "amount_cents": 1200}}
        ]}),
    ]
}

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default()
}

/// OpenAI: `tools` in the request; `tool_calls` in; one `role: tool` message per call out.
async fn openai(dispatcher: &Dispatcher, run: &RunContext) {
    println!("=== OpenAI Chat Completions ===");
    let mut messages = vec![json!({"role": "user", "content": "Refund $12 on order o-17, please."})];
    println!(
        "request tools:\n{}",
        pretty(&Value::Array(dispatcher.toolkit().openai_tools()))
    );
    for (turn, response) in openai_script().into_iter().enumerate() {
        let message = &response["choices"][0]["message"];
        messages.push(message.clone());
        let calls: Vec<ToolCall> = message["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(ToolCall::from_openai)
            .collect();
        let results = dispatcher.dispatch(run, &calls).await;
        println!("\n-- turn {}: {} tool calls in --", turn + 1, calls.len());
        for r in &results {
            println!("{} {} -> {}", r.call_id, r.name, r.disposition);
            let out = r.to_openai_message();
            println!("{}", pretty(&out));
            messages.push(out);
        }
    }
    println!("\nthe next request carries {} messages", messages.len());
}

/// Anthropic: `tools` in the request; `tool_use` blocks in; one user message of `tool_result`
/// blocks out.
async fn anthropic(dispatcher: &Dispatcher, run: &RunContext) {
    println!("\n=== Anthropic Messages ===");
    let mut messages = vec![json!({"role": "user", "content": "Refund $12 on order o-17, please."})];
    println!(
        "request tools:\n{}",
        pretty(&Value::Array(dispatcher.toolkit().anthropic_tools()))
    );
    for (turn, response) in anthropic_script().into_iter().enumerate() {
        messages.push(json!({"role": "assistant", "content": response["content"].clone()}));
        let calls: Vec<ToolCall> = response["content"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(ToolCall::from_anthropic)
            .collect();
        let results = dispatcher.dispatch(run, &calls).await;
        println!("\n-- turn {}: {} tool calls in --", turn + 1, calls.len());
        for r in &results {
            println!("{} {} -> {}", r.call_id, r.name, r.disposition);
        }
        let out = anthropic_tool_results_message(&results);
        println!("{}", pretty(&out));
        messages.push(out);
    }
    println!("\nthe next request carries {} messages", messages.len());
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let toolkit = effect_tool::toolkit![LookupOrder, IssueRefund];
    let dispatcher = toolkit.dispatcher(Engine::new(MemoryStore::new()));

    openai(&dispatcher, &RunContext::new("support-openai")).await;
    let after_openai = REFUNDS_APPLIED.load(Ordering::SeqCst);
    anthropic(&dispatcher, &RunContext::new("support-anthropic")).await;
    let total = REFUNDS_APPLIED.load(Ordering::SeqCst);

    // Each conversation (its own run) asked for the refund three times: once malformed, then
    // twice in the re-plan. The backend applied it once per conversation.
    println!(
        "\nrefunds applied by the backend: {after_openai} (OpenAI run), {} (Anthropic run)",
        total - after_openai
    );
    assert_eq!(after_openai, 1, "the OpenAI conversation refunded once");
    assert_eq!(total, 2, "the Anthropic conversation refunded once");
}
