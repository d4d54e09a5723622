//! One model turn as each provider writes it: its tool calls, how the turn ended, and the
//! tools the provider ran itself.
//!
//! A [`Turn`] is parsed from a whole provider response ([`Turn::from_openai_chat`],
//! [`Turn::from_openai_responses`], [`Turn::from_anthropic`], [`Turn::from_gemini`]);
//! [`Dispatcher::dispatch_turn`] runs its calls (or none, when the turn did not finish:
//! [`Stop`]), records the provider's own tool calls in the run's journal ([`ProviderCall`]),
//! and [`TurnResults::reply`] writes the results back in the same format.
//!
//! | format | tools sent | calls read | how it ended | provider's own tools | results sent back |
//! |---|---|---|---|---|---|
//! | OpenAI Chat Completions | [`Toolkit::openai_tools`](super::Toolkit::openai_tools) | `choices[0].message.tool_calls[]` | `finish_reason`, `message.refusal` | (none in this API) | `{"role": "tool", "tool_call_id", "content"}` a call |
//! | OpenAI Responses | [`Toolkit::openai_responses_tools`](super::Toolkit::openai_responses_tools) | `output[]` items `function_call` | `status`, `incomplete_details.reason`, `refusal` parts | `web_search_call`, `file_search_call`, `code_interpreter_call`, `image_generation_call`, `mcp_call` | `{"type": "function_call_output", "call_id", "output"}` a call |
//! | Anthropic Messages | [`Toolkit::anthropic_tools`](super::Toolkit::anthropic_tools) | `content[]` blocks `tool_use` | `stop_reason` | `server_tool_use` + `*_tool_result`, `mcp_tool_use` + `mcp_tool_result` | one `{"role": "user", "content": [tool_result...]}` |
//! | Gemini `generateContent` | `{"functionDeclarations": `[`Toolkit::gemini_tools`](super::Toolkit::gemini_tools)`}` | `candidates[0].content.parts[]` `functionCall` | `finishReason`, `promptFeedback.blockReason` | `executableCode` + `codeExecutionResult`, `groundingMetadata`, `urlContextMetadata` | one `{"role": "user", "parts": [functionResponse...]}` |
//!
//! The application appends the model's own message (its calls and the provider's tool blocks,
//! as the provider returned them) to the conversation, then the reply. `cargo run --example
//! model_turn` plays a whole conversation in each format.
//!
//! A Gemini turn, whole: the call has no `id` (as older models send them), so one is derived
//! from the response and the call's place in it; the result goes back without it, matched by
//! name and order.
//!
//! ```
//! use effect_tool_core::toolkit::{Turn, Toolkit};
//! use effect_tool_core::{EffectClass, EffectCtx, Engine, MemoryStore, RunContext, Tool, ToolError};
//! use serde_json::json;
//!
//! #[derive(Clone, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
//! struct Args { order_id: String }
//!
//! struct LookupOrder;
//! impl Tool for LookupOrder {
//!     type Args = Args;
//!     type Output = serde_json::Value;
//!     type Error = ToolError;
//!     const NAME: &'static str = "lookup_order";
//!     const CLASS: EffectClass = EffectClass::Pure;
//!     const DESCRIPTION: &'static str = "Find an order.";
//!     async fn call(&self, _ctx: &EffectCtx, a: Args) -> Result<serde_json::Value, ToolError> {
//!         Ok(json!({"order_id": a.order_id, "status": "shipped"}))
//!     }
//! }
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let dispatcher = Toolkit::new().with(LookupOrder).dispatcher(Engine::new(MemoryStore::new()));
//! // The request's tools.
//! let tools = json!([{"functionDeclarations": dispatcher.toolkit().gemini_tools()}]);
//! assert_eq!(tools[0]["functionDeclarations"][0]["parameters"]["type"], "OBJECT");
//! // The response.
//! let response = json!({
//!     "responseId": "r-1",
//!     "candidates": [{
//!         "content": {"role": "model", "parts": [
//!             {"functionCall": {"name": "lookup_order", "args": {"order_id": "o-1"}}}
//!         ]},
//!         "finishReason": "STOP"
//!     }]
//! });
//! let turn = Turn::from_gemini(&response).unwrap();
//! let done = dispatcher.dispatch_turn(&RunContext::new("run-1"), &turn).await;
//! // The results sent back.
//! assert_eq!(
//!     done.reply(),
//!     vec![json!({"role": "user", "parts": [{"functionResponse": {
//!         "name": "lookup_order",
//!         "response": {"output": {"order_id": "o-1", "status": "shipped"}}
//!     }}]})]
//! );
//! # });
//! ```
//!
//! A turn that did not finish runs none of its calls:
//!
//! ```
//! use effect_tool_core::toolkit::{Stop, Turn};
//! use serde_json::json;
//!
//! let turn = Turn::from_anthropic(&json!({
//!     "content": [{"type": "tool_use", "id": "toolu_1", "name": "issue_refund", "input": {"order_id": "o-1"}}],
//!     "stop_reason": "max_tokens"
//! }))
//! .unwrap();
//! assert_eq!(turn.stop, Stop::Truncated { reason: "max_tokens".into() });
//! assert!(!turn.stop.runs_calls());
//! ```

mod anthropic;
mod gemini;
mod openai;
mod record;

use serde_json::{Map, Value, json};

use super::dispatch::{Dispatcher, Rejection, ToolCall, ToolOutcome, ToolResult};
use crate::call::context::RunContext;
use crate::engine::Disposition;
use crate::value::class::EffectClass;

pub use super::dispatch::Stop;
pub use record::{ProviderRecord, ProviderRecorded};

/// The wire format a turn came in, and the one its results go back in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WireFormat {
    /// OpenAI Chat Completions (`choices[0].message.tool_calls`, `finish_reason`).
    OpenAiChat,
    /// OpenAI Responses (`output` items, `status`, `incomplete_details`).
    OpenAiResponses,
    /// Anthropic Messages (`content` blocks, `stop_reason`).
    Anthropic,
    /// Gemini `generateContent` (`candidates[0].content.parts`, `finishReason`).
    Gemini,
}

impl WireFormat {
    /// The provider's name as records and logs write it (`openai`, `anthropic`, `gemini`).
    pub fn provider(self) -> &'static str {
        match self {
            WireFormat::OpenAiChat | WireFormat::OpenAiResponses => "openai",
            WireFormat::Anthropic => "anthropic",
            WireFormat::Gemini => "gemini",
        }
    }

    /// What to send back for `results` (one per call of the turn, in call order), ready to
    /// append to the conversation:
    ///
    /// - OpenAI Chat Completions: one `{"role": "tool", "tool_call_id", "content"}` message a call;
    /// - OpenAI Responses: one `{"type": "function_call_output", "call_id", "output"}` input
    ///   item a call;
    /// - Anthropic: one `{"role": "user", "content": [tool_result, ...]}` message;
    /// - Gemini: one `{"role": "user", "parts": [{"functionResponse": ...}, ...]}` content.
    ///
    /// Nothing when there are no results. The model's own message (its calls, and the provider's
    /// tool blocks) is appended before these as the provider returned it.
    pub fn reply(self, results: &[ToolResult]) -> Vec<Value> {
        if results.is_empty() {
            return Vec::new();
        }
        match self {
            WireFormat::OpenAiChat => results.iter().map(ToolResult::to_openai_message).collect(),
            WireFormat::OpenAiResponses => results.iter().map(ToolResult::to_openai_responses_item).collect(),
            WireFormat::Anthropic => vec![super::dispatch::anthropic_tool_results_message(results)],
            WireFormat::Gemini => vec![gemini_function_responses(results)],
        }
    }
}

impl std::fmt::Display for WireFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            WireFormat::OpenAiChat => "OpenAI Chat Completions",
            WireFormat::OpenAiResponses => "OpenAI Responses",
            WireFormat::Anthropic => "Anthropic Messages",
            WireFormat::Gemini => "Gemini generateContent",
        })
    }
}

/// A tool the provider ran itself (a hosted tool): OpenAI Responses `web_search_call`,
/// `file_search_call`, `code_interpreter_call`, `image_generation_call`, `mcp_call`; Anthropic
/// `server_tool_use` and its result block (`web_search_tool_result`, `web_fetch_tool_result`,
/// `code_execution_tool_result`, ...), `mcp_tool_use` and `mcp_tool_result`; Gemini
/// `executableCode` with its `codeExecutionResult`, Google Search grounding, URL context.
///
/// Never dispatched to a local tool and never an unknown tool: the dispatcher records it in
/// the run's journal as the provider's ([`ProviderCall::tool`]), so an audit of the run lists
/// every effect it had.
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderCall {
    /// The provider (`openai`, `anthropic`, `gemini`).
    pub provider: &'static str,
    /// The provider's id of the call (`ws_…`, `srvtoolu_…`), or one derived from the response
    /// and the call's place in it when the provider gives none (Gemini).
    pub id: String,
    /// The hosted tool's name as the provider calls it (`web_search`, `code_interpreter`,
    /// `code_execution`); a remote MCP tool is `mcp.<server>.<tool>`.
    pub name: String,
    /// What the call was given (the query, the code, the arguments), or `null` when this
    /// response carries only its result.
    pub input: Value,
    /// What came of it, when it ran: the result block or the item's status and outputs. `None`:
    /// it has not run yet (an Anthropic server tool runs after the client's results are sent,
    /// and its result comes in the next response, which records it).
    pub result: Option<Value>,
}

impl ProviderCall {
    /// The tool name of its journal record: `provider:<provider>/<name>`
    /// (`provider:openai/web_search`). No local tool can have it: providers allow only letters,
    /// digits, `_` and `-` in function names.
    pub fn tool(&self) -> String {
        format!("provider:{}/{}", self.provider, self.name)
    }

    /// What the call may have done, as an effect class: [`EffectClass::Pure`] for the hosted
    /// tools that read (web search and fetch, file search, URL context) or compute in the
    /// provider's sandbox (code interpreter and execution, image generation); everything else
    /// (a remote MCP tool, a hosted tool this version does not know) is
    /// [`EffectClass::Irreversible`], since nothing says it did not change the world and nothing
    /// here can undo it.
    pub fn class(&self) -> EffectClass {
        const READS_OR_SANDBOXED: &[&str] = &[
            "web_search",
            "web_search_preview",
            "web_fetch",
            "file_search",
            "url_context",
            "google_search",
            "google_search_retrieval",
            "google_maps",
            "code_interpreter",
            "code_execution",
            "bash_code_execution",
            "text_editor_code_execution",
            "image_generation",
            "tool_search_tool_regex",
            "tool_search_tool_bm25",
        ];
        if READS_OR_SANDBOXED.contains(&self.name.as_str()) {
            EffectClass::Pure
        } else {
            EffectClass::Irreversible
        }
    }
}

/// One model turn: the calls the application runs, how the turn ended, and the tools the
/// provider ran itself.
#[derive(Debug, Clone, PartialEq)]
pub struct Turn {
    /// The wire format it came in (and its results go back in).
    pub format: WireFormat,
    /// The provider's id of the response, when it gives one.
    pub response_id: Option<String>,
    /// How the turn ended: only [`Stop::Finished`] runs calls.
    pub stop: Stop,
    /// The function calls for the application's tools, in the order the model wrote them.
    pub calls: Vec<ToolCall>,
    /// The tools the provider ran (or will run) itself, in order.
    pub provider_calls: Vec<ProviderCall>,
    /// Items that ask the application for something other than a function call (OpenAI
    /// `computer_call`, `local_shell_call`, `custom_tool_call`, `mcp_approval_request`, a Chat
    /// Completions `function_call` of the deprecated functions API): not dispatched; the
    /// application answers them itself, or the provider refuses the next request.
    pub unhandled: Vec<Value>,
}

impl Turn {
    fn new(format: WireFormat, response: &Value) -> Turn {
        Turn {
            format,
            response_id: response
                .get("id")
                .or_else(|| response.get("responseId"))
                .and_then(Value::as_str)
                .map(str::to_owned),
            stop: Stop::missing(),
            calls: Vec::new(),
            provider_calls: Vec::new(),
            unhandled: Vec::new(),
        }
    }

    /// Parse an OpenAI Chat Completions response (`{"id", "choices": [{"message":
    /// {"tool_calls", "refusal"}, "finish_reason"}]}`; the first choice).
    pub fn from_openai_chat(response: &Value) -> Result<Turn, WireError> {
        openai::chat(response)
    }

    /// Parse an OpenAI Responses API response (`{"id", "status", "incomplete_details",
    /// "output": [items]}`).
    pub fn from_openai_responses(response: &Value) -> Result<Turn, WireError> {
        openai::responses(response)
    }

    /// Parse an Anthropic Messages response (`{"id", "content": [blocks], "stop_reason"}`).
    pub fn from_anthropic(response: &Value) -> Result<Turn, WireError> {
        anthropic::message(response)
    }

    /// Parse a Gemini `generateContent` response (`{"responseId", "candidates": [{"content":
    /// {"parts"}, "finishReason", "groundingMetadata"}], "promptFeedback"}`; the first
    /// candidate). A `functionCall` without an `id` (as older models send them) gets one derived
    /// from the response id (when there is one), its place among the turn's calls, its name
    /// and its arguments: a response sent again maps to the same calls. Without a `responseId`,
    /// a later response making the very same call at the same place is taken for the same call
    /// too (its recorded result is replayed: nothing runs twice, but an irreversible tool without
    /// a key is not run again for it either).
    pub fn from_gemini(response: &Value) -> Result<Turn, WireError> {
        gemini::response(response)
    }

    /// Parse `response` in `format`.
    pub fn parse(format: WireFormat, response: &Value) -> Result<Turn, WireError> {
        match format {
            WireFormat::OpenAiChat => Turn::from_openai_chat(response),
            WireFormat::OpenAiResponses => Turn::from_openai_responses(response),
            WireFormat::Anthropic => Turn::from_anthropic(response),
            WireFormat::Gemini => Turn::from_gemini(response),
        }
    }

    /// What to send back for `results`, in this turn's format ([`WireFormat::reply`]).
    pub fn reply(&self, results: &[ToolResult]) -> Vec<Value> {
        self.format.reply(results)
    }
}

/// A provider response that is not of the shape its format documents (no `choices`, no
/// `content`, not an object): usually an error body sent where a response was expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not an {format} response: {problem}")]
pub struct WireError {
    /// The format it was read as.
    pub format: WireFormat,
    /// What is missing or wrong.
    pub problem: String,
}

impl WireError {
    fn new(format: WireFormat, problem: impl Into<String>) -> WireError {
        WireError {
            format,
            problem: problem.into(),
        }
    }
}

/// What one turn's dispatch gave: a result for every call, and how each of the provider's own
/// calls was recorded.
#[derive(Debug, Clone)]
pub struct TurnResults {
    /// The format the turn came in.
    pub format: WireFormat,
    /// One result per call of the turn, in call order.
    pub results: Vec<ToolResult>,
    /// One entry per provider call of the turn, in order.
    pub provider: Vec<ProviderRecord>,
}

impl TurnResults {
    /// What to send back to the model, in the turn's format ([`WireFormat::reply`]).
    pub fn reply(&self) -> Vec<Value> {
        self.format.reply(&self.results)
    }
}

impl Dispatcher {
    /// Run one model turn parsed from a provider's response ([`Turn`]) in `run`:
    ///
    /// 1. every tool the provider ran itself ([`Turn::provider_calls`]) is recorded in the
    ///    run's journal as the provider's (tool `provider:<provider>/<name>`, see
    ///    [`ProviderCall`](super::ProviderCall)), whatever became of the turn: those effects
    ///    happened. None of them is dispatched to a local tool;
    /// 2. when the turn finished ([`Stop::runs_calls`]), its calls run as [`Dispatcher::dispatch`]
    ///    runs them; when it was cut by its token limit, refused, filtered or did not finish,
    ///    none of them runs: each gets [`Rejection::TurnCut`], whose text tells the model the
    ///    turn was cut and what to do, and nothing is journaled for them.
    ///
    /// [`TurnResults::reply`] writes the results back in the turn's format.
    pub async fn dispatch_turn(&self, run: &RunContext, turn: &Turn) -> TurnResults {
        let mut provider = Vec::with_capacity(turn.provider_calls.len());
        for call in &turn.provider_calls {
            provider.push(record::record(self.engine().store().as_ref(), run, call).await);
        }
        if !turn.unhandled.is_empty() {
            let kinds: Vec<&str> = turn.unhandled.iter().filter_map(|i| str_of(i, "type")).collect();
            tracing::warn!(
                format = %turn.format,
                items = ?kinds,
                "the turn has items the dispatcher does not answer (not function calls): the application must"
            );
        }
        let results = if turn.stop.runs_calls() {
            self.dispatch(run, &turn.calls).await
        } else {
            self.refuse_cut_turn(turn)
        };
        TurnResults {
            format: turn.format,
            results,
            provider,
        }
    }

    /// A [`Rejection::TurnCut`] result for every call of `turn`.
    fn refuse_cut_turn(&self, turn: &Turn) -> Vec<ToolResult> {
        if !turn.calls.is_empty() {
            tracing::warn!(
                format = %turn.format,
                stop = turn.stop.kind(),
                reason = turn.stop.reason().unwrap_or_default(),
                calls = turn.calls.len(),
                "the model's turn did not finish: none of its tool calls ran"
            );
        }
        let rejection = Rejection::TurnCut {
            stop: turn.stop.clone(),
            calls: turn.calls.len(),
        };
        turn.calls
            .iter()
            .map(|call| {
                ToolResult::new(
                    call,
                    ToolOutcome::Rejected(rejection.clone()),
                    Disposition::Rejected,
                    None,
                )
            })
            .collect()
    }
}

impl ToolCall {
    /// A call from a Gemini `functionCall` part: `{"functionCall": {"id", "name", "args"}}` (the
    /// args are already parsed JSON). A call without an `id`, as older models send them, gets
    /// one derived from `index` (its place among the turn's function calls), its name and its
    /// arguments, so that the same response read again gives the same id;
    /// [`Turn::from_gemini`] derives it from the response's id too.
    pub fn from_gemini(part: &Value, index: usize) -> Option<ToolCall> {
        gemini::gemini_call(part, None, index)
    }
}

impl ToolResult {
    /// A Gemini `functionResponse` part: `{"functionResponse": {"id", "name", "response"}}`.
    /// The response is `{"output": <the output>}` for an output (the value as it is, or the
    /// text of [`ToolResult::content`] when it carries a note) and `{"error": <the text of
    /// [`ToolResult::content`]>}` for anything else, as Gemini reads them. The `id` is left out
    /// when the call came without one ([`Turn::from_gemini`]): Gemini then matches results by
    /// name and order.
    ///
    /// A tool that declares a view (`#[tool(to_model = path)]`) answers with the view's text as
    /// the output, and its images as `inlineData` parts of the function response
    /// (`functionResponse.parts`, Gemini's multimodal function responses).
    pub fn to_gemini_part(&self) -> Value {
        let mut images = Vec::new();
        let response = match (&self.outcome, &self.input_differs, &self.view) {
            (ToolOutcome::Output(_), None, Some(view)) => {
                images = view
                    .images()
                    .map(|(mime, data)| json!({"inlineData": {"mimeType": mime, "data": data}}))
                    .collect();
                json!({"output": view.texts()})
            }
            (ToolOutcome::Output(v), None, None) => json!({"output": v}),
            (ToolOutcome::Output(_), Some(_), _) => json!({"output": self.content()}),
            _ => json!({"error": self.content()}),
        };
        let mut part = serde_json::Map::new();
        if !self.call_id.starts_with(DERIVED_ID_PREFIX) {
            part.insert("id".into(), json!(self.call_id));
        }
        part.insert("name".into(), json!(self.name));
        part.insert("response".into(), response);
        if !images.is_empty() {
            part.insert("parts".into(), Value::Array(images));
        }
        json!({"functionResponse": part})
    }
}

/// The prefix of the call ids derived for Gemini calls that came without one. A result for
/// such a call is sent back without an `id` (Gemini matches it by name and order).
pub(crate) const DERIVED_ID_PREFIX: &str = "gemini-derived-";

/// A call id for a call that came without one: the same for the same response sent again.
fn derived_id(response_id: Option<&str>, what: &str, index: usize, name: &str, input: &Value) -> String {
    let canonical = crate::value::canonical::to_string(&json!([response_id, what, index, name, input]));
    let hash = crate::value::digest::sha256_hex(canonical.as_bytes());
    format!("{DERIVED_ID_PREFIX}{}", &hash[..24])
}

/// A Gemini content carrying the results of one turn, in call order: `{"role": "user",
/// "parts": [{"functionResponse": {"id", "name", "response"}}, ...]}`
/// ([`ToolResult::to_gemini_part`]).
pub fn gemini_function_responses(results: &[ToolResult]) -> Value {
    let parts: Vec<Value> = results.iter().map(ToolResult::to_gemini_part).collect();
    json!({"role": "user", "parts": parts})
}

/// The longest text kept of one string in a provider call's recorded input or result; longer
/// ones (encrypted page contents, base64 images) are cut, with their length said.
const RECORDED_TEXT_LIMIT: usize = 2048;

/// `value` as recorded: every string longer than [`RECORDED_TEXT_LIMIT`] bytes cut, with its
/// length said. The record is an audit of what the provider did, not an archive of pages.
fn trimmed(value: &Value) -> Value {
    match value {
        Value::String(s) if s.len() > RECORDED_TEXT_LIMIT => {
            let cut = (0..=RECORDED_TEXT_LIMIT)
                .rev()
                .find(|i| s.is_char_boundary(*i))
                .unwrap_or(0);
            Value::String(format!("{}… [{} bytes in all]", &s[..cut], s.len()))
        }
        Value::Array(items) => Value::Array(items.iter().map(trimmed).collect()),
        Value::Object(fields) => Value::Object(fields.iter().map(|(k, v)| (k.clone(), trimmed(v))).collect()),
        v => v.clone(),
    }
}

/// The fields of `item` other than `skip`, as an object.
fn without(item: &Value, skip: &[&str]) -> Value {
    let fields: Map<String, Value> = item
        .as_object()
        .map(|o| {
            o.iter()
                .filter(|(k, _)| !skip.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .unwrap_or_default();
    Value::Object(fields)
}

/// The fields of `item` named in `keep`, as an object.
fn only(item: &Value, keep: &[&str]) -> Value {
    let fields: Map<String, Value> = keep
        .iter()
        .filter_map(|k| item.get(*k).map(|v| ((*k).to_owned(), v.clone())))
        .collect();
    Value::Object(fields)
}

fn str_of<'a>(v: &'a Value, field: &str) -> Option<&'a str> {
    v.get(field).and_then(Value::as_str)
}
