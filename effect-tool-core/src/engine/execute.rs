//! Running the tool's code (stage 4d): under its timeout, the run's cancellation and the
//! engine's shutdown deadline, a panic caught as an unknown outcome; and how a failure is put
//! to the policy.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::call::context::EffectCtx;
use crate::call::error::EffectError;
use crate::call::tool::Tool;
use crate::decide::policy::{Decision, PolicyInput, decide};
use crate::value::outcome::{ClassifyError, Failure, Outcome};

use super::lifecycle::Engine;
use super::ongoing::Call;

/// How the tool's code ended.
pub(super) enum Exec<O, E> {
    Done(Result<O, E>),
    /// Ended without an answer: timed out or panicked. The outcome is unknown.
    Unfinished(Unfinished),
    /// The run was cancelled, or the engine's shutdown deadline passed.
    Cancelled,
    /// The claim's lease lapsed: the tool was stopped (dropped) at an await point.
    Lapsed,
}

/// How an execution ended without an answer.
pub(super) enum Unfinished {
    TimedOut(Duration),
    Panicked(String),
}

impl Unfinished {
    /// What happened, for a record's reason.
    pub(super) fn reason(&self) -> String {
        match self {
            Unfinished::TimedOut(after) => format!("timed out after {after:?}"),
            Unfinished::Panicked(message) => format!("panicked: {message}"),
        }
    }

    /// The call's error for it.
    pub(super) fn into_error<E>(self, tool: &str, key: Option<&str>) -> EffectError<E> {
        let (tool, key) = (tool.to_owned(), key.map(str::to_owned));
        match self {
            Unfinished::TimedOut(after) => EffectError::TimedOut { tool, key, after },
            Unfinished::Panicked(message) => EffectError::Panicked { tool, key, message },
        }
    }
}

/// Stage 4d: run the tool's code once.
pub(super) async fn run_tool<T: Tool>(
    tool: &T,
    ctx: &EffectCtx,
    args: T::Args,
    abort: &CancellationToken,
) -> Exec<T::Output, T::Error> {
    use futures::FutureExt;
    // A panicking tool is an execution that ended without an answer: its effect may have
    // happened, so the policy treats it as an unknown outcome and the claim is never left
    // behind for others to wait on.
    let run = std::panic::AssertUnwindSafe(tool.call(ctx, args)).catch_unwind();
    let timed = async {
        let result = match T::TIMEOUT {
            Some(limit) => match tokio::time::timeout(limit, run).await {
                Ok(r) => r,
                Err(_) => return Exec::Unfinished(Unfinished::TimedOut(limit)),
            },
            None => run.await,
        };
        match result {
            Ok(r) => Exec::Done(r),
            Err(panic) => Exec::Unfinished(Unfinished::Panicked(panic_message(panic.as_ref()))),
        }
    };
    tokio::select! {
        biased;
        r = timed => r,
        _ = ctx.cancellation().cancelled() => Exec::Cancelled,
        _ = abort.cancelled() => Exec::Cancelled,
    }
}

/// An error text of the tool (or its hooks), called with `args`, as the journal and the logs
/// may hold it: the values of the `#[sensitive]` arguments cut out of it by value
/// ([`crate::call::key::scrub`]).
pub(super) fn error_text<T: Tool>(args: &T::Args, e: &dyn std::fmt::Display) -> String {
    let text = e.to_string();
    if T::SENSITIVE.is_empty() {
        return text;
    }
    match serde_json::to_value(args) {
        Ok(value) => crate::call::key::scrub(text, &value, T::SENSITIVE),
        // Arguments that do not serialize never reach a tool (the claim needs them).
        Err(_) => text,
    }
}

/// The message of a caught panic.
pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    match (panic.downcast_ref::<&str>(), panic.downcast_ref::<String>()) {
        (Some(s), _) => (*s).to_owned(),
        (_, Some(s)) => s.clone(),
        _ => "a non-string panic payload".to_owned(),
    }
}

/// The outcome the policy sees in the tool's error.
pub(super) fn classify<E: ClassifyError>(e: &E) -> Outcome {
    match e.failure() {
        Some(f) => Outcome::Failed(f),
        None => Outcome::Unclassified,
    }
}

/// What the policy decides on after execution `exec` of `T` ended with `outcome`, under the
/// tool's retry limits (`retry`, [`Tool::declared_retry`]).
pub(super) fn policy_input<T: Tool>(
    outcome: Outcome,
    exec: u32,
    retry: crate::decide::policy::RetryPolicy,
) -> PolicyInput {
    PolicyInput {
        class: T::CLASS,
        outcome,
        attempt: exec,
        retry,
        has_recover: T::HAS_RECOVER,
        abandoned: false,
        jitter: fastrand::f64(),
    }
}

/// Why a run that was stopped before it ended left its outcome unknown: the engine's shutdown
/// deadline (`abort` fired), or the run's own cancellation. The text a record in doubt keeps.
pub(super) fn interrupted_reason(abort: &CancellationToken) -> &'static str {
    if abort.is_cancelled() {
        "the engine's shutdown deadline passed while the tool was running: the outcome is unknown"
    } else {
        "cancelled while running: the outcome is unknown"
    }
}

impl Engine {
    /// The policy's decision after execution `exec` of `call` failed with `outcome`. A retry
    /// is spent from the run's retry budget (`attempt`: the journal attempt it follows); once
    /// the budget is spent, the call ends as its last permitted attempt would.
    pub(super) async fn decide_failure<T: Tool>(
        &self,
        call: &Call<'_, T>,
        outcome: Outcome,
        exec: u32,
        attempt: u32,
    ) -> Decision {
        let retry = call.tool.declared_retry();
        let decision = decide(policy_input::<T>(outcome, exec, retry));
        if !matches!(decision, Decision::Retry { .. })
            || self.spend_retry(call.name(), call.run, call.key, attempt).await
        {
            return decision;
        }
        match decide(policy_input::<T>(outcome, retry.max_attempts.max(exec), retry)) {
            Decision::Retry { .. } if outcome == Outcome::Failed(Failure::Unknown) => Decision::FailInDoubt,
            Decision::Retry { .. } => Decision::Fail,
            last => last,
        }
    }
}
