//! A tool whose effect is a write to the application's own database, the one that holds the
//! journal: `#[tool(transactional)]` runs the claim, the tool's `INSERT` and the record in one
//! SQLite transaction, so the payment and its record commit together or not at all. Exactly
//! once, and never in doubt: a crash before the commit leaves nothing, after it the record.
//!
//! ```sh
//! cargo run --example transactional_payment
//! ```

use effect_tool::store::sqlite::{SqliteStore, SqliteTransaction};
use effect_tool::{CallOptions, EffectCtx, Engine, RunContext, ToolError, tool};

/// Record a payment of an order in the application's `payments` table.
#[tool(effect = "irreversible", transactional, key = |a| format!("pay:{}", a.order_id))]
async fn record_payment(
    ctx: &EffectCtx,
    /// The order.
    order_id: String,
    /// The amount, in cents.
    cents: i64,
    /// Decline the card after the row is written (to show the rollback).
    decline: bool,
) -> Result<String, ToolError> {
    let tx = ctx
        .transaction::<SqliteTransaction>()
        .map_err(|e| ToolError::definitive(e.to_string()))?;
    tx.with(|conn| {
        conn.execute(
            "INSERT INTO payments (order_id, cents) VALUES (?1, ?2)",
            (&order_id, cents),
        )
    })
    .map_err(|e| ToolError::definitive(e.to_string()))?;
    if decline {
        return Err(ToolError::definitive("the card was declined"));
    }
    Ok(format!("paid {cents} cents for {order_id}"))
}

fn payments(path: &std::path::Path, order: &str) -> i64 {
    let conn = effect_tool::store::sqlite::rusqlite::Connection::open(path).unwrap();
    conn.query_row("SELECT count(*) FROM payments WHERE order_id = ?1", [order], |r| {
        r.get(0)
    })
    .unwrap()
}

#[tokio::main]
async fn main() {
    let dir = std::env::temp_dir().join(format!("effect-tool-transactional-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("app.db");
    // The journal's file is the application's database: its tables live beside the journal's.
    let store = SqliteStore::open(&path).unwrap();
    effect_tool::store::sqlite::rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch("CREATE TABLE payments (order_id TEXT NOT NULL, cents INTEGER NOT NULL)")
        .unwrap();
    let engine = Engine::new(store);
    let run = RunContext::new("run-1");
    println!("journal and payments: {}\n", path.display());

    let args = |order: &str, decline| RecordPaymentArgs {
        order_id: order.to_owned(),
        cents: 2500,
        decline,
    };
    for (what, order, decline) in [
        ("record_payment", "A-1", false),
        ("record_payment again (re-planned)", "A-1", false),
        ("record_payment, card declined", "B-1", true),
        ("record_payment, card accepted", "B-1", false),
    ] {
        let report = engine
            .call_with_report(&RecordPayment, &run, CallOptions::default(), args(order, decline))
            .await;
        let result = match &report.result {
            Ok(out) => format!("{out:?}"),
            Err(e) => format!("error: {e}"),
        };
        println!(
            "{what:<36} {:<10} {result}\n{:<36} payments of {order} in the table: {}",
            format!("{:?}", report.disposition).to_lowercase(),
            "",
            payments(&path, order)
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
    println!("\njournal removed: {}", dir.display());
}
