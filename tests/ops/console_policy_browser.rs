//! What the deployment's Cedar policies decided, on the console's record page in a real browser
//! (headless Chromium through WebDriver): a refund the policies denied (nothing journaled, only
//! its audit trail), one they parked for finance, and one shadow mode let run, each entry in
//! words that name the decision, the policy and the reason or role. The shop's ledger counts
//! what ran.
#![cfg(all(feature = "console", feature = "sqlite", feature = "policy"))]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::common::browser::{browser, open_browser, shown_text, sign_in, start_driver};
use crate::common::console::serve;
use crate::common::http::encode;
use effect_tool::decide::cedar::Policies;
use effect_tool::ops::console::{Console, Identity, StaticTokens};
use effect_tool::store::sqlite::SqliteStore;
use effect_tool::toolkit::{ToolCall, Toolkit};
use effect_tool::{Engine, RunContext, Store, ToolError, tools};
use fantoccini::Locator;

const FINN: &str = "tok-finn-finance-00001";

struct Shop {
    ledger: PathBuf,
}

#[tools]
impl Shop {
    /// Refund part of an order.
    #[tool(effect = "idempotent", key(order_id, amount_cents))]
    async fn issue_refund(&self, order_id: String, amount_cents: u64) -> Result<String, ToolError> {
        let line = format!("refund {amount_cents} on {order_id}\n");
        let mut text = std::fs::read_to_string(&self.ledger).unwrap_or_default();
        text.push_str(&line);
        std::fs::write(&self.ledger, text).map_err(|e| ToolError::transient(e.to_string()))?;
        Ok(line)
    }
}

fn shop_policies() -> Policies {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/policy/shop.cedar");
    Policies::from_file(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// One refund through `engine`'s dispatcher, as a model asks it; its effect key.
async fn refund(engine: &Engine, toolkit: &Toolkit, order: &str, cents: u64) -> String {
    let call = ToolCall {
        id: format!("c-{order}"),
        name: "issue_refund".into(),
        arguments: serde_json::json!({ "order_id": order, "amount_cents": cents }).to_string(),
    };
    let run = RunContext::new("desk").with_principal("ann");
    let results = toolkit.dispatcher(engine.clone()).dispatch(&run, &[call]).await;
    results[0].key.clone().expect("the call was keyed")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_record_page_says_what_the_policies_decided() {
    let Some((chromium, chromedriver)) = browser() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("journal.db")).unwrap());
    let shop = Arc::new(Shop {
        ledger: dir.path().join("ledger.txt"),
    });
    let mut toolkit = Toolkit::new();
    toolkit.add(shop.issue_refund_tool());
    let enforcing = Engine::new(store.clone()).with_policies(shop_policies());
    let shadow = Engine::new(store.clone()).with_policies(shop_policies().shadow());

    let denied = refund(&enforcing, &toolkit, "A-1", 9000).await;
    let parked = refund(&enforcing, &toolkit, "A-2", 2000).await;
    let shadowed = refund(&shadow, &toolkit, "A-3", 9500).await;
    let ledger = std::fs::read_to_string(&shop.ledger).unwrap_or_default();
    assert_eq!(ledger, "refund 9500 on A-3\n", "only shadow mode's refund ran");
    assert!(
        store.get(&denied).await.unwrap().is_none(),
        "the denied call was not journaled"
    );

    let tokens = StaticTokens::new().with(FINN, Identity::new("finn", ["finance"]));
    let base = format!(
        "http://{}",
        serve(Console::new(store.clone(), tokens).with_toolkit(&toolkit)).await
    );

    let driver = start_driver(&chromedriver);
    let browser = open_browser(&driver, &chromium).await;
    let outcome = async {
        assert!(sign_in(&browser, &base, FINN).await.contains("finn"));

        let entry = |key: &str, action: &str| {
            let url = format!("{base}/record?key={}", encode(key));
            let css = format!("#audit tbody tr[data-action=\"{action}\"] td.policy");
            let browser = browser.clone();
            async move {
                browser.goto(&url).await.unwrap();
                shown_text(&browser, &css).await
            }
        };

        // Denied: no record, the trail says which policy and why.
        let said = entry(&denied, "policy-deny").await;
        assert_eq!(
            said,
            "Policy refund-limit denied the call: refunds above 5000 cents are made by a person, not by the assistant: offer the customer a ticket to support instead. Nothing ran, and nothing was journaled. Principal: ann."
        );
        let fields = shown_text(&browser, "#record-fields").await;
        assert!(
            fields.contains("no-record") && fields.contains("the call was not journaled"),
            "{fields}"
        );
        assert!(
            browser
                .find(Locator::Css("#approval-actions:not([hidden])"))
                .await
                .is_err(),
            "nothing to approve"
        );

        // Parked for finance by a policy: the role and the policy.
        let said = entry(&parked, "policy-approval").await;
        assert_eq!(
            said,
            "Policy refund-review required approval by role finance. Principal: ann."
        );
        assert_eq!(shown_text(&browser, "#state").await, "awaiting-approval");

        // Shadow mode: what would have happened, and that nothing was enforced.
        let said = entry(&shadowed, "policy-shadow").await;
        assert!(
            said.starts_with("Shadow mode, nothing enforced: policy refund-limit would have denied the call: refunds above 5000 cents"),
            "{said}"
        );
        assert_eq!(shown_text(&browser, "#state").await, "completed");
    };
    let result = tokio::time::timeout(Duration::from_secs(120), outcome).await;
    let _ = browser.close().await;
    drop(driver);
    result.expect("the browser walk-through took over two minutes");
}
