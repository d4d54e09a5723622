//! The MCP gateway in front of more real servers: `mcp-server-git` (PyPI, effects counted in
//! git's own commits), `@modelcontextprotocol/server-everything` (npm, its tools, annotations
//! and structured output, fronted as a Streamable HTTP upstream), an upstream that breaks its
//! own `outputSchema` (`tests/mcp_upstream/shape_server.py`, the outside count in its ledger
//! file), and the official Python SDK's client driving the gateway in front of the filesystem
//! server (the effect counted in the file it edits).
//!
//! Found and skipped (outside CI only) as in [`super::gateway`].

#![cfg(all(feature = "gateway", feature = "sqlite"))]

use std::path::Path;
use std::time::Duration;

use effect_tool::adapters::mcp::gateway::Declarations;
use effect_tool::{Filter, RecordState, Store};
use serde_json::{Value, json};

use super::gateway::{call, filesystem_with_note, gateway_binary, node_server, python, serve, servers, text};
use crate::common::python::{client_passed, client_script, require_sdk};

/// The author of every commit, in the test's own `git` and in the git server's environment.
const GIT_ENV: [(&str, &str); 4] = [
    ("GIT_AUTHOR_NAME", "Ada"),
    ("GIT_AUTHOR_EMAIL", "ada@example.com"),
    ("GIT_COMMITTER_NAME", "Ada"),
    ("GIT_COMMITTER_EMAIL", "ada@example.com"),
];

/// `git -C repo args...`, its standard output trimmed; fails the test when git does.
fn git(repo: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(args)
        .envs(GIT_ENV)
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// The commits on HEAD, as git counts them: the outside count of the git server's effects.
fn commits(repo: &Path) -> usize {
    git(repo, &["rev-list", "--count", "HEAD"]).parse().unwrap()
}

fn names(tools: &[rmcp::model::Tool]) -> Vec<String> {
    tools.iter().map(|t| t.name.to_string()).collect()
}

fn meta(result: &rmcp::model::CallToolResult) -> Value {
    serde_json::to_value(&result.meta).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn git_commit_replanned_and_retried_commits_once() {
    let Some(servers) = servers() else { return };
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    std::fs::create_dir(&repo).unwrap();
    let repo = repo.canonicalize().unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    std::fs::write(repo.join("a.txt"), "a\n").unwrap();
    git(&repo, &["add", "a.txt"]);
    git(&repo, &["commit", "-q", "-m", "add a"]);
    assert_eq!(commits(&repo), 1);

    let env = GIT_ENV
        .iter()
        .map(|(k, v)| format!("{k} = {v:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    let decls = Declarations::parse(&format!(
        r#"
[upstreams.git]
command = {command:?}
args = ["--repository", {repo:?}]
env = {{ {env} }}

# Staging what is staged already changes nothing.
[upstreams.git.tools.git_add]
class = "idempotent"
key = ["repo_path", "files"]

# A commit records whatever is staged when it runs: one per message and repository.
[upstreams.git.tools.git_commit]
class = "irreversible"
key = ["repo_path", "message"]
timeout = "30s"
"#,
        command = servers.join("venv/bin/mcp-server-git").display().to_string(),
        repo = repo.display().to_string(),
    ))
    .unwrap();
    let (gateway, client, store) = serve(&decls, &dir.path().join("journal.db")).await;

    // Served: the declared writers and the read-only tools; the undeclared writers are not.
    let listed = names(&client.list_all_tools().await.unwrap());
    for served in ["git_add", "git_commit", "git_status", "git_log"] {
        assert!(listed.contains(&served.to_owned()), "{served}: {listed:?}");
    }
    for hidden in ["git_reset", "git_checkout", "git_create_branch"] {
        assert!(!listed.contains(&hidden.to_owned()), "{hidden}: {listed:?}");
        let h = gateway.hidden().iter().find(|h| h.tool == hidden).expect("hidden");
        assert!(
            h.reason.contains(&format!("[upstreams.git.tools.{hidden}]")),
            "{}",
            h.reason
        );
    }

    let repo_path = repo.display().to_string();
    std::fs::write(repo.join("b.txt"), "b\n").unwrap();
    let added = call(
        &client,
        "git_add",
        json!({"repo_path": repo_path, "files": ["b.txt"]}),
        "run-1",
        "call-1",
    )
    .await;
    assert_ne!(added.is_error, Some(true), "{}", text(&added));
    let commit_b = json!({"repo_path": repo_path, "message": "add b"});
    let first = call(&client, "git_commit", commit_b.clone(), "run-1", "call-2").await;
    assert_ne!(first.is_error, Some(true), "{}", text(&first));
    assert_eq!(commits(&repo), 2);

    // The agent goes on: c.txt is staged for a commit of its own. A commit of "add b" run again
    // now would record c.txt under it.
    std::fs::write(repo.join("c.txt"), "c\n").unwrap();
    let added = call(
        &client,
        "git_add",
        json!({"repo_path": repo_path, "files": ["c.txt"]}),
        "run-1",
        "call-3",
    )
    .await;
    assert_ne!(added.is_error, Some(true), "{}", text(&added));

    // The request delivered again (the same tool-call id), then re-planned (a new one).
    let retried = call(&client, "git_commit", commit_b.clone(), "run-1", "call-2").await;
    assert_ne!(retried.is_error, Some(true), "{}", text(&retried));
    assert_eq!(text(&retried), text(&first), "the retry reads the recorded commit");
    let replanned = call(&client, "git_commit", commit_b.clone(), "run-1", "call-4").await;
    assert_ne!(replanned.is_error, Some(true), "{}", text(&replanned));
    assert_eq!(meta(&replanned)["effect-tool/disposition"], "replayed");
    assert_eq!(commits(&repo), 2, "one commit of `add b`, by git's own count");
    assert_eq!(git(&repo, &["log", "-1", "--format=%s"]), "add b");
    assert_eq!(
        git(&repo, &["diff", "--cached", "--name-only"]),
        "c.txt",
        "c.txt still waits for its own commit"
    );

    // The journal names each upstream tool, with the model's arguments as its input.
    let records = store.list(&Filter::default()).await.unwrap();
    let mut tools: Vec<&str> = records.iter().map(|r| r.tool.as_str()).collect();
    tools.sort_unstable();
    assert_eq!(tools, ["git_add", "git_add", "git_commit"], "{records:?}");
    let commit = records.iter().find(|r| r.tool == "git_commit").unwrap();
    assert_eq!(commit.input, commit_b);
    assert_eq!(commit.state, RecordState::Completed);

    // The next commit is a new effect: it runs.
    let commit_c = json!({"repo_path": repo_path, "message": "add c"});
    let next = call(&client, "git_commit", commit_c, "run-1", "call-5").await;
    assert_ne!(next.is_error, Some(true), "{}", text(&next));
    assert_eq!(commits(&repo), 3);
    let log = call(&client, "git_log", json!({"repo_path": repo_path}), "run-1", "call-6").await;
    assert!(
        text(&log).contains("add b") && text(&log).contains("add c"),
        "{}",
        text(&log)
    );
    client.cancel().await.unwrap();
    gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_of_one_upstream_tool_never_replays_another() {
    let Some(servers) = servers() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (root, _, toml) = filesystem_with_note(&servers, dir.path());
    let decls = Declarations::parse(&format!(
        "{toml}\n[upstreams.fs.tools.write_file]\nclass = \"idempotent\"\n\n[upstreams.fs.tools.create_directory]\nclass = \"idempotent\"\n"
    ))
    .unwrap();
    let (gateway, client, store) = serve(&decls, &dir.path().join("journal.db")).await;

    // The client sends one idempotency key with two different tools' calls (a client that keys
    // by its own task, say): each is its tool's own effect.
    let keyed = |tool: &str, args: Value| {
        let mut meta = rmcp::model::RequestMetaObject::default();
        meta.insert("effect-tool/run_id".to_owned(), json!("run-1"));
        meta.insert("idempotencyKey".to_owned(), json!("task-7"));
        let mut params =
            rmcp::model::CallToolRequestParams::new(tool.to_owned()).with_arguments(args.as_object().cloned().unwrap());
        params.meta = Some(meta);
        params
    };
    let file = root.join("report.txt");
    let folder = root.join("reports");
    let wrote = client
        .call_tool(keyed(
            "write_file",
            json!({"path": file.display().to_string(), "content": "done"}),
        ))
        .await
        .unwrap();
    assert_ne!(wrote.is_error, Some(true), "{}", text(&wrote));
    let made = client
        .call_tool(keyed("create_directory", json!({"path": folder.display().to_string()})))
        .await
        .unwrap();
    assert_ne!(made.is_error, Some(true), "{}", text(&made));
    assert_eq!(meta(&made)["effect-tool/disposition"], "executed", "{}", text(&made));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "done");
    assert!(folder.is_dir(), "create_directory ran: {}", text(&made));
    let (k1, k2) = (
        meta(&wrote)["effect-tool/key"].clone(),
        meta(&made)["effect-tool/key"].clone(),
    );
    assert_ne!(k1, k2);
    assert!(k2.as_str().unwrap().contains("create_directory"), "{k2}");

    // The same key and tool again: that tool's record, replayed.
    std::fs::remove_dir(&folder).unwrap();
    let again = client
        .call_tool(keyed("create_directory", json!({"path": folder.display().to_string()})))
        .await
        .unwrap();
    assert_eq!(meta(&again)["effect-tool/disposition"], "replayed", "{}", text(&again));
    assert!(!folder.exists(), "replayed, not run");
    let records = store.list(&Filter::default()).await.unwrap();
    let mut tools: Vec<&str> = records.iter().map(|r| r.tool.as_str()).collect();
    tools.sort_unstable();
    assert_eq!(tools, ["create_directory", "write_file"]);
    client.cancel().await.unwrap();
    gateway.shutdown().await;
}

/// A child process killed (and reaped) when dropped.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// server-everything serving Streamable HTTP on a free port: the process and its endpoint.
async fn everything_over_http(servers: &Path) -> (Child, String) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = Child(
        std::process::Command::new("node")
            .arg(node_server(servers, "server-everything"))
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("node starts server-everything"),
    );
    for _ in 0..300 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return (child, format!("http://127.0.0.1:{port}/mcp"));
        }
        if let Ok(Some(status)) = child.0.try_wait() {
            panic!("server-everything exited before it listened on {port}: {status}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("server-everything did not listen on port {port} within 30 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn everything_over_streamable_http_its_tools_annotations_and_structured_output() {
    let Some(servers) = servers() else { return };
    let (_everything, url) = everything_over_http(&servers).await;
    let dir = tempfile::tempdir().unwrap();
    let decls = Declarations::parse(&format!("[upstreams.everything]\nurl = {url:?}\n")).unwrap();
    let (gateway, client, store) = serve(&decls, &dir.path().join("journal.db")).await;

    // Its read-only tools are served as pure, with the upstream's own annotations' verdict;
    // its writers (undeclared here) are not.
    let listed = client.list_all_tools().await.unwrap();
    let listed_names = names(&listed);
    for served in ["echo", "get-sum", "get-structured-content"] {
        assert!(listed_names.contains(&served.to_owned()), "{served}: {listed_names:?}");
    }
    for hidden in ["toggle-simulated-logging", "gzip-file-as-resource"] {
        assert!(!listed_names.contains(&hidden.to_owned()), "{hidden}: {listed_names:?}");
        assert!(gateway.hidden().iter().any(|h| h.tool == hidden), "{hidden}");
    }
    let sum = listed.iter().find(|t| t.name == "get-sum").unwrap();
    let annotations = sum.annotations.as_ref().expect("annotations");
    assert_eq!(annotations.read_only_hint, Some(true));
    assert_eq!(annotations.open_world_hint, Some(false), "passed through from upstream");
    assert_eq!(
        sum.meta.as_ref().and_then(|m| m.0.get("effect-tool/class")),
        Some(&json!("pure"))
    );

    // The upstream's outputSchema, passed through as it listed it.
    let upstream = &gateway.live_tools()[0].1;
    let theirs = upstream.iter().find(|t| t.name == "get-structured-content").unwrap();
    let ours = listed.iter().find(|t| t.name == "get-structured-content").unwrap();
    assert!(theirs.output_schema.is_some());
    assert_eq!(ours.output_schema, theirs.output_schema);
    assert!(
        listed
            .iter()
            .find(|t| t.name == "echo")
            .unwrap()
            .output_schema
            .is_none()
    );

    // Its structured content, checked against that schema, reaches the client.
    let weather = call(
        &client,
        "get-structured-content",
        json!({"location": "Chicago"}),
        "run-1",
        "call-1",
    )
    .await;
    assert_ne!(weather.is_error, Some(true), "{}", text(&weather));
    assert_eq!(meta(&weather)["effect-tool/outcome"], "output");
    let structured = weather.structured_content.expect("structuredContent");
    assert_eq!(structured["temperature"], 36);
    assert_eq!(structured["conditions"], "Light rain / drizzle");
    let summed = call(&client, "get-sum", json!({"a": 2, "b": 40}), "run-1", "call-2").await;
    assert!(text(&summed).contains("42"), "{}", text(&summed));
    let echoed = call(&client, "echo", json!({"message": "over HTTP"}), "run-1", "call-3").await;
    assert_eq!(text(&echoed), "Echo: over HTTP");
    // Pure calls are not journaled.
    assert!(store.list(&Filter::default()).await.unwrap().is_empty());
    client.cancel().await.unwrap();
    gateway.shutdown().await;
}

fn shape_server() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/mcp_upstream/shape_server.py")
        .display()
        .to_string()
}

fn ledger_lines(ledger: &Path) -> usize {
    std::fs::read_to_string(ledger).map(|t| t.lines().count()).unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_answer_that_breaks_its_output_schema_is_reported_recorded_and_not_run_again() {
    let Some(_) = servers() else { return };
    let dir = tempfile::tempdir().unwrap();
    let ledger = dir.path().join("ledger.txt");
    let decls = Declarations::parse(&format!(
        r#"
[upstreams.shape]
command = {python:?}
args = [{script:?}]
env = {{ LEDGER = {ledger:?} }}

[upstreams.shape.tools.forecast]
class = "irreversible"
key = ["city"]
"#,
        python = python(),
        script = shape_server(),
        ledger = ledger.display().to_string(),
    ))
    .unwrap();
    let (gateway, client, store) = serve(&decls, &dir.path().join("journal.db")).await;
    let listed = client.list_all_tools().await.unwrap();
    let forecast = listed.iter().find(|t| t.name == "forecast").unwrap();
    assert_eq!(
        forecast.output_schema.as_deref().map(|s| s["required"].clone()),
        Some(json!(["temperature", "city"]))
    );

    // The upstream acted (its ledger line) and answered `temperature: "warm"`: the client is
    // told the answer does not fit, never given it as if it did.
    let first = call(&client, "forecast", json!({"city": "Oslo"}), "run-1", "call-1").await;
    assert_eq!(first.is_error, Some(true), "{}", text(&first));
    assert_eq!(
        meta(&first)["effect-tool/outcome"],
        "invalid-output",
        "{}",
        text(&first)
    );
    assert!(first.structured_content.is_none());
    assert!(text(&first).contains("`/temperature`"), "{}", text(&first));
    assert!(
        !text(&first).contains("warm"),
        "no value in the report: {}",
        text(&first)
    );
    assert_eq!(ledger_lines(&ledger), 1);

    // It did act: the effect is recorded, and neither a retry nor a re-plan runs it again.
    let records = store.list(&Filter::default()).await.unwrap();
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0].tool, "forecast");
    assert_eq!(records[0].state, RecordState::Completed);
    let retried = call(&client, "forecast", json!({"city": "Oslo"}), "run-1", "call-1").await;
    let replanned = call(&client, "forecast", json!({"city": "Oslo"}), "run-1", "call-2").await;
    for again in [&retried, &replanned] {
        assert_eq!(meta(again)["effect-tool/outcome"], "invalid-output", "{}", text(again));
        assert_eq!(meta(again)["effect-tool/disposition"], "replayed");
    }
    assert_eq!(ledger_lines(&ledger), 1, "never run again");

    // A read-only tool that lists an outputSchema and sends no structuredContent: reported too.
    let looked = call(&client, "lookup", json!({"city": "Oslo"}), "run-1", "call-3").await;
    assert_eq!(
        meta(&looked)["effect-tool/outcome"],
        "invalid-output",
        "{}",
        text(&looked)
    );
    client.cancel().await.unwrap();
    gateway.shutdown().await;
}

#[test]
fn the_python_sdk_client_drives_the_gateway_and_an_edit_sent_twice_applies_once() {
    let Some(servers) = servers() else { return };
    let python = python();
    require_sdk(&python, "import mcp", "the Python MCP SDK");
    let dir = tempfile::tempdir().unwrap();
    let (_, note, toml) = filesystem_with_note(&servers, dir.path());
    let config = dir.path().join("effect-tool.gateway.toml");
    std::fs::write(&config, toml).unwrap();
    let out = std::process::Command::new(&python)
        .arg(client_script("gateway_client.py"))
        .arg(gateway_binary())
        .env("EFFECT_TOOL_GATEWAY_CONFIG", &config)
        .env("EFFECT_TOOL_DB", dir.path().join("journal.db"))
        .env("EFFECT_TOOL_NOTE", &note)
        .env_remove("EFFECT_TOOL_RUN_ID")
        .output()
        .expect("python3 runs");
    let stdout = client_passed(&out);
    assert!(
        stdout.contains("edit_file called twice through the gateway, applied once in the file"),
        "{stdout}"
    );
    // Checked here too, independently of the client: the file the upstream edited.
    assert_eq!(std::fs::read_to_string(&note).unwrap(), "xx");
}
