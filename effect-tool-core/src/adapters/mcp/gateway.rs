//! The MCP gateway (feature `gateway`): an MCP server that fronts other MCP servers and calls
//! their tools through the engine and the journal, under declarations kept in a reviewed file.
//!
//! An agent calls a filesystem, git or issue-tracker MCP server as it calls a `#[tool]`: each
//! upstream tool gets a class, a key, a window, a ttl, a timeout, an approval and a `recover`
//! from `effect-tool.gateway.toml` ([`Declarations`]), and the gateway serves it with the
//! [`McpServer`] that serves a [`Toolkit`]: recorded results replayed, parallel identical calls
//! shared, approvals parked and bound to their input, an upstream timeout or a lost connection
//! after sending in doubt for a person, `_meta` key and class on every result.
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use effect_tool_core::adapters::mcp::gateway::{Declarations, Gateway};
//! use effect_tool_core::{Engine, MemoryStore};
//! let decls = Declarations::load("effect-tool.gateway.toml")?;
//! let gateway = Gateway::start(&decls).await?;
//! for hidden in gateway.hidden() {
//!     eprintln!("{hidden}");
//! }
//! gateway.server(Engine::new(MemoryStore::new())).serve_stdio().await?;
//! # Ok(()) }
//! ```
//!
//! # Which tools are served
//!
//! - A declared tool, under its declaration, unless its `digest` differs from the upstream's
//!   live tool (its schema or annotations changed since review: hidden until
//!   `effect-tool gateway check` passes again).
//! - An undeclared tool the upstream marks `readOnlyHint: true`, as `pure` (nothing journaled).
//! - No other: an undeclared tool that may change something is hidden, and
//!   [`Gateway::hidden`] (logged at start) gives the declaration to add.
//!
//! Names are the upstream's, prefixed `<upstream>__` when two upstreams list the same name
//! (or the upstream says `prefix = true`).
//!
//! # The journal
//!
//! Each call is journaled under the name the gateway serves its tool by (`edit_file`, or
//! `fs__edit_file` when prefixed), with the model's arguments as its input, as a `#[tool]`'s
//! call is: `effect-tool list` and `show`, the console, the manifest and a policy see the
//! upstream tool, and a key (the declaration's, the default one, or a client's idempotency key)
//! is scoped to it: a key of one upstream tool never replays another's.
//!
//! # Output schemas
//!
//! An upstream tool that lists an `outputSchema` is served with it, as listed, and its answer is
//! checked against it before the client gets it, as a `#[tool]`'s output is
//! ([`crate::toolkit::output`]): its `structuredContent` is what the journal records, and an
//! answer that does not fit (a field of the wrong type, a missing one, no `structuredContent`
//! at all) reaches the client as an error result with `_meta` outcome `invalid-output` naming
//! the paths that do not fit (never their values), and the server's log says the same.
//!
//! Such a call is recorded as completed, not failed: the upstream answered without `isError`,
//! so it acted, and a failure would let a retry act again (an unknown outcome would put in
//! doubt an effect the upstream confirmed). The record keeps what the upstream answered; a retry
//! or a re-plan replays it and is told again that it does not fit, and a person reads the record
//! with `effect-tool show` and may correct it with `effect-tool resolve <key> --applied
//! --output '<json>' --amend`.
//!
//! # What counts as what
//!
//! An answer with `isError: true`, or a JSON-RPC error, is definitive (the upstream said it did
//! not do it). An upstream not reachable before the request left is transient. A timeout (the
//! declaration's `timeout`), a closed connection or a dead child process after the request
//! left is an unknown outcome: `idempotent` runs again under the same key, `irreversible` is in
//! doubt until `recover` finds the effect or a person resolves it.

mod check;
mod declare;
mod tool;
mod upstream;

use std::collections::BTreeMap;
use std::sync::Arc;

use rmcp::model::Tool as McpTool;

pub use check::{Drift, digest_of, drift_of, read_only, suggested_declaration, write_digests};
pub use declare::{
    Condition, DEFAULT_FILE, DeclarationError, Declarations, KeyDecl, RecoverDecl, Test, ToolDecl, Transport,
    UpstreamDecl, parse_duration,
};
pub use upstream::ConnectError;

use super::McpServer;
use crate::engine::Engine;
use crate::toolkit::{DuplicateTool, Toolkit};
use tool::{Declared, GatewayTool};
use upstream::Upstream;

/// Why a gateway did not start.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// The declarations file is wrong.
    #[error(transparent)]
    Declarations(#[from] DeclarationError),
    /// An upstream could not be started or reached.
    #[error("{0}\nhelp: the gateway starts only when every upstream answers `tools/list`")]
    Connect(#[from] ConnectError),
    /// Two exposed tools have one name.
    #[error(transparent)]
    Duplicate(#[from] DuplicateTool),
}

/// An upstream tool the gateway does not serve, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hidden {
    /// The upstream.
    pub upstream: String,
    /// The tool, as the upstream names it.
    pub tool: String,
    /// Why it is not served, and what to do.
    pub reason: String,
}

impl std::fmt::Display for Hidden {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "not serving `{}` of upstream `{}`: {}",
            self.tool, self.upstream, self.reason
        )
    }
}

/// The upstreams, connected, and the toolkit of the tools served.
pub struct Gateway {
    upstreams: Vec<Arc<Upstream>>,
    live: Vec<(String, Vec<McpTool>)>,
    toolkit: Toolkit,
    hidden: Vec<Hidden>,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("upstreams", &self.upstreams)
            .field("tools", &self.toolkit.names())
            .field("hidden", &self.hidden)
            .finish()
    }
}

impl Gateway {
    /// Start (or reach) every upstream of `decls`, list its tools and make the toolkit of the
    /// tools served under their declarations. Each hidden tool is logged (a warning) with what
    /// to do; [`Gateway::hidden`] lists them.
    pub async fn start(decls: &Declarations) -> Result<Gateway, GatewayError> {
        let mut upstreams = Vec::new();
        let mut live = Vec::new();
        for (name, decl) in &decls.upstreams {
            let up = Arc::new(Upstream::new(name.clone(), decl.transport.clone()));
            let tools = up.list_tools().await?;
            upstreams.push(up);
            live.push((name.clone(), tools));
        }
        let mut gateway = Gateway {
            upstreams,
            live,
            toolkit: Toolkit::new(),
            hidden: Vec::new(),
        };
        gateway.build(decls)?;
        for hidden in &gateway.hidden {
            tracing::warn!(upstream = %hidden.upstream, tool = %hidden.tool, "{hidden}");
        }
        Ok(gateway)
    }

    fn build(&mut self, decls: &Declarations) -> Result<(), GatewayError> {
        // A name two upstreams list is prefixed in both, whichever tools are served: the names
        // a model sees do not change when a declaration is added.
        let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
        for (_, tools) in &self.live {
            for t in tools {
                *seen.entry(t.name.as_ref()).or_default() += 1;
            }
        }
        let mut toolkit = Toolkit::new();
        let mut hidden = Vec::new();
        for (up, (name, tools)) in self.upstreams.iter().zip(&self.live) {
            let Some(updecl) = decls.upstreams.get(name) else {
                continue;
            };
            for vanished in updecl
                .tools
                .keys()
                .filter(|t| !tools.iter().any(|l| l.name == t.as_str()))
            {
                tracing::warn!(upstream = %name, tool = %vanished, "a declared tool is not listed by its upstream; run `effect-tool gateway check`");
            }
            for t in tools {
                let tool_name = t.name.to_string();
                let hide = |reason: String| Hidden {
                    upstream: name.clone(),
                    tool: tool_name.clone(),
                    reason,
                };
                let decl = match updecl.tools.get(&tool_name) {
                    Some(d) => {
                        let live = digest_of(t);
                        match &d.digest {
                            Some(recorded) if *recorded != live => {
                                hidden.push(hide(format!(
                                    "its schema, description or annotations changed since review (digest {recorded} in the file, {live} now); review the change, then run `effect-tool gateway check --write-digests`"
                                )));
                                continue;
                            }
                            None => {
                                tracing::warn!(upstream = %name, tool = %tool_name, "served, but its declaration has no digest: review it and run `effect-tool gateway check --write-digests`")
                            }
                            Some(_) => {}
                        }
                        if let Some(reason) = recover_problem(updecl, d, tools) {
                            hidden.push(hide(reason));
                            continue;
                        }
                        d.clone()
                    }
                    None if read_only(t) => ToolDecl::pure(),
                    None => {
                        hidden.push(hide(format!(
                            "it is not declared and the upstream does not mark it read-only; review it and add to the declarations file:\n{}",
                            suggested_declaration(name, t)
                        )));
                        continue;
                    }
                };
                let exposed = if updecl.prefix || seen.get(t.name.as_ref()).copied().unwrap_or(0) > 1 {
                    format!("{name}__{tool_name}")
                } else {
                    tool_name.clone()
                };
                let description = t.description.as_deref().unwrap_or_default().to_owned();
                let description = if description.is_empty() {
                    format!("`{tool_name}` of the MCP server `{name}`.")
                } else {
                    description
                };
                let declared = Declared::new(
                    exposed,
                    tool_name.clone(),
                    up.clone(),
                    decl,
                    description,
                    serde_json::Value::Object((*t.input_schema).clone()),
                    t.output_schema
                        .as_ref()
                        .map(|s| serde_json::Value::Object((**s).clone())),
                    t.annotations.as_ref().and_then(|a| a.open_world_hint),
                );
                toolkit.try_add_dyn(Arc::new(GatewayTool(Arc::new(declared))), "an upstream MCP tool")?;
            }
        }
        self.toolkit = toolkit;
        self.hidden = hidden;
        Ok(())
    }

    /// The tools served, as a toolkit (to serve it another way, export it, or print its manifest).
    pub fn toolkit(&self) -> &Toolkit {
        &self.toolkit
    }

    /// The upstream tools not served, and why.
    pub fn hidden(&self) -> &[Hidden] {
        &self.hidden
    }

    /// Each upstream's tools as listed when the gateway started.
    pub fn live_tools(&self) -> &[(String, Vec<McpTool>)] {
        &self.live
    }

    /// What differs between `decls` and the upstreams' live tools (empty: the file is current).
    pub fn drift(&self, decls: &Declarations) -> Vec<Drift> {
        self.live
            .iter()
            .filter_map(|(name, tools)| decls.upstreams.get(name).map(|d| drift_of(d, tools)))
            .flatten()
            .collect()
    }

    /// An MCP server of the tools served, calling them through `engine`
    /// (serve it with [`McpServer::serve_stdio`] or, with `mcp-http`, over HTTP).
    pub fn server(&self, engine: Engine) -> McpServer {
        McpServer::new(self.toolkit.clone(), engine).with_server_info("effect-tool-gateway", env!("CARGO_PKG_VERSION"))
    }

    /// Close every upstream session (child processes are asked to exit, then killed).
    pub async fn shutdown(&self) {
        for up in &self.upstreams {
            up.close().await;
        }
    }
}

/// Why a declaration's `recover` cannot be used: its tool is not listed, or may change
/// something (neither marked read-only by the upstream nor declared `pure`).
fn recover_problem(updecl: &UpstreamDecl, decl: &ToolDecl, tools: &[McpTool]) -> Option<String> {
    let r = decl.recover.as_ref()?;
    let Some(t) = tools.iter().find(|t| t.name == r.tool.as_str()) else {
        return Some(format!(
            "its `recover` names `{}`, which the upstream does not list; name one of its read-only tools",
            r.tool
        ));
    };
    let declared_pure = updecl
        .tools
        .get(&r.tool)
        .is_some_and(|d| d.class == crate::EffectClass::Pure);
    if !read_only(t) && !declared_pure {
        return Some(format!(
            "its `recover` names `{}`, which may change something (not `readOnlyHint: true`, not declared `pure`); `recover` asks, it never acts",
            r.tool
        ));
    }
    None
}
