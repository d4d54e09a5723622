//! Standing approvals (`decide::grant`), stated exactly: every reason a grant does not cover a
//! call, each test of a condition, the checks of a new grant against the tool's argument
//! schema, revocation, and the granted claim of the state machine (`Op::ClaimGranted`): it
//! claims only where the call would park, names the granter and the grant, and overrides no
//! denial, parked call or record in doubt.

use effect_tool_core::EffectClass;
use effect_tool_core::decide::grant::{
    BadGrant, Condition, Grant, GrantCall, NotCovered, Revocation, Test, check_condition, check_new, covers, pick,
    revoke,
};
use effect_tool_core::decide::record::{
    Current, EffectRecord, GrantUse, Intent, Millis, Op, OpOutcome, RecordState, transition,
};
use serde_json::{Value, json};

const NOW: Millis = 1_700_000_000_000;

fn grant() -> Grant {
    Grant {
        id: "g-1".into(),
        tool: "refund".into(),
        role: "finance".into(),
        granted_by: "alice".into(),
        granter_names: Vec::new(),
        when: vec![Condition {
            arg: "cents".into(),
            test: Test::AtMost(5000.0),
        }],
        valid_from: NOW - 1000,
        valid_until: NOW + 1000,
        run_id: None,
        principal: None,
        created_at: NOW - 2000,
        revoked: None,
    }
}

fn input(cents: i64) -> Value {
    json!({"order": "A-1", "cents": cents, "meta": {"channel": "web"}})
}

fn call<'a>(input: &'a Value, run_id: &'a str) -> GrantCall<'a> {
    GrantCall {
        tool: "refund",
        role: "finance",
        input,
        run_id,
        thread_id: None,
    }
}

#[test]
fn a_grants_state_at_a_time() {
    let g = grant();
    assert_eq!(g.state(NOW), "live");
    assert_eq!(g.state(NOW - 1000), "live");
    assert_eq!(g.state(NOW - 1001), "not-yet-valid");
    assert_eq!(g.state(NOW + 1000), "expired");
    let mut r = grant();
    r.revoked = Some(Revocation {
        by: "bob".into(),
        at: NOW,
    });
    assert_eq!(r.state(NOW), "revoked");
    assert_eq!(r.state(NOW + 1000), "revoked", "a revocation outranks the end");
}

#[test]
fn a_live_grant_covers_a_call_meeting_its_condition() {
    let args = input(5000);
    assert_eq!(covers(&grant(), &call(&args, "r1"), NOW), Ok(()));
    // The first instant of its period counts, the last does not.
    assert_eq!(covers(&grant(), &call(&args, "r1"), NOW - 1000), Ok(()));
    assert_eq!(
        covers(&grant(), &call(&args, "r1"), NOW + 1000),
        Err(NotCovered::Expired)
    );
    assert_eq!(
        covers(&grant(), &call(&args, "r1"), NOW - 1001),
        Err(NotCovered::NotYet)
    );
}

#[test]
fn each_reason_a_grant_does_not_cover_a_call() {
    let args = input(10);
    let mut c = call(&args, "r1");
    c.tool = "charge";
    assert_eq!(covers(&grant(), &c, NOW), Err(NotCovered::OtherTool("refund".into())));
    let mut c = call(&args, "r1");
    c.role = "ops";
    assert_eq!(covers(&grant(), &c, NOW), Err(NotCovered::OtherRole("finance".into())));
    let mut g = grant();
    g.revoked = Some(Revocation {
        by: "bob".into(),
        at: NOW - 1,
    });
    assert_eq!(
        covers(&g, &call(&args, "r1"), NOW),
        Err(NotCovered::Revoked("bob".into()))
    );
    let mut g = grant();
    g.run_id = Some("r2".into());
    assert_eq!(
        covers(&g, &call(&args, "r1"), NOW),
        Err(NotCovered::OtherRun("r2".into()))
    );
    assert_eq!(covers(&g, &call(&args, "r2"), NOW), Ok(()));
    let too_much = input(5001);
    assert_eq!(
        covers(&grant(), &call(&too_much, "r1"), NOW),
        Err(NotCovered::Condition("cents <= 5000".into()))
    );
}

#[test]
fn a_principal_grant_covers_only_that_principals_runs() {
    let args = input(10);
    let mut g = grant();
    g.principal = Some("maria".into());
    assert_eq!(covers(&g, &call(&args, "maria/r1"), NOW), Ok(()));
    assert_eq!(
        covers(&g, &call(&args, "olaf/r1"), NOW),
        Err(NotCovered::OtherPrincipal("maria".into()))
    );
    // A thread scoped to the principal counts as theirs too.
    let mut c = call(&args, "r9");
    c.thread_id = Some("maria/t1");
    assert_eq!(covers(&g, &c, NOW), Ok(()));
}

/// Four eyes: the granter's own calls are not covered by their grant.
#[test]
fn a_grant_never_covers_its_granters_own_calls() {
    let args = input(10);
    assert_eq!(
        covers(&grant(), &call(&args, "alice/r1"), NOW),
        Err(NotCovered::OwnRequest("alice".into()))
    );
    let mut c = call(&args, "r1");
    c.thread_id = Some("alice/t");
    assert_eq!(covers(&grant(), &c, NOW), Err(NotCovered::OwnRequest("alice".into())));
}

/// Four eyes across identity systems: a grant made by a person the identities file knows (here
/// through the CLI, `maria (cli token)`) does not cover the runs of their MCP principal either.
#[test]
fn a_grant_never_covers_its_granters_calls_under_another_name() {
    let args = input(10);
    let mut g = grant();
    g.granted_by = "maria (cli token)".into();
    g.granter_names = vec!["maria".into(), "m.rossi".into(), "00u1abc".into()];
    assert_eq!(
        covers(&g, &call(&args, "00u1abc/r1"), NOW),
        Err(NotCovered::OwnRequest("maria (cli token)".into()))
    );
    let mut c = call(&args, "r1");
    c.thread_id = Some("m.rossi/t");
    assert_eq!(
        covers(&g, &c, NOW),
        Err(NotCovered::OwnRequest("maria (cli token)".into()))
    );
    // Another person's run is covered.
    assert_eq!(covers(&g, &call(&args, "olaf/r1"), NOW), Ok(()));
}

#[test]
fn each_test_of_a_condition() {
    let args = json!({"n": 5, "s": "refund-7", "k": "eu", "nested": {"x": 1}, "nil": null});
    let holds = |arg: &str, test: Test| Condition { arg: arg.into(), test }.holds(&args);
    assert!(holds("n", Test::AtMost(5.0)) && !holds("n", Test::AtMost(4.9)));
    assert!(holds("n", Test::AtLeast(5.0)) && !holds("n", Test::AtLeast(5.1)));
    assert!(holds("k", Test::Equals(json!("eu"))) && !holds("k", Test::Equals(json!("us"))));
    assert!(holds("k", Test::OneOf(vec![json!("us"), json!("eu")])) && !holds("k", Test::OneOf(vec![json!("us")])));
    assert!(holds("s", Test::Prefix("refund-".into())) && !holds("s", Test::Prefix("charge-".into())));
    assert!(holds("nested.x", Test::Equals(json!(1))));
    // A missing or null argument meets no test; a test of the wrong type fails.
    assert!(!holds("missing", Test::AtLeast(0.0)));
    assert!(!holds("nil", Test::Equals(Value::Null)));
    assert!(!holds("s", Test::AtMost(1e9)) && !holds("s", Test::AtLeast(-1e9)));
    assert!(!holds("n", Test::Prefix("5".into())));
    assert!(!holds("nested.x.y", Test::Equals(json!(1))));
}

#[test]
fn every_condition_of_a_grant_must_hold() {
    let mut g = grant();
    g.when.push(Condition {
        arg: "order".into(),
        test: Test::Prefix("B-".into()),
    });
    let args = input(10);
    assert_eq!(
        covers(&g, &call(&args, "r1"), NOW),
        Err(NotCovered::Condition("order starts with \"B-\"".into()))
    );
    g.when.clear();
    assert_eq!(covers(&g, &call(&input(1_000_000), "r1"), NOW), Ok(()));
}

#[test]
fn the_first_covering_grant_is_picked() {
    let mut small = grant();
    small.id = "g-small".into();
    small.when[0].test = Test::AtMost(10.0);
    let big = grant();
    let grants = [small, big];
    assert_eq!(
        pick(&grants, &call(&input(5), "r"), NOW).map(|g| g.id.as_str()),
        Some("g-small")
    );
    assert_eq!(
        pick(&grants, &call(&input(50), "r"), NOW).map(|g| g.id.as_str()),
        Some("g-1")
    );
    assert!(pick(&grants, &call(&input(50_000), "r"), NOW).is_none());
}

#[test]
fn conditions_are_written_as_the_gateways_json() {
    let c: Condition = serde_json::from_value(json!({"arg": "cents", "at_most": 5000})).unwrap();
    assert_eq!(c.test, Test::AtMost(5000.0));
    assert_eq!(c.to_string(), "cents <= 5000");
    let c: Condition = serde_json::from_value(json!({"arg": "k", "one_of": ["a", "b"]})).unwrap();
    assert_eq!(c.to_string(), r#"k in ["a","b"]"#);
    assert!(serde_json::from_value::<Condition>(json!({"arg": "k", "below": 3})).is_err());
    let c = Condition {
        arg: "k".into(),
        test: Test::AtLeast(1.0),
    };
    assert_eq!(c.to_string(), "k >= 1");
    let c = Condition {
        arg: "k".into(),
        test: Test::Equals(json!("x")),
    };
    assert_eq!(c.to_string(), r#"k == "x""#);
}

fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "order": {"type": "string"},
            "cents": {"type": "integer"},
            "rate": {"type": ["number", "null"]},
            "meta": {"$ref": "#/$defs/Meta"},
            "any": {}
        },
        "$defs": {"Meta": {"type": "object", "properties": {"channel": {"type": "string"}}}}
    })
}

fn cond(arg: &str, test: Test) -> Vec<Condition> {
    vec![Condition { arg: arg.into(), test }]
}

#[test]
fn a_condition_is_checked_against_the_tools_argument_schema() {
    let s = schema();
    assert_eq!(check_condition("refund", &cond("cents", Test::AtMost(1.0)), &s), Ok(()));
    assert_eq!(check_condition("refund", &cond("rate", Test::AtLeast(1.0)), &s), Ok(()));
    assert_eq!(
        check_condition("refund", &cond("order", Test::Prefix("A".into())), &s),
        Ok(())
    );
    assert_eq!(
        check_condition("refund", &cond("meta.channel", Test::Prefix("w".into())), &s),
        Ok(())
    );
    assert_eq!(
        check_condition("refund", &cond("any", Test::Equals(json!(1))), &s),
        Ok(())
    );
    assert_eq!(check_condition("refund", &cond("any", Test::OneOf(vec![])), &s), Ok(()));
    match check_condition("refund", &cond("amount", Test::AtMost(1.0)), &s) {
        Err(BadGrant::NoSuchArgument { arg, known, .. }) => {
            assert_eq!(arg, "amount");
            // In declaration order where serde_json keeps it (`preserve_order`, which
            // `cedar-policy` turns on), else alphabetical: the same names either way.
            let mut names: Vec<&str> = known.split(", ").collect();
            names.sort_unstable();
            assert_eq!(names, ["any", "cents", "meta", "order", "rate"]);
        }
        other => panic!("not refused: {other:?}"),
    }
    match check_condition("refund", &cond("meta.country", Test::Equals(json!("x"))), &s) {
        Err(BadGrant::NoSuchArgument { known, .. }) => assert_eq!(known, "channel"),
        other => panic!("not refused: {other:?}"),
    }
    match check_condition("refund", &cond("cents.x", Test::Equals(json!(1))), &s) {
        Err(BadGrant::NoSuchArgument { known, .. }) => assert_eq!(known, "none"),
        other => panic!("not refused: {other:?}"),
    }
    let wrong = |arg: &str, test: Test| match check_condition("refund", &cond(arg, test), &s) {
        Err(BadGrant::WrongType { kind, test, .. }) => format!("{kind}/{test}"),
        other => panic!("not refused: {other:?}"),
    };
    assert_eq!(wrong("order", Test::AtMost(1.0)), "of type string/at_most");
    assert_eq!(wrong("order", Test::AtLeast(1.0)), "of type string/at_least");
    assert_eq!(wrong("cents", Test::Prefix("1".into())), "of type integer/prefix");
    assert_eq!(wrong("any", Test::AtMost(1.0)), "of no declared type/at_most");
    assert_eq!(wrong("rate", Test::Prefix("1".into())), "of type number or null/prefix");
}

#[test]
fn a_new_grant_needs_its_texts_and_a_period() {
    assert_eq!(check_new(&grant()), Ok(()));
    for (field, what) in [(0, "id"), (1, "tool"), (2, "role"), (3, "granter")] {
        let mut g = grant();
        *[&mut g.id, &mut g.tool, &mut g.role, &mut g.granted_by][field] = " ".into();
        assert_eq!(check_new(&g), Err(BadGrant::Missing(what)));
    }
    let mut g = grant();
    g.valid_until = g.valid_from;
    assert!(matches!(check_new(&g), Err(BadGrant::EmptyPeriod { .. })));
    g.valid_until = g.valid_from + 1;
    assert_eq!(check_new(&g), Ok(()));
}

#[test]
fn a_revocation_is_audited_once_and_never_overwritten() {
    let mut g = grant();
    let entry = revoke(&mut g, "bob", NOW).expect("a first revocation is audited");
    assert_eq!(
        (
            entry.key.as_str(),
            entry.actor.as_str(),
            entry.action.as_str(),
            entry.at
        ),
        ("grant:g-1", "bob", "grant-revoked", NOW)
    );
    assert!(revoke(&mut g, "carol", NOW + 5).is_none());
    assert_eq!(
        g.revoked,
        Some(Revocation {
            by: "bob".into(),
            at: NOW
        })
    );
    let made = effect_tool_core::decide::grant::created_entry(&grant());
    assert_eq!(
        (made.key.as_str(), made.actor.as_str(), made.action.as_str()),
        ("grant:g-1", "alice", "grant")
    );
    assert_eq!(made.at, NOW - 2000);
    assert_eq!(made.detail.unwrap()["when"][0]["at_most"], json!(5000.0));
}

fn intent(fingerprint: &str) -> Intent {
    Intent {
        tool: "refund".into(),
        class: EffectClass::Irreversible,
        run_id: "r".into(),
        thread_id: None,
        call_id: Some("c1".into()),
        fingerprint: fingerprint.into(),
        input: input(10),
        ttl_ms: None,
        approval: Some("finance".into()),
        approval_ttl_ms: None,
        holder: None,
    }
}

fn granted(fingerprint: &str) -> Op {
    Op::ClaimGranted {
        intent: intent(fingerprint),
        lease_ms: 1000,
        takeover_in_doubt: false,
        grant: GrantUse {
            id: "g-1".into(),
            by: "alice".into(),
            role: "finance".into(),
        },
    }
}

/// [`granted`] with its intent changed by `change`.
fn granted_with(change: impl FnOnce(&mut Intent)) -> Op {
    let mut op = granted("f");
    if let Op::ClaimGranted { intent, .. } = &mut op {
        change(intent);
    }
    op
}

#[test]
fn a_granted_claim_claims_where_the_call_would_park() {
    let op = granted("f");
    assert_eq!(op.name(), "claim-granted");
    assert!(op.needs_flush());
    assert!(!op.is_decision());
    let t = transition("k", Current::Absent, op, NOW).unwrap();
    let rec = t.write.expect("a granted claim writes");
    assert_eq!(rec.state, RecordState::Claimed);
    assert_eq!(rec.attempt, 1);
    assert_eq!(rec.decided_by.as_deref(), Some("alice"));
    assert_eq!(rec.approval_role.as_deref(), Some("finance"));
    assert!(matches!(t.outcome, OpOutcome::Claimed { attempt: 1, .. }));
    let audit = t.audit.expect("the grant's use is audited");
    assert_eq!(
        (audit.action.as_str(), audit.actor.as_str(), audit.key.as_str()),
        ("grant-used", "alice", "k")
    );
    let d = audit.detail.unwrap();
    assert_eq!(
        (d["grant"].clone(), d["role"].clone()),
        (json!("g-1"), json!("finance"))
    );
    assert_eq!((d["fingerprint"].clone(), d["attempt"].clone()), (json!("f"), json!(1)));
    assert_eq!(d["voided"], Value::Null);
    // An idempotent tool's granted claim needs no flush of its own, as its plain claim.
    assert!(!granted_with(|i| i.class = EffectClass::Idempotent).needs_flush());
}

fn record(state: RecordState, fingerprint: &str) -> EffectRecord {
    let t = transition("k", Current::Absent, granted(fingerprint), NOW - 10).unwrap();
    let mut rec = EffectRecord::clone(&t.write.unwrap());
    rec.state = state;
    rec.lease_until = None;
    rec.decided_by = Some("bob".into());
    rec
}

#[test]
fn a_granted_claim_over_a_released_record_or_another_inputs_denial_uses_the_grant() {
    for (state, fp) in [(RecordState::Released, "f"), (RecordState::Denied, "f0")] {
        let t = transition("k", Some(&record(state, fp)), granted("f"), NOW).unwrap();
        assert_eq!(t.write.unwrap().state, RecordState::Claimed, "over {state:?}");
        assert_eq!(t.audit.unwrap().action, "grant-used");
    }
}

#[test]
fn a_granted_claim_overrides_no_denial_parked_call_or_record_in_doubt() {
    for state in [RecordState::Denied, RecordState::AwaitingApproval, RecordState::InDoubt] {
        let t = transition("k", Some(&record(state, "f")), granted("f"), NOW).unwrap();
        assert!(t.write.is_none(), "{state:?} was changed");
        assert!(t.audit.is_none());
    }
}

#[test]
fn a_persons_approval_is_used_as_it_is_and_a_voided_one_replaced_by_the_grant() {
    // Approved by a person for this input: the plain claim, the person stays the approver.
    let t = transition("k", Some(&record(RecordState::Approved, "f")), granted("f"), NOW).unwrap();
    let rec = t.write.unwrap();
    assert_eq!(
        (rec.state, rec.decided_by.as_deref()),
        (RecordState::Claimed, Some("bob"))
    );
    assert!(t.audit.is_none());
    // Approved for another input: that approval is voided, the grant approves this one, and
    // its entry says what was voided.
    let t = transition("k", Some(&record(RecordState::Approved, "f0")), granted("f"), NOW).unwrap();
    let rec = t.write.unwrap();
    assert_eq!(
        (rec.state, rec.decided_by.as_deref()),
        (RecordState::Claimed, Some("alice"))
    );
    let audit = t.audit.unwrap();
    assert_eq!(audit.action, "grant-used");
    assert_eq!(audit.detail.unwrap()["voided"]["approved_by"], json!("bob"));
}

#[test]
fn a_granted_claim_takes_over_a_stale_claim_as_a_claim_does() {
    let mut stale = record(RecordState::Claimed, "f");
    stale.lease_until = Some(NOW - 1);
    let t = transition("k", Some(&stale), granted("f"), NOW).unwrap();
    assert_eq!(t.write.unwrap().attempt, 2);
    assert_ne!(t.audit.unwrap().action, "grant-used");
}

#[test]
fn a_call_needing_no_approval_claims_plainly_under_a_grant() {
    let op = granted_with(|i| i.approval = None);
    let t = transition("k", Current::Absent, op, NOW).unwrap();
    let rec = t.write.unwrap();
    assert_eq!((rec.state, rec.decided_by.as_deref()), (RecordState::Claimed, None));
    assert!(t.audit.is_none());
}
