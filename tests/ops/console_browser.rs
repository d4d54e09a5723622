//! The web console in a real browser: headless Chromium (Debian's `chromium`) driven through
//! WebDriver (`chromedriver`, the `fantoccini` client). An operator signs in with a token,
//! finds a parked refund on the list page and approves it, resolves an email in doubt with the
//! output it had, and compensates a run from a record's page. The agent's next calls then run
//! or replay, counted by ledgers the engine cannot see; the audit trail names the operator. A
//! model's input holding HTML is shown as text and runs nothing.
//!
//! Needs `chromium` and `chromedriver` (`apt-get install chromium chromium-driver`, which
//! `scripts/test.sh` does); skips loudly without them, unless `EFFECT_TOOL_REQUIRE_BROWSER=1`
//! (CI), where it fails.
#![cfg(all(feature = "console", feature = "sqlite"))]

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::browser::{act, browser, open_browser_at, open_record, shown_text, sign_in, start_driver};
use common::console::serve;
use common::desk::{ApprovedRefund as Refund, SendEmail};
use common::ledger::Downstream;
use effect_tool::ops::console::{Console, Identity, StaticTokens};
use effect_tool::store::sqlite::SqliteStore;
use effect_tool::{CallOptions, EffectClass, EffectCtx, Engine, RunContext, Store, StoreExt, Tool, ToolError, Toolkit};
use fantoccini::Locator;

const MARIA: &str = "tok-maria-manager-0001"; // manager, operator

/// Holds a seat (the airline's ledger); compensation releases it (the release ledger).
struct HoldSeat {
    holds: Arc<Downstream>,
    releases: Arc<Downstream>,
}

impl Tool for HoldSeat {
    type Args = String;
    type Output = String;
    type Error = ToolError;
    const NAME: &'static str = "hold_seat";
    const CLASS: EffectClass = EffectClass::Compensable;
    const HAS_COMPENSATE: bool = true;

    async fn call(&self, ctx: &EffectCtx, seat: String) -> Result<String, ToolError> {
        self.holds.apply(&ctx.idempotency_key());
        Ok(format!("hold-{seat}"))
    }

    async fn compensate(&self, _ctx: &EffectCtx, _seat: &String, hold: &String) -> Result<(), ToolError> {
        self.releases.apply(hold);
        Ok(())
    }
}

/// Pays an invoice, keyed by the invoice alone (so the model can call the key again with
/// another amount), once a manager approves. Args: (invoice, amount).
struct PayInvoice(Arc<Downstream>);

impl Tool for PayInvoice {
    type Args = (String, u64);
    type Output = String;
    type Error = ToolError;
    const NAME: &'static str = "pay_invoice";
    const CLASS: EffectClass = EffectClass::Irreversible;
    const APPROVAL: Option<&'static str> = Some("manager");

    fn key(&self, args: &(String, u64)) -> Option<String> {
        Some(format!("invoice:{}", args.0))
    }

    async fn call(&self, ctx: &EffectCtx, (invoice, amount): (String, u64)) -> Result<String, ToolError> {
        self.0.apply(&ctx.idempotency_key());
        Ok(format!("paid {amount} on {invoice}"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_approves_resolves_and_compensates_in_a_real_browser() {
    let Some((chromium, chromedriver)) = browser() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("journal.db")).unwrap());
    let (bank, mail) = (Arc::new(Downstream::default()), Arc::new(Downstream::default()));
    let (holds, releases) = (Arc::new(Downstream::default()), Arc::new(Downstream::default()));
    let engine = Engine::new(store.clone());
    let refund = Refund(bank.clone());
    let email = SendEmail(mail.clone());
    let seat = HoldSeat {
        holds: holds.clone(),
        releases: releases.clone(),
    };
    let invoices = Arc::new(Downstream::default());
    let pay = PayInvoice(invoices.clone());
    let toolkit = Toolkit::new()
        .with(PayInvoice(invoices.clone()))
        .with(Refund(bank.clone()))
        .with(SendEmail(mail.clone()))
        .with(HoldSeat {
            holds: holds.clone(),
            releases: releases.clone(),
        });
    let tokens = StaticTokens::new().with(MARIA, Identity::new("maria", ["manager", "operator"]));
    let console = Console::new(store.clone(), tokens)
        .with_toolkit(&toolkit)
        .with_engine(engine.clone());
    let base = format!("http://{}", serve(console).await);

    // The agent: a refund parks for a manager; an email (to an address holding HTML, as a model
    // may write it) goes in doubt; a seat is held in another run.
    let run = RunContext::new("desk");
    let refund_key = engine
        .call(&refund, &run, CallOptions::default(), 5000)
        .await
        .unwrap_err()
        .as_approval_pending()
        .unwrap()
        .key
        .clone();
    let to = r#"<img src=x onerror="document.title='pwned'">@example.com"#.to_owned();
    engine
        .call(&email, &run, CallOptions::default(), to.clone())
        .await
        .unwrap_err();
    let trip = RunContext::new("trip");
    let hold = engine
        .call(&seat, &trip, CallOptions::default(), "12A".into())
        .await
        .unwrap();
    assert_eq!((bank.effects(), mail.effects(), holds.effects()), (0, 1, 1));
    let email_key = store
        .list(&effect_tool::store::Filter {
            tool: Some("send_email".into()),
            ..Default::default()
        })
        .await
        .unwrap()[0]
        .key
        .clone();
    let hold_key = store
        .list(&effect_tool::store::Filter {
            tool: Some("hold_seat".into()),
            ..Default::default()
        })
        .await
        .unwrap()[0]
        .key
        .clone();

    let driver = start_driver(&chromedriver);
    let browser = open_browser_at(&driver, &chromium, 1280).await;
    let outcome = async {
        // Signing in: the page asks for a token, keeps it in the tab.
        assert!(sign_in(&browser, &base, MARIA).await.contains("maria"));

        // The list shows what needs a person: the parked refund and the email in doubt.
        browser
            .wait()
            .at_most(Duration::from_secs(20))
            .for_element(Locator::Css("#records tbody tr"))
            .await
            .expect("the list page shows records");
        let listed = browser.find_all(Locator::Css("#records tbody tr")).await.unwrap();
        assert_eq!(
            listed.len(),
            2,
            "the refund and the email need a person; the hold does not"
        );

        // A stale page approves nothing. An invoice of 100 parks; maria opens its page. olaf
        // approves it elsewhere; the model calls its key again with 9,999,999 (olaf's approval
        // voided, the new input parked). Maria clicks Approve on the page showing 100: refused,
        // the change shown, nothing paid.
        let parked = engine
            .call(&pay, &run, CallOptions::default(), ("inv-1".into(), 100))
            .await
            .unwrap_err();
        let invoice_key = parked.as_approval_pending().unwrap().key.clone();
        open_record(&browser, &base, &invoice_key).await;
        assert!(shown_text(&browser, "#record-input").await.contains("100"));
        let seen = store.get(&invoice_key).await.unwrap().unwrap();
        assert_eq!(shown_text(&browser, "#approval-fingerprint").await, seen.fingerprint);
        store
            .approve(&invoice_key, "olaf", "manager", &seen.fingerprint)
            .await
            .unwrap();
        let again = engine
            .call(&pay, &run, CallOptions::default(), ("inv-1".into(), 9_999_999))
            .await
            .unwrap_err();
        assert!(again.as_approval_pending().is_some(), "{again}");
        let refused = act(&browser, "approve").await;
        assert!(refused.contains("input changed"), "{refused}");
        let diff = shown_text(&browser, "#input-diff-view").await;
        assert!(
            diff.contains("100") && diff.contains("9999999"),
            "the change is shown: {diff}"
        );
        assert!(shown_text(&browser, "#record-input").await.contains("9999999"));
        assert_eq!(
            store.get(&invoice_key).await.unwrap().unwrap().state,
            effect_tool::RecordState::AwaitingApproval
        );
        assert_eq!(invoices.effects(), 0, "nothing was paid");

        // Approve the refund on its page.
        open_record(&browser, &base, &refund_key).await;
        assert_eq!(shown_text(&browser, "#state").await, "awaiting-approval");
        assert!(act(&browser, "approve").await.starts_with("Approved"));

        // Resolve the email: it went out, as message id "m-1". Its input is shown as text.
        open_record(&browser, &base, &email_key).await;
        assert_eq!(shown_text(&browser, "#state").await, "in-doubt");
        let input = shown_text(&browser, "#record-input").await;
        assert!(input.contains("<img src=x onerror="), "shown as text: {input}");
        assert!(
            browser
                .find_all(Locator::Css("#record-input img, img"))
                .await
                .unwrap()
                .is_empty()
        );
        assert_eq!(browser.title().await.unwrap(), "effect-tool console");
        browser
            .find(Locator::Id("resolve-output"))
            .await
            .unwrap()
            .send_keys(r#""m-1""#)
            .await
            .unwrap();
        assert!(
            act(&browser, "resolve-applied")
                .await
                .starts_with("Recorded as applied")
        );

        // Compensate the trip from its hold's page, found with the list's filters: completed
        // records of run `trip`.
        browser.goto(&format!("{base}/")).await.unwrap();
        shown_text(&browser, "#list-view").await;
        for state in ["in-doubt", "awaiting-approval", "stale", "completed"] {
            let css = format!("#filters input[value=\"{state}\"]");
            browser.find(Locator::Css(&css)).await.unwrap().click().await.unwrap();
        }
        browser
            .find(Locator::Id("filter-run"))
            .await
            .unwrap()
            .send_keys("trip")
            .await
            .unwrap();
        browser
            .find(Locator::Id("apply-filters"))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        let link = browser
            .wait()
            .at_most(Duration::from_secs(20))
            .for_element(Locator::Css(&format!("#records tbody tr[data-key=\"{hold_key}\"] a")))
            .await
            .expect("the filtered list shows the hold");
        assert_eq!(
            browser.find_all(Locator::Css("#records tbody tr")).await.unwrap().len(),
            1
        );
        link.click().await.unwrap();
        assert_eq!(shown_text(&browser, "#record-key").await, hold_key);
        assert!(act(&browser, "compensate").await.starts_with("Compensated: 1 now"));
        assert_eq!(shown_text(&browser, "#state").await, "compensated");
        let trail = shown_text(&browser, "#audit").await;
        assert!(trail.contains("maria"), "the audit trail names the operator: {trail}");
        invoice_key
    };
    // Close the browser whatever happened, then report.
    let result = tokio::time::timeout(Duration::from_secs(120), outcome).await;
    let _ = browser.close().await;
    drop(driver);
    let invoice_key = result.expect("the browser walk-through took over two minutes");

    // The agent's next calls: the refund runs once, the email replays what the operator said,
    // the hold was released once. The ledgers count.
    assert_eq!(
        engine.call(&refund, &run, CallOptions::default(), 5000).await.unwrap(),
        5001
    );
    assert_eq!(
        engine.call(&email, &run, CallOptions::default(), to).await.unwrap(),
        "m-1"
    );
    assert_eq!((bank.effects(), mail.effects(), releases.effects()), (1, 1, 1));
    assert!(
        engine
            .call(&pay, &run, CallOptions::default(), ("inv-1".into(), 9_999_999))
            .await
            .unwrap_err()
            .as_approval_pending()
            .is_some(),
        "the stale approval approved nothing: the invoice still waits"
    );
    assert_eq!(invoices.effects(), 0);
    let audit = store.audit(Some(&invoice_key)).await.unwrap();
    assert!(
        !audit.iter().any(|e| e.action == "approve" && e.actor == "maria"),
        "{audit:?}"
    );
    assert!(releases.has(&hold));
    let audit = store.audit(Some(&refund_key)).await.unwrap();
    assert!(
        audit.iter().any(|e| e.action == "approve" && e.actor == "maria"),
        "{audit:?}"
    );
    let audit = store.audit(Some(&email_key)).await.unwrap();
    assert!(
        audit.iter().any(|e| e.action == "resolve" && e.actor == "maria"),
        "{audit:?}"
    );
}
