//! A tool that streams its progress: `#[tool(stream)]` on an async fn that returns
//! `impl Stream<Item = Result<Step, ToolError>>`. Each step is reported as it happens (to
//! `RunContext::with_progress`, and over MCP as `notifications/progress` to a client that sent
//! a `progressToken`); the last step is the tool's output, recorded in the journal. Calling it
//! again with the same key returns the recorded last step, makes no step and reports no
//! progress.
//!
//! `cargo run --example deploy_stream --features mcp` deploys in process, prints the progress,
//! deploys again and checks that nothing ran twice (it exits 1 if anything is wrong).
//! `cargo run --example deploy_stream --features mcp -- serve` serves the tool over MCP on
//! standard input and output, its steps appended to the ledger file `EFFECT_TOOL_LEDGER`
//! (default `deploy-ledger.txt`), for `tests/mcp_client/progress.py`.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use effect_tool::adapters::mcp::McpServer;
use effect_tool::{CallOptions, EffectCtx, Engine, MemoryStore, RunContext, ToolError, tool, toolkit};
use futures::Stream;
use futures::stream::{self, StreamExt};

/// One step of a deployment: what is done, and how many of the steps.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct Step {
    /// The stage just finished (`built`, `pushed`, `live`).
    pub stage: String,
    /// How many of `of` stages are done.
    pub done: u32,
    /// How many stages there are.
    pub of: u32,
}

/// The ledger file, once chosen.
static LEDGER: OnceLock<PathBuf> = OnceLock::new();

/// Where the steps are made: a file the engine never reads (the cluster, in this example).
fn ledger() -> &'static PathBuf {
    LEDGER.get_or_init(|| {
        std::env::var_os("EFFECT_TOOL_LEDGER").map_or_else(|| PathBuf::from("deploy-ledger.txt"), PathBuf::from)
    })
}

/// Make one step on the cluster: a line in the ledger.
fn make_step(service: &str, version: &str, stage: &str) -> Result<(), ToolError> {
    use std::io::Write as _;
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(ledger())
        .map_err(|e| ToolError::transient(format!("the cluster could not be reached: {e}")))?;
    writeln!(file, "step {service} {version} {stage}")
        .map_err(|e| ToolError::unknown(format!("the cluster did not confirm the step: {e}")))
}

/// Deploy a version of a service: build it, push it, roll it out. Reports each stage.
#[tool(effect = "idempotent", key(service, version), stream, timeout = "5m")]
async fn deploy(ctx: &EffectCtx, service: String, version: String) -> impl Stream<Item = Result<Step, ToolError>> {
    let _ = ctx;
    const STAGES: [&str; 3] = ["built", "pushed", "live"];
    stream::iter(STAGES.into_iter().enumerate()).then(move |(i, stage)| {
        let (service, version) = (service.clone(), version.clone());
        async move {
            make_step(&service, &version, stage)?;
            Ok(Step {
                stage: stage.to_owned(),
                done: i as u32 + 1,
                of: STAGES.len() as u32,
            })
        }
    })
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let result = match std::env::args().nth(1).as_deref() {
        Some("serve") => serve().await,
        None => demo().await,
        Some(other) => Err(format!("unknown argument `{other}`; usage: deploy_stream [serve]").into()),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("deploy_stream: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// The tool over MCP on standard input and output (standard output is the MCP channel).
async fn serve() -> Result<(), Box<dyn std::error::Error>> {
    let engine = Engine::new(MemoryStore::new());
    McpServer::new(toolkit![Deploy], engine)
        .with_server_info("effect-tool-deploy-stream", env!("CARGO_PKG_VERSION"))
        .serve_stdio()
        .await?;
    Ok(())
}

/// Deploy twice in process; fail unless the second call replays the first's last step.
async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    LEDGER
        .set(dir.path().join("ledger.txt"))
        .map_err(|_| "the ledger was chosen before the demo")?;
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let sink = seen.clone();
    let run = RunContext::new("release-42").with_progress(Arc::new(move |event| {
        println!("  progress: {}", event.value);
        sink.lock()
            .unwrap()
            .push(event.value["stage"].as_str().unwrap_or_default().to_owned());
    }));
    let engine = Engine::new(MemoryStore::new());
    let args = DeployArgs {
        service: "billing".into(),
        version: "1.4.2".into(),
    };

    println!("deploy billing 1.4.2:");
    let first = engine
        .call(&Deploy, &run, CallOptions::call_id("call-1"), args.clone())
        .await?;
    println!("  output: {first:?}");
    let steps = std::fs::read_to_string(ledger())?.lines().count();
    if first.stage != "live" || first.done != 3 || steps != 3 || *seen.lock().unwrap() != ["built", "pushed", "live"] {
        return Err(format!(
            "the deploy should make 3 steps, report each and end live; made {steps}, output {first:?}, progress {:?}",
            seen.lock().unwrap()
        )
        .into());
    }

    println!("deploy billing 1.4.2 again (the model retried):");
    seen.lock().unwrap().clear();
    let again = engine.call(&Deploy, &run, CallOptions::call_id("call-2"), args).await?;
    println!("  output: {again:?} (replayed, no progress)");
    let steps = std::fs::read_to_string(ledger())?.lines().count();
    if again != first || steps != 3 || !seen.lock().unwrap().is_empty() {
        return Err(format!("a replay should return the recorded last step, make no step and report no progress; made {} more, output {again:?}, progress {:?}", steps - 3, seen.lock().unwrap()).into());
    }
    println!("ok: 3 steps made once, the last one recorded and replayed");
    Ok(())
}
