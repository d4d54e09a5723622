//! `effect-tool gateway`: the MCP gateway over stdio (or Streamable HTTP with `--listen`), and
//! `effect-tool gateway check`, the declarations file against the upstreams' live tools.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use clap::{Args, Subcommand};
use effect_tool_core::adapters::mcp::gateway::{DEFAULT_FILE, Declarations, Gateway, write_digests};
use effect_tool_core::{Engine, Store};

use crate::error::CliError;

/// `gateway` options.
#[derive(Debug, Args)]
pub struct GatewayArgs {
    /// The declarations file.
    #[arg(long, global = true, default_value = DEFAULT_FILE, value_name = "PATH")]
    pub config: PathBuf,

    /// Serve MCP over Streamable HTTP at this address (`/mcp`) instead of stdio.
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<std::net::SocketAddr>,

    /// The run of every call whose `_meta` names none (a stdio gateway that continues a run
    /// across restarts).
    #[arg(long, value_name = "RUN_ID")]
    pub run_id: Option<String>,

    /// This gateway's worker identity, kept across restarts: a claim its previous incarnation
    /// left (killed mid-call) is taken over at once instead of after its lease.
    #[arg(long, value_name = "NAME")]
    pub worker: Option<String>,

    /// `check`, or nothing to serve.
    #[command(subcommand)]
    pub action: Option<GatewayAction>,
}

/// What `gateway` does besides serving.
#[derive(Debug, Subcommand)]
pub enum GatewayAction {
    /// Connect to the upstreams and compare their live tools with the file: fails (exit 1) when
    /// a declared tool vanished, an undeclared one appeared, or a schema, description or
    /// annotation changed since its digest was written.
    Check {
        /// After review: write each declared tool's live digest into the file (its comments
        /// kept), then check again.
        #[arg(long)]
        write_digests: bool,
    },
}

fn load(path: &std::path::Path) -> Result<Declarations, CliError> {
    Declarations::load(path).map_err(|e| CliError::Usage(e.to_string()))
}

async fn start(decls: &Declarations) -> Result<Gateway, CliError> {
    Gateway::start(decls).await.map_err(|e| CliError::Store(e.to_string()))
}

/// `gateway check [--write-digests]`.
pub async fn check(args: &GatewayArgs, write: bool, out: &mut dyn Write) -> Result<(), CliError> {
    let mut decls = load(&args.config)?;
    let gateway = start(&decls).await?;
    if write {
        let n =
            write_digests(&args.config, &decls, gateway.live_tools()).map_err(|e| CliError::Store(e.to_string()))?;
        let _ = writeln!(out, "{n} digest(s) written to {}", args.config.display());
        decls = load(&args.config)?;
    }
    let drift = gateway.drift(&decls);
    gateway.shutdown().await;
    if drift.is_empty() {
        let n: usize = decls.upstreams.values().map(|u| u.tools.len()).sum();
        let _ = writeln!(
            out,
            "{}: {n} declared tool(s), every upstream as reviewed",
            args.config.display()
        );
        return Ok(());
    }
    // Each finding on lines of its own (its declaration is TOML to paste), on standard output;
    // the error line only counts them (an error is printed on one line).
    for finding in &drift {
        let _ = writeln!(out, "{finding}\n");
    }
    Err(CliError::Refused(format!(
        "{} differs from the upstreams' live tools ({} finding(s), above): review each, update the file, then run `effect-tool gateway check` again",
        args.config.display(),
        drift.len()
    )))
}

/// `gateway`: serve until the client goes away (stdio) or the process is interrupted (HTTP).
pub async fn serve(args: &GatewayArgs, store: Arc<dyn Store>) -> Result<(), CliError> {
    let decls = load(&args.config)?;
    let gateway = start(&decls).await?;
    for hidden in gateway.hidden() {
        eprintln!("warning: {hidden}");
    }
    let mut engine = Engine::new(store);
    if let Some(worker) = &args.worker {
        engine = engine.with_worker(worker.clone());
    }
    let mut server = gateway.server(engine);
    if let Some(run) = &args.run_id {
        server = server.with_run_id(run.clone());
    }
    let served = match args.listen {
        None => server.serve_stdio().await,
        Some(addr) => server.serve_http(addr).await,
    };
    gateway.shutdown().await;
    served.map_err(|e| CliError::Store(e.to_string()))
}
