//! The console shows the decision it asks for, in a real browser (issue 33 items 1 and 8):
//! at 1300 px the list keeps every one-word value (a class, a state, a run) on one line and
//! says how long each call has waited; a parked payment's page shows the tool's description
//! and class and how long it has waited; the operator edits the amount, sees the edit as a
//! diff, and approves the edited call. The agent's next call pays the edited amount, once,
//! counted at a bank the engine cannot see; the audit trail names the operator and the edit.
//!
//! Needs `chromium` and `chromedriver`, like `console_browser.rs` (skips loudly without them,
//! unless `EFFECT_TOOL_REQUIRE_BROWSER=1`).
#![cfg(all(feature = "console", feature = "sqlite"))]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::browser::{act, browser, open_browser_at, open_record, shown_text, sign_in, start_driver};
use crate::common::console::serve;
use effect_tool::ops::console::{Console, Identity, StaticTokens};
use effect_tool::store::sqlite::SqliteStore;
use effect_tool::{CallOptions, Engine, RunContext, Store, ToolError, Toolkit, tools};
use fantoccini::Locator;

const MARIA: &str = "tok-maria-manager-0001";

/// The bank: every payment it made.
#[derive(Default)]
struct Bank {
    paid: Mutex<Vec<(String, u64)>>,
}

#[tools]
impl Bank {
    /// Pay a supplier's invoice from the company account.
    #[tool(effect = "irreversible", key(invoice_id), approval = "manager")]
    async fn pay_invoice(&self, invoice_id: String, amount: u64) -> Result<String, ToolError> {
        self.paid.lock().unwrap().push((invoice_id.clone(), amount));
        Ok(format!("paid {amount} on {invoice_id}"))
    }
}

/// The texts of the list's cells that hold one word (no space) but are drawn on more than one
/// line: a word broken in the middle.
const BROKEN_WORDS: &str = r#"
return [...document.querySelectorAll('#records tbody td')].filter((td) => {
  const t = td.textContent.trim();
  if (!t || /\s/.test(t) || td.classList.contains('key')) return false;
  const range = document.createRange();
  range.selectNodeContents(td);
  const lines = new Set([...range.getClientRects()].map((r) => Math.round(r.top)));
  return lines.size > 1;
}).map((td) => td.textContent);
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_edits_and_approves_in_a_real_browser() {
    let Some((chromium, chromedriver)) = browser() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("journal.db")).unwrap());
    let engine = Engine::new(store.clone());
    let bank = Arc::new(Bank::default());
    let tool = bank.pay_invoice_tool();
    let toolkit = Toolkit::new().with(bank.pay_invoice_tool());
    let tokens = StaticTokens::new().with(MARIA, Identity::new("maria", ["manager", "operator"]));
    let console = Console::new(store.clone(), tokens).with_toolkit(&toolkit);
    let base = format!("http://{}", serve(console).await);

    // Payments park for a manager, in runs with the names the issue saw broken ("run-42"); one
    // invoice id is long, as keys made from ids are.
    let run = RunContext::new("run-42");
    let args = |invoice: &str, amount| BankPayInvoiceArgs {
        invoice_id: invoice.to_owned(),
        amount,
    };
    let mut keys = Vec::new();
    for (invoice, amount) in [
        ("inv-7", 9_000),
        ("inv-2026-12-03-supplier-acme-industrial-holdings-0000001", 120),
        ("inv-8", 45),
    ] {
        let report = engine
            .call_with_report(&tool, &run, CallOptions::default(), args(invoice, amount))
            .await;
        keys.push(report.key.unwrap());
    }
    let key = keys[0].clone();

    let driver = start_driver(&chromedriver);
    let browser = open_browser_at(&driver, &chromium, 1300).await;
    let outcome = async {
        assert!(sign_in(&browser, &base, MARIA).await.contains("maria"));

        // The list at 1300 px: no one-word value broken in the middle; each waiting call says
        // how long it has waited.
        browser
            .wait()
            .at_most(Duration::from_secs(20))
            .for_element(Locator::Css("#records tbody tr"))
            .await
            .expect("the list page shows records");
        assert_eq!(
            browser.find_all(Locator::Css("#records tbody tr")).await.unwrap().len(),
            3
        );
        let broken = browser.execute(BROKEN_WORDS, vec![]).await.unwrap();
        assert_eq!(broken, serde_json::json!([]), "words broken over lines at 1300 px");
        let waiting = browser
            .find(Locator::Css(&format!(
                "#records tbody tr[data-key=\"{key}\"] td.waiting"
            )))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(
            waiting.ends_with('s') || waiting.ends_with('m'),
            "how long it waited: {waiting:?}"
        );

        // The record's page: what is decided, on what tool, waiting since when.
        open_record(&browser, &base, &key).await;
        let fields = shown_text(&browser, "#record-fields").await;
        for part in [
            "Pay a supplier's invoice from the company account.",
            "irreversible",
            "Waiting for a person",
        ] {
            assert!(fields.contains(part), "{part:?} missing from: {fields}");
        }

        // Edit the amount, see the edit, approve the edited call.
        browser
            .find(Locator::Css("#edit-approval summary"))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        let area = browser.find(Locator::Id("edit-input")).await.unwrap();
        area.clear().await.unwrap();
        area.send_keys(r#"{"invoice_id": "inv-7", "amount": 900}"#)
            .await
            .unwrap();
        let diff = shown_text(&browser, "#edit-diff-view").await;
        assert!(
            diff.contains("amount") && diff.contains("9000") && diff.contains("900"),
            "{diff}"
        );
        let done = act(&browser, "approve-edited").await;
        assert!(
            done.starts_with("Approved with edited arguments (changed: amount)"),
            "{done}"
        );
        let fields = shown_text(&browser, "#record-fields").await;
        assert!(fields.contains("maria changed amount"), "{fields}");
        let trail = shown_text(&browser, "#audit").await;
        assert!(trail.contains("approve-edited") && trail.contains("maria"), "{trail}");
    };
    let result = tokio::time::timeout(Duration::from_secs(120), outcome).await;
    let _ = browser.close().await;
    drop(driver);
    result.expect("the browser walk-through took over two minutes");

    // The agent calls again, unchanged: the edited payment, once.
    let report = engine
        .call_with_report(&tool, &run, CallOptions::default(), args("inv-7", 9_000))
        .await;
    assert_eq!(report.result.unwrap(), "paid 900 on inv-7");
    assert_eq!(report.edited, Some(vec!["amount".to_owned()]));
    let again = engine
        .call(&tool, &run, CallOptions::default(), args("inv-7", 9_000))
        .await
        .unwrap();
    assert_eq!(again, "paid 900 on inv-7");
    assert_eq!(*bank.paid.lock().unwrap(), vec![("inv-7".to_owned(), 900)]);
    let audit = store.audit(Some(&key)).await.unwrap();
    let edit = audit.iter().find(|e| e.action == "approve-edited").expect("audited");
    assert_eq!(edit.actor, "maria");
    assert_eq!(edit.detail.as_ref().unwrap()["edited_input"]["amount"], 900);
}
