//! The callback webhook (`ops::callback::CallbackWebhook`) on a real HTTP server inside the
//! test (127.0.0.1:0, requests written byte by byte over TCP), on a SQLite journal: a call of
//! the same key waiting across the callback receives the provider's answer; forged, replayed
//! and late tokens refused with the webhook's status codes and audited; bodies that are not a
//! callback and outputs of the wrong shape answered 4xx with nothing settled; a not-applied
//! answer releasing the record so that the next call runs the tool again. The payouts are
//! counted by the bank's own ledger, which the engine cannot see.
#![cfg(all(feature = "callback-webhook", feature = "sqlite"))]

use crate::common;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::http::{Answer, request};
use effect_tool::ops::callback::CallbackWebhook;
use effect_tool::store::sqlite::SqliteStore;
use effect_tool::testing::conformance::ScratchDir;
use effect_tool::{
    BlockReason, CallOptions, CallReport, Disposition, EffectCtx, EffectError, Engine, EngineConfig, RecordState,
    RunContext, Store, ToolError, tool,
};
use serde::{Deserialize, Serialize};

/// What the model reads of a payout: pending until the bank answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PayoutStatus {
    /// The bank's payout id, once paid.
    pub payout_id: Option<String>,
    /// `pending`, then the bank's `paid`.
    pub status: String,
}

/// The bank, outside the engine: every payout it was asked to start, with the callback token
/// it was given, and how long it has to call back.
struct Bank {
    within: Duration,
    started: Mutex<Vec<(String, String)>>,
}

impl Bank {
    fn new(within: Duration) -> Arc<Bank> {
        Arc::new(Bank {
            within,
            started: Mutex::default(),
        })
    }

    /// How many payouts of `request_id` the bank was asked to start.
    fn payouts(&self, request_id: &str) -> usize {
        self.started
            .lock()
            .unwrap()
            .iter()
            .filter(|(r, _)| r == request_id)
            .count()
    }

    /// The token of the last payout of `request_id`.
    fn token(&self, request_id: &str) -> String {
        let started = self.started.lock().unwrap();
        let (_, token) = started
            .iter()
            .rfind(|(r, _)| r == request_id)
            .expect("a payout started");
        token.clone()
    }
}

/// Pay out request `request_id`; the bank confirms later.
#[tool(effect = "irreversible", key = |a| format!("payout:{}", a.request_id))]
async fn payout(ctx: &EffectCtx, request_id: String) -> Result<PayoutStatus, ToolError> {
    let bank = ctx
        .value::<Arc<Bank>>()
        .ok_or_else(|| ToolError::definitive("no bank in the run"))?;
    let token = ctx
        .pending(bank.within)
        .map_err(|e| ToolError::definitive(e.to_string()))?;
    bank.started.lock().unwrap().push((request_id, token.to_string()));
    Ok(PayoutStatus {
        payout_id: None,
        status: "pending".to_owned(),
    })
}

/// A SQLite journal, an engine on it whose calls wait up to `lease` for a callback, the
/// webhook served on a free port, and a run with the bank in it.
struct Setup {
    _dir: ScratchDir,
    engine: Engine,
    addr: SocketAddr,
    run: RunContext,
    bank: Arc<Bank>,
}

impl Setup {
    async fn new(within: Duration, lease: Duration) -> Setup {
        let dir = ScratchDir::new("callback-webhook");
        let store = SqliteStore::open(dir.path().join("journal.db")).unwrap();
        let config = EngineConfig {
            lease,
            ..EngineConfig::default()
        };
        let engine = Engine::with_config(store, config);
        let secret = engine
            .marker_secret()
            .await
            .unwrap()
            .expect("the SQLite journal keeps a secret");
        let hook = CallbackWebhook::new(engine.store().clone(), secret).audited_as("bank");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, hook.router()).await });
        let bank = Bank::new(within);
        let run = RunContext::new("callback-run").with_value(bank.clone());
        Setup {
            _dir: dir,
            engine,
            addr,
            run,
            bank,
        }
    }

    fn store(&self) -> &Arc<dyn Store> {
        self.engine.store()
    }

    async fn call(&self, request_id: &str) -> CallReport<PayoutStatus, ToolError> {
        let args = PayoutArgs {
            request_id: request_id.to_owned(),
        };
        self.engine
            .call_with_report(&Payout, &self.run, CallOptions::default(), args)
            .await
    }

    /// The first call of `request_id`: the payout started, the record pending. Its key.
    async fn start(&self, request_id: &str) -> String {
        let report = self.call(request_id).await;
        assert_eq!(report.disposition, Disposition::Executed, "{report:?}");
        assert_eq!(report.result.as_ref().unwrap().status, "pending");
        let key = report.key.unwrap();
        assert_eq!(self.state(&key).await, RecordState::Pending);
        key
    }

    async fn state(&self, key: &str) -> RecordState {
        self.store().get(key).await.unwrap().unwrap().state
    }

    /// `POST path` with a JSON body.
    async fn post(&self, path: &str, body: &str) -> Answer {
        request(self.addr, "POST", path, &["Content-Type: application/json"], body)
            .await
            .unwrap()
    }

    /// The refusals audited for `key`, each entry's `why`.
    async fn refusals(&self, key: &str) -> Vec<String> {
        self.store()
            .audit(Some(key))
            .await
            .unwrap()
            .into_iter()
            .filter(|e| e.action == "callback-refused")
            .map(|e| {
                assert_eq!(e.actor, "bank");
                e.detail.unwrap()["why"].as_str().unwrap().to_owned()
            })
            .collect()
    }
}

fn paid(token: &str, id: &str) -> String {
    serde_json::json!({
        "token": token,
        "verdict": "applied",
        "output": { "payout_id": id, "status": "paid" },
    })
    .to_string()
}

fn paid_status(id: &str) -> PayoutStatus {
    PayoutStatus {
        payout_id: Some(id.to_owned()),
        status: "paid".to_owned(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_waiting_across_the_callback_receives_the_providers_answer() {
    // Calls wait up to a minute for the callback, the bank has ten.
    let s = Arc::new(Setup::new(Duration::from_secs(600), Duration::from_secs(60)).await);
    let key = s.start("R-1").await;
    let waiting = {
        let s = s.clone();
        tokio::spawn(async move { s.call("R-1").await })
    };
    // The second call waits for the callback: nothing can end it before the callback comes
    // but its lease (a minute).
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !waiting.is_finished(),
        "a call of a pending key ended before the callback came"
    );

    let answer = s.post("/callback", &paid(&s.bank.token("R-1"), "po_1")).await;
    assert_eq!(answer.status, 200, "{answer:?}");
    assert_eq!(answer.json()["key"], key.as_str());
    assert_eq!(answer.json()["state"], "completed");

    // Well within the lease: the wait ends when the record is settled, not when it times out.
    let report = tokio::time::timeout(Duration::from_secs(30), waiting)
        .await
        .expect("the waiting call ended with the callback, before its lease")
        .unwrap();
    assert_eq!(report.disposition, Disposition::Replayed, "{report:?}");
    assert_eq!(report.result.unwrap(), paid_status("po_1"));
    assert_eq!(s.bank.payouts("R-1"), 1, "the bank was asked to pay once");
    let audit = s.store().audit(Some(&key)).await.unwrap();
    let settled = audit.iter().find(|e| e.action == "callback-settled").expect("audited");
    assert_eq!(settled.actor, "bank");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_and_replayed_callbacks_are_refused_and_audited() {
    // A call that meets the pending record waits 200 ms, then is told it is still pending.
    let s = Setup::new(Duration::from_secs(600), Duration::from_millis(200)).await;
    let key = s.start("R-2").await;
    let token = s.bank.token("R-2");

    // The MAC's last hex digit changed: it does not verify.
    let last = if token.ends_with('0') { "1" } else { "0" };
    let forged = format!("{}{last}", &token[..token.len() - 1]);
    let answer = s.post("/callback", &paid(&forged, "po_forged")).await;
    assert_eq!(answer.status, 403, "{answer:?}");
    assert!(
        answer.json()["error"].as_str().unwrap().contains("callback"),
        "{answer:?}"
    );
    assert_eq!(
        s.state(&key).await,
        RecordState::Pending,
        "a forged callback settles nothing"
    );
    assert_eq!(s.refusals(&key).await.len(), 1);
    let still = s.call("R-2").await;
    assert!(
        matches!(&still.result, Err(EffectError::Blocked(b)) if b.reason == BlockReason::AwaitingCallback),
        "{still:?}"
    );

    // The bank's callback settles it; the same callback again is refused.
    let answer = s.post("/callback", &paid(&token, "po_2")).await;
    assert_eq!(answer.status, 200, "{answer:?}");
    let answer = s.post("/callback", &paid(&token, "po_other")).await;
    assert_eq!(answer.status, 409, "{answer:?}");
    assert_eq!(s.refusals(&key).await.len(), 2);
    let rec = s.store().get(&key).await.unwrap().unwrap();
    assert_eq!(rec.state, RecordState::Completed);
    assert_eq!(rec.output.unwrap()["payout_id"], "po_2", "the replay changed nothing");

    let report = s.call("R-2").await;
    assert_eq!(report.disposition, Disposition::Replayed, "{report:?}");
    assert_eq!(report.result.unwrap(), paid_status("po_2"));
    assert_eq!(s.bank.payouts("R-2"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_callback_is_refused_and_the_record_waits_for_a_person() {
    let s = Setup::new(Duration::from_millis(300), Duration::from_millis(200)).await;
    let key = s.start("R-3").await;
    let until = Instant::now() + Duration::from_secs(60);
    while !s.store().get(&key).await.unwrap().unwrap().is_overdue(s.store().now()) {
        assert!(Instant::now() < until, "the deadline never passed");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }

    let answer = s.post("/callback", &paid(&s.bank.token("R-3"), "po_3")).await;
    assert_eq!(answer.status, 403, "{answer:?}");
    assert!(
        answer.json()["error"].as_str().unwrap().contains("deadline"),
        "{answer:?}"
    );
    let refusals = s.refusals(&key).await;
    assert_eq!(refusals.len(), 1);
    assert!(refusals[0].contains("deadline"), "{refusals:?}");
    let rec = s.store().get(&key).await.unwrap().unwrap();
    assert_eq!(rec.state, RecordState::Pending, "nothing written");
    assert!(rec.output.unwrap().get("$callback").is_some());

    // The record is in doubt now: a call is blocked for a person, the tool never runs again.
    let report = s.call("R-3").await;
    assert_eq!(report.disposition, Disposition::Blocked, "{report:?}");
    match &report.result {
        Err(EffectError::Blocked(b)) => assert_eq!(b.reason, BlockReason::AwaitingResolution, "{b:?}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(s.bank.payouts("R-3"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_that_are_not_a_callback_and_outputs_of_the_wrong_shape_settle_nothing() {
    let s = Setup::new(Duration::from_secs(600), Duration::from_millis(200)).await;
    let key = s.start("R-4").await;
    let token = s.bank.token("R-4");
    let cases = [
        ("not JSON", "/callback".to_owned(), "{\"token\": ".to_owned(), 422),
        (
            "no verdict",
            "/callback".to_owned(),
            serde_json::json!({ "token": token }).to_string(),
            422,
        ),
        (
            "an unknown verdict",
            "/callback".to_owned(),
            serde_json::json!({ "token": token, "verdict": "maybe" }).to_string(),
            422,
        ),
        (
            "applied without an output",
            "/callback".to_owned(),
            serde_json::json!({ "token": token, "verdict": "applied" }).to_string(),
            422,
        ),
        (
            "no token",
            "/callback".to_owned(),
            serde_json::json!({ "verdict": "not-applied" }).to_string(),
            422,
        ),
        (
            "an output of the wrong shape",
            "/callback".to_owned(),
            serde_json::json!({ "token": token, "verdict": "applied", "output": { "payout_id": 7 } }).to_string(),
            422,
        ),
        (
            "a token that is not one",
            "/callback".to_owned(),
            serde_json::json!({ "token": "hello", "verdict": "not-applied" }).to_string(),
            403,
        ),
    ];
    for (what, path, body, status) in &cases {
        let answer = s.post(path, body).await;
        assert_eq!(answer.status, *status, "{what}: {answer:?}");
        assert!(
            !answer.json()["error"].as_str().unwrap_or_default().is_empty(),
            "{what}: the answer says why: {answer:?}"
        );
        assert_eq!(s.state(&key).await, RecordState::Pending, "{what}: nothing settled");
    }
    // Not a POST: the route does not take it.
    let answer = request(s.addr, "GET", "/callback", &[], "").await.unwrap();
    assert_eq!(answer.status, 405, "{answer:?}");
    // The wrong shape was checked against the tool's output schema and audited.
    let refusals = s.refusals(&key).await;
    assert_eq!(refusals.len(), 1, "{refusals:?}");

    // The right shape still settles it afterwards.
    let answer = s.post("/callback", &paid(&token, "po_4")).await;
    assert_eq!(answer.status, 200, "{answer:?}");
    assert_eq!(s.state(&key).await, RecordState::Completed);
    assert_eq!(s.bank.payouts("R-4"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_not_applied_answer_releases_the_record_and_the_next_call_pays_again() {
    let s = Setup::new(Duration::from_secs(600), Duration::from_millis(200)).await;
    let key = s.start("R-5").await;
    let token = s.bank.token("R-5");
    // The token in the URL, as a provider that only calls back a URL sends it.
    let body = serde_json::json!({ "verdict": "not-applied" }).to_string();
    let answer = s.post(&format!("/callback?token={token}"), &body).await;
    assert_eq!(answer.status, 200, "{answer:?}");
    assert_eq!(answer.json()["state"], "released");
    let rec = s.store().get(&key).await.unwrap().unwrap();
    assert_eq!(rec.state, RecordState::Released);
    assert!(rec.reason.unwrap().contains("not applied"));
    assert_eq!(s.bank.payouts("R-5"), 1);

    // Nothing happened at the bank: the next call starts the payout again, with a new token.
    let report = s.call("R-5").await;
    assert_eq!(report.disposition, Disposition::Executed, "{report:?}");
    assert_eq!(s.bank.payouts("R-5"), 2);
    assert_eq!(s.state(&key).await, RecordState::Pending);
    let second = s.bank.token("R-5");
    assert_ne!(second, token);
    // The first token settles nothing any more: it was for the released attempt.
    let answer = s.post("/callback", &paid(&token, "po_old")).await;
    assert_eq!(answer.status, 403, "{answer:?}");
    let answer = s.post("/callback", &paid(&second, "po_5")).await;
    assert_eq!(answer.status, 200, "{answer:?}");
    let report = s.call("R-5").await;
    assert_eq!(report.result.unwrap(), paid_status("po_5"));
    assert_eq!(s.bank.payouts("R-5"), 2);
}
