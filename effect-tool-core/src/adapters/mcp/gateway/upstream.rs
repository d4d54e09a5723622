//! One upstream MCP server as the gateway's client sees it: rmcp's client over a child
//! process's stdio (started, and started again when it has exited) or Streamable HTTP.

use std::time::Duration;

use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, CallToolResult, Tool as McpTool};
use rmcp::service::{RoleClient, RunningService, ServiceError};
use serde_json::Value;
use tokio::sync::Mutex;

use super::declare::Transport;
use crate::value::outcome::ToolError;

/// A connected upstream, or one to connect on its next call.
pub(super) struct Upstream {
    /// Its name in the declarations file.
    pub(super) name: String,
    transport: Transport,
    conn: Mutex<Option<RunningService<RoleClient, ()>>>,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream")
            .field("name", &self.name)
            .field("transport", &self.transport)
            .finish()
    }
}

/// Why an upstream could not be reached (before any call was sent).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("upstream `{upstream}` ({how}): {message}")]
pub struct ConnectError {
    /// The upstream's name.
    pub upstream: String,
    /// How it is reached (the command line or the URL).
    pub how: String,
    /// What failed.
    pub message: String,
}

impl Upstream {
    pub(super) fn new(name: String, transport: Transport) -> Self {
        Upstream {
            name,
            transport,
            conn: Mutex::new(None),
        }
    }

    fn how(&self) -> String {
        match &self.transport {
            Transport::Stdio { command, args, .. } => std::iter::once(command)
                .chain(args)
                .map(|a| crate::value::shell::quote(a))
                .collect::<Vec<_>>()
                .join(" "),
            Transport::Http { url } => url.clone(),
        }
    }

    fn connect_error(&self, message: impl std::fmt::Display) -> ConnectError {
        ConnectError {
            upstream: self.name.clone(),
            how: self.how(),
            message: message.to_string(),
        }
    }

    /// Start (or reach) the upstream and initialize an MCP session with it.
    async fn connect(&self) -> Result<RunningService<RoleClient, ()>, ConnectError> {
        match &self.transport {
            Transport::Stdio {
                command,
                args,
                env,
                cwd,
            } => {
                let mut cmd = tokio::process::Command::new(command);
                cmd.args(args).envs(env);
                if let Some(cwd) = cwd {
                    cmd.current_dir(cwd);
                }
                let (child, _) = rmcp::transport::TokioChildProcess::builder(cmd)
                    .spawn()
                    .map_err(|e| self.connect_error(format!("cannot start it: {e}; check `command` and `args`")))?;
                ().serve(child).await.map_err(|e| {
                    self.connect_error(format!("it started but did not complete MCP's initialization: {e}"))
                })
            }
            Transport::Http { url } => {
                let transport = rmcp::transport::StreamableHttpClientTransport::from_uri(url.as_str());
                ().serve(transport).await.map_err(|e| {
                    self.connect_error(format!(
                        "no MCP session: {e}; check that the server runs and `url` names its endpoint"
                    ))
                })
            }
        }
    }

    /// The session's peer, connecting first when there is none (or the last one closed).
    async fn peer(&self) -> Result<rmcp::Peer<RoleClient>, ConnectError> {
        let mut conn = self.conn.lock().await;
        if let Some(c) = conn.as_ref()
            && !c.is_closed()
        {
            return Ok(c.peer().clone());
        }
        if let Some(old) = conn.take() {
            let _ = old.cancel().await;
        }
        let c = self.connect().await?;
        let peer = c.peer().clone();
        *conn = Some(c);
        Ok(peer)
    }

    /// Forget the session (after it failed mid-call): the next call starts a new one.
    async fn reset(&self) {
        if let Some(old) = self.conn.lock().await.take() {
            let _ = old.cancel().await;
        }
    }

    /// The upstream's tools, every page.
    pub(super) async fn list_tools(&self) -> Result<Vec<McpTool>, ConnectError> {
        let peer = self.peer().await?;
        match peer.list_all_tools().await {
            Ok(tools) => Ok(tools),
            Err(e) => {
                self.reset().await;
                Err(self.connect_error(format!("`tools/list` failed: {e}")))
            }
        }
    }

    /// Call `tool` with `arguments`, within `timeout`. A failure before the request left is
    /// transient (nothing happened); an MCP error the upstream answered is definitive; a
    /// timeout, a closed connection or anything else after the request left is unknown (the
    /// upstream may have acted). An `isError` result is definitive: the tool said it failed.
    pub(super) async fn call(
        &self,
        tool: &str,
        arguments: Value,
        key: Option<&str>,
        timeout: Option<Duration>,
    ) -> Result<CallToolResult, ToolError> {
        let peer = self
            .peer()
            .await
            .map_err(|e| ToolError::transient(format!("{e}; nothing was sent")))?;
        let mut params = CallToolRequestParams::new(tool.to_owned());
        if let Value::Object(args) = arguments {
            params = params.with_arguments(args);
        }
        if let Some(key) = key {
            // The effect key, for an upstream that dedupes by it.
            let mut meta = rmcp::model::RequestMetaObject::default();
            meta.insert("effect-tool/key".to_owned(), Value::String(key.to_owned()));
            params.meta = Some(meta);
        }
        let call = peer.call_tool(params);
        let answer = match timeout {
            Some(limit) => match tokio::time::timeout(limit, call).await {
                Ok(answer) => answer,
                Err(_) => {
                    // The session may be stuck behind the hung call: start a new one next time.
                    self.reset().await;
                    return Err(ToolError::unknown(format!(
                        "upstream `{}` did not answer `{tool}` within {limit:?} after the request was sent: it may have acted",
                        self.name
                    )));
                }
            },
            None => call.await,
        };
        match answer {
            Ok(result) if result.is_error == Some(true) => Err(ToolError::definitive(format!(
                "upstream `{}` answered that `{tool}` failed: {}",
                self.name,
                text_of(&result)
            ))),
            Ok(result) => Ok(result),
            Err(ServiceError::McpError(e)) => Err(ToolError::definitive(format!(
                "upstream `{}` refused `{tool}`: {} (code {})",
                self.name, e.message, e.code.0
            ))),
            Err(e) => {
                self.reset().await;
                Err(ToolError::unknown(format!(
                    "upstream `{}` lost `{tool}` after the request was sent ({e}): it may have acted",
                    self.name
                )))
            }
        }
    }

    /// Close the session (a child process is asked to exit, then killed).
    pub(super) async fn close(&self) {
        self.reset().await;
    }
}

/// The text content of a result, joined.
pub(super) fn text_of(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.as_str()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A result as the journal keeps it (and the model reads it): its structured content when it
/// has one, else its text when all of it is text, else its content blocks as JSON.
pub(super) fn output_of(result: &CallToolResult) -> Value {
    if let Some(s) = &result.structured_content {
        return s.clone();
    }
    if result.content.iter().all(|c| c.as_text().is_some()) {
        return Value::String(text_of(result));
    }
    serde_json::to_value(&result.content).unwrap_or(Value::Null)
}
