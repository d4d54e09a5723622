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

use common::python::{client_passed, client_script, python, require_sdk};
use effect_tool::adapters::mcp::{BearerTokens, McpHttpConfig, McpHttpHandle, McpServer};
use effect_tool::{EffectCtx, Engine, MemoryStore, ToolError, Toolkit, tools};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

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
    require_sdk(
        &python,
        "from mcp.client.streamable_http import streamable_http_client",
        "the Python MCP SDK (with its Streamable HTTP client)",
    );
    let shop = Arc::new(Shop::default());
    let handle = shop_server(&shop).await;
    let out = tokio::process::Command::new(&python)
        .arg(client_script("principal_keys.py"))
        .args([handle.url(), ALICE.into(), BOB.into()])
        .kill_on_drop(true)
        .output()
        .await
        .expect("python3 runs");
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

/// One HTTP/1.1 request (`Connection: close`): the status, the headers (lower-case names) and
/// the body.
async fn http(addr: SocketAddr, request: String) -> (u16, Vec<(String, String)>, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.unwrap();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines.next().unwrap().split(' ').nth(1).unwrap().parse().unwrap();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    (status, headers, body.to_owned())
}

/// A request to `/mcp` as `token`, in `session` if given.
fn request(addr: SocketAddr, method: &str, token: &str, session: Option<&str>, body: &str) -> String {
    let session = session.map(|s| format!("Mcp-Session-Id: {s}\r\n")).unwrap_or_default();
    format!(
        "{method} /mcp HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n{session}Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2025-06-18\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw-http","version":"0"}}}"#;
const INITIALIZED: &str = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
const LIST: &str = r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#;

#[tokio::test]
async fn another_principal_can_neither_post_into_nor_delete_a_session() {
    let shop = Arc::new(Shop::default());
    let handle = shop_server(&shop).await;
    let addr = handle.local_addr();

    let (status, headers, body) = http(addr, request(addr, "POST", ALICE, None, INITIALIZE)).await;
    assert_eq!(status, 200, "{body}");
    let session = headers
        .iter()
        .find(|(k, _)| k == "mcp-session-id")
        .map(|(_, v)| v.clone())
        .expect("a session id");
    let (status, _, body) = http(addr, request(addr, "POST", ALICE, Some(&session), INITIALIZED)).await;
    assert_eq!(status, 202, "{body}");

    // Bob, who knows the session id, is told there is no such session, whatever he sends.
    for (method, body) in [("POST", LIST), ("POST", INITIALIZED), ("GET", ""), ("DELETE", "")] {
        let (status, _, answer) = http(addr, request(addr, method, BOB, Some(&session), body)).await;
        assert_eq!(status, 404, "Bob's {method} {body}: {answer}");
        assert!(!answer.contains("reserve_stock"), "{answer}");
    }
    // Alice's session is still there, and still hers.
    let (status, _, body) = http(addr, request(addr, "POST", ALICE, Some(&session), LIST)).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("reserve_stock"), "{body}");
    let (status, _, body) = http(addr, request(addr, "DELETE", ALICE, Some(&session), "")).await;
    assert!(status == 200 || status == 202 || status == 204, "{status} {body}");
    handle.shutdown().await.unwrap();
}
