//! Who may read the journal through the console, and whom four eyes keeps from deciding: real
//! HTTP requests to a real console server over a SQLite journal.
#![cfg(all(feature = "console", feature = "sqlite"))]

use crate::common;

use std::net::SocketAddr;

use common::console::{call, parked_refund};
use common::http::encode;
use effect_tool::ops::console::{Console, StaticTokens};

const MARIA: &str = "tok-maria-manager-0001";
const OLAF: &str = "tok-olaf-operator-0002";
const VERA: &str = "tok-vera-viewer-000004";
const NOBODY: &str = "tok-nobody-norole-0005";

/// Maria is a manager who calls tools over MCP as the principal `00u1abc` (her identity
/// provider's `sub`); Olaf an operator; Vera a viewer; Nobody holds no role.
const TOKENS: &str = "\
tok-maria-manager-0001 maria manager as=00u1abc
tok-olaf-operator-0002 olaf operator
tok-vera-viewer-000004 vera viewer
tok-nobody-norole-0005 nobody
";

/// A journal with a refund parked in `run`, and a console over it made by `configure`.
async fn parked(run: &str, configure: impl FnOnce(Console) -> Console) -> (SocketAddr, String, tempfile::TempDir) {
    let tokens = StaticTokens::parse(TOKENS).unwrap();
    let parked = parked_refund(run, |store| configure(Console::new(store, tokens))).await;
    (parked.addr, parked.key, parked.dir)
}

#[tokio::test]
async fn an_identity_without_a_role_reads_nothing_but_who_it_is() {
    let (addr, key, _dir) = parked("desk", |c| c).await;
    let record = format!("/api/record?key={}", encode(&key));

    let me = call(addr, NOBODY, "GET", "/api/me", "").await;
    assert_eq!((me.status, &me.json()["name"]), (200, &serde_json::json!("nobody")));
    for path in ["/api/records", record.as_str()] {
        let refused = call(addr, NOBODY, "GET", path, "").await;
        assert_eq!(refused.status, 403, "{path}: {}", refused.body);
        assert!(!refused.body.contains("100"), "{}", refused.body);
        assert!(
            refused.json()["error"].as_str().unwrap().contains("needs a role"),
            "{}",
            refused.body
        );
    }
    // Any role reads, by default.
    let shown = call(addr, VERA, "GET", &record, "").await;
    assert_eq!(
        (shown.status, &shown.json()["record"]["input"]),
        (200, &serde_json::json!(100))
    );
}

#[tokio::test]
async fn reader_roles_narrow_who_reads() {
    let (addr, key, _dir) = parked("desk", |c| c.with_reader_roles(["operator", "manager"])).await;
    let record = format!("/api/record?key={}", encode(&key));
    let refused = call(addr, VERA, "GET", &record, "").await;
    assert_eq!(refused.status, 403, "{}", refused.body);
    assert!(
        refused.json()["error"].as_str().unwrap().contains("operator, manager"),
        "{}",
        refused.body
    );
    assert_eq!(call(addr, VERA, "GET", "/api/records", "").await.status, 403);
    assert_eq!(call(addr, OLAF, "GET", "/api/records", "").await.status, 200);
    assert_eq!(call(addr, MARIA, "GET", &record, "").await.status, 200);
}

#[tokio::test]
async fn four_eyes_knows_an_operator_by_the_mcp_principal_they_call_tools_as() {
    // The MCP server scopes principal `00u1abc`'s runs as `00u1abc/<run>`: this call is
    // maria's own, requested under another name than her console one.
    let (addr, key, _dir) = parked("00u1abc/checkout", |c| c).await;
    for action in ["/api/approve", "/api/deny"] {
        let body = serde_json::json!({ "key": key, "reason": "mine" }).to_string();
        let own = call(addr, MARIA, "POST", action, &body).await;
        assert_eq!(own.status, 403, "{action}: {}", own.body);
        assert!(
            own.json()["hint"].as_str().unwrap().contains("four eyes"),
            "{}",
            own.body
        );
    }
    let shown = call(addr, OLAF, "GET", &format!("/api/record?key={}", encode(&key)), "").await;
    assert_eq!(shown.json()["state"], "awaiting-approval");
}
