//! Principals of one MCP server over Streamable HTTP stay apart (issue 29, items 3 and 7):
//! - a `cross-run` tool whose key comes from the arguments gives each principal its own key,
//!   so no principal reads another's recorded output or pre-empts its next call; a tool that
//!   declares `shared_keys` shares them, and its manifest line says so (tested with the
//!   official Python `mcp` SDK's client, `tests/mcp_client/principal_keys.py`);
//! - an MCP session belongs to the principal that opened it: another principal that posts
//!   into it or deletes it gets `404`, and the session goes on (raw HTTP, as an attacker sends).
//!
//! Needs `python3 -m pip install -r tests/mcp_client/requirements.txt` (scripts/test.sh does it).

#![cfg(feature = "mcp-http")]

use crate::common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::http::Answer;
use common::mcp::{self, INITIALIZE, INITIALIZED, LIST};
use common::python::{client_passed, python, require_http_client, run_client};
use effect_tool::adapters::mcp::{BearerTokens, McpHttpConfig, McpHttpHandle, McpServer};
use effect_tool::{EffectCtx, Engine, MemoryStore, ToolError, Toolkit, tools};

/// Counts the effects, the outside world of these tools.
#[derive(Default)]
struct Shop {
    refunds: AtomicUsize,
    reservations: AtomicUsize,
}

#[tools]
impl Shop {
    /// Refund an order, once ever per order (for one principal).
    #[tool(effect = "idempotent", window = "cross-run", key = |a| format!("order:{}", a.order_id))]
    async fn refund(
        &self,
        ctx: &EffectCtx,
        /// The order.
        order_id: String,
    ) -> Result<String, ToolError> {
        self.refunds.fetch_add(1, Ordering::SeqCst);
        Ok(format!("refunded {order_id} in run {}", ctx.run_id()))
    }

    /// Reserve a unit of stock, once per SKU whoever asks.
    #[tool(effect = "idempotent", window = "cross-run", key = |a| format!("sku:{}", a.sku), shared_keys)]
    async fn reserve_stock(
        &self,
        /// The SKU.
        sku: String,
    ) -> Result<String, ToolError> {
        self.reservations.fetch_add(1, Ordering::SeqCst);
        Ok(format!("reserved {sku}"))
    }
}

const ALICE: &str = "alice-token-0123456789abcdef";
const BOB: &str = "bob-token-0123456789abcdef";

async fn shop_server(shop: &Arc<Shop>) -> McpHttpHandle {
    let toolkit = Toolkit::new().with(shop.refund_tool()).with(shop.reserve_stock_tool());
    let manifest = toolkit.manifest();
    assert!(
        manifest
            .lines()
            .any(|l| l.starts_with("reserve_stock ") && l.contains("window=cross-run principals=shared ttl=")),
        "{manifest}"
    );
    assert!(
        manifest
            .lines()
            .any(|l| l.starts_with("refund ") && l.contains("window=cross-run ttl=")),
        "{manifest}"
    );
    let auth = BearerTokens::new().with_token(ALICE, "alice").with_token(BOB, "bob");
    McpServer::new(toolkit, Engine::new(MemoryStore::new()))
        .bind_http_with(
            "127.0.0.1:0".parse().unwrap(),
            McpHttpConfig::default().with_authenticator(auth),
        )
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_principal_neither_reads_nor_pre_empts_anothers_cross_run_key_unless_the_tool_shares_keys() {
    let python = python();
    require_http_client(&python);
    let shop = Arc::new(Shop::default());
    let handle = shop_server(&shop).await;
    let out = run_client(&python, "principal_keys.py", [handle.url(), ALICE.into(), BOB.into()]).await;
    handle.shutdown().await.unwrap();
    let stdout = client_passed(&out);
    assert!(stdout.contains("ran under B's own key"), "{stdout}");
    assert!(stdout.contains("shares its keys across principals"), "{stdout}");
    assert!(stdout.contains("replays A's own refund"), "{stdout}");
    // One refund per principal; one reservation for both.
    assert_eq!(
        (
            shop.refunds.load(Ordering::SeqCst),
            shop.reservations.load(Ordering::SeqCst)
        ),
        (2, 1)
    );
}

/// `method /mcp` as `token`, in `session` if given.
async fn as_principal(addr: SocketAddr, method: &str, token: &str, session: Option<&str>, body: &str) -> Answer {
    let auth = format!("Authorization: Bearer {token}");
    let session = session.map(|s| format!("Mcp-Session-Id: {s}"));
    let mut headers = vec![auth.as_str()];
    headers.extend(session.as_deref());
    mcp::post(addr, method, &headers, body).await
}

#[tokio::test]
async fn another_principal_can_neither_post_into_nor_delete_a_session() {
    let shop = Arc::new(Shop::default());
    let handle = shop_server(&shop).await;
    let addr = handle.local_addr();

    let opened = as_principal(addr, "POST", ALICE, None, INITIALIZE).await;
    assert_eq!(opened.status, 200, "{}", opened.body);
    let session = opened.header("mcp-session-id").expect("a session id").to_owned();
    let initialized = as_principal(addr, "POST", ALICE, Some(&session), INITIALIZED).await;
    assert_eq!(initialized.status, 202, "{}", initialized.body);

    // Bob, who knows the session id, is told there is no such session, whatever he sends.
    for (method, body) in [("POST", LIST), ("POST", INITIALIZED), ("GET", ""), ("DELETE", "")] {
        let answer = as_principal(addr, method, BOB, Some(&session), body).await;
        assert_eq!(answer.status, 404, "Bob's {method} {body}: {}", answer.body);
        assert!(!answer.body.contains("reserve_stock"), "{}", answer.body);
    }
    // Alice's session is still there, and still hers.
    let listed = as_principal(addr, "POST", ALICE, Some(&session), LIST).await;
    assert_eq!(listed.status, 200, "{}", listed.body);
    assert!(listed.body.contains("reserve_stock"), "{}", listed.body);
    let closed = as_principal(addr, "DELETE", ALICE, Some(&session), "").await;
    assert!(
        closed.status == 200 || closed.status == 202 || closed.status == 204,
        "{} {}",
        closed.status,
        closed.body
    );
    handle.shutdown().await.unwrap();
}
