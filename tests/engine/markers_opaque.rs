//! Markers carry no clear text (issue 30, item 3). A support agent emails a customer; the email
//! carries the call's marker so that `recover` can find it. The key names the run, the
//! recipient and the subject; the marker shows none of them, only an id that the journal (not
//! a reader) maps back to the record. Markers written by an earlier release (the key in clear
//! text, with a MAC) still reconcile a call left in doubt across the upgrade. Emails are
//! counted at a mail server the engine cannot see.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use effect_tool::store::markers;
use effect_tool::value::marker;
use effect_tool::{CallOptions, Disposition, EffectCtx, Engine, MemoryStore, RunContext, ToolError, tools};

/// The mail server: every email sent, by body.
#[derive(Default)]
struct Mail {
    sent: Mutex<Vec<String>>,
    sends: AtomicUsize,
    /// The next send's answer is lost (the email went out).
    lose_reply: AtomicBool,
    /// The mail log is down: `recover` cannot look.
    log_down: AtomicBool,
    /// Write markers as an earlier release did (the key in clear text, with a MAC under this
    /// secret, the journal's).
    legacy: AtomicBool,
    secret: Mutex<Option<marker::MarkerSecret>>,
}

#[tools]
impl Mail {
    /// Email a customer about a ticket.
    #[tool(
        effect = "irreversible",
        key = |a| format!("email:{}:{}:{}", a.ticket, a.to, a.subject),
        recover = find_email
    )]
    async fn email(
        &self,
        ctx: &EffectCtx,
        ticket: String,
        to: String,
        subject: String,
        body: String,
    ) -> Result<String, ToolError> {
        let m = if self.legacy.load(Ordering::SeqCst) {
            let secret = self.secret.lock().unwrap().clone();
            marker::legacy_marker(ctx.effect_key().unwrap(), secret.as_ref())
        } else {
            ctx.marker()
        };
        let _ = (&ticket, &to, &subject);
        let n = {
            let mut sent = self.sent.lock().unwrap();
            sent.push(format!("{body}\n\n{m}"));
            sent.len()
        };
        self.sends.fetch_add(1, Ordering::SeqCst);
        if self.lose_reply.swap(false, Ordering::SeqCst) {
            return Err(ToolError::unknown("the relay closed the connection after DATA"));
        }
        Ok(format!("email #{n}"))
    }

    /// The email carrying this call's marker, in the mail log.
    async fn find_email(&self, ctx: &EffectCtx, _args: &MailEmailArgs) -> Result<Option<String>, ToolError> {
        if self.log_down.load(Ordering::SeqCst) {
            return Err(ToolError::transient("the mail log is down"));
        }
        let sent = self.sent.lock().unwrap();
        Ok(sent
            .iter()
            .position(|body| ctx.contains_marker(body))
            .map(|i| format!("email #{}", i + 1)))
    }
}

fn refund_email(ticket: &str) -> MailEmailArgs {
    MailEmailArgs {
        ticket: ticket.to_owned(),
        to: "ann@example.com".to_owned(),
        subject: "Your refund".to_owned(),
        body: "Hello Ann, your refund is on its way.".to_owned(),
    }
}

#[tokio::test]
async fn the_customer_sees_an_id_and_the_journal_finds_the_record() {
    let mail = Arc::new(Mail::default());
    let engine = Engine::new(MemoryStore::new());
    let run = RunContext::new("conv-1");
    let tool = mail.email_tool();
    // Enough other records that the lookup reads the journal in several pages.
    for i in 0..1_200 {
        let r = engine
            .call_with_report(
                &tool,
                &run,
                CallOptions::call_id(format!("o{i}")),
                refund_email(&format!("O-{i}")),
            )
            .await;
        assert!(r.result.is_ok(), "{:?}", r.result);
    }
    mail.lose_reply.store(true, Ordering::SeqCst);
    let report = engine
        .call_with_report(&tool, &run, CallOptions::call_id("c1"), refund_email("T-77"))
        .await;
    assert_eq!(report.disposition, Disposition::Reconciled, "{:?}", report.result);
    assert_eq!(report.result.as_deref().ok(), Some("email #1201"));
    assert_eq!(mail.sends.load(Ordering::SeqCst), 1_201, "sent once");

    let key = report.key.clone().unwrap();
    assert!(key.contains("ann@example.com") && key.contains("T-77"), "{key}");
    let email = mail.sent.lock().unwrap()[1_200].clone();
    for part in [
        "conv",
        "T-77",
        "T%2D77",
        "ann",
        "example.com",
        "Your%20refund",
        "email:",
    ] {
        let hidden = email.replace("Hello Ann, your refund is on its way.", "");
        assert!(
            !hidden.contains(part),
            "the customer reads `{part}` in the marker: {email}"
        );
    }

    // The operator pastes what the customer forwarded: the journal finds the record.
    let secret = engine.marker_secret().await.unwrap();
    let found = markers::find_record(engine.store().as_ref(), &email, secret.as_ref())
        .await
        .unwrap()
        .expect("the record of the marker");
    assert_eq!(found.key, key);
    // Without the secret, a signed marker's record is not found: a reader cannot map it back.
    assert_eq!(
        markers::find_record(engine.store().as_ref(), &email, None)
            .await
            .unwrap(),
        None
    );
    // A marker of another secret is no record's.
    let forged = marker::signed_marker(&key, &marker::MarkerSecret::from_bytes([5; 32]));
    assert_eq!(
        markers::find_record(engine.store().as_ref(), &forged, secret.as_ref())
            .await
            .unwrap(),
        None
    );
}

#[tokio::test]
async fn a_call_in_doubt_across_the_upgrade_reconciles_by_its_legacy_marker() {
    let mail = Arc::new(Mail::default());
    let engine = Engine::new(MemoryStore::new());
    let run = RunContext::new("conv-2");
    let tool = mail.email_tool();
    // The earlier release sent the email with a clear-text marker, lost the reply, and could
    // not look in the mail log: the record is in doubt.
    *mail.secret.lock().unwrap() = engine.marker_secret().await.unwrap();
    mail.legacy.store(true, Ordering::SeqCst);
    mail.lose_reply.store(true, Ordering::SeqCst);
    mail.log_down.store(true, Ordering::SeqCst);
    let first = engine
        .call_with_report(&tool, &run, CallOptions::call_id("c1"), refund_email("T-90"))
        .await;
    assert!(first.result.is_err(), "{:?}", first.result);
    assert!(mail.sent.lock().unwrap()[0].contains("effect-tool:effect="));
    // After the upgrade: the mail log is back, `recover` finds the old marker; no second email.
    mail.legacy.store(false, Ordering::SeqCst);
    mail.log_down.store(false, Ordering::SeqCst);
    let again = engine
        .call_with_report(&tool, &run, CallOptions::call_id("c1"), refund_email("T-90"))
        .await;
    assert_eq!(again.result.as_deref().ok(), Some("email #1"), "{:?}", again);
    assert_eq!(mail.sends.load(Ordering::SeqCst), 1, "the email went out once");
}
