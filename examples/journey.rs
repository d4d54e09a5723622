//! A new user's whole journey, in one program: six tools over the four effect classes, one model
//! turn in each provider format, a re-plan, a restart, a timeout resolved by a person, an
//! approval, and the same tools served over MCP (one of them takes a `#[secret]` value).
//!
//! Run: `cargo run --example journey --features mcp` (no set-up, no network: the model is
//! scripted with each provider's documented JSON, and the MCP client is rmcp's, in process).
//!
//! The outside world is a ledger in this file that the engine cannot see: every effect a tool
//! applies is counted there, and the program fails if anything was applied twice.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use effect_tool::adapters::mcp::McpServer;
use effect_tool::store::sqlite::SqliteStore;
use effect_tool::toolkit::{Dispatcher, ToolCall, ToolResult, anthropic_tool_results_message};
use effect_tool::{Disposition, EffectCtx, Engine, RunContext, StoreExt, ToolError, Toolkit, Verdict, tools};
use serde_json::{Value, json};

/// The outside world: what each tool did, counted where the engine cannot see it.
#[derive(Default)]
struct World {
    /// Refunds by idempotency key (the payments API dedups on it).
    refunds: Mutex<HashMap<String, u64>>,
    /// Reservations held.
    reservations: Mutex<Vec<String>>,
    /// Emails that left the mail server.
    sent: Mutex<Vec<String>>,
    /// Payments made.
    payments: Mutex<Vec<u64>>,
    /// Text messages sent, with the API key they were sent with.
    texts: Mutex<Vec<String>>,
}

/// The SMS provider's API key: the application holds it; the model never sees it.
#[derive(Clone)]
struct SmsApiKey(String);

#[tools]
impl World {
    /// Look up an order's status.
    #[tool(effect = "pure")]
    async fn lookup_order(&self, order_id: String) -> Result<Value, ToolError> {
        Ok(json!({"order_id": order_id, "status": "delivered", "total_cents": 4200}))
    }

    /// Refund part of an order, in cents.
    #[tool(effect = "idempotent", key = |a| format!("refund:{}:{}", a.order_id, a.amount_cents))]
    async fn issue_refund(&self, ctx: &EffectCtx, order_id: String, amount_cents: u64) -> Result<String, ToolError> {
        let mut refunds = self.refunds.lock().unwrap();
        refunds.entry(ctx.idempotency_key()).or_insert(amount_cents);
        Ok(format!("refunded {amount_cents} cents on {order_id}"))
    }

    /// Hold a replacement item for the customer.
    #[tool(effect = "compensable", compensate = release_item)]
    async fn reserve_item(&self, sku: String) -> Result<String, ToolError> {
        self.reservations.lock().unwrap().push(sku.clone());
        Ok(format!("reserved {sku}"))
    }

    /// Release a held item (the undo of `reserve_item`).
    async fn release_item(
        &self,
        _ctx: &EffectCtx,
        args: &WorldReserveItemArgs,
        _out: &String,
    ) -> Result<(), ToolError> {
        self.reservations.lock().unwrap().retain(|s| s != &args.sku);
        Ok(())
    }

    /// Email the customer. The mail server's first answer times out after the message left.
    #[tool(effect = "irreversible", key(to, subject))]
    async fn send_email(&self, to: String, subject: String, body: String) -> Result<String, ToolError> {
        let mut sent = self.sent.lock().unwrap();
        sent.push(format!("{to}: {subject}: {body}"));
        if sent.len() == 1 {
            return Err(ToolError::unknown("SMTP server timed out after DATA"));
        }
        Ok(format!("sent to {to}"))
    }

    /// Pay a supplier's invoice. A person in finance approves every payment first.
    #[tool(effect = "irreversible", approval = "finance", key(invoice))]
    async fn pay_invoice(&self, invoice: String, amount_cents: u64) -> Result<String, ToolError> {
        self.payments.lock().unwrap().push(amount_cents);
        Ok(format!("paid {amount_cents} cents on {invoice}"))
    }

    /// Text the customer.
    #[tool(effect = "irreversible", key(phone, text))]
    async fn send_text(&self, #[secret] api_key: SmsApiKey, phone: String, text: String) -> Result<String, ToolError> {
        self.texts
            .lock()
            .unwrap()
            .push(format!("{phone}: {text} (key {}...)", &api_key.0[..4]));
        Ok(format!("texted {phone}"))
    }
}

fn toolkit(world: &Arc<World>) -> Toolkit {
    Toolkit::new()
        .with(world.lookup_order_tool())
        .with(world.issue_refund_tool())
        .with(world.reserve_item_tool())
        .with(world.send_email_tool())
        .with(world.pay_invoice_tool())
        .with(world.send_text_tool())
}

fn print(step: &str, results: &[ToolResult]) {
    for r in results {
        println!(
            "{step:<34} {:<14} {:<18} {}",
            r.name,
            r.disposition.as_str(),
            first_line(&r.content())
        );
    }
}

fn first_line(text: &str) -> String {
    let line = text.lines().next().unwrap_or_default();
    if line.chars().count() > 110 {
        format!("{}...", line.chars().take(110).collect::<String>())
    } else {
        line.to_owned()
    }
}

/// Fail the example (and CI) if the world does not hold what it should.
fn check(what: &str, ok: bool) -> Result<(), String> {
    if ok {
        Ok(())
    } else {
        Err(format!("journey check failed: {what}"))
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("effect-tool-journey-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("journal.db");
    let world = Arc::new(World::default());
    let run = RunContext::new("support-42").with_value(SmsApiKey("sk_live_0123456789".into()));
    let result = journey(&path, &world, &run).await;
    std::fs::remove_dir_all(&dir).ok();
    result
}

async fn journey(
    path: &std::path::Path,
    world: &Arc<World>,
    run: &RunContext,
) -> Result<(), Box<dyn std::error::Error>> {
    let engine = Engine::new(SqliteStore::open(path)?);
    let desk = Dispatcher::new(toolkit(world), engine.clone());
    println!("journal: {}\n", path.display());

    // 1. One turn per provider format: the provider's response JSON in, tool results out.
    let openai = json!({"choices": [{"finish_reason": "tool_calls", "message": {"role": "assistant", "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "lookup_order", "arguments": "{\"order_id\":\"A-17\"}"}},
        {"id": "call_2", "type": "function", "function": {"name": "issue_refund", "arguments": "{\"order_id\":\"A-17\",\"amount_cents\":1200}"}}
    ]}}]});
    let calls: Vec<ToolCall> = openai["choices"][0]["message"]["tool_calls"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(ToolCall::from_openai)
        .collect();
    let results = desk.dispatch(run, &calls).await;
    print("OpenAI chat turn", &results);
    let _messages: Vec<Value> = results.iter().map(ToolResult::to_openai_message).collect();

    let responses = json!({"output": [
        {"type": "function_call", "call_id": "fc_1", "name": "reserve_item", "arguments": "{\"sku\":\"KETTLE-2\"}"}
    ]});
    let calls: Vec<ToolCall> = responses["output"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(ToolCall::from_openai_responses)
        .collect();
    let results = desk.dispatch(run, &calls).await;
    print("OpenAI Responses turn", &results);
    let _items: Vec<Value> = results.iter().map(ToolResult::to_openai_responses_item).collect();

    let anthropic = json!({"stop_reason": "tool_use", "content": [
        {"type": "text", "text": "I'll let the customer know."},
        {"type": "tool_use", "id": "toolu_1", "name": "send_email", "input": {"to": "ann@example.com", "subject": "Your refund", "body": "12.00 EUR is on its way."}}
    ]});
    let calls: Vec<ToolCall> = anthropic["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(ToolCall::from_anthropic)
        .collect();
    let results = desk.dispatch(run, &calls).await;
    print("Anthropic turn (mail times out)", &results);
    let _message = anthropic_tool_results_message(&results);
    check(
        "the timed-out email is blocked, not failed",
        results[0].disposition == Disposition::Blocked,
    )?;

    // 2. The model re-plans: the refund again under a new call id, and the email again.
    let replan = [
        ToolCall::new("call_9", "issue_refund", r#"{"order_id":"A-17","amount_cents":1200}"#),
        ToolCall::new(
            "call_10",
            "send_email",
            r#"{"to":"ann@example.com","subject":"Your refund","body":"Your money is on its way."}"#,
        ),
    ];
    let results = desk.dispatch(run, &replan).await;
    print("re-plan", &results);
    check(
        "the re-planned refund replays",
        results[0].disposition == Disposition::Replayed,
    )?;
    check(
        "the email in doubt stays blocked",
        results[1].disposition == Disposition::Blocked,
    )?;

    // 3. A person checks the mail log and resolves the email as sent (the output is checked
    //    against the tool's output type), and approves the payment the model asks for next.
    let email_key = results[1].key.clone().unwrap_or_default();
    let verdict = Verdict::Applied {
        output: json!("sent to ann@example.com (confirmed in the mail log)"),
    };
    engine.store().resolve(&email_key, "ops@example.com", verdict).await?;
    println!(
        "{:<34} {:<14} {:<18} effect-tool resolve '{email_key}' --applied",
        "a person resolves", "send_email", ""
    );

    let pay = [ToolCall::new(
        "call_11",
        "pay_invoice",
        r#"{"invoice":"INV-7","amount_cents":9900}"#,
    )];
    let results = desk.dispatch(run, &pay).await;
    print("payment (parks)", &results);
    let pay_key = results[0].key.clone().unwrap_or_default();
    let parked = engine.store().get(&pay_key).await?.ok_or("the payment is not parked")?;
    engine
        .store()
        .approve(&pay_key, "fin@example.com", "finance", &parked.fingerprint)
        .await?;
    println!(
        "{:<34} {:<14} {:<18} the input it was shown: {}",
        "a person approves", "pay_invoice", "", parked.input
    );
    let results = desk.dispatch(run, &pay).await;
    print("payment again", &results);

    // 4. A restart: a new engine on the same journal file replays what the first one did.
    drop(desk);
    engine.shutdown(std::time::Duration::from_secs(5)).await;
    drop(engine);
    let engine = Engine::new(SqliteStore::open(path)?);
    let desk = Dispatcher::new(toolkit(world), engine.clone());
    let again = [
        ToolCall::new("call_12", "issue_refund", r#"{"order_id":"A-17","amount_cents":1200}"#),
        ToolCall::new(
            "call_13",
            "send_email",
            r#"{"to":"ann@example.com","subject":"Your refund","body":"12.00 EUR is on its way."}"#,
        ),
        ToolCall::new("call_14", "pay_invoice", r#"{"invoice":"INV-7","amount_cents":9900}"#),
    ];
    print("after a restart", &desk.dispatch(run, &again).await);

    // 5. The same tools over MCP, to a real MCP client (rmcp's, in process). `send_text` takes
    //    the SMS API key from the run: the server gives every run the application's values.
    let server = McpServer::new(toolkit(world), engine.clone())
        .with_run_id("support-42-mcp")
        .with_run_values(|_principal, run| run.with_value(SmsApiKey("sk_live_0123456789".into())));
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    let serving = tokio::spawn(async move { server.serve_transport(tokio::io::split(server_io)).await });
    let client = rmcp::ServiceExt::serve((), tokio::io::split(client_io)).await?;
    let listed = client.list_all_tools().await?;
    let text_tool = listed
        .iter()
        .find(|t| t.name == "send_text")
        .ok_or("send_text is not listed")?;
    check(
        "the model never sees the API key",
        !serde_json::to_string(&text_tool.input_schema)?.contains("api_key"),
    )?;
    println!(
        "{:<34} {:<14} {:<18} {} tools, no `api_key` argument in `send_text`'s schema",
        "MCP tools/list",
        "",
        "",
        listed.len()
    );
    for _ in 0..2 {
        let args = json!({"phone": "+49 30 1234567", "text": "Your replacement kettle is reserved."});
        let params = rmcp::model::CallToolRequestParams::new("send_text")
            .with_arguments(args.as_object().cloned().unwrap_or_default());
        let answer = client.call_tool(params).await?;
        let text = answer
            .content
            .iter()
            .filter_map(|c| c.as_text().map(|t| t.text.clone()))
            .collect::<Vec<_>>()
            .join(" ");
        println!(
            "{:<34} {:<14} {:<18} {}",
            "MCP tools/call",
            "send_text",
            "",
            first_line(&text)
        );
    }
    client.cancel().await?;
    let _ = serving.await;

    // The outside world's own count: every effect once.
    println!();
    let refunds = world.refunds.lock().unwrap().len();
    let sent = world.sent.lock().unwrap().len();
    let payments = world.payments.lock().unwrap().len();
    let texts = world.texts.lock().unwrap().len();
    let reservations = world.reservations.lock().unwrap().len();
    println!(
        "the world holds: {refunds} refund, {reservations} reservation, {sent} email, {payments} payment, {texts} text"
    );
    check("one refund", refunds == 1)?;
    check("one email", sent == 1)?;
    check("one payment", payments == 1)?;
    check("one text", texts == 1)?;
    check("one reservation", reservations == 1)?;
    engine.shutdown(std::time::Duration::from_secs(5)).await;
    Ok(())
}
