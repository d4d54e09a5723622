//! The operator API as a script (or the web console) uses it over HTTP: nothing without an
//! identity, approvals only by the role the tool names and never by the call's own requester,
//! resolutions checked against the tool's output type, cross-site requests refused, every action
//! audited under the operator's name. The agent's next call then runs or replays, counted by
//! ledgers the engine cannot see.
#![cfg(all(feature = "console", feature = "sqlite"))]

use crate::common;

use std::net::SocketAddr;
use std::sync::Arc;

use common::console::{get, post, serve};
use common::desk::{ApprovedRefund as Refund, SendEmail};
use common::http::{encode, request};
use common::ledger::Downstream;
use effect_tool::ops::console::{Console, Identity, StaticTokens};
use effect_tool::store::sqlite::SqliteStore;
use effect_tool::{CallOptions, Engine, RunContext, Store, Toolkit};

const MARIA: &str = "tok-maria-manager-0001"; // manager, operator
const OLAF: &str = "tok-olaf-operator-0002"; // operator
const IVY: &str = "tok-ivy-intern-000003"; // viewer: reads, acts on nothing

/// The (action, actor) pairs of a record's audit trail, as the record page shows them.
async fn audit(addr: SocketAddr, key: &str) -> Vec<(String, String)> {
    let page = get(addr, IVY, &format!("/api/record?key={}", encode(key))).await.json();
    page["audit"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["action"].as_str().unwrap().to_owned(),
                e["actor"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[tokio::test]
async fn an_operator_approves_a_parked_refund_and_resolves_an_email_in_doubt() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("journal.db")).unwrap());
    let (bank, mail) = (Arc::new(Downstream::default()), Arc::new(Downstream::default()));
    let engine = Engine::new(store.clone());
    let toolkit = Toolkit::new().with(Refund(bank.clone())).with(SendEmail(mail.clone()));
    let tokens = StaticTokens::new()
        .with(MARIA, Identity::new("maria", ["manager", "operator"]))
        .with(OLAF, Identity::new("olaf", ["operator"]))
        .with(IVY, Identity::new("ivy", ["viewer"]));
    let addr = serve(Console::new(store.clone(), tokens).with_toolkit(&toolkit)).await;

    // The agent: a refund parks for a manager; an email goes in doubt. A run of maria's own
    // (as the MCP server scopes a principal's runs) parks a refund too.
    let run = RunContext::new("desk");
    let refund = Refund(bank.clone());
    let email = SendEmail(mail.clone());
    let parked = engine
        .call(&refund, &run, CallOptions::default(), 5000)
        .await
        .unwrap_err();
    let refund_key = parked.as_approval_pending().unwrap().key.clone();
    assert!(
        engine
            .call(&email, &run, CallOptions::default(), "ann@example.com".into())
            .await
            .is_err()
    );
    let own = RunContext::new("maria/r1");
    let own_key = engine
        .call(&refund, &own, CallOptions::default(), 77)
        .await
        .unwrap_err()
        .as_approval_pending()
        .unwrap()
        .key
        .clone();

    // No identity, no answer.
    let anonymous = request(addr, "GET", "/api/records", &[], "").await.unwrap();
    assert_eq!(anonymous.status, 401);
    assert_eq!(anonymous.header("www-authenticate"), Some("Bearer"));
    assert_eq!(get(addr, "tok-nobody-0000000000", "/api/records").await.status, 401);
    // Who am I; the pages are served to anyone (they hold no data) and may not be framed.
    let me = get(addr, OLAF, "/api/me").await.json();
    assert_eq!(
        (&me["name"], &me["roles"], &me["can_compensate"]),
        (
            &serde_json::json!("olaf"),
            &serde_json::json!(["operator"]),
            &serde_json::json!(false)
        )
    );
    let page = request(addr, "GET", "/", &[], "").await.unwrap();
    assert_eq!(page.status, 200);
    assert!(page.body.contains("effect-tool console") && !page.body.contains(&refund_key));
    let csp = page.header("content-security-policy").unwrap();
    assert!(
        csp.contains("script-src 'self'") && csp.contains("frame-ancestors 'none'"),
        "{csp}"
    );
    // Compensation needs the engine (this console has none): said, not attempted.
    let abandon = serde_json::json!({"run": "desk"});
    assert_eq!(post(addr, OLAF, "/api/compensate", abandon).await.status, 501);

    // The list: what needs a person, newest first, paged.
    let list = get(addr, IVY, "/api/records").await;
    assert_eq!(list.status, 200, "{}", list.body);
    let list = list.json();
    assert_eq!(list["total"], 3, "{list}");
    let states: Vec<&str> = list["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["state"].as_str().unwrap())
        .collect();
    assert_eq!(states.iter().filter(|s| **s == "awaiting-approval").count(), 2);
    assert!(states.contains(&"in-doubt"));
    let page = get(addr, IVY, "/api/records?limit=2").await.json();
    assert_eq!(
        (page["records"].as_array().unwrap().len(), page["next_offset"].as_u64()),
        (2, Some(2))
    );
    let in_doubt = get(addr, IVY, "/api/records?state=in-doubt&tool=send_email")
        .await
        .json();
    let email_key = in_doubt["records"][0]["key"].as_str().unwrap().to_owned();
    assert_eq!(get(addr, IVY, "/api/records?state=sideways").await.status, 400);

    // The record page: input, state, audit.
    let shown = get(addr, IVY, &format!("/api/record?key={}", encode(&refund_key)))
        .await
        .json();
    assert_eq!(shown["record"]["input"], 5000);
    assert_eq!(shown["state"], "awaiting-approval");

    // Approving needs the tool's role; the requester cannot approve their own call. An
    // approval names the input it approves (the fingerprint the page showed).
    let fingerprint = shown["record"]["fingerprint"].clone();
    let own_fingerprint = get(addr, IVY, &format!("/api/record?key={}", encode(&own_key)))
        .await
        .json()["record"]["fingerprint"]
        .clone();
    let denied = post(
        addr,
        OLAF,
        "/api/approve",
        serde_json::json!({"key": refund_key, "fingerprint": fingerprint}),
    )
    .await;
    assert_eq!(denied.status, 403, "{}", denied.body);
    assert!(
        denied.json()["error"]
            .as_str()
            .unwrap()
            .contains("needs role `manager`")
    );
    let own_call = post(
        addr,
        MARIA,
        "/api/approve",
        serde_json::json!({"key": own_key, "fingerprint": own_fingerprint}),
    )
    .await;
    assert_eq!(own_call.status, 403, "{}", own_call.body);
    assert!(own_call.json()["hint"].as_str().unwrap().contains("four eyes"));
    // A page of another site cannot act, even with maria's token in a script it runs.
    let auth = format!("Authorization: Bearer {MARIA}");
    let body = serde_json::json!({"key": refund_key, "fingerprint": fingerprint}).to_string();
    let forged = request(
        addr,
        "POST",
        "/api/approve",
        &[&auth, "Content-Type: application/json", "Origin: http://evil.example"],
        &body,
    )
    .await
    .unwrap();
    assert_eq!(forged.status, 403, "{}", forged.body);
    let form = request(
        addr,
        "POST",
        "/api/approve",
        &[&auth, "Content-Type: text/plain"],
        &body,
    )
    .await
    .unwrap();
    assert_eq!(form.status, 415, "{}", form.body);
    assert_eq!(bank.requests(), 0);

    let approved = post(
        addr,
        MARIA,
        "/api/approve",
        serde_json::json!({"key": refund_key, "fingerprint": fingerprint}),
    )
    .await;
    assert_eq!(approved.status, 200, "{}", approved.body);
    assert_eq!(approved.json()["record"]["state"], "approved");
    // The agent's next call runs the refund, once.
    assert_eq!(
        engine.call(&refund, &run, CallOptions::default(), 5000).await.unwrap(),
        5001
    );
    assert_eq!(
        engine.call(&refund, &run, CallOptions::default(), 5000).await.unwrap(),
        5001
    );
    assert_eq!(bank.requests(), 1);

    // Resolving needs the operator role, and an output of the tool's type.
    let intern = post(
        addr,
        IVY,
        "/api/resolve",
        serde_json::json!({"key": email_key, "verdict": "applied", "output": "msg-1"}),
    )
    .await;
    assert_eq!(intern.status, 403);
    let wrong = post(
        addr,
        OLAF,
        "/api/resolve",
        serde_json::json!({"key": email_key, "verdict": "applied", "output": 42}),
    )
    .await;
    assert_eq!(wrong.status, 422, "{}", wrong.body);
    assert!(
        wrong.json()["error"]
            .as_str()
            .unwrap()
            .contains("not an output of `send_email`")
    );
    let resolved = post(
        addr,
        OLAF,
        "/api/resolve",
        serde_json::json!({"key": email_key, "verdict": "applied", "output": "msg-1"}),
    )
    .await;
    assert_eq!(resolved.status, 200, "{}", resolved.body);
    let again = post(
        addr,
        OLAF,
        "/api/resolve",
        serde_json::json!({"key": email_key, "verdict": "not-applied"}),
    )
    .await;
    assert_eq!(again.status, 409, "a verdict stands: {}", again.body);
    // The agent's retry replays the person's verdict: no second email.
    assert_eq!(
        engine
            .call(&email, &run, CallOptions::default(), "ann@example.com".into())
            .await
            .unwrap(),
        "msg-1"
    );
    assert_eq!(mail.requests(), 1);

    // Every action is in the audit trail under the operator's name.
    let by = audit(addr, &refund_key).await;
    assert!(by.contains(&("approve".into(), "maria".into())), "{by:?}");
    let by = audit(addr, &email_key).await;
    assert!(by.contains(&("resolve".into(), "olaf".into())), "{by:?}");
    assert_eq!(get(addr, IVY, "/api/record?key=nope").await.status, 404);
}
