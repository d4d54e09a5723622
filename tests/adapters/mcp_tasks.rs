//! MCP tasks for calls that wait for a person (issue 32, item 4, first bullet): a client that
//! declares the Tasks extension (`io.modelcontextprotocol/tasks`) gets a task instead of an
//! error result for a call that parks for approval or stops in doubt; it polls `tasks/get`,
//! which reads the journal; a person decides through the store API; the server runs the call
//! once, and the task's result is the call's. Another principal cannot read the task; a
//! restarted server still answers it from the journal.
//!
//! The client is rmcp's own (3.x, the Tasks extension of SEP-2663). The official Python SDK
//! (`mcp==2.3.0`, `tests/mcp_client/`) has no client for that extension: it knows only the
//! experimental tasks of protocol `2025-11-25` (`tasks/result`, `tasks/list`, the `task`
//! request parameter), which SEP-2663 replaced and which are not wire-compatible with it.

#![cfg(all(feature = "mcp", feature = "sqlite"))]

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::ledger::Downstream;
use effect_tool::adapters::mcp::McpServer;
use effect_tool::store::sqlite::SqliteStore;
use effect_tool::{EffectCtx, Engine, MemoryStore, RecordState, Store, StoreExt, ToolError, Toolkit, Verdict, tools};
use rmcp::ClientHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientCapabilities, ClientConfig, CreateTaskResult,
    GetTaskParams, Implementation, RequestMetaObject, TaskPayload, TaskStatus,
};
use rmcp::service::{RoleClient, RunningService};
use serde_json::{Value, json};

/// The payments system: its ledger is the outside world's count of payments.
#[derive(Default)]
struct Payments {
    ledger: Downstream,
    /// Calls of `transfer` (it fails, in doubt, on the first).
    transfers: AtomicUsize,
}

#[tools]
impl Payments {
    /// Pay an invoice: a person of `finance` approves each payment first.
    #[tool(effect = "irreversible", key(invoice_id), approval = "finance")]
    async fn pay(
        &self,
        ctx: &EffectCtx,
        /// The invoice.
        invoice_id: String,
    ) -> Result<String, ToolError> {
        self.ledger.apply(&ctx.idempotency_key());
        Ok(format!("paid {invoice_id}"))
    }

    /// Transfer money; the first call loses its answer after the bank applied it.
    #[tool(effect = "irreversible", key(transfer_id))]
    async fn transfer(
        &self,
        ctx: &EffectCtx,
        /// The transfer.
        transfer_id: String,
    ) -> Result<String, ToolError> {
        self.ledger.apply(&ctx.idempotency_key());
        if self.transfers.fetch_add(1, Ordering::SeqCst) == 0 {
            panic!("the bank's answer was lost");
        }
        Ok(format!("transferred {transfer_id}"))
    }
}

fn toolkit(payments: &Arc<Payments>) -> Toolkit {
    Toolkit::new().with(payments.pay_tool()).with(payments.transfer_tool())
}

/// A client that declares the Tasks extension.
fn tasks_client() -> ClientConfig {
    ClientConfig::new(
        ClientCapabilities::builder().enable_tasks().build(),
        Implementation::new("tasks-test", "0"),
    )
}

/// `server` served in process to rmcp's client `handler`.
async fn connect<H: ClientHandler>(server: McpServer, handler: H) -> RunningService<RoleClient, H> {
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move { server.serve_transport(tokio::io::split(server_io)).await });
    rmcp::ServiceExt::serve(handler, tokio::io::split(client_io))
        .await
        .expect("an MCP session")
}

fn params(tool: &str, args: Value, run: &str) -> CallToolRequestParams {
    let mut meta = RequestMetaObject::default();
    meta.insert("effect-tool/run_id".to_owned(), json!(run));
    let mut params = CallToolRequestParams::new(tool.to_owned()).with_arguments(args.as_object().cloned().unwrap());
    params.meta = Some(meta);
    params
}

/// Call `tool` and expect a task.
async fn call_for_task<H: ClientHandler>(
    client: &RunningService<RoleClient, H>,
    tool: &str,
    args: Value,
    run: &str,
) -> CreateTaskResult {
    match client
        .call_tool_once(params(tool, args, run))
        .await
        .expect("the server answers")
    {
        CallToolResponse::Task(task) => task,
        other => panic!("`{tool}` was answered without a task: {other:?}"),
    }
}

fn key_of(task: &CreateTaskResult) -> String {
    let meta = task.meta.as_ref().expect("the task's _meta");
    meta.0["effect-tool/key"].as_str().expect("the key").to_owned()
}

/// Poll `tasks/get` until the task is no longer `working` (a bounded wait, not a timing
/// assertion: the person has decided by then, and the server runs one call).
async fn until_settled<H: ClientHandler>(client: &RunningService<RoleClient, H>, id: &str) -> TaskPayload {
    for _ in 0..600 {
        let got = client
            .get_task(GetTaskParams::new(id))
            .await
            .expect("tasks/get answers");
        if got.task.status() != TaskStatus::Working {
            return got.task.payload;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("task {id} is still working after 30 s");
}

fn completed(payload: TaskPayload) -> CallToolResult {
    match payload {
        TaskPayload::Completed { result } => serde_json::from_value(Value::Object(result)).expect("a CallToolResult"),
        other => panic!("the task did not complete: {other:?}"),
    }
}

fn text(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

async fn approve(store: &dyn Store, key: &str) {
    let record = store.get(key).await.unwrap().expect("the parked record");
    assert_eq!(record.state, RecordState::AwaitingApproval, "{record:?}");
    store
        .approve(key, "alice", "finance", &record.fingerprint)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_is_a_task_that_completes_once_a_person_approves_and_the_payment_is_made_once() {
    let payments = Arc::new(Payments::default());
    let engine = Engine::new(MemoryStore::new());
    let store = engine.store().clone();
    let server = McpServer::new(toolkit(&payments), engine);

    // A client that cannot do tasks gets today's answer: an error result, awaiting approval.
    let plain = connect(server.clone(), ()).await;
    let today = plain
        .call_tool(params("pay", json!({"invoice_id": "inv-0"}), "run-0"))
        .await
        .unwrap();
    assert_eq!(today.is_error, Some(true), "{}", text(&today));
    assert_eq!(
        today.meta.as_ref().unwrap().0["effect-tool/outcome"],
        "awaiting-approval"
    );
    plain.cancel().await.unwrap();

    let client = connect(server, tasks_client()).await;
    let task = call_for_task(&client, "pay", json!({"invoice_id": "inv-1"}), "run-1").await;
    assert_eq!(task.task.status, TaskStatus::Working);
    assert!(
        task.task.status_message.as_deref().unwrap().contains("role `finance`"),
        "{task:?}"
    );
    let key = key_of(&task);
    let got = client.get_task(GetTaskParams::new(&task.task.task_id)).await.unwrap();
    assert_eq!(got.task.status(), TaskStatus::Working);
    assert_eq!(got.meta.as_ref().unwrap().0["effect-tool/state"], "awaiting-approval");
    // The same call made again is the same task, and nothing ran.
    let again = call_for_task(&client, "pay", json!({"invoice_id": "inv-1"}), "run-1").await;
    assert_eq!(again.task.task_id, task.task.task_id);
    assert_eq!(
        payments.ledger.requests(),
        0,
        "nothing is paid before a person approves"
    );

    // A person approves; the server runs the call, and the task's result is the call's.
    approve(&*store, &key).await;
    let result = completed(until_settled(&client, &task.task.task_id).await);
    assert_ne!(result.is_error, Some(true), "{}", text(&result));
    assert!(text(&result).contains("paid inv-1"), "{}", text(&result));
    assert_eq!(result.meta.as_ref().unwrap().0["effect-tool/key"], json!(key));
    assert_eq!(store.get(&key).await.unwrap().unwrap().state, RecordState::Completed);

    // The model's own retry replays; the payment was made once.
    let direct = client
        .call_tool(params("pay", json!({"invoice_id": "inv-1"}), "run-1"))
        .await
        .unwrap();
    assert!(text(&direct).contains("paid inv-1"), "{}", text(&direct));
    assert_eq!(direct.meta.as_ref().unwrap().0["effect-tool/disposition"], "replayed");
    assert_eq!((payments.ledger.requests(), payments.ledger.effects()), (1, 1));
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_in_doubt_is_a_task_that_says_so_and_a_persons_resolution_completes_it() {
    let payments = Arc::new(Payments::default());
    let engine = Engine::new(MemoryStore::new());
    let store = engine.store().clone();
    let server = McpServer::new(toolkit(&payments), engine);
    let client = connect(server, tasks_client()).await;

    let task = call_for_task(&client, "transfer", json!({"transfer_id": "t-1"}), "run-1").await;
    let key = key_of(&task);
    assert_eq!(task.meta.as_ref().unwrap().0["effect-tool/state"], "in-doubt");
    let got = client.get_task(GetTaskParams::new(&task.task.task_id)).await.unwrap();
    assert_eq!(got.task.status(), TaskStatus::Working);
    assert!(
        got.task.task.status_message.as_deref().unwrap().contains("in doubt"),
        "{got:?}"
    );
    assert_eq!(store.get(&key).await.unwrap().unwrap().state, RecordState::InDoubt);

    // A person finds the bank applied it and records what it said.
    store
        .resolve(
            &key,
            "alice",
            Verdict::Applied {
                output: json!("transferred t-1 (confirmed by the bank)"),
            },
        )
        .await
        .unwrap();
    let result = completed(until_settled(&client, &task.task.task_id).await);
    assert!(text(&result).contains("confirmed by the bank"), "{}", text(&result));
    // Applied once: the lost answer's attempt; nothing ran again.
    assert_eq!((payments.ledger.requests(), payments.ledger.effects()), (1, 1));
    client.cancel().await.unwrap();
}

#[cfg(all(feature = "mcp-http", feature = "gateway"))]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_principal_can_neither_read_nor_cancel_a_task() {
    use effect_tool::adapters::mcp::{BearerTokens, McpHttpConfig};
    use rmcp::model::CancelTaskParams;
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;

    const ALICE: &str = "alice-token-0123456789abcdef";
    const BOB: &str = "bob-token-0123456789abcdef";
    let payments = Arc::new(Payments::default());
    let engine = Engine::new(MemoryStore::new());
    let store = engine.store().clone();
    let auth = BearerTokens::new().with_token(ALICE, "alice").with_token(BOB, "bob");
    let handle = McpServer::new(toolkit(&payments), engine)
        .bind_http_with(
            "127.0.0.1:0".parse().unwrap(),
            McpHttpConfig::default().with_authenticator(auth),
        )
        .await
        .unwrap();
    let as_principal = |token: &str| {
        let config = StreamableHttpClientTransportConfig::with_uri(handle.url()).auth_header(token);
        rmcp::ServiceExt::serve(tasks_client(), StreamableHttpClientTransport::from_config(config))
    };
    let alice = as_principal(ALICE).await.expect("Alice's session");
    let bob = as_principal(BOB).await.expect("Bob's session");

    let task = call_for_task(&alice, "pay", json!({"invoice_id": "inv-9"}), "run-1").await;
    let id = task.task.task_id.clone();
    // Bob has the id (it leaked, or he guessed the key): no such task for him.
    let refused = bob
        .get_task(GetTaskParams::new(&id))
        .await
        .expect_err("Bob reads no task of Alice's");
    assert!(refused.to_string().contains("task not found"), "{refused}");
    bob.cancel_task(CancelTaskParams::new(&id))
        .await
        .expect("acknowledged, as for any id");
    // Alice's task is still hers, and still waits.
    let got = alice.get_task(GetTaskParams::new(&id)).await.unwrap();
    assert_eq!(got.task.status(), TaskStatus::Working, "{got:?}");

    approve(&*store, &key_of(&task)).await;
    let result = completed(until_settled(&alice, &id).await);
    assert!(text(&result).contains("paid inv-9"), "{}", text(&result));
    assert!(bob.get_task(GetTaskParams::new(&id)).await.is_err());
    assert_eq!(payments.ledger.effects(), 1);

    // Alice cancels a task of her own: it is cancelled (the record stays for a person).
    let second = call_for_task(&alice, "pay", json!({"invoice_id": "inv-10"}), "run-1").await;
    alice
        .cancel_task(CancelTaskParams::new(&second.task.task_id))
        .await
        .unwrap();
    let cancelled = until_settled(&alice, &second.task.task_id).await;
    assert_eq!(cancelled, TaskPayload::Cancelled);
    assert_eq!(payments.ledger.effects(), 1);
    alice.cancel().await.unwrap();
    bob.cancel().await.unwrap();
    handle.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_server_answers_the_task_from_the_journal() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("journal.db");
    let payments = Arc::new(Payments::default());

    // The first server parks the call and stops waiting at once (as a server that goes away).
    let first_store = SqliteStore::open(&db).unwrap();
    let first = McpServer::new(toolkit(&payments), Engine::new(first_store)).with_task_wait(Duration::ZERO);
    let client = connect(first, tasks_client()).await;
    let task = call_for_task(&client, "pay", json!({"invoice_id": "inv-7"}), "run-1").await;
    let id = task.task.task_id.clone();
    let key = key_of(&task);
    client.cancel().await.unwrap();

    // A new server (engine, store) on the same journal: the id still names the task.
    let store = SqliteStore::open(&db).unwrap();
    let server = McpServer::new(toolkit(&payments), Engine::new(store.clone()));
    let client = connect(server, tasks_client()).await;
    let got = client
        .get_task(GetTaskParams::new(&id))
        .await
        .expect("the task outlives its server");
    assert_eq!(got.task.status(), TaskStatus::Working);
    assert_eq!(got.meta.as_ref().unwrap().0["effect-tool/state"], "awaiting-approval");

    // Approved after the restart: this server does not hold the call, so the task says to call
    // again; the call made again runs once, and then the task gives its recorded result.
    approve(&store, &key).await;
    let told = completed(until_settled(&client, &id).await);
    assert_eq!(told.is_error, Some(true));
    assert!(text(&told).contains("Call `pay` again"), "{}", text(&told));
    assert_eq!(payments.ledger.requests(), 0);
    let ran = client
        .call_tool(params("pay", json!({"invoice_id": "inv-7"}), "run-1"))
        .await
        .unwrap();
    assert!(text(&ran).contains("paid inv-7"), "{}", text(&ran));
    let result = completed(until_settled(&client, &id).await);
    assert!(text(&result).contains("paid inv-7"), "{}", text(&result));
    assert_eq!(result.meta.as_ref().unwrap().0["effect-tool/disposition"], "replayed");
    assert_eq!((payments.ledger.requests(), payments.ledger.effects()), (1, 1));
    client.cancel().await.unwrap();
}

/// The gateway serves upstream tools through the same `McpServer`: an upstream tool declared
/// with an approval (the real memory server's `create_entities`) is a task too, and the entity
/// is created once, counted in the memory server's own file.
#[cfg(feature = "gateway")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_tool_that_needs_approval_is_a_task_and_runs_once_after_approval() {
    use effect_tool::adapters::mcp::gateway::{Declarations, Gateway};

    let Some(servers) = crate::gateway::servers() else {
        return;
    };
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
        server = crate::gateway::node_server(&servers, "server-memory"),
        memory = memory.display().to_string(),
    ))
    .unwrap();
    let gateway = Gateway::start(&decls).await.expect("the gateway starts");
    let store = SqliteStore::open(dir.path().join("journal.db")).unwrap();
    let client = connect(gateway.server(Engine::new(store.clone())), tasks_client()).await;
    let args =
        json!({"entities": [{"name": "Ada", "entityType": "person", "observations": ["wrote the first program"]}]});
    let task = call_for_task(&client, "create_entities", args, "run-1").await;
    assert!(
        task.task.status_message.as_deref().unwrap().contains("role `ops`"),
        "{task:?}"
    );
    let created = || {
        std::fs::read_to_string(&memory)
            .unwrap_or_default()
            .matches("\"Ada\"")
            .count()
    };
    assert_eq!(created(), 0, "nothing ran before approval");

    let key = key_of(&task);
    let record = store.get(&key).await.unwrap().unwrap();
    store.approve(&key, "alice", "ops", &record.fingerprint).await.unwrap();
    let result = completed(until_settled(&client, &task.task.task_id).await);
    assert_ne!(result.is_error, Some(true), "{}", text(&result));
    assert_eq!(created(), 1);
    client.cancel().await.unwrap();
    gateway.shutdown().await;
}
