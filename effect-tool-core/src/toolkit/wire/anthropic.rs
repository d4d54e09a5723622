//! Anthropic's Messages format.

use serde_json::Value;

use super::{ProviderCall, Turn, WireError, WireFormat, str_of, trimmed};
use crate::toolkit::dispatch::{Stop, ToolCall};

/// A Messages response: `tool_use` blocks are calls; `server_tool_use` and `mcp_tool_use`
/// blocks are the provider's own, paired with their result blocks by `tool_use_id`.
pub(super) fn message(response: &Value) -> Result<Turn, WireError> {
    let format = WireFormat::Anthropic;
    let content = response
        .get("content")
        .and_then(Value::as_array)
        .ok_or_else(|| WireError::new(format, "it has no `content` list"))?;
    let mut turn = Turn::new(format, response);
    for (i, block) in content.iter().enumerate() {
        match str_of(block, "type").unwrap_or_default() {
            "tool_use" => {
                let id = str_of(block, "id").ok_or_else(|| {
                    WireError::new(
                        format,
                        format!("`content[{i}]` is a `tool_use` without an `id`, so its result could not be sent back"),
                    )
                })?;
                turn.calls.push(ToolCall::new(
                    id,
                    str_of(block, "name").unwrap_or_default(),
                    block.get("input").map(Value::to_string).unwrap_or_default(),
                ));
            }
            "server_tool_use" => turn
                .provider_calls
                .push(hosted_use(block, str_of(block, "name").unwrap_or("unknown").to_owned())),
            "mcp_tool_use" => {
                let name = format!(
                    "mcp.{}.{}",
                    str_of(block, "server_name").unwrap_or("unknown"),
                    str_of(block, "name").unwrap_or("unknown")
                );
                turn.provider_calls.push(hosted_use(block, name));
            }
            t if t.ends_with("_tool_result") && t != "tool_result" => attach_result(&mut turn.provider_calls, t, block),
            _ => {}
        }
    }
    turn.stop = match str_of(response, "stop_reason") {
        Some("tool_use" | "end_turn" | "stop_sequence") => Stop::Finished,
        Some(r @ ("max_tokens" | "model_context_window_exceeded")) => Stop::truncated(r),
        Some("refusal") => Stop::refused("refusal"),
        Some(other) => Stop::unfinished(other),
        None => Stop::missing(),
    };
    Ok(turn)
}

/// A `server_tool_use` or `mcp_tool_use` block: not run until its result block is seen.
fn hosted_use(block: &Value, name: String) -> ProviderCall {
    ProviderCall {
        provider: "anthropic",
        id: str_of(block, "id").unwrap_or_default().to_owned(),
        name,
        input: trimmed(block.get("input").unwrap_or(&Value::Null)),
        result: None,
    }
}

/// A result block (`web_search_tool_result`, `mcp_tool_result`, ...): the result of the use
/// block with its `tool_use_id`, or of a call whose use block came in an earlier response.
fn attach_result(calls: &mut Vec<ProviderCall>, block_type: &str, block: &Value) {
    let id = str_of(block, "tool_use_id").unwrap_or_default();
    let mut result = block.clone();
    if let Some(fields) = result.as_object_mut() {
        fields.remove("tool_use_id");
    }
    let result = trimmed(&result);
    match calls.iter_mut().find(|c| c.id == id) {
        Some(call) => call.result = Some(result),
        None => calls.push(ProviderCall {
            provider: "anthropic",
            id: id.to_owned(),
            name: block_type.trim_end_matches("_tool_result").to_owned(),
            input: Value::Null,
            result: Some(result),
        }),
    }
}
