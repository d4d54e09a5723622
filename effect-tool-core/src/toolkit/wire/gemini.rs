//! Gemini's `generateContent` format.

use serde_json::{Value, json};

use super::{ProviderCall, Turn, WireError, WireFormat, derived_id, str_of, trimmed};
use crate::toolkit::dispatch::{Stop, ToolCall};

/// A `generateContent` response: the first candidate's `functionCall` parts are calls;
/// `executableCode` and `codeExecutionResult` parts, Google Search grounding and URL context
/// are the provider's own tools; `finishReason` (or a prompt blocked before any candidate)
/// says how it ended.
pub(super) fn response(response: &Value) -> Result<Turn, WireError> {
    let format = WireFormat::Gemini;
    if !response.is_object() {
        return Err(WireError::new(format, "it is not a JSON object"));
    }
    let mut turn = Turn::new(format, response);
    let Some(candidate) = response
        .get("candidates")
        .and_then(Value::as_array)
        .and_then(|c| c.first())
    else {
        // No candidate: the prompt itself was blocked, or this is not a response at all.
        let blocked = response.get("promptFeedback").and_then(|f| str_of(f, "blockReason"));
        return match blocked {
            Some(reason) => {
                turn.stop = Stop::filtered(reason);
                Ok(turn)
            }
            None => Err(WireError::new(
                format,
                "it has no `candidates` and no `promptFeedback.blockReason`",
            )),
        };
    };
    let response_id = turn.response_id.clone();
    let parts = candidate
        .get("content")
        .and_then(|c| c.get("parts"))
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let mut code_runs = 0;
    for part in parts {
        if let Some(call) = gemini_call(part, response_id.as_deref(), turn.calls.len()) {
            turn.calls.push(call);
        } else if let Some(code) = part.get("executableCode") {
            let id = match str_of(code, "id") {
                Some(id) => id.to_owned(),
                None => derived_id(
                    response_id.as_deref(),
                    "executableCode",
                    code_runs,
                    "code_execution",
                    code,
                ),
            };
            code_runs += 1;
            turn.provider_calls.push(ProviderCall {
                provider: "gemini",
                id,
                name: "code_execution".to_owned(),
                input: trimmed(code),
                result: None,
            });
        } else if let Some(result) = part.get("codeExecutionResult") {
            // Its `id` when it has one, else the latest code part still without a result.
            let call = match str_of(result, "id") {
                Some(id) => turn.provider_calls.iter_mut().find(|c| c.id == id),
                None => turn
                    .provider_calls
                    .iter_mut()
                    .rev()
                    .find(|c| c.name == "code_execution" && c.result.is_none()),
            };
            if let Some(call) = call {
                call.result = Some(trimmed(result));
            }
        }
    }
    grounding(candidate, response_id.as_deref(), &mut turn.provider_calls);
    turn.stop = match str_of(candidate, "finishReason") {
        Some("STOP") => Stop::Finished,
        Some("MAX_TOKENS") => Stop::truncated("MAX_TOKENS"),
        Some(
            r @ ("SAFETY"
            | "RECITATION"
            | "LANGUAGE"
            | "BLOCKLIST"
            | "PROHIBITED_CONTENT"
            | "SPII"
            | "IMAGE_SAFETY"
            | "IMAGE_PROHIBITED_CONTENT"
            | "IMAGE_RECITATION"),
        ) => Stop::filtered(r),
        Some(other) => Stop::unfinished(other),
        None => Stop::missing(),
    };
    Ok(turn)
}

/// A `functionCall` part as a call, its id derived when it has none ([`super::derived_id`]).
pub(crate) fn gemini_call(part: &Value, response_id: Option<&str>, index: usize) -> Option<ToolCall> {
    let call = part.get("functionCall")?;
    let name = str_of(call, "name").unwrap_or_default();
    let args = call.get("args").cloned().unwrap_or(Value::Null);
    let id = match str_of(call, "id") {
        Some(id) if !id.is_empty() => id.to_owned(),
        _ => derived_id(response_id, "functionCall", index, name, &args),
    };
    let arguments = if args.is_null() {
        String::new()
    } else {
        args.to_string()
    };
    Some(ToolCall::new(id, name, arguments))
}

/// Google Search grounding (`groundingMetadata.webSearchQueries`) and URL context
/// (`urlContextMetadata.urlMetadata`): searches and fetches the provider made for this
/// candidate.
fn grounding(candidate: &Value, response_id: Option<&str>, calls: &mut Vec<ProviderCall>) {
    if let Some(meta) = candidate.get("groundingMetadata")
        && let Some(queries) = meta.get("webSearchQueries").and_then(Value::as_array)
        && !queries.is_empty()
    {
        let input = json!({"queries": queries});
        let sources: Vec<Value> = meta
            .get("groundingChunks")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|c| c.get("web").cloned())
            .collect();
        calls.push(ProviderCall {
            provider: "gemini",
            id: derived_id(response_id, "groundingMetadata", 0, "google_search", &input),
            name: "google_search".to_owned(),
            input: trimmed(&input),
            result: Some(trimmed(&json!({"sources": sources}))),
        });
    }
    if let Some(urls) = candidate
        .get("urlContextMetadata")
        .and_then(|m| m.get("urlMetadata"))
        .and_then(Value::as_array)
        && !urls.is_empty()
    {
        let input = json!({"urls": urls.iter().filter_map(|u| u.get("retrievedUrl")).collect::<Vec<_>>()});
        calls.push(ProviderCall {
            provider: "gemini",
            id: derived_id(response_id, "urlContextMetadata", 0, "url_context", &input),
            name: "url_context".to_owned(),
            input: trimmed(&input),
            result: Some(trimmed(&json!({"urlMetadata": urls}))),
        });
    }
}
