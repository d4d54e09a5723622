//! The runtime's errors. Every effect error names the key and the tool, says what happened and
//! what a person can do next.

use std::fmt;

use crate::decide::record::Rejected;
use crate::value::outcome::Failure;

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
    /// The record was in doubt (an earlier attempt's outcome is unknown) and checking whether
    /// the effect happened (the tool's `recover` hook) failed, timed out or panicked: the
    /// effect may have happened. The record stays in doubt; an identical call asks `recover`
    /// again.
    RecoverFailed,
    /// The effect was started and waits for its provider's callback (the record is pending,
    /// before its deadline): nothing is wrong yet. Calling again later returns the provider's
    /// answer once it has come.
    AwaitingCallback,
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
            BlockReason::RecoverFailed => {
                "an earlier attempt's outcome is unknown, and checking whether its effect happened (`recover`) failed, so it may have happened"
            }
            BlockReason::AwaitingCallback => {
                "the effect was started and is still pending: it waits for its provider's callback"
            }
        })
    }
}

/// The call was not run because running it again might repeat an effect that cannot be
/// undone. A person decides: resolve the key as applied (with its output) or not applied, e.g.
/// `effect-tool resolve <key> --applied --output '<json>'` or `--not-applied`.
///
/// An identical re-plan ([`BlockReason::IdenticalReplan`]) is the exception: the earlier call's
/// record stands and nothing waits for a person; its message says what the caller may do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, serde::Serialize, serde::Deserialize)]
#[error("{}", blocked_message(self))]
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

/// The text of a [`SideEffectRetryBlocked`].
fn blocked_message(b: &SideEffectRetryBlocked) -> String {
    let SideEffectRetryBlocked {
        key,
        tool,
        run_id,
        reason,
    } = b;
    match reason {
        BlockReason::IdenticalReplan => format!(
            "side effect retry blocked for tool `{tool}` (key `{key}`, run `{run_id}`): {reason}. Nothing was run, and nothing waits for a person: an identical earlier call ran it (or is running it), and its record stands. The tool cannot be undone and has no key, so nothing can tell the same work again from a second one on purpose. Use the earlier call's result; if a second, separate one is intended, call it with arguments that say how it differs"
        ),
        BlockReason::RecoverFailed => format!(
            "side effect retry blocked for tool `{tool}` (key `{key}`, run `{run_id}`): {reason}. Nothing was run, and the record stays in doubt (`effect-tool show {quoted}` shows why `recover` failed). An identical call asks `recover` again; or check whether the effect happened, then resolve it: `effect-tool resolve {quoted} --applied --output '<json>'` or `--not-applied`",
            quoted = crate::value::shell::quote(key)
        ),
        BlockReason::AwaitingCallback => format!(
            "tool `{tool}` is still pending (key `{key}`, run `{run_id}`): {reason}. Nothing was run again, and nothing is wrong yet: call again later for the provider's answer (`effect-tool show {quoted}` shows its deadline); past the deadline the record is in doubt",
            quoted = crate::value::shell::quote(key)
        ),
        _ => format!(
            "side effect retry blocked for tool `{tool}` (key `{key}`, run `{run_id}`): {reason}. Nothing was run. Check whether the effect happened, then resolve it: `effect-tool resolve {quoted} --applied --output '<json>'` or `--not-applied`",
            quoted = crate::value::shell::quote(key)
        ),
    }
}

/// The call waits for a person's approval; it runs once approved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, serde::Serialize, serde::Deserialize)]
#[error(
    "tool `{tool}` waits for approval by `{role}` (key `{key}`, run `{run_id}`): approve with `effect-tool approve {quoted} --as {quoted_role}` (it prints the input waiting; add `--fingerprint` with the one you checked) or deny with `effect-tool deny {quoted}`, then call again",
    quoted = crate::value::shell::quote(.key),
    quoted_role = crate::value::shell::quote(.role)
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

/// A tool's check before its effect failed ([`crate::EffectCtx::ensure_lease`]): this attempt's
/// lease on the key has lapsed by the engine's clock (the process was paused, or could not renew
/// it), so another attempt may own the key now. Do not apply the effect: return an error from the
/// tool; the engine records nothing for this attempt, and the call returns
/// [`EffectError::ClaimLost`] (the same loss, as the caller sees it; audited as `claim-lost`,
/// counted by `effect_tool_claims_lost_total`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "attempt {attempt} of tool `{tool}` lost its claim on key `{key}`: its lease lapsed (the process was paused or could not renew it) and another attempt may own the key; the effect must not be applied by this attempt"
)]
pub struct ClaimLost {
    /// The tool.
    pub tool: String,
    /// The effect key.
    pub key: String,
    /// The attempt that lost its claim.
    pub attempt: u32,
}

/// The old name of [`ClaimLost`] (one name for an attempt that lost its claim).
#[deprecated(note = "renamed `ClaimLost` (effect_tool::call::error::ClaimLost)")]
pub type LeaseLost = ClaimLost;

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
        "record `{key}` has record version {found}, this effect-tool reads versions up to {supported}: upgrade effect-tool to read it (the record was left untouched)"
    )]
    UnsupportedVersion {
        /// The key.
        key: String,
        /// The version found.
        found: u32,
        /// The newest version this build reads ([`crate::decide::record::RECORD_VERSION`]).
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
pub enum EffectError<E = crate::value::outcome::ToolError> {
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
    /// The key is held by a record of another tool: the key rules of two tools map their calls
    /// to one key. Nothing ran, and the other tool's record was not touched (never replayed,
    /// taken over or joined).
    #[error(
        "tool `{tool}` was not run: key `{key}` holds a record of another tool, `{recorded_tool}`. The key rules of `{tool}` and `{recorded_tool}` map calls of both tools to one key, and a key names one effect of one tool; give each tool keys of its own (for example, start each custom key with its tool's name)"
    )]
    KeyOfAnotherTool {
        /// The tool called.
        tool: String,
        /// The key.
        key: String,
        /// The tool whose record holds the key.
        recorded_tool: String,
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
    /// This call's attempt lost its claim on the key: its lease lapsed by the engine's clock
    /// (the process was paused, or could not renew it) and the tool was stopped, or the journal
    /// refused its completion (fenced) because another attempt owns the key now. Its own
    /// output, if it had one, is not recorded and is not returned.
    #[error(
        "tool `{tool}` (key `{key}`): attempt {attempt} lost its claim, {how}; {owner}. {next}",
        how = if *finished { "so the journal refused to record its result (the effect of this attempt happened but is not recorded)" } else { "so it was stopped before it finished (its effect may or may not have happened)" },
        owner = match (current, recorded) {
            (Some(c), Some(_)) => format!("attempt {c} owns the key and recorded its result (carried in this error)"),
            (Some(c), None) => format!("attempt {c} owns the key now"),
            (None, _) => "another attempt may own the key now".to_owned(),
        },
        next = if recorded.is_some() { "Use the recorded result, or call again to get it" } else { "Call again: the call waits for the attempt that owns the key and returns its result, reconciles it (`recover`), or stops until a person resolves it (`effect-tool show` shows the record)" }
    )]
    ClaimLost {
        /// The tool.
        tool: String,
        /// The key.
        key: String,
        /// The attempt that lost its claim.
        attempt: u32,
        /// Whether its tool finished (its result was refused by the journal); `false`: the
        /// tool was stopped when the lease lapsed.
        finished: bool,
        /// The attempt that owns the key now, if the journal could say.
        current: Option<u32>,
        /// The result the owning attempt recorded (JSON), if the record is completed (boxed:
        /// every error of every call carries this variant's size).
        recorded: Option<Box<serde_json::Value>>,
    },
    /// The engine is shutting down ([`crate::Engine::shutdown`]): the call was refused, or it
    /// stopped before its tool started (its claim released).
    #[error(
        "tool `{tool}` was not run{}: the engine is shutting down; nothing happened: call it again on an engine that is running (another worker, or this one after its restart)",
        key.as_ref().map(|k| format!(" (key `{k}`)")).unwrap_or_default()
    )]
    ShuttingDown {
        /// The tool.
        tool: String,
        /// The effect key, if the call got that far.
        key: Option<String>,
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
    /// A budget of the run ([`crate::call::budget::Budgets`]) refuses the call: nothing ran,
    /// nothing was charged, and the journal holds no record of it.
    #[error(
        "tool `{tool}` was not run: the {} has {} left, this call asks {}; nothing happened: do not call it again in this run unchanged (ask for less, or end the run; a person can start a new run or raise the budget)",
        crate::call::budget::describe(&overdraft.budget),
        crate::call::budget::grouped(overdraft.left()),
        crate::call::budget::grouped(overdraft.asks)
    )]
    BudgetExceeded {
        /// The tool.
        tool: String,
        /// The effect key the call would have had, if the call got that far.
        key: Option<String>,
        /// The budget, its limit, what the run spent and what the call asks.
        overdraft: crate::decide::budget::Overdraft,
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

impl<E> EffectError<E> {
    /// The variant's name (`Blocked`, `Tool`, `Store`, ...): the span's `error.type` and the
    /// events' [`crate::engine::CallEvent::error`].
    pub fn kind(&self) -> &'static str {
        match self {
            EffectError::Tool { .. } => "Tool",
            EffectError::Blocked(_) => "Blocked",
            EffectError::ApprovalPending(_) => "ApprovalPending",
            EffectError::Denied { .. } => "Denied",
            EffectError::InvalidArguments { .. } => "InvalidArguments",
            EffectError::InputMismatch { .. } => "InputMismatch",
            EffectError::KeyOfAnotherTool { .. } => "KeyOfAnotherTool",
            EffectError::Compensated { .. } => "Compensated",
            EffectError::TimedOut { .. } => "TimedOut",
            EffectError::Panicked { .. } => "Panicked",
            EffectError::Interrupted { .. } => "Interrupted",
            EffectError::SharedFailure { .. } => "SharedFailure",
            EffectError::Cancelled { .. } => "Cancelled",
            EffectError::Store { .. } => "Store",
            EffectError::ClaimLost { .. } => "ClaimLost",
            EffectError::ShuttingDown { .. } => "ShuttingDown",
            EffectError::MissingValue { .. } => "MissingValue",
            EffectError::Codec { .. } => "Codec",
            EffectError::BudgetExceeded { .. } => "BudgetExceeded",
        }
    }
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

/// One match over every variant of [`EffectError`], written once for [`EffectError::map_tool_error`]
/// (`$own` is `identity`: fields move) and [`EffectError::map_tool_error_ref`] (`$own` is
/// `Clone::clone`: fields are copied): only the tool's error is converted, by `$f`.
macro_rules! map_each_variant {
    ($error:expr, $own:path, $f:expr) => {{
        use EffectError::*;
        match $error {
            Tool {
                tool,
                key,
                failure,
                error,
            } => Tool {
                tool: $own(tool),
                key: $own(key),
                failure: $own(failure),
                error: $f(error),
            },
            Blocked(b) => Blocked($own(b)),
            ApprovalPending(a) => ApprovalPending($own(a)),
            Denied { tool, key, by, reason } => Denied {
                tool: $own(tool),
                key: $own(key),
                by: $own(by),
                reason: $own(reason),
            },
            InvalidArguments { tool, message } => InvalidArguments {
                tool: $own(tool),
                message: $own(message),
            },
            InputMismatch {
                tool,
                key,
                recorded,
                given,
            } => InputMismatch {
                tool: $own(tool),
                key: $own(key),
                recorded: $own(recorded),
                given: $own(given),
            },
            Compensated { tool, key } => Compensated {
                tool: $own(tool),
                key: $own(key),
            },
            KeyOfAnotherTool {
                tool,
                key,
                recorded_tool,
            } => KeyOfAnotherTool {
                tool: $own(tool),
                key: $own(key),
                recorded_tool: $own(recorded_tool),
            },
            Cancelled { tool, key } => Cancelled {
                tool: $own(tool),
                key: $own(key),
            },
            TimedOut { tool, key, after } => TimedOut {
                tool: $own(tool),
                key: $own(key),
                after: $own(after),
            },
            Panicked { tool, key, message } => Panicked {
                tool: $own(tool),
                key: $own(key),
                message: $own(message),
            },
            Interrupted { tool, key } => Interrupted {
                tool: $own(tool),
                key: $own(key),
            },
            SharedFailure {
                tool,
                key,
                failure,
                message,
            } => SharedFailure {
                tool: $own(tool),
                key: $own(key),
                failure: $own(failure),
                message: $own(message),
            },
            Store { tool, source } => Store {
                tool: $own(tool),
                source: $own(source),
            },
            Codec { tool, key, message } => Codec {
                tool: $own(tool),
                key: $own(key),
                message: $own(message),
            },
            BudgetExceeded { tool, key, overdraft } => BudgetExceeded {
                tool: $own(tool),
                key: $own(key),
                overdraft: $own(overdraft),
            },
            ClaimLost {
                tool,
                key,
                attempt,
                finished,
                current,
                recorded,
            } => ClaimLost {
                tool: $own(tool),
                key: $own(key),
                attempt: $own(attempt),
                finished: $own(finished),
                current: $own(current),
                recorded: $own(recorded),
            },
            ShuttingDown { tool, key } => ShuttingDown {
                tool: $own(tool),
                key: $own(key),
            },
            MissingValue { tool, type_name } => MissingValue {
                tool: $own(tool),
                type_name: $own(type_name),
            },
        }
    }};
}

impl<E> EffectError<E> {
    /// Convert the tool's error type (e.g. to a string for a model).
    pub fn map_tool_error<F>(self, f: impl FnOnce(E) -> F) -> EffectError<F> {
        map_each_variant!(self, std::convert::identity, f)
    }

    /// [`EffectError::map_tool_error`] of a borrowed error: every other field is cloned (the
    /// tool's own error type need not be). The engine shares a leading call's error this way.
    pub(crate) fn map_tool_error_ref<F>(&self, f: impl FnOnce(&E) -> F) -> EffectError<F> {
        map_each_variant!(self, Clone::clone, f)
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
            Tool { key, .. }
            | TimedOut { key, .. }
            | Panicked { key, .. }
            | Cancelled { key, .. }
            | ShuttingDown { key, .. }
            | BudgetExceeded { key, .. } => key.as_deref(),
            Interrupted { key, .. } | SharedFailure { key, .. } | ClaimLost { key, .. } => Some(key),
            Blocked(b) => Some(&b.key),
            ApprovalPending(a) => Some(&a.key),
            Denied { key, .. }
            | InputMismatch { key, .. }
            | KeyOfAnotherTool { key, .. }
            | Compensated { key, .. }
            | Codec { key, .. } => Some(key),
            Store { source, .. } => source.key(),
            InvalidArguments { .. } | MissingValue { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A key or role an application chose (a custom key closure can put anything in it) is
    /// quoted in the commands a message offers, so that the pasted command acts on that key.
    #[test]
    #[allow(deprecated)]
    fn the_old_name_of_claim_lost_still_names_it() {
        let lost: LeaseLost = ClaimLost {
            tool: "post".into(),
            key: "k".into(),
            attempt: 1,
        };
        assert!(
            lost.to_string()
                .contains("attempt 1 of tool `post` lost its claim on key `k`")
        );
    }

    #[test]
    fn commands_in_messages_are_shell_quoted() {
        let key = "run 1:it's:$(rm -rf x)".to_owned();
        let blocked = SideEffectRetryBlocked {
            key: key.clone(),
            tool: "send".into(),
            run_id: "run 1".into(),
            reason: BlockReason::UnknownOutcome,
        };
        let quoted = crate::value::shell::quote(&key);
        assert_eq!(quoted, r"'run 1:it'\''s:$(rm -rf x)'");
        assert!(
            blocked
                .to_string()
                .contains(&format!("`effect-tool resolve {quoted} --applied")),
            "{blocked}"
        );
        let pending = ApprovalPending {
            key: key.clone(),
            tool: "pay".into(),
            run_id: "run 1".into(),
            role: "support lead".into(),
        };
        let text = pending.to_string();
        assert!(
            text.contains(&format!("`effect-tool approve {quoted} --as 'support lead'`")),
            "{text}"
        );
        assert!(text.contains(&format!("`effect-tool deny {quoted}`")), "{text}");
    }
}
