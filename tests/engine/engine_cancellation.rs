//! Cancellation at every await point of the engine: before the claim, during the claim, while
//! waiting for another attempt, during `recover`, during the execution, during the backoff
//! between retries, during the record, and a leader dropped while identical calls wait on it.
//!
//! The invariants: never a silent second effect; a tool that has not started is never started
//! after its run is cancelled; a claim is never left behind for longer than its lease without
//! the record saying the outcome is unknown (in doubt, or a stale claim the next call reconciles).
//! Effects are counted by a downstream system the engine cannot see.

use crate::common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::journal::{Fault, Faulty, Then, until_stale};
use common::ledger::Downstream;
use common::script::{Script, Step, scripted};
use common::{key_of, short, short_engine};
use effect_tool::decide::record::Op;
use effect_tool::store::sqlite::SqliteStore;
use effect_tool::{
    BlockReason, CallOptions, Disposition, EffectClass, EffectError, Engine, Filter, MemoryStore, RecordState,
    RunContext, Store, StoreExt, Tool, ToolError, Verdict,
};
use tokio::sync::{Notify, Semaphore};

use EffectClass::{Compensable, Idempotent, Irreversible};
/// Backoff between retries up to a day: a cancellation must not wait it out.
const DAY: Duration = Duration::from_secs(24 * 3600);
scripted!(Sync, Idempotent, recover = false, max_delay = DAY);
scripted!(Hold, Compensable, recover = false, max_delay = DAY);
scripted!(Charge, Irreversible, recover = false, max_delay = DAY);
scripted!(Post, Irreversible, recover = true, max_delay = DAY);

/// The hooks of the journal [`Hooked`]: cancel a run when an op arrives, or hold `complete`
/// forever (a record write that never returns, as when the caller gives up on it).
#[derive(Default)]
struct Hooks {
    cancel_on: Mutex<Option<(&'static str, RunContext)>>,
    hang_complete: AtomicBool,
    arrived: Notify,
}

impl Hooks {
    fn cancel_on(&self, op: &'static str, run: &RunContext) {
        *self.cancel_on.lock().unwrap() = Some((op, run.clone()));
    }
}

impl Fault for Hooks {
    fn on(&self, op: &Op) -> Then {
        {
            let mut hook = self.cancel_on.lock().unwrap();
            if hook.as_ref().is_some_and(|(name, _)| *name == op.name()) {
                let (_, run) = hook.take().unwrap();
                run.cancel();
            }
        }
        if matches!(op, Op::Complete { .. }) && self.hang_complete.load(Ordering::SeqCst) {
            self.arrived.notify_one();
            return Then::Hang;
        }
        Then::Forward
    }
}

/// A journal that lets a test act at one operation (see [`Hooks`]).
type Hooked = Faulty<Hooks>;

fn hooked(inner: Arc<dyn Store>) -> Arc<Hooked> {
    Faulty::new(inner, Hooks::default())
}

/// An engine whose lease (10 s) no stall of the test machine outlasts, for tests that wait for
/// no lease to end.
fn long_lease_engine(store: impl Store + 'static) -> Engine {
    Engine::with_config(
        store,
        effect_tool::EngineConfig {
            lease: Duration::from_secs(10),
            ..short()
        },
    )
    .with_store_retry(Duration::from_millis(100))
}

async fn state(engine: &Engine, key: &str) -> Option<RecordState> {
    engine.store().get(key).await.unwrap().map(|r| r.state)
}

// ---------------------------------------------------------------------------------------------
// Before the claim
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn cancelled_before_the_call_nothing_is_claimed_or_run() {
    let down = Arc::new(Downstream::default());
    let script = Script::new(&down, &[Step::Ok]);
    let engine = short_engine(MemoryStore::new());
    let run = RunContext::new("r1");
    run.cancel();
    let err = engine
        .call(&Charge(script.clone()), &run, CallOptions::default(), "ann".into())
        .await
        .unwrap_err();
    assert!(matches!(err, EffectError::Cancelled { .. }), "{err}");
    assert!(
        err.to_string().contains("Charge") && err.to_string().contains("cancelled"),
        "{err}"
    );
    assert_eq!(script.executions(), 0);
    assert!(
        engine.store().list(&Filter::all()).await.unwrap().is_empty(),
        "no claim left"
    );

    // A recorded result is still returned to a cancelled run: nothing runs either way.
    let live = RunContext::new("r2");
    let out = engine
        .call(&Charge(script.clone()), &live, CallOptions::default(), "ann".into())
        .await
        .unwrap();
    live.cancel();
    let replay = engine
        .call_with_report(&Charge(script.clone()), &live, CallOptions::default(), "ann".into())
        .await;
    assert_eq!(
        (replay.result.unwrap(), replay.disposition),
        (out, Disposition::Replayed)
    );
    assert_eq!(down.requests(), 1);
}

// ---------------------------------------------------------------------------------------------
// During the claim
// ---------------------------------------------------------------------------------------------

/// Bug fixed in the engine: a run cancelled while the claim was being written (a slow journal)
/// still started the tool — `execute` polls the tool before it looks at the cancellation —
/// so the effect went out and the record ended in doubt. Now the tool is not started, the
/// claim is released (nothing happened) and the call says it was cancelled.
#[tokio::test]
async fn cancelled_during_the_claim_the_tool_is_not_started() {
    for class in ["idempotent", "compensable", "irreversible"] {
        let down = Arc::new(Downstream::default());
        let script = Script::new(&down, &[Step::Ok]);
        let store = hooked(Arc::new(MemoryStore::new()));
        let engine = short_engine(store.clone());
        let run = RunContext::new("r1");
        store.cancel_on("claim", &run);
        let (err, key) = match class {
            "idempotent" => {
                let t = Sync(script.clone());
                let e = engine.call(&t, &run, CallOptions::default(), "a".into()).await;
                (e.unwrap_err(), key_of(&t, &run, &"a".into()))
            }
            "compensable" => {
                let t = Hold(script.clone());
                let e = engine.call(&t, &run, CallOptions::default(), "a".into()).await;
                (e.unwrap_err(), key_of(&t, &run, &"a".into()))
            }
            _ => {
                let t = Charge(script.clone());
                let e = engine.call(&t, &run, CallOptions::default(), "a".into()).await;
                (e.unwrap_err(), key_of(&t, &run, &"a".into()))
            }
        };
        assert!(matches!(err, EffectError::Cancelled { .. }), "{class}: {err}");
        assert_eq!(
            err.key(),
            Some(key.as_str()),
            "{class}: the error names the key it left"
        );
        assert!(err.to_string().contains(&key), "{class}: {err}");
        assert_eq!(script.executions(), 0, "{class}: started after cancellation");
        assert_eq!(down.requests(), 0);
        let rec = engine.store().get(&key).await.unwrap().unwrap();
        assert_eq!(
            rec.state,
            RecordState::Released,
            "{class}: nothing happened, so nothing is in doubt"
        );
        // A later run applies it once.
        let again = RunContext::new("r1");
        let t = Charge(script.clone());
        if class == "irreversible" {
            engine
                .call(&t, &again, CallOptions::default(), "a".into())
                .await
                .unwrap();
            assert_eq!(down.requests(), 1);
        }
    }
}

/// Cancelled while taking over a crashed idempotent claim: the earlier outcome is still
/// unknown, so the record stays in doubt (not released) and the next call re-runs it.
#[tokio::test]
async fn cancelled_while_taking_over_an_unknown_outcome_keeps_it_in_doubt() {
    let down = Arc::new(Downstream::default());
    let script = Script::new(&down, &[Step::ApplyThenHang, Step::Ok]);
    let tool = Sync(script.clone());
    let store = hooked(Arc::new(MemoryStore::new()));
    let engine = short_engine(store.clone());
    let run = RunContext::new("r1");
    let key = key_of(&tool, &run, &"a".into());
    // A first attempt applies and is then lost (its task dropped): a crash after the effect.
    let crashed = {
        let (engine, tool, run) = (engine.clone(), tool.clone(), run.clone());
        tokio::spawn(async move { engine.call(&tool, &run, CallOptions::default(), "a".into()).await })
    };
    script.started.notified().await;
    crashed.abort();
    assert!(crashed.await.unwrap_err().is_cancelled());
    until_stale(engine.store().as_ref(), &key).await;

    // The takeover and the re-run wait for no lease: a long one, which a stall of a loaded
    // machine cannot end midway.
    let engine = long_lease_engine(store.clone());
    let r2 = RunContext::new("r1");
    store.cancel_on("claim", &r2);
    let err = engine
        .call(&tool, &r2, CallOptions::default(), "a".into())
        .await
        .unwrap_err();
    assert!(matches!(err, EffectError::Cancelled { .. }), "{err}");
    assert_eq!(state(&engine, &key).await, Some(RecordState::InDoubt));
    assert_eq!(script.executions(), 1);
    let out = engine
        .call(&tool, &RunContext::new("r1"), CallOptions::default(), "a".into())
        .await
        .unwrap();
    assert!(out.contains("attempt 3"), "{out}");
    assert_eq!(
        (down.requests(), down.effects()),
        (2, 1),
        "re-run with the same key: one effect"
    );
}

// ---------------------------------------------------------------------------------------------
// While waiting for another attempt
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cancelled_while_waiting_for_another_process_leaves_its_claim_alone() {
    let down = Arc::new(Downstream::default());
    let script = Script::new(&down, &[Step::HoldThenOk]);
    let tool = Charge(script.clone());
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (a, b) = (short_engine(store.clone()), short_engine(store.clone()));
    let run_a = RunContext::new("r1");
    let holder = {
        let (a, tool, run_a) = (a.clone(), tool.clone(), run_a.clone());
        tokio::spawn(async move { a.call(&tool, &run_a, CallOptions::default(), "x".into()).await })
    };
    script.started.notified().await;
    // Another process waits on the claim, then its run is cancelled.
    let run_b = RunContext::new("r1");
    let waiter = {
        let (b, tool, run_b) = (b.clone(), tool.clone(), run_b.clone());
        tokio::spawn(async move { b.call(&tool, &run_b, CallOptions::default(), "x".into()).await })
    };
    tokio::time::sleep(short().lease).await;
    run_b.cancel();
    let err = waiter.await.unwrap().unwrap_err();
    assert!(matches!(err, EffectError::Cancelled { .. }), "{err}");
    let key = key_of(&tool, &run_a, &"x".into());
    let rec = store.get(&key).await.unwrap().unwrap();
    assert_eq!(
        (rec.state, rec.attempt),
        (RecordState::Claimed, 1),
        "the holder's claim is untouched"
    );
    script.hold.add_permits(1);
    holder.await.unwrap().unwrap();
    assert_eq!(state(&a, &key).await, Some(RecordState::Completed));
    assert_eq!(down.requests(), 1);
}

// ---------------------------------------------------------------------------------------------
// During recover
// ---------------------------------------------------------------------------------------------

/// Cancelled while `recover` asks the remote system (which found nothing): the tool is not
/// started; the claim is released, as recover said the effect is not there.
#[tokio::test]
async fn cancelled_during_recover_the_tool_is_not_started() {
    let down = Arc::new(Downstream::default());
    let script = Script::new(&down, &[Step::Ok]);
    let tool = Post(script.clone());
    // Nothing here waits for a lease to end (the crashed claim below has none left), so the
    // engine's lease is long: a 60 ms one could end during a stall of a loaded machine, and
    // the claim would be lost rather than released.
    let engine = long_lease_engine(MemoryStore::new());
    let run = RunContext::new("r1");
    let key = key_of(&tool, &run, &"a".into());
    // A crashed claim: the next call reconciles through recover.
    let id = effect_tool::call::key::identify(&tool, &run, &"a".to_owned()).unwrap();
    let intent = effect_tool::decide::record::Intent {
        tool: "Post".into(),
        class: Irreversible,
        run_id: "r1".into(),
        thread_id: None,
        call_id: None,
        fingerprint: id.fingerprint,
        input: id.input,
        ttl_ms: None,
        approval: None,
        approval_ttl_ms: None,
        holder: None,
    };
    engine.store().claim(&key, intent, 0, false).await.unwrap();
    *script.cancel_in_recover.lock().unwrap() = Some(run.clone());
    let err = engine
        .call(&tool, &run, CallOptions::default(), "a".into())
        .await
        .unwrap_err();
    assert!(matches!(err, EffectError::Cancelled { .. }), "{err}");
    assert_eq!(script.recovers.load(Ordering::SeqCst), 1);
    assert_eq!(script.executions(), 0, "started after cancellation");
    assert_eq!(state(&engine, &key).await, Some(RecordState::Released));
    let out = engine
        .call(&tool, &RunContext::new("r1"), CallOptions::default(), "a".into())
        .await
        .unwrap();
    assert!(out.starts_with("done"), "{out}");
    assert_eq!(down.requests(), 1);
}

// ---------------------------------------------------------------------------------------------
// During the execution
// ---------------------------------------------------------------------------------------------

/// Cancelled while the tool runs, for every class: the outcome is unknown, the record is in
/// doubt at once (no lease to wait out), and the next call does what the class allows.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cancelled_during_execution_every_class() {
    async fn case<T: Tool<Args = String, Output = String, Error = ToolError> + Clone>(
        tool: T,
        script: Arc<Script>,
        engine: &Engine,
    ) -> (String, Result<String, EffectError<ToolError>>) {
        let run = RunContext::new("r1");
        let task = {
            let (engine, tool, run) = (engine.clone(), tool.clone(), run.clone());
            tokio::spawn(async move { engine.call(&tool, &run, CallOptions::default(), "a".into()).await })
        };
        script.started.notified().await;
        run.cancel();
        let err = task.await.unwrap().unwrap_err();
        let key = err.key().expect("the error names the key").to_owned();
        assert!(matches!(err, EffectError::Interrupted { .. }), "{err}");
        assert!(
            err.to_string().contains(&key) && err.to_string().contains(T::NAME),
            "{err}"
        );
        let rec = engine.store().get(&key).await.unwrap().unwrap();
        assert_eq!(rec.state, RecordState::InDoubt, "{}", T::NAME);
        let next = engine
            .call(&tool, &RunContext::new("r1"), CallOptions::default(), "a".into())
            .await;
        (key, next)
    }
    let engine = short_engine(MemoryStore::new());

    // The effect landed before the cancellation (the worst case).
    let down = Arc::new(Downstream::default());
    let s = Script::new(&down, &[Step::ApplyThenHang, Step::Ok]);
    let (_, next) = case(Sync(s.clone()), s.clone(), &engine).await;
    assert!(next.unwrap().contains("attempt 2"));
    assert_eq!(
        (down.requests(), down.effects()),
        (2, 1),
        "idempotent: same key, one effect"
    );

    let down = Arc::new(Downstream::default());
    let s = Script::new(&down, &[Step::ApplyThenHang, Step::Ok]);
    let (key, next) = case(Charge(s.clone()), s.clone(), &engine).await;
    let err = next.unwrap_err();
    assert_eq!(err.as_blocked().unwrap().reason, BlockReason::AwaitingResolution);
    assert_eq!(down.requests(), 1, "irreversible: never run again");
    engine
        .store()
        .resolve(&key, "ops", Verdict::Applied { output: "sent".into() })
        .await
        .unwrap();

    let down = Arc::new(Downstream::default());
    let s = Script::new(&down, &[Step::ApplyThenHang, Step::Ok]);
    let (_, next) = case(Hold(s.clone()), s.clone(), &engine).await;
    assert!(next.unwrap_err().as_blocked().is_some());
    assert_eq!(down.requests(), 1, "compensable without recover: never run again");

    let down = Arc::new(Downstream::default());
    let s = Script::new(&down, &[Step::ApplyThenHang, Step::Ok]);
    let (_, next) = case(Post(s.clone()), s.clone(), &engine).await;
    assert!(next.unwrap().starts_with("found"), "recover finds the effect");
    assert_eq!(down.requests(), 1);

    // The effect had not landed: recover finds nothing and the next call applies it once.
    let down = Arc::new(Downstream::default());
    let s = Script::new(&down, &[Step::HoldThenOk, Step::Ok]);
    let fresh = short_engine(MemoryStore::new());
    let (_, next) = case(Post(s.clone()), s.clone(), &fresh).await;
    assert!(next.unwrap().starts_with("done"));
    assert_eq!(down.requests(), 1);
}

// ---------------------------------------------------------------------------------------------
// During the backoff between retries
// ---------------------------------------------------------------------------------------------

/// Bug fixed in the engine: the backoff sleep between retries ignored the run's cancellation,
/// so a cancelled run waited out a long `retry_after` (here a day) before it stopped. Without
/// the fix this test hangs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_during_the_backoff_stops_without_waiting_it_out() {
    let down = Arc::new(Downstream::default());
    let day = Duration::from_secs(24 * 3600);
    let script = Script::new(
        &down,
        &[Step::Fail(ToolError::transient("busy").retry_after(day)), Step::Ok],
    );
    let tool = Charge(script.clone());
    let engine = short_engine(MemoryStore::new());
    let run = RunContext::new("r1");
    let key = key_of(&tool, &run, &"a".into());
    let task = {
        let (engine, tool, run) = (engine.clone(), tool.clone(), run.clone());
        tokio::spawn(async move { engine.call(&tool, &run, CallOptions::default(), "a".into()).await })
    };
    // The first attempt failed and released its claim: the call is in its backoff.
    loop {
        if state(&engine, &key).await == Some(RecordState::Released) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    run.cancel();
    let err = task.await.unwrap().unwrap_err();
    assert!(matches!(err, EffectError::Cancelled { .. }), "{err}");
    assert_eq!((script.executions(), down.requests()), (1, 0));
    assert_eq!(state(&engine, &key).await, Some(RecordState::Released));
}

// ---------------------------------------------------------------------------------------------
// During the record
// ---------------------------------------------------------------------------------------------

/// The run is cancelled while the output is being recorded: the effect happened, so the call
/// succeeds and the record is completed (cancellation never turns a success into a failure).
#[tokio::test]
async fn cancelled_during_the_record_the_call_still_succeeds() {
    let down = Arc::new(Downstream::default());
    let script = Script::new(&down, &[Step::Ok]);
    let tool = Charge(script.clone());
    let store = hooked(Arc::new(MemoryStore::new()));
    let engine = short_engine(store.clone());
    let run = RunContext::new("r1");
    store.cancel_on("complete", &run);
    let out = engine.call(&tool, &run, CallOptions::default(), "a".into()).await;
    assert!(out.is_ok(), "{out:?}");
    let key = key_of(&tool, &run, &"a".into());
    assert_eq!(state(&engine, &key).await, Some(RecordState::Completed));
    assert_eq!(down.requests(), 1);
}

/// The caller gives up (drops the call) while the record is being written: the claim left
/// behind lasts at most its lease, then the next call treats it as an unknown outcome —
/// blocked for an irreversible tool, never a silent second effect. Durable on SQLite: the next
/// call is made by a new process (a new journal handle on the same file).
async fn dropped_during_the_record(first: Arc<Hooked>, second: impl Fn() -> Arc<dyn Store>) {
    let down = Arc::new(Downstream::default());
    let script = Script::new(&down, &[Step::Ok]);
    let tool = Charge(script.clone());
    let engine = short_engine(first.clone());
    first.hang_complete.store(true, Ordering::SeqCst);
    let run = RunContext::new("r1");
    let task = {
        let (engine, tool, run) = (engine.clone(), tool.clone(), run.clone());
        tokio::spawn(async move { engine.call(&tool, &run, CallOptions::default(), "a".into()).await })
    };
    first.arrived.notified().await;
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    let key = key_of(&tool, &run, &"a".into());

    let next = short_engine(second());
    let rec = next.store().get(&key).await.unwrap().unwrap();
    assert_eq!((rec.state, rec.attempt), (RecordState::Claimed, 1));
    // Until its lease ends, the next call waits for it; then it is an unknown outcome.
    let err = next
        .call(&tool, &run, CallOptions::default(), "a".into())
        .await
        .unwrap_err();
    assert_eq!(
        err.as_blocked().unwrap().reason,
        BlockReason::InDoubtAfterCrash,
        "{err}"
    );
    assert_eq!(state(&next, &key).await, Some(RecordState::InDoubt));
    assert_eq!((script.executions(), down.requests()), (1, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_during_the_record_memory() {
    let mem: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let hooked = hooked(mem.clone());
    dropped_during_the_record(hooked, move || mem.clone()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_during_the_record_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.db");
    let hooked = hooked(Arc::new(SqliteStore::open(&path).unwrap()));
    dropped_during_the_record(hooked, move || Arc::new(SqliteStore::open(&path).unwrap())).await;
}

/// Cancelled during the execution, on SQLite: the record in doubt is on disk; a new process
/// is blocked, a person resolves it, and the next call returns the verdict without running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_during_execution_is_durably_in_doubt_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.db");
    let down = Arc::new(Downstream::default());
    let script = Script::new(&down, &[Step::ApplyThenHang, Step::Ok]);
    let tool = Charge(script.clone());
    let run = RunContext::new("r1");
    let key = {
        let engine = short_engine(SqliteStore::open(&path).unwrap());
        let task = {
            let (engine, tool, run) = (engine.clone(), tool.clone(), run.clone());
            tokio::spawn(async move { engine.call(&tool, &run, CallOptions::default(), "a".into()).await })
        };
        script.started.notified().await;
        run.cancel();
        task.await.unwrap().unwrap_err().key().unwrap().to_owned()
    };
    let engine = short_engine(SqliteStore::open(&path).unwrap());
    let rec = engine.store().get(&key).await.unwrap().unwrap();
    assert_eq!(rec.state, RecordState::InDoubt);
    assert!(rec.reason.unwrap_or_default().contains("cancelled"));
    let err = engine
        .call(&tool, &RunContext::new("r1"), CallOptions::default(), "a".into())
        .await
        .unwrap_err();
    assert_eq!(err.as_blocked().unwrap().reason, BlockReason::AwaitingResolution);
    engine
        .store()
        .resolve(&key, "ops", Verdict::Applied { output: "sent".into() })
        .await
        .unwrap();
    let out = engine
        .call(&tool, &RunContext::new("r1"), CallOptions::default(), "a".into())
        .await
        .unwrap();
    assert_eq!(out, "sent");
    assert_eq!(down.requests(), 1);
}

// ---------------------------------------------------------------------------------------------
// The in-process leader dropped while identical calls wait on it
// ---------------------------------------------------------------------------------------------

/// The leader's task is dropped mid-execution while 100 identical calls wait on it in this
/// process: a follower takes its place (never a hang). Its claim is live until the lease ends;
/// then an idempotent tool runs again with the same key (one effect downstream) and every
/// caller gets the result; an irreversible tool is blocked for every caller (never run again).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dropped_leader_hands_over_to_a_follower() {
    async fn case<T: Tool<Args = String, Output = String, Error = ToolError> + Clone>(
        tool: T,
        script: Arc<Script>,
    ) -> Vec<Result<String, EffectError<ToolError>>> {
        let engine = short_engine(MemoryStore::new());
        let run = RunContext::new("r1");
        let leader = {
            let (engine, tool, run) = (engine.clone(), tool.clone(), run.clone());
            tokio::spawn(async move { engine.call(&tool, &run, CallOptions::default(), "a".into()).await })
        };
        script.started.notified().await;
        let joined = Arc::new(Semaphore::new(0));
        let mut followers = Vec::new();
        for _ in 0..100 {
            let (engine, tool, run, joined) = (engine.clone(), tool.clone(), run.clone(), joined.clone());
            followers.push(tokio::spawn(async move {
                let call = engine.call(&tool, &run, CallOptions::default(), "a".into());
                let mut call = std::pin::pin!(call);
                assert!(futures::poll!(call.as_mut()).is_pending());
                joined.add_permits(1);
                call.await
            }));
        }
        joined.acquire_many(100).await.unwrap().forget();
        leader.abort();
        assert!(leader.await.unwrap_err().is_cancelled());
        let mut out = Vec::new();
        for f in followers {
            out.push(f.await.unwrap());
        }
        out
    }

    let down = Arc::new(Downstream::default());
    let script = Script::new(&down, &[Step::ApplyThenHang, Step::Ok]);
    let results = case(Sync(script.clone()), script.clone()).await;
    let first = results[0].as_ref().unwrap().clone();
    assert!(first.contains("attempt 2"), "{first}");
    assert!(results.iter().all(|r| r.as_ref().ok() == Some(&first)));
    assert_eq!((script.executions(), down.effects()), (2, 1));

    let down = Arc::new(Downstream::default());
    let script = Script::new(&down, &[Step::ApplyThenHang, Step::Ok]);
    let results = case(Charge(script.clone()), script.clone()).await;
    for r in &results {
        let err = r.as_ref().unwrap_err();
        let reason = &err.as_blocked().unwrap_or_else(|| panic!("{err}")).reason;
        assert!(
            matches!(reason, BlockReason::InDoubtAfterCrash | BlockReason::AwaitingResolution),
            "{err}"
        );
    }
    assert_eq!((script.executions(), down.requests()), (1, 1));
}

/// A follower cancelled while it waits leaves the leader alone; the leader's result is shared
/// with the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_follower_dropped_while_waiting_does_not_disturb_the_leader() {
    let down = Arc::new(Downstream::default());
    let script = Script::new(&down, &[Step::HoldThenOk]);
    let tool = Charge(script.clone());
    let engine = short_engine(MemoryStore::new());
    let run = RunContext::new("r1");
    let leader = {
        let (engine, tool, run) = (engine.clone(), tool.clone(), run.clone());
        tokio::spawn(async move { engine.call(&tool, &run, CallOptions::default(), "a".into()).await })
    };
    script.started.notified().await;
    let spawn_follower = || {
        let (engine, tool, run) = (engine.clone(), tool.clone(), run.clone());
        tokio::spawn(async move {
            engine
                .call_with_report(&tool, &run, CallOptions::default(), "a".into())
                .await
        })
    };
    let dropped = spawn_follower();
    let kept = spawn_follower();
    tokio::task::yield_now().await;
    dropped.abort();
    let _ = dropped.await;
    script.hold.add_permits(1);
    let out = leader.await.unwrap().unwrap();
    let shared = kept.await.unwrap();
    assert_eq!(shared.result.unwrap(), out);
    assert!(matches!(
        shared.disposition,
        Disposition::Shared | Disposition::Replayed
    ));
    assert_eq!(down.requests(), 1);
}
