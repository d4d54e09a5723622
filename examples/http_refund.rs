//! A refund through an HTTP payment API that honours `Idempotency-Key`, with the HTTP client for
//! effects (`adapters::http`, feature `http`).
//!
//! Run: `cargo run --example http_refund --features http` (no set-up: the payment API is a small
//! axum server inside the example, on a free local port).
//!
//! The API keeps what it answered each key, as Stripe does, and misbehaves on purpose:
//!
//! 1. its proxy answers the first refund `502 Bad Gateway` after the refund was made: an
//!    unknown outcome, never "not applied"; the engine retries with the same key, and the API
//!    answers with the refund it made;
//! 2. it is rate limited on the next request (`429`, `Retry-After: 1`): nothing was applied; the
//!    engine waits the second it asked for and retries;
//! 3. the model asks for the first refund again: the journal answers, the API sees nothing;
//! 4. a refund over the card's limit is declined (`402`): definitive, not retried, and the model
//!    reads the API's reason.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use effect_tool::adapters::http::{EffectRequestExt, HttpError, IdempotencyMiddleware};
use effect_tool::toolkit::ToolOutcome;
use effect_tool::{EffectCtx, Engine, MemoryStore, RunContext, ToolCall, Toolkit, tools};
use reqwest_middleware::ClientWithMiddleware;
use serde::{Deserialize, Serialize};

/// A refund, as the API returns it.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
struct Refund {
    /// The API's id of the refund.
    id: String,
    /// The order refunded.
    order: String,
    /// How much, in cents.
    amount_cents: u64,
}

/// The payment API's client, as the application holds it.
struct Payments {
    client: ClientWithMiddleware,
    base: String,
}

#[tools]
impl Payments {
    /// Refund part of an order. The same refund is made once, however often it is asked for.
    #[tool(
        effect = "idempotent",
        key(order, amount_cents),
        retry(max_attempts = 4, base_delay = "50ms")
    )]
    async fn refund(&self, ctx: &EffectCtx, order: String, amount_cents: u64) -> Result<Refund, HttpError> {
        let response = self
            .client
            .post(format!("{}/v1/refunds", self.base))
            .effect(ctx) // Idempotency-Key: the effect key, the same on every attempt
            .json(&serde_json::json!({ "order": order, "amount_cents": amount_cents }))
            .send()
            .await?; // a failure status or a lost connection, classified
        Ok(response.json().await?)
    }
}

/// The payment API: refunds by idempotency key, and its misbehaviour.
#[derive(Default)]
struct Api {
    /// What each key was answered (status, body).
    answers: Mutex<HashMap<String, (u16, String)>>,
    /// Refunds made.
    refunds: Mutex<Vec<String>>,
    /// Requests received (retries included).
    requests: Mutex<u32>,
}

async fn refunds(State(api): State<Arc<Api>>, headers: HeaderMap, body: String) -> (StatusCode, HeaderMap, String) {
    let n = {
        let mut requests = api.requests.lock().unwrap();
        *requests += 1;
        *requests
    };
    let mut out = HeaderMap::new();
    out.insert("content-type", "application/json".parse().unwrap());
    let Some(key) = headers.get("idempotency-key").and_then(|v| v.to_str().ok()) else {
        return (
            StatusCode::BAD_REQUEST,
            out,
            r#"{"error": "Idempotency-Key required"}"#.into(),
        );
    };
    if n == 3 {
        out.insert("retry-after", "1".parse().unwrap());
        return (
            StatusCode::TOO_MANY_REQUESTS,
            out,
            r#"{"error": "rate limited"}"#.into(),
        );
    }
    if let Some((status, body)) = api.answers.lock().unwrap().get(key).cloned() {
        out.insert("idempotent-replayed", "true".parse().unwrap());
        return (StatusCode::from_u16(status).unwrap(), out, body);
    }
    let asked: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    let (status, answer) = if asked["amount_cents"].as_u64().unwrap_or(0) > 100_000 {
        (
            402,
            r#"{"error": "card_declined: the amount is over the card's limit"}"#.to_owned(),
        )
    } else {
        let mut refunds = api.refunds.lock().unwrap();
        refunds.push(key.to_owned());
        let refund = serde_json::json!({
            "id": format!("re_{}", refunds.len()),
            "order": asked["order"],
            "amount_cents": asked["amount_cents"],
        });
        (200, refund.to_string())
    };
    api.answers
        .lock()
        .unwrap()
        .insert(key.to_owned(), (status, answer.clone()));
    if n == 1 {
        // The refund is made and stored; the proxy in front fails.
        return (StatusCode::BAD_GATEWAY, out, "<html>502 Bad Gateway</html>".into());
    }
    (StatusCode::from_u16(status).unwrap(), out, answer)
}

fn show(step: &str, r: &effect_tool::ToolResult) {
    let tag = match &r.outcome {
        ToolOutcome::Output(_) => "ok",
        _ => "error",
    };
    println!("{step}\n  {} [{tag}, {}] -> {}", r.name, r.disposition, r.content());
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let api = Arc::new(Api::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    let app = axum::Router::new()
        .route("/v1/refunds", post(refunds))
        .with_state(api.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });

    // The application's client, wrapped once in the middleware.
    let payments = Arc::new(Payments {
        client: IdempotencyMiddleware::new().client(reqwest::Client::new()),
        base,
    });
    let toolkit = Toolkit::new().with(payments.refund_tool());
    let agent = toolkit.dispatcher(Engine::new(MemoryStore::new()));
    let run = RunContext::new("ticket-311");
    let refund = r#"{"order": "A-1042", "amount_cents": 1999}"#;

    let r = agent.call(&run, &ToolCall::new("call_1", "refund", refund)).await;
    show(
        "1. refund: 502 after the refund was made, retried with the same key",
        &r,
    );
    let r = agent
        .call(
            &run,
            &ToolCall::new("call_2", "refund", r#"{"order": "A-1043", "amount_cents": 500}"#),
        )
        .await;
    show("2. another refund: 429 with Retry-After: 1, waited out", &r);
    let r = agent.call(&run, &ToolCall::new("call_3", "refund", refund)).await;
    show("3. the model asks for the first refund again", &r);
    let r = agent
        .call(
            &run,
            &ToolCall::new("call_4", "refund", r#"{"order": "A-1044", "amount_cents": 250000}"#),
        )
        .await;
    show("4. a refund over the card's limit", &r);

    let made = api.refunds.lock().unwrap().len();
    let requests = *api.requests.lock().unwrap();
    println!("\npayment API: {requests} request(s), {made} refund(s)");
    assert_eq!(made, 2, "two refunds, each made once");
    Ok(())
}
