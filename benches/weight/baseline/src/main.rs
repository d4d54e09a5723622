//! The same six tools by hand: schemas from schemars, arguments parsed by serde_json, a journal
//! row per call in SQLite (look up, insert the claim, update with the result), no engine.
use rusqlite::{Connection, OptionalExtension, params};
use schemars::{JsonSchema, schema_for};
use serde::Deserialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

#[derive(Deserialize, JsonSchema)]
struct LookupOrder {
    order_id: String,
}
#[derive(Deserialize, JsonSchema)]
struct SearchHelp {
    query: String,
}
#[derive(Deserialize, JsonSchema)]
struct IssueRefund {
    order_id: String,
    amount_cents: u64,
}
#[derive(Deserialize, JsonSchema)]
struct ReserveItem {
    sku: String,
}
#[derive(Deserialize, JsonSchema)]
struct SendEmail {
    to: String,
    body: String,
}
#[derive(Deserialize, JsonSchema)]
struct PostComment {
    ticket: u64,
    text: String,
}

async fn run(conn: &Connection, name: &str, args: &str) -> Result<Value, String> {
    let key = format!("r1:{name}:{:x}", Sha256::digest(args.as_bytes()));
    if let Some(out) = conn
        .query_row(
            "SELECT output FROM journal WHERE key = ?1 AND output IS NOT NULL",
            params![key],
            |r| r.get::<_, String>(0),
        )
        .optional()
        .map_err(|e| e.to_string())?
    {
        return serde_json::from_str(&out).map_err(|e| e.to_string());
    }
    conn.execute(
        "INSERT OR IGNORE INTO journal (key, tool, input) VALUES (?1, ?2, ?3)",
        params![key, name, args],
    )
    .map_err(|e| e.to_string())?;
    let out = match name {
        "lookup_order" => {
            let a: LookupOrder = serde_json::from_str(args).map_err(|e| e.to_string())?;
            json!(format!("order {}", a.order_id))
        }
        "search_help" => {
            let a: SearchHelp = serde_json::from_str(args).map_err(|e| e.to_string())?;
            json!([a.query])
        }
        "issue_refund" => {
            let a: IssueRefund = serde_json::from_str(args).map_err(|e| e.to_string())?;
            json!(format!("{key} {} {}", a.order_id, a.amount_cents))
        }
        "reserve_item" => {
            let a: ReserveItem = serde_json::from_str(args).map_err(|e| e.to_string())?;
            json!(a.sku)
        }
        "send_email" => {
            let a: SendEmail = serde_json::from_str(args).map_err(|e| e.to_string())?;
            json!(format!("{}: {}", a.to, a.body))
        }
        "post_comment" => {
            let a: PostComment = serde_json::from_str(args).map_err(|e| e.to_string())?;
            json!(format!("{}: {}", a.ticket, a.text))
        }
        _ => return Err(format!("unknown tool {name}")),
    };
    conn.execute(
        "UPDATE journal SET output = ?2 WHERE key = ?1",
        params![key, out.to_string()],
    )
    .map_err(|e| e.to_string())?;
    Ok(out)
}

#[tokio::main]
async fn main() {
    let schemas = [
        schema_for!(LookupOrder),
        schema_for!(SearchHelp),
        schema_for!(IssueRefund),
        schema_for!(ReserveItem),
        schema_for!(SendEmail),
        schema_for!(PostComment),
    ];
    println!("{}", schemas.len());
    let path = std::env::temp_dir().join(format!("weight-baseline-{}.db", std::process::id()));
    let conn = Connection::open(&path).unwrap();
    conn.execute_batch("PRAGMA journal_mode=WAL; CREATE TABLE IF NOT EXISTS journal (key TEXT PRIMARY KEY, tool TEXT, input TEXT, output TEXT);").unwrap();
    for (name, args) in [
        ("lookup_order", r#"{"order_id":"A"}"#),
        ("search_help", r#"{"query":"refund"}"#),
        ("issue_refund", r#"{"order_id":"A","amount_cents":5}"#),
        ("reserve_item", r#"{"sku":"S"}"#),
        ("send_email", r#"{"to":"a@b","body":"hi"}"#),
        ("post_comment", r#"{"ticket":1,"text":"hi"}"#),
    ] {
        println!("{:?}", run(&conn, name, args).await);
    }
    drop(conn);
    let _ = std::fs::remove_file(&path);
}
