//! What each subcommand does.

use std::io::{Read, Write};
use std::sync::Arc;

use effect_tool_core::__cli::{compensation_key, redact, sha256_hex};
use effect_tool_core::call::key::call_key;
use effect_tool_core::decide::record::{AuditEntry, EffectRecord, RecordState};
use effect_tool_core::engine::compensation::{ByHandRefused, record_compensated_by_hand, to_compensate};
use effect_tool_core::store::{Filter, Listing, collectable};
use effect_tool_core::toolkit::{manifest, review};
use effect_tool_core::value::canonical;
use effect_tool_core::{KeyRule, RunContext, Store, StoreExt, Verdict};
use serde_json::{Value, json};

use crate::cli::{AbandonArgs, Cli, Command, KeyArgs, ListArgs, ManifestArgs, PolicyCommand, ResolveArgs, StateFilter};
use crate::emit::{io_error, write, write_json};
use crate::error::{CliError, not_found};
use crate::identity::{Acting, IdentityArgs};
use crate::output::{Table, clean, shell_quote, time};

/// Where a command reads and writes.
pub struct Io<'a> {
    /// Standard input (JSON for `key`, `canon`, `resolve --output -`).
    pub stdin: &'a mut dyn Read,
    /// Standard output.
    pub out: &'a mut dyn Write,
    /// Whether standard output is a terminal (`canon` adds a newline only then).
    pub terminal: bool,
    /// Whether standard input is a terminal (`approve` without `--fingerprint` asks only then).
    pub stdin_terminal: bool,
}

/// Run a parsed command line, opening the store it names when the command needs one.
pub async fn run(cli: Cli, io: &mut Io<'_>) -> Result<(), CliError> {
    let spec = cli.store.clone();
    run_command(cli, io, || async move {
        match spec {
            Some(spec) => crate::store::open(&spec).await,
            None => Err(CliError::Usage(
                "no journal given: pass --store PATH|URL or set EFFECT_TOOL_STORE (a SQLite file or a postgres:// URL)"
                    .into(),
            )),
        }
    })
    .await
}

/// Run a parsed command line on an already open store (`--store` is ignored).
pub async fn run_on(cli: Cli, store: Arc<dyn Store>, io: &mut Io<'_>) -> Result<(), CliError> {
    run_command(cli, io, || async move { Ok(store) }).await
}

async fn run_command<F, Fut>(cli: Cli, io: &mut Io<'_>, open: F) -> Result<(), CliError>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Result<Arc<dyn Store>, CliError>>,
{
    let json = cli.json;
    let identity = cli.identity;
    match cli.command {
        Command::Key(args) => key(args, json, io),
        Command::Canon { hash } => canon(hash, json, io),
        Command::Manifest(args) => manifest(args, json, io),
        Command::Policy(command) => policy(command, json, io),
        Command::Gateway(args) if args.action.is_some() => {
            let Some(&crate::gateway::GatewayAction::Check { write_digests }) = args.action.as_ref() else {
                return Ok(());
            };
            crate::gateway::check(&args, write_digests, &mut *io.out).await
        }
        command => {
            let store = open().await?;
            match command {
                Command::List(args) => list(&*store, args, json, io).await,
                Command::Show { key, marker } => {
                    let key = match (key, marker) {
                        (_, Some(marker)) => marker_key(&*store, &marker).await?,
                        (Some(key), None) => key,
                        (None, None) => return Err(CliError::Usage("give the effect key, or --marker".into())),
                    };
                    show(&*store, &key, json, io).await
                }
                Command::Resolve(args) => resolve(&*store, args, &identity, json, io).await,
                Command::Approve {
                    key,
                    role,
                    fingerprint,
                    by,
                    edit,
                } => {
                    let acting = crate::identity::acting(&identity, by)?;
                    approve(&*store, &key, &role, fingerprint, &acting, edit, json, io).await
                }
                Command::Deny { key, reason, by } => {
                    let acting = crate::identity::acting(&identity, by)?;
                    deny(&*store, &key, reason, &acting, json, io).await
                }
                Command::Abandon(args) => abandon(&*store, args, &identity, json, io).await,
                Command::Gc { dry_run } => gc(&*store, dry_run, json, io).await,
                Command::Serve {
                    listen,
                    tokens,
                    trusted_proxies,
                    proxy_secret_file,
                    reader_roles,
                    resolver_role,
                    allowed_hosts,
                    allowed_origins,
                    callbacks,
                } => {
                    let proxy = (trusted_proxies, proxy_secret_file);
                    let identities = match &identity.identities {
                        Some(path) => Some(
                            effect_tool_core::ops::identity::read_identities(path)
                                .map_err(|e| CliError::Usage(e.to_string()))?,
                        ),
                        None => None,
                    };
                    let console = console(&store, tokens, proxy, resolver_role)?.map(|c| {
                        let c = match identities {
                            Some(identities) => c.with_identities(identities),
                            None => c,
                        };
                        let c = if reader_roles.is_empty() {
                            c
                        } else {
                            c.with_reader_roles(reader_roles)
                        };
                        if allowed_origins.is_empty() {
                            c
                        } else {
                            c.with_allowed_origins(allowed_origins)
                        }
                    });
                    let callbacks = if callbacks {
                        Some(callback_webhook(&store).await?)
                    } else {
                        None
                    };
                    let mounted = Mounted { console, callbacks };
                    serve(store, listen, mounted, allowed_hosts, json, io).await
                }
                Command::Gateway(args) => crate::gateway::serve(&args, store).await,
                Command::Grant(args) => crate::grant::grant(&*store, args, &identity, json, &mut *io.out).await,
                Command::Key(_) | Command::Canon { .. } | Command::Manifest(_) | Command::Policy(_) => Ok(()),
            }
        }
    }
}

/// The operator API `serve` mounts, if it was given a way to identify operators.
fn console(
    store: &Arc<dyn Store>,
    tokens: Option<std::path::PathBuf>,
    (proxies, secret_file): (Vec<std::net::IpAddr>, Option<std::path::PathBuf>),
    resolver_role: String,
) -> Result<Option<effect_tool_core::ops::console::Console>, CliError> {
    use effect_tool_core::ops::console::{Console, StaticTokens, TrustedHeader};
    let console = match (tokens, proxies.is_empty()) {
        (Some(_), false) => {
            return Err(CliError::Usage("give --tokens or --trusted-proxy, not both".into()));
        }
        (Some(path), true) => {
            let tokens = StaticTokens::from_file(&path).map_err(|e| CliError::Usage(e.to_string()))?;
            Console::new(store.clone(), tokens)
        }
        (None, false) => {
            let proxy = TrustedHeader::new(proxies);
            let proxy = match secret_file {
                Some(path) => proxy.with_secret(PROXY_SECRET_HEADER, proxy_secret(&path)?),
                None => proxy,
            };
            Console::new(store.clone(), proxy)
        }
        (None, true) => return Ok(None),
    };
    Ok(Some(console.with_resolver_role(resolver_role)))
}

/// The webhook `serve --callbacks` mounts: the journal's marker secret verifies the tokens,
/// as it signed them in the processes that called the tools.
async fn callback_webhook(
    store: &Arc<dyn Store>,
) -> Result<effect_tool_core::ops::callback::CallbackWebhook, CliError> {
    let secret = store.marker_secret().await?.ok_or_else(|| {
        CliError::Usage(
            "--callbacks needs a journal that keeps a marker secret (SQLite or PostgreSQL) to verify callback tokens with; this one keeps none".to_owned(),
        )
    })?;
    Ok(effect_tool_core::ops::callback::CallbackWebhook::new(
        store.clone(),
        secret,
    ))
}

/// What `serve` mounts beside `/metrics`: the operator API, providers' callbacks.
struct Mounted {
    console: Option<effect_tool_core::ops::console::Console>,
    callbacks: Option<effect_tool_core::ops::callback::CallbackWebhook>,
}

/// The header that carries the proxy's secret (`serve --proxy-secret-file`).
const PROXY_SECRET_HEADER: &str = "x-effect-tool-proxy-secret";

/// The proxy's secret: the first line of `path`, a file only its owner may read.
fn proxy_secret(path: &std::path::Path) -> Result<String, CliError> {
    use std::io::Read;
    let shown = path.display();
    let cannot = |e: std::io::Error| CliError::Usage(format!("cannot read the proxy secret file {shown}: {e}"));
    let mut file = std::fs::File::open(path).map_err(cannot)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = file.metadata().map_err(cannot)?.permissions().mode();
        if mode & 0o077 != 0 {
            return Err(CliError::Usage(format!(
                "the proxy secret file {shown} may be read or written by its group or others (mode {:04o}): chmod 0600 it",
                mode & 0o7777
            )));
        }
    }
    let mut text = String::new();
    file.read_to_string(&mut text).map_err(cannot)?;
    let secret = text.lines().next().unwrap_or_default().trim().to_owned();
    if secret.len() < 16 {
        return Err(CliError::Usage(format!(
            "the proxy secret in {shown} is shorter than 16 characters: put a long random value on its first line (e.g. `openssl rand -hex 32`)"
        )));
    }
    Ok(secret)
}

/// `serve`: the journal's gauges at `GET /metrics` (and the operator API, and providers'
/// callbacks), until Ctrl-C or SIGTERM.
async fn serve(
    store: Arc<dyn Store>,
    listen: std::net::SocketAddr,
    Mounted { console, callbacks }: Mounted,
    allowed_hosts: Vec<String>,
    json: bool,
    io: &mut Io<'_>,
) -> Result<(), CliError> {
    use effect_tool_core::ops::prometheus::PrometheusMetrics;
    let metrics = PrometheusMetrics::install()
        .map_err(|e| CliError::Store(e.to_string()))?
        .with_journal(store);
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| CliError::Usage(format!("cannot listen on {listen}: {e}")))?;
    let addr = listener.local_addr().map_err(io_error)?;
    let with_api = console.is_some();
    let mut app = metrics.router();
    if let Some(console) = console {
        // By default the API answers to the loopback names on the port listened on.
        let hosts = if allowed_hosts.is_empty() {
            let port = addr.port();
            vec![
                format!("localhost:{port}"),
                format!("127.0.0.1:{port}"),
                format!("[::1]:{port}"),
            ]
        } else {
            allowed_hosts
        };
        app = app.merge(console.with_allowed_hosts(hosts).router());
    }
    let with_callbacks = callbacks.is_some();
    if let Some(callbacks) = callbacks {
        // Outside the console's host gate: providers call from elsewhere, under their own
        // names for this server; the token is the credential.
        app = app.merge(callbacks.router());
    }
    let line = if json {
        format!(
            "{}\n",
            serde_json::json!({
                "listening": addr.to_string(),
                "metrics": "/metrics",
                "api": with_api.then_some("/api"),
                "callbacks": with_callbacks.then_some("/callback"),
            })
        )
    } else {
        let mut served = vec![format!("the journal's metrics at http://{addr}/metrics")];
        if with_api {
            served.push(format!("the operator API at http://{addr}/api"));
        }
        if with_callbacks {
            served.push(format!("providers' callbacks at http://{addr}/callback"));
        }
        let last = served.pop().unwrap_or_default();
        let served = match served.is_empty() {
            true => last,
            false => format!("{} and {last}", served.join(", ")),
        };
        format!("serving {served} (Ctrl-C to stop)\n")
    };
    write(io.out, &line)?;
    io.out.flush().map_err(io_error)?;
    let app = app.into_make_service_with_connect_info::<std::net::SocketAddr>();
    axum::serve(listener, app)
        .with_graceful_shutdown(stopped())
        .await
        .map_err(io_error)?;
    Ok(())
}

/// Ctrl-C, or SIGTERM on Unix.
async fn stopped() {
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(term) => term,
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
                return;
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

fn record_json(rec: &EffectRecord) -> Value {
    serde_json::to_value(rec).unwrap_or(Value::Null)
}

fn read_stdin(io: &mut Io<'_>, what: &str) -> Result<String, CliError> {
    let mut text = String::new();
    io.stdin
        .read_to_string(&mut text)
        .map_err(|e| CliError::Usage(format!("cannot read {what} from stdin: {e}")))?;
    if text.trim().is_empty() {
        return Err(CliError::Usage(format!("stdin is empty: pipe {what} in")));
    }
    Ok(text)
}

fn parse_json(text: &str, what: &str) -> Result<Value, CliError> {
    canonical::parse_strict(text).map_err(|e| CliError::Usage(format!("{what} is not valid JSON: {e}")))
}

/// The state as a person reads it: a claim whose lease has expired is `claimed (stale)`.
fn state_label(rec: &EffectRecord, now: i64) -> String {
    if rec.is_stale(now) {
        "claimed (stale)".to_owned()
    } else {
        rec.state.to_string()
    }
}

// ---------------------------------------------------------------------------------------------
// list

async fn list(store: &dyn Store, args: ListArgs, json: bool, io: &mut Io<'_>) -> Result<(), CliError> {
    let now = store.now();
    let want_stale = args.state.contains(&StateFilter::Stale);
    let mut states: Vec<RecordState> = args
        .state
        .iter()
        .filter_map(|s| match s {
            StateFilter::State(st) => Some(*st),
            StateFilter::Stale => None,
        })
        .collect();
    let explicit = states.clone();
    if want_stale && !states.contains(&RecordState::Claimed) {
        states.push(RecordState::Claimed);
    }
    let filter = Filter {
        run_id: args.run.clone(),
        tool: args.tool.clone(),
        states,
        // With `stale`, some claims are dropped after listing: limit afterwards.
        limit: if want_stale { None } else { args.limit },
        updated_since: args.since.map(|w| w.millis(now)),
        updated_before: args.before.map(|w| w.millis(now)),
        after: args.after.clone(),
    };
    let listing = store.list_report(&filter).await?;
    let note = skipped_note(&listing);
    let mut records = listing.records;
    if want_stale {
        records.retain(|r| explicit.contains(&r.state) || r.is_stale(now));
        if let Some(limit) = args.limit {
            records.truncate(limit);
        }
    }

    if json {
        // The JSON on stdout keeps its shape; what was skipped goes to stderr.
        if let Some(note) = &note {
            eprint!("{note}");
        }
        return write_json(io.out, &Value::Array(records.iter().map(record_json).collect()));
    }
    if records.is_empty() {
        write(io.out, "no records match\n")?;
        return note.map_or(Ok(()), |n| write(io.out, &n));
    }
    let mut table = Table::new(vec!["STATE", "TOOL", "CLASS", "RUN", "UPDATED", "KEY"]);
    for r in &records {
        table.row(vec![
            state_label(r, now),
            r.tool.clone(),
            r.class.to_string(),
            r.run_id.clone(),
            time(r.updated_at),
            r.key.clone(),
        ]);
    }
    table.write(io.out).map_err(io_error)?;
    let n = records.len();
    write(io.out, &format!("{n} record{}\n", if n == 1 { "" } else { "s" }))?;
    // A full page may have a next one: say how to read it.
    if let (Some(limit), Some(last)) = (args.limit, records.last())
        && n == limit
    {
        let cursor = crate::cli::cursor_text(&effect_tool_core::store::Cursor::of(last));
        write(
            io.out,
            &format!("next page: the same command with --after {}\n", shell_quote(&cursor)),
        )?;
    }
    note.map_or(Ok(()), |n| write(io.out, &n))
}

/// What a person reads about the rows a list skipped (`None`: none were).
fn skipped_note(listing: &Listing) -> Option<String> {
    let n = listing.skipped.len();
    if n == 0 {
        return None;
    }
    let mut text = format!(
        "skipped {n} record{} this effect-tool cannot read (written by a newer effect-tool, or corrupt), left untouched:\n",
        plural(n)
    );
    for s in &listing.skipped {
        text.push_str(&format!("  {}: {}\n", clean(&s.key), clean(&s.reason)));
    }
    Some(text)
}

// ---------------------------------------------------------------------------------------------
// show

/// The key of the record `marker` (a marker, or its id) belongs to, in this journal.
async fn marker_key(store: &dyn Store, marker: &str) -> Result<String, CliError> {
    let secret = store.marker_secret().await?;
    let rec = effect_tool_core::store::markers::find_record(store, marker, secret.as_ref()).await?;
    rec.map(|rec| rec.key).ok_or_else(|| {
        CliError::NotFound(format!(
            "no record of this journal carries the marker `{}`: it may have been dropped by `gc`, belong to another journal, or have been written under a secret the application brings itself (`Engine::with_marker_secret`): look it up in the application with `store::markers::find_record` and that secret",
            crate::output::clean(marker.trim())
        ))
    })
}

async fn show(store: &dyn Store, key: &str, json: bool, io: &mut Io<'_>) -> Result<(), CliError> {
    let rec = store.get(key).await?.ok_or_else(|| not_found(key))?;
    let audit = store.audit(Some(key)).await?;
    // The shape a person's output must have (kept by the engine that ran the tool). A row
    // that cannot be read does not hide the record: `resolve` reports it.
    let output_schema = store.output_schema(&rec.tool).await.unwrap_or_default();
    if json {
        let audit: Vec<Value> = audit
            .iter()
            .map(|a| serde_json::to_value(a).unwrap_or(Value::Null))
            .collect();
        return write_json(
            io.out,
            &json!({ "record": record_json(&rec), "audit": audit, "output_schema": output_schema }),
        );
    }
    let now = store.now();
    let mut text = String::new();
    let mut field = |name: &str, value: &str| {
        text.push_str(&format!("{:<13}{}\n", format!("{name}:"), clean(value)));
    };
    field("key", &rec.key);
    field("tool", &format!("{} ({})", rec.tool, rec.class));
    field("state", &state_label(&rec, now));
    if let Some(reason) = &rec.reason {
        field("reason", reason);
    }
    field("run", &rec.run_id);
    if let Some(t) = &rec.thread_id {
        field("thread", t);
    }
    if let Some(c) = &rec.call_id {
        field("call id", c);
    }
    field("attempt", &rec.attempt.to_string());
    if let Some(l) = rec.lease_until.filter(|_| rec.state == RecordState::Claimed) {
        field("lease until", &time(l));
    }
    if let Some(h) = &rec.holder {
        field("claimed by", &h.to_string());
    }
    if let Some(role) = &rec.approval_role {
        field("approval", &format!("by role `{role}`"));
    }
    if let Some(by) = &rec.decided_by {
        field("decided by", by);
    }
    field("created", &time(rec.created_at));
    field("updated", &time(rec.updated_at));
    if let Some(e) = rec.expires_at {
        field("expires", &time(e));
    }
    field("fingerprint", &rec.fingerprint);
    text.push_str("input (secrets removed):\n");
    text.push_str(&indent(&pretty(&rec.input)));
    if let Some(output) = &rec.output {
        text.push_str("output:\n");
        text.push_str(&indent(&pretty(output)));
    }
    text.push_str("audit trail:\n");
    if audit.is_empty() {
        text.push_str("  (none)\n");
    }
    for a in &audit {
        text.push_str(&format!("  {}\n", audit_line(a)));
    }
    if let Some(next) = next_step(&rec, now) {
        text.push_str("next:\n");
        text.push_str(&next);
    }
    if let Some(by) = rec.resolved_by() {
        let k = shell_quote(&rec.key);
        text.push_str(&format!(
            "if the resolution by {} was wrong, correct it (until the next call runs it):\n  effect-tool resolve {k} --applied --output '<json>' --amend\n  effect-tool resolve {k} --not-applied --amend\n",
            clean(by)
        ));
    }
    let may_record = rec.state == RecordState::InDoubt || rec.is_stale(now) || rec.resolved_by().is_some();
    if may_record {
        match &output_schema {
            Some(schema) => {
                text.push_str(&format!(
                    "an output given with --applied must have the shape {} returns (its JSON Schema):\n",
                    clean(&rec.tool)
                ));
                text.push_str(&indent(&pretty(schema)));
            }
            None => text.push_str(&format!(
                "the journal holds no output schema of {}, so an output given with --applied is not checked: give exactly what the tool returns\n",
                clean(&rec.tool)
            )),
        }
    }
    write(io.out, &text)
}

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string())
}

fn indent(s: &str) -> String {
    s.lines().map(|l| format!("  {}\n", clean(l))).collect()
}

fn audit_line(a: &AuditEntry) -> String {
    let detail = match (&a.action[..], &a.detail) {
        ("resolve" | "amend", Some(d)) => match d.get("verdict").and_then(Value::as_str) {
            Some("applied") => format!(
                "as applied, output {}",
                d.get("output")
                    .map(canonical::to_string)
                    .unwrap_or_else(|| "null".into())
            ),
            Some("not-applied") => "as not applied".to_owned(),
            _ => canonical::to_string(d),
        },
        ("approve", Some(d)) => {
            let role = d.get("role").and_then(Value::as_str).unwrap_or("?");
            match d.get("fingerprint").and_then(Value::as_str) {
                Some(f) => format!("as `{role}`, the input with fingerprint {f}"),
                None => format!("as `{role}`"),
            }
        }
        ("approval-voided", Some(d)) => format!(
            "the approval by {} (input {}) does not apply to input {}: {}",
            text_of(d, "approved_by"),
            text_of(d, "approved_fingerprint"),
            text_of(d, "fingerprint"),
            text_of(d, "reason")
        ),
        ("takeover", Some(d)) => format!(
            "attempt {} took over attempt {} ({}, last written {}, call {}, run {})",
            text_of(d, "attempt"),
            text_of(d, "took_over_attempt"),
            text_of(d, "took_over_state"),
            d.get("took_over_since")
                .and_then(Value::as_i64)
                .map_or_else(|| "?".to_owned(), time),
            text_of(d, "took_over_call_id"),
            text_of(d, "took_over_run_id")
        ),
        ("in-doubt", Some(d)) => format!(
            "attempt {} ended with an unknown outcome: {}",
            text_of(d, "attempt"),
            text_of(d, "reason")
        ),
        ("reconciled", Some(d)) => format!(
            "attempt {} recorded a result for the outcome it took over",
            text_of(d, "attempt")
        ),
        ("claim-lost", Some(d)) => format!(
            "attempt {} lost its claim to attempt {}: {}",
            text_of(d, "attempt"),
            text_of(d, "current"),
            if d.get("finished").and_then(Value::as_bool) == Some(true) {
                "its tool had returned, and its result was not recorded"
            } else {
                "its tool was stopped before it finished"
            }
        ),
        ("deny", Some(d)) => match d.get("reason").and_then(Value::as_str) {
            Some(r) => format!("reason: {r}"),
            None => "no reason given".to_owned(),
        },
        (_, Some(d)) => canonical::to_string(d),
        (_, None) => String::new(),
    };
    clean(format!("{}  {:<10} {:<11} {}", time(a.at), a.actor, a.action, detail).trim_end())
}

/// Field `name` of an audit entry's detail as text (`-` when absent or null).
fn text_of(d: &Value, name: &str) -> String {
    match d.get(name) {
        None | Some(Value::Null) => "-".to_owned(),
        Some(Value::String(s)) => s.clone(),
        Some(v) => canonical::to_string(v),
    }
}

/// What a person can do with the record now, as commands to paste.
fn next_step(rec: &EffectRecord, now: i64) -> Option<String> {
    let k = shell_quote(&rec.key);
    if rec.state == RecordState::InDoubt || rec.is_stale(now) {
        Some(format!(
            "  check whether the effect happened, then record it:\n  effect-tool resolve {k} --applied --output '<json>'\n  effect-tool resolve {k} --not-applied\n"
        ))
    } else if rec.state == RecordState::AwaitingApproval {
        let role = shell_quote(rec.approval_role.as_deref().unwrap_or("ROLE"));
        let fingerprint = shell_quote(&rec.fingerprint);
        Some(format!(
            "  effect-tool approve {k} --as {role} --fingerprint {fingerprint}\n  effect-tool deny {k} --reason '<why>'\n"
        ))
    } else {
        None
    }
}

// ---------------------------------------------------------------------------------------------
// resolve, approve, deny

async fn resolve(
    store: &dyn Store,
    args: ResolveArgs,
    identity: &IdentityArgs,
    json: bool,
    io: &mut Io<'_>,
) -> Result<(), CliError> {
    let by = crate::identity::acting(identity, args.by)?.audit_name();
    let verdict = if args.applied {
        let output = match args.output.as_deref() {
            None => {
                // A forgotten output recorded as null would make every replay fail to decode
                // until a person noticed and amended it: ask for it now.
                return Err(CliError::Usage(
                    "--applied needs --output JSON: the output the next call returns instead of running (write `--output null` if the tool returns nothing)".into(),
                ));
            }
            Some("-") => parse_json(&read_stdin(io, "the output JSON")?, "the output on stdin")?,
            Some(text) => match text.strip_prefix('@') {
                Some(path) => {
                    let content = std::fs::read_to_string(path)
                        .map_err(|e| CliError::Usage(format!("cannot read --output file `{path}`: {e}")))?;
                    parse_json(&content, &format!("--output file `{path}`"))?
                }
                None => parse_json(text, "--output")?,
            },
        };
        Verdict::Applied { output }
    } else {
        Verdict::NotApplied
    };
    let applied = matches!(verdict, Verdict::Applied { .. });
    let rec = if args.amend {
        store.amend(&args.key, &by, verdict).await?
    } else {
        store.resolve(&args.key, &by, verdict).await?
    };
    if json {
        return write_json(io.out, &record_json(&rec));
    }
    let tool = clean(&rec.tool);
    let done = if args.amend {
        "amended the resolution of"
    } else {
        "resolved"
    };
    let line = if applied {
        format!(
            "{done} {} as applied (by {}): the next call of {tool} returns the recorded output without running\n",
            clean(&rec.key),
            clean(&by)
        )
    } else {
        format!(
            "{done} {} as not applied (by {}): the next call of {tool} applies the effect\n",
            clean(&rec.key),
            clean(&by)
        )
    };
    write(io.out, &line)
}

/// How many leading hex digits of a fingerprint `approve --fingerprint` needs at least. The
/// model chooses the input, so it can try inputs until one's fingerprint starts like the one a
/// person saw: 8 hex digits take it about 2^32 tries, 16 about 2^64, which is out of reach.
pub const MIN_FINGERPRINT_PREFIX: usize = 16;

#[allow(clippy::too_many_arguments)]
async fn approve(
    store: &dyn Store,
    key: &str,
    role: &str,
    fingerprint: Option<String>,
    acting: &Acting,
    edit: Option<String>,
    json: bool,
    io: &mut Io<'_>,
) -> Result<(), CliError> {
    let by = acting.audit_name();
    let parked = store.get(key).await?.ok_or_else(|| not_found(key))?;
    acting.four_eyes(&parked, "approve")?;
    acting.holds(role, "approve")?;
    let edited = match &edit {
        Some(text) => Some(edited_input(&parked.input, text)?),
        None => None,
    };
    // Only a parked call has an input to approve, and only by its role: anything else is
    // refused by the journal, with its own words (the record's state, the role it needs),
    // before anyone is asked to look at the input.
    let needed = parked.approval_role.as_deref().unwrap_or_default();
    if parked.state != RecordState::AwaitingApproval || (!needed.is_empty() && needed != role) {
        store.approve(key, &by, role, &parked.fingerprint).await?;
        return Ok(());
    }
    let bound = effect_tool_core::call::key::bound_fields(&parked.input);
    let shown = format!(
        "{} waits for approval by role `{}`; its input (fingerprint {}):\n{}{}",
        clean(key),
        clean(parked.approval_role.as_deref().unwrap_or_default()),
        parked.fingerprint,
        indent(&pretty(&parked.input)),
        if bound.is_empty() {
            String::new()
        } else {
            format!(
                "sensitive (not shown, and bound: the approval is for these values only): {}\n",
                clean(&bound.join(", "))
            )
        }
    );
    let shown = match &edited {
        Some(input) => {
            let changed = effect_tool_core::decide::record::changed_fields(&parked.input, input);
            let mut lines = format!("{shown}edited (the call runs with these instead):\n");
            for field in &changed {
                let value = |v: Option<&Value>| v.map_or_else(|| "(absent)".to_owned(), |v| v.to_string());
                lines.push_str(&format!(
                    "  {}: {} -> {}\n",
                    clean(field),
                    clean(&value(parked.input.get(field))),
                    clean(&value(input.get(field)))
                ));
            }
            lines
        }
        None => shown,
    };
    let approved_fingerprint = match fingerprint {
        Some(prefix) => {
            let known = known_fingerprints(store, &parked).await?;
            let full = expand_fingerprint(&prefix, &known)?;
            if !json {
                write(io.out, &shown)?;
            }
            // The journal compares it with the input parked at the moment of the approval.
            full
        }
        None if !io.stdin_terminal => {
            if !json {
                write(io.out, &shown)?;
            }
            return Err(CliError::Usage(format!(
                "not approved: an approval names the input it is for, and stdin is not a terminal to ask on; if the input above is the one to approve, run again with --fingerprint {}",
                &parked.fingerprint[..MIN_FINGERPRINT_PREFIX.min(parked.fingerprint.len())]
            )));
        }
        None => {
            write(io.out, &shown)?;
            let what = if edited.is_some() { "edited input" } else { "input" };
            write(io.out, &format!("approve this {what} as `{}`? [y/N] ", clean(role)))?;
            io.out
                .flush()
                .map_err(|e| CliError::Store(format!("cannot write the question: {e}")))?;
            let answer = read_line(io)?;
            if !matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes") {
                return Err(CliError::Refused(format!("not approved: {} still waits", clean(key))));
            }
            parked.fingerprint.clone()
        }
    };
    let rec = match edited {
        Some(input) => {
            store
                .approve_edited(key, &by, role, &approved_fingerprint, input)
                .await?
        }
        None => store.approve(key, &by, role, &approved_fingerprint).await?,
    };
    if json {
        return write_json(io.out, &record_json(&rec));
    }
    if let Some(edit) = rec.approved_edit() {
        return write(
            io.out,
            &format!(
                "approved {} as {} (by {}) with edited arguments (changed: {}): the next call of {} runs the edited call, once\n",
                clean(key),
                clean(role),
                clean(&by),
                clean(&edit.changed.join(", ")),
                clean(&rec.tool)
            ),
        );
    }
    write(
        io.out,
        &format!(
            "approved {} as {} (by {}): the next call of {} runs it\n",
            clean(key),
            clean(role),
            clean(&by),
            clean(&rec.tool)
        ),
    )
}

/// The parked `input` with the fields of `--edit`'s JSON object over it (`null` removes one).
fn edited_input(input: &Value, text: &str) -> Result<Value, CliError> {
    let patch: Value = serde_json::from_str(text)
        .map_err(|e| CliError::Usage(format!("--edit is not JSON ({e}): give a JSON object of the fields to change, e.g. --edit '{{\"amount_cents\": 1000}}'")))?;
    let Some(patch) = patch.as_object() else {
        return Err(CliError::Usage(
            "--edit is not a JSON object: give the fields to change, e.g. --edit '{\"amount_cents\": 1000}'".to_owned(),
        ));
    };
    let mut edited = input.as_object().cloned().unwrap_or_default();
    for (field, value) in patch {
        if value.is_null() {
            edited.remove(field);
        } else {
            edited.insert(field.clone(), value.clone());
        }
    }
    Ok(Value::Object(edited))
}

/// One line from stdin (the answer to a question).
fn read_line(io: &mut Io<'_>) -> Result<String, CliError> {
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    loop {
        match io.stdin.read(&mut byte) {
            Ok(0) => break,
            Ok(_) if byte[0] == b'\n' => break,
            Ok(_) => line.push(byte[0]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(CliError::Usage(format!("cannot read the answer from stdin: {e}"))),
        }
    }
    Ok(String::from_utf8_lossy(&line).into_owned())
}

/// The fingerprints of the inputs seen under the record's key: the parked one, and those its
/// audit trail names (approved earlier, voided). A prefix must name exactly one of them.
async fn known_fingerprints(store: &dyn Store, parked: &EffectRecord) -> Result<Vec<String>, CliError> {
    let mut known = vec![parked.fingerprint.clone()];
    for entry in store.audit(Some(&parked.key)).await? {
        let Some(detail) = &entry.detail else { continue };
        for field in ["fingerprint", "approved_fingerprint"] {
            if let Some(f) = detail.get(field).and_then(Value::as_str)
                && !known.iter().any(|k| k == f)
            {
                known.push(f.to_owned());
            }
        }
    }
    Ok(known)
}

/// The full fingerprint `prefix` names among `known` (the parked input's first): refused when
/// it is not hex, shorter than [`MIN_FINGERPRINT_PREFIX`], or names more than one. A prefix of
/// none of them is passed on whole, for the journal to refuse with the input parked now.
fn expand_fingerprint(prefix: &str, known: &[String]) -> Result<String, CliError> {
    let prefix = prefix.trim().to_ascii_lowercase();
    if prefix.is_empty() || !prefix.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(CliError::Usage(format!(
            "--fingerprint `{}` is not hex: give the fingerprint `effect-tool show KEY` prints, or its first {MIN_FINGERPRINT_PREFIX} or more digits",
            clean(&prefix)
        )));
    }
    if prefix.len() < MIN_FINGERPRINT_PREFIX {
        return Err(CliError::Usage(format!(
            "--fingerprint `{prefix}` is too short to name one input: give at least its first {MIN_FINGERPRINT_PREFIX} hex digits (the model chooses the input, and can make one whose fingerprint starts the same for a shorter prefix)"
        )));
    }
    let matching: Vec<&String> = known.iter().filter(|k| k.starts_with(&prefix)).collect();
    match matching[..] {
        [one] => Ok(one.clone()),
        [] => Ok(prefix),
        _ => Err(CliError::Usage(format!(
            "--fingerprint `{prefix}` is ambiguous: it begins {} of the inputs seen under this key; give more digits",
            matching.len()
        ))),
    }
}

async fn deny(
    store: &dyn Store,
    key: &str,
    reason: Option<String>,
    acting: &Acting,
    json: bool,
    io: &mut Io<'_>,
) -> Result<(), CliError> {
    let by = acting.audit_name();
    if let Some(parked) = store.get(key).await? {
        acting.four_eyes(&parked, "deny")?;
        if let Some(role) = &parked.approval_role {
            acting.holds(role, "deny")?;
        }
    }
    let rec = store.deny(key, &by, reason).await?;
    if json {
        return write_json(io.out, &record_json(&rec));
    }
    write(
        io.out,
        &format!(
            "denied {} (by {}): the next call of {} fails with the reason, and nothing runs\n",
            clean(key),
            clean(&by),
            clean(&rec.tool)
        ),
    )
}

// ---------------------------------------------------------------------------------------------
// abandon

async fn abandon(
    store: &dyn Store,
    args: AbandonArgs,
    identity: &IdentityArgs,
    json: bool,
    io: &mut Io<'_>,
) -> Result<(), CliError> {
    let records = run_records(store, &args.run).await?;
    let plan = AbandonPlan::of(store, &records).await?;
    let marked = if args.mark_compensated && !plan.pending.is_empty() {
        let by = crate::identity::acting(identity, args.by)?.audit_name();
        mark_by_hand(store, &plan.pending, &by).await
    } else {
        Marked::default()
    };
    if json {
        write_json(io.out, &plan.json(&args.run, &marked))?;
    } else {
        plan.write_text(&args.run, args.mark_compensated, &marked, io)?;
    }
    if marked.refused.is_empty() {
        Ok(())
    } else {
        Err(CliError::Refused(format!(
            "{} of {} effects could not be marked compensated (see above)",
            marked.refused.len(),
            plan.pending.len()
        )))
    }
}

/// The records of `run` (a row that cannot be read is named on standard error, never a reason
/// to stop); none at all is an error that says what to check.
async fn run_records(store: &dyn Store, run: &str) -> Result<Vec<EffectRecord>, CliError> {
    let listing = store
        .list_report(&Filter {
            run_id: Some(run.to_owned()),
            ..Filter::default()
        })
        .await?;
    if let Some(note) = skipped_note(&listing) {
        eprint!("{note}");
    }
    if listing.records.is_empty() && listing.skipped.is_empty() {
        return Err(CliError::NotFound(format!(
            "no records for run `{}`: check the run id (see `effect-tool list`) and the store",
            clean(run)
        )));
    }
    Ok(listing.records)
}

/// What abandoning a run has to undo, as the journal says.
struct AbandonPlan<'a> {
    /// The completed compensable effects, newest first (the order `Engine::abandon_run` undoes
    /// them in, `compensation::to_compensate`).
    pending: Vec<EffectRecord>,
    /// The effects compensated already.
    already: Vec<&'a EffectRecord>,
    /// The compensation record of each pending effect, if one was started.
    compensations: Vec<Option<EffectRecord>>,
}

impl<'a> AbandonPlan<'a> {
    async fn of(store: &dyn Store, records: &'a [EffectRecord]) -> Result<Self, CliError> {
        let pending = to_compensate(records);
        let already = records.iter().filter(|r| r.state == RecordState::Compensated).collect();
        let mut compensations = Vec::with_capacity(pending.len());
        for rec in &pending {
            compensations.push(store.get(&compensation_key(&rec.key)).await?);
        }
        Ok(AbandonPlan {
            pending,
            already,
            compensations,
        })
    }

    fn json(&self, run: &str, marked: &Marked) -> Value {
        let pending: Vec<Value> = self
            .pending
            .iter()
            .zip(&self.compensations)
            .map(|(r, c)| {
                json!({
                    "key": r.key,
                    "tool": r.tool,
                    "updated_at": r.updated_at,
                    "compensation": c.as_ref().map(|c| json!({"state": c.state, "reason": c.reason})),
                })
            })
            .collect();
        json!({
            "run": run,
            "to_compensate": pending,
            "already_compensated": self.already.iter().map(|r| &r.key).collect::<Vec<_>>(),
            "marked_compensated": marked.marked,
            "refused": marked.refused.iter().map(|(k, e)| json!({"key": k, "error": e})).collect::<Vec<_>>(),
        })
    }

    fn write_text(&self, run: &str, mark_compensated: bool, marked: &Marked, io: &mut Io<'_>) -> Result<(), CliError> {
        if self.pending.is_empty() {
            return write(
                io.out,
                &format!(
                    "run {}: nothing to compensate (no completed compensable effects; {} already compensated)\n",
                    clean(run),
                    self.already.len()
                ),
            );
        }
        if mark_compensated {
            let mut text = String::new();
            for k in &marked.marked {
                text.push_str(&format!("marked compensated (undone by hand): {}\n", clean(k)));
            }
            for (k, e) in &marked.refused {
                text.push_str(&format!("not marked: {}: {}\n", clean(k), e));
            }
            return write(io.out, &text);
        }
        self.write_table(run, io)
    }

    /// The effects to undo, their compensations' states, and the two ways to undo them.
    fn write_table(&self, run: &str, io: &mut Io<'_>) -> Result<(), CliError> {
        let n = self.pending.len();
        write(
            io.out,
            &format!(
                "run {}: {n} completed compensable effect{} to undo, newest first:\n",
                clean(run),
                if n == 1 { "" } else { "s" }
            ),
        )?;
        let mut table = Table::new(vec!["TOOL", "UPDATED", "COMPENSATION", "KEY"]);
        for (r, c) in self.pending.iter().zip(&self.compensations) {
            let comp = match c {
                None => "not started".to_owned(),
                Some(c) if c.state == RecordState::Released => {
                    format!("failed: {}", c.reason.as_deref().unwrap_or("no reason recorded"))
                }
                Some(c) => c.state.to_string(),
            };
            table.row(vec![r.tool.clone(), time(r.updated_at), comp, r.key.clone()]);
        }
        table.write(io.out).map_err(io_error)?;
        let q = shell_quote(run);
        write(
            io.out,
            &format!(
                "effect-tool has no tool code, so it cannot run compensations. Either:\n  \
                 - abandon the run from your application, which runs each compensation once, journaled:\n    \
                 engine.abandon_run(&RunContext::new({run:?}), &tools).await\n  \
                 - or undo them by hand, then record it: effect-tool abandon {q} --mark-compensated\n"
            ),
        )
    }
}

/// What `--mark-compensated` recorded.
#[derive(Default)]
struct Marked {
    marked: Vec<String>,
    /// The keys not marked, with why.
    refused: Vec<(String, String)>,
}

/// Record each of `pending` as compensated by hand by `by` (the core's
/// `record_compensated_by_hand`: its compensation journaled under the key the engine uses, so
/// `Engine::abandon_run` never runs it again).
async fn mark_by_hand(store: &dyn Store, pending: &[EffectRecord], by: &str) -> Marked {
    let mut marked = Marked::default();
    for rec in pending {
        match record_compensated_by_hand(store, rec, by).await {
            Ok(()) => marked.marked.push(rec.key.clone()),
            Err(ByHandRefused::Store(e)) => marked.refused.push((rec.key.clone(), CliError::from(e).to_string())),
            Err(e) => marked.refused.push((rec.key.clone(), e.to_string())),
        }
    }
    marked
}

// ---------------------------------------------------------------------------------------------
// gc

async fn gc(store: &dyn Store, dry_run: bool, json: bool, io: &mut Io<'_>) -> Result<(), CliError> {
    let now = store.now();
    if dry_run {
        let listing = store.list_report(&Filter::all()).await?;
        let note = skipped_note(&listing);
        let keys: Vec<&str> = listing
            .records
            .iter()
            .filter(|r| collectable(r, now))
            .map(|r| r.key.as_str())
            .collect();
        if json {
            let skipped = listing.skipped_keys();
            return write_json(
                io.out,
                &json!({ "dry_run": true, "would_drop": keys, "skipped": skipped }),
            );
        }
        let mut text = format!("would drop {} expired record{}\n", keys.len(), plural(keys.len()));
        for k in keys {
            text.push_str(&format!("  {}\n", clean(k)));
        }
        text.push_str(note.as_deref().unwrap_or_default());
        return write(io.out, &text);
    }
    let dropped = store.gc(now).await?;
    if json {
        return write_json(io.out, &json!({ "dropped": dropped }));
    }
    write(
        io.out,
        &format!(
            "dropped {dropped} expired record{} (records in doubt or awaiting approval are kept whatever their ttl)\n",
            plural(dropped as usize)
        ),
    )
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

// ---------------------------------------------------------------------------------------------
// key, canon, manifest

fn key(args: KeyArgs, json: bool, io: &mut Io<'_>) -> Result<(), CliError> {
    let input = parse_json(&read_stdin(io, "the arguments JSON")?, "the arguments on stdin")?;
    let secrets: Vec<&str> = args.secrets.iter().map(String::as_str).collect();
    let redacted = redact(input, &secrets);
    let rule = if args.fields.is_empty() {
        KeyRule::Default
    } else {
        // The rule borrows 'static names; this process ends right after.
        let fields: Vec<&'static str> = args
            .fields
            .into_iter()
            .map(|f| &*Box::leak(f.into_boxed_str()))
            .collect();
        KeyRule::Fields(Box::leak(fields.into_boxed_slice()))
    };
    let mut run = RunContext::new(args.run);
    if let Some(t) = args.thread {
        run = run.with_thread(t);
    }
    let k = call_key(rule, args.window.into(), &run, &args.tool, &redacted, None);
    if json {
        return write_json(
            io.out,
            &json!({
                "key": k.key,
                "fingerprint": k.fingerprint,
                "canonical": canonical::to_string(&redacted),
            }),
        );
    }
    write(io.out, &format!("{}\n", k.key))
}

fn canon(hash: bool, json: bool, io: &mut Io<'_>) -> Result<(), CliError> {
    let value = parse_json(&read_stdin(io, "the JSON")?, "stdin")?;
    let text = canonical::to_string(&value);
    if json {
        return write_json(
            io.out,
            &json!({ "canonical": text, "sha256": sha256_hex(text.as_bytes()) }),
        );
    }
    if hash {
        return write(io.out, &format!("{}\n", sha256_hex(text.as_bytes())));
    }
    write(io.out, &text)?;
    if io.terminal {
        write(io.out, "\n")?;
    }
    Ok(())
}

fn manifest(args: ManifestArgs, json: bool, io: &mut Io<'_>) -> Result<(), CliError> {
    let text = if args.file == "-" {
        read_stdin(io, "the manifest")?
    } else {
        read_file(&args.file, "manifest")?
    };
    let text = checked_manifest(&text, &args.file)?;
    let Some(committed_path) = args.check else {
        if json {
            let tools: Vec<&str> = text
                .lines()
                .skip(1)
                .filter(|l| !l.starts_with('#'))
                .filter_map(|l| l.split(' ').next())
                .collect();
            return write_json(io.out, &json!({ "manifest": text, "tools": tools }));
        }
        return write(io.out, &text);
    };
    if json && args.markdown {
        return Err(CliError::Usage("give --json or --markdown, not both".into()));
    }
    let committed = checked_manifest(&read_file(&committed_path, "committed manifest")?, &committed_path)?;
    let diff = line_diff(&committed, &text);
    let review = review::diff(
        &declarations(&committed, &committed_path)?,
        &declarations(&text, &args.file)?,
    );
    let (committed_name, printed_name) = (clean(&committed_path), clean(&args.file));
    if json {
        let mut out = review.to_json();
        out["matches"] = json!(diff.is_empty());
        out["diff"] = json!(diff);
        write_json(io.out, &out)?;
    } else if args.markdown {
        write(io.out, &clean_lines(&review_markdown(&review, &diff)))?;
    } else if diff.is_empty() {
        write(io.out, &format!("manifest matches {committed_name}\n"))?;
    } else {
        let mut out = if review.is_empty() {
            "no declaration changed; the manifest's text differs:\n".to_owned()
        } else {
            format!(
                "{} declaration change{} to review, riskiest first:\n{}\n",
                review.changes.len(),
                plural(review.changes.len()),
                clean_lines(&review.to_text())
            )
        };
        out.push_str(&format!("--- {committed_name} (committed)\n+++ {printed_name}\n"));
        for line in &diff {
            out.push_str(&clean(line));
            out.push('\n');
        }
        write(io.out, &out)?;
    }
    if diff.is_empty() {
        return Ok(());
    }
    let (high, medium, low) = review.counts();
    Err(CliError::Refused(format!(
        "the manifest differs from {committed_name} in {} line{} ({}): review what each change does, then commit the new manifest",
        diff.len(),
        plural(diff.len()),
        if review.is_empty() {
            "no declaration changed".to_owned()
        } else {
            format!(
                "{} declaration change{}: {high} high, {medium} medium, {low} low risk",
                review.changes.len(),
                plural(review.changes.len())
            )
        },
    )))
}

// policy

fn policy(command: PolicyCommand, json: bool, io: &mut Io<'_>) -> Result<(), CliError> {
    use effect_tool_core::decide::cedar::{self, Policies, PolicyError, PolicyTool};
    let tools_of = |path: &str| -> Result<Vec<PolicyTool>, CliError> {
        let text = read_file(path, "the tools")?;
        serde_json::from_str(&text).map_err(|e| {
            CliError::Usage(format!(
                "the tools `{}` are not the JSON of `toolkit.policy_tools()` ({e}): print them from your binary with `serde_json::to_string(&toolkit.policy_tools())`",
                clean(path)
            ))
        })
    };
    let schema_error = |e: PolicyError| CliError::Usage(format!("{e}"));
    match command {
        PolicyCommand::Schema { tools } => {
            let tools = tools_of(&tools)?;
            if json {
                return write_json(io.out, &cedar::schema(&tools).map_err(schema_error)?);
            }
            let text = cedar::schema_text(&tools).map_err(schema_error)?;
            write(
                io.out,
                &format!(
                    "{}
",
                    text.trim_end()
                ),
            )
        }
        PolicyCommand::Check { file, tools } => {
            let tools = tools_of(&tools)?;
            let text = if file == "-" {
                read_stdin(io, "the policies")?
            } else {
                read_file(&file, "the policies")?
            };
            let name = if file == "-" { "stdin".to_owned() } else { clean(&file) };
            let policies = Policies::parse(&text).map_err(|e| CliError::Usage(format!("`{name}`: {e}")))?;
            match policies.check(&tools) {
                Ok(advice) => {
                    if json {
                        return write_json(
                            io.out,
                            &json!({ "valid": true, "policies": policies.len(), "advice": advice }),
                        );
                    }
                    let mut out = format!(
                        "{name}: {} polic{} fit the {} tool{}\n",
                        policies.len(),
                        if policies.len() == 1 { "y" } else { "ies" },
                        tools.len(),
                        if tools.len() == 1 { "" } else { "s" }
                    );
                    for a in &advice {
                        out.push_str(&format!("advice: {a}\n"));
                    }
                    write(io.out, &out)
                }
                Err(PolicyError::Invalid(problems)) => {
                    if json {
                        write_json(io.out, &json!({ "valid": false, "problems": problems }))?;
                    } else {
                        let listed: String = problems.iter().map(|p| format!("{name}: {p}\n")).collect();
                        write(io.out, &listed)?;
                    }
                    Err(CliError::Refused(format!(
                        "`{name}` does not fit the tools' schema ({} problem{}, listed on stdout): fix each policy, or print the tools again if they changed",
                        problems.len(),
                        if problems.len() == 1 { "" } else { "s" }
                    )))
                }
                Err(e) => Err(CliError::Usage(format!("`{name}`: {e}"))),
            }
        }
    }
}

/// The declarations of a checked manifest; a line the review cannot read is bad input.
fn declarations(text: &str, name: &str) -> Result<Vec<review::Declaration>, CliError> {
    review::parse(text).map_err(|e| {
        CliError::Usage(format!(
            "cannot read the manifest `{}`: {e} (print it from your binary with `effect_tool::toolkit::manifest::render(&toolkit.metas())`)",
            clean(name)
        ))
    })
}

/// Each line of `text` [`clean`]ed: a control or format character in a declaration (a key
/// closure, a role) cannot rewrite what a reviewer sees.
fn clean_lines(text: &str) -> String {
    text.lines().map(|l| format!("{}\n", clean(l))).collect()
}

/// The review as a pull-request comment, with the differing lines folded below it.
fn review_markdown(review: &review::Review, diff: &[String]) -> String {
    let mut out = review.to_markdown();
    if !diff.is_empty() {
        out.push_str("\n<details><summary>The manifest lines that differ</summary>\n\n```diff\n");
        for line in diff {
            // A line cannot close the fence: it starts with `-` or `+`.
            out.push_str(line);
            out.push('\n');
        }
        out.push_str("```\n\n</details>\n");
    }
    out
}

/// `text` normalized, if it is a manifest (its first line is [`manifest::HEADER`]).
fn checked_manifest(text: &str, name: &str) -> Result<String, CliError> {
    let text = normalize_manifest(text);
    match text.lines().next() {
        Some(first) if first == manifest::HEADER => Ok(text),
        None => Err(CliError::Usage(format!(
            "the manifest `{}` is empty: print it from your binary with `effect_tool::toolkit::manifest::render(&toolkit.metas())`",
            clean(name)
        ))),
        Some(_) => Err(CliError::Usage(format!(
            "`{}` is not an effect-tool manifest: its first line must be `{}` (print it from your binary with `effect_tool::toolkit::manifest::render(&toolkit.metas())`)",
            clean(name),
            manifest::HEADER
        ))),
    }
}

fn read_file(path: &str, what: &str) -> Result<String, CliError> {
    std::fs::read_to_string(path).map_err(|e| CliError::Usage(format!("cannot read {what} `{}`: {e}", clean(path))))
}

/// Line endings as `\n`, no trailing spaces, no blank lines at either end, one final
/// newline: the same manifest compares equal whatever editor or platform saved it.
fn normalize_manifest(text: &str) -> String {
    let lines: Vec<&str> = text.lines().map(str::trim_end).collect();
    let start = lines.iter().position(|l| !l.is_empty()).unwrap_or(lines.len());
    let end = lines.iter().rposition(|l| !l.is_empty()).map_or(start, |e| e + 1);
    lines[start..end].iter().map(|l| format!("{l}\n")).collect()
}

/// The lines removed (`-`) from `old` and added (`+`) in `new`, in order (a longest common
/// subsequence diff; manifests are small).
fn line_diff(old: &str, new: &str) -> Vec<String> {
    let a: Vec<&str> = old.lines().collect();
    let b: Vec<&str> = new.lines().collect();
    let mut lcs = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let (mut i, mut j, mut out) = (0, 0, Vec::new());
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            i += 1;
            j += 1;
        } else if i < a.len() && (j == b.len() || lcs[i + 1][j] >= lcs[i][j + 1]) {
            out.push(format!("-{}", a[i]));
            i += 1;
        } else {
            out.push(format!("+{}", b[j]));
            j += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diffs() {
        assert!(line_diff("a\nb\n", "a\nb\n").is_empty());
        assert_eq!(line_diff("a\nb\nc\n", "a\nx\nc\n"), vec!["-b", "+x"]);
        assert_eq!(line_diff("", "a\n"), vec!["+a"]);
        assert_eq!(normalize_manifest("\n a  \r\nb\n\n\n"), " a\nb\n");
        assert_eq!(normalize_manifest("\n\n"), "");
    }

    /// A fingerprint prefix names one input: at least 16 hex digits, one match among the
    /// fingerprints seen under the key; none passes on whole (the journal refuses it).
    #[test]
    fn fingerprint_prefixes() {
        let parked = format!("{}{}", "ab".repeat(8), "0".repeat(48));
        let older = format!("{}{}", "ab".repeat(8), "1".repeat(48));
        let known = vec![parked.clone(), older.clone()];
        let refused = |p: &str| match expand_fingerprint(p, &known) {
            Err(CliError::Usage(m)) => m,
            other => panic!("{p}: {other:?}"),
        };
        assert!(refused(&parked[..15]).contains("too short"));
        assert!(refused("xyz").contains("not hex"));
        assert!(refused(&parked[..16]).contains("ambiguous"), "both begin with it");
        assert_eq!(expand_fingerprint(&parked[..17], &known).unwrap(), parked);
        assert_eq!(expand_fingerprint(&older.to_uppercase()[..20], &known).unwrap(), older);
        let unknown = "c".repeat(20);
        assert_eq!(expand_fingerprint(&unknown, &known).unwrap(), unknown);
    }
}
