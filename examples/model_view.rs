//! What the model reads, what the journal keeps, and what nobody may keep:
//!
//! - `#[tool(to_model = path)]`: the tool returns a large report; the journal records it whole
//!   and a replay returns it whole to code, while the model reads a summary (executed or
//!   replayed, in every wire format);
//! - `Engine::with_redactor`: one hook sees every text and value before it is journaled or
//!   logged (here it masks the gateway's session tokens);
//! - `#[sensitive]`: a card number the model sends is never stored, and a tool error that
//!   echoes it reaches the journal's reason as `[sensitive]`.
//!
//! Run: `cargo run --example model_view` (a SQLite journal under the system temp folder, no
//! network).

use effect_tool::store::sqlite::SqliteStore;
use effect_tool::{Engine, ModelOutput, RunContext, Site, Store, ToolCall, ToolError, Toolkit, tool};
use serde::{Deserialize, Serialize};
use serde_json::json;

/// A month's sales report: every order, and a note for finance only.
#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MonthlySales {
    pub month: String,
    pub order_cents: Vec<u64>,
    pub finance_note: String,
}

/// What the model reads of a report: three numbers.
fn summary(report: &MonthlySales) -> ModelOutput {
    let total: u64 = report.order_cents.iter().sum();
    ModelOutput::text(format!(
        "{}: {} orders, {:.2} EUR in total",
        report.month,
        report.order_cents.len(),
        total as f64 / 100.0
    ))
}

/// Build the sales report of a month.
#[tool(effect = "idempotent", key(month), to_model = summary)]
async fn sales_report(month: String) -> Result<MonthlySales, ToolError> {
    Ok(MonthlySales {
        month,
        order_cents: (1..=1000).map(|n| 1000 + n * 7 % 500).collect(),
        finance_note: "margin below target: do not tell customers".into(),
    })
}

/// Charge a card (the gateway declines it and echoes the card and its session token).
#[tool(effect = "irreversible", key(order_id))]
async fn charge(
    /// The order.
    order_id: String,
    /// The card number.
    #[sensitive]
    card: String,
) -> Result<String, ToolError> {
    Err(ToolError::definitive(format!(
        "gateway declined card {card} for {order_id} (session tok_live_91ab)"
    )))
}

#[tokio::main]
async fn main() {
    let dir = std::env::temp_dir().join(format!("effect-tool-model-view-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let journal = dir.join("journal.db");
    let engine = Engine::new(SqliteStore::open(&journal).unwrap()).with_redactor(|_site: Site, text: &mut String| {
        while let Some(at) = text.find("tok_live_") {
            let end = text[at..]
                .find(|c: char| !c.is_ascii_alphanumeric() && c != '_')
                .map_or(text.len(), |n| at + n);
            text.replace_range(at..end, "[token]");
        }
    });
    let dispatcher = Toolkit::new().with(SalesReport).with(Charge).dispatcher(engine.clone());
    let run = RunContext::new("run-1");
    println!("journal: {}\n", journal.display());

    for (id, turn) in [("call_1", "first turn"), ("call_2", "re-planned")] {
        let call = ToolCall::new(id, "sales_report", json!({"month": "2026-03"}).to_string());
        let r = dispatcher.call(&run, &call).await;
        println!(
            "sales_report ({turn:<10}) {:<9} the model reads: {}",
            r.disposition.as_str(),
            r.content()
        );
        println!("{:<37}Anthropic block: {}", "", r.to_anthropic_block());
        let key = r.key.unwrap();
        let rec = engine.store().get(&key).await.unwrap().unwrap();
        let output = rec.output.unwrap();
        println!(
            "{:<37}the journal keeps: {} orders and finance_note {}",
            "",
            output["order_cents"].as_array().map_or(0, Vec::len),
            output["finance_note"]
        );
    }

    let call = ToolCall::new(
        "call_3",
        "charge",
        json!({"order_id": "A-7", "card": "4111-2222-3333-9876"}).to_string(),
    );
    let r = dispatcher.call(&run, &call).await;
    println!("\ncharge                          the model reads: {}", r.content());
    let records = engine.store().list(&effect_tool::Filter::all()).await.unwrap();
    for rec in records.iter().filter(|r| r.tool == "charge") {
        println!(
            "{:<32}the journal's reason: {}",
            "",
            rec.reason.as_deref().unwrap_or("(none)")
        );
        println!("{:<32}the journal's input:  {}", "", rec.input);
    }
    let raw = std::fs::read(&journal).unwrap_or_default();
    let wal = std::fs::read(dir.join("journal.db-wal")).unwrap_or_default();
    let bytes = String::from_utf8_lossy(&[raw, wal].concat()).into_owned();
    println!(
        "journal file: card number {}, session token {}",
        if bytes.contains("4111-2222-3333-9876") {
            "FOUND"
        } else {
            "absent"
        },
        if bytes.contains("tok_live_91ab") {
            "FOUND"
        } else {
            "absent"
        },
    );

    engine.shutdown(std::time::Duration::from_secs(5)).await;
    std::fs::remove_dir_all(&dir).ok();
}
