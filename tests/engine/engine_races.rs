//! Races around the call engine and the record state machine: a person's verdict against a live
//! or stale attempt, leases that run out while a tool (or its `recover`) is still working, two
//! engines taking over one stale claim, in-process sharing with failing or cancelled leaders,
//! approvals, ttl and compensation. Effects are counted by a downstream system the engine cannot
//! see; synchronization is explicit (Notify / Semaphore), never a timed assertion.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::journal::{FailWhen, Fault, Faulty, Then, claim_elsewhere, crashed_claim, until_stale};
use common::ledger::Downstream;
use common::script::{Script, Step, scripted};
use common::{key_of, run, short, short_engine};
use effect_tool::decide::record::{Intent, Op, OpOutcome};
use effect_tool::store::sqlite::SqliteStore;
use effect_tool::{
    BlockReason, CallOptions, Disposition, DynTool, EffectClass, EffectCtx, EffectError, Engine, EngineConfig, Failure,
    Filter, MemoryStore, RecordState, Store, StoreExt, Tool, ToolError, Verdict, Window,
};
use tokio::sync::{Notify, Semaphore};

use EffectClass::{Idempotent, Irreversible};
scripted!(
    Charge,
    Irreversible,
    recover = false,
    approval = None,
    window = Window::Run
);
scripted!(
    Post,
    Irreversible,
    recover = true,
    approval = None,
    window = Window::Run
);
scripted!(Sync, Idempotent, recover = false, approval = None, window = Window::Run);
scripted!(
    Wire,
    Irreversible,
    recover = false,
    approval = Some("finance"),
    window = Window::Run
);
scripted!(
    ThreadSync,
    Idempotent,
    recover = false,
    approval = None,
    window = Window::Thread
);
scripted!(
    ThreadWire,
    Irreversible,
    recover = false,
    approval = Some("finance"),
    window = Window::Thread
);
scripted!(
    ThreadMail,
    Irreversible,
    recover = false,
    approval = None,
    window = Window::Thread
);

fn intent_for(tool: &str, class: EffectClass, ttl_ms: Option<u64>) -> Intent {
    Intent {
        tool: tool.into(),
        class,
        run_id: "r1".into(),
        thread_id: None,
        call_id: None,
        fingerprint: "f".into(),
        input: serde_json::json!("x"),
        ttl_ms,
        approval: None,
        approval_ttl_ms: None,
        holder: None,
    }
}

/// A journal whose lease renewals can be made to fail (a store that cannot be reached for a
/// while, a paused process): the claim's lease then runs out while its holder still works.
fn flaky_renew(inner: Arc<dyn Store>) -> Arc<Faulty<FailWhen>> {
    let renewals = |op: &Op| matches!(op, Op::Renew { .. });
    Faulty::new(inner, FailWhen::new(renewals, "journal unreachable", false))
}

fn sqlite_pair() -> (tempfile::TempDir, Arc<dyn Store>, Arc<dyn Store>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.db");
    let a: Arc<dyn Store> = Arc::new(SqliteStore::open(&path).unwrap());
    let b: Arc<dyn Store> = Arc::new(SqliteStore::open(&path).unwrap());
    (dir, a, b)
}

fn memory_pair() -> (Arc<dyn Store>, Arc<dyn Store>) {
    let m: Arc<dyn Store> = Arc::new(MemoryStore::new());
    (m.clone(), m)
}

// ---------------------------------------------------------------------------------------------
// Fencing
// ---------------------------------------------------------------------------------------------

/// Bug fixed in `record::transition`: a record whose ttl had passed counted as absent, so the
/// next claim restarted at attempt 1 and a stalled attempt-1 writer could complete the new
/// claim with its old output.
async fn ttl_expiry_never_reuses_a_fencing_token(store: &dyn Store) {
    let k = "ttl-fence";
    store
        .claim(k, intent_for("t", Idempotent, Some(1)), 0, false)
        .await
        .unwrap();
    let taken = store
        .claim(k, intent_for("t", Idempotent, Some(1)), 60_000, false)
        .await
        .unwrap();
    assert!(matches!(taken, OpOutcome::Claimed { attempt: 2, .. }), "{taken:?}");
    store.complete(k, 2, serde_json::json!("two")).await.unwrap();
    let deadline = store.now() + 2;
    while store.now() <= deadline {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let again = store
        .claim(k, intent_for("t", Idempotent, Some(60_000)), 60_000, false)
        .await
        .unwrap();
    let OpOutcome::Claimed { attempt, previous, .. } = again else {
        panic!("an expired record counts as absent: {again:?}")
    };
    assert_eq!(
        (attempt, previous),
        (3, None),
        "a new effect, with a fencing token never used before"
    );
    let late = store.complete(k, 1, serde_json::json!("late")).await.unwrap_err();
    assert!(late.to_string().contains("no longer holds"), "{late}");
    let late = store.complete(k, 2, serde_json::json!("late")).await.unwrap_err();
    assert!(late.to_string().contains("no longer holds"), "{late}");
    store.complete(k, 3, serde_json::json!("three")).await.unwrap();
    let rec = store.get(k).await.unwrap().unwrap();
    assert_eq!(
        (rec.state, rec.output),
        (RecordState::Completed, Some(serde_json::json!("three")))
    );

    // The same for a call that parks for approval after the ttl: its claim comes after attempt 3.
    let d = store.now() + 2;
    store
        .claim("ttl-park", intent_for("t", Irreversible, Some(1)), 0, false)
        .await
        .unwrap();
    while store.now() <= d {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let mut gated = intent_for("t", Irreversible, None);
    gated.approval = Some("ops".into());
    // attempt 1 was stale, not expired-and-absent (claims are never treated as absent): take it.
    let out = store.claim("ttl-park", gated.clone(), 60_000, false).await.unwrap();
    assert!(matches!(out, OpOutcome::Claimed { attempt: 2, .. }), "{out:?}");
}

#[tokio::test]
async fn ttl_expiry_never_reuses_a_fencing_token_memory() {
    ttl_expiry_never_reuses_a_fencing_token(&MemoryStore::new()).await;
}

#[tokio::test]
async fn ttl_expiry_never_reuses_a_fencing_token_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("j.db")).unwrap();
    ttl_expiry_never_reuses_a_fencing_token(&store).await;
}

/// Many engines (threads of this process and, on SQLite, separate connections as separate
/// processes would have) take over one stale claim at once: exactly one wins.
async fn one_stale_claim_many_takeovers(a: Arc<dyn Store>, b: Arc<dyn Store>) {
    for round in 0..10 {
        let k = format!("stale-{round}");
        a.claim(&k, intent_for("t", Idempotent, None), 0, false).await.unwrap();
        let barrier = Arc::new(tokio::sync::Barrier::new(16));
        let mut tasks = Vec::new();
        for i in 0..16 {
            let (store, k, barrier) = (
                if i % 2 == 0 { a.clone() } else { b.clone() },
                k.clone(),
                barrier.clone(),
            );
            tasks.push(tokio::spawn(async move {
                barrier.wait().await;
                store
                    .claim(&k, intent_for("t", Idempotent, None), 60_000, true)
                    .await
                    .unwrap()
            }));
        }
        let mut winners = Vec::new();
        for t in tasks {
            match t.await.unwrap() {
                OpOutcome::Claimed { attempt, previous, .. } => winners.push((attempt, previous)),
                OpOutcome::InFlight(rec) => assert_eq!(rec.attempt, 2),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(winners, vec![(2, Some(RecordState::Claimed))], "round {round}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_engines_taking_over_one_stale_claim_exactly_one_wins_memory() {
    let (a, b) = memory_pair();
    one_stale_claim_many_takeovers(a, b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_engines_taking_over_one_stale_claim_exactly_one_wins_sqlite() {
    let (_dir, a, b) = sqlite_pair();
    one_stale_claim_many_takeovers(a, b).await;
}

/// The same through the engine: an irreversible tool with `recover`, a crashed claim, two
/// engines calling at once. One reconciles and runs; the other waits and gets its result.
async fn two_engines_reconcile_one_crashed_claim(a: Arc<dyn Store>, b: Arc<dyn Store>) {
    let down = Arc::new(Downstream::default());
    let script = Script::new(&down, &[Step::Ok]);
    let tool = Post(script.clone());
    let (ea, eb) = (short_engine(a), short_engine(b));
    let key = crashed_claim(&ea, &tool, &run("r1"), &"ann".to_owned()).await;
    let barrier = Arc::new(tokio::sync::Barrier::new(2));
    let call = |engine: Engine| {
        let (tool, barrier) = (tool.clone(), barrier.clone());
        tokio::spawn(async move {
            barrier.wait().await;
            engine
                .call_with_report(&tool, &run("r1"), CallOptions::default(), "ann".into())
                .await
        })
    };
    let (ta, tb) = (call(ea.clone()), call(eb));
    let (ra, rb) = (ta.await.unwrap(), tb.await.unwrap());
    assert_eq!(down.requests(), 1, "exactly one effect: {ra:?} / {rb:?}");
    assert_eq!(script.executions(), 1);
    let (oa, ob) = (ra.result.unwrap(), rb.result.unwrap());
    assert_eq!(oa, ob, "both callers get the one result");
    let mut dispositions = [ra.disposition, rb.disposition];
    dispositions.sort_by_key(|d| d.as_str());
    assert_eq!(dispositions, [Disposition::Executed, Disposition::Replayed]);
    let rec = ea.store().get(&key).await.unwrap().unwrap();
    assert_eq!((rec.state, rec.attempt), (RecordState::Completed, 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_engines_reconcile_one_crashed_claim_memory() {
    let (a, b) = memory_pair();
    two_engines_reconcile_one_crashed_claim(a, b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_engines_reconcile_one_crashed_claim_sqlite() {
    let (_dir, a, b) = sqlite_pair();
    two_engines_reconcile_one_crashed_claim(a, b).await;
}

// ---------------------------------------------------------------------------------------------
// Leases
// ---------------------------------------------------------------------------------------------

/// A tool that runs for many leases keeps its claim (renewal): another engine waits for it
/// instead of taking it over, and gets its result. The lease is 250 ms (renewed every third
/// of it), not [`short`]'s 60 ms: a renewal is a durable write, and on a loaded shared disk
/// one fsync has taken longer than 40 ms, which let the claim lapse and be taken over (the
/// safe outcome, but not what this test is about).
async fn a_long_execution_keeps_its_claim(a: Arc<dyn Store>, b: Arc<dyn Store>) {
    let config = EngineConfig {
        lease: Duration::from_millis(250),
        ..short()
    };
    let down = Arc::new(Downstream::default());
    let script = Script::new(&down, &[Step::HoldThenOk]);
    let tool = Charge(script.clone());
    let (ea, eb) = (Engine::with_config(a, config), Engine::with_config(b, config));
    let ta = {
        let (ea, tool) = (ea.clone(), tool.clone());
        tokio::spawn(async move { ea.call(&tool, &run("r1"), CallOptions::default(), "ann".into()).await })
    };
    script.started.notified().await;
    let key = key_of(&tool, &run("r1"), &"ann".to_owned());
    // Five leases pass while the tool runs; the claim stays live all along.
    for _ in 0..5 {
        tokio::time::sleep(config.lease).await;
        let rec = ea.store().get(&key).await.unwrap().unwrap();
        assert_eq!((rec.state, rec.attempt), (RecordState::Claimed, 1));
    }
    let tb = {
        let (eb, tool) = (eb.clone(), tool.clone());
        tokio::spawn(async move {
            eb.call_with_report(&tool, &run("r1"), CallOptions::default(), "ann".into())
                .await
        })
    };
    tokio::time::sleep(config.lease * 2).await;
    script.hold.add_permits(1);
    let oa = ta.await.unwrap().unwrap();
    let rb = tb.await.unwrap();
    assert_eq!(rb.result.unwrap(), oa);
    assert_eq!(rb.disposition, Disposition::Replayed);
    assert_eq!((down.requests(), script.executions()), (1, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_long_execution_keeps_its_claim_memory() {
    let (a, b) = memory_pair();
    a_long_execution_keeps_its_claim(a, b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_long_execution_keeps_its_claim_sqlite() {
    let (_dir, a, b) = sqlite_pair();
    a_long_execution_keeps_its_claim(a, b).await;
}

/// Bug fixed in the engine: `recover` ran without renewing the lease. A recover slower than
/// the lease let a second engine take the claim over, find nothing and run; then the first
/// recover answered "not found" and the first engine ran too: two irreversible effects.
async fn a_slow_recover_keeps_its_claim(a: Arc<dyn Store>, b: Arc<dyn Store>) {
    let down = Arc::new(Downstream::default());
    let script = Script::new(&down, &[Step::Ok]);
    script.held_recovers.store(1, Ordering::SeqCst);
    let tool = Post(script.clone());
    let (ea, eb) = (short_engine(a), short_engine(b));
    crashed_claim(&ea, &tool, &run("r1"), &"ann".to_owned()).await;
    let ta = {
        let (ea, tool) = (ea.clone(), tool.clone());
        tokio::spawn(async move { ea.call(&tool, &run("r1"), CallOptions::default(), "ann".into()).await })
    };
    script.started.notified().await; // A's recover has looked (nothing found) and is slow to answer
    tokio::time::sleep(short().lease * 3).await;
    let tb = {
        let (eb, tool) = (eb.clone(), tool.clone());
        tokio::spawn(async move { eb.call(&tool, &run("r1"), CallOptions::default(), "ann".into()).await })
    };
    tokio::time::sleep(short().lease * 3).await;
    script.recover_hold.add_permits(1);
    let (ra, rb) = (ta.await.unwrap(), tb.await.unwrap());
    assert_eq!(down.requests(), 1, "one irreversible effect: A={ra:?} B={rb:?}");
    assert_eq!(ra.unwrap(), rb.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_slow_recover_keeps_its_claim_memory() {
    let (a, b) = memory_pair();
    a_slow_recover_keeps_its_claim(a, b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_slow_recover_keeps_its_claim_sqlite() {
    let (_dir, a, b) = sqlite_pair();
    a_slow_recover_keeps_its_claim(a, b).await;
}

/// Counts the claims a journal is asked for, and fails those past the 100th (a waiter that
/// asks without waiting would otherwise spin for ever on a paused clock).
struct CountClaims(AtomicUsize);

impl Fault for CountClaims {
    fn on(&self, op: &Op) -> Then {
        if matches!(op, Op::Claim { .. }) && self.0.fetch_add(1, Ordering::SeqCst) >= 100 {
            return Then::Fail("more than 100 claims");
        }
        Then::Forward
    }
}

/// A memory journal behind `fault` whose clock is tokio's (paused in these tests).
fn journal_on_tokio_clock<F: Fault>(fault: F) -> Arc<Faulty<F>> {
    let start = tokio::time::Instant::now();
    let clock = move || 1_700_000_000_000 + start.elapsed().as_millis() as i64;
    Faulty::new(Arc::new(MemoryStore::with_clock(clock)), fault)
}

/// An idempotent call for ann that finds another process's claim, its lease `held_ms` long,
/// on an engine polling from `poll`: the call's output, how long it took on tokio's clock, and
/// how many claims the journal was asked for (the other process's included).
async fn call_behind_a_claim(held_ms: u64, poll: Duration) -> (String, Duration, usize) {
    let start = tokio::time::Instant::now();
    let journal = journal_on_tokio_clock(CountClaims(AtomicUsize::new(0)));
    let config = EngineConfig {
        lease: Duration::from_secs(30),
        poll_interval: poll,
    };
    let engine = Engine::with_config(journal.clone(), config);
    let down = Arc::new(Downstream::default());
    let tool = Sync(Script::new(&down, &[Step::Ok]));
    let r = run("r1");
    claim_elsewhere(&engine, &tool, &r, &"ann".to_owned(), held_ms).await;
    let out = engine
        .call(&tool, &r, CallOptions::default(), "ann".into())
        .await
        .unwrap();
    assert_eq!(down.requests(), 1);
    (out, start.elapsed(), journal.0.load(Ordering::SeqCst))
}

/// A call that finds another process's live claim waits until that claim's lease ends, not a
/// whole poll interval past it, and does not ask the journal again meanwhile: with a poll
/// interval of 10 s and a lease ending in 1 s, it takes the claim over 1 s later, after a
/// claim or two. On tokio's paused clock, which the journal's clock follows here, so the times
/// are exact.
#[tokio::test(start_paused = true)]
async fn a_waiter_looks_again_when_the_holders_lease_ends() {
    let (out, waited, claims) = call_behind_a_claim(1_000, Duration::from_secs(10)).await;
    assert!(out.contains("attempt 2"), "{out}");
    assert!(
        waited >= Duration::from_millis(1_000) && waited <= Duration::from_millis(1_100),
        "took the claim over {waited:?} after it was made, its lease 1 s"
    );
    // The other process's claim, the call's first, the takeover (and one more if the first
    // look again lands on the lease's last millisecond).
    assert!((3..=4).contains(&claims), "{claims} claims");
}

/// A waiter that keeps finding a live claim backs off: it looks again after the poll interval
/// (2 ms), doubling each time up to 500 ms, until the holder's lease (10 s) ends. About 28
/// looks in 10 s, never hundreds. On tokio's paused clock, which the journal's clock follows.
#[tokio::test(start_paused = true)]
async fn a_waiter_backs_off_doubling_up_to_half_a_second() {
    let (_, _, claims) = call_behind_a_claim(10_000, Duration::from_millis(2)).await;
    // 2 + 4 + ... + 256 ms (8 looks, 510 ms), then every 500 ms up to 10 s (19 more), plus the
    // other process's claim and the call's first.
    assert!((28..=32).contains(&claims), "{claims} claims in 10 s");
}

/// A journal whose claims answer only after the lease has run out, and whose renewals fail: every
/// claim lapses before the tool could start. The call claims again, and after the third lapse
/// it stops with `ClaimLost` instead of claiming forever; the tool never ran. (Paused clock.)
#[tokio::test(start_paused = true)]
async fn a_claim_that_keeps_lapsing_before_the_tool_starts_ends_after_three_tries() {
    struct SlowClaims(AtomicUsize);
    impl Fault for SlowClaims {
        fn on(&self, op: &Op) -> Then {
            match op {
                Op::Claim { .. } => {
                    self.0.fetch_add(1, Ordering::SeqCst);
                    Then::Delayed(Duration::from_millis(150))
                }
                Op::Renew { .. } => Then::Fail("journal unreachable"),
                _ => Then::Forward,
            }
        }
    }
    let journal = journal_on_tokio_clock(SlowClaims(AtomicUsize::new(0)));
    let config = EngineConfig {
        lease: Duration::from_millis(100),
        poll_interval: Duration::from_millis(2),
    };
    let engine = Engine::with_config(journal.clone(), config).with_store_retry(Duration::from_millis(10));
    let down = Arc::new(Downstream::default());
    let script = Script::new(&down, &[Step::Ok]);
    let tool = Sync(script.clone());
    let r = run("r1");
    let call = engine.call(&tool, &r, CallOptions::default(), "ann".into());
    let err = tokio::time::timeout(Duration::from_secs(60), call)
        .await
        .expect("the call gives up instead of claiming forever")
        .unwrap_err();
    assert!(matches!(err, EffectError::ClaimLost { .. }), "{err}");
    assert_eq!(journal.0.load(Ordering::SeqCst), 3, "three claims, each lapsed");
    assert_eq!((script.executions(), down.requests()), (0, 0));
}

/// If the claim is lost anyway while `recover` runs (renewals fail), the engine does not run
/// the tool on a claim that is no longer its own: it looks again and shares the newer result.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_claim_lost_during_recover_is_not_run_on() {
    let down = Arc::new(Downstream::default());
    let script = Script::new(&down, &[Step::Ok]);
    script.held_recovers.store(1, Ordering::SeqCst);
    let tool = Post(script.clone());
    let mem: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let flaky = flaky_renew(mem.clone());
    flaky.fail.store(true, Ordering::SeqCst);
    let ea = short_engine(flaky.clone());
    let eb = short_engine(mem.clone());
    let key = crashed_claim(&ea, &tool, &run("r1"), &"ann".to_owned()).await;
    let ta = {
        let (ea, tool) = (ea.clone(), tool.clone());
        tokio::spawn(async move {
            ea.call_with_report(&tool, &run("r1"), CallOptions::default(), "ann".into())
                .await
        })
    };
    script.started.notified().await;
    until_stale(&*mem, &key).await; // A's renewals fail: its lease runs out
    let rb = eb
        .call_with_report(&tool, &run("r1"), CallOptions::default(), "ann".into())
        .await;
    assert_eq!(
        rb.disposition,
        Disposition::Executed,
        "B took the stale claim over: {rb:?}"
    );
    flaky.fail.store(false, Ordering::SeqCst);
    script.recover_hold.add_permits(1);
    let ra = ta.await.unwrap();
    assert_eq!(down.requests(), 1, "A must not run on a lost claim: {ra:?}");
    assert_eq!(ra.result.unwrap(), rb.result.unwrap());
    assert_eq!(ra.disposition, Disposition::Replayed);
}

// ---------------------------------------------------------------------------------------------
// A person's verdict against live and stale attempts
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_live_claim_cannot_be_resolved_and_a_stale_one_fences_its_late_writer() {
    let down = Arc::new(Downstream::default());
    let script = Script::new(&down, &[Step::HoldThenOk]);
    let tool = Charge(script.clone());
    let mem: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let flaky = flaky_renew(mem.clone());
    let engine = short_engine(flaky.clone());
    let task = {
        let (engine, tool) = (engine.clone(), tool.clone());
        tokio::spawn(async move {
            engine
                .call(&tool, &run("r1"), CallOptions::default(), "ann".into())
                .await
        })
    };
    script.started.notified().await;
    let key = key_of(&tool, &run("r1"), &"ann".to_owned());

    // Live: a person cannot decide for a running attempt.
    let err = mem
        .resolve(&key, "ops", Verdict::NotApplied)
        .await
        .expect_err("a live claim is not resolvable");
    assert!(err.to_string().contains("live claim"), "{err}");
    assert!(err.to_string().contains(&key), "{err}");

    // The attempt stalls (its renewals fail) and its lease runs out: a person may now decide.
    flaky.fail.store(true, Ordering::SeqCst);
    until_stale(&*mem, &key).await;
    mem.resolve(
        &key,
        "ops",
        Verdict::Applied {
            output: serde_json::json!("sent by hand"),
        },
    )
    .await
    .unwrap();

    // The stalled attempt is stopped at its lease's deadline by the engine's own clock: it never
    // applies its effect, its call says that it lost its claim (not Ok with an output nobody
    // recorded), and the person's verdict stays.
    script.hold.add_permits(1);
    let out = task.await.unwrap();
    assert!(
        matches!(out, Err(EffectError::ClaimLost { finished: false, .. })),
        "a stalled attempt's call says that it lost its claim: {out:?}"
    );
    assert_eq!(down.requests(), 0, "the stalled attempt acted after its lease lapsed");
    let rec = mem.get(&key).await.unwrap().unwrap();
    assert_eq!(rec.state, RecordState::Completed);
    assert_eq!(
        rec.output,
        Some(serde_json::json!("sent by hand")),
        "a late writer overwrote a person's verdict"
    );
    assert_eq!(rec.decided_by.as_deref(), Some("ops"));
    // The next call replays the verdict; nothing runs again.
    let again = engine
        .call(&tool, &run("r1"), CallOptions::default(), "ann".into())
        .await
        .unwrap();
    assert_eq!(again, "sent by hand");
    assert_eq!(script.executions(), 1);
}

/// A person resolves a record in doubt while an engine takes it over (an idempotent re-run):
/// whichever wins, the journal ends with exactly the effect it says, and nothing is lost.
async fn resolve_racing_a_takeover(a: Arc<dyn Store>, b: Arc<dyn Store>) {
    for round in 0..12 {
        let down = Arc::new(Downstream::default());
        let script = Script::new(&down, &[Step::Ok]);
        let tool = Sync(script.clone());
        let engine = short_engine(a.clone());
        let r = run(&format!("race-{round}"));
        let key = crashed_claim(&engine, &tool, &r, &"ann".to_owned()).await;
        // attempt 2 takes over and leaves the record in doubt (an unknown outcome, nothing applied).
        let intent = intent_for("Sync", Idempotent, None);
        let OpOutcome::Claimed { attempt, .. } = b.claim(&key, intent, 60_000, true).await.unwrap() else {
            panic!()
        };
        b.mark_in_doubt(&key, attempt, "timed out".into()).await.unwrap();

        let applied = round % 2 == 0;
        let verdict = if applied {
            Verdict::Applied {
                output: serde_json::json!("by hand"),
            }
        } else {
            Verdict::NotApplied
        };
        let barrier = Arc::new(tokio::sync::Barrier::new(2));
        let person = {
            let (b, key, barrier) = (b.clone(), key.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                b.resolve(&key, "ops", verdict).await
            })
        };
        let call = {
            let (engine, tool, barrier, r) = (engine.clone(), tool.clone(), barrier.clone(), r.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                engine.call(&tool, &r, CallOptions::default(), "ann".into()).await
            })
        };
        let verdict_taken = person.await.unwrap();
        let out = call.await.unwrap().expect("the call succeeds either way");
        let rec = a.get(&key).await.unwrap().unwrap();
        assert_eq!(rec.state, RecordState::Completed, "round {round}");
        assert_eq!(
            rec.output,
            Some(serde_json::json!(out)),
            "the caller got what is recorded"
        );
        match (&verdict_taken, applied) {
            // The person decided first (or after the run released nothing): the verdict counts.
            (Ok(_), true) => {
                assert_eq!(out, "by hand");
                assert_eq!(down.requests(), 0, "resolved as applied: nothing runs");
            }
            (Ok(_), false) => assert_eq!(down.requests(), 1, "resolved as not applied: it runs once"),
            // The engine took the record over first: the verdict is refused, with a reason.
            (Err(e), _) => {
                assert!(
                    e.to_string().contains("live claim") || e.to_string().contains("completed"),
                    "{e}"
                );
                assert_eq!(down.requests(), 1);
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn resolve_racing_a_takeover_memory() {
    let (a, b) = memory_pair();
    resolve_racing_a_takeover(a, b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn resolve_racing_a_takeover_sqlite() {
    let (_dir, a, b) = sqlite_pair();
    resolve_racing_a_takeover(a, b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn approve_and_deny_at_once_exactly_one_verdict_counts() {
    let down = Arc::new(Downstream::default());
    let engine = short_engine(MemoryStore::new());
    for round in 0..20 {
        let script = Script::new(&down, &[Step::Ok]);
        let tool = Wire(script.clone());
        let r = run(&format!("r{round}"));
        let err = engine
            .call(&tool, &r, CallOptions::default(), "bob".into())
            .await
            .unwrap_err();
        let key = err.as_approval_pending().expect("parked").key.clone();
        let barrier = Arc::new(tokio::sync::Barrier::new(2));
        let approve = {
            let (s, key, barrier) = (engine.store().clone(), key.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                s.approve(
                    &key,
                    "carol",
                    "finance",
                    &s.get(&key).await.unwrap().unwrap().fingerprint,
                )
                .await
            })
        };
        let deny = {
            let (s, key, barrier) = (engine.store().clone(), key.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                s.deny(&key, "dave", Some("unknown vendor".into())).await
            })
        };
        let (approved, denied) = (approve.await.unwrap(), deny.await.unwrap());
        assert!(
            approved.is_ok() != denied.is_ok(),
            "exactly one verdict: {approved:?} {denied:?}"
        );
        assert_eq!(engine.store().audit(Some(&key)).await.unwrap().len(), 1);
        let res = engine.call(&tool, &r, CallOptions::default(), "bob".into()).await;
        if approved.is_ok() {
            assert!(res.is_ok(), "{res:?}");
            assert_eq!(script.executions(), 1);
        } else {
            let err = res.unwrap_err();
            assert!(matches!(err, EffectError::Denied { .. }), "{err}");
            assert!(
                err.to_string().contains("unknown vendor") && err.to_string().contains(&key),
                "{err}"
            );
            assert_eq!(script.executions(), 0);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Approvals
// ---------------------------------------------------------------------------------------------

/// Bug fixed in the engine: a retry within an approved call released the claim and claimed
/// again with the approval requirement, so the call parked for a second approval instead of
/// retrying a transient failure.
#[tokio::test]
async fn an_approved_call_retries_a_transient_failure_without_a_second_approval() {
    let down = Arc::new(Downstream::default());
    let script = Script::new(
        &down,
        &[
            Step::Fail(ToolError::transient("rate limited")),
            Step::Fail(ToolError::transient("rate limited")),
            Step::Ok,
        ],
    );
    let tool = Wire(script.clone());
    let engine = Engine::new(MemoryStore::new());
    let err = engine
        .call(&tool, &run("r1"), CallOptions::default(), "bob".into())
        .await
        .unwrap_err();
    let key = err.as_approval_pending().expect("parked").key.clone();
    assert_eq!(script.executions(), 0);
    engine
        .store()
        .approve(
            &key,
            "carol",
            "finance",
            &engine.store().get(&key).await.unwrap().unwrap().fingerprint,
        )
        .await
        .unwrap();
    let out = engine
        .call(&tool, &run("r1"), CallOptions::default(), "bob".into())
        .await
        .unwrap();
    assert!(out.contains("attempt 3"), "{out}"); // the parked record holds attempt 0; three claims
    assert_eq!((script.executions(), down.requests()), (3, 1));
    let rec = engine.store().get(&key).await.unwrap().unwrap();
    assert_eq!(rec.state, RecordState::Completed);
    let audit = engine.store().audit(Some(&key)).await.unwrap();
    assert_eq!((audit.len(), audit[0].actor.as_str()), (1, "carol"));
}

/// A definitive failure after approval releases the record: the next call needs a new
/// approval (a person approved one attempt at the effect, not every future one).
#[tokio::test]
async fn a_definitive_failure_after_approval_parks_the_next_call_again() {
    let down = Arc::new(Downstream::default());
    let script = Script::new(&down, &[Step::Fail(ToolError::definitive("account closed")), Step::Ok]);
    let tool = Wire(script.clone());
    let engine = Engine::new(MemoryStore::new());
    let key = engine
        .call(&tool, &run("r1"), CallOptions::default(), "bob".into())
        .await
        .unwrap_err()
        .key()
        .unwrap()
        .to_owned();
    engine
        .store()
        .approve(
            &key,
            "carol",
            "finance",
            &engine.store().get(&key).await.unwrap().unwrap().fingerprint,
        )
        .await
        .unwrap();
    let err = engine
        .call(&tool, &run("r1"), CallOptions::default(), "bob".into())
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            EffectError::Tool {
                failure: Failure::Definitive,
                ..
            }
        ),
        "{err}"
    );
    let again = engine
        .call(&tool, &run("r1"), CallOptions::default(), "bob".into())
        .await
        .unwrap_err();
    assert!(again.as_approval_pending().is_some(), "{again}");
    assert_eq!((script.executions(), down.requests()), (1, 0));
}

mod declared {
    use super::*;

    pub static WIRES: AtomicUsize = AtomicUsize::new(0);
    pub static KEYED_WIRES: AtomicUsize = AtomicUsize::new(0);

    /// Wire money; large amounts need finance's approval.
    #[effect_tool::tool(effect = "irreversible", approval = "finance", when = |a| a.amount >= 1000)]
    pub async fn wire(to: String, amount: u64) -> Result<String, ToolError> {
        WIRES.fetch_add(1, Ordering::SeqCst);
        Ok(format!("wired {amount} to {to}"))
    }

    /// Wire money, keyed by invoice.
    #[effect_tool::tool(effect = "irreversible", key(invoice), approval = "finance", when = |a| a.amount >= 1000)]
    pub async fn wire_invoice(invoice: String, amount: u64) -> Result<String, ToolError> {
        KEYED_WIRES.fetch_add(1, Ordering::SeqCst);
        Ok(format!("paid {invoice}: {amount}"))
    }
}

/// `approval` with a `when` condition, and re-plans of a parked call under new tool-call ids.
#[tokio::test]
async fn approval_with_a_condition_and_replans_of_a_parked_call() {
    use declared::*;
    let engine = Engine::new(MemoryStore::new());
    let r = run("r1");
    let small = WireArgs {
        to: "ann".into(),
        amount: 10,
    };
    let big = WireArgs {
        to: "bob".into(),
        amount: 5000,
    };
    engine.call(&Wire, &r, CallOptions::call_id("c0"), small).await.unwrap();
    assert_eq!(WIRES.load(Ordering::SeqCst), 1, "below the condition: no approval");

    let parked = engine
        .call(&Wire, &r, CallOptions::call_id("c1"), big.clone())
        .await
        .unwrap_err();
    let key = parked.as_approval_pending().expect("parked").key.clone();
    // The model re-plans the same call under new ids while it waits: still one parked record.
    for id in ["c2", "c3"] {
        let again = engine
            .call(&Wire, &r, CallOptions::call_id(id), big.clone())
            .await
            .unwrap_err();
        assert_eq!(again.as_approval_pending().map(|p| p.key.as_str()), Some(key.as_str()));
    }
    assert_eq!(WIRES.load(Ordering::SeqCst), 1);
    engine
        .store()
        .approve(
            &key,
            "carol",
            "finance",
            &engine.store().get(&key).await.unwrap().unwrap().fingerprint,
        )
        .await
        .unwrap();
    let out = engine
        .call(&Wire, &r, CallOptions::call_id("c1"), big.clone())
        .await
        .unwrap();
    assert_eq!(out, "wired 5000 to bob");
    // The same call id again: its result. A new id with identical args on an unkeyed
    // irreversible tool: a person decides (nothing tells a re-plan from a second wire).
    let same = engine
        .call(&Wire, &r, CallOptions::call_id("c1"), big.clone())
        .await
        .unwrap();
    assert_eq!(same, out);
    let replan = engine
        .call(&Wire, &r, CallOptions::call_id("c4"), big.clone())
        .await
        .unwrap_err();
    assert_eq!(
        replan.as_blocked().map(|b| &b.reason),
        Some(&BlockReason::IdenticalReplan)
    );
    assert_eq!(WIRES.load(Ordering::SeqCst), 2, "the approved wire ran once");

    // Keyed by invoice: a re-plan with another call id (and other wording) gets the first result.
    let inv = |amount| WireInvoiceArgs {
        invoice: "inv-7".into(),
        amount,
    };
    let key = engine
        .call(&WireInvoice, &r, CallOptions::call_id("k1"), inv(2000))
        .await
        .unwrap_err()
        .key()
        .unwrap()
        .to_owned();
    engine
        .store()
        .approve(
            &key,
            "carol",
            "finance",
            &engine.store().get(&key).await.unwrap().unwrap().fingerprint,
        )
        .await
        .unwrap();
    let first = engine
        .call(&WireInvoice, &r, CallOptions::call_id("k2"), inv(2000))
        .await
        .unwrap();
    let replan = engine
        .call(&WireInvoice, &r, CallOptions::call_id("k3"), inv(2000))
        .await
        .unwrap();
    assert_eq!(first, replan);
    assert_eq!(KEYED_WIRES.load(Ordering::SeqCst), 1);
}

// ---------------------------------------------------------------------------------------------
// In-process sharing
// ---------------------------------------------------------------------------------------------

/// 1,000 identical calls join a leader that fails: each follower gets the leader's failure,
/// with its kind, key and tool, and the tool ran once per leader.
async fn thousand_followers_and_a_failing_leader(step: Step, check: fn(&EffectError<ToolError>)) {
    let down = Arc::new(Downstream::default());
    let script = Script::new(&down, &[step]);
    let tool = Charge(script.clone());
    let engine = short_engine(MemoryStore::new());
    let joined = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..1000 {
        let (engine, tool, joined) = (engine.clone(), tool.clone(), joined.clone());
        tasks.push(tokio::spawn(async move {
            joined.fetch_add(1, Ordering::SeqCst);
            engine
                .call(&tool, &run("r1"), CallOptions::default(), "ann".into())
                .await
        }));
    }
    let mut leaders = 0;
    let mut shared = 0;
    for t in tasks {
        let err = t.await.unwrap().expect_err("the leader failed");
        check(&err);
        assert!(err.to_string().contains("Charge"), "{err}");
        match &err {
            EffectError::SharedFailure { key, .. } => {
                shared += 1;
                assert!(err.to_string().contains(key.as_str()));
            }
            _ => leaders += 1,
        }
    }
    assert_eq!(joined.load(Ordering::SeqCst), 1000);
    assert!(leaders >= 1);
    assert_eq!(leaders + shared, 1000);
    assert!(
        script.executions() <= leaders,
        "{} executions, {leaders} leaders",
        script.executions()
    );
    assert_eq!(down.requests(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn thousand_followers_and_a_leader_failing_definitively() {
    thousand_followers_and_a_failing_leader(Step::Fail(ToolError::definitive("card declined")), |e| match e {
        EffectError::Tool { failure, .. } | EffectError::SharedFailure { failure, .. } => {
            assert_eq!(*failure, Failure::Definitive, "{e}");
            assert!(e.to_string().contains("card declined"), "{e}");
        }
        other => panic!("{other}"),
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn thousand_followers_and_a_leader_with_an_unknown_outcome() {
    // Irreversible + unknown: the leader blocks, every follower is blocked too (never run).
    let down = Arc::new(Downstream::default());
    let script = Script::new(&down, &[Step::Fail(ToolError::unknown("reset after sending"))]);
    let tool = Charge(script.clone());
    let engine = short_engine(MemoryStore::new());
    let mut tasks = Vec::new();
    for _ in 0..1000 {
        let (engine, tool) = (engine.clone(), tool.clone());
        tasks.push(tokio::spawn(async move {
            engine
                .call(&tool, &run("r1"), CallOptions::default(), "ann".into())
                .await
        }));
    }
    for t in tasks {
        let err = t.await.unwrap().expect_err("blocked");
        let b = err.as_blocked().unwrap_or_else(|| panic!("{err}"));
        assert!(matches!(
            b.reason,
            BlockReason::UnknownOutcome | BlockReason::AwaitingResolution
        ));
        assert_eq!(b.tool, "Charge");
        assert!(err.to_string().contains(&b.key) && err.to_string().contains("effect-tool resolve"));
    }
    assert_eq!(script.executions(), 1, "never a second run of an unknown outcome");
}

/// Bug fixed in the engine: a follower in another run (thread or cross-run window) whose
/// leader's run was cancelled got the leader's `Interrupted` error although its own run was
/// not cancelled. It now takes over: an idempotent tool runs again with the same key; an
/// irreversible one is blocked (the record is in doubt).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_follower_in_another_run_takes_over_from_a_cancelled_leader() {
    async fn case<T: Tool<Args = String, Output = String, Error = ToolError> + Clone>(
        tool: T,
        script: Arc<Script>,
    ) -> Result<String, EffectError<ToolError>> {
        let engine = short_engine(MemoryStore::new());
        let r1 = run("r1").with_thread("t");
        let r2 = run("r2").with_thread("t");
        let leader = {
            let (engine, tool, r1) = (engine.clone(), tool.clone(), r1.clone());
            tokio::spawn(async move { engine.call(&tool, &r1, CallOptions::default(), "ann".into()).await })
        };
        script.started.notified().await;
        let joined = Arc::new(Notify::new());
        let follower = {
            let (engine, tool, r2, joined) = (engine.clone(), tool.clone(), r2.clone(), joined.clone());
            tokio::spawn(async move {
                let call = engine.call(&tool, &r2, CallOptions::default(), "ann".into());
                let mut call = std::pin::pin!(call);
                // First poll: the follower joins the leader's slot.
                let first = futures::poll!(call.as_mut());
                assert!(first.is_pending());
                joined.notify_one();
                call.await
            })
        };
        joined.notified().await;
        r1.cancel();
        let l = leader.await.unwrap().unwrap_err();
        assert!(matches!(l, EffectError::Interrupted { .. }), "{l}");
        follower.await.unwrap()
    }

    let down = Arc::new(Downstream::default());
    let script = Script::new(&down, &[Step::HoldThenOk, Step::Ok]);
    let out = case(ThreadSync(script.clone()), script.clone()).await;
    assert!(
        out.unwrap().contains("attempt 2"),
        "an idempotent follower re-runs with the same key"
    );
    assert_eq!(down.requests(), 1);

    let down = Arc::new(Downstream::default());
    let script = Script::new(&down, &[Step::HoldThenOk, Step::Ok]);
    let err = case(ThreadMail(script.clone()), script.clone()).await.unwrap_err();
    assert_eq!(
        err.as_blocked().map(|b| &b.reason),
        Some(&BlockReason::AwaitingResolution),
        "{err}"
    );
    assert_eq!(script.executions(), 1);
    assert_eq!(down.requests(), 0);
}

/// A follower that joined a leader which then succeeded shares the leader's result: it is told
/// `Shared`, and never claims the key itself (a follower that took the leader's place instead
/// would find the record and report `Replayed`).
#[tokio::test]
async fn a_follower_of_a_leader_that_succeeds_shares_its_result() {
    let down = Arc::new(Downstream::default());
    let script = Script::new(&down, &[Step::HoldThenOk]);
    let tool = Charge(script.clone());
    let engine = short_engine(MemoryStore::new());
    let r = run("r1");
    let leader = {
        let (engine, tool, r) = (engine.clone(), tool.clone(), r.clone());
        tokio::spawn(async move {
            engine
                .call_with_report(&tool, &r, CallOptions::default(), "ann".into())
                .await
        })
    };
    script.started.notified().await;
    let call = engine.call_with_report(&tool, &r, CallOptions::default(), "ann".into());
    let mut call = std::pin::pin!(call);
    // The leader is executing, so its slot is there: the first poll joins it.
    assert!(futures::poll!(call.as_mut()).is_pending());
    script.hold.add_permits(1);
    let led = leader.await.unwrap();
    let followed = call.await;
    assert_eq!(led.disposition, Disposition::Executed);
    assert_eq!(followed.result.unwrap(), led.result.unwrap());
    assert_eq!(followed.disposition, Disposition::Shared);
    assert_eq!((script.executions(), down.requests()), (1, 1));
}

/// Holds every claim at a gate until the test lets it through, and says when one arrived.
struct GatedClaims {
    gate: Arc<Semaphore>,
    reached: Notify,
}

impl Fault for GatedClaims {
    fn on(&self, op: &Op) -> Then {
        if matches!(op, Op::Claim { .. }) {
            self.reached.notify_one();
            Then::Gated(self.gate.clone())
        } else {
            Then::Forward
        }
    }
}

/// A follower in another run (a thread window shares the key across runs) whose leader parks
/// the call for a person's approval is told that its own run waits: the `ApprovalPending` it
/// gets names its run, not the leader's.
#[tokio::test]
async fn a_follower_in_another_run_is_told_that_its_own_run_awaits_approval() {
    let down = Arc::new(Downstream::default());
    let script = Script::new(&down, &[Step::Ok]);
    let tool = ThreadWire(script.clone());
    let journal = Faulty::new(
        Arc::new(MemoryStore::new()),
        GatedClaims {
            gate: Arc::new(Semaphore::new(0)),
            reached: Notify::new(),
        },
    );
    let engine = short_engine(journal.clone());
    let (r1, r2) = (run("r1").with_thread("t"), run("r2").with_thread("t"));
    let leader = {
        let (engine, tool, r1) = (engine.clone(), tool.clone(), r1.clone());
        tokio::spawn(async move { engine.call(&tool, &r1, CallOptions::default(), "ann".into()).await })
    };
    // The leader's claim (the write that parks the call) is held: its slot is there.
    journal.reached.notified().await;
    let call = engine.call_with_report(&tool, &r2, CallOptions::default(), "ann".into());
    let mut call = std::pin::pin!(call);
    assert!(futures::poll!(call.as_mut()).is_pending());
    journal.gate.add_permits(1);
    let led = leader.await.unwrap().unwrap_err();
    let followed = call.await;
    let led = led.as_approval_pending().expect("the leader parks the call");
    assert_eq!((led.run_id.as_str(), led.role.as_str()), ("r1", "finance"));
    let err = followed.result.unwrap_err();
    let pending = err.as_approval_pending().unwrap_or_else(|| panic!("{err}"));
    assert_eq!(pending.run_id, "r2", "the follower's own run waits");
    assert_eq!(
        (pending.key.as_str(), pending.role.as_str()),
        (led.key.as_str(), "finance")
    );
    assert_eq!(followed.disposition, Disposition::AwaitingApproval);
    assert_eq!((script.executions(), down.requests()), (0, 0));
}

// ---------------------------------------------------------------------------------------------
// ttl and windows
// ---------------------------------------------------------------------------------------------

/// An idempotent note in a thread window whose results are kept for `TTL_MS`.
struct Note<const TTL_MS: u64>(Arc<Script>);

impl<const TTL_MS: u64> Tool for Note<TTL_MS> {
    type Args = String;
    type Output = String;
    type Error = ToolError;
    const NAME: &'static str = "note";
    const CLASS: EffectClass = EffectClass::Idempotent;
    const WINDOW: Window = Window::Thread;
    const TTL: Option<Duration> = Some(Duration::from_millis(TTL_MS));
    async fn call(&self, ctx: &EffectCtx, to: String) -> Result<String, ToolError> {
        self.0.run(ctx, &to).await
    }
}

#[tokio::test]
async fn ttl_and_window_edges() {
    let down = Arc::new(Downstream::default());
    let script = Script::new(&down, &[Step::Ok]);
    let tool = Note::<30>(script.clone());
    let engine = Engine::new(MemoryStore::new());
    // A thread window on a run without a thread falls back to the run.
    let no_thread = run("r1");
    let k = key_of(&tool, &no_thread, &"a".to_owned());
    assert!(k.starts_with("r1:note:"), "{k}");
    engine
        .call(&tool, &no_thread, CallOptions::default(), "a".into())
        .await
        .unwrap();
    engine
        .call(&tool, &no_thread, CallOptions::default(), "a".into())
        .await
        .unwrap();
    assert_eq!(script.executions(), 1, "within the ttl: replayed");
    // Another run without a thread: its own key.
    engine
        .call(&tool, &run("r2"), CallOptions::default(), "a".into())
        .await
        .unwrap();
    assert_eq!(script.executions(), 2);
    // Past the ttl: a new effect, under a new fencing token.
    let rec = engine.store().get(&k).await.unwrap().unwrap();
    let expires = rec.expires_at.expect("ttl recorded");
    while engine.store().now() <= expires {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let out = engine
        .call(&tool, &no_thread, CallOptions::default(), "a".into())
        .await
        .unwrap();
    assert!(out.contains("attempt 2"), "{out}");
    assert_eq!(script.executions(), 3);
    // gc drops the expired record of r2, never the fresh one of r1.
    let r2_key = key_of(&tool, &run("r2"), &"a".to_owned());
    let r2_expires = engine.store().get(&r2_key).await.unwrap().unwrap().expires_at.unwrap();
    while engine.store().now() <= r2_expires {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let dropped = engine.store().gc(r2_expires + 1).await.unwrap();
    assert!(dropped >= 1);
    assert!(engine.store().get(&r2_key).await.unwrap().is_none());
    assert!(engine.store().get(&k).await.unwrap().is_some());
}

/// A recorded result with a ttl not yet reached is replayed from the engine's first look at its
/// key, as one without a ttl is: no claim is sent (on a durable journal a claim is a trip to
/// the write path). Once the first call has recorded, every claim fails here, so a replay that
/// went through a claim would fail the call.
#[tokio::test]
async fn a_recorded_result_within_its_ttl_is_replayed_without_a_claim() {
    let down = Arc::new(Downstream::default());
    let script = Script::new(&down, &[Step::Ok]);
    let tool = Note::<3_600_000>(script.clone());
    let claims = |op: &Op| matches!(op, Op::Claim { .. });
    let store = Faulty::new(
        Arc::new(MemoryStore::new()),
        FailWhen::new(claims, "claims are refused from now on", false),
    );
    let engine = Engine::new(store.clone());
    let r = run("r1");
    let first = engine
        .call(&tool, &r, CallOptions::default(), "a".into())
        .await
        .unwrap();
    let rec = store.get(&key_of(&tool, &r, &"a".to_owned())).await.unwrap().unwrap();
    assert!(rec.expires_at.is_some(), "the ttl is recorded");
    store.fail.store(true, Ordering::SeqCst);
    let again = engine
        .call_with_report(&tool, &r, CallOptions::default(), "a".into())
        .await;
    assert_eq!(again.disposition, Disposition::Replayed);
    assert_eq!(again.result.unwrap(), first);
    assert_eq!((script.executions(), down.requests()), (1, 1));
}

// ---------------------------------------------------------------------------------------------
// Compensation
// ---------------------------------------------------------------------------------------------

struct Hotel {
    booked: AtomicUsize,
    cancelled: AtomicUsize,
    started: Notify,
    hold: Semaphore,
    held: std::sync::atomic::AtomicBool,
}

impl Default for Hotel {
    fn default() -> Self {
        Hotel {
            booked: AtomicUsize::new(0),
            cancelled: AtomicUsize::new(0),
            started: Notify::new(),
            hold: Semaphore::new(0),
            held: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

struct Book(Arc<Hotel>);

impl Tool for Book {
    type Args = String;
    type Output = String;
    type Error = ToolError;
    const NAME: &'static str = "book";
    const CLASS: EffectClass = EffectClass::Compensable;
    const HAS_COMPENSATE: bool = true;
    async fn call(&self, _ctx: &EffectCtx, room: String) -> Result<String, ToolError> {
        self.0.booked.fetch_add(1, Ordering::SeqCst);
        Ok(format!("booking-{room}"))
    }
    async fn compensate(&self, _ctx: &EffectCtx, _room: &String, _booking: &String) -> Result<(), ToolError> {
        if self.0.held.swap(false, Ordering::SeqCst) {
            self.0.started.notify_one();
            self.0.hold.acquire().await.unwrap().forget();
        }
        self.0.cancelled.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

/// Two abandonments of one run at once (two operators, two processes): every compensation
/// runs once.
async fn abandon_twice_concurrently(a: Arc<dyn Store>, b: Arc<dyn Store>) {
    let hotel = Arc::new(Hotel::default());
    let tool = Arc::new(Book(hotel.clone()));
    let (ea, eb) = (short_engine(a), short_engine(b));
    let r = run("trip");
    for room in ["1", "2", "3", "4"] {
        ea.call(&*tool, &r, CallOptions::default(), room.into()).await.unwrap();
    }
    let tools: Vec<Arc<dyn DynTool>> = vec![tool.clone()];
    let barrier = Arc::new(tokio::sync::Barrier::new(2));
    let abandon = |engine: Engine| {
        let (tools, r, barrier) = (tools.clone(), r.clone(), barrier.clone());
        tokio::spawn(async move {
            barrier.wait().await;
            engine.abandon_run(&r, &tools).await.unwrap()
        })
    };
    let (ta, tb) = (abandon(ea.clone()), abandon(eb));
    let (ra, rb) = (ta.await.unwrap(), tb.await.unwrap());
    assert!(ra.is_complete() && rb.is_complete(), "{ra:?} {rb:?}");
    assert_eq!(ra.compensated.len() + rb.compensated.len(), 4, "{ra:?} {rb:?}");
    assert_eq!(
        hotel.cancelled.load(Ordering::SeqCst),
        4,
        "every booking cancelled once"
    );
    let done = ea
        .store()
        .list(&Filter {
            run_id: Some("trip".into()),
            states: vec![RecordState::Compensated],
            ..Filter::default()
        })
        .await
        .unwrap();
    assert_eq!(done.len(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn abandon_twice_concurrently_memory() {
    let (a, b) = memory_pair();
    abandon_twice_concurrently(a, b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn abandon_twice_concurrently_sqlite() {
    let (_dir, a, b) = sqlite_pair();
    abandon_twice_concurrently(a, b).await;
}

/// A compensation slower than the lease keeps its claim: a second abandonment waits for it
/// instead of taking it over and cancelling the booking a second time.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_slow_compensation_is_not_run_twice() {
    let hotel = Arc::new(Hotel::default());
    let tool = Arc::new(Book(hotel.clone()));
    let engine = short_engine(MemoryStore::new());
    let r = run("trip");
    engine
        .call(&*tool, &r, CallOptions::default(), "1".into())
        .await
        .unwrap();
    hotel.held.store(true, Ordering::SeqCst);
    let tools: Vec<Arc<dyn DynTool>> = vec![tool.clone()];
    let first = {
        let (engine, tools, r) = (engine.clone(), tools.clone(), r.clone());
        tokio::spawn(async move { engine.abandon_run(&r, &tools).await.unwrap() })
    };
    hotel.started.notified().await;
    tokio::time::sleep(short().lease * 3).await;
    let second = {
        let (engine, tools, r) = (engine.clone(), tools.clone(), r.clone());
        tokio::spawn(async move { engine.abandon_run(&r, &tools).await.unwrap() })
    };
    tokio::time::sleep(short().lease * 3).await;
    hotel.hold.add_permits(1);
    let (a, b) = (first.await.unwrap(), second.await.unwrap());
    assert_eq!(
        hotel.cancelled.load(Ordering::SeqCst),
        1,
        "cancelled twice: {a:?} {b:?}"
    );
    assert_eq!(a.compensated.len() + b.compensated.len(), 1);
}

/// A new call of a key while its compensation runs, and after: never a second booking.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn compensation_racing_a_new_call_of_the_same_key() {
    let hotel = Arc::new(Hotel::default());
    let tool = Arc::new(Book(hotel.clone()));
    let engine = short_engine(MemoryStore::new());
    let r = run("trip");
    let booking = engine
        .call(&*tool, &r, CallOptions::default(), "1".into())
        .await
        .unwrap();
    hotel.held.store(true, Ordering::SeqCst);
    let tools: Vec<Arc<dyn DynTool>> = vec![tool.clone()];
    let abandon = {
        let (engine, tools, r) = (engine.clone(), tools.clone(), r.clone());
        tokio::spawn(async move { engine.abandon_run(&r, &tools).await.unwrap() })
    };
    hotel.started.notified().await;
    // While the cancellation runs, the booking still exists: the call returns it, nothing runs.
    let during = engine
        .call(&*tool, &r, CallOptions::default(), "1".into())
        .await
        .unwrap();
    assert_eq!(during, booking);
    hotel.hold.add_permits(1);
    assert_eq!(abandon.await.unwrap().compensated.len(), 1);
    let after = engine
        .call(&*tool, &r, CallOptions::default(), "1".into())
        .await
        .unwrap_err();
    assert!(matches!(after, EffectError::Compensated { .. }), "{after}");
    assert!(
        after.to_string().contains("book") && after.to_string().contains("new run"),
        "{after}"
    );
    assert_eq!(hotel.booked.load(Ordering::SeqCst), 1);
    assert_eq!(hotel.cancelled.load(Ordering::SeqCst), 1);
}

/// Bug fixed in the engine: with a custom key, an identical-key call with a *different* input
/// that joined a running leader in this process got the leader's result even when the tool
/// asks for strict inputs (across processes the same call got `InputMismatch`). It now gets
/// what a replay would give it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_follower_with_another_input_under_a_strict_custom_key_is_told() {
    #[derive(Clone)]
    struct Invoice(Arc<Script>);
    impl Tool for Invoice {
        type Args = (String, String);
        type Output = String;
        type Error = ToolError;
        const NAME: &'static str = "invoice";
        const CLASS: EffectClass = EffectClass::Idempotent;
        const KEY_RULE: effect_tool::KeyRule = effect_tool::KeyRule::Custom("|a| a.0.clone()");
        const STRICT_INPUT: bool = true;
        fn key(&self, args: &(String, String)) -> Option<String> {
            Some(args.0.clone())
        }
        async fn call(&self, ctx: &EffectCtx, args: (String, String)) -> Result<String, ToolError> {
            self.0.run(ctx, &args.1).await
        }
    }
    let down = Arc::new(Downstream::default());
    let script = Script::new(&down, &[Step::HoldThenOk]);
    let tool = Invoice(script.clone());
    let engine = short_engine(MemoryStore::new());
    let leader = {
        let (engine, tool) = (engine.clone(), tool.clone());
        tokio::spawn(async move {
            engine
                .call(
                    &tool,
                    &run("r1"),
                    CallOptions::default(),
                    ("inv-1".into(), "ann".into()),
                )
                .await
        })
    };
    script.started.notified().await;
    let joined = Arc::new(Notify::new());
    let follower = {
        let (engine, tool, joined) = (engine.clone(), tool.clone(), joined.clone());
        tokio::spawn(async move {
            let r1 = run("r1");
            let call = engine.call(&tool, &r1, CallOptions::default(), ("inv-1".into(), "bob".into()));
            let mut call = std::pin::pin!(call);
            assert!(futures::poll!(call.as_mut()).is_pending());
            joined.notify_one();
            call.await
        })
    };
    joined.notified().await;
    script.hold.add_permits(1);
    leader.await.unwrap().unwrap();
    let err = follower.await.unwrap().unwrap_err();
    assert!(matches!(err, EffectError::InputMismatch { .. }), "{err}");
    assert!(
        err.to_string().contains("inv-1") && err.to_string().contains("invoice"),
        "{err}"
    );
    // The same call made afterwards (a replay) says the same.
    let replay = engine
        .call(
            &tool,
            &run("r1"),
            CallOptions::default(),
            ("inv-1".into(), "bob".into()),
        )
        .await
        .unwrap_err();
    assert!(matches!(replay, EffectError::InputMismatch { .. }), "{replay}");
    assert_eq!(down.requests(), 1);
}

/// Abandoning a run while one of its compensable effects is still running (or in doubt) does
/// not report the abandonment complete: the effect is listed as pending, and abandoning again
/// once it has landed undoes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn abandon_reports_effects_still_running_or_in_doubt() {
    #[derive(Clone)]
    struct Reserve(Arc<Script>, Arc<AtomicUsize>);
    impl Tool for Reserve {
        type Args = String;
        type Output = String;
        type Error = ToolError;
        const NAME: &'static str = "reserve";
        const CLASS: EffectClass = EffectClass::Compensable;
        const HAS_COMPENSATE: bool = true;
        async fn call(&self, ctx: &EffectCtx, room: String) -> Result<String, ToolError> {
            self.0.run(ctx, &room).await
        }
        async fn compensate(&self, _ctx: &EffectCtx, _room: &String, _out: &String) -> Result<(), ToolError> {
            self.1.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
    }
    let down = Arc::new(Downstream::default());
    let script = Script::new(&down, &[Step::HoldThenOk]);
    let undone = Arc::new(AtomicUsize::new(0));
    let tool = Arc::new(Reserve(script.clone(), undone.clone()));
    let engine = short_engine(MemoryStore::new());
    let r = run("trip");
    let running = {
        let (engine, tool, r) = (engine.clone(), tool.clone(), r.clone());
        tokio::spawn(async move { engine.call(&*tool, &r, CallOptions::default(), "101".into()).await })
    };
    script.started.notified().await;
    let tools: Vec<Arc<dyn DynTool>> = vec![tool.clone()];
    let report = engine.abandon_run(&r, &tools).await.unwrap();
    assert!(!report.is_complete(), "{report:?}");
    assert_eq!(report.pending.len(), 1, "{report:?}");
    script.hold.add_permits(1);
    running.await.unwrap().unwrap();
    let report = engine.abandon_run(&r, &tools).await.unwrap();
    assert!(report.is_complete(), "{report:?}");
    assert_eq!(report.compensated.len(), 1);
    assert_eq!((down.requests(), undone.load(Ordering::SeqCst)), (1, 1));
}

/// A compensation that panics is reported as failed (the abandonment does not panic) and is
/// run again by the next abandonment, once.
#[tokio::test]
async fn a_panicking_compensation_is_reported_and_retried() {
    struct Flaky(Arc<AtomicUsize>, Arc<AtomicUsize>);
    impl Tool for Flaky {
        type Args = String;
        type Output = String;
        type Error = ToolError;
        const NAME: &'static str = "flaky_reserve";
        const CLASS: EffectClass = EffectClass::Compensable;
        const HAS_COMPENSATE: bool = true;
        async fn call(&self, _ctx: &EffectCtx, room: String) -> Result<String, ToolError> {
            Ok(room)
        }
        async fn compensate(&self, _ctx: &EffectCtx, _room: &String, _out: &String) -> Result<(), ToolError> {
            if self.0.fetch_add(1, Ordering::SeqCst) == 0 {
                panic!("hotel client bug");
            }
            self.1.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
    }
    let (tries, undone) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let tool = Arc::new(Flaky(tries.clone(), undone.clone()));
    let engine = short_engine(MemoryStore::new());
    let r = run("trip");
    engine
        .call(&*tool, &r, CallOptions::default(), "7".into())
        .await
        .unwrap();
    let tools: Vec<Arc<dyn DynTool>> = vec![tool.clone()];
    let report = engine.abandon_run(&r, &tools).await.unwrap();
    assert_eq!(report.failed.len(), 1, "{report:?}");
    assert!(report.failed[0].1.contains("hotel client bug"), "{report:?}");
    let report = engine.abandon_run(&r, &tools).await.unwrap();
    assert!(report.is_complete(), "{report:?}");
    assert_eq!(report.compensated.len(), 1);
    assert_eq!((tries.load(Ordering::SeqCst), undone.load(Ordering::SeqCst)), (2, 1));
}

// ---------------------------------------------------------------------------------------------
// Error messages
// ---------------------------------------------------------------------------------------------

/// Every effect error a caller can get names the tool and the key, says what happened, and —
/// where a person has something to do — says what.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_effect_error_names_its_tool_and_key_and_the_next_step() {
    struct Slow(AtomicUsize, bool);
    impl Tool for Slow {
        type Args = String;
        type Output = String;
        type Error = ToolError;
        const NAME: &'static str = "slow_sync";
        const CLASS: EffectClass = EffectClass::Idempotent;
        const TIMEOUT: Option<Duration> = Some(Duration::from_millis(5));
        const RETRY: effect_tool::RetryPolicy = effect_tool::RetryPolicy {
            max_attempts: 2,
            base_delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(2),
        };
        async fn call(&self, _ctx: &EffectCtx, _a: String) -> Result<String, ToolError> {
            self.0.fetch_add(1, Ordering::SeqCst);
            if self.1 {
                panic!("driver bug");
            }
            std::future::pending::<()>().await;
            unreachable!()
        }
    }
    let engine = short_engine(MemoryStore::new());
    let down = Arc::new(Downstream::default());
    let mut errors: Vec<(String, EffectError<ToolError>, Option<&str>)> = Vec::new();

    // Blocked: unknown outcome, then awaiting resolution; after a crash; an identical re-plan.
    let charge = Charge(Script::new(&down, &[Step::Fail(ToolError::unknown("reset")), Step::Ok]));
    for _ in 0..2 {
        let e = engine
            .call(&charge, &run("r1"), CallOptions::default(), "a".into())
            .await
            .unwrap_err();
        errors.push(("Charge".into(), e, Some("effect-tool resolve")));
    }
    let crashed = Charge(Script::new(&down, &[Step::Ok]));
    crashed_claim(&engine, &crashed, &run("r1"), &"b".to_owned()).await;
    let e = engine
        .call(&crashed, &run("r1"), CallOptions::default(), "b".into())
        .await
        .unwrap_err();
    errors.push(("Charge".into(), e, Some("effect-tool resolve")));
    engine
        .call(&crashed, &run("r1"), CallOptions::call_id("c1"), "c".into())
        .await
        .unwrap();
    let e = engine
        .call(&crashed, &run("r1"), CallOptions::call_id("c2"), "c".into())
        .await
        .unwrap_err();
    // An identical re-plan: the record stands, nobody is sent to resolve it.
    assert!(!e.to_string().contains("effect-tool resolve"), "{e}");
    errors.push(("Charge".into(), e, Some("Use the earlier call's result")));

    // Approval pending, then denied.
    let wire = Wire(Script::new(&down, &[Step::Ok]));
    let e = engine
        .call(&wire, &run("r1"), CallOptions::default(), "a".into())
        .await
        .unwrap_err();
    let key = e.key().unwrap().to_owned();
    errors.push(("Wire".into(), e, Some("effect-tool approve")));
    engine
        .store()
        .deny(&key, "carol", Some("unknown vendor".into()))
        .await
        .unwrap();
    let e = engine
        .call(&wire, &run("r1"), CallOptions::default(), "a".into())
        .await
        .unwrap_err();
    errors.push(("Wire".into(), e, None));

    // A definitive tool failure, a timeout and a panic of an idempotent tool (retries spent).
    let sync = Sync(Script::new(
        &down,
        &[Step::Fail(ToolError::definitive("account closed"))],
    ));
    let e = engine
        .call(&sync, &run("r1"), CallOptions::default(), "a".into())
        .await
        .unwrap_err();
    errors.push(("Sync".into(), e, None));
    let slow = Slow(AtomicUsize::new(0), false);
    let e = engine
        .call(&slow, &run("r1"), CallOptions::default(), "a".into())
        .await
        .unwrap_err();
    assert!(matches!(e, EffectError::TimedOut { .. }), "{e}");
    errors.push(("slow_sync".into(), e, None));
    let boom = Slow(AtomicUsize::new(0), true);
    let e = engine
        .call(&boom, &run("r1"), CallOptions::default(), "b".into())
        .await
        .unwrap_err();
    assert!(matches!(e, EffectError::Panicked { .. }), "{e}");
    errors.push(("slow_sync".into(), e, None));

    // Cancelled while running (in doubt).
    let script = Script::new(&down, &[Step::HoldThenOk]);
    let held = Charge(script.clone());
    let cancel = run("r9");
    let task = {
        let (engine, held, cancel) = (engine.clone(), held.clone(), cancel.clone());
        tokio::spawn(async move { engine.call(&held, &cancel, CallOptions::default(), "z".into()).await })
    };
    script.started.notified().await;
    cancel.cancel();
    let e = task.await.unwrap().unwrap_err();
    errors.push(("Charge".into(), e, Some("resolves it")));

    // A recorded output that no longer decodes (a person resolved it with the wrong shape).
    let odd = Charge(Script::new(&down, &[Step::Fail(ToolError::unknown("reset"))]));
    let e = engine
        .call(&odd, &run("r1"), CallOptions::default(), "odd".into())
        .await
        .unwrap_err();
    let key = e.key().unwrap().to_owned();
    engine
        .store()
        .resolve(
            &key,
            "ops",
            Verdict::Applied {
                output: serde_json::json!({"id": 7}),
            },
        )
        .await
        .unwrap();
    let e = engine
        .call(&odd, &run("r1"), CallOptions::default(), "odd".into())
        .await
        .unwrap_err();
    assert!(matches!(e, EffectError::Codec { .. }), "{e}");
    errors.push(("Charge".into(), e, None));

    assert_eq!(errors.len(), 11);
    for (tool, e, next) in &errors {
        let text = e.to_string();
        let key = e.key().unwrap_or_else(|| panic!("no key in {e:?}"));
        assert!(text.contains(key), "the message names the key: {text}");
        assert!(
            text.contains(&format!("`{tool}`")),
            "the message names the tool: {text}"
        );
        if let Some(next) = next {
            assert!(text.contains(next), "the message says what to do ({next}): {text}");
        }
    }
}
