//! An MCP server for a [`Toolkit`], on the official Rust SDK (`rmcp`). Feature `mcp`.
//!
//! Every `tools/call` goes through the [`Engine`] (via the toolkit's [`Dispatcher`]): a client
//! that retries a call, or two clients that send the same call, get one effect. `tools/list`
//! returns each tool's `inputSchema`, the annotations its effect class implies
//! ([`crate::toolkit::mcp_annotations`]) and the declaration under `_meta`
//! (`effect-tool/class`, `effect-tool/key`, `effect-tool/window`, `effect-tool/approval`).
//!
//! ```no_run
//! # async fn serve(toolkit: effect_tool_core::Toolkit) -> Result<(), effect_tool_core::mcp::McpServeError> {
//! use effect_tool_core::{Engine, MemoryStore, mcp::McpServer};
//! McpServer::new(toolkit, Engine::new(MemoryStore::new()))
//!     .with_run_id("support-bot")
//!     .serve_stdio()
//!     .await
//! # }
//! ```
//!
//! # Which run a call belongs to
//!
//! Effect keys are scoped by run (see [`crate::key`]). The server takes the run from the
//! request's `_meta` when the client sends one, else from its configuration:
//!
//! | `_meta` field (first found wins) | meaning |
//! |---|---|
//! | `effect-tool/run_id`, `run_id` | the run id |
//! | `effect-tool/thread_id`, `thread_id` | the conversation thread (for `window = "thread"`) |
//! | `effect-tool/call_id`, `tool_call_id` | the model's tool-call id (else `mcp-<JSON-RPC id>`) |
//!
//! Without a run id in `_meta`, calls run in [`McpServer::with_run_id`]'s run, by default one
//! run per server process (`mcp-<start time>-<random>`): a client that sends the same call
//! twice to one server gets one effect.
//!
//! # Results
//!
//! A tool's output comes back as text content (a string output as is, anything else as JSON)
//! plus `structuredContent` when the output is a JSON object. Rejected calls (malformed
//! arguments, unknown tool, schema violation), blocked calls, calls awaiting approval and
//! failures come back as tool results with `isError: true` and a message the model can act on
//! ([`crate::ToolResult::content`]). Every result's `_meta` carries
//! `effect-tool/disposition` (`executed`, `replayed`, `shared`, `blocked`, ...),
//! `effect-tool/outcome` (`output`, `rejected`, `blocked`, `awaiting-approval`, `failed`,
//! `panicked`) and `effect-tool/key` when the call reached the journal.
//!
//! The client's `notifications/cancelled` cancels the call's run context, which reaches the
//! tool ([`crate::EffectCtx::cancellation`]).
//!
//! # Streamable HTTP
//!
//! With feature `mcp-http`, the server also speaks MCP's Streamable HTTP transport (rmcp's
//! `StreamableHttpService`, served by axum), for remote deployments:
//!
//! - `McpServer::serve_http(addr)` listens on an address and serves `http://<addr>/mcp`;
//!   `McpServer::bind_http(addr)` does the same but returns once bound, with an `McpHttpHandle`
//!   that tells the bound address (bind port 0 for a free one) and shuts the server down;
//! - `McpServer::http_service(config)` (a tower service) and `McpServer::http_router(config)` (an
//!   axum router at `/mcp`) mount it in your own HTTP server, next to your other routes.
//!
//! Every HTTP session shares this server's dispatcher, engine and journal, so a client that
//! retries a call from a new session (after a dropped connection, a restart of the client)
//! gets the recorded result, not a second effect, provided the call belongs to the same run.
//! Remote clients should send their run id in `_meta`: without one, the calls of every
//! session and every client run in the server's configured run, where the same call from two
//! clients is the same call.
//!
//! By default only loopback `Host` headers are accepted (DNS-rebinding protection): a server
//! reached under another name needs `McpServer::bind_http_with(addr, config)` with
//! `McpHttpConfig::default().with_allowed_hosts([...])`.

use std::borrow::Cow;
use std::sync::Arc;

use rmcp::ServiceExt;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation, ListToolsResult, MetaObject,
    PaginatedRequestParams, ServerCapabilities, ServerConfig,
};
use rmcp::service::{RequestContext, RoleServer};
use serde_json::{Map, Value, json};

use crate::context::RunContext;
use crate::engine::Engine;
use crate::toolkit::{Dispatcher, ToolCall, ToolOutcome, ToolResult, Toolkit};

pub use rmcp;

#[cfg(feature = "mcp-http")]
mod http;
#[cfg(feature = "mcp-http")]
pub use http::{MCP_HTTP_PATH, McpHttpConfig, McpHttpHandle, McpHttpService};

/// The `_meta` fields the server reads the run id from, in order.
pub const RUN_ID_META: [&str; 2] = ["effect-tool/run_id", "run_id"];
/// The `_meta` fields the server reads the thread id from, in order.
pub const THREAD_ID_META: [&str; 2] = ["effect-tool/thread_id", "thread_id"];
/// The `_meta` fields the server reads the model's tool-call id from, in order.
pub const CALL_ID_META: [&str; 2] = ["effect-tool/call_id", "tool_call_id"];

/// The server failed to start or ended with an error.
#[derive(Debug, thiserror::Error)]
pub enum McpServeError {
    /// The MCP session could not be set up (e.g. the client never sent `initialize`).
    #[error("the MCP session could not start: {0}")]
    Initialize(String),
    /// The session ended abnormally.
    #[error("the MCP session ended with an error: {0}")]
    Session(String),
    /// The Streamable HTTP server could not listen on its address (feature `mcp-http`).
    #[error("the MCP HTTP server could not listen on {addr}: {source}; {}", bind_hint(source))]
    Bind {
        /// The address asked for.
        addr: std::net::SocketAddr,
        /// Why binding failed.
        source: std::io::Error,
    },
    /// The Streamable HTTP server stopped with an error (feature `mcp-http`).
    #[error("the MCP HTTP server stopped with an error: {0}")]
    Http(#[source] std::io::Error),
}

/// What to do about a bind error.
fn bind_hint(e: &std::io::Error) -> &'static str {
    match e.kind() {
        std::io::ErrorKind::AddrInUse => {
            "another process listens there: stop it, or pick another port (port 0 picks a free one)"
        }
        std::io::ErrorKind::AddrNotAvailable => {
            "the address is not one of this machine's: use 127.0.0.1 for local clients, 0.0.0.0 for all interfaces"
        }
        std::io::ErrorKind::PermissionDenied => "ports below 1024 need privileges: pick a port of 1024 or above",
        _ => "check the address and port",
    }
}

/// Serves a [`Toolkit`] over MCP, every call through the engine. Cheap to clone.
#[derive(Clone)]
pub struct McpServer {
    dispatcher: Dispatcher,
    /// Bounds the `tools/call` requests running at once (rmcp runs each request as a task).
    limit: Arc<tokio::sync::Semaphore>,
    tools: Arc<Vec<rmcp::model::Tool>>,
    run_id: String,
    thread_id: Option<String>,
    info: Implementation,
    instructions: Option<String>,
}

impl std::fmt::Debug for McpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServer")
            .field("tools", &self.dispatcher.toolkit().names())
            .field("run_id", &self.run_id)
            .field("thread_id", &self.thread_id)
            .finish_non_exhaustive()
    }
}

impl McpServer {
    /// A server for `toolkit`'s tools, calling them through `engine`.
    ///
    /// # Panics
    ///
    /// If a tool's exported definition is not a valid MCP tool (its argument schema is not a
    /// JSON object), which the first `tools/list` would otherwise report to every client.
    pub fn new(toolkit: Toolkit, engine: Engine) -> Self {
        let tools = toolkit
            .mcp_tools()
            .into_iter()
            .map(|t| {
                let name = t["name"].as_str().unwrap_or_default().to_owned();
                serde_json::from_value(t).unwrap_or_else(|e| {
                    panic!("tool `{name}` cannot be served over MCP: its definition is not an MCP tool ({e}); MCP needs an object schema for the arguments")
                })
            })
            .collect();
        let start = crate::record::now_millis();
        McpServer {
            limit: Arc::new(tokio::sync::Semaphore::new(crate::toolkit::DEFAULT_CONCURRENCY)),
            dispatcher: toolkit.dispatcher(engine),
            tools: Arc::new(tools),
            run_id: format!("mcp-{start}-{:08x}", fastrand::u32(..)),
            thread_id: None,
            info: Implementation::new("effect-tool", env!("CARGO_PKG_VERSION")),
            instructions: None,
        }
    }

    /// The run calls belong to when the request's `_meta` names none.
    pub fn with_run_id(mut self, run_id: impl Into<String>) -> Self {
        self.run_id = run_id.into();
        self
    }

    /// The thread calls belong to when the request's `_meta` names none.
    pub fn with_thread_id(mut self, thread_id: impl Into<String>) -> Self {
        self.thread_id = Some(thread_id.into());
        self
    }

    /// The name and version the server reports in `initialize`.
    pub fn with_server_info(mut self, name: impl Into<String>, version: impl Into<String>) -> Self {
        self.info = Implementation::new(name, version);
        self
    }

    /// Instructions for the client's model, sent in `initialize`.
    pub fn with_instructions(mut self, instructions: impl Into<String>) -> Self {
        self.instructions = Some(instructions.into());
        self
    }

    /// Run at most `n` `tools/call` requests at once (at least 1; default
    /// [`crate::toolkit::DEFAULT_CONCURRENCY`]); the others wait their turn.
    pub fn with_concurrency(mut self, n: usize) -> Self {
        let n = n.max(1);
        self.dispatcher = self.dispatcher.with_concurrency(n);
        self.limit = Arc::new(tokio::sync::Semaphore::new(n));
        self
    }

    /// The default run id (used when a request's `_meta` names none).
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// The tools as `tools/list` returns them.
    pub fn tools(&self) -> &[rmcp::model::Tool] {
        &self.tools
    }

    /// The dispatcher every call goes through.
    pub fn dispatcher(&self) -> &Dispatcher {
        &self.dispatcher
    }

    /// Serve on standard input and output until the client disconnects.
    pub async fn serve_stdio(self) -> Result<(), McpServeError> {
        self.serve_transport(rmcp::transport::stdio()).await
    }

    /// Serve on any rmcp transport (e.g. a `(reader, writer)` pair) until it closes.
    pub async fn serve_transport<T, E, A>(self, transport: T) -> Result<(), McpServeError>
    where
        T: rmcp::transport::IntoTransport<RoleServer, E, A>,
        E: std::error::Error + Send + Sync + 'static,
    {
        let running = self
            .serve(transport)
            .await
            .map_err(|e| McpServeError::Initialize(e.to_string()))?;
        running
            .waiting()
            .await
            .map(|_| ())
            .map_err(|e| McpServeError::Session(e.to_string()))
    }

    /// The run context of a request: run, thread from `_meta` or the configuration, and the
    /// request's cancellation.
    fn run_for(&self, meta: &Map<String, Value>, ct: &rmcp::service::RequestContext<RoleServer>) -> RunContext {
        let run_id = first_str(meta, &RUN_ID_META).unwrap_or(&self.run_id);
        let mut run = RunContext::new(run_id)
            .with_agent("mcp")
            .with_cancellation(ct.ct.clone());
        if let Some(thread) = first_str(meta, &THREAD_ID_META).or(self.thread_id.as_deref()) {
            run = run.with_thread(thread);
        }
        run
    }

    /// Handle one `tools/call` (what the `ServerHandler` impl runs).
    pub async fn handle_call(
        &self,
        request: CallToolRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResult {
        let mut meta: Map<String, Value> = context.meta.0.0.clone();
        if let Some(m) = &request.meta {
            for (k, v) in m.0.0.iter() {
                meta.insert(k.clone(), v.clone());
            }
        }
        let run = self.run_for(&meta, context);
        let call_id = first_str(&meta, &CALL_ID_META)
            .map(str::to_owned)
            .unwrap_or_else(|| format!("mcp-{}", request_id_text(&context.id)));
        let arguments = match &request.arguments {
            Some(args) => Value::Object(args.clone()).to_string(),
            None => "{}".to_owned(),
        };
        let call = ToolCall::new(call_id, request.name.as_ref(), arguments);
        // The semaphore is never closed, so acquiring only fails if it were; run unbounded then.
        let _permit = self.limit.acquire().await.ok();
        let result = self.dispatcher.call(&run, &call).await;
        to_call_tool_result(&result)
    }
}

fn first_str<'a>(meta: &'a Map<String, Value>, keys: &[&str]) -> Option<&'a str> {
    keys.iter()
        .find_map(|k| meta.get(*k).and_then(Value::as_str))
        .filter(|s| !s.is_empty())
}

fn request_id_text(id: &rmcp::model::RequestId) -> String {
    match serde_json::to_value(id) {
        Ok(Value::String(s)) => s,
        Ok(v) => v.to_string(),
        Err(_) => "?".to_owned(),
    }
}

/// The MCP result of a dispatched call (see the module docs).
pub fn to_call_tool_result(result: &ToolResult) -> CallToolResult {
    let text = vec![ContentBlock::text(result.content())];
    let (mut out, outcome) = match &result.outcome {
        ToolOutcome::Output(v) => {
            let mut r = CallToolResult::success(text);
            if v.is_object() {
                r.structured_content = Some(v.clone());
            }
            (r, "output")
        }
        ToolOutcome::Rejected(_) => (CallToolResult::error(text), "rejected"),
        ToolOutcome::Blocked(_) => (CallToolResult::error(text), "blocked"),
        ToolOutcome::AwaitingApproval(_) => (CallToolResult::error(text), "awaiting-approval"),
        ToolOutcome::Failed(_) => (CallToolResult::error(text), "failed"),
        ToolOutcome::Panicked { .. } => (CallToolResult::error(text), "panicked"),
    };
    let mut meta = Map::new();
    meta.insert("effect-tool/outcome".into(), json!(outcome));
    meta.insert("effect-tool/disposition".into(), json!(result.disposition.as_str()));
    if let Some(key) = &result.key {
        meta.insert("effect-tool/key".into(), json!(key));
    }
    out = out.with_meta(Some(MetaObject(meta)));
    out
}

impl rmcp::ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        let mut config = ServerConfig::new(ServerCapabilities::builder().enable_tools().build());
        config.server_info = self.info.clone();
        config.instructions = self.instructions.clone();
        config
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, rmcp::ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools.as_ref().clone()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, rmcp::ErrorData> {
        let name: Cow<'_, str> = request.name.clone();
        tracing::debug!(tool = %name, "MCP tools/call");
        Ok(self.handle_call(request, &context).await.into())
    }
}
