//! MCP as a client speaks it on the wire: JSON-RPC lines over an in-process pipe (the stdio
//! transport), and raw Streamable HTTP requests to `/mcp` (as an attacker or a strict client
//! sends them, byte for byte).

use std::net::SocketAddr;

use effect_tool::adapters::mcp::{McpServeError, McpServer};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use super::http::{Answer, request};

/// The 2025-06-18 protocol's `initialize` request (id 1), as a client named `raw-http` sends it.
pub const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw-http","version":"0"}}}"#;
/// The `initialized` notification that follows the answer to [`INITIALIZE`].
pub const INITIALIZED: &str = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
/// A `tools/list` request (id 2).
pub const LIST: &str = r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#;

/// The client's writing end of a pipe to a server.
pub type ToServer = tokio::io::WriteHalf<tokio::io::DuplexStream>;
/// The client's reading end of a pipe from a server.
pub type FromServer = BufReader<tokio::io::ReadHalf<tokio::io::DuplexStream>>;

/// `server` serving one end of a pipe (as over stdio); the client's ends of it, and the serving
/// task (which ends when the client's ends are dropped).
pub fn serve_pipe(server: McpServer) -> (ToServer, FromServer, tokio::task::JoinHandle<Result<(), McpServeError>>) {
    let (client_side, server_side) = tokio::io::duplex(1 << 16);
    let serving = tokio::spawn(server.serve_transport(tokio::io::split(server_side)));
    let (read, write) = tokio::io::split(client_side);
    (write, BufReader::new(read), serving)
}

/// One JSON-RPC line out, and (for a request, which has an `id`) its answer.
pub async fn exchange(to: &mut ToServer, from: &mut FromServer, message: &str) -> Option<serde_json::Value> {
    let message: serde_json::Value = serde_json::from_str(message).unwrap();
    let is_request = message.get("id").is_some();
    to.write_all(format!("{message}\n").as_bytes()).await.unwrap();
    if !is_request {
        return None;
    }
    let mut line = String::new();
    from.read_line(&mut line).await.unwrap();
    Some(serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}")))
}

/// `method /mcp` with `body` and the headers a Streamable HTTP client sends (JSON, both answer
/// types, the protocol version), plus `headers` (`Name: value` lines).
pub async fn post(addr: SocketAddr, method: &str, headers: &[&str], body: &str) -> Answer {
    let mut all = vec![
        "Content-Type: application/json",
        "Accept: application/json, text/event-stream",
        "MCP-Protocol-Version: 2025-06-18",
    ];
    all.extend_from_slice(headers);
    request(addr, method, "/mcp", &all, body).await.unwrap()
}
