//! Streamable HTTP transport for [`McpServer`] (feature `mcp-http`): see the module docs of
//! [`crate::mcp`], section "Streamable HTTP".

use std::net::SocketAddr;
use std::sync::Arc;

use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use super::{McpServeError, McpServer};

/// The path [`McpServer::bind_http`] and [`McpServer::http_router`] serve MCP under.
pub const MCP_HTTP_PATH: &str = "/mcp";

/// rmcp's Streamable HTTP service over an [`McpServer`], with in-memory sessions: a
/// `tower::Service<http::Request<_>>` to mount in your own HTTP server (e.g. axum's
/// `Router::nest_service("/mcp", service)`). Made by [`McpServer::http_service`].
pub type McpHttpService = StreamableHttpService<McpServer, LocalSessionManager>;

/// The configuration of the Streamable HTTP service (rmcp's): allowed `Host` and `Origin`
/// headers, SSE keep-alive, JSON responses, body size limit, shutdown token.
///
/// The default accepts only loopback `Host` headers (`localhost`, `127.0.0.1`, `::1`), which
/// protects a local server from DNS rebinding; a server reached under another name needs
/// [`StreamableHttpServerConfig::with_allowed_hosts`].
pub type McpHttpConfig = StreamableHttpServerConfig;

impl McpServer {
    /// The Streamable HTTP service for this server, to mount in your own router.
    ///
    /// Every HTTP session gets a clone of this server: they share its dispatcher, engine and
    /// journal, its concurrency limit and its default run. A call retried from a new session
    /// is therefore replayed like one retried on the same session (the journal decides, by
    /// the run and the key; see "Which run a call belongs to" in [`crate::mcp`]).
    ///
    /// ```no_run
    /// # fn mount(server: effect_tool_core::mcp::McpServer) -> axum::Router {
    /// use effect_tool_core::mcp::McpHttpConfig;
    /// axum::Router::new().nest_service("/mcp", server.http_service(McpHttpConfig::default()))
    /// # }
    /// ```
    pub fn http_service(&self, config: McpHttpConfig) -> McpHttpService {
        let server = self.clone();
        StreamableHttpService::new(
            move || Ok(server.clone()),
            Arc::new(LocalSessionManager::default()),
            config,
        )
    }

    /// An axum router serving [`McpServer::http_service`] at [`MCP_HTTP_PATH`] (`/mcp`); merge
    /// it into your application's router or serve it as is.
    pub fn http_router(&self, config: McpHttpConfig) -> axum::Router {
        axum::Router::new().route_service(MCP_HTTP_PATH, self.http_service(config))
    }

    /// Listen on `addr` and serve MCP over Streamable HTTP at `http://<addr>/mcp` until
    /// [`McpHttpHandle::shutdown`]. Returns once the socket is bound: the handle tells the
    /// bound address (bind to port 0 to get a free one).
    ///
    /// Uses the default [`McpHttpConfig`], which only accepts loopback `Host` headers; a server
    /// reached from other machines needs [`McpServer::bind_http_with`] and
    /// [`StreamableHttpServerConfig::with_allowed_hosts`].
    ///
    /// ```no_run
    /// # async fn serve(server: effect_tool_core::mcp::McpServer) -> Result<(), effect_tool_core::mcp::McpServeError> {
    /// let handle = server.bind_http("127.0.0.1:0".parse().unwrap()).await?;
    /// println!("MCP endpoint: {}", handle.url());
    /// // ... later:
    /// handle.shutdown().await
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`McpServeError::Bind`] when the address cannot be bound (in use, not local, no
    /// permission).
    pub async fn bind_http(self, addr: SocketAddr) -> Result<McpHttpHandle, McpServeError> {
        self.bind_http_with(addr, McpHttpConfig::default()).await
    }

    /// [`McpServer::bind_http`] with a configuration. The server stops when
    /// [`McpHttpHandle::shutdown`] is called or when `config.cancellation_token` is cancelled.
    ///
    /// # Errors
    ///
    /// [`McpServeError::Bind`] when the address cannot be bound.
    pub async fn bind_http_with(self, addr: SocketAddr, config: McpHttpConfig) -> Result<McpHttpHandle, McpServeError> {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| McpServeError::Bind { addr, source })?;
        let local_addr = listener
            .local_addr()
            .map_err(|source| McpServeError::Bind { addr, source })?;
        let shutdown = config.cancellation_token.clone();
        let router = self.http_router(config);
        let stop = shutdown.clone();
        let task = tokio::spawn(async move {
            axum::serve(listener, router)
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
    /// [`McpServeError::Bind`] when the address cannot be bound, [`McpServeError::Http`] when
    /// the HTTP server stops with an error.
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
