//! A payout the bank finishes later: the tool starts it and hands the bank a callback token
//! ([`EffectCtx::pending`]); the record waits, pending, for the bank's webhook, which
//! `ops::callback` receives and settles; the model's next call of the same key is told "still
//! pending" until then, and replays the bank's answer after. A forged and a replayed callback
//! are refused. Exits non-zero on a wrong result.
//!
//! ```sh
//! cargo run --example callback_payout --features callback-webhook
//! ```

use std::sync::{Arc, Mutex};
use std::time::Duration;

use effect_tool::ops::callback::CallbackWebhook;
use effect_tool::store::sqlite::SqliteStore;
use effect_tool::{
    BlockReason, CallOptions, Disposition, EffectCtx, EffectError, Engine, EngineConfig, RunContext, ToolError, tool,
};
use serde::{Deserialize, Serialize};

/// What the model reads of a payout: pending (with no id yet) until the bank answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PayoutStatus {
    /// The bank's payout id, once paid.
    pub payout_id: Option<String>,
    /// `pending`, then the bank's `paid` or `failed`.
    pub status: String,
}

/// The bank, outside the engine: it counts the payouts it was asked for (the external
/// ledger) and keeps the callback token of each, to call back when it has paid.
#[derive(Default)]
struct Bank {
    started: Mutex<Vec<(String, u64, String)>>,
}

/// Pay `cents` to the account of request `request_id`; the bank confirms later.
#[tool(effect = "irreversible", key = |a| format!("payout:{}", a.request_id))]
async fn payout(ctx: &EffectCtx, request_id: String, cents: u64) -> Result<PayoutStatus, ToolError> {
    let bank = ctx
        .value::<Arc<Bank>>()
        .ok_or_else(|| ToolError::definitive("no bank in the run"))?;
    let token = ctx
        .pending(Duration::from_secs(600))
        .map_err(|e| ToolError::definitive(e.to_string()))?;
    bank.started
        .lock()
        .unwrap()
        .push((request_id, cents, token.to_string()));
    Ok(PayoutStatus {
        payout_id: None,
        status: "pending".to_owned(),
    })
}

fn check(what: &str, ok: bool) {
    println!("{} {what}", if ok { "ok  " } else { "FAIL" });
    if !ok {
        std::process::exit(1);
    }
}

#[tokio::main]
async fn main() {
    let dir = std::env::temp_dir().join(format!("effect-tool-callback-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let store = SqliteStore::open(dir.join("journal.db")).unwrap();
    // A short lease: a call that meets the pending record waits this long for the callback.
    let config = EngineConfig {
        lease: Duration::from_millis(300),
        ..EngineConfig::default()
    };
    let engine = Engine::with_config(store, config);
    let bank = Arc::new(Bank::default());
    let run = RunContext::new("run-1").with_value(bank.clone());
    let args = || PayoutArgs {
        request_id: "R-7".to_owned(),
        cents: 2500,
    };

    // The application mounts the webhook (here on its own, on a free port).
    let secret = engine
        .marker_secret()
        .await
        .unwrap()
        .expect("the SQLite journal keeps a secret");
    let hook = CallbackWebhook::new(engine.store().clone(), secret).audited_as("bank");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/callback", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, hook.router()).await });

    let first = engine
        .call_with_report(&Payout, &run, CallOptions::default(), args())
        .await;
    println!("first call:  {:?} {:?}", first.disposition, first.result);
    check(
        "the first call started the payout and answers pending",
        first.disposition == Disposition::Executed && first.result.as_ref().is_ok_and(|p| p.status == "pending"),
    );

    let again = engine
        .call_with_report(&Payout, &run, CallOptions::default(), args())
        .await;
    println!("second call: {:?}", again.result.as_ref().map_err(|e| e.to_string()));
    check(
        "a second call, before the bank answers, is told it is still pending",
        matches!(&again.result, Err(EffectError::Blocked(b)) if b.reason == BlockReason::AwaitingCallback),
    );

    let (_, _, token) = bank.started.lock().unwrap()[0].clone();
    let http = reqwest::Client::new();
    let answer = serde_json::json!({
        "token": token,
        "verdict": "applied",
        "output": { "payout_id": "po_1", "status": "paid" },
    });
    let forged = {
        let mut a = answer.clone();
        a["token"] = serde_json::json!(format!("{}0", &token[..token.len() - 1]));
        a
    };
    let status = http.post(&url).json(&forged).send().await.unwrap().status();
    check(&format!("a forged callback is refused ({status})"), status == 403);
    let status = http.post(&url).json(&answer).send().await.unwrap().status();
    check(
        &format!("the bank's callback settles the payout ({status})"),
        status == 200,
    );
    let status = http.post(&url).json(&answer).send().await.unwrap().status();
    check(&format!("the same callback again is refused ({status})"), status == 409);

    let third = engine
        .call_with_report(&Payout, &run, CallOptions::default(), args())
        .await;
    println!("third call:  {:?} {:?}", third.disposition, third.result);
    check(
        "the next call replays the bank's answer",
        third.disposition == Disposition::Replayed
            && third.result.as_ref().ok()
                == Some(&PayoutStatus {
                    payout_id: Some("po_1".to_owned()),
                    status: "paid".to_owned(),
                }),
    );
    check(
        "the bank was asked to pay once",
        bank.started.lock().unwrap().len() == 1,
    );
    let audit = engine.store().audit(None).await.unwrap();
    let actions: Vec<&str> = audit.iter().map(|a| a.action.as_str()).collect();
    println!("audit: {actions:?}");
    check(
        "the audit trail has the pending record, the refusals and the settlement",
        actions == ["pending", "callback-refused", "callback-settled", "callback-refused"],
    );
    let _ = std::fs::remove_dir_all(&dir);
}
