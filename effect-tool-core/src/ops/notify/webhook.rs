//! Notifications of records that need a person, as signed JSON POSTs (feature `webhook`).
//!
//! ```no_run
//! # async fn example(engine: effect_tool_core::Engine) -> Result<(), Box<dyn std::error::Error>> {
//! use effect_tool_core::ops::notify::webhook::Webhook;
//!
//! let webhook = Webhook::new("https://hooks.example.com/effect-tool")?
//!     .with_secret(std::env::var("EFFECT_TOOL_WEBHOOK_SECRET")?)
//!     .start();
//! let _watch = engine.on_needs_person(webhook.sink());
//! # Ok(()) }
//! ```
//!
//! - **The body** is the [`NeedsPerson`] as JSON. Its `text` field makes it a message that a
//!   Slack incoming webhook accepts as it is (`{"text": "...", ...}`: Slack shows `text` and
//!   ignores the rest).
//! - **Headers:** `X-Effect-Tool-Id` (the notification's [`NeedsPerson::id`], the same on every
//!   retry and in every process: drop repeats by it), `X-Effect-Tool-Timestamp` (Unix seconds of
//!   this attempt) and, with a secret, `X-Effect-Tool-Signature: sha256=<hex>`: HMAC-SHA256 of
//!   `<timestamp>.<body>` under the secret. Check it with [`verify`], which also refuses a
//!   timestamp more than [`DEFAULT_TOLERANCE`] (5 minutes) from the receiver's clock
//!   ([`verify_with_tolerance`] to choose), so that a captured delivery cannot be replayed
//!   later. Within that window a replay still verifies: drop repeats by `X-Effect-Tool-Id`.
//! - **Delivery is at least once while the process runs:** notifications are queued and each
//!   is retried (backoff from 500 ms, doubling, at most 5 minutes, with jitter) until the
//!   receiver answers 2xx, for at most [`Webhook::with_attempts`] attempts (12 by default: about
//!   25 minutes). Up to [`Webhook::with_concurrency`] notifications (4 by default) are in
//!   flight at once, each retried on its own, so one the receiver keeps refusing does not hold
//!   back the others. A notification that exhausts its attempts is logged (`tracing` error,
//!   naming the receiver by scheme and host only: a URL such as Slack's carries its credential
//!   in the path) and counted in `effect_tool_webhook_failures_total`.
//! - **The queue is bounded** ([`Webhook::with_queue_limit`], 1,000 by default): when a
//!   receiver is down long enough to fill it, the oldest waiting notification is dropped, with
//!   a `tracing` warning and a count in `effect_tool_webhook_dropped_total`, so memory stays
//!   bounded and the newest (most current) notifications are kept. Each webhook has its own
//!   queue and task: a dead receiver never delays another webhook's.
//! - Notifications still queued when the process dies are lost; the alert rules in `deploy/`
//!   (fed by the journal itself) cover them.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hmac::{Hmac, Mac};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use sha2::Sha256;
use tokio::sync::{Notify, Semaphore};

use super::NeedsPerson;

/// Why a webhook could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WebhookError {
    /// The URL is not an `http://` or `https://` URL.
    #[error("webhook URL `{url}` is not valid: {why} (write it as https://host/path)")]
    Url {
        /// The URL given.
        url: String,
        /// What is wrong with it.
        why: String,
    },
    /// The platform's trusted roots could not be loaded (for `https://`).
    #[error("cannot load the platform's TLS roots for the webhook: {0}")]
    Tls(String),
}

/// How far a signed timestamp may be from the receiver's clock for [`verify`]: 5 minutes.
pub const DEFAULT_TOLERANCE: Duration = Duration::from_secs(300);

/// A webhook receiver, not yet started (see the module docs).
///
/// Its `Debug` shows the URL's scheme and host only, and whether there is a secret: a URL
/// such as Slack's is itself the credential.
#[derive(Clone)]
pub struct Webhook {
    url: hyper::Uri,
    secret: Option<Vec<u8>>,
    attempts: u32,
    base_delay: Duration,
    max_delay: Duration,
    timeout: Duration,
    queue_limit: usize,
    concurrency: usize,
}

impl std::fmt::Debug for Webhook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Webhook")
            .field("url", &redacted(&self.url))
            .field("secret", &self.secret.as_ref().map(|_| ".."))
            .field("attempts", &self.attempts)
            .field("base_delay", &self.base_delay)
            .field("max_delay", &self.max_delay)
            .field("timeout", &self.timeout)
            .field("queue_limit", &self.queue_limit)
            .field("concurrency", &self.concurrency)
            .finish()
    }
}

/// `url` as it may be logged: scheme, host and port, the path and query (where a Slack or
/// Discord webhook keeps its token) replaced by `/…`.
fn redacted(url: &hyper::Uri) -> String {
    let scheme = url.scheme_str().unwrap_or("http");
    let host = url.host().unwrap_or("");
    match url.port_u16() {
        Some(port) => format!("{scheme}://{host}:{port}/…"),
        None => format!("{scheme}://{host}/…"),
    }
}

impl Webhook {
    /// Deliver to `url` (`http://` or `https://`).
    pub fn new(url: &str) -> Result<Webhook, WebhookError> {
        let bad = |why: &str| WebhookError::Url {
            url: url.to_owned(),
            why: why.to_owned(),
        };
        let uri: hyper::Uri = url
            .parse()
            .map_err(|e: hyper::http::uri::InvalidUri| bad(&e.to_string()))?;
        match uri.scheme_str() {
            Some("http" | "https") if uri.host().is_some() => {}
            Some("http" | "https") => return Err(bad("it has no host")),
            _ => return Err(bad("the scheme must be http or https")),
        }
        Ok(Webhook {
            url: uri,
            secret: None,
            attempts: 12,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(300),
            timeout: Duration::from_secs(10),
            queue_limit: 1_000,
            concurrency: 4,
        })
    }

    /// Keep at most `limit` notifications waiting (at least 1; default 1,000): past it, the
    /// oldest waiting one is dropped (see the module docs).
    pub fn with_queue_limit(mut self, limit: usize) -> Self {
        self.queue_limit = limit.max(1);
        self
    }

    /// Deliver up to `n` notifications at once (at least 1; default 4), each retried on its
    /// own. With 1, notifications arrive in the order queued, and one being retried holds
    /// back the rest.
    pub fn with_concurrency(mut self, n: usize) -> Self {
        self.concurrency = n.max(1);
        self
    }

    /// Sign every delivery with `secret` (HMAC-SHA256, see the module docs).
    pub fn with_secret(mut self, secret: impl AsRef<[u8]>) -> Self {
        self.secret = Some(secret.as_ref().to_vec());
        self
    }

    /// Give up on a notification after `attempts` deliveries (at least 1).
    pub fn with_attempts(mut self, attempts: u32) -> Self {
        self.attempts = attempts.max(1);
        self
    }

    /// The first retry's delay and the longest (default 500 ms and 5 minutes).
    pub fn with_backoff(mut self, base: Duration, max: Duration) -> Self {
        self.base_delay = base;
        self.max_delay = max.max(base);
        self
    }

    /// How long one delivery may take (default 10 s); a slower one is retried.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Start delivering, in a task of the current tokio runtime.
    pub fn start(self) -> WebhookSender {
        let (done_tx, done_rx) = tokio::sync::watch::channel(0u64);
        let queue = Queue {
            state: Arc::new(QueueState {
                waiting: Mutex::new(VecDeque::new()),
                ready: Notify::new(),
                limit: self.queue_limit,
                done: done_tx,
            }),
            queued: Arc::new(std::sync::atomic::AtomicU64::new(0)),
        };
        let task = tokio::spawn(deliver_all(self, queue.state.clone()));
        WebhookSender {
            queue,
            done: done_rx,
            task: Some(task),
        }
    }
}

/// A started webhook: queue notifications with [`WebhookSender::send`] or give
/// [`WebhookSender::sink`] to [`Engine::on_needs_person`](crate::Engine::on_needs_person).
/// Dropping it stops the deliveries (call [`WebhookSender::flush`] first to wait for them).
#[derive(Debug)]
pub struct WebhookSender {
    queue: Queue,
    done: tokio::sync::watch::Receiver<u64>,
    task: Option<tokio::task::JoinHandle<()>>,
}

/// The delivery task's queue, and how many notifications were ever put in it.
#[derive(Debug, Clone)]
struct Queue {
    state: Arc<QueueState>,
    queued: Arc<std::sync::atomic::AtomicU64>,
}

/// The queue's state, which the senders and the delivery task share.
#[derive(Debug)]
struct QueueState {
    /// The notifications waiting for a delivery slot, oldest first (at most `limit`).
    waiting: Mutex<VecDeque<NeedsPerson>>,
    /// Signalled when a notification is queued.
    ready: Notify,
    limit: usize,
    /// How many notifications are done with: delivered, given up on, or dropped.
    done: tokio::sync::watch::Sender<u64>,
}

impl Queue {
    fn push(&self, n: NeedsPerson) {
        self.queued.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let dropped = {
            let mut waiting = self.state.waiting.lock().unwrap_or_else(|e| e.into_inner());
            let dropped = if waiting.len() >= self.state.limit {
                waiting.pop_front()
            } else {
                None
            };
            waiting.push_back(n);
            dropped
        };
        if let Some(old) = dropped {
            metrics::counter!("effect_tool_webhook_dropped_total").increment(1);
            tracing::warn!(
                id = %old.id,
                key = %old.key,
                limit = self.state.limit,
                "the webhook's queue is full: dropped its oldest notification (the receiver is down or too slow; the record still waits in the journal)"
            );
            self.state.done.send_modify(|count| *count += 1);
        }
        self.state.ready.notify_one();
    }
}

impl WebhookSender {
    /// Queue `n` for delivery.
    pub fn send(&self, n: NeedsPerson) {
        self.queue.push(n);
    }

    /// A function that queues each notification it is given.
    pub fn sink(&self) -> impl Fn(NeedsPerson) + Send + Sync + 'static {
        let queue = self.queue.clone();
        move |n| queue.push(n)
    }

    /// Wait until every notification queued so far was delivered or given up on, or `timeout`
    /// passes; whether they all were.
    pub async fn flush(&mut self, timeout: Duration) -> bool {
        let target = self.queue.queued.load(std::sync::atomic::Ordering::SeqCst);
        tokio::time::timeout(timeout, self.done.wait_for(|n| *n >= target))
            .await
            .is_ok_and(|r| r.is_ok())
    }
}

impl Drop for WebhookSender {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// The signature header's value for `body` sent at `timestamp` (Unix seconds).
pub fn signature(secret: &[u8], timestamp: u64, body: &[u8]) -> String {
    let bytes = mac(secret, timestamp, body).finalize().into_bytes();
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256={hex}")
}

/// Whether `header` (an `X-Effect-Tool-Signature` value) signs `body` sent at `timestamp` under
/// `secret`, compared in constant time, and `timestamp` (the `X-Effect-Tool-Timestamp` value)
/// is within [`DEFAULT_TOLERANCE`] (5 minutes) of this machine's clock, so that an old
/// delivery replayed is refused. Within the window, drop repeats by `X-Effect-Tool-Id`.
pub fn verify(secret: &[u8], timestamp: u64, body: &[u8], header: &str) -> bool {
    verify_with_tolerance(secret, timestamp, body, header, DEFAULT_TOLERANCE)
}

/// [`verify`] with another window: `timestamp` may be at most `tolerance` before or after this
/// machine's clock.
pub fn verify_with_tolerance(secret: &[u8], timestamp: u64, body: &[u8], header: &str, tolerance: Duration) -> bool {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default();
    now.abs_diff(timestamp) <= tolerance.as_secs() && verify_signature(secret, timestamp, body, header)
}

/// Whether the signature is right, whatever the timestamp.
fn verify_signature(secret: &[u8], timestamp: u64, body: &[u8], header: &str) -> bool {
    let Some(hex) = header.strip_prefix("sha256=") else {
        return false;
    };
    let Some(given) = (0..hex.len())
        .step_by(2)
        .map(|i| hex.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok()))
        .collect::<Option<Vec<u8>>>()
    else {
        return false;
    };
    mac(secret, timestamp, body).verify_slice(&given).is_ok()
}

/// HMAC-SHA256 under `secret` of `<timestamp>.<body>`, what a signature signs.
fn mac(secret: &[u8], timestamp: u64, body: &[u8]) -> Hmac<Sha256> {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(secret).expect("HMAC takes a key of any length");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac
}

type HttpsClient = Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>;

fn client() -> Result<HttpsClient, WebhookError> {
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_provider_and_native_roots(std::sync::Arc::new(rustls::crypto::ring::default_provider()))
        .map_err(|e| WebhookError::Tls(e.to_string()))?
        .https_or_http()
        .enable_http1()
        .build();
    Ok(Client::builder(TokioExecutor::new()).build(connector))
}

/// The delivery task: the oldest waiting notification whenever a delivery slot is free, each
/// retried in its own task until delivered or out of attempts. Its tasks end with it.
async fn deliver_all(hook: Webhook, state: Arc<QueueState>) {
    let client = match client() {
        Ok(c) => Some(c),
        Err(e) => {
            tracing::error!(error = %e, "the webhook cannot deliver");
            None
        }
    };
    let hook = Arc::new(hook);
    let slots = Arc::new(Semaphore::new(hook.concurrency));
    let mut running = tokio::task::JoinSet::new();
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let n = loop {
            let next = state.waiting.lock().unwrap_or_else(|e| e.into_inner()).pop_front();
            match next {
                Some(n) => break n,
                None => state.ready.notified().await,
            }
        };
        // Reap the finished deliveries (their results were counted by themselves).
        while running.try_join_next().is_some() {}
        let (hook, client, state) = (hook.clone(), client.clone(), state.clone());
        running.spawn(async move {
            let delivered = match &client {
                Some(client) => deliver(&hook, client, &n).await,
                None => false,
            };
            if !delivered {
                metrics::counter!("effect_tool_webhook_failures_total").increment(1);
                tracing::error!(id = %n.id, key = %n.key, url = %redacted(&hook.url), "gave up delivering a needs-person notification");
            }
            state.done.send_modify(|count| *count += 1);
            drop(slot);
        });
    }
}

/// One notification: attempts with backoff until a 2xx. Whether it was delivered.
async fn deliver(hook: &Webhook, client: &HttpsClient, n: &NeedsPerson) -> bool {
    let body = match serde_json::to_vec(n) {
        Ok(body) => Bytes::from(body),
        Err(e) => {
            tracing::error!(error = %e, "a needs-person notification did not serialize");
            return false;
        }
    };
    let mut delay = hook.base_delay;
    for attempt in 1..=hook.attempts {
        match tokio::time::timeout(hook.timeout, post(hook, client, n, body.clone())).await {
            Ok(Ok(status)) if status.is_success() => return true,
            Ok(Ok(status)) => tracing::warn!(attempt, %status, id = %n.id, "the webhook refused a notification"),
            Ok(Err(e)) => tracing::warn!(attempt, error = %e, id = %n.id, "a webhook delivery failed"),
            Err(_) => tracing::warn!(attempt, id = %n.id, "a webhook delivery timed out"),
        }
        if attempt < hook.attempts {
            let jitter = delay.mul_f64(fastrand::f64() * 0.2);
            tokio::time::sleep(delay + jitter).await;
            delay = (delay * 2).min(hook.max_delay);
        }
    }
    false
}

async fn post(
    hook: &Webhook,
    client: &HttpsClient,
    n: &NeedsPerson,
    body: Bytes,
) -> Result<hyper::StatusCode, Box<dyn std::error::Error + Send + Sync>> {
    let timestamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default();
    let mut request = hyper::Request::post(hook.url.clone())
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .header(
            hyper::header::USER_AGENT,
            concat!("effect-tool/", env!("CARGO_PKG_VERSION")),
        )
        .header("x-effect-tool-id", n.id.as_str())
        .header("x-effect-tool-timestamp", timestamp);
    if let Some(secret) = &hook.secret {
        request = request.header("x-effect-tool-signature", signature(secret, timestamp, &body));
    }
    let response = client.request(request.body(Full::new(body))?).await?;
    let status = response.status();
    // Read the answer to its end so the connection can be reused.
    let _ = response.into_body().collect().await;
    Ok(status)
}
