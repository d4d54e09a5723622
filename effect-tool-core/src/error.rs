//! The runtime's errors. Every effect error names the key and the tool, says what happened and
//! what a person can do next.

use std::fmt;

use crate::outcome::Failure;
use crate::record::Rejected;

/// Why a call was stopped instead of run again.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BlockReason {
    /// A previous attempt claimed the effect and never recorded an outcome (a crash between
    /// the effect and the record, or a lease that expired).
    InDoubtAfterCrash,
    /// The call failed with an unknown outcome (timeout after sending, unclassified error).
    UnknownOutcome,
    /// The record is in doubt, waiting for a person's verdict.
    AwaitingResolution,
    /// An irreversible tool without a key was called again with identical arguments under a
    /// new tool-call id: nothing can tell "the same work again" from "two on purpose".
    IdenticalReplan,
}

impl fmt::Display for BlockReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BlockReason::InDoubtAfterCrash => {
                "a previous attempt crashed or lost its lease between the effect and its record"
            }
            BlockReason::UnknownOutcome => "the call ended with an unknown outcome (the effect may have happened)",
            BlockReason::AwaitingResolution => "the effect is in doubt and waits for a person's verdict",
            BlockReason::IdenticalReplan => {
                "an irreversible tool without a key was called again with identical arguments under a new tool-call id"
            }
        })
    }
}

/// The call was not run because running it again might repeat an effect that cannot be
/// undone. A person decides: resolve the key as applied (with its output) or not applied, e.g.
/// `effect-tool resolve <key> --applied --output '<json>'` or `--not-applied`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, serde::Serialize, serde::Deserialize)]
#[error(
    "side effect retry blocked for tool `{tool}` (key `{key}`, run `{run_id}`): {reason}. Nothing was run. Check whether the effect happened, then resolve it: `effect-tool resolve '{key}' --applied --output '<json>'` or `--not-applied`"
)]
pub struct SideEffectRetryBlocked {
    /// The effect key.
    pub key: String,
    /// The tool.
    pub tool: String,
    /// The run of the blocked call.
    pub run_id: String,
    /// Why.
    pub reason: BlockReason,
}

/// The call waits for a person's approval; it runs once approved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, serde::Serialize, serde::Deserialize)]
#[error(
    "tool `{tool}` waits for approval by `{role}` (key `{key}`, run `{run_id}`): approve with `effect-tool approve '{key}' --as {role}` or deny with `effect-tool deny '{key}'`, then call again"
)]
pub struct ApprovalPending {
    /// The effect key.
    pub key: String,
    /// The tool.
    pub tool: String,
    /// The run.
    pub run_id: String,
    /// The role that must approve.
    pub role: String,
}

/// A store backend failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StoreError {
    /// The database or connection failed.
    #[error("journal store failed: {0}")]
    Backend(String),
    /// The operation was refused by the record's state (fencing, wrong role, unknown key).
    #[error(transparent)]
    Rejected(#[from] Rejected),
    /// A record was written by a newer version of effect-tool.
    #[error(
        "record `{key}` has schema version {found}, this effect-tool reads version {supported}: upgrade effect-tool to read it (the record was left untouched)"
    )]
    UnsupportedVersion {
        /// The key.
        key: String,
        /// The version found.
        found: u32,
        /// The version this build reads.
        supported: u32,
    },
    /// Stored data could not be read.
    #[error("record `{key}` is unreadable: {message}")]
    Corrupt {
        /// The key.
        key: String,
        /// What is wrong.
        message: String,
    },
}

impl StoreError {
    /// A backend failure from any displayable error.
    pub fn backend(err: impl fmt::Display) -> Self {
        StoreError::Backend(err.to_string())
    }

    /// The key the error concerns, when it concerns one record (not a failed connection).
    pub fn key(&self) -> Option<&str> {
        match self {
            StoreError::Backend(_) => None,
            StoreError::Rejected(r) => Some(r.key()),
            StoreError::UnsupportedVersion { key, .. } | StoreError::Corrupt { key, .. } => Some(key),
        }
    }
}

/// Why a call failed, as the runtime reports it. `E` is the tool's own error type.
#[derive(Debug, Clone, thiserror::Error)]
pub enum EffectError<E = crate::outcome::ToolError> {
    /// The tool ran and failed.
    #[error("tool `{tool}` failed ({failure}{key_note}): {error}; {next}", key_note = key.as_ref().map(|k| format!(", key `{k}`")).unwrap_or_default(), next = next_step(failure))]
    Tool {
        /// The tool.
        tool: String,
        /// The effect key, if journaled.
        key: Option<String>,
        /// How the failure counts.
        failure: Failure,
        /// The tool's error.
        error: E,
    },
    /// The call was stopped: a person must resolve the key.
    #[error(transparent)]
    Blocked(#[from] SideEffectRetryBlocked),
    /// The call waits for approval.
    #[error(transparent)]
    ApprovalPending(#[from] ApprovalPending),
    /// A person denied the call.
    #[error("tool `{tool}` was denied by {by} (key `{key}`){}; the decision stands: do not call it again unchanged, ask {by} or choose another action", reason.as_ref().map(|r| format!(": {r}")).unwrap_or_default())]
    Denied {
        /// The tool.
        tool: String,
        /// The key.
        key: String,
        /// Who denied it.
        by: String,
        /// Why.
        reason: Option<String>,
    },
    /// The arguments do not fit the tool's schema.
    #[error("invalid arguments for tool `{tool}`: {message}")]
    InvalidArguments {
        /// The tool.
        tool: String,
        /// What is wrong, for the model.
        message: String,
    },
    /// The key is recorded under a different input (a custom key that collides).
    #[error(
        "key `{key}` of tool `{tool}` is recorded under a different input (fingerprint {recorded}, this call {given}): the key rule maps two different calls to one effect; fix the key or use a new one"
    )]
    InputMismatch {
        /// The tool.
        tool: String,
        /// The key.
        key: String,
        /// The recorded fingerprint.
        recorded: String,
        /// This call's fingerprint.
        given: String,
    },
    /// The effect was undone when its run was abandoned.
    #[error(
        "the effect of tool `{tool}` (key `{key}`) was compensated (undone) when its run was abandoned; start a new run to apply it again"
    )]
    Compensated {
        /// The tool.
        tool: String,
        /// The key.
        key: String,
    },
    /// The tool ran past its timeout: the outcome is unknown.
    #[error("tool `{tool}` timed out after {after:?}{}: the effect may have happened; {}", key.as_ref().map(|k| format!(" (key `{k}`)")).unwrap_or_default(), next_step(&Failure::Unknown))]
    TimedOut {
        /// The tool.
        tool: String,
        /// The effect key, if journaled.
        key: Option<String>,
        /// The timeout.
        after: std::time::Duration,
    },
    /// The tool panicked: the outcome is unknown (handled like a timeout).
    #[error("tool `{tool}` panicked{}: {message}; the effect may have happened; {}", key.as_ref().map(|k| format!(" (key `{k}`)")).unwrap_or_default(), next_step(&Failure::Unknown))]
    Panicked {
        /// The tool.
        tool: String,
        /// The effect key, if journaled.
        key: Option<String>,
        /// The panic message.
        message: String,
    },
    /// The run was cancelled while the tool was running: the outcome is unknown and the record
    /// is in doubt.
    #[error(
        "tool `{tool}` was cancelled while running (key `{key}`): the effect may have happened; the record is in doubt until the next call reconciles it or a person resolves it"
    )]
    Interrupted {
        /// The tool.
        tool: String,
        /// The key.
        key: String,
    },
    /// An identical call running at the same time failed; this call shared its outcome.
    #[error("tool `{tool}` failed ({failure}, key `{key}`) in an identical call running at the same time: {message}; {next}", next = next_step(failure))]
    SharedFailure {
        /// The tool.
        tool: String,
        /// The key.
        key: String,
        /// How the failure counts.
        failure: Failure,
        /// The error's message.
        message: String,
    },
    /// The run was cancelled before the tool started.
    #[error(
        "tool `{tool}` was not run{}: the run was cancelled; nothing happened: call it again in a run that is not cancelled",
        key.as_ref().map(|k| format!(" (key `{k}`)")).unwrap_or_default()
    )]
    Cancelled {
        /// The tool.
        tool: String,
        /// The effect key, if journaled (a pure tool has none).
        key: Option<String>,
    },
    /// The journal failed before the effect ran (nothing happened). The key, where the store
    /// knows it, is in the store's error.
    #[error(
        "tool `{tool}` was not run: {source}; nothing happened: check the journal (its path or URL, the disk, the connection) and call again"
    )]
    Store {
        /// The tool.
        tool: String,
        /// The store's error.
        source: StoreError,
    },
    /// The tool takes a value from the run (a `#[secret]` argument) that the run does not hold;
    /// nothing ran.
    #[error(
        "tool `{tool}` takes a `{type_name}` from the run, and this run holds none, so nothing ran: the application gives it with `RunContext::with_value(...)` on the run of the call (for `abandon_run`, on the run passed to it)"
    )]
    MissingValue {
        /// The tool.
        tool: String,
        /// The type of the missing value.
        type_name: String,
    },
    /// The output could not be encoded or a recorded output could not be decoded.
    #[error("tool `{tool}` (key `{key}`): {message}")]
    Codec {
        /// The tool.
        tool: String,
        /// The key.
        key: String,
        /// What failed.
        message: String,
    },
}

/// What a person or a model can do after a failure of this kind.
fn next_step(failure: &Failure) -> &'static str {
    match failure {
        Failure::Definitive => "nothing happened: change the request before calling again",
        Failure::Transient { .. } => "nothing happened: calling again later is safe",
        Failure::Unknown => {
            "the next call reconciles it (`recover`), re-runs it with the same key (idempotent tools) or stops until a person resolves it (`effect-tool resolve`)"
        }
    }
}

impl<E> EffectError<E> {
    /// Convert the tool's error type (e.g. to a string for a model).
    pub fn map_tool_error<F>(self, f: impl FnOnce(E) -> F) -> EffectError<F> {
        use EffectError::*;
        match self {
            Tool {
                tool,
                key,
                failure,
                error,
            } => Tool {
                tool,
                key,
                failure,
                error: f(error),
            },
            Blocked(b) => Blocked(b),
            ApprovalPending(a) => ApprovalPending(a),
            Denied { tool, key, by, reason } => Denied { tool, key, by, reason },
            InvalidArguments { tool, message } => InvalidArguments { tool, message },
            InputMismatch {
                tool,
                key,
                recorded,
                given,
            } => InputMismatch {
                tool,
                key,
                recorded,
                given,
            },
            Compensated { tool, key } => Compensated { tool, key },
            Cancelled { tool, key } => Cancelled { tool, key },
            TimedOut { tool, key, after } => TimedOut { tool, key, after },
            Panicked { tool, key, message } => Panicked { tool, key, message },
            Interrupted { tool, key } => Interrupted { tool, key },
            SharedFailure {
                tool,
                key,
                failure,
                message,
            } => SharedFailure {
                tool,
                key,
                failure,
                message,
            },
            Store { tool, source } => Store { tool, source },
            Codec { tool, key, message } => Codec { tool, key, message },
            MissingValue { tool, type_name } => MissingValue { tool, type_name },
        }
    }

    /// The blocked error, if this is one.
    pub fn as_blocked(&self) -> Option<&SideEffectRetryBlocked> {
        match self {
            EffectError::Blocked(b) => Some(b),
            _ => None,
        }
    }

    /// The pending approval, if this is one.
    pub fn as_approval_pending(&self) -> Option<&ApprovalPending> {
        match self {
            EffectError::ApprovalPending(a) => Some(a),
            _ => None,
        }
    }

    /// The effect key the error concerns, if any.
    pub fn key(&self) -> Option<&str> {
        use EffectError::*;
        match self {
            Tool { key, .. } | TimedOut { key, .. } | Panicked { key, .. } | Cancelled { key, .. } => key.as_deref(),
            Interrupted { key, .. } | SharedFailure { key, .. } => Some(key),
            Blocked(b) => Some(&b.key),
            ApprovalPending(a) => Some(&a.key),
            Denied { key, .. } | InputMismatch { key, .. } | Compensated { key, .. } | Codec { key, .. } => Some(key),
            Store { source, .. } => source.key(),
            InvalidArguments { .. } | MissingValue { .. } => None,
        }
    }
}
