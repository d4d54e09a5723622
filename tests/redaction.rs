//! Redaction of everything stored (issue 31 item 7): one hook on the engine
//! (`Engine::with_redactor`) sees every text and value before it is journaled or logged, and
//! the values of `#[sensitive]` arguments are cut out of error texts by value (a tool error
//! that echoes the card number lands neither in the journal's `reason` nor in a log line).
//!
//! Checked where it would leak: a capture of every log event of every target at TRACE, the
//! SQLite journal's bytes on disk (WAL included), and PostgreSQL's rows read with SQL.
//!
//! A binary of its own: it installs a log subscriber for the whole process (tracing caches which
//! events are wanted process-wide, so a subscriber set for one test only can miss events of
//! tests running beside it; see `mcp_secret_values.rs`). Every test of this binary logs into
//! the one capture, and none of them may leak.

mod common;

use std::sync::{Arc, Mutex};

use common::capture::Capture;
use effect_tool::store::sqlite::SqliteStore;
use effect_tool::{
    Disposition, Engine, Failure, RecordState, RunContext, Site, Store, ToolCall, ToolError, ToolOutcome, Toolkit,
    tools,
};
use effect_tool_core::testing::conformance::ScratchDir;
use serde_json::json;

const CARD: &str = "4111-2222-3333-9876";
const TOKEN: &str = "tok_live_7f3a9c2e";

/// A payment gateway that echoes what it is sent in its errors, as real ones do.
#[derive(Default)]
struct Gateway {
    /// Every charge it received (the outside ledger): card, amount.
    received: Mutex<Vec<(String, u64)>>,
}

#[tools]
impl Gateway {
    /// Charge a card. An amount of 13 is declined (definitive), 99 times out after sending
    /// (unknown): both errors quote the card and the gateway's token.
    #[tool(effect = "irreversible", key(order_id))]
    async fn charge(
        &self,
        /// The order.
        order_id: String,
        /// The card number.
        #[sensitive]
        card: String,
        /// The amount, in cents.
        amount_cents: u64,
        /// A note for the receipt.
        note: String,
    ) -> Result<String, ToolError> {
        self.received.lock().unwrap().push((card.clone(), amount_cents));
        match amount_cents {
            13 => Err(ToolError::definitive(format!(
                "card {card} declined by gateway (session {TOKEN})"
            ))),
            99 => Err(ToolError::unknown(format!(
                "timeout after sending card {card} (session {TOKEN})"
            ))),
            98 => Err(ToolError::unknown(format!("timeout after sending card {card}"))),
            _ => Ok(format!(
                "charged {amount_cents} on {order_id}, receipt {TOKEN}, note: {note}"
            )),
        }
    }
}

/// The hook: our tokens are masked wherever they appear.
fn mask_tokens(_site: Site, text: &mut String) {
    while let Some(at) = text.find("tok_live_") {
        let end = text[at..]
            .find(|c: char| !c.is_ascii_alphanumeric() && c != '_')
            .map_or(text.len(), |n| at + n);
        text.replace_range(at..end, "[token]");
    }
}

/// Every site the hook was shown, to check it saw inputs, outputs, reasons and logs.
#[derive(Default, Clone)]
struct Seen(Arc<Mutex<Vec<Site>>>);

async fn exercise(engine: Engine, gateway: Arc<Gateway>) -> Vec<effect_tool::EffectRecord> {
    let d = Toolkit::new().with(gateway.charge_tool()).dispatcher(engine.clone());
    let run = RunContext::new("redaction-run");
    let call = |id: &str, order: &str, amount: u64| {
        ToolCall::new(
            id,
            "charge",
            json!({"order_id": order, "card": CARD, "amount_cents": amount, "note": format!("paid with {TOKEN}")})
                .to_string(),
        )
    };
    // Succeeds: the output and the input's note carry the token.
    let ok = d.call(&run, &call("c1", "A-1", 500)).await;
    assert_eq!(ok.disposition, Disposition::Executed, "{}", ok.content());
    // Declined: a definitive error quoting the card; the claim is released with a reason.
    let declined = d.call(&run, &call("c2", "A-2", 13)).await;
    match &declined.outcome {
        ToolOutcome::Failed(effect_tool::EffectError::Tool { error, failure, .. }) => {
            assert_eq!(*failure, Failure::Definitive);
            assert!(!error.contains(CARD), "the model's text has no card: {error}");
            assert!(error.contains("[sensitive]"), "{error}");
        }
        other => panic!("expected a tool failure, got {other:?}"),
    }
    assert!(!declined.content().contains(CARD));
    // Unknown outcome: the record is marked in doubt with the error as its reason.
    let doubt = d.call(&run, &call("c3", "A-3", 99)).await;
    assert!(doubt.blocked().is_some(), "{}", doubt.content());
    assert_eq!(
        gateway.received.lock().unwrap().len(),
        3,
        "each charge reached the gateway once"
    );

    let records = engine.store().list(&effect_tool::Filter::all()).await.unwrap();
    let in_doubt = records
        .iter()
        .find(|r| r.state == RecordState::InDoubt)
        .expect("a record in doubt");
    let reason = in_doubt.reason.clone().unwrap_or_default();
    assert!(reason.contains("[sensitive]") && reason.contains("[token]"), "{reason}");
    assert!(!reason.contains(CARD) && !reason.contains(TOKEN), "{reason}");
    let done = records.iter().find(|r| r.state == RecordState::Completed).unwrap();
    assert_eq!(
        done.output,
        Some(json!("charged 500 on A-1, receipt [token], note: paid with [token]"))
    );
    assert_eq!(done.input["note"], json!("paid with [token]"));
    records
}

fn redacting_engine(store: impl Store, seen: &Seen) -> Engine {
    let seen = seen.clone();
    Engine::new(store).with_redactor(move |site: Site, text: &mut String| {
        seen.0.lock().unwrap().push(site);
        mask_tokens(site, text)
    })
}

/// The process's log capture, installed once by the first test that asks.
fn capture() -> &'static Capture {
    static CAPTURE: std::sync::OnceLock<Capture> = std::sync::OnceLock::new();
    CAPTURE.get_or_init(|| {
        let capture = Capture::default();
        tracing::subscriber::set_global_default(capture.subscriber()).expect("the only subscriber of this binary");
        capture
    })
}

#[tokio::test]
async fn no_sensitive_value_or_masked_token_in_the_sqlite_journal_file_or_the_logs() {
    let capture = capture();
    let dir = ScratchDir::new("redaction-sqlite");
    let seen = Seen::default();
    let engine = redacting_engine(SqliteStore::open(dir.path().join("journal.db")).unwrap(), &seen);
    exercise(engine.clone(), Arc::new(Gateway::default())).await;
    engine.shutdown(std::time::Duration::from_secs(5)).await;

    let mut bytes = Vec::new();
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        if path.file_name().unwrap().to_string_lossy().starts_with("journal.db") {
            bytes.extend(std::fs::read(&path).unwrap());
        }
    }
    let raw = String::from_utf8_lossy(&bytes);
    assert!(raw.contains("[token]"), "the journal holds the redacted texts");
    assert!(!raw.contains(CARD), "no card number in the journal file");
    assert!(!raw.contains(TOKEN), "no token in the journal file");

    let logs = capture.text();
    assert!(logs.contains("tool failed"), "the failure was logged at DEBUG:\n{logs}");
    assert!(!logs.contains(CARD), "no card number in the logs:\n{logs}");
    assert!(!logs.contains(TOKEN), "no token in the logs:\n{logs}");

    let seen = seen.0.lock().unwrap().clone();
    for site in [Site::Input, Site::Output, Site::Reason, Site::Log] {
        assert!(seen.contains(&site), "the hook saw no {site:?}: {seen:?}");
    }
}

#[tokio::test]
async fn without_a_hook_a_sensitive_value_is_still_cut_out_of_the_reason() {
    let capture = capture();
    let dir = ScratchDir::new("redaction-nohook");
    let engine = Engine::new(SqliteStore::open(dir.path().join("journal.db")).unwrap());
    let d = Toolkit::new()
        .with(Arc::new(Gateway::default()).charge_tool())
        .dispatcher(engine.clone());
    let run = RunContext::new("nohook");
    let call = ToolCall::new(
        "c1",
        "charge",
        json!({"order_id": "B-1", "card": CARD, "amount_cents": 98, "note": "n"}).to_string(),
    );
    let r = d.call(&run, &call).await;
    assert!(r.blocked().is_some());
    let key = r.key.unwrap();
    let rec = engine.store().get(&key).await.unwrap().unwrap();
    let reason = rec.reason.unwrap();
    assert!(reason.contains("timeout after sending card [sensitive]"), "{reason}");
    assert!(!capture.text().contains(CARD), "no card number in the logs");
}

#[tokio::test]
async fn a_persons_resolution_and_the_audit_trail_go_through_the_hook() {
    use effect_tool::{StoreExt, Verdict};
    let _ = capture();
    let seen = Seen::default();
    let engine = redacting_engine(effect_tool::MemoryStore::new(), &seen);
    let d = Toolkit::new()
        .with(Arc::new(Gateway::default()).charge_tool())
        .dispatcher(engine.clone());
    let run = RunContext::new("resolve");
    let call = ToolCall::new(
        "c1",
        "charge",
        json!({"order_id": "C-1", "card": CARD, "amount_cents": 99, "note": "n"}).to_string(),
    );
    let key = d.call(&run, &call).await.key.unwrap();
    engine
        .store()
        .resolve(
            &key,
            "ops@example.com",
            Verdict::Applied {
                output: json!(format!("confirmed by ops, {TOKEN}")),
            },
        )
        .await
        .unwrap();
    let rec = engine.store().get(&key).await.unwrap().unwrap();
    assert_eq!(rec.output, Some(json!("confirmed by ops, [token]")));
    let audit = engine.store().audit(Some(&key)).await.unwrap();
    assert!(!audit.is_empty());
    assert!(!format!("{audit:?}").contains(TOKEN), "{audit:?}");
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_sensitive_value_or_masked_token_in_postgres_rows() {
    use effect_tool::store::postgres::{PgOptions, PostgresStore};
    let Ok(url) = std::env::var("EFFECT_TOOL_PG_URL") else {
        assert!(
            std::env::var("EFFECT_TOOL_REQUIRE_PG").is_err(),
            "EFFECT_TOOL_PG_URL is not set but PostgreSQL is required"
        );
        eprintln!("SKIPPED: no_sensitive_value_or_masked_token_in_postgres_rows (no EFFECT_TOOL_PG_URL)");
        return;
    };
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let schema = format!("et_redact_{}_{nanos:08x}", std::process::id());
    let options = PgOptions {
        schema: schema.clone(),
        pool_size: 2,
        ..PgOptions::default()
    };
    let _ = capture();
    let store = PostgresStore::connect_with(&url, options).await.unwrap();
    let seen = Seen::default();
    exercise(redacting_engine(store, &seen), Arc::new(Gateway::default())).await;

    let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(conn);
    let mut rows = String::new();
    for table in ["records", "audit"] {
        for row in client
            .query(&format!("SELECT row_to_json(t)::text FROM {schema}.{table} t"), &[])
            .await
            .unwrap()
        {
            rows.push_str(&row.get::<_, String>(0));
            rows.push('\n');
        }
    }
    client
        .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
        .await
        .unwrap();
    assert!(rows.contains("[token]"), "{rows}");
    assert!(!rows.contains(CARD), "no card number in PostgreSQL's rows:\n{rows}");
    assert!(!rows.contains(TOKEN), "no token in PostgreSQL's rows:\n{rows}");
}
