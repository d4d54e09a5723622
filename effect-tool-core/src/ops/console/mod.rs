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
//! use effect_tool_core::ops::console::{Console, StaticTokens};
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
//! | `GET /api/me` | who the request is from: `{"name", "roles", "resolver_role", "can_compensate", "person"}` (`person`: their id in the identities map, or `null`) |
//! | `GET /api/records?state=&tool=&run=&limit=&offset=` | records, newest first; by default those that need a person (`in-doubt,awaiting-approval,stale`) |
//! | `GET /api/record?key=KEY` | one record (its input without sensitive values) and its audit trail; a key with an audit trail and no record (a call the policies denied before it was journaled, or a record collected since) answers `{"state": "no-record", "record": null, "audit"}` |
//! | `POST /api/approve` `{"key", "fingerprint"}` | approve a parked call: the input shown, by its fingerprint (409 with `input_changed: {"fingerprint", "input"}` when another input is parked now); needs the role the tool asks for |
//! | `POST /api/deny` `{"key", "reason"}` | deny it: the same role |
//! | `POST /api/resolve` `{"key", "verdict": "applied", "output"}` or `{"key", "verdict": "not-applied"}` | settle a record in doubt: needs the resolver role (`operator` by default) |
//! | `POST /api/amend` (the same body) | correct a resolution |
//! | `GET /grants`, `GET /api/grants`, `POST /api/grants`, `POST /api/grants/revoke` | standing approvals: list, make (as the operator, in a role they hold), revoke (see `grants.rs`) |
//! | `POST /api/compensate` `{"run"}` | abandon a run: compensate each of its completed compensable effects once, newest first ([`Engine::abandon_run_by`](crate::Engine::abandon_run_by)); needs the resolver role and [`Console::with_engine`] |
//!
//! **Who may read and act.** No request is served without an identity from the
//! [`OperatorAuth`] (401). Reading records (the list, a record's input, output and audit trail)
//! needs a role (any, or one of [`Console::with_reader_roles`]): an identity without one gets
//! `/api/me` and nothing else. The console serves one journal: everyone who may read reads
//! every run's records, whichever principal made them; tenants that must not see each other's
//! inputs need journals (and consoles) of their own. An approval or denial needs the role the
//! tool names (`approval = "manager"`); a resolution the resolver role. Every action goes to the
//! audit trail under the identity's name.
//!
//! **Four eyes.** Nobody approves or denies a call of their own run. The journal knows who
//! requested a call only by its run id: the MCP server scopes an authenticated principal's
//! runs as `<principal id>/...` (`/` and `%` escaped), and an application may scope its users'
//! runs the same way. The console refuses an operator who is the same person as that
//! principal ([`same_person`](crate::decide::identity::same_person)): their
//! [`Identity::name`] or one of their [`Identity::principals`] is the principal's id, or the
//! identities map ([`Console::with_identities`], `effect-tool serve --identities FILE`) gives
//! the operator's console name and the principal's id one person. Where one person has two
//! names (console `maria`, MCP `sub` `00u1abc`), four eyes cannot see it unless it is told:
//! map them in the identities file (`console = ["maria"]`, `mcp = ["00u1abc"]` under one
//! `[[person]]`), give the MCP ids in the tokens file (`as=00u1abc`), or in the identities of
//! an [`OperatorAuth`] of the application's ([`Identity::calling_tools_as`]); behind a proxy,
//! have it send as the user the same claim the MCP server takes as `sub`. Names the map does
//! not know are each a person of their own; names equal as strings are always one person
//! (the map only joins names): where two people share a name across the systems, the console
//! refuses the one it should not (it fails closed). The audit trail names an operator the map
//! knows by their person id and the console name they came through (`maria (console
//! m.rossi)`), any other by their name.
//!
//! **The pages** hold no data: they are the same for everyone and served without an identity.
//! Their script asks the API for everything, and a person without the authenticating proxy
//! signs in with their token, which the page keeps in the tab's `sessionStorage` and sends as
//! `Authorization: Bearer`. What the journal holds (inputs come from a model) is only ever put
//! on the page as text, and the pages' `Content-Security-Policy` allows no script but the
//! console's own, no inline script, and no framing.
//!
//! **Names and origins.** The console answers only to the names it is given
//! ([`Console::with_allowed_hosts`]; by default `localhost`, `127.0.0.1` and `[::1]`, on any
//! port): a request whose `Host` is another (a page whose DNS name an attacker pointed at the
//! console's address, to send requests the browser deems same-origin) is refused (421), pages
//! included. A request that carries an identity header more than once is refused (400): a
//! proxy that adds its header beside the client's must not let the client's count.
//!
//! **Cross-site requests.** Every action is a `POST` with a JSON body (`Content-Type:
//! application/json`, which a page of another site cannot send without the browser asking this
//! server first); a request whose `Origin` is not an allowed origin
//! ([`Console::with_allowed_origins`]; by default the allowed hosts over `http` or `https`), or
//! whose `Sec-Fetch-Site` is `cross-site` or `same-site`, is refused (403).
//!
//! **Behind a proxy** ([`TrustedHeader`]), every process that can connect from the proxy's
//! address is the proxy: with `127.0.0.1`, every local process and user may name any operator.
//! Give the proxy an address of its own where the machine is shared.

mod auth;
mod grants;
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

use crate::call::context::RunContext;
use crate::call::error::StoreError;
use crate::decide::identity::{Actor, Identities};
use crate::decide::record::{EffectRecord, RecordState, Verdict};
use crate::engine::Engine;
use crate::engine::dyn_tool::DynTool;
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
    reader_roles: Option<Vec<String>>,
    engine: Option<Engine>,
    run_context: Arc<RunContextFn>,
    hosts: Vec<Authority>,
    origins: Option<Vec<String>>,
    identities: Identities,
}

impl std::fmt::Debug for Console {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Console")
            .field("store", &self.store.backend_name())
            .field("tools", &self.tools.keys().collect::<Vec<_>>())
            .field("resolver_role", &self.resolver_role)
            .field("can_compensate", &self.engine.is_some())
            .field("allowed_hosts", &self.allowed_hosts())
            .field("allowed_origins", &self.origins)
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
            reader_roles: None,
            engine: None,
            run_context: Arc::new(|run: &str| RunContext::new(run)),
            hosts: LOOPBACK
                .iter()
                .map(|h| Authority::parse(h).expect("a loopback name"))
                .collect(),
            origins: None,
            identities: Identities::default(),
        }
    }

    /// Know who is who across the console, MCP and the CLI ([`crate::ops::identity`]): four
    /// eyes then refuses an operator whose person requested the call under any of their names
    /// (an MCP principal's `sub`, say), and the audit trail names an operator the map knows by
    /// their person id and the console name they came through (`maria (console m.rossi)`).
    /// Operators the map does not know are compared and named as before, by their name.
    pub fn with_identities(mut self, identities: Identities) -> Self {
        self.identities = identities;
        self
    }

    /// How the audit trail names `who`.
    fn actor_name(&self, who: &Identity) -> String {
        self.identities.audit_name(&Actor::console(who.name.clone()))
    }

    /// The names (`host` or `host:port`) the console answers to, in place of the default
    /// loopback names (`localhost`, `127.0.0.1`, `[::1]`, on any port). A request whose `Host`
    /// is not one of them is refused (421) before anything else: a web page whose DNS name
    /// an attacker rebinds to this server's address would otherwise be served as if it were
    /// the console's own page. A name without a port allows every port. Give the names the
    /// operators (or the authenticating proxy, as it forwards `Host`) use to reach the console.
    ///
    /// # Panics
    ///
    /// If an entry is not a host name or address, with an optional port (`console.example.com`,
    /// `10.0.0.5:8090`, `[::1]:8090`).
    pub fn with_allowed_hosts(mut self, hosts: impl IntoIterator<Item = impl AsRef<str>>) -> Self {
        self.hosts = hosts
            .into_iter()
            .map(|h| {
                let h = h.as_ref();
                Authority::parse(h).unwrap_or_else(|| panic!("`{h}` is not a host name, or a host name and a port"))
            })
            .collect();
        self
    }

    /// The origins (`scheme://host[:port]`, as browsers send them in `Origin`) of the pages
    /// that may act through the API, in place of the default: the allowed hosts (see
    /// [`Console::with_allowed_hosts`]) over `http` or `https`. A request that carries an
    /// `Origin` that is not one of them is refused (403). Requests without `Origin` (scripts,
    /// the CLI) are not affected.
    ///
    /// # Panics
    ///
    /// If an entry is not `http://` or `https://` followed by a host and an optional port.
    pub fn with_allowed_origins(mut self, origins: impl IntoIterator<Item = impl AsRef<str>>) -> Self {
        self.origins = Some(
            origins
                .into_iter()
                .map(|o| {
                    let o = o.as_ref();
                    normal_origin(o)
                        .unwrap_or_else(|| panic!("`{o}` is not an origin: give `https://host` or `https://host:port`"))
                })
                .collect(),
        );
        self
    }

    /// The allowed hosts, as written in refusals.
    fn allowed_hosts(&self) -> Vec<String> {
        self.hosts.iter().map(Authority::to_string).collect()
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

    /// The roles that may read the journal through the console (the list, a record with its
    /// input, output and audit trail): an identity needs one of them. By default any role
    /// will do, and an identity without a role reads nothing (403) but `/api/me`. Behind a
    /// proxy whose groups every user has some of, name the operators' roles here (the
    /// resolver role and the tools' approval roles).
    pub fn with_reader_roles(mut self, roles: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.reader_roles = Some(roles.into_iter().map(Into::into).collect());
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
            .route("/api/grants", get(grants::list).post(grants::create))
            .route("/api/grants/revoke", post(grants::revoke))
            .layer(axum::middleware::from_fn_with_state(state.clone(), gate))
            .with_state(state.clone());
        page::routes()
            .merge(api)
            .layer(axum::middleware::from_fn_with_state(state, host_gate))
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
        StoreError::Rejected(r @ crate::decide::record::Rejected::OutputMismatch(_)) => Refusal(
            StatusCode::UNPROCESSABLE_ENTITY,
            r.to_string(),
            "give an output of the shape the record page shows",
        ),
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

/// The names the console answers to by default: loopback, on any port.
const LOOPBACK: [&str; 3] = ["localhost", "127.0.0.1", "[::1]"];

/// A host name or address with an optional port, as in `Host` and in origins: the name in
/// lower case (an IPv6 address in its brackets), the port as written.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Authority {
    host: String,
    port: Option<u16>,
}

impl Authority {
    /// `host` or `host:port`; `None` for anything else (a path, user info, an empty name).
    fn parse(text: &str) -> Option<Authority> {
        let parsed: axum::http::uri::Authority = text.parse().ok()?;
        if parsed.as_str().contains('@') || parsed.host().is_empty() || parsed.as_str() != text {
            return None;
        }
        // What follows the host must be a port number, when anything does.
        let after_host = match text.strip_prefix('[') {
            Some(v6) => v6.split_once(']').map_or("", |(_, rest)| rest),
            None => text.find(':').map_or("", |at| &text[at..]),
        };
        if !after_host.is_empty() && parsed.port_u16().is_none_or(|p| after_host != format!(":{p}")) {
            return None;
        }
        Some(Authority {
            host: parsed.host().trim_end_matches('.').to_ascii_lowercase(),
            port: parsed.port_u16(),
        })
    }

    /// Whether `self`, an allowed entry, admits `other` (a request's): the same host, and the
    /// same port unless the entry names none.
    fn admits(&self, other: &Authority) -> bool {
        self.host == other.host && (self.port.is_none() || self.port == other.port)
    }
}

impl std::fmt::Display for Authority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.port {
            Some(port) => write!(f, "{}:{port}", self.host),
            None => f.write_str(&self.host),
        }
    }
}

/// `origin` as compared: `scheme://authority` in lower case, without a trailing `/`; `None`
/// when it is not an `http`/`https` origin.
fn normal_origin(origin: &str) -> Option<String> {
    let (scheme, rest) = origin.split_once("://")?;
    let scheme = scheme.to_ascii_lowercase();
    if scheme != "http" && scheme != "https" {
        return None;
    }
    let authority = Authority::parse(rest.strip_suffix('/').unwrap_or(rest))?;
    Some(format!("{scheme}://{authority}"))
}

/// Answer only requests addressed to an allowed host (421 otherwise), pages included.
async fn host_gate(State(console): State<Arc<Console>>, request: Request, next: Next) -> Response {
    let mut hosts = request.headers().get_all(header::HOST).iter();
    let host = match (hosts.next(), hosts.next()) {
        (Some(host), None) => host.to_str().ok().map(str::to_owned),
        (None, _) => request.uri().authority().map(|a| a.as_str().to_owned()),
        (Some(_), Some(_)) => {
            return Refusal(
                StatusCode::BAD_REQUEST,
                "the request carries `Host` more than once".into(),
                "send one `Host` header",
            )
            .into_response();
        }
    };
    let Some(host) = host else {
        return Refusal(
            StatusCode::BAD_REQUEST,
            "the request names no host (`Host`)".into(),
            "send the `Host` header, as HTTP/1.1 requires",
        )
        .into_response();
    };
    let allowed = Authority::parse(&host).is_some_and(|h| console.hosts.iter().any(|a| a.admits(&h)));
    if !allowed {
        return Refusal(
            StatusCode::MISDIRECTED_REQUEST,
            format!(
                "this console does not answer to the host `{host}`: it answers to {} (a page under another name, such as one whose DNS name was pointed at this server, is refused)",
                console.allowed_hosts().join(", ")
            ),
            "if operators reach the console under this name, allow it: `effect-tool serve --allow-host NAME`, or `Console::with_allowed_hosts` in the application",
        )
        .into_response();
    }
    next.run(request).await
}

/// Refuse a request that carries an identity header twice (400), identify the operator (401
/// without one), and refuse cross-site requests (403), before any handler runs.
async fn gate(State(console): State<Arc<Console>>, mut request: Request, next: Next) -> Response {
    for name in console.auth.identity_headers() {
        if request.headers().get_all(name.as_str()).iter().nth(1).is_some() {
            return Refusal(
                StatusCode::BAD_REQUEST,
                format!("the request carries `{name}` more than once, and the console believes none of them"),
                "send the header once; behind a proxy, make the proxy replace the client's header rather than add its own (nginx: `proxy_set_header`)",
            )
            .into_response();
        }
    }
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
    if let Some(why) = cross_site(&console, request.headers()) {
        return Refusal(
            StatusCode::FORBIDDEN,
            why,
            "act from the console's own page, or from a script without an Origin header; if operators open the console under another name, allow it: `effect-tool serve --allow-origin ORIGIN` (or `--allow-host NAME`), or `Console::with_allowed_origins` in the application",
        )
        .into_response();
    }
    request.extensions_mut().insert(identity);
    next.run(request).await
}

/// Why the request comes from a page the console does not serve, if it does: its `Origin` is
/// not an allowed origin, or `Sec-Fetch-Site` says another site.
fn cross_site(console: &Console, headers: &HeaderMap) -> Option<String> {
    let site = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok());
    if let Some(site @ ("cross-site" | "same-site")) = site {
        return Some(format!(
            "a request from a page of another site (`Sec-Fetch-Site: {site}`) cannot use the console's API"
        ));
    }
    let mut origins = headers.get_all(header::ORIGIN).iter();
    let origin = match (origins.next(), origins.next()) {
        (None, _) => return None,
        (Some(origin), None) => origin.to_str().unwrap_or("(not text)"),
        (Some(_), Some(_)) => return Some("the request carries `Origin` more than once".into()),
    };
    let allowed = match (normal_origin(origin), &console.origins) {
        (None, _) => false,
        (Some(o), Some(origins)) => origins.contains(&o),
        (Some(o), None) => o
            .split_once("://")
            .and_then(|(_, a)| Authority::parse(a))
            .is_some_and(|a| console.hosts.iter().any(|h| h.admits(&a))),
    };
    if allowed {
        return None;
    }
    let accepted = match &console.origins {
        Some(origins) => origins.join(", "),
        None => format!("http:// or https:// with {}", console.allowed_hosts().join(", ")),
    };
    Some(format!(
        "a request from a page at `{origin}` cannot use the console's API: it accepts pages at {accepted}"
    ))
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
fn shown_state(rec: &EffectRecord, now: crate::decide::record::Millis) -> &'static str {
    if rec.is_stale(now) { "stale" } else { rec.state.as_str() }
}

/// Whether `who` may read records (see [`Console::with_reader_roles`]).
fn may_read(console: &Console, who: &Identity) -> Result<(), Refusal> {
    let allowed = match &console.reader_roles {
        None => !who.roles.is_empty(),
        Some(roles) => roles.iter().any(|r| who.has_role(r)),
    };
    if allowed {
        return Ok(());
    }
    let needed = match &console.reader_roles {
        None => "a role".to_owned(),
        Some(roles) => format!("one of the roles {}", roles.join(", ")),
    };
    Err(Refusal(
        StatusCode::FORBIDDEN,
        format!("{} needs {needed} to read the journal's records", who.name),
        "ask for a role in the operators' tokens file or the identity provider's groups",
    ))
}

async fn list(
    State(console): State<Arc<Console>>,
    axum::Extension(who): axum::Extension<Identity>,
    Query(q): Query<ListQuery>,
) -> Result<Json<Value>, Refusal> {
    may_read(&console, &who)?;
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

async fn show(
    State(console): State<Arc<Console>>,
    axum::Extension(who): axum::Extension<Identity>,
    Query(q): Query<KeyQuery>,
) -> Result<Json<Value>, Refusal> {
    may_read(&console, &who)?;
    let audit = console.store.audit(Some(&q.key)).await.map_err(store_refusal)?;
    // A key with an audit trail and no record: a call the policies denied before anything was
    // journaled (`policy-deny`), or a record garbage collection dropped. Its trail is what
    // there is to read.
    if !audit.is_empty() && console.store.get(&q.key).await.map_err(store_refusal)?.is_none() {
        return Ok(Json(json!({
            "state": "no-record", "record": null, "audit": audit, "output_schema": null,
            "tool": null, "waiting_ms": null, "edit": null,
        })));
    }
    let rec = record_or_404(&console, &q.key).await?;
    let now = console.store.now();
    let output_schema = output_schema(&console, &rec.tool).await;
    let tool = tool_json(&console, &rec).await;
    // How long the call has waited for a person: since the record last changed (it parked).
    let waiting_ms = rec.state.needs_person().then(|| (now - rec.updated_at).max(0));
    Ok(Json(json!({
        "state": shown_state(&rec, now), "record": rec, "audit": audit, "output_schema": output_schema,
        "tool": tool, "waiting_ms": waiting_ms, "edit": rec.approved_edit(),
    })))
}

/// What the person deciding on `rec` needs to know of its tool: its description and class (the
/// toolkit's, else the record's class), and the schema of its arguments (the toolkit's, else
/// the journal's), which an edit before approving must match.
async fn tool_json(console: &Console, rec: &EffectRecord) -> Value {
    let declared = console.tools.get(&rec.tool).map(|t| t.meta());
    let input_schema = match console.tools.get(&rec.tool) {
        Some(t) => Some(t.input_schema()),
        None => console.store.input_schema(&rec.tool).await.unwrap_or_else(|e| {
            tracing::warn!(tool = %rec.tool, error = %e, "cannot read the tool's argument schema from the journal");
            None
        }),
    };
    json!({
        "name": rec.tool,
        "description": declared.as_ref().map(|m| m.description),
        "class": declared.as_ref().map_or(rec.class, |m| m.class),
        "sensitive": declared.as_ref().map_or(&[][..], |m| m.sensitive),
        "input_schema": input_schema,
    })
}

/// The shape a person's output for `tool` must have: the toolkit's tool's own schema, else
/// the one the engine kept in the journal; `None` when neither is known (a failed read of
/// the journal's is logged, and the record shown without it).
async fn output_schema(console: &Console, tool: &str) -> Option<Value> {
    if let Some(schema) = console.tools.get(tool).and_then(|t| t.output_schema()) {
        return Some(schema);
    }
    console.store.output_schema(tool).await.unwrap_or_else(|e| {
        tracing::warn!(tool, error = %e, "cannot read the tool's output schema from the journal");
        None
    })
}

/// The role an approval or denial of `rec` needs, checked against `who`; four eyes included.
fn may_decide(identities: &Identities, rec: &EffectRecord, who: &Identity, action: &str) -> Result<String, Refusal> {
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
    // Four eyes: the operator's person (every name the identities map gives them), and the
    // MCP principal ids the operator calls tools under (`Identity::principals`), against the
    // principal the run (or thread) was made under.
    if let Err(requester) = identities.four_eyes(rec, &Actor::console(who.name.clone()), &who.principals) {
        let person = identities
            .person(&Actor::console(who.name.clone()))
            .map(|p| format!(" (person `{}`)", p.id))
            .unwrap_or_default();
        return Err(Refusal(
            StatusCode::FORBIDDEN,
            format!(
                "{}{person} requested this call (run `{}`, as `{requester}`) and cannot {action} it",
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
    /// An approval with edited arguments: the whole edited input (the parked one with some
    /// fields changed; sensitive fields as the record shows them).
    input: Option<Value>,
}

/// Approve the input the person was shown (`fingerprint`). When another input is parked
/// under the key now, nothing is approved: 409 with the new input and its fingerprint
/// (`input_changed`), so that the page shows what changed and the person decides again. With
/// `input`, the person approves the call with those edited arguments
/// ([`StoreExt::approve_edited`](crate::StoreExt::approve_edited)): refused with 409 and what is
/// wrong when they do not match the tool's parameters or change a sensitive field.
async fn approve(
    State(console): State<Arc<Console>>,
    axum::Extension(who): axum::Extension<Identity>,
    Json(body): Json<Decision>,
) -> Result<Response, Refusal> {
    // Who may decide comes first: a person who may not approve this call is told so, whatever
    // the request carries.
    let rec = record_or_404(&console, &body.key).await?;
    let role = may_decide(&console.identities, &rec, &who, "approve")?;
    let by = console.actor_name(&who);
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
    let approved = match body.input {
        Some(input) => {
            console
                .store
                .approve_edited(&body.key, &by, &role, fingerprint, input)
                .await
        }
        None => console.store.approve(&body.key, &by, &role, fingerprint).await,
    };
    match approved {
        Ok(rec) => Ok(Json(json!({ "record": rec })).into_response()),
        Err(StoreError::Rejected(e @ crate::decide::record::Rejected::InputChanged { .. })) => {
            let crate::decide::record::Rejected::InputChanged { fingerprint, input, .. } = &e else {
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
    may_decide(&console.identities, &rec, &who, "deny")?;
    let rec = console
        .store
        .deny(&body.key, &console.actor_name(&who), body.reason)
        .await
        .map_err(store_refusal)?;
    Ok(Json(json!({ "record": rec })))
}

async fn me(State(console): State<Arc<Console>>, axum::Extension(who): axum::Extension<Identity>) -> Json<Value> {
    let person = console
        .identities
        .person(&Actor::console(who.name.clone()))
        .map(|p| p.id.clone());
    Json(json!({
        "name": who.name, "roles": who.roles, "resolver_role": console.resolver_role,
        "can_compensate": console.engine.is_some(), "person": person,
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
        .abandon_run_by(&run, &tools, &console.actor_name(&who))
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
    let by = console.actor_name(who);
    let rec = if amend {
        store.amend(&body.key, &by, body.verdict).await
    } else {
        store.resolve(&body.key, &by, body.verdict).await
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

    fn console() -> Console {
        let store: Arc<dyn Store> = Arc::new(crate::store::MemoryStore::new());
        Console::new(store, StaticTokens::new())
    }

    fn h(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut m = HeaderMap::new();
        for (k, v) in pairs {
            m.append(*k, v.parse().unwrap());
        }
        m
    }

    #[test]
    fn origins_are_checked_against_the_allowed_ones_not_against_host() {
        let c = console();
        assert_eq!(cross_site(&c, &h(&[])), None, "a script sends no Origin");
        assert_eq!(cross_site(&c, &h(&[("origin", "http://127.0.0.1:8090")])), None);
        assert_eq!(cross_site(&c, &h(&[("origin", "https://LOCALHOST")])), None);
        assert_eq!(cross_site(&c, &h(&[("origin", "http://[::1]:9")])), None);
        // A page that rebound its name to this server sends its own name as Host and Origin.
        let rebound = h(&[("host", "evil.example:8090"), ("origin", "http://evil.example:8090")]);
        assert!(cross_site(&c, &rebound).unwrap().contains("http://evil.example:8090"));
        assert!(cross_site(&c, &h(&[("origin", "null")])).is_some());
        assert!(cross_site(&c, &h(&[("origin", "file://127.0.0.1")])).is_some());
        assert!(cross_site(&c, &h(&[("origin", "http://127.0.0.1.evil.example")])).is_some());
        assert!(
            cross_site(
                &c,
                &h(&[("origin", "http://127.0.0.1:1"), ("origin", "http://127.0.0.1:1")])
            )
            .is_some()
        );
        assert!(cross_site(&c, &h(&[("sec-fetch-site", "cross-site")])).is_some());
        assert!(cross_site(&c, &h(&[("sec-fetch-site", "same-site")])).is_some());
        assert_eq!(cross_site(&c, &h(&[("sec-fetch-site", "same-origin")])), None);

        let c = console().with_allowed_hosts(["console.example.com", "127.0.0.1:8090"]);
        assert_eq!(cross_site(&c, &h(&[("origin", "https://console.example.com")])), None);
        assert_eq!(cross_site(&c, &h(&[("origin", "http://127.0.0.1:8090")])), None);
        assert!(cross_site(&c, &h(&[("origin", "http://127.0.0.1:8091")])).is_some());
        assert!(cross_site(&c, &h(&[("origin", "http://localhost:8090")])).is_some());

        let c = c.with_allowed_origins(["https://Console.Example.com/"]);
        assert_eq!(cross_site(&c, &h(&[("origin", "https://console.example.com")])), None);
        assert!(cross_site(&c, &h(&[("origin", "http://console.example.com")])).is_some());
        assert!(cross_site(&c, &h(&[("origin", "http://127.0.0.1:8090")])).is_some());
    }

    #[test]
    fn hosts_are_names_with_an_optional_port() {
        let any = Authority::parse("LocalHost.").unwrap();
        assert_eq!(any.to_string(), "localhost");
        assert!(any.admits(&Authority::parse("localhost:8090").unwrap()));
        let exact = Authority::parse("[::1]:8090").unwrap();
        assert!(exact.admits(&Authority::parse("[::1]:8090").unwrap()));
        assert!(!exact.admits(&Authority::parse("[::1]:8091").unwrap()));
        assert!(!exact.admits(&Authority::parse("[::1]").unwrap()));
        for bad in ["", "a/b", "u@host", "host:", "host:x", "http://host"] {
            assert_eq!(Authority::parse(bad), None, "{bad}");
        }
        assert_eq!(
            normal_origin("HTTPS://A.example:443/").as_deref(),
            Some("https://a.example:443")
        );
        assert_eq!(normal_origin("https://a.example/path"), None);
    }
}
