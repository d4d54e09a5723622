//! What the model sees is not always what is recorded (issue 31 item 6): a tool declared with
//! `#[tool(to_model = path)]` has its whole output journaled and replayed to code, while the
//! model reads the view, in every wire format, over MCP and through rig, executed or replayed.
//!
//! A real SQLite journal (read back through its store and as raw bytes), the effects counted in
//! a ledger file the engine cannot see.

use std::path::PathBuf;
use std::sync::OnceLock;

use effect_tool::store::sqlite::SqliteStore;
use effect_tool::{
    CallOptions, Disposition, Engine, ModelOutput, ModelPart, RunContext, Store, ToolCall, ToolError, Toolkit, tool,
};
use effect_tool_core::testing::conformance::{ScratchDir, ledger_append, ledger_lines};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The ledger the tools write to (one per test process: each test uses its own lines).
static LEDGER: OnceLock<PathBuf> = OnceLock::new();

fn ledger() -> &'static PathBuf {
    LEDGER.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("effect-tool-model-view-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir.join("ledger")
    })
}

fn effects(tag: &str) -> usize {
    ledger_lines(ledger()).iter().filter(|l| l.contains(tag)).count()
}

/// A month's sales report: large, with an internal field the model must not read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SalesReport {
    pub month: String,
    pub rows: Vec<u64>,
    pub internal_margin_note: String,
}

/// The model's view: a summary, without the internal note.
fn sales_summary(report: &SalesReport) -> ModelOutput {
    let total: u64 = report.rows.iter().sum();
    ModelOutput::text(format!(
        "{}: {} orders, {} cents in total",
        report.month,
        report.rows.len(),
        total
    ))
}

const NOTE: &str = "margin-note-for-finance-only";

/// Build the sales report of a month (each build is recorded in the ledger).
#[tool(effect = "idempotent", key(month), to_model = sales_summary)]
async fn build_report(month: String) -> Result<SalesReport, ToolError> {
    ledger_append(ledger(), &format!("report {month}"));
    Ok(SalesReport {
        month,
        rows: (1..=500).collect(),
        internal_margin_note: NOTE.to_owned(),
    })
}

/// A chart: the journal keeps its data, the model gets a caption and the image.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Chart {
    pub title: String,
    pub png_base64: String,
}

const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";

/// Draw a chart (each drawing is recorded in the ledger).
#[tool(effect = "idempotent", key(title), to_model = |c| ModelOutput::text(format!("chart: {}", c.title)).with_image("image/png", c.png_base64.clone()))]
async fn draw_chart(title: String) -> Result<Chart, ToolError> {
    ledger_append(ledger(), &format!("chart {title}"));
    Ok(Chart {
        title,
        png_base64: PNG.to_owned(),
    })
}

struct Bench {
    dir: ScratchDir,
    engine: Engine,
    kit: Toolkit,
}

impl Bench {
    fn new(what: &str) -> Bench {
        let dir = ScratchDir::new(what);
        let engine = Engine::new(SqliteStore::open(dir.path().join("journal.db")).unwrap());
        Bench {
            dir,
            engine,
            kit: Toolkit::new().with(BuildReport).with(DrawChart),
        }
    }

    fn dispatcher(&self) -> effect_tool::Dispatcher {
        self.kit.clone().dispatcher(self.engine.clone())
    }
}

#[tokio::test]
async fn the_journal_keeps_the_whole_output_and_the_model_reads_the_view_executed_or_replayed() {
    let bench = Bench::new("view-replay");
    let d = bench.dispatcher();
    let run = RunContext::new("view-run");
    let month = "2026-03-view-replay";
    let args = json!({"month": month}).to_string();

    let first = d.call(&run, &ToolCall::new("c1", "build_report", args.clone())).await;
    assert_eq!(first.disposition, Disposition::Executed);
    let summary = format!("{month}: 500 orders, 125250 cents in total");
    assert_eq!(first.content(), summary);
    assert!(!first.content().contains(NOTE));
    // The application still has the whole output.
    assert_eq!(first.output().unwrap()["internal_margin_note"], json!(NOTE));

    // A re-planned call in a later turn replays the record: the same view.
    let again = d.call(&run, &ToolCall::new("c2", "build_report", args)).await;
    assert_eq!(again.disposition, Disposition::Replayed);
    assert_eq!(again.content(), summary);
    assert_eq!(effects(month), 1, "built once");

    // The journal holds the whole value.
    let key = first.key.clone().unwrap();
    let rec = bench.engine.store().get(&key).await.unwrap().unwrap();
    let output = rec.output.unwrap();
    assert_eq!(output["internal_margin_note"], json!(NOTE));
    assert_eq!(output["rows"].as_array().unwrap().len(), 500);

    // Code calling the engine gets the whole value on a replay too.
    let replayed = bench
        .engine
        .call(
            &BuildReport,
            &run,
            CallOptions::call_id("code-1"),
            BuildReportArgs {
                month: month.to_owned(),
            },
        )
        .await
        .unwrap();
    assert_eq!(replayed.internal_margin_note, NOTE);
    assert_eq!(effects(month), 1);
}

#[tokio::test]
async fn identical_calls_of_one_turn_share_the_view() {
    let bench = Bench::new("view-shared");
    let d = bench.dispatcher();
    let run = RunContext::new("view-shared");
    let month = "2026-04-view-shared";
    let args = json!({"month": month}).to_string();
    let calls = [
        ToolCall::new("a", "build_report", args.clone()),
        ToolCall::new("b", "build_report", args),
    ];
    let results = d.dispatch(&run, &calls).await;
    assert_eq!(results[1].disposition, Disposition::Shared);
    for r in &results {
        assert!(
            r.content().starts_with(&format!("{month}: 500 orders")),
            "{}",
            r.content()
        );
        assert!(!r.content().contains(NOTE));
    }
    assert_eq!(effects(month), 1);
}

#[tokio::test]
async fn every_wire_format_writes_the_view_and_its_image() {
    let bench = Bench::new("view-wire");
    let d = bench.dispatcher();
    let run = RunContext::new("view-wire");
    let title = "sales-march-wire";
    let r = d
        .call(
            &run,
            &ToolCall::new("toolu_1", "draw_chart", json!({"title": title}).to_string()),
        )
        .await;
    assert_eq!(r.disposition, Disposition::Executed);
    let view = r.view.clone().expect("the tool declares a view");
    assert_eq!(
        view.parts(),
        &[
            ModelPart::Text {
                text: format!("chart: {title}")
            },
            ModelPart::Image {
                mime_type: "image/png".into(),
                data: PNG.into()
            },
        ]
    );

    // Anthropic: a tool_result whose content is a text block and a base64 image block.
    assert_eq!(
        r.to_anthropic_block(),
        json!({
            "type": "tool_result",
            "tool_use_id": "toolu_1",
            "content": [
                {"type": "text", "text": format!("chart: {title}")},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
            ],
            "is_error": false,
        })
    );
    // OpenAI Responses: function_call_output with input_text and input_image parts.
    assert_eq!(
        r.to_openai_responses_item(),
        json!({
            "type": "function_call_output",
            "call_id": "toolu_1",
            "output": [
                {"type": "input_text", "text": format!("chart: {title}")},
                {"type": "input_image", "image_url": format!("data:image/png;base64,{PNG}")},
            ],
        })
    );
    // OpenAI Chat Completions: a tool message carries text only; the image is named, not sent.
    let chat = r.to_openai_message();
    assert_eq!(
        chat["content"],
        json!(format!(
            "chart: {title}\n[image/png image: this channel carries only text]"
        ))
    );
    // Gemini: the text as the output, the image as an inlineData part of the response.
    assert_eq!(
        r.to_gemini_part(),
        json!({"functionResponse": {
            "id": "toolu_1",
            "name": "draw_chart",
            "response": {"output": format!("chart: {title}")},
            "parts": [{"inlineData": {"mimeType": "image/png", "data": PNG}}],
        }})
    );

    // A tool without a view: unchanged (the output as JSON text).
    let kit = Toolkit::new().with(PlainTool);
    let plain = kit
        .dispatcher(bench.engine.clone())
        .call(&run, &ToolCall::new("p1", "plain", "{}"))
        .await;
    assert!(plain.view.is_none());
    assert_eq!(plain.content(), r#"{"a":1}"#);
    assert_eq!(plain.to_anthropic_block()["content"], json!(r#"{"a":1}"#));
}

/// A tool without a view.
#[tool(effect = "pure", name = "plain")]
async fn plain_tool() -> Result<Value, ToolError> {
    Ok(json!({"a": 1}))
}

#[tokio::test]
async fn the_journal_file_holds_the_whole_output() {
    let bench = Bench::new("view-raw");
    let d = bench.dispatcher();
    let run = RunContext::new("view-raw");
    let month = "2026-05-view-raw";
    let r = d
        .call(
            &run,
            &ToolCall::new("c1", "build_report", json!({"month": month}).to_string()),
        )
        .await;
    assert!(!r.content().contains(NOTE));
    // Read the file's bytes (the WAL too): the whole output, internal note included, is there.
    let mut bytes = Vec::new();
    for entry in std::fs::read_dir(bench.dir.path()).unwrap() {
        let path = entry.unwrap().path();
        if path.file_name().unwrap().to_string_lossy().starts_with("journal.db") {
            bytes.extend(std::fs::read(&path).unwrap());
        }
    }
    let text = String::from_utf8_lossy(&bytes);
    assert!(text.contains(NOTE), "the recorded output keeps every field");
}

#[cfg(feature = "mcp")]
#[tokio::test]
async fn an_mcp_client_reads_the_view_and_no_structured_content() {
    use crate::common::mcp::{INITIALIZE, INITIALIZED, exchange, serve_pipe};
    use effect_tool::adapters::mcp::McpServer;

    let bench = Bench::new("view-mcp");
    let server = McpServer::new(bench.kit.clone(), bench.engine.clone());
    let (mut to, mut from, _serving) = serve_pipe(server);
    exchange(&mut to, &mut from, INITIALIZE).await.unwrap();
    exchange(&mut to, &mut from, INITIALIZED).await;
    let month = "2026-06-view-mcp";
    for id in [2, 3] {
        let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": "build_report", "arguments": {"month": month}}});
        let answer = exchange(&mut to, &mut from, &call.to_string()).await.unwrap();
        let result = &answer["result"];
        assert_eq!(result["isError"], json!(false), "{answer}");
        assert_eq!(
            result["content"],
            json!([{"type": "text", "text": format!("{month}: 500 orders, 125250 cents in total")}]),
            "{answer}"
        );
        assert!(result.get("structuredContent").is_none(), "{answer}");
        assert!(!answer.to_string().contains(NOTE));
    }
    assert_eq!(effects(month), 1);

    let call = json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {
        "name": "draw_chart", "arguments": {"title": "mcp-chart"}}});
    let answer = exchange(&mut to, &mut from, &call.to_string()).await.unwrap();
    assert_eq!(
        answer["result"]["content"],
        json!([
            {"type": "text", "text": "chart: mcp-chart"},
            {"type": "image", "data": PNG, "mimeType": "image/png"},
        ]),
        "{answer}"
    );
}

#[cfg(feature = "rig")]
#[tokio::test]
async fn a_rig_agent_reads_the_view() {
    use effect_tool::adapters::rig::RigTool;
    use effect_tool::adapters::rig::rig_core::tool::{Tool as _, ToolContext};

    let bench = Bench::new("view-rig");
    let month = "2026-07-view-rig";
    let tool = RigTool::new(BuildReport, bench.engine.clone(), RunContext::new("view-rig"));
    for _ in 0..2 {
        let out = tool
            .call(&mut ToolContext::new(), json!({"month": month}))
            .await
            .unwrap();
        assert_eq!(
            out.as_text(),
            Some(format!("{month}: 500 orders, 125250 cents in total").as_str())
        );
    }
    assert_eq!(effects(month), 1);
    let chart = RigTool::new(DrawChart, bench.engine.clone(), RunContext::new("view-rig"));
    let out = chart
        .call(&mut ToolContext::new(), json!({"title": "rig-chart"}))
        .await
        .unwrap();
    let kinds: Vec<bool> = out.as_content().iter().map(|c| c.as_text().is_some()).collect();
    assert_eq!(kinds, vec![true, false], "a text block, then an image block");
}
