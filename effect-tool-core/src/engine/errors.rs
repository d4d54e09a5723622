//! The errors the engine makes for a call, one constructor each.

use serde_json::Value;

use super::report::{Disposition, Settled};
use crate::call::error::{EffectError, StoreError};
use crate::call::tool::Tool;
use crate::value::outcome::{Failure, Outcome};

/// The tool's own error, with the failure the policy saw in it.
pub(super) fn tool_error<T: Tool>(
    tool: &str,
    key: Option<&str>,
    outcome: Outcome,
    error: T::Error,
) -> EffectError<T::Error> {
    EffectError::Tool {
        tool: tool.to_owned(),
        key: key.map(str::to_owned),
        failure: outcome.effective_failure().unwrap_or(Failure::Unknown),
        error,
    }
}

/// `key` holds a record (or a running call) of `recorded_tool`, not of `T`.
pub(super) fn key_of_another_tool<T: Tool>(tool: &str, key: &str, recorded_tool: &str) -> EffectError<T::Error> {
    tracing::warn!(key, recorded_tool, "the key holds a record of another tool");
    EffectError::KeyOfAnotherTool {
        tool: tool.to_owned(),
        key: key.to_owned(),
        recorded_tool: recorded_tool.to_owned(),
    }
}

/// The journal failed (or refused) an operation the call needed.
pub(super) fn store_error<T: Tool>(tool: &str, source: StoreError) -> EffectError<T::Error> {
    EffectError::Store {
        tool: tool.to_owned(),
        source,
    }
}

/// A shared or recorded output decoded as `T`'s output type.
pub(super) fn decode_output<T: Tool>(tool: &str, key: &str, v: Value) -> Result<T::Output, EffectError<T::Error>> {
    serde_json::from_value(v).map_err(|e| codec_error::<T>(tool, key, e))
}

/// A recorded output that does not decode as `T`'s output type. The error is for people (its
/// message says how a person corrects the record, as `Blocked`'s does); the model reads the
/// dispatcher's own text for it (`ToolResult::content`), never this message. Logged too, for the
/// operator who watches the logs rather than the calls.
pub(super) fn codec_error<T: Tool>(tool: &str, key: &str, e: serde_json::Error) -> EffectError<T::Error> {
    let message = output_mismatch(key, &e);
    tracing::error!(tool, key, fix = %message, "a recorded output does not decode as the tool's output type");
    EffectError::Codec {
        tool: tool.to_owned(),
        key: key.to_owned(),
        message,
    }
}

/// What to say when the output recorded under `key` does not decode as the tool's output type:
/// how a person corrects a resolution of the wrong shape, and what else may have changed.
pub(crate) fn output_mismatch(key: &str, e: &serde_json::Error) -> String {
    format!(
        "the recorded output does not decode as this tool's output type: {e}. If a person resolved it with an output of the wrong shape (or as applied by mistake), correct it with {} (`StoreExt::amend` in code; `effect-tool show` shows the record); if the output type changed since it was recorded, use a new key or window",
        crate::value::commands::resolve_commands(key, true)
    )
}

/// The run was cancelled before the tool started.
pub(super) fn cancelled<T: Tool>(tool: &str, key: &str) -> Settled<T::Output, T::Error> {
    let err = EffectError::Cancelled {
        tool: tool.to_owned(),
        key: Some(key.to_owned()),
    };
    (Err(err), Disposition::Failed)
}

/// The engine is shutting down: the call stops before its tool starts.
pub(super) fn shutting_down<T: Tool>(tool: &str, key: &str) -> Settled<T::Output, T::Error> {
    let err = EffectError::ShuttingDown {
        tool: tool.to_owned(),
        key: Some(key.to_owned()),
    };
    (Err(err), Disposition::Failed)
}
