//! Webhooks as an attacker and a bad day would test them (issue 29, item 10 and the suspected
//! queue and replay findings), against a real HTTP receiver inside the test:
//! - a given-up delivery logs the receiver by scheme and host only (a Slack URL is the
//!   credential), and `Webhook`'s `Debug` shows neither the URL's path nor the HMAC secret;
//! - `NeedsPerson.text` escapes `&`, `<`, `>`, so a client-chosen run id cannot mention
//!   `<!channel>` or disguise a link;
//! - `verify` refuses a timestamp outside its window (5 minutes by default, or as chosen);
//! - one notification the receiver keeps refusing does not hold back the others, and the
//!   queue is bounded: past its limit the oldest waiting notification is dropped.

#![cfg(feature = "webhook")]

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use effect_tool::ops::notify::NeedsPerson;
use effect_tool::ops::notify::webhook::{Webhook, signature, verify, verify_with_tolerance};
use effect_tool::{CallOptions, EffectCtx, Engine, MemoryStore, RunContext, Store, ToolError, tool};

/// Times out after sending: the record goes in doubt and needs a person.
#[tool(effect = "irreversible")]
async fn page_oncall(_ctx: &EffectCtx, n: u32) -> Result<u32, ToolError> {
    let _ = n;
    Err(ToolError::unknown("timed out after sending"))
}

/// `count` notifications of records in doubt, in runs named by `run`.
async fn notifications(run: &str, count: u32) -> Vec<NeedsPerson> {
    let engine = Engine::new(MemoryStore::new());
    let run = RunContext::new(run);
    let mut out = Vec::new();
    for n in 0..count {
        let report = engine
            .call_with_report(
                &PageOncall,
                &run,
                CallOptions::call_id(format!("c{n}")),
                PageOncallArgs { n },
            )
            .await;
        let key = report.key.expect("a journaled call");
        let rec = engine.store().get(&key).await.unwrap().expect("its record");
        out.push(NeedsPerson::of(&rec, engine.store().now()).expect("in doubt: it needs a person"));
    }
    out
}

/// A receiver at `path`: records the `x-effect-tool-id` of each request and answers with
/// `answer(id)`.
async fn receiver(
    path: &'static str,
    answer: impl Fn(&str) -> u16 + Clone + Send + Sync + 'static,
) -> (std::net::SocketAddr, Arc<Mutex<Vec<String>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let app = {
        let seen = seen.clone();
        axum::Router::new().route(
            path,
            axum::routing::post(move |headers: axum::http::HeaderMap| {
                let (seen, answer) = (seen.clone(), answer.clone());
                async move {
                    let id = headers["x-effect-tool-id"].to_str().unwrap().to_owned();
                    let status = answer(&id);
                    seen.lock().unwrap().push(id);
                    axum::http::StatusCode::from_u16(status).unwrap()
                }
            }),
        )
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, seen)
}

/// Wait (without a deadline of its own: the test harness's is enough) until `cond` holds.
async fn until(cond: impl Fn() -> bool) {
    while !cond() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The log lines written while the test runs on this thread.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn the_url_and_the_secret_are_never_printed() {
    let logs = Logs::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer({
            let logs = logs.clone();
            move || logs.clone()
        })
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let (addr, seen) = receiver("/services/T0/B0/XOXB-TOKEN", |_| 500).await;
    let hook = Webhook::new(&format!("http://{addr}/services/T0/B0/XOXB-TOKEN"))
        .unwrap()
        .with_secret("hmac-secret-value")
        .with_attempts(2)
        .with_backoff(Duration::from_millis(1), Duration::from_millis(1));
    let debug = format!("{hook:?}");
    assert!(!debug.contains("XOXB") && !debug.contains("hmac-secret"), "{debug}");
    assert!(debug.contains(&format!("http://{addr}/")), "{debug}");

    let mut sender = hook.start();
    sender.send(notifications("run-log", 1).await.remove(0));
    assert!(sender.flush(Duration::from_secs(30)).await);
    assert_eq!(seen.lock().unwrap().len(), 2, "both attempts reached the receiver");
    let text = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    assert!(text.contains("gave up delivering"), "{text}");
    assert!(
        text.contains(&format!("http://{addr}/")),
        "the receiver is named: {text}"
    );
    assert!(!text.contains("XOXB-TOKEN") && !text.contains("hmac-secret"), "{text}");
}

#[tokio::test]
async fn the_slack_text_escapes_what_a_client_chose() {
    let n = notifications("<!channel> <https://evil.example|your bank> & co", 1)
        .await
        .remove(0);
    assert!(!n.text.contains('<') && !n.text.contains('>'), "{}", n.text);
    assert!(n.text.contains("&lt;!channel&gt;"), "{}", n.text);
    assert!(n.text.contains("&amp; co"), "{}", n.text);
    // The structured fields stay as recorded: a program reads them, not Slack.
    assert!(n.run_id.starts_with("<!channel>"), "{}", n.run_id);
}

#[test]
fn verify_refuses_an_old_or_future_timestamp() {
    let secret = b"whsec";
    let body = br#"{"id":"x"}"#;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let signed = |t: u64| signature(secret, t, body);
    assert!(verify(secret, now, body, &signed(now)));
    assert!(verify(secret, now - 60, body, &signed(now - 60)));
    // A delivery captured ten minutes ago, replayed: refused, though its signature is right.
    assert!(!verify(secret, now - 600, body, &signed(now - 600)));
    assert!(!verify(secret, now + 600, body, &signed(now + 600)));
    // A receiver that chooses a wider window accepts it.
    assert!(verify_with_tolerance(
        secret,
        now - 600,
        body,
        &signed(now - 600),
        Duration::from_secs(3600)
    ));
    assert!(!verify_with_tolerance(
        secret,
        now - 600,
        body,
        &signed(now),
        Duration::from_secs(3600)
    ));
}

#[tokio::test]
async fn a_refused_notification_does_not_hold_back_the_others() {
    let all = notifications("run-stall", 3).await;
    let stuck = all[0].id.clone();
    let (addr, seen) = receiver("/hook", move |id| if id == stuck { 503 } else { 200 }).await;
    // The refused one is retried every second, for minutes.
    let sender = Webhook::new(&format!("http://{addr}/hook"))
        .unwrap()
        .with_attempts(1_000)
        .with_backoff(Duration::from_secs(1), Duration::from_secs(1))
        .start();
    for n in &all {
        sender.send(n.clone());
    }
    let (b, c) = (all[1].id.clone(), all[2].id.clone());
    until(|| {
        let seen = seen.lock().unwrap();
        seen.contains(&b) && seen.contains(&c)
    })
    .await;
}

#[tokio::test]
async fn a_full_queue_drops_its_oldest_waiting_notification() {
    let all = notifications("run-full", 5).await;
    let down = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let (addr, seen) = receiver("/hook", {
        let down = down.clone();
        move |_| {
            if down.load(std::sync::atomic::Ordering::SeqCst) {
                503
            } else {
                200
            }
        }
    })
    .await;
    let mut sender = Webhook::new(&format!("http://{addr}/hook"))
        .unwrap()
        .with_concurrency(1)
        .with_queue_limit(2)
        .with_attempts(1_000)
        .with_backoff(Duration::from_millis(20), Duration::from_millis(20))
        .start();
    // The first is in flight (being retried) before the others come.
    sender.send(all[0].clone());
    until(|| !seen.lock().unwrap().is_empty()).await;
    for n in &all[1..] {
        sender.send(n.clone());
    }
    // The receiver comes back: the one in flight and the two newest are delivered.
    down.store(false, std::sync::atomic::Ordering::SeqCst);
    assert!(
        sender.flush(Duration::from_secs(60)).await,
        "every notification done with"
    );
    let got: HashSet<String> = seen.lock().unwrap().iter().cloned().collect();
    let wanted: HashSet<String> = [&all[0], &all[3], &all[4]].iter().map(|n| n.id.clone()).collect();
    assert_eq!(got, wanted, "the two oldest waiting were dropped");
}
