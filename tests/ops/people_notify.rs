//! People told and waited for: `Engine::on_needs_person` notifies each record that needs a
//! person once, a webhook delivers the notifications to a real HTTP server inside the test
//! (whose first answer is a failure) signed with HMAC, and `RunHandle::wait_for_approval` parks
//! an agent until a person decides, on the memory store and across two SQLite store objects (as
//! across processes). Effects are counted by ledgers the engine cannot see.
#![cfg(all(feature = "webhook", feature = "sqlite"))]

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::desk::SendEmail;
use common::ledger::Downstream;
use effect_tool::ops::notify::webhook::{Webhook, verify};
use effect_tool::ops::notify::{ApprovalAnswer, NeedsPerson};
use effect_tool::store::sqlite::SqliteStore;
use effect_tool::{
    CallOptions, EffectClass, EffectCtx, Engine, MemoryStore, RunContext, Store, StoreExt, Tool, ToolError,
};

/// Refunds, with a manager's approval.
struct Refund(Arc<Downstream>);

impl Tool for Refund {
    type Args = u64;
    type Output = String;
    type Error = ToolError;
    const NAME: &'static str = "refund";
    const CLASS: EffectClass = EffectClass::Irreversible;
    const APPROVAL: Option<&'static str> = Some("manager");

    async fn call(&self, ctx: &EffectCtx, cents: u64) -> Result<String, ToolError> {
        self.0.apply(&ctx.idempotency_key());
        Ok(format!("refunded {cents}"))
    }
}

/// Every notification the callback got.
#[derive(Clone, Default)]
struct Inbox(Arc<Mutex<Vec<NeedsPerson>>>);

impl Inbox {
    fn sink(&self) -> impl Fn(NeedsPerson) + Send + Sync + 'static {
        let inbox = self.0.clone();
        move |n| inbox.lock().unwrap().push(n)
    }
    async fn wait_for(&self, count: usize) -> Vec<NeedsPerson> {
        for _ in 0..500 {
            if self.0.lock().unwrap().len() >= count {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        self.0.lock().unwrap().clone()
    }
}

#[tokio::test]
async fn each_record_that_needs_a_person_is_notified_once_with_what_to_do() {
    let (mail, bank) = (Arc::new(Downstream::default()), Arc::new(Downstream::default()));
    let engine = Engine::new(MemoryStore::new());
    let inbox = Inbox::default();
    let _watch = engine.on_needs_person(inbox.sink());
    let run = RunContext::new("desk");

    // The email goes in doubt; the agent retries three times, blocked each time.
    for _ in 0..4 {
        let err = engine
            .call(
                &SendEmail(mail.clone()),
                &run,
                CallOptions::default(),
                "ann@example.com".into(),
            )
            .await
            .unwrap_err();
        assert!(err.as_blocked().is_some(), "{err}");
    }
    // The refund parks for a manager.
    let parked = engine
        .call(&Refund(bank.clone()), &run, CallOptions::default(), 5000)
        .await
        .unwrap_err();
    let pending = parked.as_approval_pending().expect("parked").clone();

    let got = inbox.wait_for(2).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let got_later = inbox.0.lock().unwrap().clone();
    assert_eq!(
        got_later.len(),
        2,
        "one notification per record and state: {got_later:#?}"
    );
    let (email, refund) = (&got[0], &got[1]);
    assert_eq!((email.state, email.tool.as_str()), ("in-doubt", "send_email"));
    assert!(
        email
            .reason
            .as_deref()
            .is_some_and(|r| r.contains("connection dropped")),
        "{email:?}"
    );
    assert!(email.next_step.contains("effect-tool resolve"), "{email:?}");
    assert_eq!(
        (refund.state, refund.key.as_str()),
        ("awaiting-approval", pending.key.as_str())
    );
    assert_eq!(refund.approval_role.as_deref(), Some("manager"));
    assert!(refund.next_step.contains("--as manager"), "{refund:?}");
    assert!(refund.text.contains("waits for approval by manager"), "{refund:?}");
    assert_eq!(refund.input, serde_json::json!(5000));
    // The example body in deploy/ (what a Slack incoming webhook is given) has exactly the
    // fields of a real one, and a text to show.
    let example: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/webhook/needs-person.example.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let fields = |v: &serde_json::Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    assert_eq!(fields(&example), fields(&serde_json::to_value(email).unwrap()));
    assert_eq!(example["state"], "in-doubt");
    assert!(!email.text.is_empty() && example["text"].as_str().is_some_and(|t| !t.is_empty()));
    // One email was sent (the ledger); the refund did not run.
    assert_eq!((mail.requests(), bank.requests()), (1, 0));
}

#[tokio::test]
async fn an_agent_waits_for_the_approval_then_its_call_runs_once() {
    let bank = Arc::new(Downstream::default());
    let engine = Engine::new(MemoryStore::new());
    let run = engine.run(RunContext::new("desk"));
    let refund = Refund(bank.clone());
    let key = run
        .call(&refund, 7000)
        .await
        .unwrap_err()
        .as_approval_pending()
        .unwrap()
        .key
        .clone();

    // Nobody answers: the wait ends at its timeout.
    assert_eq!(
        run.wait_for_approval(&key, Duration::from_millis(30)).await.unwrap(),
        ApprovalAnswer::TimedOut
    );

    // A manager approves while the agent waits; the wait ends at once (the store's notify).
    let store = engine.store().clone();
    let approver = {
        let key = key.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            store
                .approve(
                    &key,
                    "maria",
                    "manager",
                    &store.get(&key).await.unwrap().unwrap().fingerprint,
                )
                .await
                .unwrap();
        })
    };
    let answer = run.wait_for_approval(&key, Duration::from_secs(30)).await.unwrap();
    approver.await.unwrap();
    assert_eq!(
        answer,
        ApprovalAnswer::Approved {
            by: Some("maria".into())
        }
    );
    assert_eq!(bank.requests(), 0, "waiting does not run the tool");
    assert_eq!(run.call(&refund, 7000).await.unwrap(), "refunded 7000");
    assert_eq!(run.call(&refund, 7000).await.unwrap(), "refunded 7000");
    assert_eq!(bank.requests(), 1);
}

#[tokio::test]
async fn a_wait_can_be_cancelled_and_another_process_s_denial_is_seen_by_polling() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.db");
    let bank = Arc::new(Downstream::default());
    let engine = Engine::new(SqliteStore::open(&path).unwrap());
    let run = engine.run(RunContext::new("desk"));
    let refund = Refund(bank.clone());
    let key = run
        .call(&refund, 9000)
        .await
        .unwrap_err()
        .as_approval_pending()
        .unwrap()
        .key
        .clone();

    // Cancelled by dropping the future: the record still waits.
    tokio::select! {
        _ = run.wait_for_approval(&key, Duration::from_secs(30)) => panic!("nobody answered"),
        _ = tokio::time::sleep(Duration::from_millis(40)) => {}
    }
    let rec = engine.store().get(&key).await.unwrap().unwrap();
    assert_eq!(rec.state, effect_tool::RecordState::AwaitingApproval);

    // The operator's CLI is another process: another store object on the same file.
    let operator = SqliteStore::open(&path).unwrap();
    let denier = {
        let key = key.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(60)).await;
            operator
                .deny(&key, "maria", Some("over the limit".into()))
                .await
                .unwrap();
        })
    };
    let answer = run.wait_for_approval(&key, Duration::from_secs(30)).await.unwrap();
    denier.await.unwrap();
    assert_eq!(
        answer,
        ApprovalAnswer::Denied {
            by: Some("maria".into()),
            reason: Some("over the limit".into())
        }
    );
    let err = run.call(&refund, 9000).await.unwrap_err();
    assert!(err.to_string().contains("over the limit"), "{err}");
    assert_eq!(bank.requests(), 0);
}

/// One request the receiver got: its headers and body.
type Request = (axum::http::HeaderMap, Vec<u8>);

/// What the receiver saw.
#[derive(Clone, Default)]
struct Received(Arc<Mutex<Vec<Request>>>);

#[tokio::test]
async fn the_webhook_retries_a_failed_delivery_and_signs_each_one() {
    let received = Received::default();
    let app = {
        let received = received.clone();
        axum::Router::new().route(
            "/hook",
            axum::routing::post(move |headers: axum::http::HeaderMap, body: axum::body::Bytes| {
                let received = received.clone();
                async move {
                    let mut all = received.0.lock().unwrap();
                    all.push((headers, body.to_vec()));
                    // The receiver is down for the first delivery.
                    if all.len() == 1 {
                        axum::http::StatusCode::SERVICE_UNAVAILABLE
                    } else {
                        axum::http::StatusCode::OK
                    }
                }
            }),
        )
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move { axum::serve(listener, app).await });

    let secret = "whsec-test";
    let mut webhook = Webhook::new(&format!("http://{addr}/hook"))
        .unwrap()
        .with_secret(secret)
        .with_backoff(Duration::from_millis(20), Duration::from_millis(100))
        .start();
    let mail = Arc::new(Downstream::default());
    let engine = Engine::new(MemoryStore::new());
    let _watch = engine.on_needs_person(webhook.sink());
    let run = RunContext::new("desk");
    for _ in 0..2 {
        let _ = engine
            .call(
                &SendEmail(mail.clone()),
                &run,
                CallOptions::default(),
                "bob@example.com".into(),
            )
            .await;
    }
    // The notification reaches the webhook's queue through the watch's task.
    for _ in 0..200 {
        if !received.0.lock().unwrap().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(webhook.flush(Duration::from_secs(10)).await, "delivered");
    let got = received.0.lock().unwrap().clone();
    assert_eq!(got.len(), 2, "the failed delivery and its retry, nothing more");
    let id = |h: &axum::http::HeaderMap| h["x-effect-tool-id"].to_str().unwrap().to_owned();
    assert_eq!(id(&got[0].0), id(&got[1].0), "a retry keeps the notification's id");
    for (headers, body) in &got {
        let timestamp: u64 = headers["x-effect-tool-timestamp"].to_str().unwrap().parse().unwrap();
        let signature = headers["x-effect-tool-signature"].to_str().unwrap();
        assert!(verify(secret.as_bytes(), timestamp, body, signature), "signed");
        assert!(!verify(b"another secret", timestamp, body, signature));
        assert_eq!(headers["content-type"], "application/json");
        let json: serde_json::Value = serde_json::from_slice(body).unwrap();
        // Slack's incoming webhooks need only `text`.
        assert!(
            json["text"]
                .as_str()
                .is_some_and(|t| t.starts_with("send_email is in doubt")),
            "{json}"
        );
        assert_eq!(json["state"], "in-doubt");
        assert_eq!(json["id"], id(headers));
    }
    let mut tampered = got[1].1.clone();
    tampered[0] = b' ';
    let headers = &got[1].0;
    let timestamp: u64 = headers["x-effect-tool-timestamp"].to_str().unwrap().parse().unwrap();
    assert!(!verify(
        secret.as_bytes(),
        timestamp,
        &tampered,
        headers["x-effect-tool-signature"].to_str().unwrap()
    ));
    assert_eq!(mail.requests(), 1);
    server.abort();
}

#[test]
fn a_webhook_url_must_be_http_with_a_host() {
    for bad in ["hooks.example.com/x", "ftp://hooks.example.com/x", "http:///x"] {
        let err = Webhook::new(bad).unwrap_err();
        assert!(err.to_string().contains("https://host/path"), "{bad}: {err}");
    }
    assert!(Webhook::new("https://hooks.slack.com/services/T0/B0/x").is_ok());
}

/// Hangs until its task is aborted: a worker that dies mid-call.
struct Hang(Arc<Downstream>);

impl Tool for Hang {
    type Args = String;
    type Output = String;
    type Error = ToolError;
    const NAME: &'static str = "export_report";
    const CLASS: EffectClass = EffectClass::Irreversible;

    async fn call(&self, ctx: &EffectCtx, _report: String) -> Result<String, ToolError> {
        self.0.apply(&ctx.idempotency_key());
        std::future::pending().await
    }
}

#[tokio::test]
async fn a_sweeping_watch_notifies_what_no_call_of_its_engine_met_a_dead_workers_stale_claim_included() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.db");
    let (mail, reports) = (Arc::new(Downstream::default()), Arc::new(Downstream::default()));
    // The notifier: its own engine and store object, which makes no call at all.
    let notifier = Engine::new(SqliteStore::open(&path).unwrap());
    let inbox = Inbox::default();
    let _watch = notifier.on_needs_person_sweeping(Duration::from_millis(20), inbox.sink());

    // A worker (another store object on the journal, as another process): its email goes in
    // doubt, and it dies in the middle of an export, whose claim (60 ms lease) goes stale.
    let worker = common::short_engine(SqliteStore::open(&path).unwrap());
    let run = RunContext::new("nightly");
    let email = SendEmail(mail.clone());
    assert!(
        worker
            .call(&email, &run, CallOptions::default(), "ops@example.com".into())
            .await
            .unwrap_err()
            .as_blocked()
            .is_some()
    );
    let export = {
        let (worker, run, hang) = (worker.clone(), run.clone(), Hang(reports.clone()));
        tokio::spawn(async move { worker.call(&hang, &run, CallOptions::default(), "q3".into()).await })
    };
    while reports.requests() == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    export.abort();
    drop(worker);

    let got = inbox.wait_for(2).await;
    let states: Vec<(&str, &str)> = got.iter().map(|n| (n.state, n.tool.as_str())).collect();
    assert!(states.contains(&("in-doubt", "send_email")), "{got:#?}");
    assert!(states.contains(&("stale", "export_report")), "{got:#?}");
    // Many sweeps later, still one notification per record and state.
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert_eq!(inbox.0.lock().unwrap().len(), 2, "{:#?}", inbox.0.lock().unwrap());
    assert_eq!((mail.effects(), reports.effects()), (1, 1));
}
