//! Fair and bounded MCP over HTTP: one principal holding slow calls does not hold up another
//! principal's instant call, and a call beyond a principal's limit and queue is answered "busy"
//! at once instead of waiting. Tested with the official Python `mcp` SDK's Streamable HTTP
//! client (`tests/mcp_client/fairness.py`), the slow calls blocked on a barrier the client
//! releases only after the instant call completed: ordering, not timing.
//!
//! Needs `python3 -m pip install -r tests/mcp_client/requirements.txt` (scripts/test.sh does it).

#![cfg(feature = "mcp-http")]

use crate::common;

use common::python::{client_passed, client_script, python, require_sdk};
use effect_tool::mcp::{BearerTokens, McpHttpConfig, McpLimits, McpServer};
use effect_tool::{Engine, MemoryStore, ToolError, Toolkit, tools};
use tokio::sync::watch;

/// Slow calls wait until `release` opens the barrier.
struct Bench {
    open: watch::Sender<bool>,
}

#[tools]
impl Bench {
    /// Wait until released, then answer.
    #[tool(effect = "pure")]
    async fn slow(
        &self,
        /// Which call this is.
        n: u32,
    ) -> Result<String, ToolError> {
        let mut open = self.open.subscribe();
        open.wait_for(|o| *o)
            .await
            .map_err(|_| ToolError::definitive("the barrier was dropped"))?;
        Ok(format!("slow {n}"))
    }

    /// Answer at once.
    #[tool(effect = "pure")]
    async fn instant(&self) -> Result<String, ToolError> {
        Ok("instant".to_owned())
    }

    /// Release every slow call.
    #[tool(effect = "pure")]
    async fn release(&self) -> Result<String, ToolError> {
        self.open.send_replace(true);
        Ok("released".to_owned())
    }
}

const ALICE: &str = "alice-token-0123456789abcdef";
const BOB: &str = "bob-token-0123456789abcdef";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_principals_slow_calls_do_not_hold_up_another_principals_instant_call() {
    let python = python();
    require_sdk(
        &python,
        "from mcp.client.streamable_http import streamable_http_client",
        "the Python MCP SDK (with its Streamable HTTP client)",
    );
    let (limit, queue) = (2, 1);
    let bench = std::sync::Arc::new(Bench {
        open: watch::channel(false).0,
    });
    let toolkit = Toolkit::new()
        .with(bench.slow_tool())
        .with(bench.instant_tool())
        .with(bench.release_tool());
    // In all, room for more than one principal's share: the principal's limit is what binds.
    let limits = McpLimits {
        total: 3,
        per_principal: limit,
        queue,
        ..McpLimits::default()
    };
    let auth = BearerTokens::new().with_token(ALICE, "alice").with_token(BOB, "bob");
    let handle = McpServer::new(toolkit, Engine::new(MemoryStore::new()))
        .with_limits(limits)
        .bind_http_with(
            "127.0.0.1:0".parse().unwrap(),
            McpHttpConfig::default().with_authenticator(auth),
        )
        .await
        .unwrap();

    let out = tokio::process::Command::new(&python)
        .arg(client_script("fairness.py"))
        .args([
            handle.url(),
            ALICE.into(),
            BOB.into(),
            limit.to_string(),
            queue.to_string(),
        ])
        .kill_on_drop(true)
        .output()
        .await
        .expect("python3 runs");
    handle.shutdown().await.unwrap();
    let stdout = client_passed(&out);
    assert!(stdout.contains("is answered busy at once"), "{stdout}");
    assert!(
        stdout.contains("B's instant call completed while A's slow calls were still blocked"),
        "{stdout}"
    );
    assert!(stdout.contains("A's 3 admitted calls all completed"), "{stdout}");
}
