//! An MCP server (stdio) for a support desk's tools, every call journaled in SQLite.
//!
//! ```text
//! cargo run --example mcp_server --features mcp
//! ```
//!
//! Point an MCP client at that command (e.g. Claude Desktop's `mcpServers`, or the Python
//! client in `tests/mcp_client/`). Each tool writes what it does to a ledger file, standing in
//! for the outside world, so you can see that a retried call is applied once.
//!
//! Environment (all optional):
//! - `EFFECT_TOOL_DB`: the SQLite journal (default: `effect-tool-mcp.db` in the temp dir);
//! - `EFFECT_TOOL_LEDGER`: the file the tools append their effects to (default:
//!   `effect-tool-mcp-ledger.txt` in the temp dir);
//! - `EFFECT_TOOL_RUN_ID`: the run calls belong to when the client's `_meta` names none
//!   (default: a new run per server process).

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use effect_tool::mcp::McpServer;
use effect_tool::store::sqlite::SqliteStore;
use effect_tool::{ClassifyError, EffectClass, EffectCtx, Engine, Failure, Tool, Toolkit};
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

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
struct OrderArgs {
    /// The order id, e.g. `A-1001`.
    order_id: String,
}

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
struct OrderInfo {
    order_id: String,
    customer_email: String,
    total_cents: u64,
}

/// Look up an order (pure: reads only).
struct LookupOrder;

impl Tool for LookupOrder {
    type Args = OrderArgs;
    type Output = OrderInfo;
    type Error = DeskError;
    const NAME: &'static str = "lookup_order";
    const CLASS: EffectClass = EffectClass::Pure;
    const DESCRIPTION: &'static str = "Look up an order by id: the customer's email and the order total.";
    const OPEN_WORLD: Option<bool> = Some(false);

    async fn call(&self, _ctx: &EffectCtx, a: OrderArgs) -> Result<OrderInfo, DeskError> {
        let (email, total) = order(&a.order_id)?;
        Ok(OrderInfo {
            order_id: a.order_id,
            customer_email: email.to_owned(),
            total_cents: total,
        })
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
struct RefundArgs {
    /// The order to refund.
    order_id: String,
    /// How much, in cents.
    amount_cents: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
struct Refund {
    refund_id: String,
    order_id: String,
    amount_cents: u64,
}

/// Refund part of an order (idempotent: the same refund intent is applied once).
struct IssueRefund(Arc<Ledger>);

impl Tool for IssueRefund {
    type Args = RefundArgs;
    type Output = Refund;
    type Error = DeskError;
    const NAME: &'static str = "issue_refund";
    const CLASS: EffectClass = EffectClass::Idempotent;
    const DESCRIPTION: &'static str = "Refund part of an order, in cents.";
    const KEY_RULE: effect_tool::KeyRule =
        effect_tool::KeyRule::Custom("|a| format!(\"refund:{}:{}\", a.order_id, a.amount_cents)");
    const OPEN_WORLD: Option<bool> = Some(true);

    fn key(&self, a: &RefundArgs) -> Option<String> {
        Some(format!("refund:{}:{}", a.order_id, a.amount_cents))
    }

    async fn call(&self, ctx: &EffectCtx, a: RefundArgs) -> Result<Refund, DeskError> {
        order(&a.order_id)?;
        // A real payment API gets `ctx.idempotency_key()` as its Idempotency-Key.
        let refund_id = format!(
            "re_{}",
            &effect_tool::key::sha256_hex(ctx.idempotency_key().as_bytes())[..12]
        );
        self.0
            .append(&format!("refund {refund_id} {} {}", a.order_id, a.amount_cents))?;
        Ok(Refund {
            refund_id,
            order_id: a.order_id,
            amount_cents: a.amount_cents,
        })
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
struct HoldArgs {
    /// The order whose shipment to hold.
    order_id: String,
}

/// Hold an order's shipment (compensable: released if the run is abandoned).
struct HoldShipment(Arc<Ledger>);

impl Tool for HoldShipment {
    type Args = HoldArgs;
    type Output = String;
    type Error = DeskError;
    const NAME: &'static str = "hold_shipment";
    const CLASS: EffectClass = EffectClass::Compensable;
    const DESCRIPTION: &'static str = "Hold an order's shipment until a person looks at it.";
    const HAS_COMPENSATE: bool = true;
    const OPEN_WORLD: Option<bool> = Some(true);

    async fn call(&self, _ctx: &EffectCtx, a: HoldArgs) -> Result<String, DeskError> {
        order(&a.order_id)?;
        self.0.append(&format!("hold {}", a.order_id))?;
        Ok(format!("shipment of {} is on hold", a.order_id))
    }

    async fn compensate(&self, _ctx: &EffectCtx, a: &HoldArgs, _out: &String) -> Result<(), DeskError> {
        self.0.append(&format!("release {}", a.order_id))
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
struct EmailArgs {
    /// The recipient.
    to: String,
    /// The message.
    body: String,
}

/// Email a customer (irreversible: at most once).
struct EmailCustomer(Arc<Ledger>);

impl Tool for EmailCustomer {
    type Args = EmailArgs;
    type Output = String;
    type Error = DeskError;
    const NAME: &'static str = "email_customer";
    const CLASS: EffectClass = EffectClass::Irreversible;
    const DESCRIPTION: &'static str = "Send an email to a customer.";
    const OPEN_WORLD: Option<bool> = Some(true);

    async fn call(&self, _ctx: &EffectCtx, a: EmailArgs) -> Result<String, DeskError> {
        self.0
            .append(&format!("email {} {}", a.to, a.body.replace('\n', " ")))?;
        Ok(format!("sent to {}", a.to))
    }
}

fn env_path(var: &str, default_name: &str) -> PathBuf {
    std::env::var_os(var)
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join(default_name))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let db = env_path("EFFECT_TOOL_DB", "effect-tool-mcp.db");
    let ledger = Arc::new(Ledger(env_path("EFFECT_TOOL_LEDGER", "effect-tool-mcp-ledger.txt")));
    // Standard output is the MCP channel: say where things are on standard error.
    eprintln!(
        "effect-tool MCP server: journal {}, ledger {}",
        db.display(),
        ledger.0.display()
    );

    let toolkit = Toolkit::new()
        .with(LookupOrder)
        .with(IssueRefund(ledger.clone()))
        .with(HoldShipment(ledger.clone()))
        .with(EmailCustomer(ledger));
    let engine = Engine::new(SqliteStore::open(&db)?);
    let mut server =
        McpServer::new(toolkit, engine).with_server_info("effect-tool-support-desk", env!("CARGO_PKG_VERSION"));
    if let Ok(run_id) = std::env::var("EFFECT_TOOL_RUN_ID") {
        server = server.with_run_id(run_id);
    }
    server.serve_stdio().await?;
    Ok(())
}
