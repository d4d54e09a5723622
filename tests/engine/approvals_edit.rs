//! Edit and approve (issue 33 item 1): a person changes a parked call's arguments and approves
//! the edited call. It runs once, with the edited arguments, counted at a bank the engine
//! cannot see; the journal keeps both inputs and who edited; the report says which fields
//! changed. The key follows the edited input: a key rule that does not read the changed field
//! keeps the call's key, a key made from the whole input runs the edit under its own key, and
//! both the original call and a call with the edited arguments replay that one run. On every
//! backend.

use std::sync::{Arc, Mutex};

use effect_tool::{CallOptions, Disposition, Engine, RecordState, RunContext, Store, StoreExt, Tool, ToolError, tools};
use effect_tool_core::testing::conformance::{Harness, MemoryHarness, SqliteHarness, run};
use serde_json::json;

/// The bank: every transfer it makes (invoice, amount, the card it was charged to).
#[derive(Default)]
struct Bank {
    paid: Mutex<Vec<(String, u64, String)>>,
}

impl Bank {
    fn pay(&self, invoice_id: &str, amount: u64, card: &str) -> String {
        self.paid
            .lock()
            .unwrap()
            .push((invoice_id.to_owned(), amount, card.to_owned()));
        format!("paid {amount} on {invoice_id}")
    }

    fn paid(&self) -> Vec<(String, u64, String)> {
        self.paid.lock().unwrap().clone()
    }
}

#[tools]
impl Bank {
    /// Pay an invoice, keyed by its id (the amount is not part of the key).
    #[tool(effect = "irreversible", key(invoice_id), approval = "finance")]
    async fn pay_invoice(
        &self,
        invoice_id: String,
        amount: u64,
        #[sensitive] card: String,
    ) -> Result<String, ToolError> {
        Ok(self.pay(&invoice_id, amount, &card))
    }

    /// Top up an account; the key is made from the whole input.
    #[tool(effect = "idempotent", approval = "finance")]
    async fn top_up(&self, invoice_id: String, amount: u64) -> Result<String, ToolError> {
        Ok(self.pay(&invoice_id, amount, "-"))
    }
}

async fn park<T: Tool>(engine: &Engine, tool: &T, run: &RunContext, args: T::Args) -> String
where
    T::Output: std::fmt::Debug,
{
    let report = engine.call_with_report(tool, run, CallOptions::default(), args).await;
    assert_eq!(report.disposition, Disposition::AwaitingApproval);
    report.key.expect("a journaled call has a key")
}

/// A key rule that does not read the edited field: the edit runs under the call's own key.
async fn edit_under_the_same_key(store: Arc<dyn Store>) {
    let bank = Arc::new(Bank::default());
    let tool = bank.pay_invoice_tool();
    let engine = Engine::new(store);
    let run = RunContext::new("run-edit");
    let args = || BankPayInvoiceArgs {
        invoice_id: "inv-1".into(),
        amount: 9_000,
        card: "4111-secret".into(),
    };
    let key = park(&engine, &tool, &run, args()).await;
    let shown = engine.store().get(&key).await.unwrap().unwrap();
    assert!(
        !serde_json::to_string(&shown.input).unwrap().contains("4111-secret"),
        "the approver never sees the card"
    );

    // dana lowers the amount; she cannot touch the card.
    let mut edited = shown.input.clone();
    edited["amount"] = json!(900);
    let mut card = edited.clone();
    card["card"] = json!("5555-other");
    assert!(
        engine
            .store()
            .approve_edited(&key, "dana", "finance", &shown.fingerprint, card)
            .await
            .is_err()
    );
    let mut typo = edited.clone();
    typo["amount"] = json!("nine hundred");
    let refused = engine
        .store()
        .approve_edited(&key, "dana", "finance", &shown.fingerprint, typo)
        .await
        .unwrap_err();
    assert!(
        refused.to_string().contains("/amount"),
        "checked against the tool's schema: {refused}"
    );
    engine
        .store()
        .approve_edited(&key, "dana", "finance", &shown.fingerprint, edited.clone())
        .await
        .unwrap();
    assert_eq!(bank.paid(), vec![], "approving runs nothing by itself");

    // The model's call comes again, unchanged: the edited call runs, once, with the card the
    // model gave.
    let report = engine
        .call_with_report(&tool, &run, CallOptions::default(), args())
        .await;
    assert_eq!(report.result.unwrap(), "paid 900 on inv-1");
    assert_eq!(report.disposition, Disposition::Executed);
    assert_eq!(report.key.as_deref(), Some(key.as_str()));
    assert_eq!(report.edited, Some(vec!["amount".to_owned()]));
    assert_eq!(bank.paid(), vec![("inv-1".to_owned(), 900, "4111-secret".to_owned())]);

    // Again: a replay of that run, never a second payment, never the original 9000.
    let again = engine
        .call_with_report(&tool, &run, CallOptions::default(), args())
        .await;
    assert_eq!(again.result.unwrap(), "paid 900 on inv-1");
    assert_eq!(again.disposition, Disposition::Replayed);
    assert_eq!(bank.paid().len(), 1);

    // The journal: the record keeps the input dana was shown; the trail the edit and who.
    let rec = engine.store().get(&key).await.unwrap().unwrap();
    assert_eq!(
        (rec.state, rec.decided_by.as_deref()),
        (RecordState::Completed, Some("dana"))
    );
    assert_eq!(rec.input["amount"], 9_000);
    let trail = engine.store().audit(Some(&key)).await.unwrap();
    let edit = trail
        .iter()
        .find(|e| e.action == "approve-edited")
        .expect("the edit is audited");
    assert_eq!(edit.actor, "dana");
    let detail = edit.detail.as_ref().unwrap();
    assert_eq!(detail["edited_input"]["amount"], 900);
    assert_eq!(detail["changed"], json!(["amount"]));
    assert_eq!(detail["fingerprint"], json!(shown.fingerprint));
}

/// A key made from the whole input: the edit runs once under its own key, and the original key
/// records that run's result; a call with the edited arguments replays it too.
async fn edit_under_its_own_key(store: Arc<dyn Store>) {
    let bank = Arc::new(Bank::default());
    let tool = bank.top_up_tool();
    let engine = Engine::new(store);
    let run = RunContext::new("run-top-up");
    let args = |amount| BankTopUpArgs {
        invoice_id: "acct-7".into(),
        amount,
    };
    let key = park(&engine, &tool, &run, args(5_000)).await;
    let shown = engine.store().get(&key).await.unwrap().unwrap();
    let mut edited = shown.input.clone();
    edited["amount"] = json!(50);
    engine
        .store()
        .approve_edited(&key, "erin", "finance", &shown.fingerprint, edited)
        .await
        .unwrap();

    let report = engine
        .call_with_report(&tool, &run, CallOptions::default(), args(5_000))
        .await;
    assert_eq!(report.result.unwrap(), "paid 50 on acct-7");
    assert_eq!(report.edited, Some(vec!["amount".to_owned()]));
    assert_eq!(bank.paid(), vec![("acct-7".to_owned(), 50, "-".to_owned())]);

    // The edited input's own key holds the run; the original key records its result.
    let edited_key = effect_tool::call::key::identify(&tool, &run, &args(50)).unwrap().key;
    assert_ne!(edited_key, key, "the key follows the edited input");
    let ran = engine.store().get(&edited_key).await.unwrap().unwrap();
    assert_eq!(
        (ran.state, ran.input["amount"].as_u64()),
        (RecordState::Completed, Some(50))
    );
    let original = engine.store().get(&key).await.unwrap().unwrap();
    assert_eq!(original.state, RecordState::Completed);
    assert_eq!(original.output, Some(json!("paid 50 on acct-7")));

    // Both calls replay it: the original, and the edited arguments called directly (no second
    // approval, no second top-up).
    let again = engine
        .call_with_report(&tool, &run, CallOptions::default(), args(5_000))
        .await;
    assert_eq!(
        (again.result.unwrap(), again.disposition),
        ("paid 50 on acct-7".to_owned(), Disposition::Replayed)
    );
    let direct = engine
        .call_with_report(&tool, &run, CallOptions::default(), args(50))
        .await;
    assert_eq!(
        (direct.result.unwrap(), direct.disposition),
        ("paid 50 on acct-7".to_owned(), Disposition::Replayed)
    );
    assert_eq!(bank.paid().len(), 1, "one top-up");
}

async fn both<H: Harness>() {
    edit_under_the_same_key(H::fresh().await.store()).await;
    edit_under_its_own_key(H::fresh().await.store()).await;
}

#[test]
fn memory_edit_and_approve() {
    run::<MemoryHarness, _, _>("approvals_edit", both::<MemoryHarness>);
}

#[test]
fn sqlite_edit_and_approve() {
    run::<SqliteHarness, _, _>("approvals_edit", both::<SqliteHarness>);
}

#[cfg(feature = "postgres")]
#[test]
fn postgres_edit_and_approve() {
    use effect_tool_core::testing::conformance::PostgresHarness;
    run::<PostgresHarness, _, _>("approvals_edit", both::<PostgresHarness>);
}
