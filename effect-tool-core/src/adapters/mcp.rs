//! An MCP server for a [`Toolkit`], on the official Rust SDK (`rmcp`). Feature `mcp`.
//!
//! Every `tools/call` goes through the [`Engine`] (via the toolkit's [`Dispatcher`]): a client
//! that retries a call in the same run gets one effect. `tools/list` returns each tool's
//! `inputSchema`, the annotations its effect class implies
//! ([`crate::toolkit::mcp_annotations`]) and the declaration under `_meta`:
//! `effect-tool/class`, `effect-tool/key` (`default`, `fields(a, b)` or `custom`: never a key
//! closure's source), `effect-tool/window`, `effect-tool/approval`.
//!
//! ```no_run
//! # async fn serve(toolkit: effect_tool_core::Toolkit) -> Result<(), effect_tool_core::adapters::mcp::McpServeError> {
//! use effect_tool_core::{Engine, MemoryStore, adapters::mcp::McpServer};
//! McpServer::new(toolkit, Engine::new(MemoryStore::new()))
//!     .serve_stdio()
//!     .await
//! # }
//! ```
//!
//! # Which run a call belongs to
//!
//! Effect keys are scoped by run (see [`crate::call::key`]). The server takes the run from the
//! request's `_meta` when the client sends one:
//!
//! | `_meta` field (first found wins) | meaning |
//! |---|---|
//! | `effect-tool/run_id`, `run_id` | the run id |
//! | `effect-tool/thread_id`, `thread_id` | the conversation thread (for `window = "thread"`) |
//! | `effect-tool/call_id`, `tool_call_id` | the model's tool-call id (else `mcp-<session tag>-<JSON-RPC id>`) |
//!
//! Without a run id in `_meta`, a call runs in its **session's own run**
//! (`mcp-session-<128 random bits>`), never shared with another session: a stdio connection is
//! one session; over HTTP, each MCP session is one, and with the sessionless protocol
//! (`2026-07-28`) each request is one, so a retry is replayed only when it names its run.
//! The fallback call id is unique per session too, so two clients' identical requests with
//! the same JSON-RPC id are two calls. [`McpServer::require_run_id`] refuses calls that name
//! no run; [`McpServer::with_run_id`] sets one run for all of them instead (for a stdio server
//! that continues a run across restarts).
//!
//! Over HTTP with an `Authenticator`, runs and threads are scoped to the [`Principal`]: the
//! run a client names is `<principal>/<run id>` in the journal (`/` and `%` in the principal
//! escaped), so no client can replay, or pre-empt, another principal's call by naming its run,
//! and the same principal's retry from a new session still replays. Without a principal (stdio,
//! HTTP without an authenticator) a run or thread id containing `/` is refused, so that such a
//! client cannot name a principal's run in a journal they share. Keys of `window = "cross-run"`
//! tools have no run: under a principal they are scoped to it ([`RunContext::with_principal`],
//! `principal:<principal>:...`), so that no principal can read another's recorded result, or
//! pre-empt its next call, by sending the same arguments; a tool declared `shared_keys` shares
//! them with every principal (its manifest line says `principals=shared`).
//!
//! An MCP session over HTTP belongs to the principal that opened it: any other principal that
//! names it (to post into it, listen to it or delete it) is answered `404 Not Found`, as for a
//! session that does not exist.
//!
//! # Results
//!
//! A tool's output comes back as text content (a string output as is, anything else as JSON)
//! plus `structuredContent`. A tool that declares its output (every `#[tool]`: the `Ok` type's
//! JSON Schema) is listed with an `outputSchema`, and its `structuredContent` is the output as
//! that schema has it: an object output as it is, any other wrapped as `{"result": <output>}`
//! in both (see [`crate::toolkit::output`]). Before it is sent, `structuredContent` is checked
//! against the `outputSchema`: an output that does not fit is a bug of the server, logged at
//! ERROR (tool, key, the paths that do not fit, never a value), and the client gets an error
//! result saying so (outcome `invalid-output`) instead of a structure that breaks the schema it
//! was promised. A tool without a declared output (a manual `impl Tool` whose `output_schema`
//! is `None`) has no `outputSchema`, and `structuredContent` only when its output is an object.
//! A tool that declares a view (`#[tool(to_model = path)]`) answers with the view's parts
//! instead (text and `image` content), with neither `outputSchema` nor `structuredContent`,
//! which would carry the whole output the view keeps from the model. Rejected calls (malformed
//! arguments, unknown tool, schema violation), blocked calls, calls awaiting approval and
//! failures come back as tool results with `isError: true` and a message the model can act on
//! ([`crate::ToolResult::content`]). Every result's `_meta` carries
//! `effect-tool/disposition` (`executed`, `replayed`, `shared`, `blocked`, ..., or `not-run`
//! when the server refused the call itself), `effect-tool/outcome` (`output`, `rejected`,
//! `blocked`, `awaiting-approval`, `failed`, `panicked`, `busy`) and `effect-tool/key` when the
//! call reached the journal.
//!
//! # Tasks: calls that wait for a person
//!
//! A client that declares MCP's Tasks extension (`io.modelcontextprotocol/tasks`, as rmcp 3.x
//! implements it) gets a task instead of an error result for a call that parks for approval
//! or stops in doubt. `tasks/get` reads the record from the journal each time (`working` while
//! a person has to approve or resolve it, `completed` with the call's result once a person has
//! decided and the server has run the call); the server runs the call itself after the
//! decision ([`McpServer::with_task_wait`] bounds the wait, `tasks/cancel` ends it). A task id
//! is good for the principal that made the call only. Other clients get the answers above.
//!
//! # Idempotency keys from the client
//!
//! A client that sends its own idempotency key, as `idempotencyKey` in the request's `_meta`
//! ([`IDEMPOTENCY_KEY_META`]; MCP has no such request parameter in the protocol versions rmcp
//! speaks) or, over Streamable HTTP, as the `Idempotency-Key` header, has it used as the call's
//! effect key instead of the tool's key rule ([`RunContext::with_client_key`]). The key is
//! scoped to the tool and to the principal (`%client:principal:<principal>:<tool>:<key>`, see
//! [`crate::call::key`]): no client reaches another tool's record or another principal's by
//! naming a key, and a retry with the same key from a new session or another run gets the
//! recorded result. The Stripe rule holds: the same key with other arguments is an error result
//! (outcome `rejected`) that says to send a new key for new work, never the earlier call's
//! result. A key longer than 255 bytes, or two different keys in `_meta` and the header, are
//! refused before anything runs. Pure tools are not journaled: their keys are ignored.
//!
//! # Limits
//!
//! [`McpLimits`]: `tools/call` requests running at once per session, per principal (or client
//! address) and in all, each with a bounded queue; a call that finds a limit reached and its
//! queue full gets a tool error at once (outcome `busy`). Arguments larger than
//! [`McpLimits::max_argument_bytes`] (256 KiB) are refused before anything runs or is
//! journaled. Over HTTP, sessions are capped in all and per principal, and closed after
//! [`McpLimits::session_idle_timeout`].
//!
//! The client's `notifications/cancelled` cancels the call's run context, which reaches the
//! tool ([`crate::EffectCtx::cancellation`]).
//!
//! # Progress
//!
//! A `tools/call` whose `_meta` carries a `progressToken` receives the values the tool reports
//! ([`crate::EffectCtx::progress`]; every item of a `#[tool(stream)]`, the last one included)
//! as `notifications/progress` with that token: `progress` counts 1,
//! 2, 3, ..., `message` is the value (a string as it is, anything else as JSON text, cut at
//! 1000 characters). They are all sent before the call's result. A replayed call runs nothing
//! and reports no progress: its result is the recorded output.
//!
//! # Logs
//!
//! rmcp logs every request and response in full at DEBUG and TRACE (target `rmcp`), whatever
//! filter the application sets. So that a `#[sensitive]` argument reaches no log, the server
//! seals its value as soon as a `tools/call` arrives (as the stdio transport reads it; over
//! HTTP, in the request's body, before rmcp parses it) and unseals it only to dispatch the
//! call: rmcp sees, and logs, `{"effect-tool/sealed": "..."}`, the value encrypted under a key
//! that never leaves the process. The other arguments are logged as sent: keep rmcp at INFO
//! (`RUST_LOG=debug,rmcp=info`) unless you want them in your logs. This module logs tool
//! names, never arguments. (Sealing needs the server's own transports: `serve_stdio`,
//! `serve_transport`, `bind_http*` and `http_router`; the bare `http_service` does not seal.)
//!
//! # Streamable HTTP
//!
//! With feature `mcp-http`, the server also speaks MCP's Streamable HTTP transport (rmcp's
//! `StreamableHttpService`, served by axum), for remote deployments:
//!
//! - `McpServer::serve_http(addr)` listens on an address and serves `http://<addr>/mcp`;
//!   `McpServer::bind_http(addr)` does the same but returns once bound, with an `McpHttpHandle`
//!   that tells the bound address (bind port 0 for a free one) and shuts the server down;
//! - `McpServer::http_router(config)` (an axum router at `/mcp`, with authentication and the
//!   protected-resource metadata) mounts it in your own HTTP server; `McpServer::http_service`
//!   is the bare tower service, without authentication.
//!
//! Every HTTP session shares this server's dispatcher, engine and journal, so a client that
//! retries a call from a new session (after a dropped connection, a restart of the client)
//! gets the recorded result, not a second effect, provided it names the same run.
//!
//! # Who is calling
//!
//! `McpHttpConfig::with_authenticator` sets an `Authenticator`, which maps each HTTP request
//! to a [`Principal`] or refuses it: `BearerTokens` (static tokens) or `JwtAuthenticator`
//! (OAuth 2.1 access tokens as JWTs, checked against the issuer's configured keys, issuer,
//! audience, expiry and scopes, as the MCP authorization spec asks of a resource server). A
//! refused request gets `401` with `WWW-Authenticate: Bearer resource_metadata="…"`, pointing
//! at the protected-resource metadata (RFC 9728) served at
//! `/.well-known/oauth-protected-resource` (and `…/mcp`).
//!
//! Without an authenticator, `bind_http_with` refuses a non-loopback address unless
//! `McpHttpConfig::allow_unauthenticated_remote` says so. The `Host` allowlist (loopback names
//! by default) is DNS-rebinding protection only, not access control: any client can send
//! `Host: localhost`. `Origin` is validated by default (loopback origins only; `403` for
//! another): set `McpHttpConfig::with_allowed_origins` for a browser client elsewhere.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use rmcp::ServiceExt;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation, ListToolsResult, MetaObject,
    PaginatedRequestParams, ServerCapabilities, ServerConfig,
};
use rmcp::service::{RequestContext, RoleServer};
use serde_json::{Map, Value, json};

use crate::call::context::RunContext;
use crate::engine::Engine;
use crate::toolkit::{Dispatcher, ToolCall, ToolOutcome, ToolResult, Toolkit};

pub use rmcp;

#[cfg(feature = "gateway")]
pub mod gateway;
mod limits;
mod progress;
mod seal;
mod tasks;
pub use limits::McpLimits;
use limits::{Busy, Gate, Gates};
use seal::Sealer;

#[cfg(feature = "mcp-http")]
mod auth;
#[cfg(feature = "mcp-http")]
mod http;
#[cfg(feature = "mcp-http")]
pub use auth::{
    AuthError, Authenticator, BearerTokens, JwtAuthenticator, JwtError, ProtectedResource, bearer_token, jsonwebtoken,
};
#[cfg(feature = "mcp-http")]
pub use http::{
    MCP_HTTP_PATH, McpHttpConfig, McpHttpHandle, McpHttpService, McpSessionError, McpSessionManager,
    PROTECTED_RESOURCE_PATH, SessionsFull,
};

/// The `_meta` fields the server reads the run id from, in order.
pub const RUN_ID_META: [&str; 2] = ["effect-tool/run_id", "run_id"];
/// The `_meta` fields the server reads the thread id from, in order.
pub const THREAD_ID_META: [&str; 2] = ["effect-tool/thread_id", "thread_id"];
/// The `_meta` fields the server reads the model's tool-call id from, in order.
pub const CALL_ID_META: [&str; 2] = ["effect-tool/call_id", "tool_call_id"];

/// The `_meta` fields the server reads the client's idempotency key from, in order (MCP has no
/// `idempotencyKey` request parameter in any protocol version rmcp speaks, so it travels in
/// `_meta`; over Streamable HTTP, the `Idempotency-Key` header is read too).
pub const IDEMPOTENCY_KEY_META: [&str; 2] = ["idempotencyKey", "effect-tool/idempotency_key"];
/// The HTTP header the server reads the client's idempotency key from (feature `mcp-http`).
pub const IDEMPOTENCY_KEY_HEADER: &str = "idempotency-key";

/// Who is calling: the principal an [`Authenticator`] found for an HTTP request (feature
/// `mcp-http`). Runs, threads and so keys are scoped to it: the run a client names in `_meta`
/// is the run `<principal>/<run id>`, so no client can name another principal's run.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Principal {
    id: String,
}

impl Principal {
    /// The principal with this id (e.g. a JWT's `sub`, or the name given to a static token).
    ///
    /// # Panics
    ///
    /// If `id` is empty: an empty principal would share the scope of every other empty one.
    pub fn new(id: impl Into<String>) -> Self {
        let id = id.into();
        assert!(!id.is_empty(), "a principal needs a non-empty id");
        Principal { id }
    }

    /// The id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The prefix of this principal's runs and threads: the id with `%` and `/` escaped (so
    /// `a/b` and `a%2Fb` stay two principals), then `/`.
    fn scope(&self) -> String {
        let mut s = String::with_capacity(self.id.len() + 1);
        for c in self.id.chars() {
            match c {
                '%' => s.push_str("%25"),
                '/' => s.push_str("%2F"),
                c => s.push(c),
            }
        }
        s.push('/');
        s
    }
}

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
    /// A non-loopback address without an authenticator (feature `mcp-http`): anyone who
    /// reaches it could call every tool.
    #[error(
        "the MCP HTTP server will not listen on {addr} without authentication: every client that reaches it could call every tool; configure an authenticator (`McpHttpConfig::with_authenticator`, e.g. `BearerTokens` or `JwtAuthenticator`), bind to 127.0.0.1, or, behind something that authenticates, opt in with `McpHttpConfig::allow_unauthenticated_remote`"
    )]
    Unauthenticated {
        /// The address asked for.
        addr: std::net::SocketAddr,
    },
    /// A tool takes a value from the run (a `#[secret]` argument) and the server gives its runs
    /// none: every call of it would fail.
    #[error(
        "the MCP server gives its runs no values, and {tools} from the run (a `#[secret]` argument): every call would fail; give the values with `McpServer::with_run_values` (e.g. `.with_run_values(|_, run| run.with_value(...))`), or leave the tool out of the toolkit"
    )]
    MissingValues {
        /// Which tools take which values (`` `send_email` takes a `SmtpPassword` ``, ...).
        tools: String,
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

/// What gives a call's run the application's values (see [`McpServer::with_run_values`]): the
/// principal of the request, if any, and the run the server made for the call; it returns the
/// run with the values added ([`RunContext::with_value`]).
pub type RunValues = dyn Fn(Option<&Principal>, RunContext) -> RunContext + Send + Sync;

/// Serves a [`Toolkit`] over MCP, every call through the engine. Cheap to clone; a clone is the
/// same server and the same session (see [`McpServer::new_session`]).
#[derive(Clone)]
pub struct McpServer {
    dispatcher: Dispatcher,
    tools: Arc<Vec<rmcp::model::Tool>>,
    run_id: Option<String>,
    thread_id: Option<String>,
    require_run_id: bool,
    /// What gives each call's run the application's values ([`McpServer::with_run_values`]).
    values: Option<Arc<RunValues>>,
    info: Implementation,
    instructions: Option<String>,
    limits: McpLimits,
    /// The limits every session shares (total, per principal).
    gates: Arc<Gates>,
    /// Seals sensitive arguments before rmcp sees (and logs) them.
    sealer: Arc<Sealer>,
    /// This session: its tag (in its default run and fallback call ids) and its limit.
    session: Arc<Session>,
    /// The tasks of calls that wait for a person (see [`McpServer::with_task_wait`]).
    tasks: Arc<tasks::Tasks>,
}

/// One MCP session of a server (a stdio connection, an HTTP session, or one stateless HTTP
/// request).
#[derive(Debug)]
struct Session {
    /// 128 random bits, hex: unique to the session, unguessable.
    tag: String,
    gate: Arc<Gate>,
}

impl Session {
    fn new(limits: &McpLimits) -> Arc<Self> {
        Arc::new(Session {
            tag: random_tag(),
            gate: Gate::new(limits.per_session, limits.queue),
        })
    }
}

/// 128 bits from the operating system's generator, as hex: a session tag nobody can guess (a
/// client that guessed another session's tag could name its run, and replay or pre-empt its
/// calls).
///
/// # Panics
///
/// If the operating system's generator fails (as `rand`'s `OsRng` would): a guessable tag would
/// be worse than no session.
fn random_tag() -> String {
    let mut bytes = [0u8; 16];
    if let Err(e) = getrandom::fill(&mut bytes) {
        panic!("the operating system's random generator failed ({e}): no MCP session tag can be made");
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl std::fmt::Debug for McpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServer")
            .field("tools", &self.dispatcher.toolkit().names())
            .field("run_id", &self.run_id)
            .field("thread_id", &self.thread_id)
            .field("require_run_id", &self.require_run_id)
            .field("run_values", &self.values.is_some())
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

/// A call the server refuses before dispatching it (the `effect-tool/outcome` it reports, and
/// the message).
struct Refusal {
    outcome: &'static str,
    message: String,
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
        let limits = McpLimits::default();
        let sealer = Arc::new(Sealer::new(&toolkit));
        McpServer {
            sealer,
            dispatcher: toolkit.dispatcher(engine).with_concurrency(limits.total),
            tools: Arc::new(tools),
            run_id: None,
            thread_id: None,
            require_run_id: false,
            values: None,
            info: Implementation::new("effect-tool", env!("CARGO_PKG_VERSION")),
            instructions: None,
            gates: Arc::new(Gates::new(limits)),
            session: Session::new(&limits),
            limits,
            tasks: Arc::new(tasks::Tasks::new(tasks::DEFAULT_TASK_WAIT)),
        }
    }

    /// How long the server waits for a person's decision on a call it answered with an MCP
    /// task (default a day): a client that declared the Tasks extension
    /// (`io.modelcontextprotocol/tasks`) gets a task, instead of an error result, for a call
    /// that parks for approval or stops in doubt; the server runs the call once a person has
    /// decided, and the task's result is the call's. Past `wait`, the task completes with the
    /// answer the call first got (the record stays for a person; calling again runs it then).
    pub fn with_task_wait(mut self, wait: Duration) -> Self {
        self.tasks = Arc::new(tasks::Tasks::new(wait));
        self
    }

    /// The run of every call whose `_meta` names none, in every session (scoped by principal
    /// over authenticated HTTP). Without it, each session has a run of its own.
    ///
    /// Meant for a stdio server that continues one run across restarts. Over HTTP, every
    /// client of a principal (every client at all, without an authenticator) then shares
    /// this run: the same call from two of them is one call.
    pub fn with_run_id(mut self, run_id: impl Into<String>) -> Self {
        self.run_id = Some(run_id.into());
        self
    }

    /// Refuse (as a tool error) every `tools/call` whose `_meta` names no run id
    /// (`effect-tool/run_id`), instead of running it in the session's own run. For clients
    /// that retry from new sessions: only a named run makes their retry a replay.
    pub fn require_run_id(mut self) -> Self {
        self.require_run_id = true;
        self
    }

    /// Give every call's run the application's values: the values that tools with `#[secret]`
    /// arguments take ([`RunContext::with_value`]), which never come from the client. `values`
    /// receives the request's principal (over HTTP with an authenticator; `None` otherwise) and
    /// the run the server made for the call, and returns it with the values added, the same for
    /// every principal or each its own:
    ///
    /// ```no_run
    /// # fn serve(toolkit: effect_tool_core::Toolkit, engine: effect_tool_core::Engine) {
    /// use effect_tool_core::adapters::mcp::McpServer;
    /// #[derive(Clone)]
    /// struct SmtpPassword(String);
    /// let password = SmtpPassword(std::env::var("SMTP_PASSWORD").unwrap());
    /// let server = McpServer::new(toolkit, engine)
    ///     .with_run_values(move |_principal, run| run.with_value(password.clone()));
    /// # }
    /// ```
    ///
    /// Keep the run's id, thread and principal as they are given: they scope the call's key.
    /// Without it, a server whose toolkit has a tool that takes a value refuses to start
    /// ([`McpServeError::MissingValues`]), instead of listing a tool every call of which fails.
    pub fn with_run_values(
        mut self,
        values: impl Fn(Option<&Principal>, RunContext) -> RunContext + Send + Sync + 'static,
    ) -> Self {
        self.values = Some(Arc::new(values));
        self
    }

    /// Refuse to serve tools whose values no run gets: without [`McpServer::with_run_values`],
    /// every call of a tool with a `#[secret]` argument would fail.
    fn check_values(&self) -> Result<(), McpServeError> {
        if self.values.is_some() {
            return Ok(());
        }
        let missing = self.dispatcher.toolkit().missing_values(&RunContext::new("-"));
        if missing.is_empty() {
            return Ok(());
        }
        Err(McpServeError::MissingValues {
            tools: missing.join(", "),
        })
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

    /// Run at most `n` `tools/call` requests at once in all (at least 1; default
    /// [`crate::toolkit::DEFAULT_CONCURRENCY`]): [`McpLimits::total`].
    pub fn with_concurrency(self, n: usize) -> Self {
        let limits = McpLimits {
            total: n.max(1),
            ..self.limits
        };
        self.with_limits(limits)
    }

    /// Set every limit: concurrency per session, per principal and in all, queues, argument
    /// size, sessions (see [`McpLimits`] for each one's default).
    pub fn with_limits(mut self, limits: McpLimits) -> Self {
        self.dispatcher = self.dispatcher.with_concurrency(limits.total.max(1));
        self.gates = Arc::new(Gates::new(limits));
        self.session = Session::new(&limits);
        self.limits = limits;
        self
    }

    /// The limits in force.
    pub fn limits(&self) -> &McpLimits {
        &self.limits
    }

    /// The run id configured with [`McpServer::with_run_id`], if any.
    pub fn run_id(&self) -> Option<&str> {
        self.run_id.as_deref()
    }

    /// The run of this session's calls that name none in `_meta` (before scoping by
    /// principal): the configured run, else `mcp-session-<this session's tag>`.
    pub fn session_run_id(&self) -> String {
        match &self.run_id {
            Some(run) => run.clone(),
            None => format!("mcp-session-{}", self.session.tag),
        }
    }

    /// The same server (tools, dispatcher, journal, shared limits) as a new session: its own
    /// default run, fallback call ids and per-session limit. Every transport serves each
    /// session with one (`serve_transport` on each connection, the HTTP service on each
    /// session or stateless request).
    pub fn new_session(&self) -> McpServer {
        McpServer {
            session: Session::new(&self.limits),
            ..self.clone()
        }
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

    /// Serve one session on any rmcp transport (e.g. a `(reader, writer)` pair) until it
    /// closes.
    pub async fn serve_transport<T, E, A>(self, transport: T) -> Result<(), McpServeError>
    where
        T: rmcp::transport::IntoTransport<RoleServer, E, A>,
        E: std::error::Error + Send + Sync + 'static,
    {
        self.check_values()?;
        let transport = Sealing {
            inner: transport.into_transport(),
            sealer: self.sealer.clone(),
        };
        let running = self
            .new_session()
            .serve(transport)
            .await
            .map_err(|e| McpServeError::Initialize(e.to_string()))?;
        running
            .waiting()
            .await
            .map(|_| ())
            .map_err(|e| McpServeError::Session(e.to_string()))
    }

    /// The run context of a request: run and thread from `_meta` or the configuration (or the
    /// session), scoped by the principal, and the request's cancellation.
    fn run_for(
        &self,
        meta: &Map<String, Value>,
        principal: Option<&Principal>,
        ct: &rmcp::service::RequestContext<RoleServer>,
    ) -> Result<RunContext, Refusal> {
        let client_run = first_str(meta, &RUN_ID_META);
        if client_run.is_none() && self.require_run_id {
            return Err(Refusal {
                outcome: "rejected",
                message: format!(
                    "this server needs a run id: send it in the request's `_meta` as `{}` (the same id on every retry of the same work, a new one for new work); nothing was run",
                    RUN_ID_META[0]
                ),
            });
        }
        let client_thread = first_str(meta, &THREAD_ID_META);
        let run_id = scoped(principal, client_run, || self.session_run_id(), "run")?;
        let mut run = RunContext::new(run_id)
            .with_agent("mcp")
            .with_cancellation(ct.ct.clone());
        if let Some(p) = principal {
            run = run.with_principal(p.id());
        }
        if let Some(values) = &self.values {
            run = values(principal, run);
        }
        if client_thread.is_some() || self.thread_id.is_some() {
            let thread = scoped(
                principal,
                client_thread,
                || self.thread_id.clone().unwrap_or_default(),
                "thread",
            )?;
            run = run.with_thread(thread);
        }
        Ok(run)
    }

    /// Handle one `tools/call` (what the `ServerHandler` impl runs).
    pub async fn handle_call(
        &self,
        request: CallToolRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResult {
        let caller = Caller::of(context);
        match self.call(request, context, &caller).await {
            Ok(dispatched) => self.answer(&dispatched),
            Err(refusal) => refusal_result(&refusal),
        }
    }

    /// The client's idempotency key of a request: `_meta`'s ([`IDEMPOTENCY_KEY_META`]) or the
    /// HTTP header's ([`IDEMPOTENCY_KEY_HEADER`]); refused when both are sent and differ, or
    /// when it is longer than [`key::MAX_CLIENT_KEY_BYTES`](crate::call::key::MAX_CLIENT_KEY_BYTES).
    fn client_key(&self, meta: &Map<String, Value>, caller: &Caller) -> Result<Option<String>, Refusal> {
        let from_meta = first_str(meta, &IDEMPOTENCY_KEY_META);
        let key = match (from_meta, caller.idempotency_key.as_deref()) {
            (Some(m), Some(h)) if m != h => {
                return Err(Refusal {
                    outcome: "rejected",
                    message: format!(
                        "this request carries two idempotency keys, {m:?} in `_meta` and {h:?} in the `Idempotency-Key` header; send one (the same on every retry of this call); nothing was run"
                    ),
                });
            }
            (Some(k), _) | (None, Some(k)) => k,
            (None, None) => return Ok(None),
        };
        let max = crate::call::key::MAX_CLIENT_KEY_BYTES;
        if key.len() > max {
            return Err(Refusal {
                outcome: "rejected",
                message: format!(
                    "the idempotency key is {} bytes, more than the {max} this server accepts; send a shorter one (a UUID is enough); nothing was run",
                    key.len()
                ),
            });
        }
        Ok(Some(key.to_owned()))
    }

    async fn call(
        &self,
        mut request: CallToolRequestParams,
        context: &RequestContext<RoleServer>,
        caller: &Caller,
    ) -> Result<Dispatched, Refusal> {
        let mut meta: Map<String, Value> = context.meta.0.0.clone();
        if let Some(m) = &request.meta {
            for (k, v) in m.0.0.iter() {
                meta.insert(k.clone(), v.clone());
            }
        }
        if let Some(args) = request.arguments.as_mut() {
            self.sealer.unseal_arguments(&request.name, args);
        }
        let arguments = match &request.arguments {
            Some(args) => Value::Object(args.clone()).to_string(),
            None => "{}".to_owned(),
        };
        if arguments.len() > self.limits.max_argument_bytes {
            return Err(Refusal {
                outcome: "rejected",
                message: format!(
                    "the arguments of `{}` are {} bytes of JSON, more than the {} this server accepts; send less data (e.g. a reference instead of the content); nothing was run",
                    request.name,
                    arguments.len(),
                    self.limits.max_argument_bytes
                ),
            });
        }
        let client_key = self.client_key(&meta, caller)?;
        let mut run = self.run_for(&meta, caller.principal.as_ref(), context)?;
        if let Some(k) = &client_key {
            run = run.with_client_key(k.clone());
        }
        let call_id = first_str(&meta, &CALL_ID_META)
            .map(str::to_owned)
            .unwrap_or_else(|| format!("mcp-{}-{}", self.session.tag, request_id_text(&context.id)));
        let call = ToolCall::new(call_id, request.name.as_ref(), arguments);
        // The session's limit, then a place among the shared ones (fair among principals); both
        // are held until the call is done.
        let session = self.session.gate.enter("this session").await.map_err(busy)?;
        let place = self
            .gates
            .enter(&caller.limit_key, caller.scope_name())
            .await
            .map_err(busy)?;
        let (run, result) = match progress::Progress::of(&meta, &context.peer, run) {
            (run, Some(progress)) => {
                let result = progress.around(self.dispatcher.call(&run, &call)).await;
                (run, result)
            }
            (run, None) => {
                let result = self.dispatcher.call(&run, &call).await;
                (run, result)
            }
        };
        drop((place, session));
        Ok(Dispatched {
            result,
            client_key,
            run,
            call,
        })
    }

    /// The answer to one `tools/call`: as [`McpServer::handle_call`]'s, or a task when the call
    /// waits for a person and the client declared the Tasks extension (see `mcp/tasks.rs`).
    async fn respond(&self, request: CallToolRequestParams, context: &RequestContext<RoleServer>) -> CallToolResponse {
        let caller = Caller::of(context);
        match self.call(request, context, &caller).await {
            Ok(dispatched) => {
                let answer = self.answer(&dispatched);
                let tasks_declared = context.client_capabilities().is_some_and(|c| c.supports_tasks());
                if tasks_declared && let Some(task) = self.tasks.park(self, &caller, &dispatched, &answer).await {
                    return task.into();
                }
                answer.into()
            }
            Err(refusal) => refusal_result(&refusal).into(),
        }
    }

    /// The MCP result of a dispatched call.
    fn answer(&self, d: &Dispatched) -> CallToolResult {
        match &d.client_key {
            Some(client_key) if is_input_mismatch(&d.result) => reused_key_result(&d.result, client_key),
            _ => to_call_tool_result_with(&d.result, self.dispatcher.toolkit().output(&d.result.name)),
        }
    }
}

/// A call as the server dispatched it: its result, the client's idempotency key, and the run
/// and call (which a task dispatches again once a person has decided).
struct Dispatched {
    result: ToolResult,
    client_key: Option<String>,
    run: RunContext,
    call: ToolCall,
}

/// A transport whose `tools/call` requests have their sensitive arguments sealed as they are
/// read, before rmcp logs them (see the module docs, "Logs").
struct Sealing<T> {
    inner: T,
    sealer: Arc<Sealer>,
}

impl<T: rmcp::transport::Transport<RoleServer>> rmcp::transport::Transport<RoleServer> for Sealing<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: rmcp::service::TxJsonRpcMessage<RoleServer>,
    ) -> impl std::future::Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    fn receive(
        &mut self,
    ) -> impl std::future::Future<Output = Option<rmcp::service::RxJsonRpcMessage<RoleServer>>> + Send {
        let sealer = self.sealer.clone();
        let next = self.inner.receive();
        async move {
            let mut message = next.await?;
            sealer.seal_message(&mut message);
            Some(message)
        }
    }

    fn close(&mut self) -> impl std::future::Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

/// Who sent a request: the principal (HTTP with an authenticator), and the key its limit is
/// counted under (the principal, else the client's address, else this process).
struct Caller {
    principal: Option<Principal>,
    limit_key: String,
    /// The `Idempotency-Key` header of the HTTP request, if any.
    idempotency_key: Option<String>,
}

impl Caller {
    #[cfg(feature = "mcp-http")]
    fn of(context: &RequestContext<RoleServer>) -> Caller {
        let parts = context.extensions.get::<axum::http::request::Parts>();
        let principal = parts.and_then(|p| p.extensions.get::<Principal>()).cloned();
        let limit_key = match (&principal, parts.and_then(http::client_ip)) {
            (Some(p), _) => format!("principal:{}", p.id),
            (None, Some(ip)) => format!("ip:{ip}"),
            (None, None) => "local".to_owned(),
        };
        let idempotency_key = parts
            .and_then(|p| p.headers.get(IDEMPOTENCY_KEY_HEADER))
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_owned);
        Caller {
            principal,
            limit_key,
            idempotency_key,
        }
    }

    #[cfg(not(feature = "mcp-http"))]
    fn of(_context: &RequestContext<RoleServer>) -> Caller {
        Caller {
            principal: None,
            limit_key: "local".to_owned(),
            idempotency_key: None,
        }
    }

    fn scope_name(&self) -> &'static str {
        if self.principal.is_some() {
            "your principal"
        } else {
            "your address"
        }
    }
}

/// The run (or thread) id a call gets: the client's, else the server's; prefixed with the
/// principal's scope when there is a principal. Without one, a client's id may not contain
/// `/`, the separator of principals' scopes, so that no unauthenticated client can name an
/// authenticated principal's run in a journal they share.
fn scoped(
    principal: Option<&Principal>,
    client: Option<&str>,
    server: impl FnOnce() -> String,
    what: &str,
) -> Result<String, Refusal> {
    match (principal, client) {
        (Some(p), Some(c)) => Ok(format!("{}{c}", p.scope())),
        (Some(p), None) => Ok(format!("{}{}", p.scope(), server())),
        (None, Some(c)) if c.contains('/') => Err(Refusal {
            outcome: "rejected",
            message: format!(
                "the {what} id {c:?} contains `/`, which this server keeps for authenticated callers' {what}s; use an id without `/`; nothing was run"
            ),
        }),
        (None, Some(c)) => Ok(c.to_owned()),
        (None, None) => Ok(server()),
    }
}

fn busy(b: Busy) -> Refusal {
    Refusal {
        outcome: "busy",
        message: format!(
            "the server is busy: {} already runs {} calls and {} more wait; nothing was run: call again when one of the calls has finished",
            b.scope, b.limit, b.queue
        ),
    }
}

fn refusal_result(refusal: &Refusal) -> CallToolResult {
    let mut meta = Map::new();
    meta.insert("effect-tool/outcome".into(), json!(refusal.outcome));
    meta.insert("effect-tool/disposition".into(), json!("not-run"));
    CallToolResult::error(vec![ContentBlock::text(refusal.message.clone())]).with_meta(Some(MetaObject(meta)))
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

/// The MCP result of a dispatched call of a tool that declares no output (see the module
/// docs): `structuredContent` is the output when it is a JSON object. For a tool that declares
/// its output, [`to_call_tool_result_with`].
pub fn to_call_tool_result(result: &ToolResult) -> CallToolResult {
    to_call_tool_result_with(result, None)
}

/// The MCP result of a dispatched call of a tool whose declared output is `declared` (its
/// `outputSchema`, [`crate::toolkit::OutputSchema`]): `structuredContent` is the output as the
/// schema has it (wrapped under `result` when it is not an object, see
/// [`crate::toolkit::output`]), checked against the schema first. An output that does not fit
/// is a bug of the server, not of the call: it is logged (tool, key, which paths, never a
/// value) and the client gets an error result saying so, never a structure that breaks the
/// schema it was promised (outcome `invalid-output`; the call's disposition and key as for
/// any result). Without `declared`, as [`to_call_tool_result`].
pub fn to_call_tool_result_with(
    result: &ToolResult,
    declared: Option<&crate::toolkit::OutputSchema>,
) -> CallToolResult {
    let text = vec![ContentBlock::text(result.content())];
    let (mut out, outcome) = match &result.outcome {
        // A tool's view (`to_model`): its parts, and no `structuredContent`, which would carry
        // the whole output the view keeps from the model.
        ToolOutcome::Output(_) if result.view.is_some() => {
            use crate::call::view::ModelPart;
            let blocks = result
                .model_output()
                .parts()
                .iter()
                .map(|p| match p {
                    ModelPart::Text { text } => ContentBlock::text(text.clone()),
                    ModelPart::Image { mime_type, data } => ContentBlock::image(data.clone(), mime_type.clone()),
                })
                .collect();
            (CallToolResult::success(blocks), "output")
        }
        ToolOutcome::Output(v) => match declared {
            Some(declared) => {
                let structured = declared.structured_content(v);
                match declared.check(&structured) {
                    Ok(()) => {
                        let mut r = CallToolResult::success(text);
                        r.structured_content = Some(structured);
                        (r, "output")
                    }
                    Err(violations) => {
                        tracing::error!(
                            tool = %result.name,
                            key = result.key.as_deref().unwrap_or("-"),
                            disposition = result.disposition.as_str(),
                            %violations,
                            "a tool's output does not fit the output schema it declares; the MCP client gets an error instead of the output"
                        );
                        let message = invalid_output_text(result, &violations);
                        (
                            CallToolResult::error(vec![ContentBlock::text(message)]),
                            "invalid-output",
                        )
                    }
                }
            }
            None => {
                let mut r = CallToolResult::success(text);
                if v.is_object() {
                    r.structured_content = Some(v.clone());
                }
                (r, "output")
            }
        },
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

/// What the model reads when a tool's output does not fit its declared schema.
fn invalid_output_text(result: &ToolResult, violations: &str) -> String {
    let tool = &result.name;
    let recorded = match &result.key {
        Some(key) => format!("its result is recorded under the key `{key}`"),
        None => "it has a result".to_owned(),
    };
    format!(
        "Error: `{tool}` ran ({}) and {recorded}, but its output does not fit the output schema this server declares for it ({violations}). This is a bug in the server, not in your call, and it is in the server's log. Do not call `{tool}` again for this work: its effect is not undone and a new call returns the same output; tell the user the result could not be read, so that an operator can look it up.",
        result.disposition.as_str()
    )
}

/// Whether `result` is the journal's refusal of another input under the call's key.
fn is_input_mismatch(result: &ToolResult) -> bool {
    matches!(
        &result.outcome,
        ToolOutcome::Failed(crate::call::error::EffectError::InputMismatch { .. })
    )
}

/// The result of a call whose idempotency key the client used before with other arguments
/// (the Stripe rule: an error, never the earlier call's result).
fn reused_key_result(result: &ToolResult, client_key: &str) -> CallToolResult {
    let message = format!(
        "Error: `{}` was not run: the idempotency key {client_key:?} was used before for a call of `{}` with other arguments, and an idempotency key names one request. Nothing happened now. For new work, send a new idempotency key; to get the earlier call's result, send its arguments unchanged with this key.",
        result.name, result.name
    );
    let mut meta = Map::new();
    meta.insert("effect-tool/outcome".into(), json!("rejected"));
    meta.insert("effect-tool/disposition".into(), json!("not-run"));
    if let Some(key) = &result.key {
        meta.insert("effect-tool/key".into(), json!(key));
    }
    CallToolResult::error(vec![ContentBlock::text(message)]).with_meta(Some(MetaObject(meta)))
}

impl rmcp::ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        let mut config = ServerConfig::new(ServerCapabilities::builder().enable_tools().enable_tasks().build());
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
        Ok(self.respond(request, &context).await)
    }

    async fn get_task(
        &self,
        request: rmcp::model::GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::GetTaskResult, rmcp::ErrorData> {
        self.tasks.get(self, &Caller::of(&context), &request.task_id).await
    }

    async fn update_task(
        &self,
        _request: rmcp::model::UpdateTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), rmcp::ErrorData> {
        // No task of this server asks the client for input: acknowledged, as the extension
        // asks of any `tasks/update`.
        Ok(())
    }

    async fn cancel_task(
        &self,
        request: rmcp::model::CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), rmcp::ErrorData> {
        self.tasks.cancel(self, &Caller::of(&context), &request.task_id).await;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn principals_scope_runs_and_cannot_reach_each_others() {
        let alice = Principal::new("alice");
        let run = |p: Option<&Principal>, c: Option<&str>| scoped(p, c, || "mcp-session-x".to_owned(), "run");
        assert_eq!(run(Some(&alice), Some("r1")).ok().unwrap(), "alice/r1");
        assert_eq!(run(Some(&alice), None).ok().unwrap(), "alice/mcp-session-x");
        // `a/b` naming run `c` and `a` naming run `b/c` stay two runs.
        let ab = Principal::new("a/b");
        assert_eq!(run(Some(&ab), Some("c")).ok().unwrap(), "a%2Fb/c");
        assert_eq!(run(Some(&Principal::new("a")), Some("b/c")).ok().unwrap(), "a/b/c");
        assert_eq!(
            run(Some(&Principal::new("a%2Fb")), Some("c")).ok().unwrap(),
            "a%252Fb/c"
        );
        // Without a principal, a run id cannot look like a principal's.
        assert_eq!(run(None, Some("r1")).ok().unwrap(), "r1");
        assert_eq!(run(None, None).ok().unwrap(), "mcp-session-x");
        let refused = run(None, Some("alice/r1")).err().unwrap();
        assert_eq!(refused.outcome, "rejected");
        assert!(refused.message.contains("contains `/`"), "{}", refused.message);
    }

    #[test]
    fn every_session_has_its_own_run_and_clones_share_theirs() {
        let server = McpServer::new(Toolkit::new(), Engine::new(crate::MemoryStore::new()));
        let other = server.new_session();
        assert_ne!(server.session_run_id(), other.session_run_id());
        assert_eq!(server.clone().session_run_id(), server.session_run_id());
        assert!(server.session_run_id().starts_with("mcp-session-"));
        assert_eq!(server.run_id(), None);
        let fixed = server.with_run_id("support-bot");
        assert_eq!(fixed.new_session().session_run_id(), "support-bot");
    }
}
