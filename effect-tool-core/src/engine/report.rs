//! What a call returns besides its result, and what a shutdown returns: the public report types.

use crate::call::error::EffectError;

/// How [`Engine::shutdown`](super::Engine::shutdown) ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Whether every call in flight finished before the deadline. `false`: the tools still
    /// running at the deadline were cancelled (their records are in doubt).
    pub drained: bool,
    /// How many calls were still in flight when the shutdown returned (0 unless a journal write
    /// of a cancelled call did not answer in time).
    pub left: usize,
}

/// What happened to a call, for callers that report it (the quickstart prints it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Disposition {
    /// The tool ran (a pure tool, or a new effect that was recorded).
    Executed,
    /// A recorded result was returned; nothing ran.
    Replayed,
    /// An identical call was running; its result was shared.
    Shared,
    /// The outcome of an earlier attempt was unknown; `recover` found the effect.
    Reconciled,
    /// The call was stopped with [`SideEffectRetryBlocked`](crate::call::error::SideEffectRetryBlocked).
    Blocked,
    /// The call waits for approval.
    AwaitingApproval,
    /// The call failed (see the error).
    Failed,
    /// The call was refused before anything ran or was journaled: malformed or too large
    /// arguments, an unknown tool, arguments that do not fit the schema. The model can fix it.
    Rejected,
}

impl Disposition {
    /// A word for the disposition (`executed`, `replayed`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Disposition::Executed => "executed",
            Disposition::Replayed => "replayed",
            Disposition::Shared => "shared",
            Disposition::Reconciled => "reconciled",
            Disposition::Blocked => "blocked",
            Disposition::AwaitingApproval => "awaiting-approval",
            Disposition::Failed => "failed",
            Disposition::Rejected => "rejected",
        }
    }
}

impl std::fmt::Display for Disposition {
    /// The name of [`Disposition::as_str`], honouring width and alignment (`{:<10}`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

/// The result of a call with what happened to it.
#[derive(Debug)]
pub struct CallReport<O, E> {
    /// The output or the error.
    pub result: Result<O, EffectError<E>>,
    /// What happened.
    pub disposition: Disposition,
    /// The effect key (`None` for pure tools).
    pub key: Option<String>,
    /// `Some` when the result was made for another input under the same key (a custom key
    /// maps both calls to one effect): this call did not run, and the result returned is the
    /// recorded (or shared) call's, disposition [`Disposition::Replayed`] or
    /// [`Disposition::Shared`]. It holds the paths of the fields whose (redacted) values differ
    /// between the two inputs (`amount_cents`, `to.name`, `lines[2]`), never a value; empty
    /// when the journal could not say which. `None` for every other call.
    pub input_differs: Option<Vec<String>>,
    /// `Some` when a person edited the arguments before approving the call
    /// ([`crate::StoreExt::approve_edited`]): the call ran with the edited arguments, not the
    /// ones given. The top-level fields the edit changed, never a value. `None` for every other
    /// call.
    pub edited: Option<Vec<String>>,
}

impl<O, E> CallReport<O, E> {
    /// Whether a person denied the call ([`EffectError::Denied`]): their reason is in the error,
    /// and [`crate::toolkit::ToolResult::content`] gives it to the model. The disposition of a
    /// denied call is [`Disposition::Failed`] (the enum is exhaustive, so no variant was added).
    pub fn denied(&self) -> bool {
        matches!(self.result, Err(EffectError::Denied { .. }))
    }
}

/// Per-call options.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallOptions {
    /// The model's tool-call id.
    pub call_id: Option<String>,
}

impl CallOptions {
    /// Options with a tool-call id.
    pub fn call_id(id: impl Into<String>) -> Self {
        CallOptions {
            call_id: Some(id.into()),
        }
    }
}

/// How a call ended: its result and what happened to it.
pub(crate) type Settled<O, E> = (Result<O, EffectError<E>>, Disposition);

/// The disposition of a result a call did not run for itself (a follower's shared result).
pub(crate) fn disposition_of<O, E>(r: &Result<O, EffectError<E>>) -> Disposition {
    match r {
        Ok(_) => Disposition::Executed,
        Err(EffectError::Blocked(_)) => Disposition::Blocked,
        Err(EffectError::ApprovalPending(_)) => Disposition::AwaitingApproval,
        Err(_) => Disposition::Failed,
    }
}

#[cfg(test)]
mod disposition_display {
    use super::Disposition;

    #[test]
    fn width_and_alignment_are_honoured() {
        assert_eq!(format!("{:<10}|", Disposition::Executed), "executed  |");
        assert_eq!(format!("{:>10}|", Disposition::Replayed), "  replayed|");
        assert_eq!(format!("{:.4}|", Disposition::Replayed), "repl|");
        assert_eq!(Disposition::Executed.to_string(), Disposition::Executed.as_str());
    }
}
