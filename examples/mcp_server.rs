//! An MCP server (stdio, or Streamable HTTP) for a support desk's tools, every call journaled
//! in SQLite.
//!
//! ```text
//! cargo run --example mcp_server --features mcp
//! cargo run --example mcp_server --features mcp-http -- --http 127.0.0.1:8080
//! EFFECT_TOOL_MCP_TOKENS=alice=$(openssl rand -hex 32) \
//!   cargo run --example mcp_server --features mcp-http -- --http 0.0.0.0:8080
//! ```
//!
//! Point an MCP client at that command (e.g. Claude Desktop's `mcpServers`, or the Python
//! client in `tests/mcp_client/`), or with `--http ADDR` at `http://ADDR/mcp` (port 0 picks a
//! free port; the URL is printed on standard error). Each tool writes what it does to a ledger
//! file, standing in for the outside world, so you can see that a retried call is applied once.
//!
//! Over HTTP, an address other than loopback needs an authenticator (tokens or JWTs below).
//!
//! Environment (all optional):
//! - `EFFECT_TOOL_DB`: the SQLite journal (default: `mcp-journal.db` in the per-user data
//!   folder, `$XDG_DATA_HOME/effect-tool` or `~/.local/share/effect-tool`, made private);
//! - `EFFECT_TOOL_LEDGER`: the file the tools append their effects to (default:
//!   `mcp-ledger.txt` in the same folder);
//! - `EFFECT_TOOL_RUN_ID`: the run of calls whose `_meta` names none (default: each session
//!   has its own run);
//! - `EFFECT_TOOL_MCP_REQUIRE_RUN_ID=1`: refuse calls whose `_meta` names no run;
//! - `EFFECT_TOOL_MCP_HTTP`: serve Streamable HTTP on this address, as `--http` does;
//! - `EFFECT_TOOL_MCP_TOKENS`: static bearer tokens, `principal=token` separated by commas;
//! - `EFFECT_TOOL_MCP_JWT_ISSUER`, `EFFECT_TOOL_MCP_JWT_AUDIENCE`, `EFFECT_TOOL_MCP_JWKS` (a
//!   JWK Set file): accept OAuth access tokens (JWTs) of this issuer for this audience;
//! - `EFFECT_TOOL_MCP_ORIGINS`: browser origins allowed, separated by commas (default:
//!   loopback ones only);
//! - `EFFECT_TOOL_CARD_KEY`: the card processor's API key `charge_card` takes from the run;
//! - `EFFECT_TOOL_MCP_LOG`: write logs to this file, at TRACE for everything except rmcp,
//!   which is kept at INFO (`trace,rmcp=info`): rmcp logs whole requests, tool arguments
//!   included, at DEBUG and TRACE. `RUST_LOG` replaces that filter.

use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use effect_tool::adapters::mcp::McpServer;
use effect_tool::store::sqlite::SqliteStore;
use effect_tool::{ClassifyError, EffectCtx, Engine, Failure, Toolkit, tools};
use serde::{Deserialize, Serialize};
use sha2::Digest;

/// The outside world: a file every effect is appended to, one line each.
struct Ledger(PathBuf);

impl Ledger {
    fn append(&self, line: &str) -> Result<(), DeskError> {
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.0)
            .map_err(|e| DeskError::Ledger(e.to_string()))?;
        writeln!(file, "{line}").map_err(|e| DeskError::Ledger(e.to_string()))
    }
}

/// What can go wrong at the desk, and whether it happened.
#[derive(Debug)]
enum DeskError {
    UnknownOrder(String),
    Ledger(String),
}

impl std::fmt::Display for DeskError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeskError::UnknownOrder(id) => write!(f, "there is no order `{id}`"),
            DeskError::Ledger(e) => write!(f, "the ledger could not be written: {e}"),
        }
    }
}

impl ClassifyError for DeskError {
    fn failure(&self) -> Option<Failure> {
        Some(match self {
            DeskError::UnknownOrder(_) => Failure::Definitive,
            // The write may or may not have reached the file.
            DeskError::Ledger(_) => Failure::Unknown,
        })
    }
}

const ORDERS: &[(&str, &str, u64)] = &[
    ("A-1001", "ann@example.com", 4_999),
    ("A-1002", "bob@example.com", 12_500),
];

fn order(id: &str) -> Result<(&'static str, u64), DeskError> {
    ORDERS
        .iter()
        .find(|(o, _, _)| *o == id)
        .map(|(_, email, total)| (*email, *total))
        .ok_or_else(|| DeskError::UnknownOrder(id.to_owned()))
}

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
struct OrderInfo {
    order_id: String,
    customer_email: String,
    total_cents: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
struct Refund {
    refund_id: String,
    order_id: String,
    amount_cents: u64,
}

/// The support desk: its tools write their effects to the ledger.
struct Desk {
    ledger: Ledger,
}

#[tools]
impl Desk {
    /// Look up an order by id: the customer's email and the order total.
    #[tool(effect = "pure", open_world = false)]
    async fn lookup_order(
        &self,
        /// The order id, e.g. `A-1001`.
        order_id: String,
    ) -> Result<OrderInfo, DeskError> {
        let (email, total) = order(&order_id)?;
        Ok(OrderInfo {
            order_id,
            customer_email: email.to_owned(),
            total_cents: total,
        })
    }

    /// Refund part of an order, in cents.
    #[tool(effect = "idempotent", key = |a| format!("refund:{}:{}", a.order_id, a.amount_cents), open_world = true)]
    async fn issue_refund(
        &self,
        ctx: &EffectCtx,
        /// The order to refund.
        order_id: String,
        /// How much, in cents.
        amount_cents: u64,
    ) -> Result<Refund, DeskError> {
        order(&order_id)?;
        // A real payment API gets `ctx.idempotency_key()` as its Idempotency-Key.
        let digest = format!("{:x}", sha2::Sha256::digest(ctx.idempotency_key().as_bytes()));
        let refund_id = format!("re_{}", &digest[..12]);
        self.ledger
            .append(&format!("refund {refund_id} {order_id} {amount_cents}"))?;
        Ok(Refund {
            refund_id,
            order_id,
            amount_cents,
        })
    }

    /// Hold an order's shipment until a person looks at it.
    #[tool(effect = "compensable", compensate = release_shipment, open_world = true)]
    async fn hold_shipment(
        &self,
        /// The order whose shipment to hold.
        order_id: String,
    ) -> Result<String, DeskError> {
        order(&order_id)?;
        self.ledger.append(&format!("hold {order_id}"))?;
        Ok(format!("shipment of {order_id} is on hold"))
    }

    /// Undo `hold_shipment` (run when the run that held it is abandoned).
    async fn release_shipment(
        &self,
        _ctx: &EffectCtx,
        args: &DeskHoldShipmentArgs,
        _out: &String,
    ) -> Result<(), DeskError> {
        self.ledger.append(&format!("release {}", args.order_id))
    }

    /// Send an email to a customer.
    #[tool(effect = "irreversible", open_world = true)]
    async fn email_customer(
        &self,
        /// The recipient.
        to: String,
        /// The message.
        body: String,
    ) -> Result<String, DeskError> {
        self.ledger.append(&format!("email {to} {}", body.replace('\n', " ")))?;
        Ok(format!("sent to {to}"))
    }
}

/// The card processor's API key: a value the application holds (from `EFFECT_TOOL_CARD_KEY`),
/// which the server gives every call's run (`McpServer::with_run_values`); never sent by the
/// client, never in a schema, a log or the journal.
#[derive(Clone)]
struct ProcessorKey(String);

/// The card processor: takes a card number (sensitive: never journaled or logged) and the
/// application's key.
struct Cards {
    ledger: Ledger,
}

#[tools]
impl Cards {
    /// Charge a customer's card for an order, once per order.
    #[tool(effect = "idempotent", key(order_id), open_world = true)]
    async fn charge_card(
        &self,
        /// The order to charge for.
        order_id: String,
        /// The card number.
        #[sensitive]
        card_number: String,
        /// The amount, in cents.
        amount_cents: u64,
        #[secret] key: ProcessorKey,
    ) -> Result<String, DeskError> {
        let last4: String = card_number
            .chars()
            .rev()
            .take(4)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        let keyed = if key.0.is_empty() { "no key" } else { "keyed" };
        self.ledger
            .append(&format!("charge {order_id} {amount_cents} card-ending-{last4} {keyed}"))?;
        Ok(format!("charged {amount_cents} cents for {order_id}"))
    }
}

/// `$var`, else `name` in the per-user data folder.
fn env_path(var: &str, name: &str) -> Result<PathBuf, Box<dyn std::error::Error>> {
    if let Some(path) = std::env::var_os(var) {
        return Ok(PathBuf::from(path));
    }
    Ok(data_dir()?.join(name))
}

/// `$XDG_DATA_HOME/effect-tool`, `~/.local/share/effect-tool` or `%LOCALAPPDATA%\effect-tool`,
/// created readable by this user only: the journal holds every call's arguments and output.
fn data_dir() -> Result<PathBuf, Box<dyn std::error::Error>> {
    let base = std::env::var_os("XDG_DATA_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))
        .or_else(|| std::env::var_os("LOCALAPPDATA").map(PathBuf::from))
        .ok_or("no per-user data folder (set HOME, XDG_DATA_HOME or EFFECT_TOOL_DB and EFFECT_TOOL_LEDGER)")?;
    let dir = base.join("effect-tool");
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder
        .create(&dir)
        .map_err(|e| format!("cannot create the data folder {}: {e}", dir.display()))?;
    Ok(dir)
}

/// Logs to the file `EFFECT_TOOL_MCP_LOG`, if set (see the module docs for the filter).
fn init_logs() -> Result<(), Box<dyn std::error::Error>> {
    let Some(path) = std::env::var_os("EFFECT_TOOL_MCP_LOG") else {
        return Ok(());
    };
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(|e| format!("cannot open the log file {}: {e}", PathBuf::from(&path).display()))?;
    // rmcp logs every request and response in full (tool arguments, secrets included) at
    // DEBUG and TRACE: keep it at INFO.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("trace,rmcp=info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(Mutex::new(file))
        .with_ansi(false)
        .init();
    Ok(())
}

/// The support desk's tools, writing their effects to the ledger file at `ledger`. (Also used
/// by `tests/adapters/mcp_http_python_client.rs`, which serves them in-process.)
pub fn support_desk(ledger: PathBuf) -> Toolkit {
    let desk = Arc::new(Desk { ledger: Ledger(ledger) });
    Toolkit::new()
        .with(desk.lookup_order_tool())
        .with(desk.issue_refund_tool())
        .with(desk.hold_shipment_tool())
        .with(desk.email_customer_tool())
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    // Errors as sentences (what happened, what to do), not as `Debug` structs.
    match run().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("effect-tool MCP server: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    init_logs()?;
    let db = env_path("EFFECT_TOOL_DB", "mcp-journal.db")?;
    let ledger = env_path("EFFECT_TOOL_LEDGER", "mcp-ledger.txt")?;
    // Standard output is the MCP channel: say where things are on standard error.
    eprintln!(
        "effect-tool MCP server: journal {}, ledger {}",
        db.display(),
        ledger.display()
    );

    let cards = Arc::new(Cards {
        ledger: Ledger(ledger.clone()),
    });
    let toolkit = support_desk(ledger).with(cards.charge_card_tool());
    let engine = Engine::new(SqliteStore::open(&db)?);
    let key = ProcessorKey(std::env::var("EFFECT_TOOL_CARD_KEY").unwrap_or_else(|_| "demo-processor-key".to_owned()));
    let mut server = McpServer::new(toolkit, engine)
        .with_server_info("effect-tool-support-desk", env!("CARGO_PKG_VERSION"))
        // The processor's key, for `charge_card`'s `#[secret]` argument: the same for every caller.
        .with_run_values(move |_principal, run| run.with_value(key.clone()));
    if let Ok(run_id) = std::env::var("EFFECT_TOOL_RUN_ID") {
        server = server.with_run_id(run_id);
    }
    if std::env::var("EFFECT_TOOL_MCP_REQUIRE_RUN_ID").is_ok_and(|v| v == "1") {
        server = server.require_run_id();
    }
    match http_addr()? {
        Some(addr) => serve_http(server, addr).await,
        None => Ok(server.serve_stdio().await?),
    }
}

/// The address of `--http ADDR` (or `EFFECT_TOOL_MCP_HTTP`), if any.
fn http_addr() -> Result<Option<std::net::SocketAddr>, Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let mut addr = std::env::var("EFFECT_TOOL_MCP_HTTP").ok();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--http" => {
                addr = Some(
                    args.next()
                        .ok_or("--http needs an address, e.g. --http 127.0.0.1:8080")?,
                )
            }
            other => return Err(format!("unknown argument `{other}`; usage: mcp_server [--http ADDR]").into()),
        }
    }
    addr.map(|a| {
        a.parse()
            .map_err(|e| format!("`{a}` is not an address such as 127.0.0.1:8080: {e}").into())
    })
    .transpose()
}

#[cfg(feature = "mcp-http")]
async fn serve_http(server: McpServer, addr: std::net::SocketAddr) -> Result<(), Box<dyn std::error::Error>> {
    let handle = server.bind_http_with(addr, http_config()?).await?;
    eprintln!("effect-tool MCP server: Streamable HTTP at {}", handle.url());
    let stop = handle.shutdown_token();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            stop.cancel();
        }
    });
    Ok(handle.wait().await?)
}

/// Who may call, from the environment (see the module docs).
#[cfg(feature = "mcp-http")]
fn http_config() -> Result<effect_tool::adapters::mcp::McpHttpConfig, Box<dyn std::error::Error>> {
    use effect_tool::adapters::mcp::{BearerTokens, JwtAuthenticator, McpHttpConfig};
    let mut config = McpHttpConfig::default();
    if let Ok(origins) = std::env::var("EFFECT_TOOL_MCP_ORIGINS") {
        config = config.with_allowed_origins(origins.split(',').map(str::trim).filter(|o| !o.is_empty()));
    }
    if let Ok(tokens) = std::env::var("EFFECT_TOOL_MCP_TOKENS") {
        let mut auth = BearerTokens::new();
        for entry in tokens.split(',').filter(|e| !e.trim().is_empty()) {
            let (principal, token) = entry
                .trim()
                .split_once('=')
                .ok_or("EFFECT_TOOL_MCP_TOKENS holds `principal=token` entries separated by commas")?;
            if token.len() < 16 {
                return Err(format!(
                    "the token of `{principal}` is shorter than 16 bytes: use e.g. `openssl rand -hex 32`"
                )
                .into());
            }
            auth = auth.with_token(token, principal);
        }
        return Ok(config.with_authenticator(auth));
    }
    if let Ok(issuer) = std::env::var("EFFECT_TOOL_MCP_JWT_ISSUER") {
        let audience = std::env::var("EFFECT_TOOL_MCP_JWT_AUDIENCE")
            .map_err(|_| "EFFECT_TOOL_MCP_JWT_AUDIENCE is needed with EFFECT_TOOL_MCP_JWT_ISSUER: this server's URL, e.g. https://mcp.example.com/mcp")?;
        let jwks_path = std::env::var("EFFECT_TOOL_MCP_JWKS").map_err(
            |_| "EFFECT_TOOL_MCP_JWKS is needed with EFFECT_TOOL_MCP_JWT_ISSUER: a file with the issuer's JWK Set",
        )?;
        let jwks =
            std::fs::read_to_string(&jwks_path).map_err(|e| format!("cannot read the JWK Set {jwks_path}: {e}"))?;
        return Ok(config.with_authenticator(JwtAuthenticator::new(issuer, audience).with_jwks(&jwks)?));
    }
    Ok(config)
}

#[cfg(not(feature = "mcp-http"))]
async fn serve_http(_server: McpServer, addr: std::net::SocketAddr) -> Result<(), Box<dyn std::error::Error>> {
    Err(format!(
        "cannot serve HTTP on {addr}: this example was built without Streamable HTTP; run it with `--features mcp-http`"
    )
    .into())
}
