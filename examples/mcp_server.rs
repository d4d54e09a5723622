//! An MCP server (stdio, or Streamable HTTP) for a support desk's tools, every call journaled
//! in SQLite.
//!
//! ```text
//! cargo run --example mcp_server --features mcp
//! cargo run --example mcp_server --features mcp-http -- --http 127.0.0.1:8080
//! ```
//!
//! Point an MCP client at that command (e.g. Claude Desktop's `mcpServers`, or the Python
//! client in `tests/mcp_client/`), or with `--http ADDR` at `http://ADDR/mcp` (port 0 picks a
//! free port; the URL is printed on standard error). Each tool writes what it does to a ledger
//! file, standing in for the outside world, so you can see that a retried call is applied once.
//!
//! Environment (all optional):
//! - `EFFECT_TOOL_DB`: the SQLite journal (default: `effect-tool-mcp.db` in the temp dir);
//! - `EFFECT_TOOL_LEDGER`: the file the tools append their effects to (default:
//!   `effect-tool-mcp-ledger.txt` in the temp dir);
//! - `EFFECT_TOOL_RUN_ID`: the run calls belong to when the client's `_meta` names none
//!   (default: a new run per server process);
//! - `EFFECT_TOOL_MCP_HTTP`: serve Streamable HTTP on this address, as `--http` does.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use effect_tool::mcp::McpServer;
use effect_tool::store::sqlite::SqliteStore;
use effect_tool::{ClassifyError, EffectCtx, Engine, Failure, Toolkit, tools};
use serde::{Deserialize, Serialize};

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

#[derive(Clone, Debug, Serialize, Deserialize)]
struct OrderInfo {
    order_id: String,
    customer_email: String,
    total_cents: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
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
        let refund_id = format!(
            "re_{}",
            &effect_tool::key::sha256_hex(ctx.idempotency_key().as_bytes())[..12]
        );
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

fn env_path(var: &str, default_name: &str) -> PathBuf {
    std::env::var_os(var)
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join(default_name))
}

/// The support desk's tools, writing their effects to the ledger file at `ledger`. (Also used
/// by `tests/mcp_http_python_client.rs`, which serves them in-process.)
pub fn support_desk(ledger: PathBuf) -> Toolkit {
    let desk = Arc::new(Desk { ledger: Ledger(ledger) });
    Toolkit::new()
        .with(desk.lookup_order_tool())
        .with(desk.issue_refund_tool())
        .with(desk.hold_shipment_tool())
        .with(desk.email_customer_tool())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let db = env_path("EFFECT_TOOL_DB", "effect-tool-mcp.db");
    let ledger = env_path("EFFECT_TOOL_LEDGER", "effect-tool-mcp-ledger.txt");
    // Standard output is the MCP channel: say where things are on standard error.
    eprintln!(
        "effect-tool MCP server: journal {}, ledger {}",
        db.display(),
        ledger.display()
    );

    let toolkit = support_desk(ledger);
    let engine = Engine::new(SqliteStore::open(&db)?);
    let mut server =
        McpServer::new(toolkit, engine).with_server_info("effect-tool-support-desk", env!("CARGO_PKG_VERSION"));
    if let Ok(run_id) = std::env::var("EFFECT_TOOL_RUN_ID") {
        server = server.with_run_id(run_id);
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
    let handle = server.bind_http(addr).await?;
    eprintln!("effect-tool MCP server: Streamable HTTP at {}", handle.url());
    let stop = handle.shutdown_token();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            stop.cancel();
        }
    });
    Ok(handle.wait().await?)
}

#[cfg(not(feature = "mcp-http"))]
async fn serve_http(_server: McpServer, addr: std::net::SocketAddr) -> Result<(), Box<dyn std::error::Error>> {
    Err(format!(
        "cannot serve HTTP on {addr}: this example was built without Streamable HTTP; run it with `--features mcp-http`"
    )
    .into())
}
