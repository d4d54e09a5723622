//! The MCP gateway against real third-party MCP servers installed from their registries
//! (`scripts/mcp-servers.sh install`: the official filesystem and memory servers from npm) and a
//! tiny upstream of our own (`tests/mcp_upstream/ledger_server.py`, the Python SDK's FastMCP)
//! for an upstream that hangs after acting and for schema drift. Every effect is counted in the
//! upstream's own state: the file on disk, the memory server's file, the ledger file.
//!
//! The servers are found through `EFFECT_TOOL_MCP_SERVERS` (printed by the script). Without it
//! a test says so loudly and passes, outside CI only: under `CI` (or
//! `EFFECT_TOOL_REQUIRE_MCP_SERVERS`, which `scripts/test.sh` sets) it fails.

#![cfg(all(feature = "gateway", feature = "sqlite"))]

use std::path::{Path, PathBuf};
use std::time::Duration;

use effect_tool::adapters::mcp::gateway::{Declarations, Drift, Gateway, write_digests};
use effect_tool::store::sqlite::SqliteStore;
use effect_tool::{Engine, Filter, RecordState, Store, StoreExt, Verdict};
use rmcp::model::{CallToolRequestParams, CallToolResult, RequestMetaObject};
use rmcp::service::{RoleClient, RunningService};
use serde_json::{Value, json};

/// The folder `scripts/mcp-servers.sh install` filled, or `None` (outside CI) to skip.
pub(crate) fn servers() -> Option<PathBuf> {
    match std::env::var_os("EFFECT_TOOL_MCP_SERVERS") {
        Some(dir) => Some(PathBuf::from(dir)),
        None if std::env::var_os("CI").is_some() || std::env::var_os("EFFECT_TOOL_REQUIRE_MCP_SERVERS").is_some() => {
            panic!(
                "EFFECT_TOOL_MCP_SERVERS is unset under CI (or EFFECT_TOOL_REQUIRE_MCP_SERVERS): run `eval \"$(scripts/mcp-servers.sh install)\"` first"
            )
        }
        None => {
            eprintln!(
                "\n*** SKIPPED: the gateway's real MCP servers are not installed. Run `eval \"$(scripts/mcp-servers.sh install)\"` and test again. ***\n"
            );
            None
        }
    }
}

pub(super) fn python() -> String {
    std::env::var("PYTHON").unwrap_or_else(|_| "python3".to_owned())
}

fn ledger_server() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/mcp_upstream/ledger_server.py")
        .display()
        .to_string()
}

pub(crate) fn node_server(servers: &Path, package: &str) -> String {
    servers
        .join("node_modules/@modelcontextprotocol")
        .join(package)
        .join("dist/index.js")
        .display()
        .to_string()
}

/// A gateway served in process to rmcp's client, over a SQLite journal at `db`.
pub(super) async fn serve(decls: &Declarations, db: &Path) -> (Gateway, RunningService<RoleClient, ()>, SqliteStore) {
    let gateway = Gateway::start(decls).await.expect("the gateway starts");
    let store = SqliteStore::open(db).expect("the journal opens");
    let server = gateway.server(Engine::new(store.clone()));
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move { server.serve_transport(tokio::io::split(server_io)).await });
    let client = rmcp::ServiceExt::serve((), tokio::io::split(client_io))
        .await
        .expect("an MCP session");
    (gateway, client, store)
}

/// Call `tool` in run `run` under the model's call id `call`.
pub(super) async fn call(
    client: &RunningService<RoleClient, ()>,
    tool: &str,
    args: Value,
    run: &str,
    call: &str,
) -> CallToolResult {
    let mut meta = RequestMetaObject::default();
    meta.insert("effect-tool/run_id".to_owned(), json!(run));
    meta.insert("effect-tool/call_id".to_owned(), json!(call));
    let mut params = CallToolRequestParams::new(tool.to_owned()).with_arguments(args.as_object().cloned().unwrap());
    params.meta = Some(meta);
    client.call_tool(params).await.expect("the gateway answers")
}

pub(super) fn text(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The filesystem server's root, made under `dir`, with `note.txt` in it holding one `x` (an
/// edit that doubles it reads `xxx` when applied twice); and the declarations that front the
/// server with its `edit_file` declared: `(root, note, declarations)`.
pub(super) fn filesystem_with_note(servers: &Path, dir: &Path) -> (PathBuf, PathBuf, String) {
    let root = dir.join("root");
    std::fs::create_dir(&root).unwrap();
    let root = root.canonicalize().unwrap();
    let note = root.join("note.txt");
    std::fs::write(&note, "x").unwrap();
    let text = format!(
        r#"
[upstreams.fs]
command = "node"
args = [{fs:?}, {root:?}]

[upstreams.fs.tools.edit_file]
class = "irreversible"
key = ["path", "edits"]
timeout = "30s"
"#,
        fs = node_server(servers, "server-filesystem"),
        root = root.display().to_string(),
    );
    (root, note, text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filesystem_edit_replanned_and_retried_applies_once_and_undeclared_writers_are_not_served() {
    let Some(servers) = servers() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (_, note, toml) = filesystem_with_note(&servers, dir.path());
    let decls = Declarations::parse(&toml).unwrap();
    let (gateway, client, store) = serve(&decls, &dir.path().join("journal.db")).await;

    // Served: the declared writer and the read-only tools (as pure); not served: writers the
    // file does not declare, each with the declaration to add.
    let names: Vec<String> = client
        .list_all_tools()
        .await
        .unwrap()
        .iter()
        .map(|t| t.name.to_string())
        .collect();
    assert!(names.contains(&"edit_file".to_owned()), "{names:?}");
    assert!(names.contains(&"read_text_file".to_owned()), "{names:?}");
    assert!(!names.contains(&"write_file".to_owned()), "{names:?}");
    let hidden = gateway
        .hidden()
        .iter()
        .find(|h| h.tool == "write_file")
        .expect("write_file is hidden");
    assert!(
        hidden.reason.contains("[upstreams.fs.tools.write_file]"),
        "{}",
        hidden.reason
    );
    assert!(hidden.reason.contains("digest = \""), "{}", hidden.reason);

    // One edit that doubles the `x`: applied twice, the file would read `xxx`.
    let args = json!({"path": note.display().to_string(), "edits": [{"oldText": "x", "newText": "xx"}]});
    let first = call(&client, "edit_file", args.clone(), "run-1", "call-1").await;
    assert_ne!(first.is_error, Some(true), "{}", text(&first));
    let retried = call(&client, "edit_file", args.clone(), "run-1", "call-1").await;
    assert_ne!(retried.is_error, Some(true), "{}", text(&retried));
    let replanned = call(&client, "edit_file", args.clone(), "run-1", "call-2").await;
    assert_ne!(replanned.is_error, Some(true), "{}", text(&replanned));
    assert_eq!(
        std::fs::read_to_string(&note).unwrap(),
        "xx",
        "the edit applied once, by the file's own content"
    );
    assert_eq!(text(&retried), text(&first), "the retry reads the recorded result");

    // The journal names the upstream tool (as `list`, `show` and the console show it) and keeps
    // the model's arguments as the input; the result's _meta says the re-plan was a replay,
    // under the key the declaration makes.
    let meta = serde_json::to_value(&replanned.meta).unwrap();
    assert_eq!(meta["effect-tool/disposition"], "replayed", "{meta}");
    assert!(
        meta["effect-tool/key"].as_str().unwrap().contains(":edit_file:"),
        "{meta}"
    );
    let records = store.list(&Filter::default()).await.unwrap();
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0].tool, "edit_file");
    assert_eq!(records[0].input, args);

    // A read-only tool is served as pure and reads the file.
    let read = call(
        &client,
        "read_text_file",
        json!({"path": note.display().to_string()}),
        "run-1",
        "call-3",
    )
    .await;
    assert!(text(&read).contains("xx"), "{}", text(&read));

    // `check`: write_file and the other writers are undeclared, edit_file has no digest yet.
    let drift = gateway.drift(&decls);
    assert!(
        drift
            .iter()
            .any(|d| matches!(d, Drift::Undeclared { tool, .. } if tool == "write_file")),
        "{drift:?}"
    );
    assert!(
        drift
            .iter()
            .any(|d| matches!(d, Drift::Unreviewed { tool, .. } if tool == "edit_file")),
        "{drift:?}"
    );
    client.cancel().await.unwrap();
    gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_approval_parks_a_person_approves_and_the_call_runs_once() {
    let Some(servers) = servers() else { return };
    let dir = tempfile::tempdir().unwrap();
    let memory = dir.path().join("memory.jsonl");
    let decls = Declarations::parse(&format!(
        r#"
[upstreams.memory]
command = "node"
args = [{server:?}]
env = {{ MEMORY_FILE_PATH = {memory:?} }}

[upstreams.memory.tools.create_entities]
class = "irreversible"
key = ["entities"]
approval = "ops"
"#,
        server = node_server(&servers, "server-memory"),
        memory = memory.display().to_string(),
    ))
    .unwrap();
    let (gateway, client, store) = serve(&decls, &dir.path().join("journal.db")).await;
    let args =
        json!({"entities": [{"name": "Ada", "entityType": "person", "observations": ["wrote the first program"]}]});
    let parked = call(&client, "create_entities", args.clone(), "run-1", "call-1").await;
    assert_eq!(parked.is_error, Some(true), "{}", text(&parked));
    assert!(
        !memory.exists() || !std::fs::read_to_string(&memory).unwrap().contains("Ada"),
        "nothing ran before approval"
    );

    // A person approves exactly what was asked (the record's input, by its fingerprint).
    let waiting = store
        .list(&Filter {
            states: vec![RecordState::AwaitingApproval],
            ..Filter::default()
        })
        .await
        .unwrap();
    assert_eq!(waiting.len(), 1, "{waiting:?}");
    store
        .approve(&waiting[0].key, "alice", "ops", &waiting[0].fingerprint)
        .await
        .unwrap();

    let ran = call(&client, "create_entities", args.clone(), "run-1", "call-1").await;
    assert_ne!(ran.is_error, Some(true), "{}", text(&ran));
    let again = call(&client, "create_entities", args.clone(), "run-1", "call-2").await;
    assert_ne!(again.is_error, Some(true), "{}", text(&again));
    let lines = std::fs::read_to_string(&memory).unwrap();
    assert_eq!(lines.matches("\"Ada\"").count(), 1, "{lines}");
    let done = store.list(&Filter::default()).await.unwrap();
    assert_eq!(done[0].state, RecordState::Completed, "{done:?}");
    client.cancel().await.unwrap();
    gateway.shutdown().await;
}

fn ledger_decls(ledger: &Path, env: &str, extra: &str) -> String {
    format!(
        r#"
[upstreams.ledger]
command = {python:?}
args = [{script:?}]
env = {{ LEDGER = {ledger:?}{env} }}

[upstreams.ledger.tools.append]
class = "irreversible"
key = "line:{{text}}"
{extra}
"#,
        python = python(),
        script = ledger_server(),
        ledger = ledger.display().to_string(),
    )
}

fn lines(ledger: &Path) -> usize {
    std::fs::read_to_string(ledger).map(|t| t.lines().count()).unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_hangs_after_acting_is_in_doubt_and_never_run_again() {
    let Some(_) = servers() else { return };
    let dir = tempfile::tempdir().unwrap();
    let ledger = dir.path().join("ledger.txt");
    let decls = Declarations::parse(&ledger_decls(&ledger, ", HANG_AFTER_APPLY = \"1\"", "timeout = \"2s\"")).unwrap();
    let (gateway, client, store) = serve(&decls, &dir.path().join("journal.db")).await;
    let args = json!({"text": "pay invoice 7"});
    let first = call(&client, "append", args.clone(), "run-1", "call-1").await;
    assert_eq!(first.is_error, Some(true), "{}", text(&first));
    assert_eq!(lines(&ledger), 1, "the upstream acted before it hung");
    let in_doubt = store
        .list(&Filter {
            states: vec![RecordState::InDoubt],
            ..Filter::default()
        })
        .await
        .unwrap();
    assert_eq!(
        in_doubt.len(),
        1,
        "the timeout after sending is an unknown outcome: {}",
        text(&first)
    );

    // The model tries again, in a new turn: blocked, never run again.
    let again = call(&client, "append", args.clone(), "run-1", "call-2").await;
    assert_eq!(again.is_error, Some(true), "{}", text(&again));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(lines(&ledger), 1, "{}", text(&again));

    // A person looks at the ledger and says it happened: the next call reads that. The journal
    // keeps the upstream's outputSchema: an output that does not fit it is refused.
    let wrong = store
        .resolve(
            &in_doubt[0].key,
            "alice",
            Verdict::Applied {
                output: json!("appended pay invoice 7"),
            },
        )
        .await;
    assert!(wrong.is_err(), "{wrong:?}");
    store
        .resolve(
            &in_doubt[0].key,
            "alice",
            Verdict::Applied {
                // What the upstream answers: its `structuredContent`, which fits the
                // `outputSchema` it lists (the SDK wraps a string under `result`).
                output: json!({"result": "appended pay invoice 7"}),
            },
        )
        .await
        .unwrap();
    let resolved = call(&client, "append", args, "run-1", "call-3").await;
    assert_ne!(resolved.is_error, Some(true), "{}", text(&resolved));
    assert_eq!(
        resolved.structured_content,
        Some(json!({"result": "appended pay invoice 7"}))
    );
    assert_eq!(lines(&ledger), 1);
    client.cancel().await.unwrap();
    gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drifted_upstream_schema_fails_the_check_and_is_not_served() {
    let Some(_) = servers() else { return };
    let dir = tempfile::tempdir().unwrap();
    let ledger = dir.path().join("ledger.txt");
    let file = dir.path().join("effect-tool.gateway.toml");

    // Reviewed: the digests written from the live upstream; the check then passes.
    std::fs::write(&file, ledger_decls(&ledger, "", "timeout = \"2s\"")).unwrap();
    let decls = Declarations::load(&file).unwrap();
    let gateway = Gateway::start(&decls).await.unwrap();
    assert_eq!(write_digests(&file, &decls, gateway.live_tools()).unwrap(), 1);
    gateway.shutdown().await;
    let reviewed = Declarations::load(&file).unwrap();
    assert!(reviewed.upstreams["ledger"].tools["append"].digest.is_some());
    let gateway = Gateway::start(&reviewed).await.unwrap();
    assert_eq!(gateway.drift(&reviewed), vec![]);
    gateway.shutdown().await;

    // The upstream's new version takes another argument: the check fails naming the tool and
    // the fix, and the gateway does not serve the changed tool.
    let text_now = std::fs::read_to_string(&file)
        .unwrap()
        .replace("LEDGER = ", "EXTRA_ARG = \"1\", LEDGER = ");
    std::fs::write(&file, text_now).unwrap();
    let drifted = Declarations::load(&file).unwrap();
    let gateway = Gateway::start(&drifted).await.unwrap();
    let drift = gateway.drift(&drifted);
    assert!(
        matches!(&drift[..], [Drift::Changed { tool, .. }] if tool == "append"),
        "{drift:?}"
    );
    let message = drift[0].to_string();
    assert!(message.contains("`append` of upstream `ledger` changed"), "{message}");
    assert!(message.contains("--write-digests"), "{message}");
    assert!(gateway.toolkit().get("append").is_none());
    assert!(gateway.hidden().iter().any(|h| h.tool == "append"));
    gateway.shutdown().await;
}

#[test]
fn declaration_errors_name_the_line_and_what_to_write() {
    let e = Declarations::parse("[upstreams.a]\ncommand = \"x\"\n\n[upstreams.a.tools.t]\nclass = \"idempotant\"\n")
        .unwrap_err();
    assert_eq!(e.line, 5, "{e}");
    assert!(e.to_string().contains("help: write `class = \"pure\"`"), "{e}");
    let e = Declarations::parse(
        "[upstreams.a]\nurl = \"http://x\"\n\n[upstreams.a.tools.t]\nclass = \"pure\"\nkey = [\"a\"]\n",
    )
    .unwrap_err();
    assert!(e.to_string().contains("a `pure` tool has no `key`"), "{e}");
    let e = Declarations::parse("[upstreams.a]\n").unwrap_err();
    assert!(e.to_string().contains("add `command = "), "{e}");
    let e = Declarations::parse(
        "[upstreams.a]\ncommand = \"x\"\n[upstreams.a.tools.t]\nclass = \"irreversible\"\nwhen = 1\n",
    )
    .unwrap_err();
    assert_eq!(e.line, 5, "{e}");
    // Durations as `#[tool]` writes them, read by humantime; a number without a unit is refused.
    let t = "[upstreams.a]\ncommand = \"x\"\n[upstreams.a.tools.t]\nclass = \"irreversible\"\n";
    let e = Declarations::parse(&format!("{t}timeout = \"30\"\n")).unwrap_err();
    assert!(e.to_string().contains("write `timeout = \"30s\"`"), "{e}");
    let d = Declarations::parse(&format!("{t}timeout = \"1h30m\"\nttl = \"7d\"\n")).unwrap();
    let decl = &d.upstreams["a"].tools["t"];
    assert_eq!(decl.timeout, Some(Duration::from_secs(5400)));
    assert_eq!(decl.ttl, Some(Duration::from_secs(7 * 86_400)));
}

/// `target/<profile>/examples/gateway_filesystem`, built by `cargo test --all-features` (or
/// `cargo build --all-features --example gateway_filesystem`).
pub(super) fn gateway_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    let bin = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("the test binary lives in target/<profile>/deps")
        .join("examples")
        .join(format!("gateway_filesystem{}", std::env::consts::EXE_SUFFIX));
    assert!(
        bin.exists(),
        "{} is missing: build it with `cargo build --all-features --example gateway_filesystem`",
        bin.display()
    );
    bin
}

/// The gateway as a real process over stdio: its pid and an MCP session with it.
async fn gateway_process(config: &Path, db: &Path) -> (u32, RunningService<RoleClient, ()>) {
    let mut cmd = tokio::process::Command::new(gateway_binary());
    cmd.env("EFFECT_TOOL_GATEWAY_CONFIG", config)
        .env("EFFECT_TOOL_DB", db)
        .env("EFFECT_TOOL_RUN_ID", "run-1")
        .env("EFFECT_TOOL_WORKER", "gateway-1");
    let (child, _) = rmcp::transport::TokioChildProcess::builder(cmd)
        .spawn()
        .expect("the gateway starts");
    let pid = child.id().expect("a pid");
    let client = rmcp::ServiceExt::serve((), child)
        .await
        .expect("an MCP session with the gateway");
    (pid, client)
}

fn kill(pid: u32) {
    let _ = std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_killed_mid_call_and_restarted_leaves_a_record_a_person_resolves_and_one_effect() {
    let Some(_) = servers() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (ledger, db, pids) = (
        dir.path().join("ledger.txt"),
        dir.path().join("journal.db"),
        dir.path().join("pids"),
    );
    let config = dir.path().join("effect-tool.gateway.toml");
    let pidfile = format!(", PIDFILE = {:?}", pids.display().to_string());
    // The first upstream acts, then hangs: the gateway is killed while it waits.
    std::fs::write(
        &config,
        ledger_decls(&ledger, &format!("{pidfile}, HANG_AFTER_APPLY = \"1\""), ""),
    )
    .unwrap();
    let (pid, client) = gateway_process(&config, &db).await;
    let args = json!({"text": "ship order 12"});
    let pending = tokio::spawn(async move {
        let params = CallToolRequestParams::new("append").with_arguments(args.as_object().cloned().unwrap());
        client.call_tool(params).await
    });
    for _ in 0..200 {
        if lines(&ledger) > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(lines(&ledger), 1, "the upstream acted");
    kill(pid);
    assert!(pending.await.unwrap().is_err(), "the client lost its gateway");
    for p in std::fs::read_to_string(&pids).unwrap_or_default().lines() {
        kill(p.trim().parse().unwrap());
    }

    // Restarted (its upstream now answers at once): the claim the killed gateway left is taken
    // over, and the irreversible call is blocked, not run again.
    std::fs::write(&config, ledger_decls(&ledger, &pidfile, "")).unwrap();
    let (pid, client) = gateway_process(&config, &db).await;
    let args = json!({"text": "ship order 12"});
    let params = CallToolRequestParams::new("append").with_arguments(args.as_object().cloned().unwrap());
    let blocked = client.call_tool(params.clone()).await.unwrap();
    assert_eq!(blocked.is_error, Some(true), "{}", text(&blocked));
    assert_eq!(lines(&ledger), 1, "never run again: {}", text(&blocked));

    // A person resolves it through the journal (as `effect-tool resolve` does): the next call
    // reads the verdict.
    let store = SqliteStore::open(&db).unwrap();
    let waiting = store
        .list(&Filter {
            states: vec![RecordState::InDoubt],
            ..Filter::default()
        })
        .await
        .unwrap();
    assert_eq!(waiting.len(), 1, "{}", text(&blocked));
    store
        .resolve(
            &waiting[0].key,
            "alice",
            Verdict::Applied {
                // What the upstream answers: its `structuredContent`, which fits the
                // `outputSchema` it lists (the SDK wraps a string under `result`).
                output: json!({"result": "appended ship order 12"}),
            },
        )
        .await
        .unwrap();
    let read = client.call_tool(params).await.unwrap();
    assert_ne!(read.is_error, Some(true), "{}", text(&read));
    assert_eq!(lines(&ledger), 1);
    let _ = client.cancel().await;
    kill(pid);
}
