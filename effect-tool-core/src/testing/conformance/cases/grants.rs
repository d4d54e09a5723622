//! The conformance cases of standing approvals ([`crate::decide::grant`]): kept, listed,
//! revoked and audited by every store; a granted claim written and audited in the store's
//! atomic section; and through the engine, a covered call runs once (counted in a ledger file
//! the engine cannot see), an uncovered one parks, and a revoked grant lets nothing through.

use super::*;
use crate::decide::grant::{Condition, Test};
use crate::decide::record::{GrantUse, Op};
use crate::store::{GrantError, GrantsExt, NewGrant};

/// The arguments of [`Refund`].
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RefundArgs {
    /// The order refunded (the effect key).
    pub order: String,
    /// How much, in cents.
    pub cents: i64,
}

/// An irreversible tool that needs the approval of `finance`; its effect is a line in a
/// ledger file.
#[derive(Debug, Clone)]
struct Refund {
    ledger: PathBuf,
}

impl Tool for Refund {
    type Args = RefundArgs;
    type Output = String;
    type Error = ToolError;
    const NAME: &'static str = "refund";
    const CLASS: EffectClass = EffectClass::Irreversible;
    const APPROVAL: Option<&'static str> = Some("finance");
    const KEY_RULE: KeyRule = KeyRule::Custom("|a| a.order.clone()");
    const WINDOW: Window = Window::CrossRun;

    fn key(&self, args: &RefundArgs) -> Option<String> {
        Some(format!("refund:{}", args.order))
    }

    async fn call(&self, _ctx: &EffectCtx, args: RefundArgs) -> Result<String, ToolError> {
        ledger_append(&self.ledger, &format!("{} {}", args.order, args.cents));
        Ok(format!("refunded {} cents of {}", args.cents, args.order))
    }
}

fn new_grant(tool: &str, until: crate::decide::record::Millis) -> NewGrant {
    NewGrant {
        tool: tool.to_owned(),
        role: "finance".to_owned(),
        granted_by: "alice".to_owned(),
        granter_names: Vec::new(),
        when: vec![Condition {
            arg: "cents".to_owned(),
            test: Test::AtMost(5000.0),
        }],
        valid_from: None,
        valid_until: until,
        run_id: None,
        principal: None,
    }
}

/// A grant is refused without the tool's argument schema and for an argument it does not
/// have; kept with its audit entry; listed (by tool too); revoked once, with its entry, the
/// first revocation kept; a revoked grant is not live.
pub async fn grants_kept_listed_revoked<H: Harness>() {
    let h = H::fresh().await;
    let s = h.store();
    let tool = format!("refund_{}", fastrand::u64(..));
    let hour = s.now() + 3_600_000;
    match s.add_grant(new_grant(&tool, hour)).await {
        Err(GrantError::Bad(crate::decide::grant::BadGrant::NoSchema(t))) => assert_eq!(t, tool),
        other => panic!("a grant without the tool's schema was not refused: {other:?}"),
    }
    s.put_input_schema(&tool, &serde_json::to_value(schemars::schema_for!(RefundArgs)).unwrap())
        .await
        .unwrap();
    let mut bad = new_grant(&tool, hour);
    bad.when[0].arg = "amount".to_owned();
    let refused = s.add_grant(bad).await.unwrap_err().to_string();
    assert!(
        refused.contains("no argument `amount`") && refused.contains("cents"),
        "{refused}"
    );
    assert!(
        s.grants(Some(&tool)).await.unwrap().is_empty(),
        "a refused grant was kept"
    );

    let g = s.add_grant(new_grant(&tool, hour)).await.unwrap();
    assert!(g.id.starts_with("g-") && g.id.len() == 18, "{}", g.id);
    let other = s.add_grant(new_grant(&format!("{tool}_x"), hour)).await;
    assert!(
        matches!(other, Err(GrantError::Bad(_))),
        "another tool has no schema here"
    );
    assert_eq!(s.grants(Some(&tool)).await.unwrap(), vec![g.clone()]);
    assert!(s.grants(None).await.unwrap().contains(&g));
    assert_eq!(s.grant(&g.id).await.unwrap(), Some(g.clone()));
    assert_eq!(s.grant("g-none").await.unwrap(), None);
    assert!(s.put_grant(&g).await.is_err(), "a second grant of one id was kept");
    assert_eq!(s.live_grants(Some(&tool)).await.unwrap(), vec![g.clone()]);

    let revoked = s.revoke_grant(&g.id, "bob").await.unwrap().unwrap();
    assert_eq!(revoked.revoked.as_ref().map(|r| r.by.as_str()), Some("bob"));
    let again = s.revoke_grant(&g.id, "carol").await.unwrap().unwrap();
    assert_eq!(again.revoked, revoked.revoked, "the first revocation stands");
    assert_eq!(s.grant(&g.id).await.unwrap(), Some(revoked));
    assert!(s.live_grants(Some(&tool)).await.unwrap().is_empty());
    assert_eq!(s.revoke_grant("g-none", "bob").await.unwrap(), None);

    let trail = s.audit(Some(&format!("grant:{}", g.id))).await.unwrap();
    let actions: Vec<_> = trail.iter().map(|e| (e.actor.as_str(), e.action.as_str())).collect();
    assert_eq!(actions, [("alice", "grant"), ("bob", "grant-revoked")]);
    assert_eq!(trail[0].detail.as_ref().unwrap()["id"], json!(g.id));
}

/// A granted claim is written and audited atomically like a claim: the granter on the
/// record, the grant's id in the entry; a denial is not overridden.
pub async fn granted_claim_is_audited<H: Harness>() {
    let h = H::fresh().await;
    let s = h.store();
    let mut needs = intent("r");
    needs.approval = Some("finance".to_owned());
    let op = |intent: Intent| Op::ClaimGranted {
        intent,
        lease_ms: 30_000,
        takeover_in_doubt: false,
        grant: GrantUse {
            id: "g-1".to_owned(),
            by: "alice".to_owned(),
            role: "finance".to_owned(),
        },
    };
    let k = key("granted");
    let (attempt, _) = claimed(s.claim_unseen(&k, op(needs.clone())).await.unwrap());
    let rec = s.get(&k).await.unwrap().unwrap();
    assert_eq!(
        (rec.state, rec.decided_by.as_deref(), rec.approval_role.as_deref()),
        (RecordState::Claimed, Some("alice"), Some("finance"))
    );
    s.complete(&k, attempt, json!("paid")).await.unwrap();
    let trail = s.audit(Some(&k)).await.unwrap();
    assert_eq!(trail.len(), 1, "{trail:?}");
    assert_eq!(
        (trail[0].actor.as_str(), trail[0].action.as_str()),
        ("alice", "grant-used")
    );
    assert_eq!(trail[0].detail.as_ref().unwrap()["grant"], json!("g-1"));
    // Through `apply` too, and a granted claim of a recorded key replays it.
    assert!(matches!(
        s.apply(&k, op(needs.clone())).await.unwrap(),
        OpOutcome::Recorded(_)
    ));

    let no = key("granted-denied");
    assert!(matches!(
        s.claim(&no, needs.clone(), 30_000, false).await.unwrap(),
        OpOutcome::AwaitingApproval(_)
    ));
    s.deny(&no, "dave", None).await.unwrap();
    assert!(matches!(
        s.apply(&no, op(needs.clone())).await.unwrap(),
        OpOutcome::Denied(_)
    ));
    assert_eq!(s.audit(Some(&no)).await.unwrap().len(), 1, "only the denial");
}

/// Through the engine: a call the grant covers runs once without parking (a ledger line the
/// engine cannot see), its record naming the granter and its audit the grant; a call over
/// the limit, and the granter's own call, park; after the revocation nothing runs.
pub async fn engine_uses_grants<H: Harness>() {
    let h = H::fresh().await;
    let s = h.store();
    let dir = ScratchDir::new("grants");
    let ledger = dir.path().join("ledger");
    let tool = Refund { ledger: ledger.clone() };
    let engine = Engine::new(s.clone());
    let n = fastrand::u64(..);
    let run = RunContext::new(format!("grants-{n}"));
    let args = |order: &str, cents: i64| RefundArgs {
        order: format!("{order}-{n}"),
        cents,
    };
    // Before any grant: the call parks (and the engine keeps the tool's argument schema).
    let first = engine
        .call_with_report(&tool, &run, CallOptions::default(), args("A", 100))
        .await;
    assert_eq!(first.disposition, Disposition::AwaitingApproval);
    let g = s
        .add_grant(new_grant("refund", s.now() + 3_600_000))
        .await
        .expect("the engine kept the tool's argument schema");
    // The parked call stays parked: a grant approves new calls, a person decides parked ones.
    let again = engine
        .call_with_report(&tool, &run, CallOptions::default(), args("A", 100))
        .await;
    assert_eq!(again.disposition, Disposition::AwaitingApproval);

    let covered = engine
        .call_with_report(&tool, &run, CallOptions::default(), args("B", 5000))
        .await;
    assert_eq!(covered.disposition, Disposition::Executed, "{:?}", covered.result);
    let k = format!("refund:B-{n}");
    let rec = s.get(&k).await.unwrap().unwrap();
    assert_eq!(
        (rec.state, rec.decided_by.as_deref()),
        (RecordState::Completed, Some("alice"))
    );
    let trail = s.audit(Some(&k)).await.unwrap();
    assert!(
        trail
            .iter()
            .any(|e| e.action == "grant-used" && e.detail.as_ref().is_some_and(|d| d["grant"] == json!(g.id))),
        "{trail:?}"
    );
    let replay = engine
        .call_with_report(&tool, &run, CallOptions::call_id("call_2"), args("B", 5000))
        .await;
    assert_eq!(replay.disposition, Disposition::Replayed);

    let over = engine
        .call_with_report(&tool, &run, CallOptions::default(), args("C", 5001))
        .await;
    assert_eq!(over.disposition, Disposition::AwaitingApproval);
    let own = RunContext::new(format!("alice/grants-{n}"));
    let own_call = engine
        .call_with_report(&tool, &own, CallOptions::default(), args("D", 10))
        .await;
    assert_eq!(own_call.disposition, Disposition::AwaitingApproval, "four eyes");

    s.revoke_grant(&g.id, "bob").await.unwrap();
    let after = engine
        .call_with_report(&tool, &run, CallOptions::default(), args("E", 10))
        .await;
    assert_eq!(after.disposition, Disposition::AwaitingApproval);
    assert_eq!(
        ledger_lines(&ledger),
        vec![format!("B-{n} 5000")],
        "one refund ran, once: the covered one"
    );
}

/// A grant made through one handle of a shared journal is revoked through another, and the
/// other sees it revoked at once.
pub async fn grants_across_handles<H: Harness>() {
    let h = H::fresh().await;
    let first = h.store();
    let second = H::open(&h.locator().expect("a durable harness has a locator")).await;
    let tool = format!("refund_{}", fastrand::u64(..));
    first
        .put_input_schema(&tool, &serde_json::to_value(schemars::schema_for!(RefundArgs)).unwrap())
        .await
        .unwrap();
    let g = first
        .add_grant(new_grant(&tool, first.now() + 3_600_000))
        .await
        .unwrap();
    assert_eq!(second.grant(&g.id).await.unwrap(), Some(g.clone()));
    second.revoke_grant(&g.id, "bob").await.unwrap();
    assert!(first.grant(&g.id).await.unwrap().unwrap().revoked.is_some());
    assert!(first.live_grants(Some(&tool)).await.unwrap().is_empty());
}
