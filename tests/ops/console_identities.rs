//! One identity across MCP and the console (issue 33, item 5): a person calls a tool over MCP
//! with the official Python `mcp` SDK as principal `00u1abc`, and the call parks for a
//! manager; in the console she is `m.rossi`, a name four eyes could not tie to `00u1abc`
//! without the identities map. With it, the console refuses her approval and takes another
//! person's; the audit trail names the person and the system they came through; the call then
//! runs once, counted by a ledger the engine cannot see. The record page says the same refusal
//! in a real browser.
//!
//! Needs `python3 -m pip install -r tests/mcp_client/requirements.txt` (scripts/test.sh does it).
#![cfg(all(feature = "console", feature = "sqlite", feature = "mcp-http"))]

use crate::common;

use std::sync::Arc;

use common::console::{call, serve};
use common::ledger::Downstream;
use common::python::{client_passed, python, require_http_client, run_client};
use effect_tool::adapters::mcp::{BearerTokens, McpHttpConfig, McpServer};
use effect_tool::decide::identity::{Identities, Person};
use effect_tool::ops::console::{Console, StaticTokens};
use effect_tool::store::sqlite::SqliteStore;
use effect_tool::{EffectClass, EffectCtx, Engine, Store, Tool, ToolError, Toolkit};

/// Maria's MCP token (principal `00u1abc`, as her identity provider's `sub`).
const MARIA_MCP: &str = "mcp-token-of-maria-00u1abc";
/// Console tokens: maria signs in as `m.rossi`, olaf as `olaf`; both are managers.
const M_ROSSI: &str = "tok-m-rossi-manager-01";
const OLAF: &str = "tok-olaf-manager-00002";
const TOKENS: &str = "\
tok-m-rossi-manager-01 m.rossi manager
tok-olaf-manager-00002 olaf manager
";

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
struct RefundArgs {
    order_id: String,
    amount_cents: u64,
}

/// A refund a manager approves first; the payment provider's ledger counts refunds.
struct Refund(Arc<Downstream>);

impl Tool for Refund {
    type Args = RefundArgs;
    type Output = String;
    type Error = ToolError;
    const NAME: &'static str = "refund";
    const CLASS: EffectClass = EffectClass::Irreversible;
    const APPROVAL: Option<&'static str> = Some("manager");

    async fn call(&self, ctx: &EffectCtx, args: RefundArgs) -> Result<String, ToolError> {
        self.0.apply(&ctx.idempotency_key());
        Ok(format!("refunded {} on {}", args.amount_cents, args.order_id))
    }
}

fn identities() -> Identities {
    Identities::new([
        Person {
            id: "maria".into(),
            console: ["m.rossi".to_owned()].into(),
            mcp: ["00u1abc".to_owned()].into(),
            ..Person::default()
        },
        Person {
            id: "olaf".into(),
            console: ["olaf".to_owned()].into(),
            ..Person::default()
        },
    ])
    .unwrap()
}

/// The call over MCP, by maria; its effect key.
async fn refund_over_mcp(url: &str, disposition: &str) -> String {
    let python = python();
    require_http_client(&python);
    let args = r#"{"order_id": "A-1", "amount_cents": 1500}"#;
    let out = run_client(
        &python,
        "approval_call.py",
        [url, MARIA_MCP, "refund", args, disposition],
    )
    .await;
    let stdout = client_passed(&out);
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("key="))
        .unwrap_or_else(|| panic!("no key in {stdout}"))
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_who_called_over_mcp_cannot_approve_in_the_console_under_another_name() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("journal.db")).unwrap());
    let refunds = Arc::new(Downstream::default());
    let toolkit = Toolkit::new().with(Refund(refunds.clone()));
    let mcp = McpServer::new(toolkit, Engine::new(store.clone()))
        .bind_http_with(
            "127.0.0.1:0".parse().unwrap(),
            McpHttpConfig::default().with_authenticator(BearerTokens::new().with_token(MARIA_MCP, "00u1abc")),
        )
        .await
        .unwrap();

    let key = refund_over_mcp(&mcp.url(), "awaiting-approval").await;
    assert!(key.starts_with("00u1abc/checkout"), "{key}");
    let parked = store.get(&key).await.unwrap().unwrap();
    let approve = serde_json::json!({ "key": key, "fingerprint": parked.fingerprint }).to_string();

    let console = Console::new(store.clone(), StaticTokens::parse(TOKENS).unwrap()).with_identities(identities());
    let addr = serve(console).await;
    let me = call(addr, M_ROSSI, "GET", "/api/me", "").await;
    assert_eq!(me.json()["person"], "maria", "{}", me.body);
    for (action, body) in [
        ("/api/approve", approve.as_str()),
        ("/api/deny", &serde_json::json!({"key": key}).to_string()),
    ] {
        let own = call(addr, M_ROSSI, "POST", action, body).await;
        assert_eq!(own.status, 403, "{action}: {}", own.body);
        let error = own.json()["error"].as_str().unwrap().to_owned();
        assert!(
            error.contains("m.rossi (person `maria`) requested this call"),
            "{error}"
        );
        assert!(error.contains("as `00u1abc`"), "{error}");
        assert!(
            own.json()["hint"].as_str().unwrap().contains("four eyes"),
            "{}",
            own.body
        );
    }
    assert_eq!(refunds.effects(), 0);

    // Another person approves: the audit trail names the person and the system.
    let ok = call(addr, OLAF, "POST", "/api/approve", &approve).await;
    assert_eq!(ok.status, 200, "{}", ok.body);
    let audit = store.audit(Some(&key)).await.unwrap();
    let approval = audit.iter().find(|e| e.action == "approve").expect("an approval");
    assert_eq!(approval.actor, "olaf (console)");

    // Maria's retry over MCP runs the approved refund, once.
    assert_eq!(refund_over_mcp(&mcp.url(), "executed").await, key);
    assert_eq!(refunds.effects(), 1);
    mcp.shutdown().await.unwrap();
}

/// The same refusal on the record page, in a real browser (headless Chromium through
/// WebDriver): maria, signed in as `m.rossi`, is told why she cannot approve her own call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_record_page_says_why_four_eyes_refuses_a_person_under_another_name() {
    use crate::common::browser::{act, browser, open_browser, open_record, shown_text, sign_in, start_driver};
    let Some((chromium, chromedriver)) = browser() else {
        return;
    };
    let parked = common::console::parked_refund("00u1abc/checkout", |store| {
        Console::new(store, StaticTokens::parse(TOKENS).unwrap()).with_identities(identities())
    })
    .await;
    let base = format!("http://{}", parked.addr);
    let driver = start_driver(&chromedriver);
    let browser = open_browser(&driver, &chromium).await;
    let outcome = async {
        assert!(sign_in(&browser, &base, M_ROSSI).await.contains("m.rossi"));
        open_record(&browser, &base, &parked.key).await;
        let said = act(&browser, "approve").await;
        assert!(
            said.contains("m.rossi (person `maria`) requested this call") && said.contains("as `00u1abc`"),
            "{said}"
        );
        assert!(said.contains("four eyes"), "{said}");
        assert_eq!(shown_text(&browser, "#state").await, "awaiting-approval");
    };
    let result = tokio::time::timeout(std::time::Duration::from_secs(120), outcome).await;
    let _ = browser.close().await;
    drop(driver);
    result.expect("the browser walk-through took over two minutes");
    let rec = parked.store.get(&parked.key).await.unwrap().unwrap();
    assert_eq!(rec.state, effect_tool::RecordState::AwaitingApproval);
}
