//! What the model reads after a person decided (issue 33 items 1, 2 and 4): a denial gives the
//! model the tool, the reviewer's words and what it may do next, and code sees the denial
//! (`ToolResult::denied`, `CallReport::denied`); an edited approval tells the model that the
//! call ran with edited arguments and which fields changed; `approval_ttl` reaches the
//! manifest. Payments are counted by a ledger the engine cannot see.

use std::sync::{Arc, Mutex};

use effect_tool::{Disposition, Engine, MemoryStore, RunContext, StoreExt, ToolCall, ToolError, Toolkit, tools};

#[derive(Default)]
struct Payments {
    made: Mutex<Vec<(String, u64)>>,
}

#[tools]
impl Payments {
    /// Pay an invoice.
    #[tool(effect = "irreversible", key(invoice_id), approval = "finance", approval_ttl = "2h")]
    async fn pay(&self, invoice_id: String, amount: u64) -> Result<String, ToolError> {
        self.made.lock().unwrap().push((invoice_id.clone(), amount));
        Ok(format!("paid {amount} on {invoice_id}"))
    }
}

fn pay(id: &str, amount: u64) -> ToolCall {
    ToolCall::new(id, "pay", format!(r#"{{"invoice_id": "inv-1", "amount": {amount}}}"#))
}

#[tokio::test]
async fn a_denial_reaches_the_model_with_the_reviewers_words() {
    let payments = Arc::new(Payments::default());
    let engine = Engine::new(MemoryStore::new());
    let toolkit = Toolkit::new().with(payments.pay_tool());
    let dispatcher = toolkit.dispatcher(engine.clone());
    let run = RunContext::new("run-deny");

    let parked = dispatcher.dispatch(&run, &[pay("call_1", 700)]).await.remove(0);
    assert_eq!(parked.disposition, Disposition::AwaitingApproval);
    assert!(parked.denied().is_none());
    let key = parked.key.clone().unwrap();
    engine
        .store()
        .deny(
            &key,
            "dana",
            Some("pay invoices from the EUR account, not this one".into()),
        )
        .await
        .unwrap();

    let denied = dispatcher.dispatch(&run, &[pay("call_2", 700)]).await.remove(0);
    assert!(denied.is_error());
    let denial = denied.denied().expect("code sees the denial");
    assert_eq!(
        (denial.tool, denial.by, denial.reason),
        ("pay", "dana", Some("pay invoices from the EUR account, not this one"))
    );
    let text = denied.content();
    for part in [
        "`pay` was not run",
        "the reviewer (dana) denied this call",
        "\"pay invoices from the EUR account, not this one\"",
        "Nothing happened",
        "do not call `pay` again with the same arguments",
        "change the call as the reviewer asks",
    ] {
        assert!(text.contains(part), "{part:?} missing from: {text}");
    }
    assert!(
        !text.contains("effect-tool "),
        "no operator's command for the model: {text}"
    );
    assert!(payments.made.lock().unwrap().is_empty());

    // The same through the engine's report.
    let report = engine
        .call_with_report(
            &payments.pay_tool(),
            &run,
            Default::default(),
            PaymentsPayArgs {
                invoice_id: "inv-1".into(),
                amount: 700,
            },
        )
        .await;
    assert!(report.denied());
    assert_eq!(report.disposition, Disposition::Failed);
}

#[tokio::test]
async fn a_denial_without_a_reason_says_so() {
    let payments = Arc::new(Payments::default());
    let engine = Engine::new(MemoryStore::new());
    let dispatcher = Toolkit::new().with(payments.pay_tool()).dispatcher(engine.clone());
    let run = RunContext::new("run-deny-2");
    let key = dispatcher.dispatch(&run, &[pay("c1", 5)]).await.remove(0).key.unwrap();
    engine.store().deny(&key, "dana", None).await.unwrap();
    let text = dispatcher.dispatch(&run, &[pay("c2", 5)]).await.remove(0).content();
    assert!(text.contains("denied this call without giving a reason"), "{text}");
}

#[tokio::test]
async fn an_edited_approval_tells_the_model_what_changed() {
    let payments = Arc::new(Payments::default());
    let engine = Engine::new(MemoryStore::new());
    let dispatcher = Toolkit::new().with(payments.pay_tool()).dispatcher(engine.clone());
    let run = RunContext::new("run-edit");
    let key = dispatcher
        .dispatch(&run, &[pay("c1", 7_000)])
        .await
        .remove(0)
        .key
        .unwrap();
    let shown = engine.store().get(&key).await.unwrap().unwrap();
    let mut edited = shown.input.clone();
    edited["amount"] = serde_json::json!(700);
    engine
        .store()
        .approve_edited(&key, "dana", "finance", &shown.fingerprint, edited)
        .await
        .unwrap();

    let ran = dispatcher.dispatch(&run, &[pay("c2", 7_000)]).await.remove(0);
    assert_eq!(ran.output(), Some(&serde_json::json!("paid 700 on inv-1")));
    assert_eq!(ran.edited, Some(vec!["amount".to_owned()]));
    let text = ran.content();
    assert!(text.contains("edited its arguments before approving it"), "{text}");
    assert!(text.contains("changed: `amount`"), "{text}");
    assert!(text.contains("paid 700 on inv-1"), "{text}");
    assert_eq!(*payments.made.lock().unwrap(), vec![("inv-1".to_owned(), 700)]);
}

#[test]
fn approval_ttl_is_in_the_manifest_and_its_review() {
    let payments = Arc::new(Payments::default());
    let manifest = Toolkit::new().with(payments.pay_tool()).manifest();
    let line = manifest.lines().find(|l| l.starts_with("pay ")).unwrap();
    assert!(line.contains(" approval=finance approval_ttl=2h recover="), "{line}");
    let longer = manifest.replace("approval_ttl=2h", "approval_ttl=7d");
    let review = effect_tool::toolkit::review::diff_manifests(&manifest, &longer).unwrap();
    let text = review.to_text();
    assert!(text.contains("approval ttl lengthened: 2h → 7d"), "{text}");
    let dropped = manifest.replace(" approval_ttl=2h", "");
    let text = effect_tool::toolkit::review::diff_manifests(&manifest, &dropped)
        .unwrap()
        .to_text();
    assert!(text.contains("approval ttl lengthened: 2h → 24h (default)"), "{text}");
}
