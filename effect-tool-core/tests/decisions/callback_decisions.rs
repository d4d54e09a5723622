//! A provider's callback, stated exactly (issue 34): a claim becomes pending with
//! `Op::Pend`, waits until its deadline, and `Op::Settle` applies the provider's answer once;
//! a forged, replayed or late callback is refused; past the deadline the record counts as in
//! doubt for a claim, a person and garbage collection.

use effect_tool_core::EffectClass;
use effect_tool_core::decide::record::{
    Current, EffectRecord, Intent, Millis, Op, OpOutcome, RecordState, Rejected, Verdict, transition,
};
use serde_json::json;

const NOW: Millis = 1_700_000_000_000;
const DEADLINE: Millis = NOW + 60_000;

fn intent() -> Intent {
    Intent {
        tool: "payout".into(),
        class: EffectClass::Irreversible,
        run_id: "r".into(),
        thread_id: None,
        call_id: Some("c1".into()),
        fingerprint: "f".into(),
        input: json!({"cents": 500}),
        ttl_ms: Some(1_000),
        approval: None,
        approval_ttl_ms: None,
        holder: None,
    }
}

fn claim(takeover_in_doubt: bool) -> Op {
    Op::Claim {
        intent: intent(),
        lease_ms: 10_000,
        takeover_in_doubt,
    }
}

fn apply(
    rec: Option<&EffectRecord>,
    op: Op,
    now: Millis,
) -> Result<effect_tool_core::decide::record::Transition, Rejected> {
    match rec {
        Some(r) => transition("k", Some(r), op, now),
        None => transition("k", Current::Absent, op, now),
    }
}

fn written(rec: Option<&EffectRecord>, op: Op, now: Millis) -> EffectRecord {
    let t = apply(rec, op, now).expect("accepted");
    EffectRecord::clone(&t.write.expect("written"))
}

/// A record claimed at attempt 1, then pending until [`DEADLINE`] for token digest `d1`.
fn pending() -> EffectRecord {
    let claimed = written(None, claim(false), NOW);
    written(Some(&claimed), pend(1, "d1"), NOW + 1)
}

fn pend(attempt: u32, digest: &str) -> Op {
    Op::Pend {
        attempt,
        token_digest: digest.into(),
        deadline: DEADLINE,
    }
}

fn settle(attempt: u32, digest: &str, verdict: Verdict) -> Op {
    Op::Settle {
        attempt,
        token_digest: digest.into(),
        by: "bank".into(),
        verdict,
    }
}

fn paid() -> Verdict {
    Verdict::Applied {
        output: json!({"status": "paid"}),
    }
}

#[test]
fn a_claim_becomes_pending_until_its_deadline_with_the_token_digest_and_an_audit_entry() {
    let claimed = written(None, claim(false), NOW);
    let t = apply(Some(&claimed), pend(1, "d1"), NOW + 1).unwrap();
    let rec = t.write.unwrap();
    assert_eq!(rec.state, RecordState::Pending);
    assert_eq!(rec.lease_until, Some(DEADLINE));
    assert_eq!(rec.updated_at, NOW + 1);
    assert_eq!(rec.callback_digest(), Some("d1"));
    assert!(
        rec.reason.as_deref().unwrap().contains(&DEADLINE.to_string()),
        "{:?}",
        rec.reason
    );
    let audit = t.audit.expect("audited");
    assert_eq!(
        (audit.action.as_str(), audit.actor.as_str()),
        ("pending", "effect-tool")
    );
    assert_eq!(audit.detail, Some(json!({"attempt": 1, "deadline": DEADLINE})));
    assert_eq!(RecordState::Pending.as_str(), "pending");
    assert_eq!("pending".parse::<RecordState>(), Ok(RecordState::Pending));
    // Written at record version 2, which builds from before callbacks refuse; the claim it
    // came from at 1, which every build reads.
    assert_eq!((claimed.version, rec.version), (1, 2));
    assert_eq!(effect_tool_core::decide::record::RECORD_VERSION, 2);
}

#[test]
fn only_the_holder_may_make_its_claim_pending() {
    let claimed = written(None, claim(false), NOW);
    assert!(matches!(
        apply(Some(&claimed), pend(2, "d1"), NOW + 1),
        Err(Rejected::Fenced {
            attempt: 2,
            current: 1,
            ..
        })
    ));
    let p = pending();
    assert!(matches!(
        apply(Some(&p), pend(1, "d2"), NOW + 2),
        Err(Rejected::Fenced { .. })
    ));
    assert!(matches!(
        apply(None, pend(1, "d1"), NOW),
        Err(Rejected::NotFound { .. })
    ));
}

#[test]
fn the_callback_applied_records_its_output_once_and_audits_who() {
    let p = pending();
    let t = apply(Some(&p), settle(1, "d1", paid()), NOW + 2).unwrap();
    let rec = t.write.unwrap();
    assert_eq!(rec.state, RecordState::Completed);
    assert_eq!(rec.output, Some(json!({"status": "paid"})));
    assert_eq!((rec.lease_until, rec.reason.as_deref()), (None, None));
    assert_eq!(rec.decided_by.as_deref(), Some("bank"));
    assert_eq!(rec.updated_at, NOW + 2);
    assert_eq!(
        rec.resolved_by(),
        None,
        "a callback is not a person's resolution to amend"
    );
    let audit = t.audit.expect("audited");
    assert_eq!(
        (audit.action.as_str(), audit.actor.as_str(), audit.at),
        ("callback-settled", "bank", NOW + 2)
    );
    assert_eq!(
        audit.detail,
        Some(json!({"attempt": 1, "verdict": {"verdict": "applied", "output": {"status": "paid"}}}))
    );
    // The same callback again (a replay) is refused: nothing is written.
    let again = apply(Some(&rec), settle(1, "d1", paid()), NOW + 3).unwrap_err();
    assert!(
        matches!(
            again,
            Rejected::InvalidState {
                state: RecordState::Completed,
                ..
            }
        ),
        "{again:?}"
    );
    assert!(again.to_string().contains("only once"), "{again}");
    // A claim of the key replays it.
    assert!(matches!(
        apply(Some(&rec), claim(false), NOW + 4).unwrap().outcome,
        OpOutcome::Recorded(_)
    ));
}

#[test]
fn the_callback_not_applied_releases_the_record() {
    let rec = written(Some(&pending()), settle(1, "d1", Verdict::NotApplied), NOW + 2);
    assert_eq!(rec.state, RecordState::Released);
    assert_eq!(rec.version, 1, "settled, a record is written at version 1 again");
    assert_eq!((rec.output.as_ref(), rec.lease_until), (None, None));
    assert_eq!(
        rec.reason.as_deref(),
        Some("the provider's callback said it was not applied (bank)")
    );
    assert!(matches!(
        apply(Some(&rec), settle(1, "d1", Verdict::NotApplied), NOW + 3),
        Err(Rejected::InvalidState { .. })
    ));
}

#[test]
fn a_forged_token_or_one_of_another_attempt_is_refused() {
    let p = pending();
    for op in [settle(1, "d2", paid()), settle(2, "d1", paid()), settle(1, "", paid())] {
        let e = apply(Some(&p), op, NOW + 2).unwrap_err();
        assert!(
            matches!(&e, Rejected::CallbackRefused { key, .. } if key == "k"),
            "{e:?}"
        );
        assert!(e.to_string().contains("forged"), "{e}");
    }
    // A claimed record waits for no token at all.
    let claimed = written(None, claim(false), NOW);
    assert!(matches!(
        apply(Some(&claimed), settle(1, "d1", paid()), NOW + 1),
        Err(Rejected::InvalidState {
            state: RecordState::Claimed,
            ..
        })
    ));
    assert_eq!(claimed.callback_digest(), None);
    assert!(matches!(
        apply(None, settle(1, "d1", paid()), NOW),
        Err(Rejected::NotFound { .. })
    ));
}

#[test]
fn a_late_callback_is_refused_the_record_being_in_doubt() {
    let p = pending();
    assert!(!p.is_overdue(DEADLINE - 1));
    assert!(p.is_overdue(DEADLINE));
    // The last millisecond before the deadline still settles.
    assert_eq!(
        written(Some(&p), settle(1, "d1", paid()), DEADLINE - 1).state,
        RecordState::Completed
    );
    let e = apply(Some(&p), settle(1, "d1", paid()), DEADLINE).unwrap_err();
    assert!(matches!(e, Rejected::CallbackRefused { .. }), "{e:?}");
    assert!(e.to_string().contains("deadline has passed"), "{e}");
    // Only a pending record is overdue.
    let claimed = written(None, claim(false), NOW);
    assert!(!claimed.is_overdue(DEADLINE * 2));
}

#[test]
fn a_claim_waits_on_a_pending_record_and_takes_it_over_as_in_doubt_past_its_deadline() {
    let p = pending();
    // Before the deadline: in flight, whatever the caller may take over (and the ttl of 1 s
    // has passed: a pending record is not absent).
    for takeover in [false, true] {
        match apply(Some(&p), claim(takeover), DEADLINE - 1).unwrap() {
            t @ effect_tool_core::decide::record::Transition { write: None, .. } => {
                assert!(matches!(t.outcome, OpOutcome::InFlight(ref r) if r.state == RecordState::Pending))
            }
            t => panic!("wrote {t:?}"),
        }
    }
    // Past it: in doubt, or taken over as in doubt.
    assert!(matches!(
        apply(Some(&p), claim(false), DEADLINE).unwrap().outcome,
        OpOutcome::InDoubt(_)
    ));
    let t = apply(Some(&p), claim(true), DEADLINE).unwrap();
    match t.outcome {
        OpOutcome::Claimed { attempt, previous, .. } => {
            assert_eq!((attempt, previous), (2, Some(RecordState::InDoubt)))
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(t.audit.unwrap().action, "takeover");
    assert_eq!(
        t.write.unwrap().version,
        1,
        "a claim over a pending record is version 1 again"
    );
}

#[test]
fn a_person_resolves_a_pending_record_only_past_its_deadline() {
    let p = pending();
    let resolve = || Op::Resolve {
        by: "dana".into(),
        verdict: Verdict::NotApplied,
    };
    assert!(matches!(
        apply(Some(&p), resolve(), DEADLINE - 1),
        Err(Rejected::InvalidState {
            state: RecordState::Pending,
            ..
        })
    ));
    assert_eq!(written(Some(&p), resolve(), DEADLINE).state, RecordState::Released);
}

#[test]
fn pending_records_are_held_decisions_and_kept_by_garbage_collection() {
    assert!(RecordState::Pending.is_held() && RecordState::Claimed.is_held());
    assert!(!RecordState::InDoubt.is_held() && !RecordState::Completed.is_held());
    assert!(!RecordState::Pending.needs_person());
    let p = pending();
    assert!(p.is_expired(NOW + 1_001));
    assert!(!effect_tool_core::store::collectable(&p, NOW + 1_001));
    assert!(settle(1, "d", paid()).is_decision(), "a settlement wakes waiters");
    assert!(!pend(1, "d").is_decision());
    assert_eq!((pend(1, "d").name(), settle(1, "d", paid()).name()), ("pend", "settle"));
    assert_eq!(settle(1, "d", paid()).audit("k", NOW), None);
    assert!(pend(1, "d").needs_flush() && settle(1, "d", paid()).needs_flush());
    assert_eq!(
        Rejected::CallbackRefused {
            key: "k".into(),
            why: "w".into()
        }
        .key(),
        "k"
    );
}
