//! Protected values over MCP (issue 29 item 11, issue 30 item 4):
//! - a `#[sensitive]` argument reaches no log, whatever the filter: rmcp logs whole requests
//!   at DEBUG and TRACE, so the server seals sensitive values before rmcp sees them. Served over
//!   an in-process stdio-like pipe, with a subscriber that captures every event of every target
//!   at TRACE, the card number is in no line, yet the tool receives it;
//! - a tool that takes a `#[secret]` value gets it from the server's `with_run_values`; a server
//!   that has such a tool and gives its runs no values refuses to start, naming the tool and
//!   the value, instead of listing a tool every call of which fails.
//!
//! A binary of its own: the log test installs a subscriber, and tracing caches which events are
//! wanted process-wide, so other tests' subscribers (or none) running beside it in a shared
//! binary can make rmcp's DEBUG lines vanish from its capture (seen in the former `declarations`
//! binary under load).

#![cfg(feature = "mcp")]

mod common;

use std::sync::{Arc, Mutex};

use common::capture::Capture;
use common::mcp::{INITIALIZE, INITIALIZED, exchange, serve_pipe as serve};
use effect_tool::adapters::mcp::{McpServeError, McpServer};
use effect_tool::{Engine, MemoryStore, ToolError, Toolkit, tools};

/// The payment gateway's API key, which the application holds.
#[derive(Clone)]
struct GatewayKey(String);

/// The charges the gateway received: card, amount, key.
#[derive(Default)]
struct Gateway {
    charges: Mutex<Vec<(String, u64, String)>>,
}

#[tools]
impl Gateway {
    /// Charge a card.
    #[tool(effect = "idempotent", key(order_id))]
    async fn charge(
        &self,
        /// The order.
        order_id: String,
        /// The card number.
        #[sensitive]
        card: String,
        /// The amount, in cents.
        amount_cents: u64,
        #[secret] key: GatewayKey,
    ) -> Result<String, ToolError> {
        self.charges.lock().unwrap().push((card, amount_cents, key.0));
        Ok(format!("charged {amount_cents} for {order_id}"))
    }
}

const CARD: &str = "4111-2222-3333-9876";
const API_KEY: &str = "gw-live-key-0123456789";

fn gateway_toolkit(gateway: &Arc<Gateway>) -> Toolkit {
    Toolkit::new().with(gateway.charge_tool())
}

// A current-thread runtime: the server's tasks run on this thread, under the captured subscriber.
#[tokio::test]
async fn a_sensitive_argument_reaches_no_log_at_trace_and_a_secret_comes_from_the_servers_run_values() {
    let capture = Capture::default();
    let _guard = tracing::subscriber::set_default(capture.subscriber());

    let gateway = Arc::new(Gateway::default());
    let server = McpServer::new(gateway_toolkit(&gateway), Engine::new(MemoryStore::new()))
        .with_run_values(|_principal, run| run.with_value(GatewayKey(API_KEY.to_owned())));
    let (mut to, mut from, serving) = serve(server);
    let answer = exchange(&mut to, &mut from, INITIALIZE).await.unwrap();
    assert!(answer["result"]["serverInfo"].is_object(), "{answer}");
    exchange(&mut to, &mut from, INITIALIZED).await;
    let call = serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "charge", "arguments": {"order_id": "A-7", "card": CARD, "amount_cents": 500}}});
    let answer = exchange(&mut to, &mut from, &call.to_string()).await.unwrap();
    assert_eq!(answer["result"]["isError"], serde_json::json!(false), "{answer}");
    assert_eq!(
        answer["result"]["content"][0]["text"], "charged 500 for A-7",
        "{answer}"
    );
    drop((to, from));
    serving.await.unwrap().unwrap();

    // The gateway got the card as sent, and the application's key.
    assert_eq!(
        *gateway.charges.lock().unwrap(),
        vec![(CARD.to_owned(), 500, API_KEY.to_owned())]
    );
    let log = capture.text();
    // rmcp logged the request at DEBUG ...
    assert!(
        log.lines().any(|l| l.contains("received request") && l.contains("A-7")),
        "rmcp's request lines are missing:\n{log}"
    );
    // ... with the card sealed, and neither it nor the key is anywhere.
    assert!(log.contains("effect-tool/sealed"), "{log}");
    assert!(!log.contains(CARD), "the card number reached the log:\n{log}");
    assert!(!log.contains("9876"), "the card number reached the log:\n{log}");
    assert!(!log.contains(API_KEY), "the gateway key reached the log:\n{log}");
}

#[tokio::test]
async fn a_server_with_a_tool_that_takes_a_secret_and_no_run_values_refuses_to_start() {
    let gateway = Arc::new(Gateway::default());
    let server = McpServer::new(gateway_toolkit(&gateway), Engine::new(MemoryStore::new()));
    let (to, from, serving) = serve(server.clone());
    let refused = serving.await.unwrap().unwrap_err();
    drop((to, from));
    let message = refused.to_string();
    assert!(matches!(refused, McpServeError::MissingValues { .. }), "{refused:?}");
    assert!(message.contains("`charge` takes a `GatewayKey`"), "{message}");
    assert!(message.contains("with_run_values"), "{message}");
    #[cfg(feature = "mcp-http")]
    {
        let refused = server.bind_http("127.0.0.1:0".parse().unwrap()).await.unwrap_err();
        assert!(matches!(refused, McpServeError::MissingValues { .. }), "{refused:?}");
    }
}
