//! An HTTP client for effects (feature `http`): a [`reqwest-middleware`](reqwest_middleware)
//! middleware that sends a call's effect key as `Idempotency-Key` and classifies the answer into
//! the project's outcomes ([`Failure`]), so that a tool calling an API that honours idempotency
//! keys (Stripe, Adyen, PayPal, most payment and messaging APIs) applies its effect once however
//! often the engine runs it.
//!
//! ```no_run
//! use effect_tool_core::adapters::http::{EffectRequestExt, HttpError, IdempotencyMiddleware};
//! use effect_tool_core::EffectCtx;
//!
//! # async fn refund(ctx: &EffectCtx, order_id: &str) -> Result<String, HttpError> {
//! // Once, where the application builds its clients:
//! let client = IdempotencyMiddleware::new().client(reqwest::Client::new());
//!
//! // In the tool (`#[tool(effect = "idempotent", ...)]`): `.effect(ctx)` on every request.
//! let response = client
//!     .post("https://payments.example.com/v1/refunds")
//!     .effect(ctx)
//!     .body(format!("order={order_id}"))
//!     .send()
//!     .await?; // a failure status or a lost connection: an `HttpError` that says what happened
//! Ok(response.text().await?)
//! # }
//! ```
//!
//! # What it sends
//!
//! On every request that carries a call's context ([`EffectRequestExt::effect`]):
//!
//! - **the effect key** ([`EffectCtx::idempotency_key`]: the same on every attempt of the same
//!   effect, at most 200 visible ASCII characters) in `Idempotency-Key`, or the header named by
//!   [`IdempotencyMiddleware::key_header`];
//! - **the attempt** ([`EffectCtx::attempt`], which is also the fencing token) in
//!   `Effect-Attempt` ([`IdempotencyMiddleware::attempt_header`]), so that a provider can log
//!   it, or refuse an attempt older than one it has seen;
//! - **the marker**, when asked ([`IdempotencyMiddleware::marker_header`]): the call's marker
//!   ([`EffectCtx::marker`], an opaque id under the journal's secret, never the key), for a
//!   provider that stores a header with what it creates (a description, a metadata field), so
//!   that the tool's `recover` hook finds it there with [`EffectCtx::contains_marker`], and an
//!   operator finds the record with `effect-tool show --marker`.
//!
//! A request that changes something (any method but `GET`, `HEAD`, `OPTIONS` and `TRACE`) and
//! carries no context is refused before it is sent: a forgotten `.effect(ctx)` would otherwise
//! send no key, and the provider would apply every retry. Mark one that needs no key with
//! [`EffectRequestExt::no_effect`].
//!
//! # How the answer is classified
//!
//! | The answer | [`Failure`] | Why |
//! |---|---|---|
//! | 2xx | none: the response | the effect was applied (or replayed by the provider) |
//! | 4xx but 408, 409, 425, 429 | [`Failure::Definitive`] | refused: sending it again will not help |
//! | 408, 425, 429, 503 | [`Failure::Transient`], with `Retry-After` | nothing applied: retry later |
//! | 409 | [`Failure::Unknown`] | a request with the same key is still running and may apply it |
//! | other 5xx, 1xx, 3xx | [`Failure::Unknown`] | the server may have applied it before failing |
//! | no connection (refused, DNS, TLS) | [`Failure::Transient`] | nothing was sent |
//! | connection lost, timeout after sending | [`Failure::Unknown`] | never "not applied": it may have been |
//!
//! `Retry-After` is read as seconds or as an HTTP date; the engine waits that long before the
//! next attempt, capped by the tool's `retry(max_delay)` (10 s by default). A 409 is unknown
//! rather than transient on purpose: a transient failure tells the journal that nothing
//! happened, and the request still running with the same key may well apply the effect; as
//! unknown, an idempotent tool retries with the same key and gets that request's answer, and
//! after its last attempt the record is in doubt, never "failed".
//!
//! A failure status becomes an error of the request ([`HttpError`], through
//! `reqwest_middleware::Error`): `?` on `send()` turns it into the tool's error with its
//! classification, and the first kilobyte of the provider's answer (its error message) in the
//! text the model reads. [`classify_status`] and [`retry_after`] are the same rules for a tool
//! that reads statuses itself.
//!
//! # Which effect class
//!
//! A provider that honours the key makes the effect idempotent: declare such a tool
//! `effect = "idempotent"`. The engine then retries an unknown outcome (a lost answer, a 500)
//! with the same key, and the provider answers the retry with the stored result instead of
//! applying it again. The retries are the engine's, not the middleware's: each is a journaled
//! claim with its own attempt number, within the tool's retry policy, and an outcome still
//! unknown after the last one leaves the record in doubt where a person sees it. (That is why
//! `reqwest-retry` is not stacked here: a retry inside the request would send the same attempt
//! twice and hide an unknown outcome from the journal.)
//!
//! The key protects only as long as the provider keeps it (Stripe: 24 hours): keep the tool's
//! `ttl` within the provider's window.

use std::fmt;
use std::time::{Duration, SystemTime};

use http::Extensions;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};
use reqwest::{Method, Request, Response, StatusCode, Url};
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware, Middleware, Next, RequestBuilder};

use crate::call::context::EffectCtx;
use crate::value::outcome::{ClassifyError, Failure, ToolError};

/// The header the effect key goes in by default: `Idempotency-Key` (Stripe's, and the IETF
/// draft's `draft-ietf-httpapi-idempotency-key-header`).
pub const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");

/// The header the attempt goes in by default: `Effect-Attempt`.
pub const EFFECT_ATTEMPT: HeaderName = HeaderName::from_static("effect-attempt");

/// A conventional name for the marker's header, for [`IdempotencyMiddleware::marker_header`]:
/// `Effect-Marker` (none is sent unless asked).
pub const EFFECT_MARKER: HeaderName = HeaderName::from_static("effect-marker");

/// How much of a failure's answer the error keeps (its start: the provider's message).
const BODY_LIMIT: usize = 1024;

/// The middleware: add it to a `reqwest_middleware` client that a tool calls its API with.
///
/// ```
/// use effect_tool_core::adapters::http::{EFFECT_MARKER, IdempotencyMiddleware};
/// use reqwest::header::HeaderName;
///
/// // Stripe: the defaults.
/// let stripe = IdempotencyMiddleware::new().client(reqwest::Client::new());
///
/// // A provider with its own header name that keeps a header with what it creates.
/// let other = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
///     .with(
///         IdempotencyMiddleware::new()
///             .key_header(HeaderName::from_static("x-request-id"))
///             .marker_header(EFFECT_MARKER),
///     )
///     .build();
/// # let _ = (stripe, other);
/// ```
#[derive(Debug, Clone)]
pub struct IdempotencyMiddleware {
    key_header: HeaderName,
    attempt_header: Option<HeaderName>,
    marker_header: Option<HeaderName>,
}

impl Default for IdempotencyMiddleware {
    fn default() -> Self {
        IdempotencyMiddleware::new()
    }
}

impl IdempotencyMiddleware {
    /// The key in `Idempotency-Key`, the attempt in `Effect-Attempt`, no marker.
    pub fn new() -> Self {
        IdempotencyMiddleware {
            key_header: IDEMPOTENCY_KEY,
            attempt_header: Some(EFFECT_ATTEMPT),
            marker_header: None,
        }
    }

    /// Send the effect key in the header `name` instead of `Idempotency-Key` (the provider's
    /// name for it, e.g. PayPal's `PayPal-Request-Id`).
    pub fn key_header(mut self, name: HeaderName) -> Self {
        self.key_header = name;
        self
    }

    /// Send the attempt in the header `name` instead of `Effect-Attempt`, or not at all with
    /// `None` (for a provider that refuses headers it does not know).
    pub fn attempt_header(mut self, name: Option<HeaderName>) -> Self {
        self.attempt_header = name;
        self
    }

    /// Send the call's marker ([`EffectCtx::marker`]) in the header `name` (e.g.
    /// [`EFFECT_MARKER`]), for a provider that stores it with what it creates: the tool's
    /// `recover` hook then finds it there with [`EffectCtx::contains_marker`]. It carries an
    /// opaque id, never the key.
    pub fn marker_header(mut self, name: HeaderName) -> Self {
        self.marker_header = Some(name);
        self
    }

    /// `client` with this middleware alone: what most tools need.
    pub fn client(self, client: reqwest::Client) -> ClientWithMiddleware {
        ClientBuilder::new(client).with(self).build()
    }

    /// The headers this middleware adds to a request of `effect`, refusing a key header the
    /// request already holds with another value.
    fn stamp(&self, request: &mut Request, effect: &EffectRequest) -> Result<(), HttpError> {
        let headers = request.headers_mut();
        let key = header_value(&effect.key, &self.key_header)?;
        if let Some(existing) = headers.get(&self.key_header)
            && existing != key
        {
            return Err(HttpError::not_sent(
                Failure::Definitive,
                format!(
                    "the request already sets `{}` to another value than its effect key: remove that header (the middleware sends the key, the same on every attempt)",
                    self.key_header
                ),
            ));
        }
        headers.insert(self.key_header.clone(), key);
        if let Some(name) = &self.attempt_header {
            headers.insert(name.clone(), HeaderValue::from(effect.attempt));
        }
        if let Some(name) = &self.marker_header {
            headers.insert(name.clone(), header_value(&effect.marker, name)?);
        }
        Ok(())
    }
}

/// `text` as a header value, or an error naming the header (nothing is sent).
fn header_value(text: &str, name: &HeaderName) -> Result<HeaderValue, HttpError> {
    HeaderValue::from_str(text).map_err(|_| {
        HttpError::not_sent(
            Failure::Definitive,
            format!("the value of `{name}` is not a valid header value (nothing was sent)"),
        )
    })
}

#[async_trait::async_trait]
impl Middleware for IdempotencyMiddleware {
    async fn handle(
        &self,
        mut request: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<Response> {
        match extensions.get::<EffectRequest>() {
            Some(effect) => self
                .stamp(&mut request, effect)
                .map_err(reqwest_middleware::Error::middleware)?,
            None if extensions.get::<NoEffect>().is_some() || is_safe(request.method()) => {}
            None => {
                return Err(reqwest_middleware::Error::middleware(HttpError::not_sent(
                    Failure::Definitive,
                    format!(
                        "{} {} carries no effect context: call `.effect(ctx)` on the request (the middleware then sends the effect key), or `.no_effect()` if it changes nothing (nothing was sent)",
                        request.method(),
                        place(request.url())
                    ),
                )));
            }
        }
        let response = next.run(request, extensions).await?;
        if response.status().is_success() {
            return Ok(response);
        }
        Err(reqwest_middleware::Error::middleware(
            HttpError::from_response(response).await,
        ))
    }
}

/// Methods that change nothing (RFC 9110 § 9.2.1), which need no effect context.
fn is_safe(method: &Method) -> bool {
    matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE)
}

/// What the middleware sends for one call: its idempotency key, attempt and marker, taken
/// from the call's context. [`EffectRequestExt::effect`] attaches it to a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EffectRequest {
    key: String,
    attempt: u32,
    marker: String,
}

impl EffectRequest {
    /// What a request of the call `ctx` carries.
    pub fn new(ctx: &EffectCtx) -> Self {
        EffectRequest {
            key: ctx.idempotency_key(),
            attempt: ctx.attempt(),
            marker: ctx.marker(),
        }
    }

    /// The key sent in `Idempotency-Key` ([`EffectCtx::idempotency_key`]).
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The attempt sent in `Effect-Attempt` ([`EffectCtx::attempt`]).
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The marker sent when asked ([`EffectCtx::marker`]).
    pub fn marker(&self) -> &str {
        &self.marker
    }
}

/// Marks a request that changes nothing and needs no effect key: see
/// [`EffectRequestExt::no_effect`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NoEffect;

/// What a tool calls on its requests: [`effect`](EffectRequestExt::effect) on every request of
/// an effect, [`no_effect`](EffectRequestExt::no_effect) on one that changes nothing.
pub trait EffectRequestExt {
    /// Send this request as part of the call `ctx`: with its effect key, attempt and (when
    /// asked) marker.
    fn effect(self, ctx: &EffectCtx) -> Self;
    /// Send this request without a key: it changes nothing (a search through `POST`, a
    /// lookup in a `recover` hook). Requests with `GET`, `HEAD`, `OPTIONS` or `TRACE` need no
    /// mark.
    fn no_effect(self) -> Self;
}

impl EffectRequestExt for RequestBuilder {
    fn effect(self, ctx: &EffectCtx) -> Self {
        self.with_extension(EffectRequest::new(ctx))
    }

    fn no_effect(self) -> Self {
        self.with_extension(NoEffect)
    }
}

/// The classification of an answer's status: `None` for 2xx (success), else the kind of
/// failure (see the table in the [module docs](self)), with the delay of `Retry-After` for a
/// transient one.
///
/// ```
/// use effect_tool_core::adapters::http::classify_status;
/// use effect_tool_core::Failure;
/// use reqwest::StatusCode;
/// use reqwest::header::{HeaderMap, HeaderValue, RETRY_AFTER};
/// use std::time::Duration;
///
/// let mut headers = HeaderMap::new();
/// assert_eq!(classify_status(StatusCode::CREATED, &headers), None);
/// assert_eq!(classify_status(StatusCode::PAYMENT_REQUIRED, &headers), Some(Failure::Definitive));
/// assert_eq!(classify_status(StatusCode::CONFLICT, &headers), Some(Failure::Unknown));
/// assert_eq!(classify_status(StatusCode::BAD_GATEWAY, &headers), Some(Failure::Unknown));
/// headers.insert(RETRY_AFTER, HeaderValue::from_static("3"));
/// assert_eq!(
///     classify_status(StatusCode::TOO_MANY_REQUESTS, &headers),
///     Some(Failure::Transient { retry_after: Some(Duration::from_secs(3)) })
/// );
/// ```
pub fn classify_status(status: StatusCode, headers: &HeaderMap) -> Option<Failure> {
    const TOO_EARLY: u16 = 425;
    if status.is_success() {
        return None;
    }
    Some(match status.as_u16() {
        408 | TOO_EARLY | 429 | 503 => Failure::Transient {
            retry_after: retry_after(headers, SystemTime::now()),
        },
        409 => Failure::Unknown,
        400..=499 => Failure::Definitive,
        _ => Failure::Unknown,
    })
}

/// The delay a `Retry-After` header asks for, as seconds or as an HTTP date (counted from
/// `now`; a date already past asks for none). `None` without the header or for a value that
/// is neither.
///
/// ```
/// use effect_tool_core::adapters::http::retry_after;
/// use reqwest::header::{HeaderMap, HeaderValue, RETRY_AFTER};
/// use std::time::{Duration, SystemTime, UNIX_EPOCH};
///
/// let now = UNIX_EPOCH + Duration::from_secs(1_445_412_480); // Wed, 21 Oct 2015 07:28:00 GMT
/// let mut headers = HeaderMap::new();
/// headers.insert(RETRY_AFTER, HeaderValue::from_static("120"));
/// assert_eq!(retry_after(&headers, now), Some(Duration::from_secs(120)));
/// headers.insert(RETRY_AFTER, HeaderValue::from_static("Wed, 21 Oct 2015 07:28:30 GMT"));
/// assert_eq!(retry_after(&headers, now), Some(Duration::from_secs(30)));
/// ```
pub fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let text = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    if let Ok(seconds) = text.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = httpdate::parse_http_date(text).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// Where a request went, for messages: the host, port and path, never the query (it may hold
/// a token) or credentials.
fn place(url: &Url) -> String {
    let port = url.port().map(|p| format!(":{p}")).unwrap_or_default();
    format!("{}{port}{}", url.host_str().unwrap_or("the server"), url.path())
}

/// A request of an effect that failed, classified: the error a tool returns (its `Error`
/// type, or converted into [`ToolError`]), so that the engine knows whether the effect may
/// have been applied.
///
/// It is what `?` makes of the errors of `send()` (`reqwest_middleware::Error`) and of reading
/// the answer (`reqwest::Error`); its text (what the model reads) says what happened, whether
/// anything was applied, and the start of the provider's answer.
#[derive(Debug)]
pub struct HttpError {
    failure: Failure,
    status: Option<StatusCode>,
    message: String,
    body: Option<String>,
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl HttpError {
    /// A failure before anything was sent.
    fn not_sent(failure: Failure, message: String) -> Self {
        HttpError {
            failure,
            status: None,
            message,
            body: None,
            source: None,
        }
    }

    /// The error of an answer whose status is not 2xx: classified by [`classify_status`], with
    /// the start of its body.
    pub async fn from_response(mut response: Response) -> Self {
        let status = response.status();
        let failure = classify_status(status, response.headers()).unwrap_or(Failure::Unknown);
        let place = place(response.url());
        let mut bytes = Vec::new();
        while bytes.len() < BODY_LIMIT
            && let Ok(Some(chunk)) = response.chunk().await
        {
            bytes.extend_from_slice(&chunk);
        }
        let body = excerpt(&bytes);
        let what = match (failure, status.as_u16()) {
            (Failure::Definitive, _) => "the request was refused, and sending it again will not help".to_owned(),
            (Failure::Transient { retry_after: Some(d) }, _) => {
                format!("nothing was applied; it may be sent again after {} s", d.as_secs_f64())
            }
            (Failure::Transient { retry_after: None }, _) => "nothing was applied; it may be sent again later".to_owned(),
            (Failure::Unknown, 409) => "another request with the same idempotency key is still being processed and may apply the effect; a later attempt with the same key gets its answer".to_owned(),
            (Failure::Unknown, _) => "it may have been applied; only an attempt with the same idempotency key may send it again".to_owned(),
        };
        let mut message = format!("{place} answered HTTP {status}: {what}");
        if let Some(body) = &body {
            message.push_str(&format!(". The answer began: {body}"));
        }
        HttpError {
            failure,
            status: Some(status),
            message,
            body,
            source: None,
        }
    }

    /// The error of reqwest itself (no answer, or an answer that could not be read), classified
    /// by whether the request can have reached the server (see the [module docs](self)).
    pub fn from_reqwest(error: reqwest::Error) -> Self {
        let place = error.url().map_or_else(|| "the server".to_owned(), place);
        let (failure, message) = if error.is_builder() {
            (
                Failure::Definitive,
                format!("the request to {place} could not be built: nothing was sent"),
            )
        } else if error.is_connect() {
            (
                Failure::TRANSIENT,
                format!("could not connect to {place}: nothing was sent; it may be sent again"),
            )
        } else if let Some(status) = error.status().filter(|_| error.is_status()) {
            let failure = classify_status(status, &HeaderMap::new()).unwrap_or(Failure::Unknown);
            (failure, format!("{place} answered HTTP {status}"))
        } else if error.is_decode() {
            (
                Failure::Unknown,
                format!(
                    "the answer of {place} could not be read: the effect was probably applied; only an attempt with the same idempotency key may send it again"
                ),
            )
        } else {
            (
                Failure::Unknown,
                format!(
                    "the connection to {place} was lost after the request was sent: it may have been applied; only an attempt with the same idempotency key may send it again"
                ),
            )
        };
        HttpError {
            failure,
            status: error.status(),
            message: format!("{message} ({})", without_url(&error)),
            body: None,
            source: Some(Box::new(error)),
        }
    }

    /// The kind of failure: whether the effect may have been applied.
    pub fn failure(&self) -> Failure {
        self.failure
    }

    /// The answer's status, when there was an answer.
    pub fn status(&self) -> Option<StatusCode> {
        self.status
    }

    /// The start of the answer's body (its first kilobyte, as text), when it had one.
    pub fn body(&self) -> Option<&str> {
        self.body.as_deref()
    }

    /// The delay the server asked for (`Retry-After`), for a transient failure.
    pub fn retry_after(&self) -> Option<Duration> {
        match self.failure {
            Failure::Transient { retry_after } => retry_after,
            _ => None,
        }
    }
}

/// reqwest's own text of `error`, without the URL (its query may hold a token).
fn without_url(error: &reqwest::Error) -> String {
    let mut text = error.to_string();
    if let Some(url) = error.url() {
        text = text.replace(&format!(" for url ({url})"), "");
    }
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// The first [`BODY_LIMIT`] bytes of a body as one line of text, `None` if empty.
fn excerpt(bytes: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(BODY_LIMIT)]);
    let mut text: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if bytes.len() > BODY_LIMIT {
        text.push('…');
    }
    (!text.is_empty()).then_some(text)
}

impl fmt::Display for HttpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for HttpError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.as_deref().map(|e| e as &(dyn std::error::Error + 'static))
    }
}

impl ClassifyError for HttpError {
    fn failure(&self) -> Option<Failure> {
        Some(self.failure)
    }
}

impl From<reqwest::Error> for HttpError {
    fn from(error: reqwest::Error) -> Self {
        HttpError::from_reqwest(error)
    }
}

impl From<reqwest_middleware::Error> for HttpError {
    /// The middleware's own error as it made it; reqwest's classified
    /// ([`HttpError::from_reqwest`]); another middleware's error as unknown (nothing tells
    /// whether the request was sent).
    fn from(error: reqwest_middleware::Error) -> Self {
        match error {
            reqwest_middleware::Error::Reqwest(error) => HttpError::from_reqwest(error),
            reqwest_middleware::Error::Middleware(error) => match error.downcast::<HttpError>() {
                Ok(error) => error,
                Err(other) => HttpError {
                    failure: Failure::Unknown,
                    status: None,
                    message: format!(
                        "a middleware of the HTTP client failed ({other}): the request may have been sent"
                    ),
                    body: None,
                    source: Some(other.into()),
                },
            },
        }
    }
}

impl From<HttpError> for ToolError {
    /// The same text and classification, for a tool whose error type is [`ToolError`].
    fn from(error: HttpError) -> Self {
        ToolError {
            message: error.message,
            kind: Some(error.failure),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: u16, retry: Option<&'static str>) -> Option<Failure> {
        let mut headers = HeaderMap::new();
        if let Some(value) = retry {
            headers.insert(RETRY_AFTER, HeaderValue::from_static(value));
        }
        classify_status(StatusCode::from_u16(code).unwrap(), &headers)
    }

    /// Every status from 100 to 599 against the table of the module docs, written out.
    #[test]
    fn every_status_is_classified_as_the_table_says() {
        for code in 100u16..600 {
            let expected = match code {
                200..=299 => None,
                408 | 425 | 429 | 503 => Some(Failure::TRANSIENT),
                409 => Some(Failure::Unknown),
                400..=499 => Some(Failure::Definitive),
                _ => Some(Failure::Unknown),
            };
            assert_eq!(status(code, None), expected, "HTTP {code}");
        }
    }

    #[test]
    fn retry_after_is_honoured_for_transient_answers_only() {
        let two = Some(Failure::Transient {
            retry_after: Some(Duration::from_secs(2)),
        });
        for code in [408, 425, 429, 503] {
            assert_eq!(status(code, Some("2")), two, "HTTP {code}");
        }
        assert_eq!(status(500, Some("2")), Some(Failure::Unknown));
        assert_eq!(status(409, Some("2")), Some(Failure::Unknown));
        assert_eq!(status(400, Some("2")), Some(Failure::Definitive));
    }

    #[test]
    fn retry_after_reads_seconds_and_dates_and_ignores_the_rest() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_445_412_480);
        let read = |value: &'static str| {
            let mut headers = HeaderMap::new();
            headers.insert(RETRY_AFTER, HeaderValue::from_static(value));
            retry_after(&headers, now)
        };
        assert_eq!(read("0"), Some(Duration::ZERO));
        assert_eq!(read(" 7 "), Some(Duration::from_secs(7)));
        assert_eq!(read("Wed, 21 Oct 2015 07:29:00 GMT"), Some(Duration::from_secs(60)));
        assert_eq!(
            read("Wed, 21 Oct 2015 07:27:00 GMT"),
            Some(Duration::ZERO),
            "a date past"
        );
        assert_eq!(read("-3"), None);
        assert_eq!(read("1.5"), None);
        assert_eq!(read("soon"), None);
        assert_eq!(retry_after(&HeaderMap::new(), now), None);
    }

    #[test]
    fn a_long_answer_is_cut_to_its_first_kilobyte_on_one_line() {
        assert_eq!(excerpt(b""), None);
        assert_eq!(excerpt(b" \n "), None);
        assert_eq!(
            excerpt(b"{\"error\":\n  {\"message\": \"card declined\"}}").as_deref(),
            Some("{\"error\": {\"message\": \"card declined\"}}")
        );
        let long = excerpt(&[b'a'; 5000]).unwrap();
        assert_eq!(long.chars().count(), BODY_LIMIT + 1);
        assert!(long.ends_with('…'));
    }

    #[test]
    fn the_headers_are_stamped_and_a_different_key_refused() {
        use crate::{EffectClass, RunContext};
        let ctx = EffectCtx::detached(RunContext::new("run-1"), "refund", EffectClass::Idempotent);
        let effect = EffectRequest::new(&ctx);
        let middleware = IdempotencyMiddleware::new().marker_header(EFFECT_MARKER);
        let mut request = Request::new(Method::POST, "http://pay.test/refunds".parse().unwrap());
        middleware.stamp(&mut request, &effect).unwrap();
        let headers = request.headers();
        assert_eq!(headers[&IDEMPOTENCY_KEY], ctx.idempotency_key().as_str());
        assert_eq!(headers[&EFFECT_ATTEMPT], "1");
        assert_eq!(headers[&EFFECT_MARKER], ctx.marker().as_str());
        assert!(ctx.contains_marker(headers[&EFFECT_MARKER].to_str().unwrap()));

        // The same key set by hand is fine; another one is refused before sending.
        middleware.stamp(&mut request, &effect).unwrap();
        request
            .headers_mut()
            .insert(IDEMPOTENCY_KEY, HeaderValue::from_static("something-else"));
        let err = middleware.stamp(&mut request, &effect).unwrap_err();
        assert_eq!(err.failure(), Failure::Definitive);
        assert!(err.to_string().contains("idempotency-key"), "{err}");
    }
}
