//! An output a person records by hand (issue 30, item 5) is checked against the tool's output
//! type on every surface: `StoreExt` (what the CLI and the console go through), the console's
//! API, and the record page's data. The shape comes from the tool (`#[tool]` generates its
//! output's JSON Schema) through the journal, where the engine writes it. An output that does
//! not decode anyway (recorded by an older effect-tool) is replayed to the model as text for a
//! model: the record waits for a person, with no operator's command line.

use std::sync::atomic::{AtomicUsize, Ordering};

use effect_tool::decide::record::{Op, Rejected};
use effect_tool::{
    Dispatcher, Engine, MemoryStore, RecordState, RunContext, Store, StoreError, StoreExt, Tool, ToolCall, ToolError,
    Toolkit, Verdict, tool,
};
use serde_json::json;

/// What [`send_receipt`] returns: an object, never a bare string.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct Receipt {
    /// The mail API's message id.
    pub id: String,
}

/// The same shape without a JSON Schema.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PlainReceipt {
    /// The mail API's message id.
    pub id: String,
}

/// How many receipts were sent (the mail API, which the engine cannot see).
static SENT: AtomicUsize = AtomicUsize::new(0);

/// Send a receipt; the mail API times out after sending (an unknown outcome).
#[tool(effect = "irreversible")]
async fn send_receipt(to: String) -> Result<Receipt, ToolError> {
    let _ = to;
    SENT.fetch_add(1, Ordering::SeqCst);
    Err(ToolError::unknown("the mail API timed out after sending"))
}

/// A hand-written tool whose output type has no JSON Schema: `Tool::output_schema` defaults to
/// `None` (as for a `#[tool]` whose output type has none: see the ui-tests'
/// `pass/output_without_schema`).
struct SendPlainReceipt;

impl Tool for SendPlainReceipt {
    type Args = SendReceiptArgs;
    type Output = PlainReceipt;
    type Error = ToolError;
    const NAME: &'static str = "send_plain_receipt";
    const CLASS: effect_tool::EffectClass = effect_tool::EffectClass::Irreversible;
    const DESCRIPTION: &'static str = "Send a receipt, returning a type without a JSON Schema.";

    async fn call(&self, _ctx: &effect_tool::EffectCtx, args: SendReceiptArgs) -> Result<PlainReceipt, ToolError> {
        Ok(PlainReceipt { id: args.to })
    }
}

#[test]
fn tool_generates_the_output_schema_when_the_output_type_has_one() {
    let schema = <SendReceipt as Tool>::output_schema().expect("Receipt implements JsonSchema");
    assert_eq!(schema["type"], "object");
    assert_eq!(schema["required"], json!(["id"]));
    assert_eq!(<SendReceipt as Tool>::output_type(), "Receipt");
    assert_eq!(
        <SendPlainReceipt as Tool>::output_schema(),
        None,
        "a hand-written tool declares no schema unless it says so"
    );
}

/// A call of `tool` in doubt: its key.
async fn in_doubt<T: Tool>(engine: &Engine, run: &RunContext, tool: &T, args: T::Args) -> String {
    let report = engine.call_with_report(tool, run, Default::default(), args).await;
    let key = report.key.expect("journaled");
    let rec = engine.store().get(&key).await.unwrap().unwrap();
    assert_eq!(rec.state, RecordState::InDoubt, "{rec:?}");
    key
}

#[tokio::test]
async fn a_plain_string_for_a_struct_output_is_refused_and_an_unreadable_replay_tells_the_model_to_wait() {
    let engine = Engine::new(MemoryStore::new());
    let store = engine.store();
    let run = RunContext::new("outputs-1");
    let args = SendReceiptArgs {
        to: "ann@example.com".into(),
    };
    let key = in_doubt(&engine, &run, &SendReceipt, args).await;
    assert_eq!(
        store.output_schema("send_receipt").await.unwrap(),
        <SendReceipt as Tool>::output_schema(),
        "the engine wrote the tool's output schema to the journal"
    );

    // The reported case: a plain string where the tool returns an object.
    let refused = store
        .resolve(&key, "ops", Verdict::Applied { output: json!("msg-1") })
        .await;
    match &refused {
        Err(StoreError::Rejected(Rejected::OutputMismatch(m))) => {
            assert_eq!(m.tool, "send_receipt");
            assert_eq!(m.schema["required"], json!(["id"]));
            assert!(m.problems[0].contains("\"msg-1\" is not of type \"object\""), "{m:?}");
        }
        other => panic!("a string is not a Receipt: {other:?}"),
    }
    assert_eq!(store.get(&key).await.unwrap().unwrap().state, RecordState::InDoubt);

    // An older effect-tool (or a journal without the schema) recorded it anyway: every replay
    // fails to decode. The model is told the record waits for a person, never how an operator
    // fixes it.
    store
        .apply(
            &key,
            Op::Resolve {
                by: "ops".into(),
                verdict: Verdict::Applied { output: json!("msg-1") },
            },
        )
        .await
        .unwrap();
    let dispatcher = Dispatcher::new(Toolkit::new().with(SendReceipt), engine.clone());
    let call = ToolCall::new("call-2", "send_receipt", r#"{"to": "ann@example.com"}"#);
    let result = dispatcher.call(&run, &call).await;
    let text = result.content();
    assert!(result.is_error(), "{text}");
    assert!(
        text.contains("a person has to correct the record") && text.contains("Do not call it in another form"),
        "{text}"
    );
    for operator_words in [
        "effect-tool resolve",
        "--amend",
        "--output",
        "StoreExt",
        "effect-tool show",
    ] {
        assert!(
            !text.contains(operator_words),
            "`{operator_words}` reached the model: {text}"
        );
    }
    assert_eq!(SENT.load(Ordering::SeqCst), 1, "nothing was sent again");

    // The person corrects it, checked too; the next call replays the corrected output.
    assert!(matches!(
        store
            .amend(
                &key,
                "ops",
                Verdict::Applied {
                    output: json!({"id": 7})
                }
            )
            .await,
        Err(StoreError::Rejected(Rejected::OutputMismatch(_)))
    ));
    store
        .amend(
            &key,
            "ops",
            Verdict::Applied {
                output: json!({"id": "msg-1"}),
            },
        )
        .await
        .unwrap();
    let replayed = dispatcher.call(&run, &call).await;
    assert_eq!(replayed.content(), r#"{"id":"msg-1"}"#);
    assert_eq!(SENT.load(Ordering::SeqCst), 1);
}

/// The console's surface: only with the console and the SQLite journal.
#[cfg(all(feature = "console", feature = "sqlite"))]
mod console {
    use super::*;

    use std::sync::Arc;

    /// Post a receipt; the post office's answer is lost (an unknown outcome).
    #[tool(effect = "irreversible")]
    async fn post_receipt(to: String) -> Result<Receipt, ToolError> {
        let _ = to;
        Err(ToolError::unknown("the post office's answer was lost"))
    }

    /// The console without the toolkit (an operator's `effect-tool serve`, which has only the
    /// journal) checks the output against the journal's schema and gives it to the record page.
    #[tokio::test]
    async fn the_console_checks_an_output_against_the_journal_and_shows_the_shape() {
        use crate::common::console::{get, post, serve};
        use crate::common::http::encode;
        use effect_tool::ops::console::{Console, Identity, StaticTokens};
        use effect_tool::store::sqlite::SqliteStore;

        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("journal.db")).unwrap());
        let engine = Engine::new(store.clone());
        let run = RunContext::new("outputs-console");
        let args = || PostReceiptArgs {
            to: "ann@example.com".into(),
        };
        let key = in_doubt(&engine, &run, &PostReceipt, args()).await;

        // Another process, with the journal only.
        let journal: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("journal.db")).unwrap());
        let token = "tok-olaf-operator-0002";
        let tokens = StaticTokens::new().with(token, Identity::new("olaf", ["operator"]));
        let addr = serve(Console::new(journal, tokens)).await;

        let page = get(addr, token, &format!("/api/record?key={}", encode(&key))).await;
        assert_eq!(page.status, 200, "{}", page.body);
        assert_eq!(page.json()["output_schema"]["required"], json!(["id"]), "{}", page.body);

        let resolve = |output: serde_json::Value| {
            post(
                addr,
                token,
                "/api/resolve",
                json!({"key": key, "verdict": "applied", "output": output}),
            )
        };
        let wrong = resolve(json!("msg-1")).await;
        assert_eq!(wrong.status, 422, "{}", wrong.body);
        let error = wrong.json()["error"].as_str().unwrap().to_owned();
        assert!(
            error.contains("does not have the shape tool `post_receipt` returns")
                && error.contains(r#""required":["id"]"#),
            "{error}"
        );
        assert_eq!(store.get(&key).await.unwrap().unwrap().state, RecordState::InDoubt);
        let right = resolve(json!({"id": "msg-1"})).await;
        assert_eq!(right.status, 200, "{}", right.body);
        assert_eq!(
            engine
                .call(&PostReceipt, &run, Default::default(), args())
                .await
                .unwrap(),
            Receipt { id: "msg-1".into() }
        );
    }
}
