//! A new user's six-tool support agent, with effect-tool's default features (the SQLite journal).
use effect_tool::store::sqlite::SqliteStore;
use effect_tool::toolkit::{Dispatcher, ToolCall, Toolkit};
use effect_tool::{EffectCtx, Engine, RunContext, ToolError, tool};

/// Look up an order.
#[tool(effect = "pure")]
async fn lookup_order(order_id: String) -> Result<String, ToolError> {
    Ok(format!("order {order_id}"))
}

/// Search the help center.
#[tool(effect = "pure")]
async fn search_help(query: String) -> Result<Vec<String>, ToolError> {
    Ok(vec![query])
}

/// Refund part of an order.
#[tool(effect = "idempotent", key = |a| format!("refund:{}:{}", a.order_id, a.amount_cents))]
async fn issue_refund(ctx: &EffectCtx, order_id: String, amount_cents: u64) -> Result<String, ToolError> {
    Ok(format!("{} {order_id} {amount_cents}", ctx.idempotency_key()))
}

/// Reserve a replacement item.
#[tool(effect = "compensable", compensate = release_item)]
async fn reserve_item(sku: String) -> Result<String, ToolError> {
    Ok(sku)
}

async fn release_item(_ctx: &EffectCtx, _args: &ReserveItemArgs, _out: &String) -> Result<(), ToolError> {
    Ok(())
}

/// Email the customer.
#[tool(effect = "irreversible")]
async fn send_email(to: String, body: String) -> Result<String, ToolError> {
    Ok(format!("{to}: {body}"))
}

/// Reply on the ticket.
#[tool(effect = "irreversible")]
async fn post_comment(ticket: u64, text: String) -> Result<String, ToolError> {
    Ok(format!("{ticket}: {text}"))
}

#[tokio::main]
async fn main() {
    let path = std::env::temp_dir().join(format!("weight-app-{}.db", std::process::id()));
    let engine = Engine::new(SqliteStore::open(&path).unwrap());
    let toolkit = Toolkit::new()
        .with(LookupOrder)
        .with(SearchHelp)
        .with(IssueRefund)
        .with(ReserveItem)
        .with(SendEmail)
        .with(PostComment);
    println!("{}", toolkit.openai_tools().len());
    let d = Dispatcher::new(toolkit, engine);
    let run = RunContext::new("r1");
    let calls = [
        ToolCall::new("1", "lookup_order", r#"{"order_id":"A"}"#),
        ToolCall::new("2", "search_help", r#"{"query":"refund"}"#),
        ToolCall::new("3", "issue_refund", r#"{"order_id":"A","amount_cents":5}"#),
        ToolCall::new("4", "reserve_item", r#"{"sku":"S"}"#),
        ToolCall::new("5", "send_email", r#"{"to":"a@b","body":"hi"}"#),
        ToolCall::new("6", "post_comment", r#"{"ticket":1,"text":"hi"}"#),
    ];
    for r in d.dispatch(&run, &calls).await {
        println!("{}", r.content());
    }
    let _ = std::fs::remove_file(&path);
}
