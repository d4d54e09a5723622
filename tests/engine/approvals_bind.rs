//! Approvals bind the exact input they were shown (issue 19): `pay_invoice{inv-1, 100}` is
//! approved by dana, then `pay_invoice{inv-1, 9999999}` under the same key must not be paid. It
//! parks again for its own approval, and the record never shows dana approving it. Tested for
//! field keys and closure keys, with and without `strict_input`, on every backend, counted at a
//! payment ledger the engine cannot see.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use effect_tool::{
    CallOptions, EffectCtx, EffectError, Engine, RecordState, RunContext, Store, StoreExt, Tool, ToolError, tools,
};
use effect_tool_core::testing::conformance::{Harness, MemoryHarness, SqliteHarness, run};

/// The bank: every payment it makes, which the engine never sees. It can decline the next
/// payment definitively (nothing is paid).
#[derive(Default)]
struct Bank {
    paid: Mutex<Vec<(String, u64)>>,
    decline_next: AtomicBool,
}

impl Bank {
    fn pay(&self, invoice_id: &str, amount: u64) -> Result<String, ToolError> {
        if self.decline_next.swap(false, Ordering::SeqCst) {
            return Err(ToolError::definitive("card declined"));
        }
        self.paid.lock().unwrap().push((invoice_id.to_owned(), amount));
        Ok(format!("paid {amount} on {invoice_id}"))
    }

    fn paid(&self) -> Vec<(String, u64)> {
        self.paid.lock().unwrap().clone()
    }
}

#[tools]
impl Bank {
    /// Pay an invoice (keyed by its id).
    #[tool(effect = "irreversible", key(invoice_id), approval = "finance")]
    async fn pay_invoice(&self, invoice_id: String, amount: u64) -> Result<String, ToolError> {
        self.pay(&invoice_id, amount)
    }

    /// Pay an invoice (keyed by its id), refusing another input under a recorded key.
    #[tool(effect = "irreversible", key(invoice_id), approval = "finance", strict_input)]
    async fn pay_invoice_strict(&self, invoice_id: String, amount: u64) -> Result<String, ToolError> {
        self.pay(&invoice_id, amount)
    }

    /// Wire money for an invoice (a closure key).
    #[tool(effect = "irreversible", key = |a| format!("wire:{}", a.invoice_id), approval = "finance")]
    async fn wire(&self, ctx: &EffectCtx, invoice_id: String, amount: u64) -> Result<String, ToolError> {
        let _ = ctx;
        self.pay(&invoice_id, amount)
    }

    /// Wire money for an invoice (a closure key), with `strict_input`.
    #[tool(effect = "irreversible", key = |a| format!("wire:{}", a.invoice_id), approval = "finance", strict_input)]
    async fn wire_strict(&self, invoice_id: String, amount: u64) -> Result<String, ToolError> {
        self.pay(&invoice_id, amount)
    }
}

/// The scenario, for one tool (`args(invoice, amount)` builds its arguments) on one journal.
async fn approval_is_for_the_input_shown<T: Tool<Error = ToolError, Output = String>>(
    store: Arc<dyn Store>,
    bank: &Bank,
    tool: &T,
    args: impl Fn(&str, u64) -> T::Args,
) {
    let engine = Engine::new(store);
    let run = RunContext::new("run-pay");
    let call = |invoice: &str, amount: u64| engine.call(tool, &run, CallOptions::default(), args(invoice, amount));
    let fingerprint = |invoice: &str, amount: u64| {
        effect_tool::call::key::identify(tool, &run, &args(invoice, amount))
            .unwrap()
            .fingerprint
    };

    // 100 waits for approval; dana approves what she is shown: 100.
    let pending = call("inv-1", 100).await.unwrap_err();
    let key = pending.as_approval_pending().expect("parks for approval").key.clone();
    let shown = engine.store().get(&key).await.unwrap().unwrap();
    assert_eq!(shown.input["amount"], 100);
    engine
        .store()
        .approve(
            &key,
            "dana",
            "finance",
            &engine.store().get(&key).await.unwrap().unwrap().fingerprint,
        )
        .await
        .unwrap();

    // Another input under the same key never runs on that approval: it parks for its own.
    let err = call("inv-1", 9_999_999).await.unwrap_err();
    assert!(
        err.as_approval_pending().is_some_and(|p| p.key == key),
        "9999999 must wait for its own approval, got: {err}"
    );
    assert_eq!(bank.paid(), vec![], "nothing was paid");
    let rec = engine.store().get(&key).await.unwrap().unwrap();
    assert_eq!(rec.state, RecordState::AwaitingApproval);
    assert_eq!(rec.input["amount"], 9_999_999);
    assert_eq!(rec.fingerprint, fingerprint("inv-1", 9_999_999));
    assert_eq!(rec.decided_by, None, "the record never shows dana approving 9999999");
    assert!(
        rec.reason.as_deref().is_some_and(|r| r.contains("voided")),
        "{:?}",
        rec.reason
    );
    // Asked again, still parked and still unpaid.
    assert!(
        call("inv-1", 9_999_999)
            .await
            .unwrap_err()
            .as_approval_pending()
            .is_some()
    );
    assert_eq!(bank.paid(), vec![]);

    // The trail: dana approved the fingerprint of 100; the engine voided that approval when a
    // different input came.
    let trail = engine.store().audit(Some(&key)).await.unwrap();
    let actions: Vec<(&str, &str)> = trail.iter().map(|e| (e.actor.as_str(), e.action.as_str())).collect();
    assert_eq!(actions, [("dana", "approve"), ("effect-tool", "approval-voided")]);
    let approved = trail[0].detail.as_ref().unwrap();
    assert_eq!(approved["fingerprint"], fingerprint("inv-1", 100));
    assert_eq!(approved["role"], "finance");
    let voided = trail[1].detail.as_ref().unwrap();
    assert_eq!(voided["approved_by"], "dana");
    assert_eq!(voided["approved_fingerprint"], fingerprint("inv-1", 100));
    assert_eq!(voided["fingerprint"], fingerprint("inv-1", 9_999_999));

    // The original 100 call does not run on the voided approval either, nor does it replace
    // the input a person is asked about: the record still waits for 9999999.
    assert!(call("inv-1", 100).await.unwrap_err().as_approval_pending().is_some());
    assert_eq!(bank.paid(), vec![]);
    assert_eq!(
        engine.store().get(&key).await.unwrap().unwrap().input["amount"],
        9_999_999
    );
    // dana denies what she is shown (9999999); a denial is for that input, so 100 asks anew,
    // is approved, and runs once.
    engine
        .store()
        .deny(&key, "dana", Some("not ours".into()))
        .await
        .unwrap();
    assert!(matches!(
        call("inv-1", 9_999_999).await,
        Err(EffectError::Denied { .. })
    ));
    assert!(call("inv-1", 100).await.unwrap_err().as_approval_pending().is_some());
    let rec = engine.store().get(&key).await.unwrap().unwrap();
    assert_eq!(
        (rec.input["amount"].as_u64(), rec.decided_by.as_deref()),
        (Some(100), None)
    );
    engine
        .store()
        .approve(
            &key,
            "dana",
            "finance",
            &engine.store().get(&key).await.unwrap().unwrap().fingerprint,
        )
        .await
        .unwrap();
    assert_eq!(call("inv-1", 100).await.unwrap(), "paid 100 on inv-1");
    let rec = engine.store().get(&key).await.unwrap().unwrap();
    assert_eq!(
        (rec.state, rec.decided_by.as_deref()),
        (RecordState::Completed, Some("dana"))
    );
    assert_eq!(rec.input["amount"], 100);
    // The approval was consumed by the one payment it allowed: a repeat replays, a different
    // input never pays.
    assert_eq!(call("inv-1", 100).await.unwrap(), "paid 100 on inv-1");
    match call("inv-1", 9_999_999).await {
        Ok(out) => assert_eq!(out, "paid 100 on inv-1", "a replay of the recorded payment"),
        Err(EffectError::InputMismatch { .. }) => assert!(T::STRICT_INPUT),
        Err(e) => panic!("unexpected: {e}"),
    }
    assert_eq!(bank.paid(), vec![("inv-1".to_owned(), 100)]);

    // A payment that failed definitively released its approval: the next call asks again.
    let pending = call("inv-2", 50).await.unwrap_err();
    let key2 = pending.as_approval_pending().expect("parks").key.clone();
    engine
        .store()
        .approve(
            &key2,
            "dana",
            "finance",
            &engine.store().get(&key2).await.unwrap().unwrap().fingerprint,
        )
        .await
        .unwrap();
    bank.decline_next.store(true, Ordering::SeqCst);
    assert!(call("inv-2", 50).await.is_err(), "declined");
    let err = call("inv-2", 50).await.unwrap_err();
    assert!(
        err.as_approval_pending().is_some(),
        "after a release the call parks again: {err}"
    );
    assert_eq!(bank.paid(), vec![("inv-1".to_owned(), 100)]);
}

/// Every tool variant on a fresh journal of backend `H`.
async fn every_variant<H: Harness>() {
    macro_rules! variant {
        ($tool:ident, $args:ident) => {{
            let h = H::fresh().await;
            let bank = Arc::new(Bank::default());
            let tool = bank.$tool();
            approval_is_for_the_input_shown(h.store(), &bank, &tool, |invoice: &str, amount| $args {
                invoice_id: invoice.to_owned(),
                amount,
            })
            .await;
        }};
    }
    variant!(pay_invoice_tool, BankPayInvoiceArgs);
    variant!(pay_invoice_strict_tool, BankPayInvoiceStrictArgs);
    variant!(wire_tool, BankWireArgs);
    variant!(wire_strict_tool, BankWireStrictArgs);
}

#[test]
fn memory_approvals_bind_their_input() {
    run::<MemoryHarness, _, _>("approvals_bind", every_variant::<MemoryHarness>);
}

#[test]
fn sqlite_approvals_bind_their_input() {
    run::<SqliteHarness, _, _>("approvals_bind", every_variant::<SqliteHarness>);
}

#[cfg(feature = "postgres")]
#[test]
fn postgres_approvals_bind_their_input() {
    use effect_tool_core::testing::conformance::PostgresHarness;
    run::<PostgresHarness, _, _>("approvals_bind", every_variant::<PostgresHarness>);
}

#[cfg(not(feature = "postgres"))]
#[test]
fn postgres_feature_disabled() {
    crate::common::postgres_feature_disabled("approvals_bind");
}
