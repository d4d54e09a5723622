//! The MCP server over Streamable HTTP, tested by an external client: the support desk of
//! `examples/mcp_server.rs` is served in-process on a free port of 127.0.0.1, and the official
//! Python `mcp` SDK's Streamable HTTP client lists its tools, calls an idempotent tool, and
//! calls it again from a new HTTP session, counting effects in a ledger file the desk's tools
//! append to (see `tests/mcp_client/http_client.py`).
//!
//! Needs `python3 -m pip install -r tests/mcp_client/requirements.txt` (scripts/test.sh does it).

#![cfg(all(feature = "mcp-http", feature = "sqlite"))]

mod common;

use common::python::{client_passed, client_script, python, require_sdk};
use effect_tool::mcp::{McpServeError, McpServer};
use effect_tool::store::sqlite::SqliteStore;
use effect_tool::{Engine, MemoryStore, Toolkit};

/// The example's support desk (its `main` is not used here).
#[allow(dead_code)]
#[path = "../examples/mcp_server.rs"]
mod example;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_python_http_client_retries_a_call_from_a_new_session_with_one_effect() {
    let python = python();
    require_sdk(
        &python,
        "from mcp.client.streamable_http import streamable_http_client",
        "the Python MCP SDK (with its Streamable HTTP client)",
    );

    let dir = tempfile::tempdir().unwrap();
    let ledger = dir.path().join("ledger.txt");
    let engine = Engine::new(SqliteStore::open(dir.path().join("journal.db")).unwrap());
    let server = McpServer::new(example::support_desk(ledger.clone()), engine)
        .with_server_info("effect-tool-support-desk", env!("CARGO_PKG_VERSION"));
    let handle = server.bind_http("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let url = handle.url();
    assert!(url.starts_with("http://127.0.0.1:") && url.ends_with("/mcp"), "{url}");

    let script = client_script("http_client.py");
    let out = tokio::process::Command::new(&python)
        .arg(&script)
        .arg(&url)
        .env("EFFECT_TOOL_LEDGER", &ledger)
        .kill_on_drop(true)
        .output()
        .await
        .expect("python3 runs");
    handle.shutdown().await.unwrap();
    let stdout = client_passed(&out);
    assert!(
        stdout.contains("issue_refund retried from a new session: recorded result, no second refund"),
        "{stdout}"
    );
    assert!(stdout.contains("bad arguments come back as isError"), "{stdout}");
    assert!(stdout.contains("ok: two connections, two MCP sessions"), "{stdout}");

    // Checked here too, independently of the client: four refund calls over two sessions, one
    // refund per run (the client's run from `_meta`, the server's own run).
    let text = std::fs::read_to_string(&ledger).unwrap();
    let refunds: Vec<&str> = text.lines().filter(|l| l.starts_with("refund ")).collect();
    assert_eq!(refunds.len(), 2, "ledger:\n{text}");
    assert!(refunds[0].ends_with(" A-1001 1500"), "ledger:\n{text}");
    assert!(refunds[1].ends_with(" A-1002 700"), "ledger:\n{text}");
    assert_eq!(
        text.lines().count(),
        2,
        "only the two refunds reach the world; ledger:\n{text}"
    );
}

#[tokio::test]
async fn http_server_reports_its_port_says_what_to_do_when_the_address_is_taken_and_shuts_down() {
    let server = McpServer::new(Toolkit::new(), Engine::new(MemoryStore::new()));
    let handle = server.clone().bind_http("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let addr = handle.local_addr();
    assert_ne!(addr.port(), 0);
    assert_eq!(handle.url(), format!("http://{addr}/mcp"));

    let taken = server.bind_http(addr).await.unwrap_err();
    assert!(
        matches!(&taken, McpServeError::Bind { addr: a, source } if *a == addr && source.kind() == std::io::ErrorKind::AddrInUse),
        "{taken:?}"
    );
    let message = taken.to_string();
    assert!(message.contains(&addr.to_string()), "{message}");
    assert!(
        message.contains("pick another port (port 0 picks a free one)"),
        "{message}"
    );

    handle.shutdown().await.unwrap();
    // Once shut down, the address is free again: it can be bound anew. (The kernel may take a
    // moment to release the listening socket, so a few tries are allowed; another process can
    // also take a freed port, which is why this does not check that nothing answers there.)
    let mut rebound = None;
    for _ in 0..100 {
        match std::net::TcpListener::bind(addr) {
            Ok(listener) => {
                rebound = Some(listener);
                break;
            }
            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(10)).await,
        }
    }
    assert!(rebound.is_some(), "{addr} is still taken after shutdown");
}
