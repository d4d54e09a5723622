//! Streamable HTTP transport for [`McpServer`] (feature `mcp-http`): see the module docs of
//! [`crate::adapters::mcp`], sections "Streamable HTTP" and "Who is calling".

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderValue, StatusCode, header, request::Parts};
use axum::middleware::Next;
use axum::response::Response;
use futures::Stream;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_server::session::local::{LocalSessionManager, LocalSessionManagerError};
use rmcp::transport::streamable_http_server::session::{RestoreOutcome, ServerSseMessage, SessionId, SessionManager};
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use super::auth::{AuthError, Authenticator, ProtectedResource};
use super::{McpLimits, McpServeError, McpServer, Principal};

/// The path [`McpServer::bind_http`] and [`McpServer::http_router`] serve MCP under.
pub const MCP_HTTP_PATH: &str = "/mcp";

/// The path of the protected-resource metadata (RFC 9728) [`McpServer::http_router`] serves
/// when an authenticator is configured (also with the MCP path appended:
/// `/.well-known/oauth-protected-resource/mcp`).
pub const PROTECTED_RESOURCE_PATH: &str = "/.well-known/oauth-protected-resource";

/// rmcp's Streamable HTTP service over an [`McpServer`], with in-memory sessions capped by
/// [`McpLimits`]: a `tower::Service<http::Request<_>>`. Made by [`McpServer::http_service`].
///
/// It does not authenticate: mount [`McpServer::http_router`] (which does, and serves the
/// protected-resource metadata) rather than this service, unless something in front of it
/// authenticates every request.
pub type McpHttpService = StreamableHttpService<McpServer, McpSessionManager>;

/// The configuration of MCP over HTTP: who may call (an [`Authenticator`], or the explicit
/// choice of none on a non-loopback address), the protected-resource metadata, and rmcp's
/// transport settings (allowed `Host` and `Origin` headers, SSE keep-alive, body size limit,
/// shutdown token).
///
/// The default:
/// - no authenticator: every caller is anonymous, so [`McpServer::bind_http_with`] refuses a
///   non-loopback address unless [`McpHttpConfig::allow_unauthenticated_remote`];
/// - `Host` must be a loopback name (`localhost`, `127.0.0.1`, `::1`). This is protection from
///   DNS rebinding, for a server on a developer's machine, and nothing more: any client that
///   reaches the port can send `Host: localhost`. It is not access control;
/// - `Origin`, when present (browsers send it), must be a loopback origin
///   (`http://localhost:*`, `http://127.0.0.1:*`, `http://[::1]:*`), else `403 Forbidden`, as
///   the MCP transport spec requires. Clients that are not browsers send none.
#[derive(Clone)]
pub struct McpHttpConfig {
    transport: StreamableHttpServerConfig,
    authenticator: Option<Arc<dyn Authenticator>>,
    resource: Option<ProtectedResource>,
    allow_unauthenticated_remote: bool,
}

impl std::fmt::Debug for McpHttpConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpHttpConfig")
            .field("allowed_hosts", &self.transport.allowed_hosts)
            .field("allowed_origins", &self.transport.allowed_origins)
            .field("authenticator", &self.authenticator.is_some())
            .field("resource", &self.resource)
            .field("allow_unauthenticated_remote", &self.allow_unauthenticated_remote)
            .finish_non_exhaustive()
    }
}

impl Default for McpHttpConfig {
    fn default() -> Self {
        McpHttpConfig {
            transport: StreamableHttpServerConfig::default()
                .with_allowed_origins(["http://localhost:*", "http://127.0.0.1:*", "http://[::1]:*"])
                .enforce_origin_validation(),
            authenticator: None,
            resource: None,
            allow_unauthenticated_remote: false,
        }
    }
}

impl McpHttpConfig {
    /// Authenticate every request with `authenticator`: a request it refuses gets `401` (or
    /// `403` for a missing scope), and the principal it finds scopes the request's runs.
    pub fn with_authenticator(mut self, authenticator: impl Authenticator) -> Self {
        self.authenticator = Some(Arc::new(authenticator));
        self
    }

    /// The protected-resource metadata to serve (default: the authenticator's, e.g. the JWT
    /// issuer and audience; else the resource `http://<Host>/mcp` with no authorization server).
    pub fn with_protected_resource(mut self, resource: ProtectedResource) -> Self {
        self.resource = Some(resource);
        self
    }

    /// Serve a non-loopback address without an authenticator: every client that reaches the
    /// port may call every tool, and all of them are one anonymous caller. Only behind
    /// something that authenticates (a VPN, a proxy), or for a demo.
    pub fn allow_unauthenticated_remote(mut self) -> Self {
        self.allow_unauthenticated_remote = true;
        self
    }

    /// The `Host` headers accepted (names, or `name:port`): the names the server is reached
    /// under. DNS-rebinding protection only, see [`McpHttpConfig`].
    pub fn with_allowed_hosts(mut self, hosts: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.transport = self.transport.with_allowed_hosts(hosts);
        self
    }

    /// The browser origins accepted (with scheme, e.g. `https://app.example.com:443`; `:*` for
    /// any port). A request with another `Origin` gets `403`; one without `Origin` passes.
    pub fn with_allowed_origins(mut self, origins: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.transport = self.transport.with_allowed_origins(origins).enforce_origin_validation();
        self
    }

    /// Change rmcp's transport settings (keep-alive, JSON responses, body size limit, ...).
    pub fn with_transport(mut self, f: impl FnOnce(StreamableHttpServerConfig) -> StreamableHttpServerConfig) -> Self {
        self.transport = f(self.transport);
        self
    }

    /// rmcp's transport settings.
    pub fn transport(&self) -> &StreamableHttpServerConfig {
        &self.transport
    }

    /// Whether an authenticator is configured.
    pub fn has_authenticator(&self) -> bool {
        self.authenticator.is_some()
    }

    /// The token that stops the server when cancelled.
    pub fn cancellation_token(&self) -> CancellationToken {
        self.transport.cancellation_token.clone()
    }
}

/// The client's IP address, when the server was started with connection info (as
/// [`McpServer::bind_http_with`] does).
pub(super) fn client_ip(parts: &Parts) -> Option<IpAddr> {
    parts
        .extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(addr)| addr.ip())
}

tokio::task_local! {
    /// The request being handled: its limit key, for the session manager's per-principal cap,
    /// and the cap it hit, if any, for the response.
    static REQUEST: Arc<RequestScope>;
}

#[derive(Debug, Default)]
struct RequestScope {
    key: Option<String>,
    refused: Mutex<Option<SessionsFull>>,
}

/// A session cap that refused a new session.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SessionsFull {
    /// The server's cap.
    #[error("the server has {0} MCP sessions open, its limit; try again later")]
    Total(usize),
    /// The principal's (or client address's) cap.
    #[error("you have {0} MCP sessions open, the limit per caller: close one (or reuse it) and try again")]
    PerPrincipal(usize),
}

/// The session manager of [`McpHttpService`]: rmcp's in-memory sessions, with the idle timeout
/// of [`McpLimits::session_idle_timeout`] and the caps of [`McpLimits::max_sessions`] and
/// [`McpLimits::max_sessions_per_principal`].
#[derive(Debug)]
pub struct McpSessionManager {
    inner: LocalSessionManager,
    counts: Mutex<SessionCounts>,
    max_total: usize,
    max_per: usize,
}

#[derive(Debug, Default)]
struct SessionCounts {
    /// Each session's caller: `principal:<id>` (sessions bound to their principal), `ip:<address>`,
    /// or `None`.
    owners: HashMap<SessionId, Option<String>>,
    per_key: HashMap<String, usize>,
    /// Numbers the placeholders of reserved places.
    reserved: u64,
}

/// Why the session manager failed: rmcp's reason, or a cap.
#[derive(Debug, thiserror::Error)]
pub enum McpSessionError {
    /// rmcp's session manager failed.
    #[error(transparent)]
    Local(#[from] LocalSessionManagerError),
    /// A session cap is reached.
    #[error(transparent)]
    Full(SessionsFull),
}

impl McpSessionManager {
    /// Sessions as `limits` says.
    pub fn new(limits: &McpLimits) -> Self {
        let mut inner = LocalSessionManager::default();
        inner.session_config.keep_alive = Some(limits.session_idle_timeout);
        McpSessionManager {
            inner,
            counts: Mutex::new(SessionCounts::default()),
            max_total: limits.max_sessions.max(1),
            max_per: limits.max_sessions_per_principal.max(1),
        }
    }

    /// The sessions open now.
    pub fn open_sessions(&self) -> usize {
        self.lock().owners.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SessionCounts> {
        self.counts.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Count a new session of the current request's caller, unless a cap is reached.
    fn reserve(&self, key: &Option<String>) -> Result<(), SessionsFull> {
        let mut counts = self.lock();
        // Reserved places are counted under a placeholder id until the session has its own.
        if counts.owners.len() >= self.max_total {
            return Err(SessionsFull::Total(self.max_total));
        }
        if let Some(k) = key {
            let n = counts.per_key.entry(k.clone()).or_insert(0);
            if *n >= self.max_per {
                return Err(SessionsFull::PerPrincipal(self.max_per));
            }
            *n += 1;
        }
        counts.reserved += 1;
        let placeholder: SessionId = format!("reserved-{}", counts.reserved).into();
        counts.owners.insert(placeholder, key.clone());
        Ok(())
    }

    fn release(&self, id: Option<&SessionId>, key: &Option<String>) {
        let mut counts = self.lock();
        let removed = match id {
            Some(id) => counts.owners.remove(id).is_some(),
            None => {
                let placeholder = counts
                    .owners
                    .iter()
                    .find(|(i, k)| i.starts_with("reserved-") && *k == key)
                    .map(|(i, _)| i.clone());
                placeholder.is_some_and(|p| counts.owners.remove(&p).is_some())
            }
        };
        if removed
            && let Some(k) = key
            && let Some(n) = counts.per_key.get_mut(k)
        {
            *n = n.saturating_sub(1);
            if *n == 0 {
                counts.per_key.remove(k);
            }
        }
    }

    /// Whether a request of the caller `key` may use session `id`: a session opened by an
    /// authenticated principal belongs to that principal alone (any other caller is told it does
    /// not exist); an unknown session, or one opened without a principal, is rmcp's to judge.
    fn belongs(&self, id: &SessionId, key: Option<&str>) -> bool {
        match self.lock().owners.get(id) {
            Some(Some(owner)) if owner.starts_with(PRINCIPAL_KEY) => key == Some(owner.as_str()),
            _ => true,
        }
    }

    /// [`McpSessionManager::belongs`] for the request being handled (every request is, behind
    /// [`McpServer::http_router`]; without its guard there is no principal to bind to).
    fn belongs_to_request(&self, id: &SessionId) -> bool {
        match REQUEST.try_with(|r| r.key.clone()) {
            Ok(key) => self.belongs(id, key.as_deref()),
            Err(_) => self.belongs(id, None),
        }
    }

    /// Give a reserved place its session id.
    fn claim(&self, id: &SessionId, key: &Option<String>) {
        let mut counts = self.lock();
        let placeholder = counts
            .owners
            .iter()
            .find(|(i, k)| i.starts_with("reserved-") && *k == key)
            .map(|(i, _)| i.clone());
        if let Some(p) = placeholder {
            counts.owners.remove(&p);
        }
        counts.owners.insert(id.clone(), key.clone());
    }
}

impl SessionManager for McpSessionManager {
    type Error = McpSessionError;
    type Transport = <LocalSessionManager as SessionManager>::Transport;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        let scope = REQUEST.try_with(Arc::clone).ok();
        let key = scope.as_ref().and_then(|s| s.key.clone());
        if let Err(full) = self.reserve(&key) {
            if let Some(s) = &scope {
                *s.refused.lock().unwrap_or_else(|e| e.into_inner()) = Some(full.clone());
            }
            tracing::warn!(reason = %full, "MCP session refused");
            return Err(McpSessionError::Full(full));
        }
        match self.inner.create_session().await {
            Ok((id, transport)) => {
                self.claim(&id, &key);
                Ok((id, transport))
            }
            Err(e) => {
                self.release(None, &key);
                Err(e.into())
            }
        }
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        Ok(self.inner.initialize_session(id, message).await?)
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        // Another principal's session is, to this caller, no session (rmcp answers 404).
        if !self.belongs_to_request(id) {
            return Ok(false);
        }
        Ok(self.inner.has_session(id).await?)
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        if !self.belongs_to_request(id) {
            return Ok(());
        }
        let result = self.inner.close_session(id).await;
        let key = self.lock().owners.get(id).cloned();
        if let Some(key) = key {
            self.release(Some(id), &key);
        }
        Ok(result?)
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        Ok(self.inner.create_stream(id, message).await?)
    }

    async fn accept_message(&self, id: &SessionId, message: ClientJsonRpcMessage) -> Result<(), Self::Error> {
        Ok(self.inner.accept_message(id, message).await?)
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        Ok(self.inner.create_standalone_stream(id).await?)
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        Ok(self.inner.resume(id, last_event_id).await?)
    }

    async fn restore_session(&self, id: SessionId) -> Result<RestoreOutcome<Self::Transport>, Self::Error> {
        Ok(self.inner.restore_session(id).await?)
    }
}

/// The prefix of an authenticated caller's limit key (`principal:<id>`).
const PRINCIPAL_KEY: &str = "principal:";

/// The header that names a request's MCP session.
const SESSION_HEADER: &str = "mcp-session-id";

/// What the HTTP middleware needs: the authenticator, the metadata it points clients at, and the
/// sessions (bound to the principals that opened them).
struct Guard {
    authenticator: Option<Arc<dyn Authenticator>>,
    resource: Option<ProtectedResource>,
    sessions: Arc<McpSessionManager>,
    /// Seals sensitive arguments in request bodies before rmcp parses (and logs) them.
    sealer: Arc<super::Sealer>,
    /// The largest body read to seal (larger ones are refused: their arguments could not run).
    max_body: usize,
}

impl Guard {
    /// The metadata for a request (the configured one, else derived from its `Host`).
    fn resource_for(&self, parts: &Parts) -> ProtectedResource {
        self.resource.clone().unwrap_or_else(|| {
            let host = parts
                .headers
                .get(header::HOST)
                .and_then(|h| h.to_str().ok())
                .unwrap_or("localhost");
            ProtectedResource::new(format!("http://{host}{MCP_HTTP_PATH}"))
        })
    }
}

/// A header value with `"` and `\` and anything outside printable ASCII left out.
fn quoted(s: &str) -> String {
    s.chars()
        .filter(|c| c.is_ascii() && !c.is_ascii_control() && *c != '"' && *c != '\\')
        .collect()
}

fn refuse(status: StatusCode, challenge: Option<String>, body: String) -> Response {
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    if let Some(c) = challenge.and_then(|c| HeaderValue::from_str(&c).ok()) {
        response.headers_mut().insert(header::WWW_AUTHENTICATE, c);
    }
    response
}

/// Authenticate the request (401/403 when refused), record its principal and limit key, and
/// answer a session cap with 503/429 instead of rmcp's 500.
async fn guard(State(guard): State<Arc<Guard>>, request: Request, next: Next) -> Response {
    let (mut parts, body) = request.into_parts();
    let mut key = client_ip(&parts).map(|ip| format!("ip:{ip}"));
    if let Some(auth) = &guard.authenticator {
        match auth.authenticate(&parts).await {
            Ok(principal) => {
                key = Some(format!("{PRINCIPAL_KEY}{}", principal.id()));
                parts.extensions.insert::<Principal>(principal);
            }
            Err(e) => {
                let metadata = guard.resource_for(&parts).metadata_url();
                tracing::info!(reason = %e, "MCP request refused: not authenticated");
                let (status, challenge) = match &e {
                    AuthError::Missing => (
                        StatusCode::UNAUTHORIZED,
                        format!("Bearer resource_metadata=\"{}\"", quoted(&metadata)),
                    ),
                    AuthError::Invalid(why) => (
                        StatusCode::UNAUTHORIZED,
                        format!(
                            "Bearer resource_metadata=\"{}\", error=\"invalid_token\", error_description=\"{}\"",
                            quoted(&metadata),
                            quoted(why)
                        ),
                    ),
                    AuthError::InsufficientScope(scope) => (
                        StatusCode::FORBIDDEN,
                        format!(
                            "Bearer resource_metadata=\"{}\", error=\"insufficient_scope\", scope=\"{}\"",
                            quoted(&metadata),
                            quoted(scope)
                        ),
                    ),
                };
                return refuse(status, Some(challenge), e.to_string());
            }
        }
    }
    // A session belongs to the principal that opened it: to anyone else (a GET, a POST into it,
    // a DELETE) it does not exist, with the very answer rmcp gives for an unknown session.
    if let Some(id) = parts.headers.get(SESSION_HEADER).and_then(|v| v.to_str().ok()) {
        let id: SessionId = id.to_owned().into();
        if !guard.sessions.belongs(&id, key.as_deref()) {
            tracing::info!("MCP request refused: the session belongs to another principal");
            return refuse(StatusCode::NOT_FOUND, None, "Not Found: Session not found".to_owned());
        }
    }
    let body = match seal_body(&guard, &parts, body).await {
        Ok(body) => body,
        Err(response) => return response,
    };
    let scope = Arc::new(RequestScope {
        key,
        refused: Mutex::new(None),
    });
    let request = Request::from_parts(parts, body);
    let response = REQUEST.scope(scope.clone(), next.run(request)).await;
    let refused = scope.refused.lock().unwrap_or_else(|e| e.into_inner()).take();
    match refused {
        Some(full @ SessionsFull::Total(_)) => refuse(StatusCode::SERVICE_UNAVAILABLE, None, full.to_string()),
        Some(full @ SessionsFull::PerPrincipal(_)) => refuse(StatusCode::TOO_MANY_REQUESTS, None, full.to_string()),
        None => response,
    }
}

/// The body with the sensitive arguments of its `tools/call` requests sealed (see the module
/// docs of [`crate::adapters::mcp`], "Logs"); as it was when it is no JSON-RPC or seals nothing.
async fn seal_body(guard: &Guard, parts: &Parts, body: Body) -> Result<Body, Response> {
    if !guard.sealer.needed() || parts.method != axum::http::Method::POST {
        return Ok(body);
    }
    let bytes = axum::body::to_bytes(body, guard.max_body).await.map_err(|_| {
        refuse(
            StatusCode::PAYLOAD_TOO_LARGE,
            None,
            format!(
                "the request body is larger than the {} bytes this server reads; send smaller arguments",
                guard.max_body
            ),
        )
    })?;
    let Ok(mut message) = serde_json::from_slice::<serde_json::Value>(&bytes) else {
        return Ok(Body::from(bytes));
    };
    if !guard.sealer.seal_json(&mut message) {
        return Ok(Body::from(bytes));
    }
    Ok(Body::from(message.to_string()))
}

/// `GET /.well-known/oauth-protected-resource[/mcp]`: the metadata document.
async fn metadata(State(guard): State<Arc<Guard>>, request: Request) -> Response {
    let (parts, _) = request.into_parts();
    let body = guard.resource_for(&parts).to_json().to_string();
    let mut response = Response::new(Body::from(body));
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

impl McpServer {
    /// The Streamable HTTP service for this server, without authentication (see
    /// [`McpHttpService`]; [`McpServer::http_router`] is the one to mount).
    ///
    /// Every HTTP session (and every stateless request) gets its own
    /// [`McpServer::new_session`]: they share this server's dispatcher, engine, journal and
    /// limits, but each has its own default run and fallback call ids.
    pub fn http_service(&self, config: &McpHttpConfig) -> McpHttpService {
        self.http_service_with(config, Arc::new(McpSessionManager::new(&self.limits)))
    }

    fn http_service_with(&self, config: &McpHttpConfig, sessions: Arc<McpSessionManager>) -> McpHttpService {
        let server = self.clone();
        StreamableHttpService::new(move || Ok(server.new_session()), sessions, config.transport.clone())
    }

    /// An axum router serving MCP at [`MCP_HTTP_PATH`] (`/mcp`), each request authenticated by
    /// the configured [`Authenticator`] (if any), and the protected-resource metadata at
    /// [`PROTECTED_RESOURCE_PATH`] when there is one. Merge it into your application's router
    /// or serve it as is; serve it with `into_make_service_with_connect_info::<SocketAddr>()`
    /// so that limits without an authenticator count per client address.
    ///
    /// ```no_run
    /// # fn mount(server: effect_tool_core::adapters::mcp::McpServer) -> axum::Router {
    /// use effect_tool_core::adapters::mcp::{BearerTokens, McpHttpConfig};
    /// let config = McpHttpConfig::default()
    ///     .with_authenticator(BearerTokens::new().with_token("a-long-random-token-for-ci", "ci"));
    /// axum::Router::new().merge(server.http_router(config))
    /// # }
    /// ```
    ///
    /// # Panics
    ///
    /// If a tool takes a value from the run (a `#[secret]` argument) and the server was given no
    /// [`McpServer::with_run_values`] (see [`McpServeError::MissingValues`]).
    pub fn http_router(&self, config: McpHttpConfig) -> axum::Router {
        if let Err(e) = self.check_values() {
            panic!("{e}");
        }
        let sessions = Arc::new(McpSessionManager::new(&self.limits));
        let guard_state = Arc::new(Guard {
            sessions: sessions.clone(),
            sealer: self.sealer.clone(),
            max_body: self.limits.max_argument_bytes.saturating_mul(4).max(1 << 20),
            resource: config
                .resource
                .clone()
                .or_else(|| config.authenticator.as_ref().and_then(|a| a.protected_resource())),
            authenticator: config.authenticator.clone(),
        });
        let mcp = axum::Router::new()
            .route_service(MCP_HTTP_PATH, self.http_service_with(&config, sessions))
            .layer(axum::middleware::from_fn_with_state(guard_state.clone(), guard));
        if config.authenticator.is_none() {
            return mcp;
        }
        let meta = axum::Router::new()
            .route(PROTECTED_RESOURCE_PATH, axum::routing::get(metadata))
            .route(
                &format!("{PROTECTED_RESOURCE_PATH}{MCP_HTTP_PATH}"),
                axum::routing::get(metadata),
            )
            .with_state(guard_state);
        mcp.merge(meta)
    }

    /// Listen on `addr` and serve MCP over Streamable HTTP at `http://<addr>/mcp` until
    /// [`McpHttpHandle::shutdown`]. Returns once the socket is bound: the handle tells the
    /// bound address (bind to port 0 to get a free one).
    ///
    /// Uses the default [`McpHttpConfig`]: no authentication, so only a loopback address is
    /// accepted; loopback `Host` and `Origin` headers only. A server for other machines needs
    /// [`McpServer::bind_http_with`] and an authenticator.
    ///
    /// ```no_run
    /// # async fn serve(server: effect_tool_core::adapters::mcp::McpServer) -> Result<(), effect_tool_core::adapters::mcp::McpServeError> {
    /// let handle = server.bind_http("127.0.0.1:0".parse().unwrap()).await?;
    /// println!("MCP endpoint: {}", handle.url());
    /// // ... later:
    /// handle.shutdown().await
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`McpServeError::Unauthenticated`] for a non-loopback address, [`McpServeError::Bind`]
    /// when the address cannot be bound (in use, not local, no permission).
    pub async fn bind_http(self, addr: SocketAddr) -> Result<McpHttpHandle, McpServeError> {
        self.bind_http_with(addr, McpHttpConfig::default()).await
    }

    /// [`McpServer::bind_http`] with a configuration. The server stops when
    /// [`McpHttpHandle::shutdown`] is called or when the config's cancellation token is
    /// cancelled.
    ///
    /// # Errors
    ///
    /// [`McpServeError::Unauthenticated`] for a non-loopback address without an authenticator
    /// (unless [`McpHttpConfig::allow_unauthenticated_remote`]); [`McpServeError::Bind`] when
    /// the address cannot be bound.
    pub async fn bind_http_with(self, addr: SocketAddr, config: McpHttpConfig) -> Result<McpHttpHandle, McpServeError> {
        if !addr.ip().is_loopback() && config.authenticator.is_none() && !config.allow_unauthenticated_remote {
            return Err(McpServeError::Unauthenticated { addr });
        }
        self.check_values()?;
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| McpServeError::Bind { addr, source })?;
        let local_addr = listener
            .local_addr()
            .map_err(|source| McpServeError::Bind { addr, source })?;
        let shutdown = config.cancellation_token();
        let router = self.http_router(config);
        let stop = shutdown.clone();
        let task = tokio::spawn(async move {
            axum::serve(listener, router.into_make_service_with_connect_info::<SocketAddr>())
                .with_graceful_shutdown(stop.cancelled_owned())
                .await
        });
        tracing::info!(%local_addr, path = MCP_HTTP_PATH, "MCP Streamable HTTP server listening");
        Ok(McpHttpHandle {
            local_addr,
            shutdown,
            task,
        })
    }

    /// Serve MCP over Streamable HTTP at `http://<addr>/mcp` until the server fails (see
    /// [`McpServer::bind_http`]; use it instead to learn the bound port or to stop the server).
    ///
    /// # Errors
    ///
    /// As [`McpServer::bind_http`]; [`McpServeError::Http`] when the HTTP server stops with an
    /// error.
    pub async fn serve_http(self, addr: SocketAddr) -> Result<(), McpServeError> {
        self.bind_http(addr).await?.wait().await
    }
}
/// A running Streamable HTTP server (from [`McpServer::bind_http`]).
///
/// Dropping the handle leaves the server running in the background; call
/// [`McpHttpHandle::shutdown`] to stop it.
#[derive(Debug)]
pub struct McpHttpHandle {
    local_addr: SocketAddr,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl McpHttpHandle {
    /// The address the server listens on (with the actual port when bound to port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The MCP endpoint: `http://<local address>/mcp`.
    pub fn url(&self) -> String {
        format!("http://{}{MCP_HTTP_PATH}", self.local_addr)
    }

    /// The token that stops the server when cancelled (e.g. from a signal handler).
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// Stop the server: close every MCP session, stop accepting connections, and wait for
    /// open connections to finish.
    ///
    /// # Errors
    ///
    /// [`McpServeError::Http`] if the server had stopped with an error.
    pub async fn shutdown(self) -> Result<(), McpServeError> {
        self.shutdown.cancel();
        self.wait().await
    }

    /// Wait until the server stops (after [`McpHttpHandle::shutdown_token`] is cancelled, or on
    /// an error).
    ///
    /// # Errors
    ///
    /// [`McpServeError::Http`] if the server stopped with an error.
    pub async fn wait(self) -> Result<(), McpServeError> {
        match self.task.await {
            Ok(result) => result.map_err(McpServeError::Http),
            Err(e) => Err(McpServeError::Http(std::io::Error::other(format!(
                "the HTTP server task ended abnormally: {e}"
            )))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_caps_count_per_caller_and_in_all_and_free_a_place_on_close() {
        let limits = McpLimits {
            max_sessions: 3,
            max_sessions_per_principal: 2,
            ..McpLimits::default()
        };
        let m = McpSessionManager::new(&limits);
        let (a, b, c) = (Some("principal:a".to_owned()), Some("ip:10.0.0.2".to_owned()), None);
        for id in ["s1", "s2"] {
            m.reserve(&a).unwrap();
            m.claim(&SessionId::from(id), &a);
        }
        assert!(matches!(m.reserve(&a), Err(SessionsFull::PerPrincipal(2))));
        m.reserve(&b).unwrap();
        m.claim(&SessionId::from("s3"), &b);
        assert!(matches!(m.reserve(&c), Err(SessionsFull::Total(3))));
        assert_eq!(m.open_sessions(), 3);
        m.release(Some(&SessionId::from("s1")), &a);
        assert_eq!(m.open_sessions(), 2);
        m.reserve(&a).unwrap();
        // A reservation whose session could not be made is given back.
        m.release(None, &a);
        assert_eq!(m.open_sessions(), 2);
        m.reserve(&a).unwrap();
        assert_eq!(m.open_sessions(), 3);
    }
}
