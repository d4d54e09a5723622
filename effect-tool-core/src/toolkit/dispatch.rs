//! Dispatching one model turn's tool calls through the engine.

use std::panic::AssertUnwindSafe;

use futures::{FutureExt, StreamExt};
use serde_json::{Value, json};

use super::Toolkit;
use super::validate;
use crate::call::context::RunContext;
use crate::call::error::{ApprovalPending, EffectError, SideEffectRetryBlocked};
use crate::engine::{CallOptions, Disposition, Engine};

/// How many calls of one turn run at once unless [`Dispatcher::with_concurrency`] says otherwise.
pub const DEFAULT_CONCURRENCY: usize = 8;

/// The largest arguments a call may carry unless [`Dispatcher::with_max_argument_bytes`] says
/// otherwise: 1 MiB of JSON text. Larger arguments are refused as
/// [`Rejection::ArgumentsTooLarge`] before they are parsed, and nothing is journaled.
pub const DEFAULT_MAX_ARGUMENT_BYTES: usize = 1 << 20;

/// One tool call as a model wrote it: its id, the tool's name, and the arguments as raw JSON
/// text (possibly malformed or truncated: the dispatcher checks).
///
/// The `from_*` constructors read one item of a response. To read a whole response, with how
/// the turn ended (a turn cut by its token limit must not run) and the tools the provider ran
/// itself, parse it as a [`Turn`](super::Turn) and use [`Dispatcher::dispatch_turn`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ToolCall {
    /// The model's tool-call id (OpenAI `tool_calls[].id`, Anthropic `tool_use.id`, Responses
    /// `call_id`).
    pub id: String,
    /// The tool's name as the model wrote it.
    pub name: String,
    /// The arguments, as the JSON text the model produced. Empty text and `null` count as `{}`.
    pub arguments: String,
}

impl ToolCall {
    /// A call.
    pub fn new(id: impl Into<String>, name: impl Into<String>, arguments: impl Into<String>) -> Self {
        ToolCall {
            id: id.into(),
            name: name.into(),
            arguments: arguments.into(),
        }
    }

    /// A call from an OpenAI Chat Completions `tool_calls[]` item:
    /// `{"id", "type": "function", "function": {"name", "arguments"}}`.
    pub fn from_openai(item: &Value) -> Option<ToolCall> {
        let f = item.get("function")?;
        Some(ToolCall::new(
            item.get("id")?.as_str()?,
            f.get("name")?.as_str()?,
            f.get("arguments").and_then(Value::as_str).unwrap_or(""),
        ))
    }

    /// A call from an OpenAI Responses API output item:
    /// `{"type": "function_call", "call_id", "name", "arguments"}`.
    pub fn from_openai_responses(item: &Value) -> Option<ToolCall> {
        if item.get("type").and_then(Value::as_str) != Some("function_call") {
            return None;
        }
        Some(ToolCall::new(
            item.get("call_id")?.as_str()?,
            item.get("name")?.as_str()?,
            item.get("arguments").and_then(Value::as_str).unwrap_or(""),
        ))
    }

    /// A call from an Anthropic `tool_use` content block: `{"type": "tool_use", "id", "name",
    /// "input"}` (the input is already parsed JSON).
    pub fn from_anthropic(block: &Value) -> Option<ToolCall> {
        if block.get("type").and_then(Value::as_str) != Some("tool_use") {
            return None;
        }
        Some(ToolCall::new(
            block.get("id")?.as_str()?,
            block.get("name")?.as_str()?,
            block.get("input").map(Value::to_string).unwrap_or_default(),
        ))
    }
}

/// How a model turn ended, and so whether its calls may run.
///
/// Only [`Stop::Finished`] runs calls. A turn that ended any other way can carry calls whose
/// arguments parse but are not what the model meant (cut in the middle of a list, before the
/// last field); each call gets a result that says the turn was cut and what to do
/// ([`Rejection::TurnCut`]), and nothing runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stop {
    /// The model finished its turn: OpenAI `finish_reason` `tool_calls` or `stop`, Responses
    /// `status: "completed"`, Anthropic `stop_reason` `tool_use`, `end_turn` or
    /// `stop_sequence`, Gemini `finishReason: "STOP"`.
    Finished,
    /// Cut by a token limit: OpenAI `finish_reason: "length"`, Responses
    /// `incomplete_details.reason: "max_output_tokens"`, Anthropic `max_tokens` or
    /// `model_context_window_exceeded`, Gemini `MAX_TOKENS`.
    Truncated {
        /// The provider's word for it.
        reason: String,
    },
    /// The model refused: Anthropic `stop_reason: "refusal"`, an OpenAI `refusal` (a message's
    /// `refusal` text, a Responses `refusal` content part).
    Refused {
        /// The provider's word for it.
        reason: String,
    },
    /// Stopped by the provider's content filter: OpenAI `content_filter`, Gemini `SAFETY`,
    /// `RECITATION`, `BLOCKLIST`, `PROHIBITED_CONTENT`, `SPII`, `LANGUAGE`, the `IMAGE_*`
    /// reasons, or a prompt blocked before any candidate (`promptFeedback.blockReason`).
    Filtered {
        /// The provider's word for it.
        reason: String,
    },
    /// Not finished, or ended in a way that does not say its calls are whole: a paused turn
    /// (Anthropic `pause_turn`), a response still in progress, failed or cancelled (Responses
    /// `status`), no finish reason at all (a stream read before its end), a malformed or
    /// unexpected function call (Gemini), or a reason this version does not know.
    Unfinished {
        /// The provider's word for it (`no finish reason` when there was none).
        reason: String,
    },
}

impl Stop {
    /// Whether the turn's calls may run (only when the model finished its turn).
    pub fn runs_calls(&self) -> bool {
        matches!(self, Stop::Finished)
    }

    /// The provider's word for how the turn ended, when it was not finished.
    pub fn reason(&self) -> Option<&str> {
        match self {
            Stop::Finished => None,
            Stop::Truncated { reason }
            | Stop::Refused { reason }
            | Stop::Filtered { reason }
            | Stop::Unfinished { reason } => Some(reason),
        }
    }

    /// A word for the kind of stop (`finished`, `truncated`, `refused`, `filtered`,
    /// `unfinished`), for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Stop::Finished => "finished",
            Stop::Truncated { .. } => "truncated",
            Stop::Refused { .. } => "refused",
            Stop::Filtered { .. } => "filtered",
            Stop::Unfinished { .. } => "unfinished",
        }
    }

    pub(crate) fn truncated(reason: &str) -> Stop {
        Stop::Truncated { reason: reason.into() }
    }

    pub(crate) fn filtered(reason: &str) -> Stop {
        Stop::Filtered { reason: reason.into() }
    }

    pub(crate) fn refused(reason: &str) -> Stop {
        Stop::Refused { reason: reason.into() }
    }

    pub(crate) fn unfinished(reason: &str) -> Stop {
        Stop::Unfinished { reason: reason.into() }
    }

    /// The stop of a response that says none.
    pub(crate) fn missing() -> Stop {
        Stop::unfinished("no finish reason")
    }
}

/// Why a call was refused before anything ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rejection {
    /// The arguments are not valid JSON (malformed or truncated).
    MalformedArguments {
        /// The parser's message (what and where).
        message: String,
    },
    /// No tool has this name.
    UnknownTool {
        /// Up to three names close to the one asked for.
        suggestions: Vec<String>,
        /// Every tool's name.
        available: Vec<String>,
    },
    /// The arguments do not fit the tool's schema.
    InvalidArguments {
        /// What is wrong, one entry a field (`` `amount_cents`: expected integer, got string ``).
        problems: Vec<String>,
    },
    /// The arguments are larger than the dispatcher takes ([`Dispatcher::with_max_argument_bytes`]).
    ArgumentsTooLarge {
        /// Their size, in bytes of JSON text.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// The model's turn did not finish (cut by its token limit, refused, filtered, paused):
    /// its calls may be incomplete, so none of them ran ([`Dispatcher::dispatch_turn`]).
    TurnCut {
        /// How the turn ended.
        stop: Stop,
        /// How many calls the turn had.
        calls: usize,
    },
}

impl Rejection {
    /// A word for the kind of rejection (`malformed`, `unknown-tool`, `invalid`, `too-large`,
    /// `turn-cut`).
    pub fn kind(&self) -> &'static str {
        match self {
            Rejection::MalformedArguments { .. } => "malformed",
            Rejection::UnknownTool { .. } => "unknown-tool",
            Rejection::InvalidArguments { .. } => "invalid",
            Rejection::ArgumentsTooLarge { .. } => "too-large",
            Rejection::TurnCut { .. } => "turn-cut",
        }
    }

    /// The fields the rejection is about (`amount_cents`, `lines[2].sku`, `arguments` for the
    /// whole): what is logged, never the values sent.
    pub fn fields(&self) -> Vec<String> {
        match self {
            Rejection::InvalidArguments { problems } => {
                let mut fields: Vec<String> = problems
                    .iter()
                    .map(|p| match p.split_once(": ") {
                        Some((field, _)) => field.trim_matches('`').to_owned(),
                        None => "arguments".to_owned(),
                    })
                    .collect();
                fields.dedup();
                fields
            }
            _ => Vec::new(),
        }
    }
}

/// What came of one tool call.
#[derive(Debug, Clone)]
pub enum ToolOutcome {
    /// The tool's output (executed, replayed, shared or reconciled: see
    /// [`ToolResult::disposition`]).
    Output(Value),
    /// Refused before anything ran: the model can fix the call.
    Rejected(Rejection),
    /// Not run: it might repeat an effect that cannot be undone; a person must resolve the key.
    Blocked(SideEffectRetryBlocked),
    /// Not run yet: the call waits for a person's approval under this key.
    AwaitingApproval(ApprovalPending),
    /// The tool or the journal failed.
    Failed(EffectError<String>),
    /// The tool panicked. The panic was caught; the other calls of the turn were not affected.
    /// The engine counts a panic as an unknown outcome, like a timeout: an idempotent tool was
    /// retried with the same key, and a journaled call's record is left in doubt, so the next
    /// identical call re-runs it with the same key, reconciles through `recover`, or blocks.
    Panicked {
        /// The panic's message.
        message: String,
    },
}

/// A person's denial of a call ([`ToolResult::denied`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Denial<'a> {
    /// The tool.
    pub tool: &'a str,
    /// Who denied it.
    pub by: &'a str,
    /// Their reason, written for the model, if they gave one.
    pub reason: Option<&'a str>,
}

/// The result of one tool call, for the model and for the application.
#[derive(Debug, Clone)]
pub struct ToolResult {
    /// The model's tool-call id.
    pub call_id: String,
    /// The tool's name as the model wrote it.
    pub name: String,
    /// What came of it.
    pub outcome: ToolOutcome,
    /// What the engine did (`Rejected` when the call was refused before anything ran, `Failed`
    /// when it panicked).
    pub disposition: Disposition,
    /// The effect key, when the call reached the journal.
    pub key: Option<String>,
    /// `Some` when the output is another call's, made for other arguments under the same key
    /// ([`crate::engine::CallReport::input_differs`]): this call did not run. The paths of the
    /// fields that differ, never their values. [`ToolResult::content`] tells the model.
    pub input_differs: Option<Vec<String>>,
    /// `Some` when a person edited the arguments before approving the call
    /// ([`crate::engine::CallReport::edited`]): it ran with the edited arguments. The fields
    /// changed, never their values. [`ToolResult::content`] tells the model.
    pub edited: Option<Vec<String>>,
    /// For a call blocked as an identical re-plan ([`crate::BlockReason::IdenticalReplan`]):
    /// the earlier call's recorded result, when the journal has it. [`ToolResult::content`]
    /// gives it to the model.
    pub recorded: Option<Value>,
    /// What the model reads of the output (or of [`ToolResult::recorded`], or of the result an
    /// attempt that took over recorded) when the tool declares a view (`#[tool(to_model =
    /// path)]`, [`crate::Tool::to_model`]); `None`: the model reads the output itself. The
    /// journal and [`ToolResult::output`] keep the whole value.
    pub view: Option<crate::call::view::ModelOutput>,
}

impl ToolResult {
    pub(super) fn new(call: &ToolCall, outcome: ToolOutcome, disposition: Disposition, key: Option<String>) -> Self {
        ToolResult {
            call_id: call.id.clone(),
            name: call.name.clone(),
            outcome,
            disposition,
            key,
            input_differs: None,
            edited: None,
            recorded: None,
            view: None,
        }
    }

    /// The denial, if a person denied the call: who, and their reason for the model
    /// ([`EffectError::Denied`]). The disposition is [`Disposition::Failed`];
    /// [`ToolResult::content`] gives the model the reviewer's words and what it may do next.
    pub fn denied(&self) -> Option<Denial<'_>> {
        match &self.outcome {
            ToolOutcome::Failed(EffectError::Denied { tool, by, reason, .. }) => Some(Denial {
                tool,
                by,
                reason: reason.as_deref(),
            }),
            _ => None,
        }
    }

    /// The same result for another call of the turn (its id and name).
    fn for_call(mut self, call: &ToolCall) -> Self {
        self.call_id = call.id.clone();
        self.name = call.name.clone();
        self
    }

    /// Whether the model should see this as an error.
    pub fn is_error(&self) -> bool {
        !matches!(self.outcome, ToolOutcome::Output(_))
    }

    /// The output, if the call succeeded.
    pub fn output(&self) -> Option<&Value> {
        match &self.outcome {
            ToolOutcome::Output(v) => Some(v),
            _ => None,
        }
    }

    /// The blocked error, if the call was blocked.
    pub fn blocked(&self) -> Option<&SideEffectRetryBlocked> {
        match &self.outcome {
            ToolOutcome::Blocked(b) => Some(b),
            _ => None,
        }
    }

    /// The pending approval, if the call waits for one.
    pub fn approval_pending(&self) -> Option<&ApprovalPending> {
        match &self.outcome {
            ToolOutcome::AwaitingApproval(a) => Some(a),
            _ => None,
        }
    }

    /// Whether the call was refused before anything ran (malformed, unknown, invalid).
    pub fn is_rejected(&self) -> bool {
        matches!(self.outcome, ToolOutcome::Rejected(_))
    }

    /// The text the model reads: the output (a string output as is, anything else as JSON; the
    /// text of the tool's view when it declares one, [`ToolResult::view`]),
    /// or a message that says what happened and what the model can do. Written for a model:
    /// it never carries an operator's instructions (commands, journal paths); the errors'
    /// `Display` (for people) does.
    pub fn content(&self) -> String {
        let name = &self.name;
        let shown = |v: &Value| match &self.view {
            Some(view) => view.to_text(),
            None => output_text(v),
        };
        match &self.outcome {
            ToolOutcome::Output(v) => match &self.input_differs {
                None if self.edited.is_some() => {
                    let fields = self.edited.as_deref().unwrap_or_default();
                    let which = if fields.is_empty() {
                        "no field changed".to_owned()
                    } else {
                        format!("changed: {}", quoted_list(fields))
                    };
                    format!(
                        "Note: a person reviewed this call of `{name}` and edited its arguments before approving it ({which}); it ran once, with the edited arguments, not yours. Its result: {}",
                        shown(v)
                    )
                }
                None => shown(v),
                Some(fields) => {
                    let which = if fields.is_empty() {
                        String::new()
                    } else {
                        format!(" (fields that differ: {})", quoted_list(fields))
                    };
                    let key = self.key.as_deref().unwrap_or_default();
                    format!(
                        "Note: this call of `{name}` did not run. An earlier call with other arguments{which} already ran under the same key (`{key}`), and the tool counts both as one action, so its recorded result is returned here, not a result for your arguments: {}",
                        shown(v)
                    )
                }
            },
            ToolOutcome::Rejected(Rejection::MalformedArguments { message }) => format!(
                "Error: the arguments for `{name}` are not valid JSON ({message}). Nothing was run. Call `{name}` again with one complete JSON object that matches its parameters."
            ),
            ToolOutcome::Rejected(Rejection::UnknownTool { suggestions, available }) => {
                let hint = if !suggestions.is_empty() {
                    let s: Vec<String> = suggestions.iter().map(|s| format!("`{s}`")).collect();
                    format!("Did you mean {}?", s.join(" or "))
                } else if available.is_empty() {
                    "No tools are available.".to_owned()
                } else {
                    let s: Vec<String> = available.iter().map(|s| format!("`{s}`")).collect();
                    format!("Available tools: {}.", s.join(", "))
                };
                format!("Error: there is no tool named `{name}`. Nothing was run. {hint}")
            }
            ToolOutcome::Rejected(Rejection::InvalidArguments { problems }) => format!(
                "Error: the arguments for `{name}` do not match its parameters: {}. Nothing was run. Fix the arguments and call `{name}` again.",
                problems.join("; ")
            ),
            ToolOutcome::Rejected(Rejection::ArgumentsTooLarge { size, limit }) => format!(
                "Error: the arguments for `{name}` are {size} bytes, more than the {limit} bytes a call may carry. Nothing was run. Call `{name}` again with smaller arguments (split the work into several calls)."
            ),
            ToolOutcome::Rejected(Rejection::TurnCut { stop, calls }) => turn_cut_text(name, stop, *calls),
            ToolOutcome::Blocked(b) => blocked_text(b, self.recorded.as_ref().map(shown)),
            ToolOutcome::AwaitingApproval(a) => format!(
                "`{}` has not run yet: it waits for approval by `{}` (key `{}`). Tell the user it needs approval. Once it is approved, calling it again with the same arguments runs it.",
                a.tool, a.role, a.key
            ),
            ToolOutcome::Failed(e) => failure_text(e, self.view.as_ref()),
            ToolOutcome::Panicked { message } => format!(
                "Error: `{name}` crashed while running ({message}). Whether it took effect is unknown: do not assume either way, and do not call it in another form; tell the user."
            ),
        }
    }

    /// What the model reads, as parts: the tool's view of its output when it declares one
    /// ([`ToolResult::view`]: text and images), else the text of [`ToolResult::content`].
    pub fn model_output(&self) -> crate::call::view::ModelOutput {
        match (&self.outcome, &self.view, &self.input_differs) {
            (ToolOutcome::Output(_), Some(view), None) => view.clone(),
            _ => crate::call::view::ModelOutput::text(self.content()),
        }
    }

    /// An OpenAI Chat Completions message: `{"role": "tool", "tool_call_id", "content"}`. Its
    /// content is text only (a tool message carries no image): an image of a view is named by
    /// a line of text ([`crate::call::view::ModelOutput::to_text`]).
    pub fn to_openai_message(&self) -> Value {
        json!({"role": "tool", "tool_call_id": self.call_id, "content": self.content()})
    }

    /// An OpenAI Responses API input item: `{"type": "function_call_output", "call_id", "output"}`.
    /// The output is the text of [`ToolResult::content`]; for a view with images, a list of
    /// `input_text` and `input_image` parts (the image as a `data:` URL).
    pub fn to_openai_responses_item(&self) -> Value {
        let shown = self.model_output();
        let output = if shown.has_images() {
            use crate::call::view::ModelPart;
            let parts: Vec<Value> = shown
                .parts()
                .iter()
                .map(|p| match p {
                    ModelPart::Text { text } => json!({"type": "input_text", "text": text}),
                    ModelPart::Image { mime_type, data } => {
                        json!({"type": "input_image", "image_url": format!("data:{mime_type};base64,{data}")})
                    }
                })
                .collect();
            Value::Array(parts)
        } else {
            Value::String(self.content())
        };
        json!({"type": "function_call_output", "call_id": self.call_id, "output": output})
    }

    /// An Anthropic `tool_result` content block: `{"type": "tool_result", "tool_use_id",
    /// "content", "is_error"}`. The content is the text of [`ToolResult::content`]; for a view
    /// with images, a list of `text` and `image` blocks (base64 sources).
    pub fn to_anthropic_block(&self) -> Value {
        let shown = self.model_output();
        let content = if shown.has_images() {
            use crate::call::view::ModelPart;
            let blocks: Vec<Value> = shown
                .parts()
                .iter()
                .map(|p| match p {
                    ModelPart::Text { text } => json!({"type": "text", "text": text}),
                    ModelPart::Image { mime_type, data } => json!({
                        "type": "image",
                        "source": {"type": "base64", "media_type": mime_type, "data": data},
                    }),
                })
                .collect();
            Value::Array(blocks)
        } else {
            Value::String(self.content())
        };
        json!({
            "type": "tool_result",
            "tool_use_id": self.call_id,
            "content": content,
            "is_error": self.is_error(),
        })
    }
}

/// For each call, the index of the first call of the turn identical to it (the same tool name
/// and arguments that parse to the same JSON value); itself when it is the first. Arguments
/// that do not parse group with nothing.
fn identical_groups(calls: &[ToolCall]) -> Vec<usize> {
    let parsed: Vec<Option<Value>> = calls
        .iter()
        .map(|c| {
            let text = c.arguments.trim();
            if text.is_empty() || text == "null" {
                Some(json!({}))
            } else {
                serde_json::from_str(text).ok()
            }
        })
        .collect();
    let mut groups: Vec<usize> = (0..calls.len()).collect();
    for i in 0..calls.len() {
        let Some(args) = &parsed[i] else { continue };
        if let Some(j) =
            (0..i).find(|&j| groups[j] == j && calls[j].name == calls[i].name && parsed[j].as_ref() == Some(args))
        {
            groups[i] = j;
        }
    }
    groups
}

/// An output as the model reads it: a string as is, anything else as JSON.
fn output_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        v => v.to_string(),
    }
}

/// `` `a`, `b` `` for field paths.
fn quoted_list(items: &[String]) -> String {
    items.iter().map(|f| format!("`{f}`")).collect::<Vec<_>>().join(", ")
}

/// What the model is told when the effect of an earlier attempt may have happened: the one
/// thing it must not do is the same action in another form (a new key, a second effect).
const MAY_HAVE_HAPPENED: &str = "Do not call it in another form: other arguments, or another tool that does the same thing, would make a second, separate action.";

/// The model's text for a blocked call.
fn blocked_text(b: &SideEffectRetryBlocked, recorded: Option<String>) -> String {
    use crate::call::error::BlockReason;
    let (tool, key) = (&b.tool, &b.key);
    match b.reason {
        BlockReason::IdenticalReplan => {
            let (stands, result) = match recorded {
                Some(v) => (
                    ", and its result stands".to_owned(),
                    format!(" The earlier call's result: {v}"),
                ),
                None => (
                    "; its result is not recorded yet (it is still running, or its outcome is unknown)".to_owned(),
                    String::new(),
                ),
            };
            format!(
                "Error: `{tool}` was not run again: a call with these identical arguments already ran in an earlier turn (key `{key}`){stands}. It cannot be undone and has no key, so running it again could do the same thing twice. Nothing waits for a person. Do not call it again for the same purpose; if the user wants a second, separate one, call it with arguments that say how it differs.{result}"
            )
        }
        BlockReason::AwaitingCallback => format!(
            "`{tool}` is still pending (key `{key}`): it was started and waits for the provider's answer. Do not start it again in another way. Calling it again later with the same arguments returns the answer once it has come; tell the user it is under way."
        ),
        BlockReason::RecoverFailed => format!(
            "Error: `{tool}` was not run. An earlier attempt of this same action may already have taken effect (key `{key}`), and checking whether it did failed, so it may have happened. {MAY_HAVE_HAPPENED} Calling it again later with the same arguments checks again. Tell the user it is not confirmed yet."
        ),
        _ => format!(
            "Error: `{tool}` was not run. An earlier attempt of this same action may already have taken effect (key `{key}`): {}. Running it again could repeat something that cannot be undone, so a person has to check it first. Do not call it again, in this form or another; tell the user it waits for a person to confirm what happened.",
            b.reason
        ),
    }
}

/// The model's text for a failed call: what happened and what the model can do, once, as
/// sentences. The errors' `Display` is for people (it names commands and the journal).
///
/// `view`: what the model reads of a result another attempt recorded
/// ([`EffectError::ClaimLost`]), when the tool declares a view.
fn failure_text(e: &EffectError<String>, view: Option<&crate::call::view::ModelOutput>) -> String {
    use crate::value::outcome::Failure;
    let unknown = |what: String| {
        format!(
            "Error: {what}. Whether it took effect is unknown. {MAY_HAVE_HAPPENED} Calling it again with the same arguments first checks what happened."
        )
    };
    let failed = |what: String, failure: &Failure| match failure {
        Failure::Definitive => format!(
            "Error: {what}. Nothing happened, and the same call will fail the same way: change the arguments or choose another action."
        ),
        Failure::Transient { .. } => {
            format!("Error: {what}. Nothing happened; calling it again later with the same arguments is safe.")
        }
        Failure::Unknown => unknown(what),
    };
    match e {
        EffectError::Tool {
            tool, failure, error, ..
        } => failed(format!("`{tool}` failed: {}", error.trim_end_matches('.')), failure),
        EffectError::SharedFailure {
            tool, failure, message, ..
        } => failed(
            format!(
                "`{tool}` failed in an identical call running at the same time: {}",
                message.trim_end_matches('.')
            ),
            failure,
        ),
        EffectError::TimedOut { tool, after, .. } => unknown(format!("`{tool}` did not finish within {after:?}")),
        EffectError::Panicked { tool, message, .. } => unknown(format!("`{tool}` crashed while running ({message})")),
        EffectError::Interrupted { tool, .. } => unknown(format!("`{tool}` was stopped while running")),
        EffectError::ClaimLost {
            tool,
            recorded: Some(recorded),
            ..
        } => format!(
            "`{tool}`: another attempt of this same call took over and recorded its result, which stands: {}",
            view.map_or_else(|| output_text(recorded), crate::call::view::ModelOutput::to_text)
        ),
        EffectError::ClaimLost { tool, .. } => unknown(format!(
            "`{tool}` was stopped: another attempt of this same call took over"
        )),
        EffectError::Denied { tool, by, reason, .. } => {
            match reason.as_deref().map(str::trim).filter(|r| !r.is_empty()) {
                Some(reason) => format!(
                    "`{tool}` was not run: the reviewer ({by}) denied this call and wrote: \"{reason}\". Nothing happened. Take the reviewer's words into account: do not call `{tool}` again with the same arguments; change the call as the reviewer asks, choose another action, or tell the user.",
                ),
                None => format!(
                    "`{tool}` was not run: the reviewer ({by}) denied this call without giving a reason. Nothing happened. Do not call `{tool}` again with the same arguments; choose another action, or tell the user and ask why."
                ),
            }
        }
        EffectError::InputMismatch { tool, key, .. } => format!(
            "Error: `{tool}` was not run: its key (`{key}`) already holds an earlier call with other arguments, and this tool does not return that call's result for different ones. This is a fault in the application's key rule, not in your call: tell the user."
        ),
        EffectError::KeyOfAnotherTool {
            tool,
            key,
            recorded_tool,
        } => format!(
            "Error: `{tool}` was not run: its key (`{key}`) is already used by another tool, `{recorded_tool}`. Nothing happened. This is a fault in the application's key rules, not in your call: tell the user."
        ),
        EffectError::Compensated { tool, .. } => format!(
            "Error: `{tool}` was not run: its earlier effect was undone when its run was abandoned, and it is not applied again in this run."
        ),
        EffectError::Cancelled { tool, .. } => {
            format!("Error: `{tool}` was not run: the run was cancelled. Nothing happened.")
        }
        EffectError::ShuttingDown { tool, .. } => format!(
            "Error: `{tool}` was not run: the service is shutting down. Nothing happened; calling it again later with the same arguments is safe."
        ),
        EffectError::Store { tool, .. } => format!(
            "Error: `{tool}` was not run: the journal that records tool calls did not answer. Nothing happened; calling it again later with the same arguments is safe."
        ),
        EffectError::MissingValue { tool, .. } => format!(
            "Error: `{tool}` cannot run here: the application did not give it a value it needs. Nothing happened. This is a fault in the application, not in your call: tell the user."
        ),
        EffectError::Codec { tool, .. } => format!(
            "Error: the result recorded for this call of `{tool}` cannot be read: a person has to correct the record. Do not call it in another form; tell the user."
        ),
        EffectError::InvalidArguments { tool, message } => {
            format!("Error: the arguments for `{tool}` do not match its parameters: {message}. Nothing was run.")
        }
        EffectError::BudgetExceeded { tool, overdraft, .. } => budget_text(tool, overdraft),
        EffectError::Blocked(b) => blocked_text(b, None),
        EffectError::ApprovalPending(a) => format!(
            "`{}` has not run yet: it waits for approval by `{}` (key `{}`). Tell the user it needs approval.",
            a.tool, a.role, a.key
        ),
    }
}

/// What the model is told when a budget of its run refuses a call: which budget, what is left
/// and what the call asks, that nothing happened, and what it can still do.
fn budget_text(tool: &str, o: &crate::decide::budget::Overdraft) -> String {
    use crate::call::budget::grouped;
    use crate::decide::budget::{CALLS, CALLS_OF, SPEND};
    let (limit, left, asks) = (grouped(o.limit), grouped(o.left()), grouped(o.asks));
    if let Some(unit) = o.budget.strip_prefix(SPEND) {
        if o.left() == 0 {
            format!(
                "Error: `{tool}` was not run: the {unit} budget of this run ({limit}) is spent, this call asks {asks}. Nothing happened. Do not call `{tool}` again in this run; tell the user the budget is spent."
            )
        } else {
            format!(
                "Error: `{tool}` was not run: {unit} budget of this run: {left} left, this call asks {asks}. Nothing happened. Call it again only for at most {left}, or tell the user the budget does not cover the request."
            )
        }
    } else if let Some(limited) = o.budget.strip_prefix(CALLS_OF) {
        format!(
            "Error: `{tool}` was not run: this run may call `{limited}` at most {limit} times, and it has. Nothing happened. Do not call `{limited}` again in this run; answer with what you have, or tell the user."
        )
    } else if o.budget == CALLS {
        format!(
            "Error: `{tool}` was not run: this run may make at most {limit} tool calls, and it has. Nothing happened. Do not call tools again in this run; answer with what you have, or tell the user."
        )
    } else {
        format!(
            "Error: `{tool}` was not run: the {} has {left} left, this call asks {asks}. Nothing happened. Do not call it again in this run unchanged.",
            crate::call::budget::describe(&o.budget)
        )
    }
}

/// What the model is told for each call of a turn that did not finish: which way it ended, that
/// nothing ran, and what to do next.
fn turn_cut_text(name: &str, stop: &Stop, calls: usize) -> String {
    let (them, are) = if calls > 1 {
        ("the calls", "are")
    } else {
        ("the call", "is")
    };
    let (what, next) = match stop {
        Stop::Truncated { reason } => (
            format!("your previous response was cut off by its output token limit (`{reason}`) before it was complete"),
            format!("Make {them} again in a shorter response: fewer calls at once, or shorter arguments."),
        ),
        Stop::Refused { reason } => (
            format!("your previous response ended in a refusal (`{reason}`)"),
            "Make a call again only if it is still what the user wants; otherwise answer the user.".to_owned(),
        ),
        Stop::Filtered { reason } => (
            format!("your previous response was stopped by the provider's content filter (`{reason}`)"),
            "Do not repeat the same response; tell the user the request was blocked, or do what is needed another way."
                .to_owned(),
        ),
        Stop::Unfinished { reason } => (
            format!("your previous response did not finish (`{reason}`)"),
            format!(
                "If {them} {are} still needed, make {} again.",
                if calls > 1 { "them" } else { "it" }
            ),
        ),
        Stop::Finished => (
            "your previous response was not run".to_owned(),
            format!("Make {them} again."),
        ),
    };
    let which = if calls > 1 {
        format!("none of its {calls} tool calls ran, `{name}` included")
    } else {
        format!("its call of `{name}` did not run")
    };
    let why = match stop {
        Stop::Truncated { .. } | Stop::Unfinished { .. } => ": the arguments may be incomplete",
        _ => "",
    };
    format!("Error: {what}, so {which}{why}. Nothing happened. {next}")
}

/// An Anthropic user message carrying the results of one turn, in call order:
/// `{"role": "user", "content": [tool_result, ...]}`.
pub fn anthropic_tool_results_message(results: &[ToolResult]) -> Value {
    let blocks: Vec<Value> = results.iter().map(ToolResult::to_anthropic_block).collect();
    json!({"role": "user", "content": blocks})
}

/// Runs a model turn's tool calls through an [`Engine`]: checks each call, runs the valid ones
/// with bounded concurrency, and returns one [`ToolResult`] per call, in call order.
///
/// - Malformed or truncated arguments, an unknown tool name (with the nearest names suggested),
///   and arguments that do not fit the tool's schema come back as [`ToolOutcome::Rejected`];
///   nothing runs.
/// - A panicking tool is caught and reported as [`ToolOutcome::Panicked`]; the other calls go on.
/// - The run's cancellation reaches every tool ([`crate::EffectCtx::cancellation`]); calls that
///   have not started do not start.
/// - [`SideEffectRetryBlocked`] and [`ApprovalPending`] come back as typed outcomes carrying
///   the key, with a model-facing text from [`ToolResult::content`].
/// - [`Dispatcher::dispatch_turn`] takes a whole provider response, parsed as a
///   [`Turn`](super::Turn) (OpenAI Chat Completions or Responses, Anthropic Messages, Gemini):
///   a turn cut by its token limit, refused, filtered or unfinished runs none of its calls
///   ([`Rejection::TurnCut`]), and the tools the provider ran itself are recorded in the run's
///   journal, never dispatched here. [`TurnResults::reply`](super::TurnResults::reply) writes
///   the results back in the turn's format.
///
/// Cheap to clone.
#[derive(Clone, Debug)]
pub struct Dispatcher {
    toolkit: Toolkit,
    engine: Engine,
    concurrency: usize,
    max_argument_bytes: usize,
}

impl Dispatcher {
    /// A dispatcher of `toolkit`'s calls through `engine`, [`DEFAULT_CONCURRENCY`] at a time.
    pub fn new(toolkit: Toolkit, engine: Engine) -> Self {
        Dispatcher {
            toolkit,
            engine,
            concurrency: DEFAULT_CONCURRENCY,
            max_argument_bytes: DEFAULT_MAX_ARGUMENT_BYTES,
        }
    }

    /// Refuse calls whose arguments are longer than `bytes` of JSON text (default
    /// [`DEFAULT_MAX_ARGUMENT_BYTES`]) as [`Rejection::ArgumentsTooLarge`], before parsing and
    /// before anything is journaled.
    pub fn with_max_argument_bytes(mut self, bytes: usize) -> Self {
        self.max_argument_bytes = bytes;
        self
    }

    /// The argument size limit, in bytes.
    pub fn max_argument_bytes(&self) -> usize {
        self.max_argument_bytes
    }

    /// Run at most `n` calls of a turn at once (at least 1).
    pub fn with_concurrency(mut self, n: usize) -> Self {
        self.concurrency = n.max(1);
        self
    }

    /// The toolkit.
    pub fn toolkit(&self) -> &Toolkit {
        &self.toolkit
    }

    /// The engine.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The concurrency limit.
    pub fn concurrency(&self) -> usize {
        self.concurrency
    }

    /// Run one turn's `calls` in `run`; the results come back in call order.
    ///
    /// The calls run whatever became of the turn they came in: a turn cut by its token limit can
    /// carry arguments that parse and are still cut short. [`Dispatcher::dispatch_turn`] checks
    /// how the turn ended first.
    ///
    /// Identical calls (the same tool, the same arguments as JSON values) are one piece of
    /// work, whatever the tool's class: the first of them runs, and each of the others gets its
    /// result under its own call id (disposition [`Disposition::Shared`] when the first call made
    /// it, [`Disposition::Replayed`] when it replayed it).
    /// Their call ids are kept on the record ([`crate::decide::record::Op::Share`]), so that each of
    /// them replays it later.
    pub async fn dispatch(&self, run: &RunContext, calls: &[ToolCall]) -> Vec<ToolResult> {
        let groups = identical_groups(calls);
        let leaders = groups.iter().enumerate().filter(|(i, g)| **g == *i).map(|(i, _)| i);
        let ran: Vec<(usize, ToolResult)> = futures::stream::iter(leaders.map(|i| {
            let followers: Vec<&str> = (i + 1..calls.len())
                .filter(|&j| groups[j] == i)
                .map(|j| calls[j].id.as_str())
                .collect();
            async move { (i, self.call_shared(run, &calls[i], &followers).await) }
        }))
        .buffered(self.concurrency)
        .collect()
        .await;
        let mut by_leader: Vec<Option<ToolResult>> = vec![None; calls.len()];
        for (i, result) in ran {
            by_leader[i] = Some(result);
        }
        calls
            .iter()
            .zip(&groups)
            .enumerate()
            .map(|(i, (call, &leader))| {
                let Some(first) = &by_leader[leader] else {
                    unreachable!("every group's first call ran")
                };
                if leader == i {
                    return first.clone();
                }
                // A result the first call replayed is a replay for the others too; one it made
                // (executed, reconciled) is shared with them.
                let disposition = if first.output().is_some() && first.disposition != Disposition::Replayed {
                    Disposition::Shared
                } else {
                    first.disposition
                };
                ToolResult {
                    disposition,
                    ..first.clone()
                }
                .for_call(call)
            })
            .collect()
    }

    /// Run `call`, the first of identical calls whose ids are `followers`, and keep those ids
    /// on the record of its result.
    async fn call_shared(&self, run: &RunContext, call: &ToolCall, followers: &[&str]) -> ToolResult {
        let result = self.call(run, call).await;
        if let (false, Some(key), Some(_)) = (followers.is_empty(), &result.key, result.output()) {
            let op = crate::decide::record::Op::Share {
                call_ids: followers.iter().map(|c| (*c).to_owned()).collect(),
            };
            if let Err(e) = self.engine.store().apply(key, op).await {
                // The calls still get the result; a later replay under one of their ids may be
                // refused as a re-plan of an unkeyed irreversible tool.
                tracing::warn!(error = %e, key = %key, "could not keep the call ids that shared a result");
            }
        }
        result
    }

    /// Run one call in `run`.
    pub async fn call(&self, run: &RunContext, call: &ToolCall) -> ToolResult {
        let (tool, args) = match self.prepare(call) {
            Ok(prepared) => prepared,
            Err(rejection) => {
                // The kind and the fields, never the values: a field may be a secret.
                tracing::info!(
                    tool = %call.name,
                    call_id = %call.id,
                    reason = rejection.kind(),
                    fields = ?rejection.fields(),
                    "tool call rejected"
                );
                return ToolResult::new(call, ToolOutcome::Rejected(rejection), Disposition::Rejected, None);
            }
        };
        let sensitive = self.toolkit.meta(&call.name).map_or(&[][..], |m| m.sensitive);
        // Kept to scrub decoder messages (the engine scrubs them too, with the same words).
        let args_seen = if sensitive.is_empty() {
            Value::Null
        } else {
            args.clone()
        };
        let opts = CallOptions::call_id(call.id.clone());
        let run_call = tool.call_json(&self.engine, run, opts, args);
        let report = match AssertUnwindSafe(run_call).catch_unwind().await {
            Ok(report) => report,
            Err(panic) => {
                let message = crate::engine::panic_message(panic.as_ref());
                let logged = self.engine.redact_text(crate::call::redact::Site::Log, message.clone());
                tracing::error!(tool = %call.name, call_id = %call.id, message = %logged, "tool panicked");
                return ToolResult::new(call, ToolOutcome::Panicked { message }, Disposition::Failed, None);
            }
        };
        let input_differs = report.input_differs;
        let edited = report.edited;
        let outcome = match report.result {
            Ok(v) => ToolOutcome::Output(v),
            Err(EffectError::Blocked(b)) => ToolOutcome::Blocked(b),
            Err(EffectError::ApprovalPending(a)) => ToolOutcome::AwaitingApproval(a),
            Err(EffectError::Panicked { message, .. }) => ToolOutcome::Panicked { message },
            Err(EffectError::InvalidArguments { message, .. }) => {
                // serde's own message: it may quote a value, so sensitive values are cut out,
                // in the words the engine uses (`[sensitive]`).
                let message = crate::call::key::scrub(message, &args_seen, sensitive);
                let rejection = Rejection::InvalidArguments {
                    problems: vec![format!("arguments: {message}")],
                };
                tracing::info!(tool = %call.name, call_id = %call.id, reason = rejection.kind(), "tool call rejected by decoding");
                return ToolResult::new(
                    call,
                    ToolOutcome::Rejected(rejection),
                    Disposition::Rejected,
                    report.key,
                );
            }
            Err(e) => ToolOutcome::Failed(e),
        };
        // The tool's view of what the model reads (`to_model`): of the output, or of a result
        // another attempt recorded.
        let view = match &outcome {
            ToolOutcome::Output(v) => tool.to_model_json(v),
            ToolOutcome::Failed(EffectError::ClaimLost { recorded: Some(v), .. }) => tool.to_model_json(v),
            _ => None,
        };
        let mut result = ToolResult::new(call, outcome, report.disposition, report.key);
        result.input_differs = input_differs;
        result.edited = edited;
        result.view = view;
        if let Some(b) = result.blocked()
            && b.reason == crate::call::error::BlockReason::IdenticalReplan
        {
            // The model is given the earlier call's result (a read only on this rare path).
            result.recorded = match self.engine.store().lookup(&b.key).await {
                Ok(Some(rec)) if rec.state == crate::decide::record::RecordState::Completed => rec.output.clone(),
                _ => None,
            };
            result.view = result.recorded.as_ref().and_then(|v| tool.to_model_json(v));
        }
        result
    }

    fn prepare(&self, call: &ToolCall) -> Result<(&std::sync::Arc<dyn crate::DynTool>, Value), Rejection> {
        let Some(tool) = self.toolkit.get(&call.name) else {
            let names = self.toolkit.names();
            return Err(Rejection::UnknownTool {
                suggestions: validate::nearest(&call.name, names.iter().copied())
                    .into_iter()
                    .map(str::to_owned)
                    .collect(),
                available: names.into_iter().map(str::to_owned).collect(),
            });
        };
        if call.arguments.len() > self.max_argument_bytes {
            return Err(Rejection::ArgumentsTooLarge {
                size: call.arguments.len(),
                limit: self.max_argument_bytes,
            });
        }
        let text = call.arguments.trim();
        // No arguments at all (`""`, or `null` from some providers for tools without
        // parameters) count as an empty object.
        let mut args: Value = if text.is_empty() || text == "null" {
            json!({})
        } else {
            serde_json::from_str(text).map_err(|e| Rejection::MalformedArguments {
                message: if e.is_eof() {
                    format!("the JSON ends early, it looks truncated: {e}")
                } else {
                    e.to_string()
                },
            })?
        };
        if let Some(schema) = self.toolkit.argument_schema(&call.name) {
            validate::normalize(schema.schema(), &mut args);
            let secrets = self.toolkit.meta(&call.name).map_or(&[][..], |m| m.sensitive);
            let problems = validate::violations(schema, &args, secrets);
            if !problems.is_empty() {
                return Err(Rejection::InvalidArguments { problems });
            }
        }
        Ok((tool, args))
    }
}
