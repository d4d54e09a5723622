//! `approval_ttl` (issue 33 item 4): the declaration's ttl reaches the journal, so an approval
//! older than it no longer lets the call run: the call parks again for a new approval, and
//! nothing is paid on the lapsed one (counted at a ledger the engine cannot see).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use effect_tool::{CallOptions, Disposition, Engine, MemoryStore, RecordState, RunContext, StoreExt, ToolError, tools};

#[derive(Default)]
struct Ledger {
    paid: Mutex<Vec<String>>,
}

#[tools]
impl Ledger {
    /// Pay an invoice; an approval lasts one second.
    #[tool(effect = "irreversible", key(invoice_id), approval = "finance", approval_ttl = "1s")]
    async fn pay(&self, invoice_id: String) -> Result<String, ToolError> {
        self.paid.lock().unwrap().push(invoice_id.clone());
        Ok(format!("paid {invoice_id}"))
    }
}

#[tokio::test]
async fn an_approval_lapses_after_the_declared_ttl() {
    let ledger = Arc::new(Ledger::default());
    let tool = ledger.pay_tool();
    let engine = Engine::new(MemoryStore::new());
    let run = RunContext::new("run-ttl");
    let args = || LedgerPayArgs {
        invoice_id: "inv-9".into(),
    };
    let call = || engine.call_with_report(&tool, &run, CallOptions::default(), args());

    let key = call().await.key.unwrap();
    let fp = engine.store().get(&key).await.unwrap().unwrap().fingerprint;
    engine.store().approve(&key, "dana", "finance", &fp).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let late = call().await;
    assert_eq!(
        late.disposition,
        Disposition::AwaitingApproval,
        "{:?}",
        late.result.err()
    );
    let rec = engine.store().get(&key).await.unwrap().unwrap();
    assert_eq!(rec.state, RecordState::AwaitingApproval);
    assert!(
        rec.reason.as_deref().is_some_and(|r| r.contains("voided")),
        "{:?}",
        rec.reason
    );
    assert!(
        ledger.paid.lock().unwrap().is_empty(),
        "nothing paid on a lapsed approval"
    );

    // Approved again, and called within the second: it runs, once.
    engine.store().approve(&key, "dana", "finance", &fp).await.unwrap();
    assert_eq!(call().await.result.unwrap(), "paid inv-9");
    assert_eq!(*ledger.paid.lock().unwrap(), vec!["inv-9".to_owned()]);
}
