//! The decision core's remaining behaviour, stated exactly (issue 20): how `io::Error`s are
//! classified, how outcomes print and deserialize, what `RetryPolicy::NONE` means, what the
//! policy decides for an abandoned run's every outcome, and what an error message about the
//! arguments may show of a sensitive value.

use std::io::ErrorKind as K;
use std::time::Duration;

use effect_tool_core::decide::policy::{PolicyInput, decide};
use effect_tool_core::{ClassifyError, Decision, EffectClass, Failure, Outcome, RetryPolicy, ToolError};

#[test]
fn io_errors_are_classified_by_what_they_say_about_the_world() {
    let cases = [
        (K::NotFound, Some(Failure::Definitive)),
        (K::PermissionDenied, Some(Failure::Definitive)),
        (K::InvalidInput, Some(Failure::Definitive)),
        (K::InvalidData, Some(Failure::Definitive)),
        (K::Unsupported, Some(Failure::Definitive)),
        (K::ConnectionRefused, Some(Failure::TRANSIENT)),
        (K::AddrNotAvailable, Some(Failure::TRANSIENT)),
        (K::WouldBlock, Some(Failure::TRANSIENT)),
        (K::Interrupted, Some(Failure::TRANSIENT)),
        (K::TimedOut, Some(Failure::Unknown)),
        (K::ConnectionReset, Some(Failure::Unknown)),
        (K::ConnectionAborted, Some(Failure::Unknown)),
        (K::BrokenPipe, Some(Failure::Unknown)),
        (K::UnexpectedEof, Some(Failure::Unknown)),
        // Says nothing: the class's safe default applies.
        (K::Other, None),
        (K::OutOfMemory, None),
    ];
    for (kind, want) in cases {
        assert_eq!(std::io::Error::from(kind).failure(), want, "{kind:?}");
    }
}

#[test]
fn errors_that_say_nothing_are_unclassified() {
    assert_eq!("boom".to_owned().failure(), None);
    assert_eq!("boom".failure(), None);
    let boxed: Box<dyn std::error::Error + Send + Sync> = "boom".into();
    assert_eq!(boxed.failure(), None);
    assert_eq!(ToolError::unclassified("x").failure(), None);
    assert_eq!(ToolError::definitive("x").failure(), Some(Failure::Definitive));
    assert_eq!(ToolError::transient("x").failure(), Some(Failure::TRANSIENT));
    assert_eq!(ToolError::unknown("x").failure(), Some(Failure::Unknown));
    let later = ToolError::unknown("x").retry_after(Duration::from_millis(1500));
    assert_eq!(
        later.failure(),
        Some(Failure::Transient {
            retry_after: Some(Duration::from_millis(1500))
        })
    );
}

#[test]
fn failures_print_their_kind() {
    assert_eq!(Failure::Definitive.to_string(), "definitive");
    assert_eq!(Failure::TRANSIENT.to_string(), "transient");
    assert_eq!(
        Failure::Transient {
            retry_after: Some(Duration::from_secs(1))
        }
        .to_string(),
        "transient"
    );
    assert_eq!(Failure::Unknown.to_string(), "unknown");
    assert_eq!(ToolError::transient("rate limited").to_string(), "rate limited");
}

#[test]
fn failures_round_trip_as_json_with_retry_after_in_milliseconds() {
    let f = |v: serde_json::Value| serde_json::from_value::<Failure>(v).unwrap();
    assert_eq!(
        f(serde_json::json!({"kind": "transient", "retry_after": 1500})),
        Failure::Transient {
            retry_after: Some(Duration::from_millis(1500))
        }
    );
    assert_eq!(f(serde_json::json!({"kind": "transient"})), Failure::TRANSIENT);
    assert_eq!(
        f(serde_json::json!({"kind": "transient", "retry_after": null})),
        Failure::TRANSIENT
    );
    assert_eq!(f(serde_json::json!({"kind": "definitive"})), Failure::Definitive);
    assert_eq!(f(serde_json::json!({"kind": "unknown"})), Failure::Unknown);
    let delayed = Failure::Transient {
        retry_after: Some(Duration::from_millis(2500)),
    };
    assert_eq!(
        serde_json::to_value(delayed).unwrap(),
        serde_json::json!({"kind": "transient", "retry_after": 2500})
    );
    assert_eq!(
        serde_json::to_value(Failure::TRANSIENT).unwrap(),
        serde_json::json!({"kind": "transient"})
    );
    let err = ToolError::transient("slow down").retry_after(Duration::from_secs(3));
    let back: ToolError = serde_json::from_str(&serde_json::to_string(&err).unwrap()).unwrap();
    assert_eq!(back, err);
}

#[test]
fn outcomes_count_unclassified_as_unknown() {
    assert_eq!(Outcome::Success.effective_failure(), None);
    assert_eq!(Outcome::Unclassified.effective_failure(), Some(Failure::Unknown));
    assert_eq!(
        Outcome::Failed(Failure::Definitive).effective_failure(),
        Some(Failure::Definitive)
    );
}

fn input(class: EffectClass, outcome: Outcome, retry: RetryPolicy) -> PolicyInput {
    PolicyInput {
        class,
        outcome,
        attempt: 1,
        retry,
        has_recover: false,
        abandoned: false,
        jitter: 0.5,
    }
}

#[test]
fn retry_policy_none_never_retries() {
    assert_eq!(RetryPolicy::NONE.max_attempts, 1);
    assert_eq!(RetryPolicy::NONE.base_delay, RetryPolicy::DEFAULT.base_delay);
    assert_eq!(RetryPolicy::NONE.max_delay, RetryPolicy::DEFAULT.max_delay);
    assert_eq!(RetryPolicy::default(), RetryPolicy::DEFAULT);
    for class in EffectClass::ALL {
        let transient = decide(input(class, Outcome::Failed(Failure::TRANSIENT), RetryPolicy::NONE));
        assert_eq!(transient, Decision::Fail, "{class}");
        // The same failure under the default limits is retried.
        let default = decide(input(class, Outcome::Failed(Failure::TRANSIENT), RetryPolicy::DEFAULT));
        assert!(matches!(default, Decision::Retry { .. }), "{class}: {default:?}");
    }
    let unknown = decide(input(EffectClass::Idempotent, Outcome::Unclassified, RetryPolicy::NONE));
    assert_eq!(unknown, Decision::FailInDoubt);
    let pure = decide(input(EffectClass::Pure, Outcome::Unclassified, RetryPolicy::NONE));
    assert_eq!(pure, Decision::Fail);
}

#[test]
fn jitter_outside_zero_to_one_is_clamped() {
    let at = |jitter: f64| {
        decide(PolicyInput {
            jitter,
            ..input(EffectClass::Pure, Outcome::Unclassified, RetryPolicy::DEFAULT)
        })
    };
    assert_eq!(at(7.0), at(1.0));
    assert_eq!(at(-3.0), at(0.0));
    assert_eq!(
        at(1.0),
        Decision::Retry {
            after: Duration::from_millis(100)
        }
    );
    assert_eq!(
        at(0.0),
        Decision::Retry {
            after: Duration::from_millis(50)
        }
    );
    assert_eq!(
        at(0.5),
        Decision::Retry {
            after: Duration::from_millis(75)
        }
    );
}

/// Every outcome of an abandoned run, exactly: a completed compensable effect is undone, other
/// completions stand, and failures are decided as they would be with no retry left (an
/// abandoned run runs nothing again).
#[test]
fn abandoned_runs_decide_every_outcome() {
    use Decision::*;
    use EffectClass::*;
    let outcomes = [
        ("ok", Outcome::Success),
        ("definitive", Outcome::Failed(Failure::Definitive)),
        ("transient", Outcome::Failed(Failure::TRANSIENT)),
        ("unknown", Outcome::Failed(Failure::Unknown)),
        ("unknown", Outcome::Unclassified),
    ];
    for class in EffectClass::ALL {
        for (o, outcome) in outcomes {
            for has_recover in [false, true] {
                let got = decide(PolicyInput {
                    class,
                    outcome,
                    attempt: 1,
                    retry: RetryPolicy::DEFAULT,
                    has_recover,
                    abandoned: true,
                    jitter: 0.5,
                });
                let want = match (class, o, has_recover) {
                    (Compensable, "ok", _) => Compensate,
                    (_, "ok", _) => Complete,
                    (Pure, _, _) => Fail,
                    (Idempotent, _, _) => FailInDoubt,
                    (_, "definitive" | "transient", _) => Fail,
                    (_, _, true) => Reconcile,
                    (_, _, false) => Block,
                };
                assert_eq!(got, want, "{class} {outcome:?} recover {has_recover}");
            }
        }
    }
}

#[test]
fn an_error_message_about_the_arguments_never_shows_a_sensitive_value() {
    use effect_tool_core::call::key::scrub;
    use serde_json::json;

    let args = json!({"card": "4111111111111111", "pin": 1234, "to": "bob", "note": null, "memo": ""});
    let sensitive = ["card", "pin", "note", "memo", "absent"];
    let message = r#"invalid type: string "4111111111111111", expected u64; pin 1234; to bob; note null"#;
    assert_eq!(
        scrub(message.to_owned(), &args, &sensitive),
        r#"invalid type: string [sensitive], expected u64; pin [sensitive]; to bob; note null"#,
        "each sensitive value replaced, in its JSON and its plain form; an empty or null value, \
         a field not in the arguments and the other fields left as they are"
    );
    // The plain form too, where the message does not quote it.
    assert_eq!(
        scrub("card 4111111111111111 declined".to_owned(), &args, &sensitive),
        "card [sensitive] declined"
    );
    // Arguments that are not an object hold no named field to hide.
    assert_eq!(scrub("4111".to_owned(), &json!("4111"), &["card"]), "4111");
}

#[test]
fn a_custom_key_is_placed_in_the_tools_window() {
    use effect_tool_core::call::key::{scope, scoped_custom_key};
    use effect_tool_core::{RunContext, Window};

    let run = RunContext::new("r1");
    let threaded = RunContext::new("r1").with_thread("t1");
    assert_eq!(scope(Window::Run, &threaded).as_deref(), Some("r1"));
    assert_eq!(scope(Window::Thread, &threaded).as_deref(), Some("thread:t1"));
    assert_eq!(
        scope(Window::Thread, &run).as_deref(),
        Some("r1"),
        "a run without a thread"
    );
    assert_eq!(scope(Window::CrossRun, &threaded), None);
    // The same custom key in two runs is two keys, unless the window spans runs.
    assert_eq!(scoped_custom_key(Window::Run, &run, "order-7"), "r1:order-7");
    assert_eq!(
        scoped_custom_key(Window::Thread, &threaded, "order-7"),
        "thread:t1:order-7"
    );
    assert_eq!(scoped_custom_key(Window::CrossRun, &threaded, "order-7"), "order-7");
}
