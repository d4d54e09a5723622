//! Standing approvals through the engine, at the one moment the conformance cases cannot
//! reach: a grant revoked after the granted claim committed and before the tool runs. The
//! engine reads the grant again, gives the claim back and parks the call; the tool never runs
//! (counted in the tool's own ledger, which the engine cannot see).

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use effect_tool::decide::grant::{Condition, Grant, Test};
use effect_tool::decide::record::{AuditEntry, EffectRecord, Millis, Op, OpOutcome, RecordState};
use effect_tool::store::NewGrant;
use effect_tool::{
    CallOptions, Disposition, Engine, Filter, MemoryStore, RunContext, Store, StoreError, ToolError, tool,
};
use serde_json::Value;

static PAID: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Pay an invoice; every payment needs `finance`.
#[tool(effect = "irreversible", key(invoice), approval = "finance")]
async fn pay_granted(invoice: String, cents: u64) -> Result<String, ToolError> {
    PAID.lock().unwrap().push(invoice.clone());
    Ok(format!("paid {cents} on {invoice}"))
}

/// A journal that revokes a grant as `bob` right after a granted claim committed: the
/// revocation lands between the claim and the engine's second look at the grant.
struct RevokesAfterClaim {
    inner: MemoryStore,
    revoked: Mutex<Vec<String>>,
}

impl RevokesAfterClaim {
    async fn after(&self, op_grant: Option<String>, outcome: &Result<OpOutcome, StoreError>) {
        if let (Some(id), Ok(OpOutcome::Claimed { .. })) = (op_grant, outcome) {
            self.inner.revoke_grant(&id, "bob").await.unwrap();
            self.revoked.lock().unwrap().push(id);
        }
    }
}

fn grant_of(op: &Op) -> Option<String> {
    match op {
        Op::ClaimGranted { grant, .. } => Some(grant.id.clone()),
        _ => None,
    }
}

#[async_trait]
impl Store for RevokesAfterClaim {
    async fn get(&self, key: &str) -> Result<Option<EffectRecord>, StoreError> {
        self.inner.get(key).await
    }
    async fn apply(&self, key: &str, op: Op) -> Result<OpOutcome, StoreError> {
        let id = grant_of(&op);
        let outcome = self.inner.apply(key, op).await;
        self.after(id, &outcome).await;
        outcome
    }
    async fn claim_unseen(&self, key: &str, op: Op) -> Result<OpOutcome, StoreError> {
        let id = grant_of(&op);
        let outcome = self.inner.claim_unseen(key, op).await;
        self.after(id, &outcome).await;
        outcome
    }
    async fn list(&self, filter: &Filter) -> Result<Vec<EffectRecord>, StoreError> {
        self.inner.list(filter).await
    }
    async fn gc(&self, now: Millis) -> Result<u64, StoreError> {
        self.inner.gc(now).await
    }
    async fn audit(&self, key: Option<&str>) -> Result<Vec<AuditEntry>, StoreError> {
        self.inner.audit(key).await
    }
    async fn append_audit(&self, entry: AuditEntry) -> Result<(), StoreError> {
        self.inner.append_audit(entry).await
    }
    async fn put_output_schema(&self, tool: &str, schema: &Value) -> Result<(), StoreError> {
        self.inner.put_output_schema(tool, schema).await
    }
    async fn output_schema(&self, tool: &str) -> Result<Option<Value>, StoreError> {
        self.inner.output_schema(tool).await
    }
    async fn put_grant(&self, grant: &Grant) -> Result<(), StoreError> {
        self.inner.put_grant(grant).await
    }
    async fn grants(&self, tool: Option<&str>) -> Result<Vec<Grant>, StoreError> {
        self.inner.grants(tool).await
    }
    async fn revoke_grant(&self, id: &str, by: &str) -> Result<Option<Grant>, StoreError> {
        self.inner.revoke_grant(id, by).await
    }
}

#[tokio::test]
async fn a_grant_revoked_after_its_claim_lets_nothing_run() {
    let store = Arc::new(RevokesAfterClaim {
        inner: MemoryStore::new(),
        revoked: Mutex::new(Vec::new()),
    });
    let engine = Engine::new(store.clone());
    let grant = engine
        .grant::<PayGranted>(NewGrant {
            tool: String::new(),
            role: "finance".into(),
            granted_by: "alice".into(),
            granter_names: Vec::new(),
            when: vec![Condition {
                arg: "cents".into(),
                test: Test::AtMost(5000.0),
            }],
            valid_from: None,
            valid_until: store.now() + 3_600_000,
            run_id: None,
            principal: None,
        })
        .await
        .unwrap();
    let report = engine
        .call_with_report(
            &PayGranted,
            &RunContext::new("run-1"),
            CallOptions::default(),
            PayGrantedArgs {
                invoice: "inv-1".into(),
                cents: 100,
            },
        )
        .await;
    assert_eq!(report.disposition, Disposition::AwaitingApproval, "{:?}", report.result);
    assert_eq!(
        *store.revoked.lock().unwrap(),
        vec![grant.id.clone()],
        "the claim was granted, then revoked"
    );
    assert!(PAID.lock().unwrap().is_empty(), "the tool ran after the revocation");
    let key = report.key.unwrap();
    let rec = store.get(&key).await.unwrap().unwrap();
    assert_eq!(rec.state, RecordState::AwaitingApproval);
    let actions: Vec<_> = store
        .audit(Some(&key))
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.action)
        .collect();
    assert_eq!(actions, ["grant-used"], "the grant's use stays in the trail");
    // Called again, it still waits for a person: the revoked grant covers nothing.
    let again = engine
        .call_with_report(
            &PayGranted,
            &RunContext::new("run-1"),
            CallOptions::default(),
            PayGrantedArgs {
                invoice: "inv-2".into(),
                cents: 100,
            },
        )
        .await;
    assert_eq!(again.disposition, Disposition::AwaitingApproval);
    assert_eq!(store.revoked.lock().unwrap().len(), 1, "no second granted claim");
    assert!(PAID.lock().unwrap().is_empty());
}
