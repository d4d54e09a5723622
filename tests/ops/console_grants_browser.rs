//! Standing approvals in the console (issue 33 item 3), in a real browser: an operator of
//! `finance` is refused a condition on an argument the tool does not have, then grants
//! payments of at most 5,000 in advance on the grants page; the agent's covered payment runs at
//! once, counted at a bank the engine cannot see, its audit naming the grant; another operator
//! revokes the grant on the page, and the next payment waits for a person. The API's gates:
//! a person without the role can neither grant nor revoke.
//!
//! Needs `chromium` and `chromedriver`, like `console_browser.rs` (skips loudly without them,
//! unless `EFFECT_TOOL_REQUIRE_BROWSER=1`).
#![cfg(all(feature = "console", feature = "sqlite"))]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::browser::{act, browser, open_browser, shown_text, start_driver};
use crate::common::console::{call, serve};
use effect_tool::ops::console::{Console, Identity, StaticTokens};
use effect_tool::store::sqlite::SqliteStore;
use effect_tool::{CallOptions, Disposition, Engine, RunContext, Store, ToolError, Toolkit, tools};
use fantoccini::{Client, Locator};

const ALICE: &str = "tok-alice-finance-0001";
const BOB: &str = "tok-bob-finance-0002";
const CAROL: &str = "tok-carol-support-0003";

/// The bank: every payment it made.
#[derive(Default)]
struct Bank {
    paid: Mutex<Vec<(String, u64)>>,
}

#[tools]
impl Bank {
    /// Pay a supplier's invoice from the company account.
    #[tool(effect = "irreversible", key(invoice_id), approval = "finance")]
    async fn pay_invoice(&self, invoice_id: String, amount: u64) -> Result<String, ToolError> {
        self.paid.lock().unwrap().push((invoice_id.clone(), amount));
        Ok(format!("paid {amount} on {invoice_id}"))
    }
}

async fn sign_in(browser: &Client, base: &str, token: &str, name: &str) {
    browser.goto(&format!("{base}/grants")).await.unwrap();
    shown_text(browser, "#signin-view").await;
    let field = browser.find(Locator::Id("signin-token")).await.unwrap();
    field.send_keys(token).await.unwrap();
    browser
        .find(Locator::Id("signin"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    assert!(shown_text(browser, "#whoami").await.contains(name));
    shown_text(browser, "#grants-view").await;
}

/// The state cell of the grant `id`'s row, once the table lists it.
async fn state_of(browser: &Client, id: &str) -> String {
    let css = format!("#grants tbody tr[data-id=\"{id}\"] td.state");
    let el = browser
        .wait()
        .at_most(Duration::from_secs(20))
        .for_element(Locator::Css(&css))
        .await
        .unwrap_or_else(|e| panic!("the grants page never listed `{id}`: {e}"));
    el.text().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_grants_and_another_revokes_in_a_real_browser() {
    let Some((chromium, chromedriver)) = browser() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("journal.db")).unwrap());
    let engine = Engine::new(store.clone());
    let bank = Arc::new(Bank::default());
    let tool = bank.pay_invoice_tool();
    let toolkit = Toolkit::new().with(bank.pay_invoice_tool());
    let tokens = StaticTokens::new()
        .with(ALICE, Identity::new("alice", ["finance"]))
        .with(BOB, Identity::new("bob", ["finance", "operator"]))
        .with(CAROL, Identity::new("carol", ["support"]));
    let console = Console::new(store.clone(), tokens).with_toolkit(&toolkit);
    let addr = serve(console).await;
    let base = format!("http://{addr}");
    let run = RunContext::new("run-7");
    let pay = |invoice: &str, amount| {
        let (engine, tool, run) = (engine.clone(), tool.clone(), run.clone());
        let args = BankPayInvoiceArgs {
            invoice_id: invoice.to_owned(),
            amount,
        };
        async move { engine.call_with_report(&tool, &run, CallOptions::default(), args).await }
    };
    // Before any grant the payment parks (and the engine keeps the tool's parameters).
    assert_eq!(pay("inv-1", 100).await.disposition, Disposition::AwaitingApproval);

    // The API's gates: carol holds no `finance`.
    let body = r#"{"tool": "pay_invoice", "role": "finance", "valid_until": 99999999999999}"#;
    let refused = call(addr, CAROL, "POST", "/api/grants", body).await;
    assert_eq!(refused.status, 403, "{}", refused.body);
    assert!(
        refused.json()["error"]
            .as_str()
            .unwrap()
            .contains("needs role `finance`")
    );

    let driver = start_driver(&chromedriver);
    let browser = open_browser(&driver, &chromium).await;
    let granted = async {
        sign_in(&browser, &base, ALICE, "alice").await;
        assert!(
            shown_text(&browser, "#grants-empty")
                .await
                .contains("No standing approvals")
        );
        let roles = browser
            .find(Locator::Id("grant-role"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert_eq!(roles.trim(), "finance", "the roles alice holds");
        browser
            .find(Locator::Id("grant-tool"))
            .await
            .unwrap()
            .send_keys("pay_invoice")
            .await
            .unwrap();
        let when = browser.find(Locator::Id("grant-when")).await.unwrap();
        when.clear().await.unwrap();
        when.send_keys(r#"[{"arg": "amt", "at_most": 5000}]"#).await.unwrap();
        let refused = act(&browser, "grant-create").await;
        assert!(
            refused.contains("no argument `amt`") && refused.contains("amount"),
            "{refused}"
        );
        when.clear().await.unwrap();
        when.send_keys(r#"[{"arg": "amount", "at_most": 5000}]"#).await.unwrap();
        let done = act(&browser, "grant-create").await;
        assert!(done.starts_with("Granted g-"), "{done}");
        let id = done["Granted ".len()..].split(':').next().unwrap().to_owned();
        assert_eq!(state_of(&browser, &id).await, "live");
        let row = shown_text(&browser, &format!("#grants tbody tr[data-id=\"{id}\"]")).await;
        assert!(row.contains("alice") && row.contains("amount at_most 5000"), "{row}");
        id
    };
    let id = tokio::time::timeout(Duration::from_secs(120), granted)
        .await
        .expect("granting in the browser took over two minutes");

    // The agent's covered payment runs at once, once; its audit names the grant.
    let paid = pay("inv-2", 4_500).await;
    assert_eq!(paid.disposition, Disposition::Executed, "{:?}", paid.result);
    let key = paid.key.unwrap();
    let audit = store.audit(Some(&key)).await.unwrap();
    let used = audit
        .iter()
        .find(|e| e.action == "grant-used")
        .expect("the grant's use is audited");
    assert_eq!(
        (used.actor.as_str(), used.detail.as_ref().unwrap()["grant"].as_str()),
        ("alice", Some(id.as_str()))
    );
    assert_eq!(pay("inv-2", 4_500).await.disposition, Disposition::Replayed);
    assert_eq!(pay("inv-3", 5_001).await.disposition, Disposition::AwaitingApproval);

    // Carol may not revoke it; bob (another finance person) does, on the page.
    let refused = call(
        addr,
        CAROL,
        "POST",
        "/api/grants/revoke",
        &format!(r#"{{"id": "{id}"}}"#),
    )
    .await;
    assert_eq!(refused.status, 403, "{}", refused.body);
    let revoked = async {
        browser
            .find(Locator::Id("signout"))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        sign_in(&browser, &base, BOB, "bob").await;
        let button = format!("#grants tbody tr[data-id=\"{id}\"] button.revoke");
        browser
            .find(Locator::Css(&button))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        let done = shown_text(&browser, "#message").await;
        assert!(done.starts_with(&format!("Revoked {id}")), "{done}");
        // The table is drawn again from the journal.
        for _ in 0..200 {
            if state_of(&browser, &id).await == "revoked" {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(state_of(&browser, &id).await, "revoked");
        let row = shown_text(&browser, &format!("#grants tbody tr[data-id=\"{id}\"]")).await;
        assert!(row.contains("by bob"), "{row}");
    };
    let result = tokio::time::timeout(Duration::from_secs(120), revoked).await;
    let _ = browser.close().await;
    drop(driver);
    result.expect("revoking in the browser took over two minutes");

    assert_eq!(pay("inv-4", 100).await.disposition, Disposition::AwaitingApproval);
    assert_eq!(*bank.paid.lock().unwrap(), vec![("inv-2".to_owned(), 4_500)]);
    let grant = store.grant(&id).await.unwrap().unwrap();
    assert_eq!(grant.revoked.unwrap().by, "bob");
}
