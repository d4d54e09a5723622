//! The record state machine (`record::transition`), stated exactly (issue 20): each test names a
//! behaviour that a mutant of `record.rs` broke without a core test noticing. Leases and ttls,
//! takeovers (a stale claim, a record in doubt, a worker's next incarnation), fencing,
//! approvals and denials, shared results, the audit trail, and what a refusal says.

use effect_tool_core::EffectClass;
use effect_tool_core::decide::record::{
    Current, EffectRecord, Holder, Intent, Millis, Op, OpOutcome, RecordState, Verdict, transition,
};
use serde_json::json;

const NOW: Millis = 1_700_000_000_000;

fn intent() -> Intent {
    Intent {
        tool: "post_comment".into(),
        class: EffectClass::Irreversible,
        run_id: "r".into(),
        thread_id: None,
        call_id: Some("c1".into()),
        fingerprint: "f".into(),
        input: json!({"body": "hi"}),
        ttl_ms: None,
        approval: None,
        approval_ttl_ms: None,
        holder: None,
    }
}

fn claim(lease_ms: u64) -> Op {
    Op::Claim {
        intent: intent(),
        lease_ms,
        takeover_in_doubt: false,
    }
}

/// Apply `op` at `now` and return the record it wrote.
fn step(rec: Option<&EffectRecord>, op: Op, now: Millis) -> EffectRecord {
    let name = op.name();
    let t = match rec {
        Some(r) => transition("k", Some(r), op, now),
        None => transition("k", Current::Absent, op, now),
    }
    .unwrap_or_else(|e| panic!("{name} refused: {e}"));
    EffectRecord::clone(&t.write.unwrap_or_else(|| panic!("{name} wrote nothing")))
}

/// Apply `op` and return the refusal's text.
fn refused(rec: &EffectRecord, op: Op, now: Millis) -> String {
    match transition("k", Some(rec), op, now) {
        Ok(t) => panic!("accepted: {:?}", t.outcome),
        Err(e) => e.to_string(),
    }
}

fn resolve(verdict: Verdict) -> Op {
    Op::Resolve {
        by: "dana".into(),
        verdict,
    }
}

fn amend(verdict: Verdict) -> Op {
    Op::Amend {
        by: "dana".into(),
        verdict,
    }
}

fn applied() -> Verdict {
    Verdict::Applied { output: json!("ok") }
}

#[test]
fn a_claim_holds_its_lease_from_now() {
    let rec = step(None, claim(30_000), NOW);
    assert_eq!(rec.state, RecordState::Claimed);
    assert_eq!(rec.lease_until, Some(NOW + 30_000));
    assert_eq!((rec.attempt, rec.created_at, rec.updated_at), (1, NOW, NOW));
}

#[test]
fn a_renewal_extends_the_lease_from_the_renewal_not_the_claim() {
    let rec = step(None, claim(100), NOW);
    let later = NOW + 5_000;
    let renewed = step(
        Some(&rec),
        Op::Renew {
            attempt: 1,
            lease_ms: 30_000,
        },
        later,
    );
    // Exactly now + lease: a renewed claim whose holder then crashes goes stale 30 s later.
    assert_eq!(renewed.lease_until, Some(later + 30_000));
    assert_eq!(renewed.updated_at, later);
    assert_eq!(renewed.created_at, NOW);
    assert!(!renewed.is_stale(later + 29_999));
    assert!(renewed.is_stale(later + 30_000), "stale when the lease ends");
    assert!(renewed.is_stale(later + 30_001));
    // Another attempt cannot renew it.
    let text = refused(
        &renewed,
        Op::Renew {
            attempt: 2,
            lease_ms: 30_000,
        },
        later,
    );
    assert!(text.contains("attempt 2"), "{text}");
}

#[test]
fn a_renewal_of_a_record_that_is_not_claimed_is_fenced() {
    let rec = step(None, claim(100), NOW);
    let done = step(
        Some(&rec),
        Op::Complete {
            attempt: 1,
            output: json!("x"),
        },
        NOW + 1,
    );
    assert_eq!(done.state, RecordState::Completed);
    assert_eq!(done.lease_until, None);
    let err = transition(
        "k",
        Some(&done),
        Op::Renew {
            attempt: 1,
            lease_ms: 100,
        },
        NOW + 2,
    )
    .unwrap_err();
    assert!(
        matches!(err, effect_tool_core::decide::record::Rejected::Fenced { .. }),
        "{err}"
    );
}

#[test]
fn resolving_a_live_claim_says_to_wait_and_a_stale_one_is_resolvable() {
    let rec = step(None, claim(1_000), NOW);
    let text = refused(&rec, resolve(applied()), NOW + 999);
    assert!(
        text.contains("an attempt holds a live claim; wait for it to finish or for its lease to expire"),
        "{text}"
    );
    // An amendment of a live claim says the same: nothing can be decided while it runs.
    let text = refused(&rec, amend(applied()), NOW + 999);
    assert!(text.contains("holds a live claim"), "{text}");
    let resolved = step(Some(&rec), resolve(applied()), NOW + 1_000);
    assert_eq!(resolved.state, RecordState::Completed);
    assert_eq!(resolved.resolved_by(), Some("dana"));
}

#[test]
fn resolution_refusals_say_why_and_what_to_do() {
    let claimed = step(None, claim(1_000), NOW);
    let by_tool = step(
        Some(&claimed),
        Op::Complete {
            attempt: 1,
            output: json!("x"),
        },
        NOW + 1,
    );
    let text = refused(&by_tool, resolve(applied()), NOW + 2);
    assert!(
        text.contains("the tool recorded its output itself, and a person cannot overwrite it; only records in doubt (or stale claims) can be resolved"),
        "{text}"
    );
    let released = step(
        Some(&claimed),
        Op::Release {
            attempt: 1,
            reason: None,
        },
        NOW + 1,
    );
    let text = refused(&released, resolve(applied()), NOW + 2);
    assert!(
        text.ends_with(": only records in doubt (or stale claims) can be resolved"),
        "{text}"
    );
    assert!(
        !text.contains("live claim") && !text.contains("output itself"),
        "{text}"
    );

    // Resolved by a person: resolving again says to amend, with the commands.
    let in_doubt = step(
        Some(&claimed),
        Op::MarkInDoubt {
            attempt: 1,
            reason: "timed out".into(),
        },
        NOW + 1,
    );
    for (verdict, word) in [(applied(), "applied"), (Verdict::NotApplied, "not applied")] {
        let resolved = step(Some(&in_doubt), resolve(verdict), NOW + 2);
        let text = refused(&resolved, resolve(applied()), NOW + 3);
        assert!(
            text.contains(&format!(
                ": dana resolved it as {word}; to correct that resolution, amend it: "
            )),
            "{text}"
        );
        assert!(
            text.contains("effect-tool resolve k --applied --output '<json>' --amend"),
            "{text}"
        );
        assert!(text.contains("effect-tool resolve k --not-applied --amend"), "{text}");
        // And the amendment is accepted.
        let amended = step(Some(&resolved), amend(Verdict::NotApplied), NOW + 4);
        assert_eq!(amended.state, RecordState::Released);
    }
}

#[test]
fn amendment_refusals_say_why_and_what_to_do() {
    let claimed = step(None, claim(1_000), NOW);
    let in_doubt = step(
        Some(&claimed),
        Op::MarkInDoubt {
            attempt: 1,
            reason: "timed out".into(),
        },
        NOW + 1,
    );
    let text = refused(&in_doubt, amend(applied()), NOW + 2);
    assert!(
        text.contains(": nothing to amend, no person has resolved it yet; resolve it without amending: "),
        "{text}"
    );
    assert!(text.contains("effect-tool resolve k --not-applied`"), "{text}");
    assert!(!text.contains("--amend"), "{text}");
    // A stale claim: the same (it is resolvable, not amendable).
    let text = refused(&claimed, amend(applied()), NOW + 1_000);
    assert!(
        text.contains(": nothing to amend, no person has resolved it yet"),
        "{text}"
    );
    let by_tool = step(
        Some(&claimed),
        Op::Complete {
            attempt: 1,
            output: json!("x"),
        },
        NOW + 1,
    );
    let text = refused(&by_tool, amend(applied()), NOW + 2);
    assert!(
        text.contains(": the tool recorded its output itself, and a person cannot overwrite it; only a person's resolution can be amended"),
        "{text}"
    );
    let released = step(
        Some(&claimed),
        Op::Release {
            attempt: 1,
            reason: None,
        },
        NOW + 1,
    );
    let text = refused(&released, amend(applied()), NOW + 2);
    assert!(text.contains(": only a person's resolution (completed as applied or released as not applied, and not claimed by a call since) can be amended"), "{text}");
}

#[test]
fn a_claim_on_a_completed_record_is_answered_from_it() {
    let rec = step(None, claim(1_000), NOW);
    let done = step(
        Some(&rec),
        Op::Complete {
            attempt: 1,
            output: json!("x"),
        },
        NOW + 1,
    );
    let t = transition("k", Some(&done), claim(1_000), NOW + 2).unwrap();
    assert!(t.write.is_none());
    assert!(matches!(t.outcome, OpOutcome::Recorded(r) if r.output == Some(json!("x"))));
}

fn holder(worker: Option<&str>, instance: &str) -> Holder {
    Holder {
        worker: worker.map(str::to_owned),
        instance: instance.into(),
        host: "h".into(),
        pid: 7,
    }
}

fn claim_by(holder: Option<Holder>) -> Op {
    Op::Claim {
        intent: Intent {
            holder: holder.map(Box::new),
            ..intent()
        },
        lease_ms: 30_000,
        takeover_in_doubt: false,
    }
}

/// What a claim at `now` answers on `rec` (without the record it writes).
fn claim_answer(rec: &EffectRecord, op: Op, now: Millis) -> OpOutcome {
    transition("k", Some(rec), op, now)
        .unwrap_or_else(|e| panic!("claim refused: {e}"))
        .outcome
}

#[test]
fn a_later_incarnation_of_a_worker_succeeds_its_claims_and_nothing_else_does() {
    let w_a = holder(Some("w"), "a");
    assert!(holder(Some("w"), "b").succeeds(&w_a), "same worker, new instance");
    assert!(
        !holder(Some("w"), "a").succeeds(&w_a),
        "the same instance is not its own successor"
    );
    assert!(!holder(Some("v"), "b").succeeds(&w_a), "another worker");
    assert!(!holder(None, "b").succeeds(&w_a), "an engine without a worker identity");
    assert!(
        !holder(None, "b").succeeds(&holder(None, "a")),
        "no worker identity on either side"
    );
    assert!(
        !holder(Some("w"), "b").succeeds(&holder(None, "a")),
        "a claim without a worker identity"
    );
}

#[test]
fn a_live_claim_is_taken_over_at_once_only_by_its_workers_next_incarnation() {
    let held = step(None, claim_by(Some(holder(Some("w"), "a"))), NOW);
    let live = NOW + 1;
    match claim_answer(&held, claim_by(Some(holder(Some("w"), "b"))), live) {
        OpOutcome::Claimed { attempt, previous, .. } => {
            assert_eq!((attempt, previous), (2, Some(RecordState::Claimed)));
        }
        other => panic!("the restarted worker must take its own claim over, got {other:?}"),
    }
    for (what, by) in [
        ("the same instance", Some(holder(Some("w"), "a"))),
        ("another worker", Some(holder(Some("v"), "b"))),
        ("an engine without a worker identity", Some(holder(None, "b"))),
        ("a caller that names no holder", None),
    ] {
        match claim_answer(&held, claim_by(by), live) {
            OpOutcome::InFlight(rec) => assert_eq!(rec.attempt, 1, "{what}"),
            other => panic!("{what} must wait for the live claim, got {other:?}"),
        }
    }
    let anonymous = step(None, claim_by(None), NOW);
    assert!(matches!(
        claim_answer(&anonymous, claim_by(Some(holder(Some("w"), "b"))), live),
        OpOutcome::InFlight(_)
    ));
}

#[test]
fn a_holder_is_shown_with_its_worker_instance_host_and_pid() {
    assert_eq!(holder(Some("w"), "a").to_string(), "worker w, instance a on h (pid 7)");
    assert_eq!(holder(None, "a").to_string(), "instance a on h (pid 7)");
}

#[test]
fn only_records_a_person_must_settle_outlive_their_ttl() {
    let needs: Vec<RecordState> = RecordState::ALL.into_iter().filter(|s| s.needs_person()).collect();
    assert_eq!(needs, [RecordState::InDoubt, RecordState::AwaitingApproval]);

    let base = step(None, claim(30_000), NOW);
    let expired = |state| EffectRecord {
        state,
        lease_until: None,
        expires_at: Some(NOW + 10),
        ..base.clone()
    };
    let later = NOW + 10;
    // Past its ttl, a completed record counts as absent: the call runs anew (attempt 2: the
    // fencing token never goes back).
    match claim_answer(&expired(RecordState::Completed), claim(30_000), later) {
        OpOutcome::Claimed { attempt, previous, .. } => assert_eq!((attempt, previous), (2, None)),
        other => panic!("an expired completed record must not answer, got {other:?}"),
    }
    // A record in doubt, or one waiting for approval, still answers: a person needs it.
    assert!(matches!(
        claim_answer(&expired(RecordState::InDoubt), claim(30_000), later),
        OpOutcome::InDoubt(_)
    ));
    assert!(matches!(
        claim_answer(&expired(RecordState::AwaitingApproval), claim(30_000), later),
        OpOutcome::AwaitingApproval(_)
    ));
    // A claim past its ttl still holds the key while its lease runs: its holder may be
    // applying the effect.
    let claimed = EffectRecord {
        lease_until: Some(later + 1),
        ..expired(RecordState::Claimed)
    };
    assert!(matches!(
        claim_answer(&claimed, claim(30_000), later),
        OpOutcome::InFlight(_)
    ));
}

#[test]
fn a_refusal_names_the_key_it_refused() {
    let rec = step(None, claim(1_000), NOW);
    let parked = step(
        None,
        Op::Claim {
            intent: Intent {
                approval: Some("ops".into()),
                ..intent()
            },
            lease_ms: 1_000,
            takeover_in_doubt: false,
        },
        NOW,
    );
    let refusals = [
        transition("order-7", Current::Absent, share(&["c2"]), NOW),
        transition(
            "order-7",
            Some(&rec),
            Op::Complete {
                attempt: 2,
                output: json!(1),
            },
            NOW,
        ),
        transition("order-7", Some(&rec), share(&["c2"]), NOW),
        transition(
            "order-7",
            Some(&parked),
            Op::Approve {
                by: "erin".into(),
                role: "finance".into(),
                fingerprint: "f".into(),
            },
            NOW,
        ),
    ];
    for r in refusals {
        let rejected = r.expect_err("refused");
        assert_eq!(rejected.key(), "order-7", "{rejected}");
        assert_eq!(effect_tool_core::StoreError::Rejected(rejected).key(), Some("order-7"));
    }
}

fn completed() -> EffectRecord {
    let rec = step(None, claim(30_000), NOW);
    step(
        Some(&rec),
        Op::Complete {
            attempt: 1,
            output: json!("ok"),
        },
        NOW + 1,
    )
}

fn share(ids: &[&str]) -> Op {
    Op::Share {
        call_ids: ids.iter().map(|c| (*c).to_owned()).collect(),
    }
}

#[test]
fn a_result_is_received_by_its_own_call_and_the_calls_it_was_shared_with() {
    let done = completed();
    assert!(done.received_by("c1"), "the call that made it");
    assert!(!done.received_by("c2"));
    assert!(!done.received_by(""));
    let shared = step(Some(&done), share(&["c1", "c2", "c3", "c2"]), NOW + 2);
    // Each new id once, in order; the record's own call is not repeated.
    assert_eq!(shared.call_ids, ["c2", "c3"]);
    assert_eq!(shared.updated_at, NOW + 2);
    for c in ["c1", "c2", "c3"] {
        assert!(shared.received_by(c), "{c}");
    }
    assert!(!shared.received_by("c4"));
    // Sharing with calls that have it already writes nothing.
    let again = transition("k", Some(&shared), share(&["c1", "c3"]), NOW + 3).expect("accepted");
    assert!(again.write.is_none());
    // A record without a call id was received by the calls it was shared with only.
    let anonymous = EffectRecord {
        call_id: None,
        ..shared.clone()
    };
    assert!(!anonymous.received_by("c1"));
    assert!(anonymous.received_by("c2"));
}

#[test]
fn only_a_claim_the_class_lets_be_lost_is_committed_without_a_flush() {
    for class in [
        EffectClass::Pure,
        EffectClass::Idempotent,
        EffectClass::Compensable,
        EffectClass::Irreversible,
    ] {
        let op = Op::Claim {
            intent: Intent { class, ..intent() },
            lease_ms: 1_000,
            takeover_in_doubt: false,
        };
        assert_eq!(op.needs_flush(), class.claim_needs_flush(), "{class:?}");
    }
    assert!(
        !Op::Claim {
            intent: Intent {
                class: EffectClass::Idempotent,
                ..intent()
            },
            lease_ms: 1_000,
            takeover_in_doubt: true,
        }
        .needs_flush()
    );
    assert!(
        claim(1_000).needs_flush(),
        "an irreversible claim is the evidence the effect may have happened"
    );
    let others = [
        Op::Renew {
            attempt: 1,
            lease_ms: 1_000,
        },
        Op::Complete {
            attempt: 1,
            output: json!(1),
        },
        Op::Release {
            attempt: 1,
            reason: None,
        },
        resolve(Verdict::NotApplied),
        amend(applied()),
        share(&["c2"]),
    ];
    for op in others {
        assert!(op.needs_flush(), "{}", op.name());
    }
}

#[test]
fn an_approval_without_its_own_ttl_is_valid_for_24_hours() {
    let needs_approval = || Op::Claim {
        intent: Intent {
            approval: Some("ops".into()),
            ..intent()
        },
        lease_ms: 1_000,
        takeover_in_doubt: false,
    };
    let parked = step(None, needs_approval(), NOW);
    assert_eq!(parked.state, RecordState::AwaitingApproval);
    let approved = step(
        Some(&parked),
        Op::Approve {
            by: "dana".into(),
            role: "ops".into(),
            fingerprint: "f".into(),
        },
        NOW + 1,
    );
    assert_eq!(approved.state, RecordState::Approved);
    let day: Millis = 24 * 60 * 60 * 1000;
    match claim_answer(&approved, needs_approval(), NOW + 1 + day - 1) {
        OpOutcome::Claimed { attempt, .. } => assert_eq!(attempt, 1),
        other => panic!("an approval 1 ms short of a day old runs the call, got {other:?}"),
    }
    match claim_answer(&approved, needs_approval(), NOW + 1 + day) {
        OpOutcome::AwaitingApproval(rec) => {
            let reason = rec.reason.unwrap_or_default();
            assert!(
                reason.contains(&format!("it is {day} ms old, and an approval is valid for {day} ms")),
                "{reason}"
            );
        }
        other => panic!("a day-old approval is voided, got {other:?}"),
    }
}

/// The audit entry `op` leaves on `rec` at `now` (the transition must accept it).
fn audit_of(rec: &EffectRecord, op: Op, now: Millis) -> (String, String, Option<serde_json::Value>) {
    let name = op.name();
    let t = transition("k", Some(rec), op, now).unwrap_or_else(|e| panic!("{name} refused: {e}"));
    let entry = t.audit.unwrap_or_else(|| panic!("{name} left no audit entry"));
    assert_eq!((entry.key.as_str(), entry.at), ("k", now), "{name}");
    (entry.actor, entry.action, entry.detail)
}

#[test]
fn every_operation_a_person_performs_leaves_an_audit_entry_naming_them() {
    let claimed = step(None, claim(1_000), NOW);
    let in_doubt = step(
        Some(&claimed),
        Op::MarkInDoubt {
            attempt: 1,
            reason: "crashed".into(),
        },
        NOW + 1,
    );
    assert_eq!(
        audit_of(&in_doubt, resolve(applied()), NOW + 2),
        (
            "dana".into(),
            "resolve".into(),
            Some(json!({"verdict": "applied", "output": "ok"}))
        )
    );
    let resolved = step(Some(&in_doubt), resolve(Verdict::NotApplied), NOW + 2);
    assert_eq!(
        audit_of(&resolved, amend(applied()), NOW + 3),
        (
            "dana".into(),
            "amend".into(),
            Some(json!({"verdict": "applied", "output": "ok"}))
        )
    );

    let parked = step(
        None,
        Op::Claim {
            intent: Intent {
                approval: Some("ops".into()),
                ..intent()
            },
            lease_ms: 1_000,
            takeover_in_doubt: false,
        },
        NOW,
    );
    let (actor, action, detail) = audit_of(
        &parked,
        Op::Approve {
            by: "erin".into(),
            role: "ops".into(),
            fingerprint: "f".into(),
        },
        NOW + 1,
    );
    assert_eq!((actor.as_str(), action.as_str()), ("erin", "approve"));
    assert_eq!(detail, Some(json!({"role": "ops", "fingerprint": "f"})));
    assert_eq!(
        audit_of(
            &parked,
            Op::Deny {
                by: "erin".into(),
                reason: Some("too much".into()),
            },
            NOW + 1,
        ),
        ("erin".into(), "deny".into(), Some(json!({"reason": "too much"})))
    );

    let mut done = completed();
    done.class = EffectClass::Compensable;
    assert_eq!(
        audit_of(&done, Op::MarkCompensated { by: "saga".into() }, NOW + 2),
        ("saga".into(), "compensate".into(), None)
    );

    // The engine's own operations leave none of a person's entries.
    for op in [
        claim(1_000),
        Op::Renew {
            attempt: 1,
            lease_ms: 1_000,
        },
        Op::Complete {
            attempt: 1,
            output: json!(1),
        },
        Op::Release {
            attempt: 1,
            reason: None,
        },
        Op::MarkInDoubt {
            attempt: 1,
            reason: "x".into(),
        },
        share(&["c2"]),
    ] {
        assert!(op.audit("k", NOW).is_none(), "{}", op.name());
    }
}

#[test]
fn a_denial_answers_its_own_input_and_another_input_asks_anew() {
    let needs_approval = |fingerprint: &str| Op::Claim {
        intent: Intent {
            approval: Some("ops".into()),
            fingerprint: fingerprint.into(),
            ..intent()
        },
        lease_ms: 1_000,
        takeover_in_doubt: false,
    };
    let parked = step(None, needs_approval("f"), NOW);
    let denied = step(
        Some(&parked),
        Op::Deny {
            by: "erin".into(),
            reason: Some("too much".into()),
        },
        NOW + 1,
    );
    assert_eq!(denied.state, RecordState::Denied);
    match claim_answer(&denied, needs_approval("f"), NOW + 2) {
        OpOutcome::Denied(rec) => assert_eq!(rec.reason.as_deref(), Some("too much")),
        other => panic!("the denied input must stay denied, got {other:?}"),
    }
    match claim_answer(&denied, needs_approval("g"), NOW + 2) {
        OpOutcome::AwaitingApproval(rec) => assert_eq!(rec.fingerprint, "g"),
        other => panic!("another input asks for its own approval, got {other:?}"),
    }
}

#[test]
fn a_claim_whose_lease_ended_is_taken_over_and_a_live_one_is_waited_for() {
    let held = step(None, claim(1_000), NOW);
    match claim_answer(&held, claim(1_000), NOW + 999) {
        OpOutcome::InFlight(rec) => assert_eq!(rec.attempt, 1),
        other => panic!("a live claim is waited for, got {other:?}"),
    }
    match claim_answer(&held, claim(1_000), NOW + 1_000) {
        OpOutcome::Claimed { attempt, previous, .. } => {
            assert_eq!((attempt, previous), (2, Some(RecordState::Claimed)));
        }
        other => panic!("a stale claim is taken over as an unknown outcome, got {other:?}"),
    }
}

#[test]
fn a_record_in_doubt_is_taken_over_only_by_a_call_that_may_reconcile_it() {
    let held = step(None, claim(1_000), NOW);
    let in_doubt = step(
        Some(&held),
        Op::MarkInDoubt {
            attempt: 1,
            reason: "crashed".into(),
        },
        NOW + 1,
    );
    let claim_with = |takeover_in_doubt| Op::Claim {
        intent: intent(),
        lease_ms: 1_000,
        takeover_in_doubt,
    };
    match claim_answer(&in_doubt, claim_with(true), NOW + 2) {
        OpOutcome::Claimed { attempt, previous, .. } => {
            assert_eq!((attempt, previous), (2, Some(RecordState::InDoubt)));
        }
        other => panic!("a call with recover (or an idempotent one) takes it over, got {other:?}"),
    }
    match claim_answer(&in_doubt, claim_with(false), NOW + 2) {
        OpOutcome::InDoubt(rec) => assert_eq!(rec.reason.as_deref(), Some("crashed")),
        other => panic!("any other call stops for a person, got {other:?}"),
    }
}

fn claim_needing_approval(fingerprint: &str, lease_ms: u64) -> Op {
    Op::Claim {
        intent: Intent {
            approval: Some("ops".into()),
            fingerprint: fingerprint.into(),
            ..intent()
        },
        lease_ms,
        takeover_in_doubt: false,
    }
}

fn approved(fingerprint: &str) -> EffectRecord {
    let parked = step(None, claim_needing_approval(fingerprint, 1_000), NOW);
    step(
        Some(&parked),
        Op::Approve {
            by: "erin".into(),
            role: "ops".into(),
            fingerprint: fingerprint.into(),
        },
        NOW + 1,
    )
}

#[test]
fn an_approval_given_for_another_input_is_voided_and_the_call_parks_for_its_own() {
    let rec = approved("f");
    let t = transition("k", Some(&rec), claim_needing_approval("g", 1_000), NOW + 2).expect("accepted");
    match &t.outcome {
        OpOutcome::AwaitingApproval(parked) => {
            assert_eq!(parked.fingerprint, "g");
            let reason = parked.reason.as_deref().unwrap_or_default();
            assert!(
                reason.starts_with("the approval by erin was voided: it was given for another input (fingerprint f) than this call's (g)"),
                "{reason}"
            );
        }
        other => panic!("the call must park, got {other:?}"),
    }
    let entry = t.audit.expect("the voided approval is in the audit trail");
    assert_eq!(
        (entry.actor.as_str(), entry.action.as_str()),
        ("effect-tool", "approval-voided")
    );
    let detail = entry.detail.expect("detail");
    assert_eq!(
        (
            &detail["approved_by"],
            &detail["approved_fingerprint"],
            &detail["fingerprint"]
        ),
        (&json!("erin"), &json!("f"), &json!("g"))
    );
    // The input it was given for runs on it, and leaves no entry of the engine's.
    let t = transition("k", Some(&rec), claim_needing_approval("f", 1_000), NOW + 2).expect("accepted");
    assert!(matches!(t.outcome, OpOutcome::Claimed { .. }), "{:?}", t.outcome);
    assert!(t.audit.is_none());
}

#[test]
fn an_unknown_outcome_taken_over_by_a_call_for_another_input_that_needs_approval_stops_for_a_person() {
    // The approved call's claim went stale: its effect may have happened.
    let rec = approved("f");
    let running = step(Some(&rec), claim_needing_approval("f", 1_000), NOW + 2);
    let stale = NOW + 2 + 1_000;
    match claim_answer(&running, claim_needing_approval("g", 1_000), stale) {
        OpOutcome::InDoubt(r) => assert_eq!((r.fingerprint.as_str(), r.attempt), ("f", running.attempt)),
        other => panic!("another input must not hide the unknown outcome, got {other:?}"),
    }
    // The same input takes it over (its approval was for this input).
    match claim_answer(&running, claim_needing_approval("f", 1_000), stale) {
        OpOutcome::Claimed { previous, .. } => assert_eq!(previous, Some(RecordState::Claimed)),
        other => panic!("the approved input takes its own stale claim over, got {other:?}"),
    }
}

#[test]
fn the_approver_stays_on_the_execution_they_approved_and_its_takeover_only() {
    let rec = approved("f");
    let running = step(Some(&rec), claim_needing_approval("f", 1_000), NOW + 2);
    assert_eq!(
        (running.decided_by.as_deref(), running.approval_role.as_deref()),
        (Some("erin"), Some("ops"))
    );
    let stale = NOW + 2 + 1_000;
    // Its takeover (the same input) is still the approved execution.
    let taken = step(Some(&running), claim_needing_approval("f", 1_000), stale);
    assert_eq!(taken.attempt, running.attempt + 1);
    assert_eq!(
        (taken.decided_by.as_deref(), taken.approval_role.as_deref()),
        (Some("erin"), Some("ops"))
    );
    // Another input that needs no approval takes the stale claim over: nobody approved it.
    let other = step(
        Some(&running),
        Op::Claim {
            intent: Intent {
                fingerprint: "g".into(),
                ..intent()
            },
            lease_ms: 1_000,
            takeover_in_doubt: false,
        },
        stale,
    );
    assert_eq!(
        (other.decided_by.as_deref(), other.approval_role.as_deref()),
        (None, None)
    );
    // A call that needs approval and takes over an unapproved claim of its input keeps the
    // role it needs (no approver to carry over).
    let unapproved = step(
        None,
        Op::Claim {
            intent: intent(),
            lease_ms: 1_000,
            takeover_in_doubt: false,
        },
        NOW,
    );
    let needing = step(Some(&unapproved), claim_needing_approval("f", 1_000), NOW + 1_000);
    assert_eq!(needing.state, RecordState::Claimed);
    assert_eq!(
        (needing.decided_by.as_deref(), needing.approval_role.as_deref()),
        (None, Some("ops"))
    );
}

#[test]
fn only_the_attempt_holding_the_claim_may_renew_complete_release_or_mark_it_in_doubt() {
    let writes = |attempt: u32| {
        [
            Op::Renew {
                attempt,
                lease_ms: 1_000,
            },
            Op::Complete {
                attempt,
                output: json!(1),
            },
            Op::Release { attempt, reason: None },
            Op::MarkInDoubt {
                attempt,
                reason: "x".into(),
            },
        ]
    };
    let claimed = step(None, claim(1_000), NOW);
    let released = step(
        Some(&claimed),
        Op::Release {
            attempt: 1,
            reason: None,
        },
        NOW + 1,
    );
    for op in writes(1) {
        let name = op.name();
        assert!(
            transition("k", Some(&claimed), op, NOW + 1).is_ok(),
            "{name} by the holder"
        );
    }
    // A late writer of an old attempt, or the holder after its claim ended.
    for (what, rec, attempt) in [("another attempt", &claimed, 2), ("a claim that ended", &released, 1)] {
        for op in writes(attempt) {
            let name = op.name();
            match transition("k", Some(rec), op, NOW + 2) {
                Err(e) => assert!(e.to_string().contains("no longer holds"), "{name}, {what}: {e}"),
                Ok(t) => panic!("{name} by {what} accepted: {:?}", t.outcome),
            }
        }
    }
}

#[test]
fn approvals_denials_shares_and_compensations_apply_only_to_the_state_they_are_for() {
    let claimed = step(None, claim(1_000), NOW);
    let approve = || Op::Approve {
        by: "erin".into(),
        role: "ops".into(),
        fingerprint: "f".into(),
    };
    let deny = || Op::Deny {
        by: "erin".into(),
        reason: None,
    };
    let compensate = || Op::MarkCompensated { by: "saga".into() };
    for (rec, op, hint) in [
        (&claimed, approve(), "only calls awaiting approval can be approved"),
        (&claimed, deny(), "only calls awaiting approval can be denied"),
        (&claimed, share(&["c2"]), "only a recorded result can be shared"),
        (&claimed, compensate(), "only completed effects can be compensated"),
        (&completed(), approve(), "only calls awaiting approval can be approved"),
        (&completed(), deny(), "only calls awaiting approval can be denied"),
    ] {
        let text = refused(rec, op, NOW + 1);
        assert!(text.contains(hint), "{text}");
    }
    let mut done = completed();
    done.class = EffectClass::Compensable;
    let undone = step(Some(&done), compensate(), NOW + 2);
    assert_eq!(
        (undone.state, undone.decided_by.as_deref()),
        (RecordState::Compensated, Some("saga"))
    );
}

#[test]
fn a_takeover_keeps_the_tool_calls_of_the_attempts_it_took_over() {
    let claim_as = |call_id: &str| Op::Claim {
        intent: Intent {
            call_id: Some(call_id.into()),
            ..intent()
        },
        lease_ms: 1_000,
        takeover_in_doubt: false,
    };
    let first = step(None, claim_as("c1"), NOW);
    // Another tool call (a model's retry of the same call) takes the stale claim over: c1 may
    // have applied the effect, and must get the reconciled result too.
    let second = step(Some(&first), claim_as("c2"), NOW + 1_000);
    assert_eq!(
        (second.call_id.as_deref(), second.call_ids.as_slice()),
        (Some("c2"), &["c1".to_owned()][..])
    );
    // A third takes that over: both earlier calls kept, each once, never its own id.
    let third = step(Some(&second), claim_as("c1"), NOW + 2_000);
    assert_eq!(
        (third.call_id.as_deref(), third.call_ids.as_slice()),
        (Some("c1"), &["c2".to_owned()][..])
    );
    let fourth = step(Some(&third), claim_as("c3"), NOW + 3_000);
    assert_eq!(fourth.call_ids, ["c1", "c2"]);
    // A new claim after a release is a new execution: it keeps none.
    let released = step(
        Some(&fourth),
        Op::Release {
            attempt: fourth.attempt,
            reason: None,
        },
        NOW + 3_001,
    );
    assert!(step(Some(&released), claim_as("c4"), NOW + 3_002).call_ids.is_empty());
}

#[test]
fn a_claims_ttl_runs_from_the_claim_and_the_clock_is_the_unix_epoch_in_milliseconds() {
    let rec = step(
        None,
        Op::Claim {
            intent: Intent {
                ttl_ms: Some(5_000),
                ..intent()
            },
            lease_ms: 1_000,
            takeover_in_doubt: false,
        },
        NOW,
    );
    assert_eq!(rec.expires_at, Some(NOW + 5_000));
    assert!(!rec.is_expired(NOW + 4_999));
    assert!(rec.is_expired(NOW + 5_000));
    assert_eq!(
        step(None, claim(1_000), NOW).expires_at,
        None,
        "no ttl: kept until collected"
    );
    // 2026-12-01 is 1.79e12 ms after the epoch; the clock is neither seconds nor zero.
    let now = effect_tool_core::decide::record::now_millis();
    assert!(now > 1_700_000_000_000, "{now}");
}
