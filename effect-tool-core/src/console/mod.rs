//! The operator's console (feature `console`): the records that need a person, one record with
//! its input and audit trail, and a person's actions on them (approve, deny, resolve, amend,
//! compensate a run), as web pages for people and as JSON for scripts.
//!
//! Mount [`Console::router`] in the application (it then knows the tools, checks a resolution's
//! output against the tool's output type, and with [`Console::with_engine`] can compensate a
//! run), or run `effect-tool serve --tokens FILE` for a journal alone.
//!
//! ```no_run
//! # async fn example(store: std::sync::Arc<dyn effect_tool_core::Store>) -> Result<(), Box<dyn std::error::Error>> {
//! use effect_tool_core::console::{Console, StaticTokens};
//!
//! let console = Console::new(store, StaticTokens::from_file("operators.tokens")?);
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8090").await?;
//! // Connect info gives the console the peer's address (for `TrustedHeader`).
//! let app = console.router().into_make_service_with_connect_info::<std::net::SocketAddr>();
//! axum::serve(listener, app).await?;
//! # Ok(()) }
//! ```
//!
//! | route | what |
//! |---|---|
//! | `GET /` | the list page: the records that need a person, with filters and paging |
//! | `GET /record?key=KEY` | the record page: input, attempts, audit trail, and the actions its state allows |
//! | `GET /api/me` | who the request is from: `{"name", "roles", "resolver_role", "can_compensate"}` |
//! | `GET /api/records?state=&tool=&run=&limit=&offset=` | records, newest first; by default those that need a person (`in-doubt,awaiting-approval,stale`) |
//! | `GET /api/record?key=KEY` | one record (its input without sensitive values) and its audit trail |
//! | `POST /api/approve` `{"key", "fingerprint"}` | approve a parked call: the input shown, by its fingerprint (409 with `input_changed: {"fingerprint", "input"}` when another input is parked now); needs the role the tool asks for |
//! | `POST /api/deny` `{"key", "reason"}` | deny it: the same role |
//! | `POST /api/resolve` `{"key", "verdict": "applied", "output"}` or `{"key", "verdict": "not-applied"}` | settle a record in doubt: needs the resolver role (`operator` by default) |
//! | `POST /api/amend` (the same body) | correct a resolution |
//! | `POST /api/compensate` `{"run"}` | abandon a run: compensate each of its completed compensable effects once, newest first ([`Engine::abandon_run_by`](crate::Engine::abandon_run_by)); needs the resolver role and [`Console::with_engine`] |
//!
//! **Who may act.** No request is served without an identity from the [`OperatorAuth`]
//! (401). An approval or denial needs the role the tool names (`approval = "manager"`); a
//! resolution the resolver role. Four eyes: nobody approves a call of their own run (a run id
//! scoped to their name, `<name>/...`, as the MCP server scopes its principals' runs). Every
//! action goes to the audit trail under the identity's name.
//!
//! **The pages** hold no data: they are the same for everyone and served without an identity.
//! Their script asks the API for everything, and a person without the authenticating proxy
//! signs in with their token, which the page keeps in the tab's `sessionStorage` and sends as
//! `Authorization: Bearer`. What the journal holds (inputs come from a model) is only ever put
//! on the page as text, and the pages' `Content-Security-Policy` allows no script but the
//! console's own, no inline script, and no framing.
//!
//! **Cross-site requests.** Every action is a `POST` with a JSON body (`Content-Type:
//! application/json`, which a page of another site cannot send without the browser asking this
//! server first); a request whose `Origin` is not this server's own, or whose `Sec-Fetch-Site`
//! is `cross-site` or `same-site`, is refused (403).

mod auth;
mod page;

pub use auth::{Identity, OperatorAuth, StaticTokens, TokensError, TrustedHeader};

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Json;
use axum::extract::{ConnectInfo, Query, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::context::RunContext;
use crate::dyn_tool::DynTool;
use crate::engine::Engine;
use crate::error::StoreError;
use crate::record::{EffectRecord, RecordState, Verdict};
use crate::store::{Filter, Store, StoreExt};
use crate::toolkit::Toolkit;

/// Makes the run context a compensation runs in, from the run's id
/// ([`Console::with_run_context`]).
type RunContextFn = dyn Fn(&str) -> RunContext + Send + Sync;

/// The operator console: its pages and JSON API (see the module docs).
pub struct Console {
    store: Arc<dyn Store>,
    auth: Box<dyn OperatorAuth>,
    tools: HashMap<String, Arc<dyn DynTool>>,
    resolver_role: String,
    engine: Option<Engine>,
    run_context: Arc<RunContextFn>,
}

impl std::fmt::Debug for Console {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Console")
            .field("store", &self.store.backend_name())
            .field("tools", &self.tools.keys().collect::<Vec<_>>())
            .field("resolver_role", &self.resolver_role)
            .field("can_compensate", &self.engine.is_some())
            .finish_non_exhaustive()
    }
}

impl Console {
    /// The API over `store`, for the operators `auth` identifies.
    pub fn new(store: Arc<dyn Store>, auth: impl OperatorAuth) -> Self {
        Console {
            store,
            auth: Box::new(auth),
            tools: HashMap::new(),
            resolver_role: "operator".into(),
            engine: None,
            run_context: Arc::new(|run: &str| RunContext::new(run)),
        }
    }

    /// Know the tools of `toolkit`: a resolution's output must then decode as the tool's
    /// output (422 otherwise).
    pub fn with_toolkit(mut self, toolkit: &Toolkit) -> Self {
        self.tools = toolkit.tools().map(|t| (t.meta().name.to_owned(), t.clone())).collect();
        self
    }

    /// Let operators compensate a run (`POST /api/compensate`, the record page's button) through
    /// `engine`, with the tools given to [`Console::with_toolkit`]: each completed compensable
    /// effect of the run is undone once, newest first, under the operator's name in the audit
    /// trail. `engine` must journal into the console's store.
    pub fn with_engine(mut self, engine: Engine) -> Self {
        self.engine = Some(engine);
        self
    }

    /// The run context a compensation runs in, made from the run's id: for compensation hooks
    /// that need values of the application's (`RunContext::with_value`). By default
    /// `RunContext::new(run_id)`.
    pub fn with_run_context(mut self, make: impl Fn(&str) -> RunContext + Send + Sync + 'static) -> Self {
        self.run_context = Arc::new(make);
        self
    }

    /// The role a resolution or an amendment needs (default `operator`).
    pub fn with_resolver_role(mut self, role: impl Into<String>) -> Self {
        self.resolver_role = role.into();
        self
    }

    /// The routes (see the module docs): the pages, and the API behind the identity and
    /// cross-site checks.
    pub fn router(self) -> axum::Router {
        use axum::routing::{get, post};
        let state = Arc::new(self);
        let api = axum::Router::new()
            .route("/api/me", get(me))
            .route("/api/records", get(list))
            .route("/api/record", get(show))
            .route("/api/approve", post(approve))
            .route("/api/deny", post(deny))
            .route("/api/resolve", post(resolve))
            .route("/api/amend", post(amend))
            .route("/api/compensate", post(compensate))
            .layer(axum::middleware::from_fn_with_state(state.clone(), gate))
            .with_state(state);
        page::routes().merge(api)
    }
}

/// An error answer: a status and `{"error", "hint"}`.
struct Refusal(StatusCode, String, &'static str);

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let Refusal(status, error, hint) = self;
        let mut response = (status, Json(json!({ "error": error, "hint": hint }))).into_response();
        if status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, header::HeaderValue::from_static("Bearer"));
        }
        response
    }
}

fn store_refusal(e: StoreError) -> Refusal {
    match e {
        StoreError::Rejected(r) => Refusal(
            StatusCode::CONFLICT,
            r.to_string(),
            "reload the record: it may have changed",
        ),
        StoreError::Backend(_) => Refusal(
            StatusCode::SERVICE_UNAVAILABLE,
            e.to_string(),
            "the journal did not answer; try again",
        ),
        // A record this version cannot read (newer, or corrupt): retrying will not help.
        other => Refusal(
            StatusCode::INTERNAL_SERVER_ERROR,
            other.to_string(),
            "the record cannot be read here: look at it with `effect-tool show KEY` from an effect-tool as new as the journal",
        ),
    }
}

/// Identify the operator (401 without one) and refuse cross-site actions (403), before any
/// handler runs.
async fn gate(State(console): State<Arc<Console>>, mut request: Request, next: Next) -> Response {
    let peer = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(addr)| addr.ip());
    let Some(identity) = console.auth.identify(request.headers(), peer) else {
        return Refusal(
            StatusCode::UNAUTHORIZED,
            "no operator identity".into(),
            "send `Authorization: Bearer TOKEN` (or come through the authenticating proxy)",
        )
        .into_response();
    };
    if request.method() != axum::http::Method::GET && cross_site(request.headers()) {
        return Refusal(
            StatusCode::FORBIDDEN,
            "a cross-site request cannot act on the journal".into(),
            "act from the console's own page, or from a script without an Origin header",
        )
        .into_response();
    }
    request.extensions_mut().insert(identity);
    next.run(request).await
}

/// Whether the request comes from a page of another origin.
fn cross_site(headers: &HeaderMap) -> bool {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if matches!(text("sec-fetch-site"), Some("cross-site" | "same-site")) {
        return true;
    }
    match (text("origin"), text("host")) {
        (None, _) => false,
        (Some(origin), Some(host)) => {
            origin
                .strip_prefix("http://")
                .or_else(|| origin.strip_prefix("https://"))
                != Some(host)
        }
        (Some(_), None) => true,
    }
}

/// `list` query parameters.
#[derive(Debug, Deserialize)]
struct ListQuery {
    state: Option<String>,
    tool: Option<String>,
    run: Option<String>,
    limit: Option<usize>,
    offset: Option<usize>,
}

/// The state as a person reads it: a claim whose lease has ended is `stale`.
fn shown_state(rec: &EffectRecord, now: crate::record::Millis) -> &'static str {
    if rec.is_stale(now) { "stale" } else { rec.state.as_str() }
}

async fn list(State(console): State<Arc<Console>>, Query(q): Query<ListQuery>) -> Result<Json<Value>, Refusal> {
    let wanted: Vec<String> = q
        .state
        .as_deref()
        .unwrap_or("in-doubt,awaiting-approval,stale")
        .split(',')
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .collect();
    let mut states = Vec::new();
    for s in &wanted {
        match s.as_str() {
            "stale" => states.push(RecordState::Claimed),
            other => states.push(other.parse::<RecordState>().map_err(|e| {
                Refusal(
                    StatusCode::BAD_REQUEST,
                    format!("{e}, stale"),
                    "e.g. ?state=in-doubt,stale",
                )
            })?),
        }
    }
    let filter = Filter {
        run_id: q.run,
        tool: q.tool,
        states,
        limit: None,
        ..Filter::default()
    };
    let store = &console.store;
    let now = store.now();
    let records: Vec<EffectRecord> = store
        .list(&filter)
        .await
        .map_err(store_refusal)?
        .into_iter()
        .filter(|r| wanted.iter().any(|w| w == shown_state(r, now)))
        .collect();
    let (offset, limit) = (q.offset.unwrap_or(0), q.limit.unwrap_or(50).clamp(1, 500));
    let page: Vec<Value> = records
        .iter()
        .skip(offset)
        .take(limit)
        .map(|r| {
            json!({
                "key": r.key, "tool": r.tool, "class": r.class.as_str(), "state": shown_state(r, now),
                "run_id": r.run_id, "approval_role": r.approval_role, "reason": r.reason,
                "updated_at": r.updated_at,
            })
        })
        .collect();
    let next = (offset + page.len() < records.len()).then_some(offset + page.len());
    Ok(Json(
        json!({ "records": page, "total": records.len(), "offset": offset, "next_offset": next }),
    ))
}

#[derive(Debug, Deserialize)]
struct KeyQuery {
    key: String,
}

async fn record_or_404(console: &Arc<Console>, key: &str) -> Result<EffectRecord, Refusal> {
    console.store.get(key).await.map_err(store_refusal)?.ok_or_else(|| {
        Refusal(
            StatusCode::NOT_FOUND,
            format!("no record under `{key}`"),
            "list the records: GET /api/records",
        )
    })
}

async fn show(State(console): State<Arc<Console>>, Query(q): Query<KeyQuery>) -> Result<Json<Value>, Refusal> {
    let rec = record_or_404(&console, &q.key).await?;
    let audit = console.store.audit(Some(&q.key)).await.map_err(store_refusal)?;
    let now = console.store.now();
    Ok(Json(
        json!({ "state": shown_state(&rec, now), "record": rec, "audit": audit }),
    ))
}

/// The role an approval or denial of `rec` needs, checked against `who`; four eyes included.
fn may_decide(rec: &EffectRecord, who: &Identity, action: &str) -> Result<String, Refusal> {
    let Some(role) = rec.approval_role.clone() else {
        return Err(Refusal(
            StatusCode::CONFLICT,
            format!("`{}` does not wait for approval", rec.key),
            "only calls parked for approval are approved or denied",
        ));
    };
    if !who.has_role(&role) {
        return Err(Refusal(
            StatusCode::FORBIDDEN,
            format!("{} needs role `{role}` to {action} `{}`", who.name, rec.key),
            "ask someone who holds the role",
        ));
    }
    if rec.requested_by(&who.name) {
        return Err(Refusal(
            StatusCode::FORBIDDEN,
            format!(
                "{} requested this call (run `{}`) and cannot {action} it",
                who.name, rec.run_id
            ),
            "four eyes: another person holding the role must decide",
        ));
    }
    Ok(role)
}

#[derive(Debug, Deserialize)]
struct Decision {
    key: String,
    reason: Option<String>,
    /// The fingerprint of the input the person was shown (an approval needs it).
    fingerprint: Option<String>,
}

/// Approve the input the person was shown (`fingerprint`). When another input is parked
/// under the key now, nothing is approved: 409 with the new input and its fingerprint
/// (`input_changed`), so that the page shows what changed and the person decides again.
async fn approve(
    State(console): State<Arc<Console>>,
    axum::Extension(who): axum::Extension<Identity>,
    Json(body): Json<Decision>,
) -> Result<Response, Refusal> {
    let Some(fingerprint) = body.fingerprint.as_deref().filter(|f| !f.is_empty()) else {
        return Err(Refusal(
            StatusCode::BAD_REQUEST,
            format!(
                "the approval of `{}` names no input: send the `fingerprint` of the input you were shown",
                body.key
            ),
            "read the record (GET /api/record?key=KEY), check its input, and approve with its `fingerprint`",
        ));
    };
    let rec = record_or_404(&console, &body.key).await?;
    let role = may_decide(&rec, &who, "approve")?;
    match console.store.approve(&body.key, &who.name, &role, fingerprint).await {
        Ok(rec) => Ok(Json(json!({ "record": rec })).into_response()),
        Err(StoreError::Rejected(e @ crate::record::Rejected::InputChanged { .. })) => {
            let crate::record::Rejected::InputChanged { fingerprint, input, .. } = &e else {
                unreachable!("matched as a changed input")
            };
            let changed = json!({ "fingerprint": fingerprint, "input": input });
            let body = json!({
                "error": e.to_string(),
                "hint": "nothing was approved: compare the new input with the one you saw, then approve or deny it",
                "input_changed": changed,
            });
            Ok((StatusCode::CONFLICT, Json(body)).into_response())
        }
        Err(e) => Err(store_refusal(e)),
    }
}

async fn deny(
    State(console): State<Arc<Console>>,
    axum::Extension(who): axum::Extension<Identity>,
    Json(body): Json<Decision>,
) -> Result<Json<Value>, Refusal> {
    let rec = record_or_404(&console, &body.key).await?;
    may_decide(&rec, &who, "deny")?;
    let rec = console
        .store
        .deny(&body.key, &who.name, body.reason)
        .await
        .map_err(store_refusal)?;
    Ok(Json(json!({ "record": rec })))
}

async fn me(State(console): State<Arc<Console>>, axum::Extension(who): axum::Extension<Identity>) -> Json<Value> {
    Json(json!({
        "name": who.name, "roles": who.roles, "resolver_role": console.resolver_role,
        "can_compensate": console.engine.is_some(),
    }))
}

/// Whether `who` holds the resolver role, which resolving, amending and compensating need.
fn may_resolve(console: &Console, who: &Identity, action: &str) -> Result<(), Refusal> {
    let role = &console.resolver_role;
    if who.has_role(role) {
        return Ok(());
    }
    Err(Refusal(
        StatusCode::FORBIDDEN,
        format!("{} needs role `{role}` to {action}", who.name),
        "ask an operator",
    ))
}

#[derive(Debug, Deserialize)]
struct RunQuery {
    run: String,
}

/// Abandon a run: its compensable effects undone, once each.
async fn compensate(
    State(console): State<Arc<Console>>,
    axum::Extension(who): axum::Extension<Identity>,
    Json(body): Json<RunQuery>,
) -> Result<Json<Value>, Refusal> {
    let Some(engine) = &console.engine else {
        return Err(Refusal(
            StatusCode::NOT_IMPLEMENTED,
            "this console cannot run compensations".into(),
            "mount the console in the application, with `Console::with_engine` and its toolkit",
        ));
    };
    may_resolve(&console, &who, "compensate a run")?;
    let tools: Vec<Arc<dyn DynTool>> = console.tools.values().cloned().collect();
    let run = (console.run_context)(&body.run);
    let report = engine
        .abandon_run_by(&run, &tools, &who.name)
        .await
        .map_err(store_refusal)?;
    let failed: Vec<Value> = report
        .failed
        .iter()
        .map(|(key, error)| json!({ "key": key, "error": error }))
        .collect();
    Ok(Json(json!({
        "run": body.run, "complete": report.is_complete(), "compensated": report.compensated,
        "already_compensated": report.already_compensated, "failed": failed,
        "unknown_tool": report.unknown_tool, "pending": report.pending,
    })))
}

#[derive(Debug, Deserialize)]
struct Resolution {
    key: String,
    #[serde(flatten)]
    verdict: Verdict,
}

async fn settle(console: &Arc<Console>, who: &Identity, body: Resolution, amend: bool) -> Result<Json<Value>, Refusal> {
    may_resolve(console, who, "resolve records")?;
    let rec = record_or_404(console, &body.key).await?;
    if let (Verdict::Applied { output }, Some(tool)) = (&body.verdict, console.tools.get(&rec.tool))
        && let Err(why) = tool.check_output(output)
    {
        return Err(Refusal(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!("this is not an output of `{}`: {why}", rec.tool),
            "give the output the tool would have returned",
        ));
    }
    let store = &console.store;
    let rec = if amend {
        store.amend(&body.key, &who.name, body.verdict).await
    } else {
        store.resolve(&body.key, &who.name, body.verdict).await
    }
    .map_err(store_refusal)?;
    Ok(Json(json!({ "record": rec })))
}

async fn resolve(
    State(console): State<Arc<Console>>,
    axum::Extension(who): axum::Extension<Identity>,
    Json(body): Json<Resolution>,
) -> Result<Json<Value>, Refusal> {
    settle(&console, &who, body, false).await
}

async fn amend(
    State(console): State<Arc<Console>>,
    axum::Extension(who): axum::Extension<Identity>,
    Json(body): Json<Resolution>,
) -> Result<Json<Value>, Refusal> {
    settle(&console, &who, body, true).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_other_than_this_server_are_cross_site() {
        let h = |pairs: &[(&'static str, &'static str)]| {
            let mut m = HeaderMap::new();
            for (k, v) in pairs {
                m.insert(*k, v.parse().unwrap());
            }
            m
        };
        assert!(
            !cross_site(&h(&[("host", "127.0.0.1:8090")])),
            "a script sends no Origin"
        );
        assert!(!cross_site(&h(&[
            ("host", "127.0.0.1:8090"),
            ("origin", "http://127.0.0.1:8090")
        ])));
        assert!(cross_site(&h(&[
            ("host", "127.0.0.1:8090"),
            ("origin", "http://evil.example")
        ])));
        assert!(cross_site(&h(&[("host", "127.0.0.1:8090"), ("origin", "null")])));
        assert!(cross_site(&h(&[("host", "a"), ("sec-fetch-site", "cross-site")])));
        assert!(!cross_site(&h(&[("host", "a"), ("sec-fetch-site", "same-origin")])));
    }
}
