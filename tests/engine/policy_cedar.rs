//! Policy as code (issue 33, item 6): the Cedar files of `testdata/policy/` allow a call, deny
//! it with a reason the model reads as the tool's result, park it for a role's approval, only
//! log in shadow mode, and never lift an approval a `#[tool]` declares. Every run of a tool is
//! a line in a ledger file the engine cannot see; every case runs on every backend.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use effect_tool::decide::cedar::{Policies, PolicyMode};
use effect_tool::engine::EngineEvent;
use effect_tool::toolkit::{ToolCall, Toolkit};
use effect_tool::{
    CallOptions, Disposition, EffectError, Engine, RecordState, RunContext, Store, StoreExt, ToolError, tools,
};
use effect_tool_core::testing::conformance::{Harness, MemoryHarness, SqliteHarness, run};

/// The shop's tools; every run is a line in the ledger file.
struct Shop {
    ledger: PathBuf,
}

impl Shop {
    fn record(&self, line: String) -> Result<String, ToolError> {
        use std::io::Write as _;
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.ledger)
            .map_err(|e| ToolError::transient(e.to_string()))?;
        writeln!(file, "{line}").map_err(|e| ToolError::transient(e.to_string()))?;
        Ok(line)
    }
}

#[tools]
impl Shop {
    /// Refund part of an order.
    #[tool(effect = "idempotent", key(order_id, amount_cents))]
    async fn issue_refund(&self, order_id: String, amount_cents: u64) -> Result<String, ToolError> {
        self.record(format!("refund {amount_cents} on {order_id}"))
    }

    /// Send the receipt of an order (ops approves every one).
    #[tool(effect = "irreversible", key(order_id), approval = "ops")]
    async fn send_receipt(&self, order_id: String) -> Result<String, ToolError> {
        self.record(format!("receipt for {order_id}"))
    }

    /// Delete an order's draft (cannot be undone).
    #[tool(effect = "irreversible", key(order_id))]
    async fn delete_draft(&self, order_id: String) -> Result<String, ToolError> {
        self.record(format!("draft of {order_id} deleted"))
    }
}

fn policies(file: &str) -> Policies {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/policy").join(file);
    Policies::from_file(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The ledger's lines: what really ran.
fn ledger(shop: &Shop) -> Vec<String> {
    std::fs::read_to_string(&shop.ledger)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

struct Setup {
    _dir: tempfile::TempDir,
    shop: Arc<Shop>,
    toolkit: Toolkit,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let shop = Arc::new(Shop {
        ledger: dir.path().join("ledger.txt"),
    });
    let mut toolkit = Toolkit::new();
    toolkit
        .add(shop.issue_refund_tool())
        .add(shop.send_receipt_tool())
        .add(shop.delete_draft_tool());
    Setup {
        _dir: dir,
        shop,
        toolkit,
    }
}

fn call(id: &str, name: &str, args: serde_json::Value) -> ToolCall {
    ToolCall {
        id: id.to_owned(),
        name: name.to_owned(),
        arguments: args.to_string(),
    }
}

/// The audit entries of `key` whose action starts with `policy-`.
async fn policy_audit(store: &Arc<dyn Store>, key: &str) -> Vec<(String, serde_json::Value)> {
    store
        .audit(Some(key))
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.action.starts_with("policy-"))
        .map(|e| (e.action, e.detail.unwrap_or_default()))
        .collect()
}

/// Allowed, denied with a reason for the model, parked for finance (then approved and run
/// once), and an anonymous irreversible call denied: through the dispatcher, as a model calls.
async fn allow_deny_and_approve(store: Arc<dyn Store>) {
    let Setup { _dir, shop, toolkit } = setup();
    let engine = Engine::new(store).with_policies(policies("shop.cedar"));
    let mut events = engine.events();
    let dispatcher = toolkit.dispatcher(engine.clone());
    let run = RunContext::new("run-policy").with_principal("ann");

    // Allowed: 500 cents runs at once.
    let results = dispatcher
        .dispatch(
            &run,
            &[call(
                "c1",
                "issue_refund",
                serde_json::json!({"order_id": "A-1", "amount_cents": 500}),
            )],
        )
        .await;
    assert_eq!(
        results[0].disposition,
        Disposition::Executed,
        "{}",
        results[0].content()
    );
    assert_eq!(ledger(&shop), ["refund 500 on A-1"]);

    // Denied: 9000 cents never runs; the model reads the policy's reason; the audit names it.
    let results = dispatcher
        .dispatch(
            &run,
            &[call(
                "c2",
                "issue_refund",
                serde_json::json!({"order_id": "A-1", "amount_cents": 9000}),
            )],
        )
        .await;
    let denied = &results[0];
    assert_eq!(denied.disposition, Disposition::Rejected);
    let text = denied.content();
    assert!(
        text.contains("refunds above 5000 cents are made by a person") && text.contains("refund-limit"),
        "the model reads the reason: {text}"
    );
    assert!(
        !text.contains("effect-tool "),
        "no operator command for the model: {text}"
    );
    assert_eq!(ledger(&shop), ["refund 500 on A-1"], "the denied refund did not run");
    let key = denied.key.clone().expect("the denied call was keyed");
    assert!(engine.store().get(&key).await.unwrap().is_none(), "nothing journaled");
    let audit = policy_audit(engine.store(), &key).await;
    assert_eq!(audit.len(), 1, "{audit:?}");
    assert_eq!(audit[0].0, "policy-deny");
    assert_eq!(audit[0].1["policies"], serde_json::json!(["refund-limit"]));
    assert_eq!(audit[0].1["principal"], "ann");

    // Parked for finance: 2000 cents waits, runs after finance approves, once.
    let refund = shop.issue_refund_tool();
    let args = || ShopIssueRefundArgs {
        order_id: "A-2".into(),
        amount_cents: 2000,
    };
    let err = engine
        .call(&refund, &run, CallOptions::default(), args())
        .await
        .unwrap_err();
    let pending = err
        .as_approval_pending()
        .unwrap_or_else(|| panic!("parks: {err}"))
        .clone();
    assert_eq!(pending.role, "finance");
    let rec = engine.store().get(&pending.key).await.unwrap().unwrap();
    assert_eq!(rec.state, RecordState::AwaitingApproval);
    assert_eq!(rec.approval_role.as_deref(), Some("finance"));
    assert_eq!(ledger(&shop).len(), 1, "nothing ran while parked");
    let audit = policy_audit(engine.store(), &pending.key).await;
    assert_eq!(audit[0].0, "policy-approval");
    assert_eq!(audit[0].1["role"], "finance");
    assert_eq!(audit[0].1["policies"], serde_json::json!(["refund-review"]));
    // The wrong role cannot approve it; finance can.
    assert!(
        engine
            .store()
            .approve(&pending.key, "olga", "ops", &rec.fingerprint)
            .await
            .is_err()
    );
    engine
        .store()
        .approve(&pending.key, "fay", "finance", &rec.fingerprint)
        .await
        .unwrap();
    let out = engine
        .call(&refund, &run, CallOptions::default(), args())
        .await
        .unwrap();
    assert_eq!(out, "refund 2000 on A-2");
    let again = engine
        .call_with_report(&refund, &run, CallOptions::default(), args())
        .await;
    assert_eq!(again.disposition, Disposition::Replayed);
    assert_eq!(ledger(&shop), ["refund 500 on A-1", "refund 2000 on A-2"], "ran once");

    // A run with no principal: the irreversible tool is denied, the idempotent one is not.
    let anonymous = RunContext::new("run-anonymous");
    let results = dispatcher
        .dispatch(
            &anonymous,
            &[call("c3", "delete_draft", serde_json::json!({"order_id": "A-3"}))],
        )
        .await;
    assert_eq!(results[0].disposition, Disposition::Rejected);
    assert!(
        results[0].content().contains("needs a signed-in user"),
        "{}",
        results[0].content()
    );
    let signed_in = dispatcher
        .dispatch(
            &run,
            &[call("c4", "delete_draft", serde_json::json!({"order_id": "A-3"}))],
        )
        .await;
    assert_eq!(
        signed_in[0].disposition,
        Disposition::Executed,
        "{}",
        signed_in[0].content()
    );
    assert_eq!(ledger(&shop).last().map(String::as_str), Some("draft of A-3 deleted"));

    // Each decision was an event.
    let mut decided = Vec::new();
    while let Ok(event) = events.try_recv() {
        if let EngineEvent::PolicyDecided { decision, enforced, .. } = event {
            assert!(enforced);
            decided.push(decision);
        }
    }
    assert!(decided.contains(&"deny") && decided.contains(&"require-approval") && decided.contains(&"allow"));
}

/// Shadow mode: the same policies only log; everything runs as declared; the audit says what
/// would have happened.
async fn shadow_runs_and_logs(store: Arc<dyn Store>) {
    let Setup { _dir, shop, toolkit } = setup();
    let engine = Engine::new(store).with_policies(policies("shop.cedar").shadow());
    assert_eq!(engine.policies().unwrap().mode(), PolicyMode::Shadow);
    let mut events = engine.events();
    let dispatcher = toolkit.dispatcher(engine.clone());
    let run = RunContext::new("run-shadow").with_principal("ann");
    let results = dispatcher
        .dispatch(
            &run,
            &[call(
                "c1",
                "issue_refund",
                serde_json::json!({"order_id": "B-1", "amount_cents": 9000}),
            )],
        )
        .await;
    assert_eq!(
        results[0].disposition,
        Disposition::Executed,
        "{}",
        results[0].content()
    );
    let results = dispatcher
        .dispatch(
            &run,
            &[call(
                "c2",
                "issue_refund",
                serde_json::json!({"order_id": "B-2", "amount_cents": 2000}),
            )],
        )
        .await;
    assert_eq!(
        results[0].disposition,
        Disposition::Executed,
        "not parked: {}",
        results[0].content()
    );
    assert_eq!(ledger(&shop), ["refund 9000 on B-1", "refund 2000 on B-2"]);
    let audit = policy_audit(engine.store(), results[0].key.as_deref().unwrap()).await;
    assert_eq!(audit.len(), 1, "{audit:?}");
    assert_eq!(audit[0].0, "policy-shadow");
    assert_eq!(audit[0].1["decision"], "require-approval");
    assert_eq!(audit[0].1["mode"], "shadow");
    let mut shadowed = 0;
    while let Ok(event) = events.try_recv() {
        if let EngineEvent::PolicyDecided { enforced, decision, .. } = event {
            assert!(!enforced);
            shadowed += usize::from(decision != "allow");
        }
    }
    assert_eq!(shadowed, 2);
    // Turned off while running: the next call is asked nothing.
    engine.set_policies(None);
    assert!(engine.policies().is_none());
}

/// The floor: a policy that permits everything leaves a declared approval in place, and a
/// policy asking another role than the declared one does not replace it.
async fn declarations_are_the_floor(store: Arc<dyn Store>) {
    let Setup { _dir, shop, .. } = setup();
    let engine = Engine::new(store).with_policies(policies("permit_all.cedar"));
    let run = RunContext::new("run-floor").with_principal("ann");
    let receipt = shop.send_receipt_tool();
    let err = engine
        .call(
            &receipt,
            &run,
            CallOptions::default(),
            ShopSendReceiptArgs { order_id: "C-1".into() },
        )
        .await
        .unwrap_err();
    let pending = err.as_approval_pending().unwrap_or_else(|| panic!("parks: {err}"));
    assert_eq!(pending.role, "ops", "the declared role approves");
    assert!(ledger(&shop).is_empty());
    let audit = policy_audit(engine.store(), &pending.key).await;
    assert_eq!(audit[0].1["role"], "finance");
    assert_eq!(audit[0].1["declared_role"], "ops");
    // And a permitted tool without a declared approval runs at once.
    let draft = shop.delete_draft_tool();
    engine
        .call(
            &draft,
            &run,
            CallOptions::default(),
            ShopDeleteDraftArgs { order_id: "C-1".into() },
        )
        .await
        .unwrap();
    assert_eq!(ledger(&shop), ["draft of C-1 deleted"]);
}

async fn every_case<H: Harness>() {
    allow_deny_and_approve(H::fresh().await.store()).await;
    shadow_runs_and_logs(H::fresh().await.store()).await;
    declarations_are_the_floor(H::fresh().await.store()).await;
}

#[test]
fn memory_policies() {
    run::<MemoryHarness, _, _>("policy_cedar", every_case::<MemoryHarness>);
}

#[test]
fn sqlite_policies() {
    run::<SqliteHarness, _, _>("policy_cedar", every_case::<SqliteHarness>);
}

#[cfg(feature = "postgres")]
#[test]
fn postgres_policies() {
    use effect_tool_core::testing::conformance::PostgresHarness;
    run::<PostgresHarness, _, _>("policy_cedar", every_case::<PostgresHarness>);
}

/// `Toolkit::check_policies`: the testdata policies fit the shop; the wrong one names
/// `amount`, which `issue_refund` does not have.
#[test]
fn check_against_the_toolkit() {
    let Setup { toolkit, .. } = setup();
    for good in ["shop.cedar", "permit_all.cedar"] {
        toolkit
            .check_policies(&policies(good))
            .unwrap_or_else(|e| panic!("{good}: {e}"));
    }
    let err = toolkit.check_policies(&policies("wrong_field.cedar")).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("amount") && text.contains("refund-limit"), "{text}");
    let schema = toolkit.policy_schema().unwrap();
    assert!(
        schema.contains("amount_cents") && schema.contains("call_without_approval"),
        "{schema}"
    );
    // A denial's error names the policy for people too.
    let denied: EffectError = EffectError::Denied {
        tool: "issue_refund".into(),
        key: "k".into(),
        by: "the deployment's policy `refund-limit`".into(),
        reason: Some("too large".into()),
    };
    assert!(denied.to_string().contains("refund-limit"));
}
