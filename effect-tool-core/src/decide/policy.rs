//! The policy engine: a pure function from (class, outcome, attempt, overrides) to a decision.
//!
//! Classification (what happened, [`crate::Outcome`]) stays apart from policy (what to do
//! about it). The whole table is in [`decide`] and tested exhaustively.

use std::time::Duration;

use crate::value::class::EffectClass;
use crate::value::outcome::{Failure, Outcome};

/// Retry limits of a tool: the class's defaults, overridable with `retry(...)` in the
/// declaration. Overrides never widen what the class allows (an irreversible unknown outcome
/// is never retried, whatever the limits).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Executions at most per call, the first included (1 = never retry).
    pub max_attempts: u32,
    /// Delay before the first retry; doubled each retry.
    pub base_delay: Duration,
    /// The longest delay between two attempts, a `retry_after` from the tool included.
    pub max_delay: Duration,
}

impl RetryPolicy {
    /// Three attempts, 100 ms doubling up to 10 s.
    pub const DEFAULT: RetryPolicy = RetryPolicy {
        max_attempts: 3,
        base_delay: Duration::from_millis(100),
        max_delay: Duration::from_secs(10),
    };

    /// Never retry.
    pub const NONE: RetryPolicy = RetryPolicy {
        max_attempts: 1,
        ..RetryPolicy::DEFAULT
    };
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy::DEFAULT
    }
}

/// What the engine does after an execution.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Record the output (non-pure) and return it.
    Complete,
    /// Release the claim (nothing happened) and run again after the delay, with the same key.
    Retry {
        /// How long to wait first.
        after: Duration,
    },
    /// Release the claim (nothing happened) and return the error: a later call may apply.
    Fail,
    /// The effect may have landed: ask the tool's `recover` hook before anything else.
    Reconcile,
    /// The effect may have landed and nothing can tell: mark the record in doubt and stop with
    /// `SideEffectRetryBlocked` until a person resolves it.
    Block,
    /// Mark the record in doubt and return the error; the next call may run again with the
    /// same key (idempotent tools only).
    FailInDoubt,
    /// Undo the effect with the tool's compensation (compensable tools of an abandoned run).
    Compensate,
}

/// Everything [`decide`] looks at.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PolicyInput {
    /// The tool's class.
    pub class: EffectClass,
    /// What the execution came to.
    pub outcome: Outcome,
    /// Which execution this was (1-based) within the current call.
    pub attempt: u32,
    /// The tool's retry limits.
    pub retry: RetryPolicy,
    /// Whether the tool has a `recover` hook.
    pub has_recover: bool,
    /// Whether the run has been abandoned (compensable effects are then undone).
    pub abandoned: bool,
    /// A number in `[0, 1)` that spreads the backoff (jitter); pass `fastrand::f64()`.
    pub jitter: f64,
}

/// The policy: what to do about an outcome. A pure function; see the table in the tests.
pub fn decide(input: PolicyInput) -> Decision {
    use Decision::*;
    use EffectClass::*;

    if input.abandoned {
        return match (input.class, input.outcome) {
            (Compensable, Outcome::Success) => Compensate,
            (_, Outcome::Success) => Complete,
            (Pure, _) => Fail,
            (Idempotent, _) => FailInDoubt,
            (Compensable | Irreversible, _) => match input.outcome.effective_failure() {
                Some(Failure::Definitive | Failure::Transient { .. }) => Fail,
                _ if input.has_recover => Reconcile,
                _ => Block,
            },
        };
    }

    let failure = match input.outcome.effective_failure() {
        None => return Complete,
        Some(f) => f,
    };
    let can_retry = input.attempt < input.retry.max_attempts.max(1);
    let retry = |requested: Option<Duration>| Retry {
        after: backoff(input, requested),
    };

    match (input.class, failure) {
        (_, Failure::Definitive) => Fail,
        (Pure, Failure::Transient { retry_after }) if can_retry => retry(retry_after),
        (Pure, Failure::Unknown) if can_retry => retry(None),
        (Pure, _) => Fail,
        (Idempotent, Failure::Transient { retry_after }) if can_retry => retry(retry_after),
        (Idempotent, Failure::Transient { .. }) => Fail,
        (Idempotent, Failure::Unknown) if can_retry => retry(None),
        (Idempotent, Failure::Unknown) => FailInDoubt,
        (Compensable | Irreversible, Failure::Transient { retry_after }) if can_retry => retry(retry_after),
        (Compensable | Irreversible, Failure::Transient { .. }) => Fail,
        (Compensable | Irreversible, Failure::Unknown) if input.has_recover => Reconcile,
        (Compensable | Irreversible, Failure::Unknown) => Block,
    }
}

/// Exponential backoff with full jitter, or the delay the tool asked for, both capped by
/// `max_delay`.
fn backoff(input: PolicyInput, requested: Option<Duration>) -> Duration {
    let cap = input.retry.max_delay;
    if let Some(requested) = requested {
        return requested.min(cap);
    }
    let exp = input.attempt.saturating_sub(1).min(20);
    let ceiling = input.retry.base_delay.saturating_mul(1u32 << exp).min(cap);
    // Full jitter over the upper half keeps a floor so retries never hammer immediately.
    let jitter = input.jitter.clamp(0.0, 1.0);
    ceiling.mul_f64(0.5 + 0.5 * jitter)
}

#[cfg(test)]
mod tests {
    use super::*;
    use Decision::*;
    use EffectClass::*;

    const OUTCOMES: [Outcome; 5] = [
        Outcome::Success,
        Outcome::Failed(Failure::Definitive),
        Outcome::Failed(Failure::Transient { retry_after: None }),
        Outcome::Failed(Failure::Unknown),
        Outcome::Unclassified,
    ];

    fn input(class: EffectClass, outcome: Outcome, attempt: u32, has_recover: bool) -> PolicyInput {
        PolicyInput {
            class,
            outcome,
            attempt,
            retry: RetryPolicy::DEFAULT,
            has_recover,
            abandoned: false,
            jitter: 0.5,
        }
    }

    /// The expected decision for every (class, outcome, retries left, recover) combination,
    /// written out as a table a reviewer can read.
    fn expected(class: EffectClass, outcome: Outcome, retries_left: bool, recover: bool) -> &'static str {
        let o = match outcome {
            Outcome::Success => "ok",
            Outcome::Failed(Failure::Definitive) => "definitive",
            Outcome::Failed(Failure::Transient { .. }) => "transient",
            _ => "unknown",
        };
        match (class, o, retries_left, recover) {
            (_, "ok", _, _) => "complete",
            (_, "definitive", _, _) => "fail",
            (Pure, _, true, _) => "retry",
            (Pure, _, false, _) => "fail",
            (Idempotent, _, true, _) => "retry",
            (Idempotent, "transient", false, _) => "fail",
            (Idempotent, "unknown", false, _) => "fail-in-doubt",
            (_, "transient", true, _) => "retry",
            (_, "transient", false, _) => "fail",
            (_, "unknown", _, true) => "reconcile",
            (_, "unknown", _, false) => "block",
            _ => unreachable!(),
        }
    }

    fn name(d: Decision) -> &'static str {
        match d {
            Complete => "complete",
            Retry { .. } => "retry",
            Fail => "fail",
            Reconcile => "reconcile",
            Block => "block",
            FailInDoubt => "fail-in-doubt",
            Compensate => "compensate",
        }
    }

    #[test]
    fn whole_table() {
        let mut rows = 0;
        for class in EffectClass::ALL {
            for outcome in OUTCOMES {
                for attempt in 1..=4 {
                    for recover in [false, true] {
                        let got = decide(input(class, outcome, attempt, recover));
                        let want = expected(class, outcome, attempt < 3, recover);
                        assert_eq!(
                            name(got),
                            want,
                            "{class} {outcome:?} attempt {attempt} recover {recover}"
                        );
                        rows += 1;
                    }
                }
            }
        }
        assert_eq!(rows, 4 * 5 * 4 * 2);
    }

    #[test]
    fn irreversible_unknown_is_never_retried_even_with_generous_overrides() {
        let mut i = input(Irreversible, Outcome::Failed(Failure::Unknown), 1, false);
        i.retry.max_attempts = 100;
        assert_eq!(decide(i), Block);
    }

    #[test]
    fn retry_after_is_honoured_within_bounds() {
        let mut i = input(
            Idempotent,
            Outcome::Failed(Failure::Transient {
                retry_after: Some(Duration::from_secs(2)),
            }),
            1,
            false,
        );
        assert_eq!(
            decide(i),
            Retry {
                after: Duration::from_secs(2)
            }
        );
        i.outcome = Outcome::Failed(Failure::Transient {
            retry_after: Some(Duration::from_secs(3600)),
        });
        assert_eq!(
            decide(i),
            Retry {
                after: RetryPolicy::DEFAULT.max_delay
            }
        );
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        let d = |attempt, jitter| match decide(PolicyInput {
            jitter,
            ..input(Pure, Outcome::Unclassified, attempt, false)
        }) {
            Retry { after } => after,
            other => panic!("{other:?}"),
        };
        assert_eq!(d(1, 1.0), Duration::from_millis(100));
        assert_eq!(d(1, 0.0), Duration::from_millis(50));
        assert_eq!(d(2, 1.0), Duration::from_millis(200));
        let mut i = input(Pure, Outcome::Unclassified, 30, false);
        i.retry.max_attempts = 100;
        i.jitter = 1.0;
        assert_eq!(
            decide(i),
            Retry {
                after: Duration::from_secs(10)
            }
        );
    }

    #[test]
    fn abandoned_runs_compensate_completed_compensable_effects() {
        for class in EffectClass::ALL {
            for outcome in OUTCOMES {
                let mut i = input(class, outcome, 1, false);
                i.abandoned = true;
                let d = decide(i);
                match (class, outcome) {
                    (Compensable, Outcome::Success) => assert_eq!(d, Compensate),
                    (_, Outcome::Success) => assert_eq!(d, Complete),
                    _ => assert!(!matches!(d, Retry { .. } | Compensate), "{class} {outcome:?}: {d:?}"),
                }
            }
        }
    }
}
