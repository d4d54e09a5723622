//! Approvals bound to what the approver saw (issue 29, items 1 and 2), through the operator API
//! over HTTP and through the journal, counted at a bank the engine cannot see:
//!
//! - a payment of 100 parks; operator maria opens it; the model calls the same key with
//!   9,999,999 (olaf's approval of 100 is voided, the new input parks); maria approves the page
//!   she still has open: refused with the new input, nothing paid;
//! - a transfer whose IBAN is `#[sensitive]` is approved; the model swaps the IBAN: the call
//!   parks again and nothing is transferred, while the IBAN never reaches the journal.
#![cfg(all(feature = "console", feature = "sqlite"))]

use crate::common;

use std::sync::{Arc, Mutex};

use common::console::{post, record, serve};
use effect_tool::ops::console::{Console, Identity, StaticTokens};
use effect_tool::store::sqlite::SqliteStore;
use effect_tool::{CallOptions, Engine, RecordState, RunContext, Store, StoreExt, ToolError, Toolkit, tools};

const MARIA: &str = "tok-maria-manager-0001";
const OLAF: &str = "tok-olaf-manager-00002";

/// The bank: every payment and transfer it made, which the engine never sees.
#[derive(Default)]
struct Bank {
    paid: Mutex<Vec<(String, u64)>>,
    transfers: Mutex<Vec<(String, u64)>>,
}

#[tools]
impl Bank {
    /// Pay an invoice (keyed by its id), once a manager approves.
    #[tool(effect = "irreversible", key(invoice_id), approval = "manager")]
    async fn pay_invoice(&self, invoice_id: String, amount: u64) -> Result<String, ToolError> {
        self.paid.lock().unwrap().push((invoice_id.clone(), amount));
        Ok(format!("paid {amount} on {invoice_id}"))
    }

    /// Transfer money for an invoice to an account, once a manager approves.
    #[tool(effect = "irreversible", key(invoice_id), approval = "manager")]
    async fn transfer(&self, invoice_id: String, amount: u64, #[sensitive] iban: String) -> Result<String, ToolError> {
        self.transfers.lock().unwrap().push((iban, amount));
        Ok(format!("transferred {amount} for {invoice_id}"))
    }
}

#[tokio::test]
async fn a_stale_page_approves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("journal.db")).unwrap());
    let bank = Arc::new(Bank::default());
    let engine = Engine::new(store.clone());
    let tokens = StaticTokens::new()
        .with(MARIA, Identity::new("maria", ["manager"]))
        .with(OLAF, Identity::new("olaf", ["manager"]));
    let toolkit = Toolkit::new().with(bank.clone().pay_invoice_tool());
    let addr = serve(Console::new(store.clone(), tokens).with_toolkit(&toolkit)).await;
    let tool = bank.clone().pay_invoice_tool();
    let run = RunContext::new("desk");
    let pay = |amount: u64| {
        engine.call(
            &tool,
            &run,
            CallOptions::default(),
            BankPayInvoiceArgs {
                invoice_id: "inv-1".into(),
                amount,
            },
        )
    };

    // 100 parks; both managers open its page; olaf approves it.
    let key = pay(100).await.unwrap_err().as_approval_pending().unwrap().key.clone();
    let maria_saw = record(addr, MARIA, &key).await["record"].clone();
    assert_eq!(maria_saw["input"]["amount"], 100);
    let olaf_saw = record(addr, OLAF, &key).await["record"].clone();
    let olaf = post(
        addr,
        OLAF,
        "/api/approve",
        serde_json::json!({"key": key, "fingerprint": olaf_saw["fingerprint"]}),
    )
    .await;
    assert_eq!(olaf.status, 200, "{}", olaf.body);

    // The model calls the same key with 9,999,999: olaf's approval is voided, it parks.
    assert!(pay(9_999_999).await.unwrap_err().as_approval_pending().is_some());

    // Maria approves the page she still has open (100): refused, and shown the new input.
    let stale = post(
        addr,
        MARIA,
        "/api/approve",
        serde_json::json!({"key": key, "fingerprint": maria_saw["fingerprint"]}),
    )
    .await;
    assert_eq!(stale.status, 409, "{}", stale.body);
    let answer = stale.json();
    let error = answer["error"].as_str().unwrap();
    assert!(error.contains("input changed") && error.contains("9999999"), "{error}");
    assert_eq!(answer["input_changed"]["input"]["amount"], 9_999_999);
    assert_ne!(answer["input_changed"]["fingerprint"], maria_saw["fingerprint"]);
    // An approval that names no input approves nothing either.
    let blind = post(addr, MARIA, "/api/approve", serde_json::json!({"key": key})).await;
    assert_eq!(blind.status, 400, "{}", blind.body);
    assert!(blind.body.contains("fingerprint"), "{}", blind.body);

    // Nothing was approved: the call still parks, nothing is paid, and the audit trail does
    // not say maria approved anything.
    assert!(pay(9_999_999).await.unwrap_err().as_approval_pending().is_some());
    assert!(bank.paid.lock().unwrap().is_empty());
    let trail = store.audit(Some(&key)).await.unwrap();
    assert!(
        !trail.iter().any(|e| e.action == "approve" && e.actor == "maria"),
        "{trail:?}"
    );

    // Maria looks at the new input and decides on it: denied.
    let now = record(addr, MARIA, &key).await;
    assert_eq!(now["record"]["input"]["amount"], 9_999_999);
    let denied = post(
        addr,
        MARIA,
        "/api/deny",
        serde_json::json!({"key": key, "reason": "not this amount"}),
    )
    .await;
    assert_eq!(denied.status, 200, "{}", denied.body);
    assert!(pay(9_999_999).await.is_err());
    assert!(bank.paid.lock().unwrap().is_empty());
}

#[tokio::test]
async fn an_approval_binds_the_sensitive_account_without_storing_it() {
    const OURS: &str = "DE89 3704 0044 0532 0130 00";
    const THEIRS: &str = "GB33 BUKB 2020 1555 5555 55";
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("journal.db")).unwrap());
    let bank = Arc::new(Bank::default());
    let engine = Engine::new(store.clone());
    let tool = bank.clone().transfer_tool();
    let run = RunContext::new("desk");
    let transfer = |iban: &str| {
        engine.call(
            &tool,
            &run,
            CallOptions::default(),
            BankTransferArgs {
                invoice_id: "inv-7".into(),
                amount: 2500,
                iban: iban.into(),
            },
        )
    };

    // Parked; a manager approves the input shown (the IBAN is bound, not shown).
    let key = transfer(OURS)
        .await
        .unwrap_err()
        .as_approval_pending()
        .unwrap()
        .key
        .clone();
    let shown = store.get(&key).await.unwrap().unwrap();
    assert_eq!(effect_tool::call::key::bound_fields(&shown.input), ["iban"]);
    store
        .approve(&key, "maria", "manager", &shown.fingerprint)
        .await
        .unwrap();

    // The model swaps the IBAN: the approval does not cover it; the call parks again.
    let swapped = transfer(THEIRS).await.unwrap_err();
    assert!(swapped.as_approval_pending().is_some(), "{swapped}");
    assert!(bank.transfers.lock().unwrap().is_empty(), "no transfer ran");
    let parked = store.get(&key).await.unwrap().unwrap();
    assert_eq!(parked.state, RecordState::AwaitingApproval);
    assert_ne!(parked.fingerprint, shown.fingerprint);
    // A stale approval of the first account is refused.
    assert!(
        store
            .approve(&key, "maria", "manager", &shown.fingerprint)
            .await
            .unwrap_err()
            .to_string()
            .contains("input changed")
    );

    // Neither IBAN is in the journal: records and audit trail.
    for rec in store.list(&effect_tool::store::Filter::all()).await.unwrap() {
        let text = serde_json::to_string(&rec).unwrap();
        assert!(!text.contains("DE89") && !text.contains("GB33"), "{text}");
    }
    let trail = serde_json::to_string(&store.audit(Some(&key)).await.unwrap()).unwrap();
    assert!(!trail.contains("DE89") && !trail.contains("GB33"), "{trail}");

    // Approved for the account it now names, it runs once, to that account.
    store
        .approve(&key, "maria", "manager", &parked.fingerprint)
        .await
        .unwrap();
    transfer(THEIRS).await.unwrap();
    assert_eq!(*bank.transfers.lock().unwrap(), [(THEIRS.to_owned(), 2500)]);
}
