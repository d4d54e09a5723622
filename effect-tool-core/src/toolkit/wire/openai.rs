//! OpenAI's two wire formats: Chat Completions and Responses.

use serde_json::Value;

use super::{ProviderCall, Turn, WireError, WireFormat, only, str_of, trimmed, without};
use crate::toolkit::dispatch::{Stop, ToolCall};

/// A Chat Completions response: the first choice's calls and `finish_reason`; a `refusal` on
/// the message makes it a refusal.
pub(super) fn chat(response: &Value) -> Result<Turn, WireError> {
    let format = WireFormat::OpenAiChat;
    let choice = response
        .get("choices")
        .and_then(Value::as_array)
        .ok_or_else(|| WireError::new(format, "it has no `choices` list"))?
        .first()
        .ok_or_else(|| WireError::new(format, "its `choices` list is empty"))?;
    let mut turn = Turn::new(format, response);
    let message = choice.get("message").unwrap_or(&Value::Null);
    for (i, item) in message
        .get("tool_calls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let call = chat_call(item).ok_or_else(|| {
            WireError::new(
                format,
                format!("`tool_calls[{i}]` has no `id`, so its result could not be sent back"),
            )
        })?;
        turn.calls.push(call);
    }
    // The deprecated functions API: a call without an id, answered by a `function` message.
    if let Some(legacy) = message.get("function_call").filter(|f| !f.is_null()) {
        turn.unhandled.push(legacy.clone());
    }
    turn.stop = match choice.get("finish_reason").and_then(Value::as_str) {
        Some("tool_calls" | "stop" | "function_call") => Stop::Finished,
        Some("length") => Stop::truncated("length"),
        Some("content_filter") => Stop::filtered("content_filter"),
        Some(other) => Stop::unfinished(other),
        None => Stop::missing(),
    };
    let refused = message
        .get("refusal")
        .and_then(Value::as_str)
        .is_some_and(|r| !r.is_empty());
    if refused && turn.stop == Stop::Finished {
        turn.stop = Stop::refused("refusal");
    }
    Ok(turn)
}

/// A `tool_calls[]` item; one without a name is kept (it is answered as an unknown tool); one
/// without an id cannot be answered: `None`.
fn chat_call(item: &Value) -> Option<ToolCall> {
    let f = item.get("function").unwrap_or(&Value::Null);
    Some(ToolCall::new(
        str_of(item, "id")?,
        str_of(f, "name").unwrap_or_default(),
        str_of(f, "arguments").unwrap_or_default(),
    ))
}

/// Output item types that ask the application to act without being function calls.
const CLIENT_ITEMS: &[&str] = &[
    "computer_call",
    "local_shell_call",
    "shell_call",
    "apply_patch_call",
    "custom_tool_call",
    "mcp_approval_request",
];

/// Fields of a hosted tool item that hold what came of it (the rest is what it was given).
const RESULT_FIELDS: &[&str] = &["status", "outputs", "results", "result", "output", "error"];

/// A Responses API response: `function_call` items are calls, other `*_call` items are the
/// provider's own tools, `status` and `incomplete_details` say how it ended.
pub(super) fn responses(response: &Value) -> Result<Turn, WireError> {
    let format = WireFormat::OpenAiResponses;
    let output = response
        .get("output")
        .and_then(Value::as_array)
        .ok_or_else(|| WireError::new(format, "it has no `output` list"))?;
    let mut turn = Turn::new(format, response);
    let mut refused = false;
    for (i, item) in output.iter().enumerate() {
        match str_of(item, "type").unwrap_or_default() {
            "function_call" => {
                let id = str_of(item, "call_id").ok_or_else(|| {
                    WireError::new(
                        format,
                        format!("`output[{i}]` is a `function_call` without a `call_id`, so its result could not be sent back"),
                    )
                })?;
                turn.calls.push(ToolCall::new(
                    id,
                    str_of(item, "name").unwrap_or_default(),
                    str_of(item, "arguments").unwrap_or_default(),
                ));
            }
            "message" => {
                let parts = item.get("content").and_then(Value::as_array).into_iter().flatten();
                refused |= parts.into_iter().any(|p| str_of(p, "type") == Some("refusal"));
            }
            t if CLIENT_ITEMS.contains(&t) => turn.unhandled.push(item.clone()),
            t if t.ends_with("_call") => turn.provider_calls.push(hosted_call(t, item)),
            // Reasoning, MCP tool listings and anything else carry no call.
            _ => {}
        }
    }
    turn.stop = match str_of(response, "status") {
        Some("completed") if refused => Stop::refused("refusal"),
        Some("completed") => Stop::Finished,
        Some("incomplete") => match response.get("incomplete_details").and_then(|d| str_of(d, "reason")) {
            Some("max_output_tokens") => Stop::truncated("max_output_tokens"),
            Some("content_filter") => Stop::filtered("content_filter"),
            Some(other) => Stop::unfinished(other),
            None => Stop::unfinished("incomplete"),
        },
        Some(other) => Stop::unfinished(other),
        None => Stop::missing(),
    };
    Ok(turn)
}

/// A hosted tool's output item (`web_search_call`, `code_interpreter_call`, `mcp_call`, ...).
fn hosted_call(item_type: &str, item: &Value) -> ProviderCall {
    let name = match item_type {
        "mcp_call" => format!(
            "mcp.{}.{}",
            str_of(item, "server_label").unwrap_or("unknown"),
            str_of(item, "name").unwrap_or("unknown")
        ),
        t => t.trim_end_matches("_call").to_owned(),
    };
    // Still running (`in_progress`, `searching`, `interpreting`, `generating`): not a result.
    let ran = match str_of(item, "status") {
        None | Some("completed" | "failed" | "incomplete") => true,
        Some(_) => false,
    };
    let mut skip = vec!["id", "type"];
    skip.extend_from_slice(RESULT_FIELDS);
    ProviderCall {
        provider: "openai",
        id: str_of(item, "id").unwrap_or_default().to_owned(),
        name,
        input: trimmed(&without(item, &skip)),
        result: ran.then(|| trimmed(&only(item, RESULT_FIELDS))),
    }
}
