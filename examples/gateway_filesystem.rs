//! The MCP gateway in front of the official filesystem MCP server: the agent's MCP client talks
//! to this process over stdio; every tool call goes through the engine and a SQLite journal
//! under the declarations of `effect-tool.gateway.toml`.
//!
//! ```text
//! npm install --prefix /tmp/mcp @modelcontextprotocol/server-filesystem
//! EFFECT_TOOL_GATEWAY_CONFIG=effect-tool.gateway.toml cargo run --example gateway_filesystem --features gateway
//! ```
//!
//! With no `EFFECT_TOOL_GATEWAY_CONFIG`, it writes a declarations file for the filesystem server
//! (`npx -y @modelcontextprotocol/server-filesystem <root>`, the root `$EFFECT_TOOL_ROOT` or a
//! new temporary folder) and prints it to stderr. The journal is `$EFFECT_TOOL_DB`
//! (default `gateway-journal.db`); `$EFFECT_TOOL_RUN_ID` the run of calls that name none;
//! `$EFFECT_TOOL_WORKER` the engine's worker identity (kept across restarts). Tools the file does not declare and that may write are not
//! served: the log says which declaration to add.

use effect_tool::Engine;
use effect_tool::adapters::mcp::gateway::{Declarations, Gateway};
use effect_tool::store::sqlite::SqliteStore;

const FILESYSTEM_DECLARATIONS: &str = r#"# The filesystem server's tools that write, declared. Its read-only tools (readOnlyHint: true)
# are served as `pure` without a line here; `effect-tool gateway check` lists them for review.
[upstreams.fs]
command = "npx"
args = ["-y", "@modelcontextprotocol/server-filesystem", "ROOT"]

# Editing a file twice with the same edits applies them twice: at most once per run.
[upstreams.fs.tools.edit_file]
class = "irreversible"
key = ["path", "edits"]
timeout = "30s"

# Writing the same content to the same path again changes nothing.
[upstreams.fs.tools.write_file]
class = "idempotent"
key = ["path", "content"]
window = "cross-run"
ttl = "7d"

[upstreams.fs.tools.create_directory]
class = "idempotent"
key = ["path"]
"#;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(std::env::var("EFFECT_TOOL_LOG").unwrap_or_else(|_| "warn".to_owned()))
        .init();
    let config = match std::env::var("EFFECT_TOOL_GATEWAY_CONFIG") {
        Ok(path) => std::path::PathBuf::from(path),
        Err(_) => {
            let root = match std::env::var("EFFECT_TOOL_ROOT") {
                Ok(root) => std::path::PathBuf::from(root),
                Err(_) => std::env::temp_dir().join(format!("effect-tool-gateway-{}", std::process::id())),
            };
            std::fs::create_dir_all(&root)?;
            let text = FILESYSTEM_DECLARATIONS.replace("ROOT", &root.display().to_string());
            let path = root.join("effect-tool.gateway.toml");
            std::fs::write(&path, &text)?;
            eprintln!("declarations written to {}:\n{text}", path.display());
            path
        }
    };
    let decls = Declarations::load(&config)?;
    let gateway = Gateway::start(&decls).await?;
    let db = std::env::var("EFFECT_TOOL_DB").unwrap_or_else(|_| "gateway-journal.db".to_owned());
    let mut engine = Engine::new(SqliteStore::open(db)?);
    if let Ok(worker) = std::env::var("EFFECT_TOOL_WORKER") {
        // A restarted gateway with the same identity takes its previous incarnation's claims
        // over at once (else after their lease).
        engine = engine.with_worker(worker);
    }
    let mut server = gateway.server(engine);
    if let Ok(run) = std::env::var("EFFECT_TOOL_RUN_ID") {
        server = server.with_run_id(run);
    }
    server.serve_stdio().await?;
    gateway.shutdown().await;
    Ok(())
}
