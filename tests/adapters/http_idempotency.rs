//! The HTTP client for effects (`adapters::http`) against a real HTTP server: an axum payment
//! API inside the test that keeps a Stripe-like idempotency store (a key's first request runs
//! and its answer is stored; a request while it runs gets 409; a later one gets the stored
//! answer) and injects faults on the requests it is told to: the connection closed after the
//! commit (no answer), the connection reset before anything is done, a 429 with `Retry-After`,
//! a request held in flight until another one with its key has been answered 409, a 502 from
//! "the proxy" after the commit.
//!
//! Every refund goes through the engine, with a `#[tool]` whose client is wrapped in the
//! middleware; the refunds are counted in the server's own ledger, which the engine cannot see:
//! each key is applied once, and every attempt carried the same key and its own attempt number.
#![cfg(feature = "http")]

use std::collections::{HashMap, VecDeque};
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::extract::connect_info::{ConnectInfo, Connected};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::serve::{IncomingStream, Listener};
use effect_tool::adapters::http::{EFFECT_MARKER, EffectRequestExt, HttpError, IdempotencyMiddleware};
use effect_tool::store::markers::find_record;
use effect_tool::value::marker::MarkerSecret;
use effect_tool::{
    CallOptions, Disposition, EffectCtx, EffectError, Engine, Failure, MemoryStore, RecordState, RunContext, tools,
};
use reqwest_middleware::ClientWithMiddleware;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

// ---------------------------------------------------------------------------------------------
// The payment API: a Stripe-like idempotency store, a ledger of refunds, scripted faults.
// ---------------------------------------------------------------------------------------------

/// What the server does to one request (taken in the order requests arrive).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// Apply the refund and store the answer, then close the connection without answering.
    DropAfterCommit,
    /// Reset the connection (RST) before doing anything.
    Reset,
    /// Answer 429 with `Retry-After: <seconds>` before doing anything (nothing is stored).
    RateLimit(u64),
    /// Keep the request in flight until another request with its key has been answered 409,
    /// then apply it (its client has given up by then).
    HoldUntilConflict,
    /// Apply the refund and store the answer, then answer 502 (a proxy in front that failed).
    BadGatewayAfterCommit,
}

/// An idempotency key's entry, as Stripe keeps it.
#[derive(Debug, Clone)]
enum Entry {
    /// The first request with the key is running.
    InFlight,
    /// The first request's answer, replayed to every later request with the same body.
    Done { request: String, status: u16, body: String },
}

/// One request the server received.
#[derive(Debug, Clone)]
struct Seen {
    key: Option<String>,
    attempt: Option<String>,
    /// What the server did: its status, or `dropped`, `reset`, `held`.
    answer: String,
    /// Whether the answer was replayed from the idempotency store.
    replayed: bool,
    at: Instant,
}

/// A refund, as the API returns it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
struct Refund {
    id: String,
    order: String,
    amount_cents: u64,
}

/// What the API is asked for.
#[derive(Debug, Serialize, Deserialize)]
struct RefundRequest {
    order: String,
    amount_cents: u64,
}

#[derive(Default)]
struct Bank {
    /// The idempotency store, by key.
    keys: Mutex<HashMap<String, Entry>>,
    /// Refunds applied, in order: the ledger the engine cannot see.
    applied: Mutex<Vec<Refund>>,
    /// The `Effect-Marker` each refund was made with, by refund id (what a provider keeps).
    markers: Mutex<HashMap<String, String>>,
    /// Every request, in order.
    seen: Mutex<Vec<Seen>>,
    /// The faults of the next requests, in order of arrival.
    faults: Mutex<VecDeque<Fault>>,
    /// Tells a held request that a 409 was decided for its key.
    conflict: tokio::sync::Notify,
}

impl Bank {
    fn script(&self, faults: &[Fault]) {
        self.faults.lock().unwrap().extend(faults.iter().copied());
    }

    fn applied(&self) -> Vec<Refund> {
        self.applied.lock().unwrap().clone()
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    fn saw(&self, key: Option<&str>, attempt: Option<&str>, answer: impl Into<String>, replayed: bool) {
        self.seen.lock().unwrap().push(Seen {
            key: key.map(str::to_owned),
            attempt: attempt.map(str::to_owned),
            answer: answer.into(),
            replayed,
            at: Instant::now(),
        });
    }

    /// Apply the refund of `request` under `key` and store its answer.
    fn commit(&self, key: &str, request: &str, marker: Option<&str>) -> (u16, String) {
        let asked: RefundRequest = serde_json::from_str(request).expect("a refund request");
        let (status, body) = if asked.amount_cents > 100_000 {
            (
                402,
                r#"{"error": {"code": "card_declined", "message": "The card was declined: the amount is over the card's limit."}}"#.to_owned(),
            )
        } else {
            let mut applied = self.applied.lock().unwrap();
            let refund = Refund {
                id: format!("re_{}", applied.len() + 1),
                order: asked.order,
                amount_cents: asked.amount_cents,
            };
            applied.push(refund.clone());
            if let Some(marker) = marker {
                self.markers
                    .lock()
                    .unwrap()
                    .insert(refund.id.clone(), marker.to_owned());
            }
            (200, serde_json::to_string(&refund).unwrap())
        };
        self.keys.lock().unwrap().insert(
            key.to_owned(),
            Entry::Done {
                request: request.to_owned(),
                status,
                body: body.clone(),
            },
        );
        (status, body)
    }
}

fn answer(status: u16, body: String, replayed: bool) -> Response {
    let mut response = (StatusCode::from_u16(status).unwrap(), body).into_response();
    response
        .headers_mut()
        .insert("content-type", "application/json".parse().unwrap());
    if replayed {
        response
            .headers_mut()
            .insert("idempotent-replayed", "true".parse().unwrap());
    }
    response
}

/// `POST /v1/refunds`, as Stripe answers it.
async fn refunds(
    State(bank): State<Arc<Bank>>,
    ConnectInfo(line): ConnectInfo<Line>,
    headers: HeaderMap,
    request: String,
) -> Response {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let (key, attempt, marker) = (
        header("idempotency-key"),
        header("effect-attempt"),
        header("effect-marker"),
    );
    let Some(key) = key else {
        bank.saw(None, attempt.as_deref(), "400", false);
        return answer(
            400,
            r#"{"error": {"message": "an Idempotency-Key is required"}}"#.into(),
            false,
        );
    };
    let saw = |answer: &str, replayed: bool| bank.saw(Some(&key), attempt.as_deref(), answer, replayed);
    let fault = bank.faults.lock().unwrap().pop_front();

    match fault {
        Some(Fault::Reset) => {
            saw("reset", false);
            line.cut(Cut::Reset);
            return answer(200, "never sent".into(), false);
        }
        Some(Fault::RateLimit(seconds)) => {
            saw("429", false);
            let mut response = answer(429, r#"{"error": {"message": "too many requests"}}"#.into(), false);
            response
                .headers_mut()
                .insert("retry-after", seconds.to_string().parse().unwrap());
            return response;
        }
        _ => {}
    }

    // The idempotency store: a running key gets 409, a finished one its stored answer.
    let entry = bank.keys.lock().unwrap().get(&key).cloned();
    match entry {
        Some(Entry::InFlight) => {
            saw("409", false);
            // Decided while the first request is in flight; answered once it has committed,
            // so that the client's next attempt finds the stored answer (the test does not
            // depend on how long the commit takes).
            bank.conflict.notify_one();
            while matches!(bank.keys.lock().unwrap().get(&key), Some(Entry::InFlight)) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            return answer(
                409,
                r#"{"error": {"message": "another request with this idempotency key is in progress"}}"#.into(),
                false,
            );
        }
        Some(Entry::Done {
            request: first,
            status,
            body,
        }) => {
            if first != request {
                saw("422", false);
                return answer(
                    422,
                    r#"{"error": {"message": "this idempotency key was used with other parameters"}}"#.into(),
                    false,
                );
            }
            saw(&status.to_string(), true);
            return answer(status, body, true);
        }
        None => {
            bank.keys.lock().unwrap().insert(key.clone(), Entry::InFlight);
        }
    }

    match fault {
        Some(Fault::HoldUntilConflict) => {
            saw("held", false);
            // The work goes on when the client gives up (hyper then drops this handler).
            let work = tokio::spawn(async move {
                bank.conflict.notified().await;
                bank.commit(&key, &request, marker.as_deref());
            });
            let _ = work.await;
            answer(200, "too late: the client gave up".into(), false)
        }
        Some(Fault::DropAfterCommit) => {
            bank.commit(&key, &request, marker.as_deref());
            saw("dropped", false);
            line.cut(Cut::Close);
            answer(200, "never sent".into(), false)
        }
        Some(Fault::BadGatewayAfterCommit) => {
            bank.commit(&key, &request, marker.as_deref());
            saw("502", false);
            answer(502, "<html>502 Bad Gateway</html>".into(), false)
        }
        _ => {
            let (status, body) = bank.commit(&key, &request, marker.as_deref());
            saw(&status.to_string(), false);
            answer(status, body, false)
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Connections a handler can cut: closed without an answer, or reset.
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cut {
    /// Close the connection (FIN) instead of answering.
    Close,
    /// Reset it (RST: `SO_LINGER` 0, then close).
    Reset,
}

/// A connection's handle, given to its handlers (`ConnectInfo`).
#[derive(Debug, Clone, Default)]
struct Line(Arc<Mutex<Option<Cut>>>);

impl Line {
    /// The connection is cut at its next read or write: the handler's answer is never sent.
    fn cut(&self, how: Cut) {
        *self.0.lock().unwrap() = Some(how);
    }

    fn is_cut(&self) -> Option<Cut> {
        *self.0.lock().unwrap()
    }
}

/// A TCP connection that fails every read and write once its handler cut it; hyper then drops
/// it, which closes the socket (with a reset if asked).
struct CutIo {
    stream: TcpStream,
    line: Line,
}

impl CutIo {
    fn cut(&self) -> Option<io::Error> {
        let how = self.line.is_cut()?;
        if how == Cut::Reset {
            let _ = self.stream.set_zero_linger();
        }
        Some(io::Error::new(io::ErrorKind::ConnectionAborted, "cut by the test"))
    }
}

impl AsyncRead for CutIo {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        if let Some(err) = self.cut() {
            return Poll::Ready(Err(err));
        }
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for CutIo {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        if let Some(err) = self.cut() {
            return Poll::Ready(Err(err));
        }
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if let Some(err) = self.cut() {
            return Poll::Ready(Err(err));
        }
        Pin::new(&mut self.stream).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if let Some(err) = self.cut() {
            return Poll::Ready(Err(err));
        }
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// A TCP listener whose connections are [`CutIo`]s.
struct CutListener(TcpListener);

impl Listener for CutListener {
    type Io = CutIo;
    type Addr = Line;

    async fn accept(&mut self) -> (CutIo, Line) {
        loop {
            if let Ok((stream, _)) = self.0.accept().await {
                let line = Line::default();
                return (
                    CutIo {
                        stream,
                        line: line.clone(),
                    },
                    line,
                );
            }
        }
    }

    fn local_addr(&self) -> io::Result<Line> {
        Ok(Line::default())
    }
}

impl Connected<IncomingStream<'_, CutListener>> for Line {
    fn connect_info(stream: IncomingStream<'_, CutListener>) -> Self {
        stream.remote_addr().clone()
    }
}

/// The payment API on a port of its own; its base URL.
async fn serve(bank: Arc<Bank>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let app = axum::Router::new().route("/v1/refunds", post(refunds)).with_state(bank);
    tokio::spawn(async move {
        axum::serve(CutListener(listener), app.into_make_service_with_connect_info::<Line>())
            .await
            .unwrap();
    });
    base
}

// ---------------------------------------------------------------------------------------------
// The tool, as an application writes it.
// ---------------------------------------------------------------------------------------------

/// The payment API's client.
struct Payments {
    client: ClientWithMiddleware,
    base: String,
}

#[tools]
impl Payments {
    /// Refund part of an order through the payment API.
    #[tool(
        effect = "idempotent",
        key(order, amount_cents),
        retry(max_attempts = 7, base_delay = "10ms", max_delay = "5s")
    )]
    async fn refund(&self, ctx: &EffectCtx, order: String, amount_cents: u64) -> Result<Refund, HttpError> {
        let response = self
            .client
            .post(format!("{}/v1/refunds", self.base))
            .effect(ctx)
            .json(&RefundRequest { order, amount_cents })
            .send()
            .await?;
        Ok(response.json().await?)
    }

    /// The same refund, with two attempts at most.
    #[tool(
        effect = "idempotent",
        key(order, amount_cents),
        retry(max_attempts = 2, base_delay = "10ms")
    )]
    async fn refund_twice(&self, ctx: &EffectCtx, order: String, amount_cents: u64) -> Result<Refund, HttpError> {
        self.refund(ctx, order, amount_cents).await
    }
}

/// A payment API on a server of its own, a client through the middleware (with the marker
/// header), and an engine with a known marker secret.
async fn setup(client: reqwest::Client) -> (Arc<Bank>, Arc<Payments>, Engine) {
    let bank = Arc::new(Bank::default());
    let base = serve(bank.clone()).await;
    let client = IdempotencyMiddleware::new().marker_header(EFFECT_MARKER).client(client);
    let engine = Engine::new(MemoryStore::new()).with_marker_secret(secret());
    (bank, Arc::new(Payments { client, base }), engine)
}

fn secret() -> MarkerSecret {
    MarkerSecret::from_bytes([42; 32])
}

fn args(order: &str, amount_cents: u64) -> PaymentsRefundArgs {
    PaymentsRefundArgs {
        order: order.into(),
        amount_cents,
    }
}

/// The attempts the server saw, as `(attempt, answer)`, all with one key (asserted).
fn attempts(bank: &Bank) -> Vec<(String, String)> {
    let seen = bank.seen();
    let key = seen[0].key.clone().expect("every request carries a key");
    assert!(seen.iter().all(|s| s.key.as_deref() == Some(&key)), "one key: {seen:?}");
    seen.into_iter()
        .map(|s| (s.attempt.unwrap_or_default(), s.answer))
        .collect()
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
}

// ---------------------------------------------------------------------------------------------
// The faults.
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn an_answer_lost_after_the_commit_is_retried_with_the_same_key_and_replayed_by_the_provider() {
    let (bank, payments, engine) = setup(reqwest::Client::new()).await;
    bank.script(&[Fault::DropAfterCommit]);
    let run = RunContext::new("ticket-7");
    let tool = payments.refund_tool();

    let report = engine
        .call_with_report(&tool, &run, CallOptions::call_id("c1"), args("A-1", 1_999))
        .await;
    let refund = report.result.expect("the retry gets the stored answer");
    assert_eq!(refund.id, "re_1");
    assert_eq!(report.disposition, Disposition::Executed);
    assert_eq!(bank.applied().len(), 1, "applied once");
    assert_eq!(attempts(&bank), pairs(&[("1", "dropped"), ("2", "200")]));
    assert!(bank.seen()[1].replayed, "the second answer is the stored one");
    assert_eq!(
        bank.seen()[0].key.as_deref(),
        report.key.as_deref(),
        "the effect key itself"
    );

    // The model asks again: the journal answers, the API sees nothing more.
    let again = engine
        .call_with_report(&tool, &run, CallOptions::call_id("c2"), args("A-1", 1_999))
        .await;
    assert_eq!(again.disposition, Disposition::Replayed);
    assert_eq!(again.result.unwrap(), refund);
    assert_eq!(bank.seen().len(), 2);
    assert_eq!(bank.applied().len(), 1);
}

#[tokio::test]
async fn a_reset_connection_is_an_unknown_outcome_and_the_retry_applies_it_once() {
    let (bank, payments, engine) = setup(reqwest::Client::new()).await;
    bank.script(&[Fault::Reset]);
    let run = RunContext::new("ticket-8");

    let refund = engine
        .call(
            &payments.refund_tool(),
            &run,
            CallOptions::call_id("c1"),
            args("A-2", 500),
        )
        .await
        .expect("the retry applies it");
    assert_eq!(bank.applied(), vec![refund]);
    assert_eq!(attempts(&bank), pairs(&[("1", "reset"), ("2", "200")]));
    assert!(
        !bank.seen()[1].replayed,
        "the reset request applied nothing: the retry did"
    );
}

#[tokio::test]
async fn a_409_while_the_first_request_is_in_flight_leaves_the_effect_to_it_and_the_next_attempt_gets_its_answer() {
    // The first attempt's client gives up (its timeout) while the server still runs it; the
    // second attempt is answered 409; the third gets the first one's stored answer.
    let client = reqwest::Client::builder()
        .timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let (bank, payments, engine) = setup(client).await;
    bank.script(&[Fault::HoldUntilConflict]);
    let run = RunContext::new("ticket-9");

    let report = engine
        .call_with_report(
            &payments.refund_tool(),
            &run,
            CallOptions::call_id("c1"),
            args("A-3", 700),
        )
        .await;
    let refund = report.result.expect("the third attempt gets the stored answer");
    assert_eq!(bank.applied(), vec![refund], "applied once, by the first request");
    assert_eq!(attempts(&bank), pairs(&[("1", "held"), ("2", "409"), ("3", "200")]));
    assert!(bank.seen()[2].replayed);
}

#[tokio::test]
async fn a_409_is_unknown_so_the_last_attempt_leaves_the_record_in_doubt_not_failed() {
    // Two attempts only: the timeout, then the 409. Nothing has answered yet, and the request
    // in flight may still apply the refund: the record is in doubt (a transient failure would
    // have released it as "nothing happened").
    let client = reqwest::Client::builder()
        .timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let (bank, payments, engine) = setup(client).await;
    bank.script(&[Fault::HoldUntilConflict]);
    let run = RunContext::new("ticket-10");
    let tool = payments.refund_twice_tool();

    let report = engine
        .call_with_report(
            &tool,
            &run,
            CallOptions::call_id("c1"),
            PaymentsRefundTwiceArgs {
                order: "A-4".into(),
                amount_cents: 800,
            },
        )
        .await;
    let err = report.result.expect_err("two attempts, both unknown");
    let key = report.key.clone().unwrap();
    assert!(
        matches!(
            &err,
            EffectError::Tool {
                failure: Failure::Unknown,
                ..
            }
        ),
        "unknown, never definitive or transient: {err}"
    );
    assert!(err.to_string().contains("409"), "{err}");
    let record = engine.store().get(&key).await.unwrap().unwrap();
    assert_eq!(record.state, RecordState::InDoubt, "the request in flight may apply it");
    assert_eq!(attempts(&bank), pairs(&[("1", "held"), ("2", "409")]));
    assert_eq!(bank.applied().len(), 1, "the request in flight applied it");

    // The next call runs again with the same key and gets the provider's stored answer.
    let refund = engine
        .call(
            &tool,
            &run,
            CallOptions::call_id("c2"),
            PaymentsRefundTwiceArgs {
                order: "A-4".into(),
                amount_cents: 800,
            },
        )
        .await
        .expect("the stored answer");
    assert_eq!(bank.applied(), vec![refund]);
    assert_eq!(attempts(&bank)[2], ("3".to_owned(), "200".to_owned()));
    assert!(bank.seen()[2].replayed);
}

#[tokio::test]
async fn a_429_is_waited_out_for_as_long_as_retry_after_asks() {
    let (bank, payments, engine) = setup(reqwest::Client::new()).await;
    bank.script(&[Fault::RateLimit(1)]);
    let run = RunContext::new("ticket-11");

    let refund = engine
        .call(
            &payments.refund_tool(),
            &run,
            CallOptions::call_id("c1"),
            args("A-5", 900),
        )
        .await
        .expect("the second attempt applies it");
    assert_eq!(bank.applied(), vec![refund]);
    assert_eq!(attempts(&bank), pairs(&[("1", "429"), ("2", "200")]));
    // A lower bound the engine's wait guarantees (the tool's own backoff is 10 ms): the second
    // attempt came no sooner than the second the server asked for.
    let seen = bank.seen();
    let waited = seen[1].at.duration_since(seen[0].at);
    assert!(
        waited >= Duration::from_secs(1),
        "Retry-After: 1 honoured, waited {waited:?}"
    );
}

#[tokio::test]
async fn a_502_after_the_commit_is_unknown_and_the_retry_with_the_same_key_gets_the_stored_answer() {
    let (bank, payments, engine) = setup(reqwest::Client::new()).await;
    bank.script(&[Fault::BadGatewayAfterCommit]);
    let run = RunContext::new("ticket-12");

    let refund = engine
        .call(
            &payments.refund_tool(),
            &run,
            CallOptions::call_id("c1"),
            args("A-6", 1_000),
        )
        .await
        .expect("the retry gets the stored answer");
    assert_eq!(bank.applied(), vec![refund]);
    assert_eq!(attempts(&bank), pairs(&[("1", "502"), ("2", "200")]));
    assert!(bank.seen()[1].replayed);
}

#[tokio::test]
async fn a_refusal_is_definitive_not_retried_and_tells_the_model_the_providers_reason() {
    let (bank, payments, engine) = setup(reqwest::Client::new()).await;
    let run = RunContext::new("ticket-13");

    let report = engine
        .call_with_report(
            &payments.refund_tool(),
            &run,
            CallOptions::call_id("c1"),
            args("A-7", 250_000),
        )
        .await;
    let err = report.result.expect_err("declined");
    assert!(
        matches!(
            &err,
            EffectError::Tool {
                failure: Failure::Definitive,
                ..
            }
        ),
        "{err}"
    );
    let text = err.to_string();
    assert!(text.contains("402 Payment Required"), "{text}");
    assert!(text.contains("The card was declined"), "the provider's reason: {text}");
    assert!(text.contains("will not help"), "what to do next: {text}");
    assert_eq!(attempts(&bank), pairs(&[("1", "402")]), "not retried");
    assert!(bank.applied().is_empty());
    let record = engine.store().get(&report.key.unwrap()).await.unwrap().unwrap();
    assert_eq!(record.state, RecordState::Released, "nothing happened");
}

#[tokio::test]
async fn many_refunds_under_faults_apply_each_key_once() {
    let (bank, payments, engine) = setup(reqwest::Client::new()).await;
    bank.script(&[
        Fault::DropAfterCommit,
        Fault::Reset,
        Fault::RateLimit(0),
        Fault::BadGatewayAfterCommit,
        Fault::DropAfterCommit,
        Fault::Reset,
    ]);
    // Seven attempts per call: even a call that met all six faults gets through.
    let run = RunContext::new("ticket-14");
    let tool = payments.refund_tool();
    let calls = (0..8u64).map(|i| {
        let (engine, run, tool) = (&engine, &run, &tool);
        async move {
            engine
                .call(
                    tool,
                    run,
                    CallOptions::call_id(format!("c{i}")),
                    args(&format!("B-{i}"), 100 + i),
                )
                .await
        }
    });
    let refunds: Vec<Refund> = futures::future::join_all(calls)
        .await
        .into_iter()
        .map(|r| r.expect("every refund goes through"))
        .collect();

    let mut applied: Vec<String> = bank.applied().into_iter().map(|r| r.order).collect();
    applied.sort();
    let expected: Vec<String> = (0..8).map(|i| format!("B-{i}")).collect();
    assert_eq!(applied, expected, "each order refunded once");
    let ids: std::collections::HashSet<_> = refunds.iter().map(|r| r.id.clone()).collect();
    assert_eq!(ids.len(), 8, "every call got its own refund: {refunds:?}");
    assert!(bank.faults.lock().unwrap().is_empty(), "every fault was met");
    assert_eq!(bank.keys.lock().unwrap().len(), 8, "eight keys");
}

// ---------------------------------------------------------------------------------------------
// The marker and requests without a context.
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn the_marker_a_provider_keeps_leads_an_operator_to_the_record() {
    let (bank, payments, engine) = setup(reqwest::Client::new()).await;
    let run = RunContext::new("ticket-15");
    let report = engine
        .call_with_report(
            &payments.refund_tool(),
            &run,
            CallOptions::call_id("c1"),
            args("A-8", 300),
        )
        .await;
    let refund = report.result.unwrap();
    let kept = bank.markers.lock().unwrap()[&refund.id].clone();
    assert!(kept.starts_with("<!-- effect-tool:marker="), "{kept}");
    assert!(
        !kept.contains("A-8") && !kept.contains("ticket"),
        "no part of the key: {kept}"
    );
    let found = find_record(engine.store().as_ref(), &kept, Some(&secret()))
        .await
        .unwrap()
        .expect("the record of the refund");
    assert_eq!(Some(found.key), report.key);
}

#[tokio::test]
async fn a_request_that_changes_something_without_a_context_is_refused_before_it_is_sent() {
    let bank = Arc::new(Bank::default());
    let base = serve(bank.clone()).await;
    let client = IdempotencyMiddleware::new().client(reqwest::Client::new());
    let body = RefundRequest {
        order: "A-9".into(),
        amount_cents: 1,
    };

    let err = HttpError::from(
        client
            .post(format!("{base}/v1/refunds"))
            .json(&body)
            .send()
            .await
            .unwrap_err(),
    );
    assert_eq!(err.failure(), Failure::Definitive);
    assert!(err.to_string().contains(".effect(ctx)"), "{err}");
    assert!(bank.seen().is_empty(), "nothing was sent");

    // Marked as changing nothing, it is sent as it is: without a key (this API refuses it).
    let err = HttpError::from(
        client
            .post(format!("{base}/v1/refunds"))
            .no_effect()
            .json(&body)
            .send()
            .await
            .unwrap_err(),
    );
    assert_eq!(err.status().map(|s| s.as_u16()), Some(400));
    assert_eq!(err.failure(), Failure::Definitive);
    assert_eq!(bank.seen().len(), 1);
    assert_eq!(bank.seen()[0].key, None);
}

#[tokio::test]
async fn a_server_that_is_not_there_is_transient_nothing_was_sent() {
    // A port that was just free: nothing listens there.
    let port = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let client = IdempotencyMiddleware::new().client(reqwest::Client::new());
    let ctx = EffectCtx::detached(RunContext::new("r"), "refund", effect_tool::EffectClass::Idempotent);
    let err = HttpError::from(
        client
            .post(format!("http://127.0.0.1:{port}/v1/refunds"))
            .effect(&ctx)
            .send()
            .await
            .unwrap_err(),
    );
    assert_eq!(err.failure(), Failure::TRANSIENT, "{err}");
    assert!(err.to_string().contains("nothing was sent"), "{err}");
}

#[tokio::test]
async fn a_connection_closed_or_reset_after_the_request_was_sent_is_unknown_never_not_applied() {
    let bank = Arc::new(Bank::default());
    let base = serve(bank.clone()).await;
    let client = IdempotencyMiddleware::new().client(reqwest::Client::new());
    let ctx = EffectCtx::detached(RunContext::new("r"), "refund", effect_tool::EffectClass::Idempotent);
    bank.script(&[Fault::DropAfterCommit, Fault::Reset]);

    for (order, what) in [("C-1", "closed after the commit"), ("C-2", "reset before anything")] {
        let err = HttpError::from(
            client
                .post(format!("{base}/v1/refunds"))
                .effect(&ctx.clone())
                .json(&RefundRequest {
                    order: order.into(),
                    amount_cents: 1,
                })
                .send()
                .await
                .unwrap_err(),
        );
        assert_eq!(err.failure(), Failure::Unknown, "{what}: {err}");
        assert_eq!(err.status(), None);
        let text = err.to_string();
        assert!(text.contains("lost after the request was sent"), "{what}: {text}");
        assert!(text.contains("same idempotency key"), "what to do next: {text}");
        assert!(
            text.contains(&format!("{}/v1/refunds", base.trim_start_matches("http://"))),
            "{text}"
        );
    }
    assert_eq!(
        bank.applied().len(),
        1,
        "the closed one committed, the reset one did not"
    );
}
