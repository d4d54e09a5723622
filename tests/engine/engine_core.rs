//! The call algorithm of DESIGN §4, on the in-memory store. Effects are counted by a ledger
//! the engine cannot see (a downstream "system" inside the test tools).

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::journal::{FailWhen, Faulty, crashed_claim};
use common::ledger::Downstream;
use common::run;
use effect_tool::decide::record::{Intent, Op, OpOutcome};
use effect_tool::{
    BlockReason, CallOptions, EffectClass, EffectCtx, EffectError, Engine, EngineConfig, KeyRule, MemoryStore,
    RecordState, Store, StoreExt, Tool, ToolError, Window,
};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
struct Args {
    to: String,
    amount: u64,
    #[serde(default)]
    note: String,
}

fn args(to: &str, amount: u64) -> Args {
    Args {
        to: to.into(),
        amount,
        note: String::new(),
    }
}

/// What the test tool does on each execution, in order; the last behaviour repeats.
#[derive(Clone, Copy, Debug)]
enum Step {
    Ok,
    /// Apply the effect, then report an unknown outcome (e.g. timeout after sending).
    ApplyThenUnknown,
    /// Report an unknown outcome without applying it.
    Unknown,
    Definitive,
    Transient,
    /// Sleep long (for cancellation and timeouts).
    Slow,
}

macro_rules! test_tool {
    ($name:ident, $class:expr, $key_rule:expr, $window:expr, $recover:expr, $timeout:expr) => {
        struct $name {
            ledger: Arc<Downstream>,
            steps: Mutex<Vec<Step>>,
            executions: AtomicUsize,
            recovered: Mutex<Vec<String>>,
            custom_key: bool,
        }
        #[allow(dead_code)]
        impl $name {
            fn new(ledger: &Arc<Downstream>, steps: &[Step]) -> Self {
                $name {
                    ledger: ledger.clone(),
                    steps: Mutex::new(steps.to_vec()),
                    executions: AtomicUsize::new(0),
                    recovered: Mutex::new(Vec::new()),
                    custom_key: false,
                }
            }
            fn executions(&self) -> usize {
                self.executions.load(Ordering::SeqCst)
            }
        }
        impl Tool for $name {
            type Args = Args;
            type Output = String;
            type Error = ToolError;
            const NAME: &'static str = stringify!($name);
            const CLASS: EffectClass = $class;
            const KEY_RULE: KeyRule = $key_rule;
            const WINDOW: Window = $window;
            const HAS_RECOVER: bool = $recover;
            const TIMEOUT: Option<Duration> = $timeout;
            const RETRY: effect_tool::RetryPolicy = effect_tool::RetryPolicy {
                max_attempts: 3,
                base_delay: Duration::from_millis(1),
                max_delay: Duration::from_millis(5),
            };

            fn key(&self, args: &Args) -> Option<String> {
                self.custom_key.then(|| format!("pay:{}", args.to))
            }

            async fn call(&self, ctx: &EffectCtx, args: Args) -> Result<String, ToolError> {
                self.executions.fetch_add(1, Ordering::SeqCst);
                let step = {
                    let mut steps = self.steps.lock().unwrap();
                    if steps.len() > 1 {
                        steps.remove(0)
                    } else {
                        steps[0]
                    }
                };
                match step {
                    Step::Ok => {
                        self.ledger.apply(&ctx.idempotency_key());
                        tokio::task::yield_now().await;
                        Ok(format!(
                            "paid {} to {} (attempt {})",
                            args.amount,
                            args.to,
                            ctx.attempt()
                        ))
                    }
                    Step::ApplyThenUnknown => {
                        self.ledger.apply(&ctx.idempotency_key());
                        Err(ToolError::unknown("connection reset after sending"))
                    }
                    Step::Unknown => Err(ToolError::unknown("connection reset before sending")),
                    Step::Definitive => Err(ToolError::definitive("card declined")),
                    Step::Transient => Err(ToolError::transient("rate limited")),
                    Step::Slow => {
                        tokio::time::sleep(Duration::from_secs(3600)).await;
                        Ok("never".into())
                    }
                }
            }

            async fn recover(&self, ctx: &EffectCtx, args: &Args) -> Result<Option<String>, ToolError> {
                let idem = ctx.idempotency_key();
                self.recovered.lock().unwrap().push(idem.clone());
                let found = self.ledger.has(&idem);
                Ok(found.then(|| format!("recovered payment to {}", args.to)))
            }
        }
    };
}

use EffectClass::{Compensable, Idempotent, Irreversible};
test_tool!(Refund, Idempotent, KeyRule::Default, Window::Run, false, None);
test_tool!(SendEmail, Irreversible, KeyRule::Default, Window::Run, false, None);
test_tool!(Reserve, Compensable, KeyRule::Default, Window::Run, false, None);
test_tool!(PostComment, Irreversible, KeyRule::Default, Window::Run, true, None);
test_tool!(ThreadNote, Idempotent, KeyRule::Default, Window::Thread, false, None);
test_tool!(GlobalNote, Idempotent, KeyRule::Default, Window::CrossRun, false, None);
test_tool!(
    Deploy,
    Irreversible,
    KeyRule::Custom("|a| format!(\"pay:{}\", a.to)"),
    Window::Run,
    false,
    None
);
test_tool!(
    SlowCharge,
    Irreversible,
    KeyRule::Default,
    Window::Run,
    false,
    Some(Duration::from_millis(20))
);
test_tool!(
    SlowSync,
    Idempotent,
    KeyRule::Default,
    Window::Run,
    false,
    Some(Duration::from_millis(20))
);

fn engine() -> Engine {
    Engine::new(MemoryStore::new())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn thousand_concurrent_identical_calls_execute_once() {
    let ledger = Arc::new(Downstream::default());
    let tool = Arc::new(Refund::new(&ledger, &[Step::Ok]));
    let engine = engine();
    let run = run("r1");
    let mut handles = Vec::new();
    for _ in 0..1000 {
        let (tool, engine, run) = (tool.clone(), engine.clone(), run.clone());
        handles.push(tokio::spawn(async move {
            engine.call(&*tool, &run, CallOptions::default(), args("ann", 5)).await
        }));
    }
    let mut outputs = Vec::new();
    for h in handles {
        outputs.push(h.await.unwrap().expect("every caller gets the result"));
    }
    assert_eq!(ledger.requests(), 1, "one execution");
    assert_eq!(tool.executions(), 1);
    assert!(outputs.iter().all(|o| o == &outputs[0]), "all callers share one result");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_identical_calls_share_across_engines_on_one_store() {
    // Two engines (two "processes") on one journal: the second waits on the first's claim.
    let ledger = Arc::new(Downstream::default());
    let tool = Arc::new(Refund::new(&ledger, &[Step::Ok]));
    let store = Arc::new(MemoryStore::new());
    let engines = [Engine::new(store.clone()), Engine::new(store.clone())];
    let mut handles = Vec::new();
    for i in 0..50 {
        let (tool, engine) = (tool.clone(), engines[i % 2].clone());
        handles.push(tokio::spawn(async move {
            engine
                .call(&*tool, &run("r1"), CallOptions::default(), args("bob", 7))
                .await
                .unwrap()
        }));
    }
    for h in handles {
        h.await.unwrap();
    }
    assert_eq!(ledger.requests(), 1);
}

#[tokio::test]
async fn recorded_result_is_returned_without_running() {
    let ledger = Arc::new(Downstream::default());
    let tool = Refund::new(&ledger, &[Step::Ok]);
    let engine = engine();
    let first = engine
        .call_with_report(&tool, &run("r1"), CallOptions::call_id("c1"), args("ann", 5))
        .await;
    let second = engine
        .call_with_report(&tool, &run("r1"), CallOptions::call_id("c2"), args("ann", 5))
        .await;
    assert_eq!(first.disposition, effect_tool::Disposition::Executed);
    assert_eq!(second.disposition, effect_tool::Disposition::Replayed);
    assert_eq!(first.result.unwrap(), second.result.unwrap());
    assert_eq!(ledger.requests(), 1);
    assert_eq!(tool.executions(), 1);
}

#[tokio::test]
async fn definitive_error_records_nothing_and_a_later_call_applies() {
    let ledger = Arc::new(Downstream::default());
    let tool = Refund::new(&ledger, &[Step::Definitive, Step::Ok]);
    let engine = engine();
    let err = engine
        .call(&tool, &run("r1"), CallOptions::default(), args("ann", 5))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            EffectError::Tool {
                failure: effect_tool::Failure::Definitive,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(ledger.effects(), 0);
    let rec = engine.store().list(&effect_tool::Filter::all()).await.unwrap();
    assert_eq!(rec[0].state, RecordState::Released);
    assert_eq!(rec[0].output, None);
    engine
        .call(&tool, &run("r1"), CallOptions::default(), args("ann", 5))
        .await
        .unwrap();
    assert_eq!(ledger.effects(), 1);
    assert_eq!(tool.executions(), 2);
}

#[tokio::test]
async fn transient_errors_are_retried_with_the_same_key() {
    let ledger = Arc::new(Downstream::default());
    let tool = Refund::new(&ledger, &[Step::Transient, Step::Transient, Step::Ok]);
    let out = engine()
        .call(&tool, &run("r1"), CallOptions::default(), args("ann", 5))
        .await
        .unwrap();
    assert!(out.contains("attempt 3"), "{out}");
    assert_eq!(tool.executions(), 3);
    assert_eq!(ledger.effects(), 1);
}

#[tokio::test]
async fn unknown_outcome_of_irreversible_tool_blocks_the_next_call() {
    let ledger = Arc::new(Downstream::default());
    let tool = SendEmail::new(&ledger, &[Step::ApplyThenUnknown, Step::Ok]);
    let engine = engine();
    let first = engine
        .call(&tool, &run("r1"), CallOptions::default(), args("ann", 1))
        .await
        .unwrap_err();
    let blocked = first.as_blocked().expect("the unknown outcome blocks at once");
    assert_eq!(blocked.reason, BlockReason::UnknownOutcome);
    let second = engine
        .call(&tool, &run("r1"), CallOptions::default(), args("ann", 1))
        .await
        .unwrap_err();
    let blocked = second.as_blocked().expect("the next call is blocked too");
    assert_eq!(blocked.reason, BlockReason::AwaitingResolution);
    assert_eq!(blocked.tool, "SendEmail");
    assert!(second.to_string().contains("effect-tool resolve"), "{second}");
    assert_eq!(ledger.requests(), 1, "never a silent second effect");
    let rec = engine.store().get(&blocked.key).await.unwrap().unwrap();
    assert_eq!(rec.state, RecordState::InDoubt);
}

#[tokio::test]
async fn resolving_a_blocked_call_returns_the_output_without_running() {
    let ledger = Arc::new(Downstream::default());
    let tool = SendEmail::new(&ledger, &[Step::ApplyThenUnknown, Step::Ok]);
    let engine = engine();
    let err = engine
        .call(&tool, &run("r1"), CallOptions::default(), args("ann", 1))
        .await
        .unwrap_err();
    let key = err.key().unwrap().to_owned();
    let verdict = effect_tool::Verdict::Applied {
        output: serde_json::json!("sent by hand"),
    };
    engine.store().resolve(&key, "ops@example.com", verdict).await.unwrap();
    let out = engine
        .call(&tool, &run("r1"), CallOptions::default(), args("ann", 1))
        .await
        .unwrap();
    assert_eq!(out, "sent by hand");
    assert_eq!(tool.executions(), 1);
    let audit = engine.store().audit(Some(&key)).await.unwrap();
    let trail: Vec<(&str, &str)> = audit.iter().map(|a| (a.actor.as_str(), a.action.as_str())).collect();
    // The engine's decision (the unknown outcome, with its attempt), then the person's verdict.
    assert_eq!(trail, [("effect-tool", "in-doubt"), ("ops@example.com", "resolve")]);
    assert_eq!(audit[0].detail.as_ref().unwrap()["attempt"], 1);

    // Resolved as not applied: the next call applies it.
    let tool2 = SendEmail::new(&ledger, &[Step::Unknown, Step::Ok]);
    let err = engine
        .call(&tool2, &run("r2"), CallOptions::default(), args("bo", 1))
        .await
        .unwrap_err();
    let key = err.key().unwrap().to_owned();
    engine
        .store()
        .resolve(&key, "ops", effect_tool::Verdict::NotApplied)
        .await
        .unwrap();
    engine
        .call(&tool2, &run("r2"), CallOptions::default(), args("bo", 1))
        .await
        .unwrap();
    assert_eq!(tool2.executions(), 2);
}

#[tokio::test]
async fn unknown_outcome_with_recover_some_records_and_returns() {
    let ledger = Arc::new(Downstream::default());
    let tool = PostComment::new(&ledger, &[Step::ApplyThenUnknown, Step::Ok]);
    let engine = engine();
    let report = engine
        .call_with_report(&tool, &run("r1"), CallOptions::default(), args("ann", 1))
        .await;
    assert_eq!(report.disposition, effect_tool::Disposition::Reconciled);
    assert_eq!(report.result.unwrap(), "recovered payment to ann");
    assert_eq!(ledger.requests(), 1);
    let again = engine
        .call_with_report(&tool, &run("r1"), CallOptions::default(), args("ann", 1))
        .await;
    assert_eq!(again.disposition, effect_tool::Disposition::Replayed);
    assert_eq!(ledger.requests(), 1);
}

#[tokio::test]
async fn unknown_outcome_with_recover_none_runs_again() {
    let ledger = Arc::new(Downstream::default());
    let tool = PostComment::new(&ledger, &[Step::Unknown, Step::Ok]);
    let out = engine()
        .call(&tool, &run("r1"), CallOptions::default(), args("ann", 1))
        .await
        .unwrap();
    assert!(out.starts_with("paid"), "{out}");
    assert_eq!(tool.recovered.lock().unwrap().len(), 1, "recover was asked first");
    assert_eq!(ledger.effects(), 1);
    assert_eq!(tool.executions(), 2);
}

#[tokio::test]
async fn stale_claim_after_crash_blocks_an_irreversible_tool() {
    let ledger = Arc::new(Downstream::default());
    let tool = SendEmail::new(&ledger, &[Step::Ok]);
    let engine = engine();
    let key = crashed_claim(&engine, &tool, &run("r1"), &args("ann", 1)).await;
    let err = engine
        .call(&tool, &run("r1"), CallOptions::default(), args("ann", 1))
        .await
        .unwrap_err();
    assert_eq!(err.as_blocked().unwrap().reason, BlockReason::InDoubtAfterCrash);
    assert_eq!(tool.executions(), 0);
    assert_eq!(
        engine.store().get(&key).await.unwrap().unwrap().state,
        RecordState::InDoubt
    );
}

#[tokio::test]
async fn stale_claim_after_crash_is_reconciled_by_recover() {
    let ledger = Arc::new(Downstream::default());
    let tool = PostComment::new(&ledger, &[Step::Ok]);
    let engine = engine();
    let key = crashed_claim(&engine, &tool, &run("r1"), &args("ann", 1)).await;
    // The crashed attempt had applied the effect under the key (attempt 1's idempotency key).
    ledger.apply(&key);
    let report = engine
        .call_with_report(&tool, &run("r1"), CallOptions::default(), args("ann", 1))
        .await;
    assert_eq!(report.disposition, effect_tool::Disposition::Reconciled);
    assert_eq!(tool.executions(), 0);
    assert_eq!(ledger.effects(), 1);
}

#[tokio::test]
async fn idempotent_rerun_after_crash_passes_the_same_key_downstream() {
    let ledger = Arc::new(Downstream::default());
    let tool = Refund::new(&ledger, &[Step::Ok]);
    let engine = engine();
    let key = crashed_claim(&engine, &tool, &run("r1"), &args("ann", 5)).await;
    ledger.apply(&key); // the crashed attempt reached the payment API
    let out = engine
        .call(&tool, &run("r1"), CallOptions::default(), args("ann", 5))
        .await
        .unwrap();
    assert!(out.contains("attempt 2"), "{out}");
    assert_eq!(ledger.requests(), 2, "the request went out again ...");
    assert_eq!(ledger.effects(), 1, "... with the same idempotency key, so one effect");
}

#[tokio::test]
async fn fencing_rejects_a_late_writer() {
    let engine = engine();
    let tool = Refund::new(&Arc::new(Downstream::default()), &[Step::Ok]);
    let key = crashed_claim(&engine, &tool, &run("r1"), &args("ann", 5)).await;
    let intent = match engine.store().get(&key).await.unwrap() {
        Some(rec) => Intent {
            tool: rec.tool,
            class: rec.class,
            run_id: rec.run_id,
            thread_id: None,
            call_id: None,
            fingerprint: rec.fingerprint,
            input: rec.input,
            ttl_ms: None,
            approval: None,
            approval_ttl_ms: None,
            holder: None,
        },
        None => unreachable!(),
    };
    let taken = engine.store().claim(&key, intent, 60_000, false).await.unwrap();
    assert!(matches!(
        taken,
        OpOutcome::Claimed {
            attempt: 2,
            previous: Some(RecordState::Claimed),
            ..
        }
    ));
    let late = engine
        .store()
        .complete(&key, 1, serde_json::json!("late"))
        .await
        .unwrap_err();
    assert!(late.to_string().contains("no longer holds"), "{late}");
    engine
        .store()
        .complete(&key, 2, serde_json::json!("fresh"))
        .await
        .unwrap();
    let rec = engine.store().get(&key).await.unwrap().unwrap();
    assert_eq!(rec.output, Some(serde_json::json!("fresh")));
}

#[tokio::test]
async fn windows_separate_runs_and_threads() {
    let ledger = Arc::new(Downstream::default());
    let engine = engine();
    let per_run = Refund::new(&ledger, &[Step::Ok]);
    engine
        .call(&per_run, &run("r1"), CallOptions::default(), args("a", 1))
        .await
        .unwrap();
    engine
        .call(&per_run, &run("r2"), CallOptions::default(), args("a", 1))
        .await
        .unwrap();
    assert_eq!(per_run.executions(), 2, "run window: a new run applies again");

    let per_thread = ThreadNote::new(&ledger, &[Step::Ok]);
    let t1a = run("r1").with_thread("t1");
    let t1b = run("r2").with_thread("t1");
    let t2 = run("r3").with_thread("t2");
    engine
        .call(&per_thread, &t1a, CallOptions::default(), args("a", 1))
        .await
        .unwrap();
    engine
        .call(&per_thread, &t1b, CallOptions::default(), args("a", 1))
        .await
        .unwrap();
    assert_eq!(per_thread.executions(), 1, "thread window: runs of one thread share");
    engine
        .call(&per_thread, &t2, CallOptions::default(), args("a", 1))
        .await
        .unwrap();
    assert_eq!(per_thread.executions(), 2, "another thread applies again");

    let global = GlobalNote::new(&ledger, &[Step::Ok]);
    engine
        .call(&global, &t1a, CallOptions::default(), args("a", 1))
        .await
        .unwrap();
    engine
        .call(&global, &t2, CallOptions::default(), args("a", 1))
        .await
        .unwrap();
    assert_eq!(global.executions(), 1, "cross-run window: unique everywhere");
}

#[tokio::test]
async fn custom_key_dedupes_calls_whose_other_arguments_differ() {
    let ledger = Arc::new(Downstream::default());
    let mut tool = Deploy::new(&ledger, &[Step::Ok]);
    tool.custom_key = true;
    let engine = engine();
    let a = Args {
        note: "first".into(),
        ..args("prod", 1)
    };
    let b = Args {
        note: "re-planned wording".into(),
        ..args("prod", 2)
    };
    let first = engine
        .call(&tool, &run("r1"), CallOptions::call_id("c1"), a)
        .await
        .unwrap();
    let second = engine
        .call(&tool, &run("r1"), CallOptions::call_id("c2"), b)
        .await
        .unwrap();
    assert_eq!(first, second);
    assert_eq!(tool.executions(), 1);
}

#[tokio::test]
async fn unkeyed_irreversible_tool_replanned_with_identical_args_is_blocked() {
    let ledger = Arc::new(Downstream::default());
    let tool = SendEmail::new(&ledger, &[Step::Ok]);
    let engine = engine();
    engine
        .call(&tool, &run("r1"), CallOptions::call_id("call_1"), args("ann", 1))
        .await
        .unwrap();
    // The same call id again (a retry of the same tool call): the recorded result.
    engine
        .call(&tool, &run("r1"), CallOptions::call_id("call_1"), args("ann", 1))
        .await
        .unwrap();
    // A new call id with identical arguments: could be on purpose; a person decides.
    let err = engine
        .call(&tool, &run("r1"), CallOptions::call_id("call_2"), args("ann", 1))
        .await
        .unwrap_err();
    assert_eq!(err.as_blocked().unwrap().reason, BlockReason::IdenticalReplan);
    assert_eq!(ledger.requests(), 1);

    // Idempotent and compensable tools return the first result to a re-plan.
    let refund = Refund::new(&ledger, &[Step::Ok]);
    engine
        .call(&refund, &run("r1"), CallOptions::call_id("call_3"), args("ann", 1))
        .await
        .unwrap();
    engine
        .call(&refund, &run("r1"), CallOptions::call_id("call_4"), args("ann", 1))
        .await
        .unwrap();
    assert_eq!(refund.executions(), 1);
    let reserve = Reserve::new(&ledger, &[Step::Ok]);
    engine
        .call(&reserve, &run("r1"), CallOptions::call_id("call_5"), args("ann", 1))
        .await
        .unwrap();
    engine
        .call(&reserve, &run("r1"), CallOptions::call_id("call_6"), args("ann", 1))
        .await
        .unwrap();
    assert_eq!(reserve.executions(), 1);
}

#[tokio::test]
async fn compensable_unknown_without_recover_blocks() {
    let ledger = Arc::new(Downstream::default());
    let tool = Reserve::new(&ledger, &[Step::Unknown, Step::Ok]);
    let err = engine()
        .call(&tool, &run("r1"), CallOptions::default(), args("ann", 1))
        .await
        .unwrap_err();
    assert_eq!(err.as_blocked().unwrap().reason, BlockReason::UnknownOutcome);
    assert_eq!(tool.executions(), 1);
}

#[tokio::test]
async fn idempotent_unknown_outcomes_retry_then_leave_the_record_in_doubt_for_a_rerun() {
    let ledger = Arc::new(Downstream::default());
    let tool = Refund::new(
        &ledger,
        &[
            Step::ApplyThenUnknown,
            Step::ApplyThenUnknown,
            Step::ApplyThenUnknown,
            Step::Ok,
        ],
    );
    let engine = engine();
    let err = engine
        .call(&tool, &run("r1"), CallOptions::default(), args("ann", 1))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            EffectError::Tool {
                failure: effect_tool::Failure::Unknown,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(tool.executions(), 3);
    let key = err.key().unwrap().to_owned();
    assert_eq!(
        engine.store().get(&key).await.unwrap().unwrap().state,
        RecordState::InDoubt
    );
    engine
        .call(&tool, &run("r1"), CallOptions::default(), args("ann", 1))
        .await
        .unwrap();
    assert_eq!(ledger.effects(), 1, "every attempt used the same key downstream");
}

#[tokio::test]
async fn timeout_counts_as_unknown_outcome() {
    let ledger = Arc::new(Downstream::default());
    let tool = SlowCharge::new(&ledger, &[Step::Slow]);
    let err = engine()
        .call(&tool, &run("r1"), CallOptions::default(), args("ann", 1))
        .await
        .unwrap_err();
    assert_eq!(err.as_blocked().unwrap().reason, BlockReason::UnknownOutcome);
    assert_eq!(tool.executions(), 1);

    let sync = SlowSync::new(&ledger, &[Step::Slow, Step::Ok]);
    let out = engine()
        .call(&sync, &run("r1"), CallOptions::default(), args("ann", 1))
        .await
        .unwrap();
    assert!(
        out.contains("attempt 2"),
        "idempotent: timed out, retried with the same key: {out}"
    );
}

#[tokio::test]
async fn cancellation_while_running_leaves_the_record_in_doubt() {
    let ledger = Arc::new(Downstream::default());
    let tool = Arc::new(Refund::new(&ledger, &[Step::Slow, Step::Ok]));
    let engine = engine();
    let run = run("r1");
    let task = {
        let (tool, engine, run) = (tool.clone(), engine.clone(), run.clone());
        tokio::spawn(async move { engine.call(&*tool, &run, CallOptions::default(), args("ann", 1)).await })
    };
    while tool.executions() == 0 {
        tokio::task::yield_now().await;
    }
    run.cancel();
    let err = task.await.unwrap().unwrap_err();
    assert!(matches!(err, EffectError::Interrupted { .. }), "{err}");
    let rec = engine.store().get(err.key().unwrap()).await.unwrap().unwrap();
    assert_eq!(
        rec.state,
        RecordState::InDoubt,
        "cancelled in flight is an unknown outcome, not a failure"
    );
}

#[tokio::test]
async fn a_key_recorded_under_another_input_is_reported() {
    struct Strict;
    impl Tool for Strict {
        type Args = Args;
        type Output = u64;
        type Error = ToolError;
        const NAME: &'static str = "strict";
        const CLASS: EffectClass = EffectClass::Idempotent;
        const KEY_RULE: KeyRule = KeyRule::Fields(&["to"]);
        const STRICT_INPUT: bool = true;
        async fn call(&self, _ctx: &EffectCtx, args: Args) -> Result<u64, ToolError> {
            Ok(args.amount)
        }
    }
    let engine = engine();
    assert_eq!(
        engine
            .call(&Strict, &run("r1"), CallOptions::default(), args("ann", 1))
            .await
            .unwrap(),
        1
    );
    let err = engine
        .call(&Strict, &run("r1"), CallOptions::default(), args("ann", 2))
        .await
        .unwrap_err();
    assert!(matches!(err, EffectError::InputMismatch { .. }), "{err}");
}

/// An in-memory journal whose `apply` fails ("disk full") for the operations `which` picks.
fn failing_on(which: fn(&Op) -> bool) -> Arc<Faulty<FailWhen>> {
    Faulty::new(Arc::new(MemoryStore::new()), FailWhen::new(which, "disk full", true))
}

#[tokio::test]
async fn a_record_failure_after_the_effect_still_returns_and_the_next_attempt_reconciles() {
    // A store whose `complete` fails: the effect happened, the call must succeed.
    let ledger = Arc::new(Downstream::default());
    let tool = SendEmail::new(&ledger, &[Step::Ok]);
    let engine = Engine::with_config(
        failing_on(|op| matches!(op, Op::Complete { .. })),
        EngineConfig {
            lease: Duration::from_millis(30),
            ..EngineConfig::default()
        },
    )
    // The journal keeps failing: retried briefly, then the call returns.
    .with_store_retry(Duration::from_millis(50));
    engine
        .call(&tool, &run("r1"), CallOptions::default(), args("ann", 1))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(60)).await;
    let err = engine
        .call(&tool, &run("r1"), CallOptions::default(), args("ann", 1))
        .await
        .unwrap_err();
    assert_eq!(err.as_blocked().unwrap().reason, BlockReason::InDoubtAfterCrash);
    assert_eq!(ledger.requests(), 1);
}

/// A journal that cannot take the claim: the call fails before the effect, says so, and names
/// the key (for the operator who looks at the journal); the tool is not run.
#[tokio::test]
async fn a_journal_that_refuses_the_claim_stops_the_call_before_the_effect() {
    let ledger = Arc::new(Downstream::default());
    let tool = SendEmail::new(&ledger, &[Step::Ok]);
    let engine = Engine::new(failing_on(|_| true));
    let run = run("r1");
    let key = effect_tool::call::key::identify(&tool, &run, &args("ann", 1))
        .unwrap()
        .key;
    let err = engine
        .call(&tool, &run, CallOptions::default(), args("ann", 1))
        .await
        .unwrap_err();
    assert!(matches!(err, EffectError::Store { .. }), "{err}");
    let message = err.to_string();
    assert!(
        message.contains("disk full") && message.contains("nothing happened"),
        "{message}"
    );
    // A refusal names its key; a failed connection has none to name.
    assert_eq!(err.key(), None);
    let refused = effect_tool::StoreError::from(effect_tool::decide::record::Rejected::NotFound { key: key.clone() });
    assert_eq!(refused.key(), Some(key.as_str()));
    assert_eq!(ledger.requests(), 0, "the tool did not run");
}

#[tokio::test]
async fn pure_tools_are_not_journaled_and_retry_freely() {
    struct Lookup(AtomicUsize);
    impl Tool for Lookup {
        type Args = String;
        type Output = String;
        type Error = ToolError;
        const NAME: &'static str = "lookup";
        const CLASS: EffectClass = EffectClass::Pure;
        const RETRY: effect_tool::RetryPolicy = effect_tool::RetryPolicy {
            base_delay: Duration::from_millis(1),
            ..effect_tool::RetryPolicy::DEFAULT
        };
        async fn call(&self, _ctx: &EffectCtx, q: String) -> Result<String, ToolError> {
            if self.0.fetch_add(1, Ordering::SeqCst) == 0 {
                return Err(ToolError::unclassified("flaky"));
            }
            Ok(q.to_uppercase())
        }
    }
    let engine = engine();
    let tool = Lookup(AtomicUsize::new(0));
    assert_eq!(
        engine
            .call(&tool, &run("r1"), CallOptions::default(), "abc".into())
            .await
            .unwrap(),
        "ABC"
    );
    assert_eq!(
        engine
            .call(&tool, &run("r1"), CallOptions::default(), "abc".into())
            .await
            .unwrap(),
        "ABC"
    );
    assert_eq!(tool.0.load(Ordering::SeqCst), 3);
    assert!(
        engine
            .store()
            .list(&effect_tool::Filter::all())
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn a_streaming_tool_reports_progress_and_records_the_last_value() {
    use futures::StreamExt;
    struct Deploy(AtomicUsize);
    impl Tool for Deploy {
        type Args = String;
        type Output = String;
        type Error = ToolError;
        const NAME: &'static str = "deploy";
        const CLASS: EffectClass = EffectClass::Irreversible;
        async fn call(&self, ctx: &EffectCtx, service: String) -> Result<String, ToolError> {
            self.0.fetch_add(1, Ordering::SeqCst);
            let steps = futures::stream::iter(["built", "pushed", "live"])
                .map(move |s| Ok::<_, ToolError>(format!("{service}: {s}")));
            effect_tool::call::stream::last(ctx, steps, || ToolError::definitive("no steps")).await
        }
    }
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = {
        let seen = seen.clone();
        Arc::new(move |e: &effect_tool::ProgressEvent| seen.lock().unwrap().push(e.value.clone()))
    };
    let run = run("r1").with_progress(sink);
    let engine = engine();
    let tool = Deploy(AtomicUsize::new(0));
    let out = engine
        .call(&tool, &run, CallOptions::call_id("c1"), "api".into())
        .await
        .unwrap();
    assert_eq!(out, "api: live");
    assert_eq!(seen.lock().unwrap().len(), 3);
    let replay = engine
        .call(&tool, &run, CallOptions::call_id("c1"), "api".into())
        .await
        .unwrap();
    assert_eq!(replay, "api: live", "a replay returns the last value");
    assert_eq!(tool.0.load(Ordering::SeqCst), 1);
    assert_eq!(seen.lock().unwrap().len(), 3, "a replay reports no progress");
}

#[tokio::test]
async fn a_panicking_tool_is_an_unknown_outcome_and_leaves_no_claim_behind() {
    struct Flaky(AtomicUsize);
    impl Tool for Flaky {
        type Args = String;
        type Output = String;
        type Error = ToolError;
        const NAME: &'static str = "flaky";
        const CLASS: EffectClass = EffectClass::Irreversible;
        async fn call(&self, _ctx: &EffectCtx, to: String) -> Result<String, ToolError> {
            self.0.fetch_add(1, Ordering::SeqCst);
            panic!("mailer bug while sending to {to}");
        }
    }
    let engine = engine();
    let tool = Flaky(AtomicUsize::new(0));
    let err = engine
        .call(&tool, &run("r1"), CallOptions::default(), "ann".into())
        .await
        .unwrap_err();
    assert_eq!(
        err.as_blocked().expect("irreversible + unknown outcome").reason,
        BlockReason::UnknownOutcome
    );
    let rec = engine.store().get(err.key().unwrap()).await.unwrap().unwrap();
    assert_eq!(rec.state, RecordState::InDoubt);
    assert!(
        rec.reason.as_deref().unwrap_or_default().contains("mailer bug"),
        "{rec:?}"
    );
    // The next call does not wait for a lease: it is blocked at once, and nothing runs again.
    let again = engine
        .call(&tool, &run("r1"), CallOptions::default(), "ann".into())
        .await
        .unwrap_err();
    assert!(again.as_blocked().is_some());
    assert_eq!(tool.0.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "current_thread")]
async fn an_unkeyed_irreversible_call_under_another_call_id_is_blocked_even_while_the_first_runs() {
    struct Gated {
        started: tokio::sync::Notify,
        gate: tokio::sync::Notify,
        sent: AtomicUsize,
    }
    impl Tool for Gated {
        type Args = String;
        type Output = String;
        type Error = ToolError;
        const NAME: &'static str = "gated_email";
        const CLASS: EffectClass = EffectClass::Irreversible;
        async fn call(&self, _ctx: &EffectCtx, to: String) -> Result<String, ToolError> {
            self.started.notify_one();
            self.gate.notified().await;
            self.sent.fetch_add(1, Ordering::SeqCst);
            Ok(format!("sent to {to}"))
        }
    }
    let tool = Arc::new(Gated {
        started: Default::default(),
        gate: Default::default(),
        sent: AtomicUsize::new(0),
    });
    let engine = engine();
    let spawn = |call_id: &'static str| {
        let (tool, engine) = (tool.clone(), engine.clone());
        tokio::spawn(async move {
            engine
                .call(&*tool, &run("r1"), CallOptions::call_id(call_id), "ann".into())
                .await
        })
    };
    let first = spawn("call_1");
    tool.started.notified().await;
    let retry_of_first = spawn("call_1");
    let replanned = spawn("call_2");
    for _ in 0..20 {
        tokio::task::yield_now().await; // let both join the running call
    }
    tool.gate.notify_one();
    let first = first.await.unwrap().unwrap();
    assert_eq!(
        retry_of_first.await.unwrap().unwrap(),
        first,
        "the same tool call shares the result"
    );
    let err = replanned.await.unwrap().unwrap_err();
    assert_eq!(
        err.as_blocked().expect("a new call id is blocked").reason,
        BlockReason::IdenticalReplan
    );
    assert_eq!(tool.sent.load(Ordering::SeqCst), 1);
}

// ---------------------------------------------------------------------------------------------
// The engine's identity and settings
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn an_engine_names_its_worker_host_and_process_in_its_holder() {
    let plain = engine();
    assert_eq!(plain.holder().worker, None, "no worker identity unless given");
    let named = engine().with_worker("pod-7");
    let holder = named.holder().clone();
    assert_eq!(holder.worker.as_deref(), Some("pod-7"));
    assert_eq!(holder.pid, std::process::id());
    // The host as the system names it (what `hostname` prints), trimmed; "unknown" only when
    // no source names one.
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty());
    if let Some(host) = host {
        assert_eq!(holder.host, host);
    }
    assert!(!holder.host.is_empty());
    // Each engine instance has its own random id: 128 bits in hex.
    assert_eq!(holder.instance.len(), 32, "{holder:?}");
    assert!(holder.instance.bytes().all(|b| b.is_ascii_hexdigit()), "{holder:?}");
    assert_ne!(holder.instance, plain.holder().instance);
}

#[tokio::test]
async fn an_engines_store_retry_window_is_thirty_seconds_unless_set_and_shared_by_its_clones() {
    let engine = engine();
    assert_eq!(engine.store_retry(), effect_tool::engine::DEFAULT_STORE_RETRY);
    assert_eq!(effect_tool::engine::DEFAULT_STORE_RETRY, Duration::from_secs(30));
    let clone = engine.clone();
    let engine = engine.with_store_retry(Duration::from_millis(1_500));
    assert_eq!(engine.store_retry(), Duration::from_millis(1_500));
    assert_eq!(clone.store_retry(), Duration::from_millis(1_500), "clones share it");
}

#[test]
fn an_engine_shows_its_settings_when_asked_and_when_debug_printed() {
    let engine = Engine::with_config(
        MemoryStore::new(),
        EngineConfig {
            lease: Duration::from_secs(7),
            poll_interval: Duration::from_millis(25),
        },
    );
    let shown = format!("{engine:?}");
    assert!(shown.starts_with("Engine {"), "{shown}");
    assert!(shown.contains("lease: 7s"), "{shown}");
    assert_eq!(
        engine.config().lease,
        Duration::from_secs(7),
        "the settings it was given"
    );
}
