//! People in the loop: approvals, denial, compensation of abandoned runs. Effects are counted
//! by ledgers the engine cannot see.

use crate::common;

use std::sync::{Arc, Mutex};

use common::ledger::Downstream;
use effect_tool::{
    CallOptions, DynTool, EffectClass, EffectCtx, EffectError, Engine, MemoryStore, RecordState, RunContext, StoreExt,
    Tool, ToolError,
};

/// Wires money; its outbox (the bank) counts every wire sent.
struct SendWire {
    outbox: Arc<Downstream>,
}

impl Tool for SendWire {
    type Args = (String, u64);
    type Output = String;
    type Error = ToolError;
    const NAME: &'static str = "send_wire";
    const CLASS: EffectClass = EffectClass::Irreversible;
    const APPROVAL: Option<&'static str> = Some("finance");
    const SENSITIVE: &'static [&'static str] = &[];

    fn needs_approval(&self, args: &(String, u64)) -> bool {
        args.1 >= 1000
    }

    async fn call(&self, ctx: &EffectCtx, (to, amount): (String, u64)) -> Result<String, ToolError> {
        self.outbox.apply(&ctx.idempotency_key());
        Ok(format!("wired {amount} to {to}"))
    }
}

#[tokio::test]
async fn approval_parks_the_call_and_an_approved_call_runs_once() {
    let outbox = Arc::new(Downstream::default());
    let tool = SendWire { outbox: outbox.clone() };
    let engine = Engine::new(MemoryStore::new());
    let run = RunContext::new("r1");

    // Below the threshold: no approval needed.
    engine
        .call(&tool, &run, CallOptions::default(), ("ann".into(), 10))
        .await
        .unwrap();
    assert_eq!(outbox.requests(), 1);

    let err = engine
        .call(&tool, &run, CallOptions::default(), ("bob".into(), 5000))
        .await
        .unwrap_err();
    let pending = err.as_approval_pending().expect("parked").clone();
    assert_eq!(pending.role, "finance");
    assert!(err.to_string().contains("effect-tool approve"), "{err}");
    // Asking again does not run it either.
    let again = engine
        .call(&tool, &run, CallOptions::default(), ("bob".into(), 5000))
        .await
        .unwrap_err();
    assert!(again.as_approval_pending().is_some());
    assert_eq!(outbox.requests(), 1);
    let rec = engine.store().get(&pending.key).await.unwrap().unwrap();
    assert_eq!(rec.state, RecordState::AwaitingApproval);
    assert_eq!(rec.input, serde_json::json!(["bob", 5000]));

    let wrong = engine
        .store()
        .approve(&pending.key, "mallory", "intern", &rec.fingerprint)
        .await
        .unwrap_err();
    assert!(wrong.to_string().contains("needs approval by `finance`"), "{wrong}");
    engine
        .store()
        .approve(
            &pending.key,
            "carol",
            "finance",
            &engine.store().get(&pending.key).await.unwrap().unwrap().fingerprint,
        )
        .await
        .unwrap();
    let out = engine
        .call(&tool, &run, CallOptions::default(), ("bob".into(), 5000))
        .await
        .unwrap();
    assert_eq!(out, "wired 5000 to bob");
    engine
        .call(&tool, &run, CallOptions::default(), ("bob".into(), 5000))
        .await
        .unwrap();
    assert_eq!(outbox.requests(), 2, "approved call ran exactly once");

    let audit = engine.store().audit(Some(&pending.key)).await.unwrap();
    assert_eq!(audit.len(), 1);
    assert_eq!(
        (audit[0].actor.as_str(), audit[0].action.as_str()),
        ("carol", "approve")
    );
}

#[tokio::test]
async fn a_denied_call_returns_a_definitive_error() {
    let outbox = Arc::new(Downstream::default());
    let tool = SendWire { outbox: outbox.clone() };
    let engine = Engine::new(MemoryStore::new());
    let run = RunContext::new("r1");
    let err = engine
        .call(&tool, &run, CallOptions::default(), ("eve".into(), 9999))
        .await
        .unwrap_err();
    let key = err.key().unwrap().to_owned();
    engine
        .store()
        .deny(&key, "carol", Some("not a known vendor".into()))
        .await
        .unwrap();
    let err = engine
        .call(&tool, &run, CallOptions::default(), ("eve".into(), 9999))
        .await
        .unwrap_err();
    match &err {
        EffectError::Denied { by, reason, .. } => {
            assert_eq!(by, "carol");
            assert_eq!(reason.as_deref(), Some("not a known vendor"));
        }
        other => panic!("expected a denial, got {other}"),
    }
    assert!(err.to_string().contains("not a known vendor"));
    assert_eq!(outbox.requests(), 0);
}

/// A hotel booking system that counts reservations and cancellations.
#[derive(Default)]
struct Hotel {
    reserved: Mutex<Vec<String>>,
    cancelled: Mutex<Vec<String>>,
    fail_cancellations: Mutex<usize>,
}

struct Reserve {
    hotel: Arc<Hotel>,
}

impl Tool for Reserve {
    type Args = String;
    type Output = String;
    type Error = ToolError;
    const NAME: &'static str = "reserve";
    const CLASS: EffectClass = EffectClass::Compensable;
    const HAS_COMPENSATE: bool = true;
    const RETRY: effect_tool::RetryPolicy = effect_tool::RetryPolicy {
        max_attempts: 3,
        base_delay: std::time::Duration::from_millis(1),
        max_delay: std::time::Duration::from_millis(2),
    };

    async fn call(&self, _ctx: &EffectCtx, room: String) -> Result<String, ToolError> {
        self.hotel.reserved.lock().unwrap().push(room.clone());
        Ok(format!("booking-{room}"))
    }

    async fn compensate(&self, _ctx: &EffectCtx, room: &String, booking: &String) -> Result<(), ToolError> {
        {
            let mut fails = self.hotel.fail_cancellations.lock().unwrap();
            if *fails > 0 {
                *fails -= 1;
                return Err(ToolError::transient("hotel API busy"));
            }
        }
        assert_eq!(booking, &format!("booking-{room}"));
        self.hotel.cancelled.lock().unwrap().push(room.clone());
        Ok(())
    }
}

#[tokio::test]
async fn abandoning_a_run_compensates_each_effect_once_newest_first() {
    let hotel = Arc::new(Hotel::default());
    *hotel.fail_cancellations.lock().unwrap() = 1; // the first cancellation is retried
    let tool = Arc::new(Reserve { hotel: hotel.clone() });
    let engine = Engine::new(MemoryStore::new());
    let run = RunContext::new("trip-1");
    for room in ["101", "102", "103"] {
        engine
            .call(&*tool, &run, CallOptions::default(), room.to_owned())
            .await
            .unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(3)).await;
    }
    // Another run's booking is not touched.
    engine
        .call(&*tool, &RunContext::new("trip-2"), CallOptions::default(), "201".into())
        .await
        .unwrap();

    let tools: Vec<Arc<dyn DynTool>> = vec![tool.clone()];
    let report = engine.abandon_run(&run, &tools).await.unwrap();
    assert!(report.is_complete(), "{report:?}");
    assert_eq!(report.compensated.len(), 3);
    assert_eq!(
        *hotel.cancelled.lock().unwrap(),
        vec!["103", "102", "101"],
        "newest first"
    );

    let again = engine.abandon_run(&run, &tools).await.unwrap();
    assert!(again.compensated.is_empty());
    assert_eq!(hotel.cancelled.lock().unwrap().len(), 3, "never twice");

    let err = engine
        .call(&*tool, &run, CallOptions::default(), "101".into())
        .await
        .unwrap_err();
    assert!(matches!(err, EffectError::Compensated { .. }), "{err}");
    let audit = engine.store().audit(None).await.unwrap();
    assert_eq!(audit.iter().filter(|a| a.action == "compensate").count(), 3);
}

/// A compensation that keeps failing transiently is tried the tool's `max_attempts` times (3)
/// within one abandonment, not once more; the run's report says it failed, and the booking is
/// still there for the next abandonment to undo.
#[tokio::test]
async fn a_compensation_failing_transiently_is_tried_max_attempts_times() {
    let hotel = Arc::new(Hotel::default());
    *hotel.fail_cancellations.lock().unwrap() = 4;
    let tool = Arc::new(Reserve { hotel: hotel.clone() });
    let engine = Engine::new(MemoryStore::new());
    let run = RunContext::new("trip-6");
    engine
        .call(&*tool, &run, CallOptions::default(), "101".into())
        .await
        .unwrap();
    let tools: Vec<Arc<dyn DynTool>> = vec![tool.clone()];
    let report = engine.abandon_run(&run, &tools).await.unwrap();
    assert!(report.compensated.is_empty(), "{report:?}");
    assert!(report.failed[0].1.contains("hotel API busy"), "{report:?}");
    assert_eq!(*hotel.fail_cancellations.lock().unwrap(), 1, "3 of the 4 failures used");
    assert!(hotel.cancelled.lock().unwrap().is_empty());

    let again = engine.abandon_run(&run, &tools).await.unwrap();
    assert_eq!(again.compensated.len(), 1, "{again:?}");
    assert_eq!(*hotel.cancelled.lock().unwrap(), vec!["101"]);
}

/// Holds a seat; its compensation says what it saw of its claim's lease.
struct HoldSeat {
    /// Per compensation: the lease it saw at its start, and whether its claim was still its
    /// own after it had worked three leases long.
    seen: Arc<Mutex<Vec<LeaseSeen>>>,
}

/// The lease a compensation saw at its start, and whether its claim was still its own later.
type LeaseSeen = (Option<std::time::Duration>, bool);

impl Tool for HoldSeat {
    type Args = String;
    type Output = String;
    type Error = ToolError;
    const NAME: &'static str = "hold_seat";
    const CLASS: EffectClass = EffectClass::Compensable;
    const HAS_COMPENSATE: bool = true;

    async fn call(&self, _ctx: &EffectCtx, seat: String) -> Result<String, ToolError> {
        Ok(format!("hold-{seat}"))
    }

    async fn compensate(&self, ctx: &EffectCtx, _seat: &String, _hold: &String) -> Result<(), ToolError> {
        let at_start = ctx.lease_remaining();
        tokio::time::sleep(std::time::Duration::from_millis(900)).await;
        self.seen.lock().unwrap().push((at_start, ctx.ensure_lease().is_ok()));
        Ok(())
    }
}

/// A compensation runs under its claim's lease as a call does (the same stages, the same
/// renewal): its context knows the lease, and a compensation working three leases long keeps
/// its claim because the renewal extends the engine's own clock (on tokio's paused clock: no
/// real time passes). Before, a compensation's context had no lease at all.
#[tokio::test(start_paused = true)]
async fn a_compensation_runs_under_its_claims_lease_renewed_as_a_calls() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let tool = Arc::new(HoldSeat { seen: seen.clone() });
    let config = effect_tool::EngineConfig {
        lease: std::time::Duration::from_millis(300),
        ..Default::default()
    };
    let engine = Engine::with_config(MemoryStore::new(), config);
    let run = RunContext::new("trip-lease");
    engine
        .call(&*tool, &run, CallOptions::default(), "12A".into())
        .await
        .unwrap();
    let tools: Vec<Arc<dyn DynTool>> = vec![tool.clone()];
    let report = engine.abandon_run(&run, &tools).await.unwrap();
    assert_eq!(report.compensated.len(), 1, "{report:?}");
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "compensated once: {seen:?}");
    let (at_start, kept) = seen[0];
    assert!(
        at_start.is_some_and(|d| d <= std::time::Duration::from_millis(300)),
        "the compensation sees its claim's lease: {at_start:?}"
    );
    assert!(kept, "renewed while it ran, the claim is still its own");
}

/// Fails the first records of compensations (their output is `null`) with a backend error.
struct FailCompensationRecords(std::sync::atomic::AtomicUsize);

impl common::journal::Fault for FailCompensationRecords {
    fn on(&self, op: &effect_tool::decide::record::Op) -> common::journal::Then {
        use std::sync::atomic::Ordering;
        let compensation_record =
            matches!(op, effect_tool::decide::record::Op::Complete { output, .. } if output.is_null());
        if compensation_record && self.0.load(Ordering::SeqCst) > 0 {
            self.0.fetch_sub(1, Ordering::SeqCst);
            return common::journal::Then::Fail("journal unreachable");
        }
        common::journal::Then::Forward
    }
}

/// A compensation's record is written as a call's is (stage 4f): a journal failing the write
/// for a moment is retried, so the compensation ends recorded, not as a claim left behind. Before,
/// one failed write left `compensate:<key>` claimed.
#[tokio::test]
async fn a_compensation_record_the_journal_fails_for_a_moment_is_retried() {
    let journal = common::journal::Faulty::new(
        Arc::new(MemoryStore::new()),
        FailCompensationRecords(std::sync::atomic::AtomicUsize::new(2)),
    );
    let hotel = Arc::new(Hotel::default());
    let tool = Arc::new(Reserve { hotel: hotel.clone() });
    let engine = Engine::new(journal.clone());
    let run = RunContext::new("trip-record");
    let key = engine
        .call_with_report(&*tool, &run, CallOptions::default(), "301".into())
        .await
        .key
        .unwrap();
    let tools: Vec<Arc<dyn DynTool>> = vec![tool.clone()];
    let report = engine.abandon_run(&run, &tools).await.unwrap();
    assert_eq!(report.compensated, vec![key.clone()], "{report:?}");
    assert_eq!(*hotel.cancelled.lock().unwrap(), vec!["301"], "undone once");
    assert_eq!(
        journal.0.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "both failures met"
    );
    // The compensation's own record, under the key `effect-tool show` prints for it.
    let compensation = format!("compensate:{key}");
    let rec = engine.store().get(&compensation).await.unwrap().unwrap();
    assert_eq!(rec.state, RecordState::Completed, "{rec:?}");
    assert_eq!(
        engine.store().get(&key).await.unwrap().unwrap().state,
        RecordState::Compensated
    );
}

/// Abandoning a run undoes only effects that happened: a booking that failed definitively
/// (released), one parked for approval, one approved but not yet run, and one denied are left
/// alone, never compensated and never reported; the completed booking beside them is undone.
#[tokio::test]
async fn abandoning_a_run_undoes_only_effects_that_happened() {
    let hotel = Arc::new(Hotel::default());
    let tool = Arc::new(Reserve { hotel: hotel.clone() });
    let engine = Engine::new(MemoryStore::new());
    let store = engine.store();
    let run = RunContext::new("trip-7");
    engine
        .call(&*tool, &run, CallOptions::default(), "101".into())
        .await
        .unwrap();
    let parked = |room: &str| effect_tool::decide::record::Intent {
        approval: Some("ops".into()),
        ..booking("trip-7", serde_json::json!(room))
    };
    store
        .claim(
            "trip-7:reserve:failed",
            booking("trip-7", serde_json::json!("102")),
            60_000,
            false,
        )
        .await
        .unwrap();
    store
        .release("trip-7:reserve:failed", 1, Some("no room".into()))
        .await
        .unwrap();
    for (key, room) in [
        ("trip-7:reserve:parked", "103"),
        ("trip-7:reserve:approved", "104"),
        ("trip-7:reserve:denied", "105"),
    ] {
        store.claim(key, parked(room), 60_000, false).await.unwrap();
    }
    store
        .approve(
            "trip-7:reserve:approved",
            "carol",
            "ops",
            &store.get("trip-7:reserve:approved").await.unwrap().unwrap().fingerprint,
        )
        .await
        .unwrap();
    store.deny("trip-7:reserve:denied", "carol", None).await.unwrap();
    let states: Vec<RecordState> = {
        let mut all = store.list(&effect_tool::Filter::default()).await.unwrap();
        all.sort_by(|a, b| a.key.cmp(&b.key));
        all.iter().map(|r| r.state).collect()
    };
    use RecordState::{Approved, AwaitingApproval, Completed, Denied, Released};
    assert_eq!(
        states,
        [Completed, Approved, Denied, Released, AwaitingApproval],
        "the records the test meant to write"
    );

    let tools: Vec<Arc<dyn DynTool>> = vec![tool.clone()];
    let report = engine.abandon_run(&run, &tools).await.unwrap();
    let undone = effect_tool::call::key::identify(&*tool, &run, &"101".to_owned())
        .unwrap()
        .key;
    assert_eq!(report.compensated, vec![undone], "{report:?}");
    assert!(
        report.is_complete() && report.already_compensated.is_empty(),
        "{report:?}"
    );
    assert_eq!(*hotel.cancelled.lock().unwrap(), vec!["101"]);
}

/// The claim of a [`Reserve`] booking in `run` with `input`, as the journal holds it (for the
/// records a test writes through the store, not through the engine).
fn booking(run: &str, input: serde_json::Value) -> effect_tool::decide::record::Intent {
    effect_tool::decide::record::Intent {
        tool: "reserve".into(),
        class: EffectClass::Compensable,
        run_id: run.into(),
        thread_id: None,
        call_id: None,
        fingerprint: "f".into(),
        input,
        ttl_ms: None,
        approval: None,
        approval_ttl_ms: None,
        holder: None,
    }
}

/// A compensation decodes the output a person recorded; one of the wrong shape fails it with
/// the command that corrects the resolution, and once amended the effect is undone once.
#[tokio::test]
async fn a_compensation_of_a_wrongly_resolved_output_says_how_to_amend_it() {
    let hotel = Arc::new(Hotel::default());
    let tool = Arc::new(Reserve { hotel: hotel.clone() });
    let engine = Engine::new(MemoryStore::new());
    let store = engine.store();
    // A booking whose outcome was unknown, resolved by a person with a number where the tool
    // returns a booking reference.
    let key = "trip-9:reserve:booked-by-phone";
    store
        .claim(key, booking("trip-9", serde_json::json!("301")), 60_000, false)
        .await
        .unwrap();
    store.mark_in_doubt(key, 1, "timed out".into()).await.unwrap();
    let wrong = effect_tool::Verdict::Applied {
        output: serde_json::json!(301),
    };
    store.resolve(key, "dana", wrong).await.unwrap();

    let run = RunContext::new("trip-9");
    let tools: Vec<Arc<dyn DynTool>> = vec![tool.clone()];
    let report = engine.abandon_run(&run, &tools).await.unwrap();
    assert!(report.compensated.is_empty(), "{report:?}");
    let (failed, error) = &report.failed[0];
    assert!(failed.as_str() == key && error.contains("--amend"), "{report:?}");
    assert!(hotel.cancelled.lock().unwrap().is_empty());

    let right = effect_tool::Verdict::Applied {
        output: serde_json::json!("booking-301"),
    };
    store.amend(key, "dana", right).await.unwrap();
    let report = engine.abandon_run(&run, &tools).await.unwrap();
    assert_eq!(report.compensated, vec![key.to_owned()], "{report:?}");
    assert_eq!(*hotel.cancelled.lock().unwrap(), vec!["301"], "undone once");
}

/// A compensation whose recorded arguments no longer decode (the tool's argument type changed)
/// cannot run: abandoning says how a person records the effect undone by hand.
#[tokio::test]
async fn a_compensation_of_arguments_that_no_longer_decode_says_what_to_do() {
    let hotel = Arc::new(Hotel::default());
    let tool = Arc::new(Reserve { hotel: hotel.clone() });
    let engine = Engine::new(MemoryStore::new());
    let store = engine.store();
    let key = "trip-8:reserve:old-args";
    // The argument type was a number then; it is a room name now.
    store
        .claim(key, booking("trip-8", serde_json::json!(301)), 60_000, false)
        .await
        .unwrap();
    store.complete(key, 1, serde_json::json!("booking-301")).await.unwrap();

    let tools: Vec<Arc<dyn DynTool>> = vec![tool.clone()];
    let report = engine.abandon_run(&RunContext::new("trip-8"), &tools).await.unwrap();
    let (failed, error) = &report.failed[0];
    assert!(
        failed.as_str() == key && error.contains("effect-tool abandon trip-8 --mark-compensated"),
        "{report:?}"
    );
    assert!(hotel.cancelled.lock().unwrap().is_empty());
}
