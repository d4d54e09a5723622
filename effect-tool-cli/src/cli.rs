//! The command line, as clap types.

use clap::{ArgGroup, Args, Parser, Subcommand, ValueEnum};
use effect_tool_core::store::Cursor;
use effect_tool_core::{RecordState, Window};

/// Shown after `--help`: the store, the exit codes.
const AFTER_HELP: &str = "\
The journal store: --store or EFFECT_TOOL_STORE, a SQLite file path (the file must exist: the
application creates it) or a postgres:// URL (add ?schema=NAME if the application uses another
schema than effect_tool; TLS as libpq: ?sslmode=verify-full&sslrootcert=CA.pem). Only list, show,
resolve, approve, deny, abandon and gc need it; key, canon and manifest work offline.

Exit codes:
  0  success
  1  not found or refused: no record under the key, no records for the run, or the journal
     refused the operation (e.g. resolving a record that is not in doubt, approving as the
     wrong role), or `manifest --check` found a difference
  2  usage or bad input: unknown option, invalid JSON, missing --store
  3  the store is unreachable or failed (cannot open the file, cannot connect, query failed),
     or the output could not be written

Errors are one line on stderr, starting with `error:`. With --json, results are JSON on stdout.";

/// Operate the journal of effect-tool: list, inspect and resolve journaled tool effects,
/// approve or deny parked calls, compute keys and canonical JSON.
#[derive(Debug, Parser)]
#[command(name = "effect-tool", version, after_help = AFTER_HELP, max_term_width = 100)]
pub struct Cli {
    /// The journal: a SQLite file path or a postgres:// URL.
    #[arg(
        long,
        global = true,
        env = "EFFECT_TOOL_STORE",
        hide_env_values = true,
        value_name = "PATH|URL"
    )]
    pub store: Option<String>,

    /// Print JSON for scripts instead of tables and sentences.
    #[arg(long, global = true)]
    pub json: bool,

    /// Who acts (approve, deny): a CLI token the identities file lists, or --local-admin.
    #[command(flatten)]
    pub identity: crate::identity::IdentityArgs,

    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// List journaled effects, newest first (filter by run, tool, state).
    List(ListArgs),
    /// Show one record and its audit trail, with what a person can do next.
    Show {
        /// The effect key.
        #[arg(required_unless_present = "marker")]
        key: Option<String>,
        /// Find the record by a marker found in content a tool created (an email, a comment):
        /// the whole `<!-- effect-tool:marker=... -->`, or its 32-digit id. The journal
        /// computes each key's id under its marker secret until one matches (a scan).
        #[arg(long, value_name = "MARKER", conflicts_with = "key")]
        marker: Option<String>,
    },
    /// Record a person's verdict on an effect in doubt: it happened (with its output) or not.
    ///
    /// A verdict stands once given: resolving the record again is refused. To correct a
    /// resolution (an output of the wrong shape, or --applied when the effect did not
    /// happen), give the right verdict with --amend.
    Resolve(ResolveArgs),
    /// Approve a call awaiting approval: its next call runs it.
    ///
    /// An approval is for the input you were shown: the command prints the parked input, and
    /// approves it only if --fingerprint names it (as `effect-tool show KEY` prints it; its
    /// first 16 hex digits are enough). When the model called the key again with other
    /// arguments after you looked, nothing is approved and the new input is shown. Without
    /// --fingerprint, it asks on a terminal, and refuses when stdin is not one.
    Approve {
        /// The effect key.
        key: String,
        /// The role you approve as; it must be the role the tool asks for, and, with a CLI
        /// token, one the identities file gives you (believed with --local-admin).
        #[arg(long = "as", value_name = "ROLE")]
        role: String,
        /// The fingerprint of the input you approve, or its first 16 or more hex digits.
        #[arg(long, value_name = "HEX")]
        fingerprint: Option<String>,
        /// Who approves (recorded in the audit trail), believed with the role of --as.
        /// Deprecated: use a CLI token (EFFECT_TOOL_TOKEN with --identities FILE) or
        /// --local-admin; refused when an identities file is given, ignored with a token or
        /// --local-admin.
        #[arg(long, env = "USER", value_name = "NAME")]
        by: Option<String>,
        /// Approve the call with edited arguments: a JSON object of the fields to change,
        /// merged over the parked input (`null` removes a field), e.g.
        /// `--edit '{"amount_cents": 1000}'`. The edit is checked against the tool's
        /// parameters; sensitive fields cannot be edited. The call then runs once, with the
        /// edited arguments, and the model is told which fields changed.
        #[arg(long, value_name = "JSON")]
        edit: Option<String>,
    },
    /// Deny a call awaiting approval: its next call fails with the reason.
    Deny {
        /// The effect key.
        key: String,
        /// Why, in words the model and the audit trail will read.
        #[arg(long)]
        reason: Option<String>,
        /// Who denies (recorded in the audit trail). Deprecated, as for approve: use a CLI
        /// token or --local-admin.
        #[arg(long, env = "USER", value_name = "NAME")]
        by: Option<String>,
    },
    /// Show what abandoning a run must undo, or record that a person undid it by hand.
    ///
    /// Lists the run's completed compensable effects, newest first (the order they are undone
    /// in), with the state of any compensation already attempted. Running a compensation needs
    /// the tool's code, which lives in the application: call `Engine::abandon_run` there (it
    /// journals each compensation so it runs once). With --mark-compensated, a person who
    /// undid the effects by hand records it instead.
    Abandon(AbandonArgs),
    /// Drop records whose ttl has passed (records in doubt or awaiting approval are kept).
    Gc {
        /// Only list what would be dropped.
        #[arg(long)]
        dry_run: bool,
    },
    /// Print the default effect key of a call; reads the arguments JSON on stdin.
    ///
    /// The key is `<run>:<tool>:<sha256 of the RFC 8785 form of the arguments>` (see --window
    /// for the other scopes), secrets (--secret) left out, as the runtime computes it. A custom
    /// key closure (`key = |a| ...`) is code in the application: for those tools the key is
    /// `<run>:<what the closure returns>`.
    Key(KeyArgs),
    /// Print the RFC 8785 canonical form of the JSON on stdin.
    ///
    /// The output is exactly the canonical bytes: when stdout is a pipe or a file no newline is
    /// added, so `effect-tool canon < args.json | sha256sum` hashes the canonical form; on a
    /// terminal a newline is added for readability.
    Canon {
        /// Print the SHA-256 hex of the canonical form (the record's fingerprint when the input
        /// has no secret fields) instead, with a newline.
        #[arg(long)]
        hash: bool,
    },
    /// Print or check a toolkit's manifest (stable text for code review).
    ///
    /// The manifest lists every tool's name, class, key rule, window, approval and
    /// recover/compensate hooks.
    ///
    /// With --check COMMITTED, each changed declaration is listed with what it does at run
    /// time, riskiest first (high: a call may now run twice, run without a person, or keep a
    /// sensitive value; medium: when or how it runs changes; low: safer). --markdown prints it
    /// for a pull-request comment, --json for scripts.
    ///
    /// effect-tool cannot load your tools (they are code in your binary): print the manifest
    /// there with `effect_tool::toolkit::manifest::render(&toolkit.metas())`, save it, and give the file
    /// here to print it or --check it against the committed one.
    Manifest(ManifestArgs),
    /// Check a deployment's Cedar policies against the tools, or print the tools' Cedar schema.
    ///
    /// The schema has one entity type per tool (`Tool::<name>`, its arguments as the record
    /// `args`, typed from the tool's JSON Schema), the `Principal`, and the actions `call` and
    /// `call_without_approval`. A policy that names a tool, an argument or an action the tools
    /// do not have fails the check (exit 1), with one line per problem.
    ///
    /// effect-tool cannot load your tools (they are code in your binary): print them there as
    /// JSON with `serde_json::to_string(&toolkit.policy_tools())`, save the file, and give it
    /// with --tools.
    #[command(subcommand)]
    Policy(PolicyCommand),

    /// An MCP gateway: serve the tools of the upstream MCP servers of `effect-tool.gateway.toml`
    /// (over stdio, or Streamable HTTP with --listen), every call through the journal under its
    /// declaration; `gateway check` compares the file with the upstreams' live tools.
    Gateway(crate::gateway::GatewayArgs),
    /// Standing approvals: approve a tool's calls in advance (`grant add`), list them, revoke
    /// them.
    Grant(crate::grant::GrantArgs),
    /// Serve the journal's metrics for Prometheus at `GET /metrics`, with --tokens or
    /// --trusted-proxy the operator API at `/api/...`, and with --callbacks providers'
    /// callbacks at `POST /callback`, until interrupted.
    ///
    /// The gauges of the records that need a person, by state and tool, and the age of the
    /// oldest (`effect_tool_records_needing_person`,
    /// `effect_tool_records_needing_person_oldest_age_seconds`, `effect_tool_journal_up`), read
    /// from the journal on every scrape. The calls' counters and latencies live in the processes
    /// that call tools: they serve them with `effect_tool::ops::prometheus::PrometheusMetrics`.
    /// Alert rules and a Grafana dashboard are in the repository's `deploy/` folder.
    Serve {
        /// The address to listen on. Loopback by default: the page names tools and counts.
        #[arg(long, default_value = "127.0.0.1:9464", value_name = "ADDR")]
        listen: std::net::SocketAddr,
        /// Serve the operator API to the holders of these bearer tokens: a file of
        /// `token name role,role` lines.
        #[arg(long, value_name = "FILE")]
        tokens: Option<std::path::PathBuf>,
        /// Serve the operator API to the users an authenticating proxy at this address names
        /// in `X-Forwarded-User` (roles from `X-Forwarded-Groups`). Repeatable. Every process
        /// that can connect from this address is believed as the proxy: a loopback address
        /// trusts every local process and user, so run the proxy on its own address (or
        /// host) where others share the machine.
        #[arg(long = "trusted-proxy", value_name = "IP")]
        trusted_proxies: Vec<std::net::IpAddr>,
        /// With --trusted-proxy: believe the proxy's headers only on requests that also carry
        /// `X-Effect-Tool-Proxy-Secret` with the value in this file (readable by its owner only),
        /// which the proxy adds to every request it forwards. Then no other process at the
        /// proxy's address can name an operator.
        #[arg(long = "proxy-secret-file", value_name = "FILE", requires = "trusted_proxies")]
        proxy_secret_file: Option<std::path::PathBuf>,
        /// A role that may read records through the API (their inputs, outputs and audit
        /// trails). Repeatable; by default any role may, and an identity without a role reads
        /// nothing.
        #[arg(long = "reader-role", value_name = "ROLE")]
        reader_roles: Vec<String>,
        /// The role that may resolve and amend records through the API.
        #[arg(long, default_value = "operator", value_name = "ROLE")]
        resolver_role: String,
        /// A name the operator API answers to (`Host`): `NAME` (any port) or `NAME:PORT`.
        /// Repeatable; it replaces the default, `localhost`, `127.0.0.1` and `[::1]` with the
        /// port listened on. Give the names operators (or the authenticating proxy) use to reach
        /// it: requests to other names are refused, so that a web page whose DNS name is pointed
        /// at this server cannot use the API.
        #[arg(long = "allow-host", value_parser = parse_allowed_host, value_name = "NAME[:PORT]")]
        allowed_hosts: Vec<String>,
        /// An origin whose pages may act through the operator API (`https://NAME[:PORT]`, as
        /// browsers send it in `Origin`). Repeatable; by default, the allowed hosts over http or
        /// https. Requests from pages of other origins are refused.
        #[arg(long = "allow-origin", value_parser = parse_allowed_origin, value_name = "ORIGIN")]
        allowed_origins: Vec<String>,
        /// Also receive providers' callbacks at `POST /callback`: the answers that settle the
        /// records of tools that wait for one (`ctx.pending`), verified with the journal's
        /// marker secret. Providers call from elsewhere, so the route answers to any `Host`
        /// (the operator API's host check does not apply to it): the callback token is its only
        /// credential, so put it behind TLS (a reverse proxy) and listen where providers reach.
        #[arg(long)]
        callbacks: bool,
    },
}

/// `list` options.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only this run.
    #[arg(long)]
    pub run: Option<String>,
    /// Only this tool.
    #[arg(long)]
    pub tool: Option<String>,
    /// Only these states (repeat or comma-separate): claimed, completed, in-doubt,
    /// awaiting-approval, approved, denied, released, compensated, or stale (a claim whose lease
    /// expired: its worker crashed or hangs).
    #[arg(long, value_delimiter = ',', value_parser = parse_state_filter, value_name = "STATE")]
    pub state: Vec<StateFilter>,
    /// At most this many records. When there are more, the last line says how to read the
    /// next page (`--after CURSOR`).
    #[arg(long)]
    pub limit: Option<usize>,
    /// Only records last updated at or after WHEN: an RFC 3339 time (`2026-12-01T09:00:00Z`)
    /// or a time ago (`90m`, `2h`, `7days`).
    #[arg(long, value_parser = parse_when, value_name = "WHEN")]
    pub since: Option<When>,
    /// Only records last updated before WHEN (as --since).
    #[arg(long, value_parser = parse_when, value_name = "WHEN")]
    pub before: Option<When>,
    /// The next page: the records after CURSOR, as the previous page's last line printed it.
    #[arg(long, value_parser = parse_cursor, value_name = "CURSOR")]
    pub after: Option<Cursor>,
}

/// A point in time on the command line: an instant, or a span before now (the journal's clock).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    /// Milliseconds since the Unix epoch.
    At(i64),
    /// This long before now.
    Ago(std::time::Duration),
}

impl When {
    /// Milliseconds since the Unix epoch, `now` being the journal's clock.
    pub fn millis(self, now: i64) -> i64 {
        match self {
            When::At(ms) => ms,
            When::Ago(d) => now.saturating_sub(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
        }
    }
}

fn parse_when(s: &str) -> Result<When, String> {
    if let Ok(t) = humantime::parse_rfc3339_weak(s) {
        let ms = t
            .duration_since(std::time::UNIX_EPOCH)
            .map_err(|_| format!("`{s}` is before 1970"))?
            .as_millis();
        return Ok(When::At(i64::try_from(ms).unwrap_or(i64::MAX)));
    }
    humantime::parse_duration(s)
        .map(When::Ago)
        .map_err(|_| format!("`{s}` is neither a time (2026-12-01T09:00:00Z) nor a time ago (90m, 2h, 7days)"))
}

/// The text form of a listing's place: `<updated_at ms>:<key>`.
pub fn cursor_text(c: &Cursor) -> String {
    format!("{}:{}", c.updated_at, c.key)
}

fn parse_cursor(s: &str) -> Result<Cursor, String> {
    let bad = || format!("`{s}` is not a cursor: give the `--after` value the previous page printed");
    let (at, key) = s.split_once(':').ok_or_else(bad)?;
    let updated_at = at.parse().map_err(|_| bad())?;
    if key.is_empty() {
        return Err(bad());
    }
    Ok(Cursor {
        updated_at,
        key: key.to_owned(),
    })
}

/// `resolve` options.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("verdict").required(true).args(["applied", "not_applied"])))]
pub struct ResolveArgs {
    /// The effect key.
    pub key: String,
    /// The effect happened: the next call returns `--output` instead of running.
    #[arg(long)]
    pub applied: bool,
    /// The output to record with --applied: JSON text, `@FILE` to read a file, or `-` for
    /// stdin. Required with --applied (a forgotten output recorded as null would fail every
    /// replay); it must decode as the tool's output type (`null` for a tool that returns
    /// nothing), or every call of the key fails until the resolution is amended.
    #[arg(long, conflicts_with = "not_applied", value_name = "JSON")]
    pub output: Option<String>,
    /// The effect did not happen: the next call applies it.
    #[arg(long)]
    pub not_applied: bool,
    /// Correct a person's earlier resolution of this key (a wrong output, or --applied when
    /// the effect did not happen): the new verdict replaces it, and the audit trail keeps
    /// both. Allowed while that resolution stands (until a call runs the key again); never on
    /// an output the tool recorded itself, nor on a record no person has resolved.
    #[arg(long)]
    pub amend: bool,
    /// Who decides (recorded in the audit trail). Deprecated: use a CLI token
    /// (EFFECT_TOOL_TOKEN with --identities FILE) or --local-admin.
    #[arg(long, env = "USER", value_name = "NAME")]
    pub by: Option<String>,
}

/// `abandon` options.
#[derive(Debug, Args)]
pub struct AbandonArgs {
    /// The run to abandon.
    pub run: String,
    /// You undid the effects by hand: journal each compensation as done (so the application's
    /// `Engine::abandon_run` never runs it again) and mark the effects compensated.
    #[arg(long)]
    pub mark_compensated: bool,
    /// Who undid them (recorded in the audit trail). Deprecated: use a CLI token
    /// (EFFECT_TOOL_TOKEN with --identities FILE) or --local-admin.
    #[arg(long, env = "USER", value_name = "NAME")]
    pub by: Option<String>,
}

/// `key` options.
#[derive(Debug, Args)]
pub struct KeyArgs {
    /// The run id.
    #[arg(long)]
    pub run: String,
    /// The tool's name.
    #[arg(long)]
    pub tool: String,
    /// The thread id (used by the `thread` window; without it the window falls back to the run).
    #[arg(long)]
    pub thread: Option<String>,
    /// Where the key is unique, as the tool declares it.
    #[arg(long, value_enum, default_value_t = WindowArg::Run)]
    pub window: WindowArg,
    /// A secret argument field of the tool (repeatable): left out of the key, as the runtime does.
    #[arg(long = "secret", value_name = "FIELD")]
    pub secrets: Vec<String>,
    /// The tool's `key(field, ...)` rule: hash only these argument fields.
    #[arg(long, value_delimiter = ',', value_name = "FIELD,...")]
    pub fields: Vec<String>,
}

/// `manifest` options.
#[derive(Debug, Args)]
pub struct ManifestArgs {
    /// A manifest printed by your binary (`effect_tool::toolkit::manifest::render`), or `-` for stdin.
    pub file: String,
    /// The committed manifest to compare with: print each changed declaration with what it
    /// does at run time, riskiest first, then the differing lines; exit 1 if they differ.
    #[arg(long, value_name = "FILE")]
    pub check: Option<String>,
    /// With --check: print the review as Markdown for a pull-request comment (a table, riskiest
    /// first, and the differing lines folded below it).
    #[arg(long, requires = "check")]
    pub markdown: bool,
}

/// `policy` subcommands.
#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Validate Cedar policies against the tools' schema (Cedar's strict mode); exit 1 with
    /// one line per problem when they do not fit, 2 when they do not parse.
    Check {
        /// The policies (`.cedar`), or `-` for stdin.
        file: String,
        /// The tools: the JSON your binary prints with `toolkit.policy_tools()`.
        #[arg(long, env = "EFFECT_TOOL_POLICY_TOOLS", value_name = "FILE")]
        tools: String,
    },
    /// Print the tools' Cedar schema (Cedar's schema syntax; with --json, its JSON form).
    Schema {
        /// The tools: the JSON your binary prints with `toolkit.policy_tools()`.
        #[arg(long, env = "EFFECT_TOOL_POLICY_TOOLS", value_name = "FILE")]
        tools: String,
    },
}

/// A key window, as written on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum WindowArg {
    /// Unique within one run.
    Run,
    /// Unique within one thread, across its runs.
    Thread,
    /// Unique everywhere the store is shared.
    CrossRun,
}

impl From<WindowArg> for Window {
    fn from(w: WindowArg) -> Window {
        match w {
            WindowArg::Run => Window::Run,
            WindowArg::Thread => Window::Thread,
            WindowArg::CrossRun => Window::CrossRun,
        }
    }
}

/// A `--state` value: a stored state, or `stale` (a claim whose lease has expired).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateFilter {
    /// Records in this state.
    State(RecordState),
    /// Claims whose lease has expired.
    Stale,
}

/// `NAME` or `NAME:PORT`, as `Console::with_allowed_hosts` takes it.
fn parse_allowed_host(s: &str) -> Result<String, String> {
    let why = || {
        format!(
            "`{s}` is not a host name, or a host name and a port (e.g. console.example.com, 10.0.0.5:8090, [::1]:8090)"
        )
    };
    let parsed: axum::http::uri::Authority = s.parse().map_err(|_| why())?;
    let after_host = match s.strip_prefix('[') {
        Some(v6) => v6.split_once(']').map_or("", |(_, rest)| rest),
        None => s.find(':').map_or("", |at| &s[at..]),
    };
    let port_ok = after_host.is_empty() || parsed.port_u16().is_some_and(|p| after_host == format!(":{p}"));
    if parsed.as_str() != s || s.contains('@') || parsed.host().is_empty() || !port_ok {
        return Err(why());
    }
    Ok(s.to_owned())
}

/// `http://NAME[:PORT]` or `https://NAME[:PORT]`, as `Console::with_allowed_origins` takes it.
fn parse_allowed_origin(s: &str) -> Result<String, String> {
    let why = || format!("`{s}` is not an origin: give https://NAME or https://NAME:PORT, as a browser sends it");
    let (scheme, rest) = s.split_once("://").ok_or_else(why)?;
    if !scheme.eq_ignore_ascii_case("http") && !scheme.eq_ignore_ascii_case("https") {
        return Err(why());
    }
    parse_allowed_host(rest.strip_suffix('/').unwrap_or(rest)).map_err(|_| why())?;
    Ok(s.to_owned())
}

fn parse_state_filter(s: &str) -> Result<StateFilter, String> {
    if s == "stale" {
        return Ok(StateFilter::Stale);
    }
    s.parse::<RecordState>()
        .map(StateFilter::State)
        .map_err(|e| format!("{e}, stale"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn times_and_cursors_parse() {
        assert_eq!(parse_when("2h"), Ok(When::Ago(std::time::Duration::from_secs(7200))));
        assert_eq!(parse_when("1970-01-01T00:00:01Z"), Ok(When::At(1000)));
        assert_eq!(When::Ago(std::time::Duration::from_secs(1)).millis(5000), 4000);
        assert!(parse_when("yesterday-ish").unwrap_err().contains("neither a time"));
        let c = Cursor {
            updated_at: 17,
            key: "run:tool:ab:cd".into(),
        };
        assert_eq!(parse_cursor(&cursor_text(&c)), Ok(c));
        assert!(parse_cursor("no-colon").is_err() && parse_cursor("x:key").is_err());
    }

    #[test]
    fn states_parse() {
        assert_eq!(
            parse_state_filter("in-doubt"),
            Ok(StateFilter::State(RecordState::InDoubt))
        );
        assert_eq!(parse_state_filter("stale"), Ok(StateFilter::Stale));
        assert!(parse_state_filter("doubt").unwrap_err().contains("awaiting-approval"));
    }
}
