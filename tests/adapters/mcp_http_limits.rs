//! Fair and bounded MCP over HTTP: one principal holding slow calls does not hold up another
//! principal's instant call, and a call beyond a principal's limit and queue is answered "busy"
//! at once instead of waiting. Tested with the official Python `mcp` SDK's Streamable HTTP
//! client (`tests/mcp_client/fairness.py`), the slow calls blocked on a barrier the client
//! releases only after the instant call completed: ordering, not timing.
//!
//! Needs `python3 -m pip install -r tests/mcp_client/requirements.txt` (scripts/test.sh does it).

#![cfg(feature = "mcp-http")]

use crate::common;

use common::python::{client_passed, python, require_http_client, run_client};
use effect_tool::adapters::mcp::{BearerTokens, McpHttpConfig, McpLimits, McpServer};
use effect_tool::{Engine, MemoryStore, ToolError, Toolkit, tools};
use tokio::sync::watch;

/// Slow calls wait until `release` opens the barrier.
struct Bench {
    open: watch::Sender<bool>,
    /// Slow calls that have started (hold a place).
    entered: std::sync::atomic::AtomicUsize,
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
        self.entered.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
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

    /// How many slow calls have started.
    #[tool(effect = "pure")]
    async fn entered(&self) -> Result<String, ToolError> {
        Ok(self.entered.load(std::sync::atomic::Ordering::SeqCst).to_string())
    }

    /// Release every slow call.
    #[tool(effect = "pure")]
    async fn release(&self) -> Result<String, ToolError> {
        self.open.send_replace(true);
        Ok("released".to_owned())
    }
}

fn bench_toolkit() -> Toolkit {
    let bench = std::sync::Arc::new(Bench {
        open: watch::channel(false).0,
        entered: std::sync::atomic::AtomicUsize::new(0),
    });
    Toolkit::new()
        .with(bench.slow_tool())
        .with(bench.instant_tool())
        .with(bench.entered_tool())
        .with(bench.release_tool())
}

const ALICE: &str = "alice-token-0123456789abcdef";
const BOB: &str = "bob-token-0123456789abcdef";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_principals_slow_calls_do_not_hold_up_another_principals_instant_call() {
    let python = python();
    require_http_client(&python);
    let (limit, queue) = (2, 1);
    let toolkit = bench_toolkit();
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

    let out = run_client(
        &python,
        "fairness.py",
        [
            handle.url(),
            ALICE.into(),
            BOB.into(),
            limit.to_string(),
            queue.to_string(),
        ],
    )
    .await;
    handle.shutdown().await.unwrap();
    let stdout = client_passed(&out);
    assert!(stdout.contains("is answered busy at once"), "{stdout}");
    assert!(
        stdout.contains("B's instant call completed while A's slow calls were still blocked"),
        "{stdout}"
    );
    assert!(stdout.contains("A's 3 admitted calls all completed"), "{stdout}");
}

const CAROL: &str = "carol-token-0123456789abcdef";

/// Issue 29.6: with the default limits (8 places, 4 per principal), two principals' slow calls
/// took every place, and a third principal's instant call waited, then was answered busy. Now a
/// principal that already runs calls leaves places for principals that run none: Alice holds
/// 4, Bob 2 (his third would leave fewer than the 2 kept free), and Carol's call is served
/// while all of theirs are still blocked; their other calls wait their turn and none is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_principals_slow_calls_leave_a_place_for_a_third_principals_instant_call() {
    let python = python();
    require_http_client(&python);
    let limits = McpLimits::default();
    assert_eq!((limits.total, limits.per_principal, limits.reserve()), (8, 4, 2));
    let auth = BearerTokens::new()
        .with_token(ALICE, "alice")
        .with_token(BOB, "bob")
        .with_token(CAROL, "carol");
    let handle = McpServer::new(bench_toolkit(), Engine::new(MemoryStore::new()))
        .bind_http_with(
            "127.0.0.1:0".parse().unwrap(),
            McpHttpConfig::default().with_authenticator(auth),
        )
        .await
        .unwrap();
    let (slow_each, held) = (6, 4 + 2);
    let out = run_client(
        &python,
        "fairness.py",
        [
            "three".to_owned(),
            handle.url(),
            ALICE.into(),
            BOB.into(),
            CAROL.into(),
            slow_each.to_string(),
            held.to_string(),
        ],
    )
    .await;
    handle.shutdown().await.unwrap();
    let stdout = client_passed(&out);
    assert!(
        stdout.contains("with A's and B's slow calls holding 6 places, C's instant call was served"),
        "{stdout}"
    );
    assert!(
        stdout.contains("all 12 of A's and B's calls completed, none refused"),
        "{stdout}"
    );
}
