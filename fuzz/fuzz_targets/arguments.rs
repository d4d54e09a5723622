//! A model's argument JSON through the dispatcher (`toolkit/dispatch.rs`: parsing,
//! `validate::normalize`, `validate::violations`, then serde's decoding into the tool's
//! argument type).
//!
//! The first byte picks a tool, the rest is the argument text. For every call:
//! - nothing panics, and the call is rejected by the parser or the validator, or runs;
//! - what the validator accepts decodes into the tool's argument type (serde never has the
//!   last word on arguments the validator let through: the dispatcher's log line "tool call
//!   rejected by decoding" never appears);
//! - a call that ran returns its decoded arguments; sent again, they run and come back the
//!   same (decoding what serde encoded is stable);
//! - a rejection never shows the value of the secret field `token`.

#![no_main]

use std::collections::HashMap;
use std::sync::LazyLock;
use std::sync::atomic::{AtomicBool, Ordering};

use effect_tool::toolkit::{Dispatcher, Rejection, ToolCall, ToolOutcome, Toolkit};
use effect_tool::{Engine, MemoryStore, RunContext, ToolError, tool};
use libfuzzer_sys::fuzz_target;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// A postal address.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Address {
    /// Street and number.
    pub street: String,
    /// Postal code.
    pub zip: String,
}

/// One order line.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct Line {
    /// The article.
    pub sku: String,
    /// How many.
    pub quantity: u16,
}

/// How a ticket is resolved (internally tagged).
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Resolution {
    /// Money back.
    Refund {
        /// In cents.
        amount_cents: u64,
    },
    /// A new article.
    Replace {
        /// The article.
        sku: String,
        /// Where to.
        address: Address,
    },
    /// Nothing to do.
    Close,
}

/// How to pay (externally tagged).
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Method {
    /// By card.
    Card {
        /// The card's last digits.
        last4: String,
    },
    /// By invoice.
    Invoice,
}

/// A message (adjacently tagged).
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "t", content = "c", rename_all = "snake_case")]
pub enum Message {
    /// Words.
    Text(String),
    /// A number.
    Count(u32),
}

/// Refund part of an order.
#[tool(effect = "pure")]
async fn issue_refund(order_id: String, amount_cents: u64, reason: Option<String>) -> Result<Value, ToolError> {
    Ok(json!({"order_id": order_id, "amount_cents": amount_cents, "reason": reason}))
}

/// Numbers of several widths.
#[tool(effect = "pure")]
async fn numbers(small: i8, mid: i32, big: i64, port: u16, ratio: f64, count: u32) -> Result<Value, ToolError> {
    Ok(json!({"small": small, "mid": mid, "big": big, "port": port, "ratio": ratio, "count": count}))
}

/// Book a visit. (No `url::Url`: the validator's `uri` format is a loose first check, which
/// leaves the URL's own rules to serde.)
#[tool(effect = "pure")]
async fn schedule(
    when: chrono::DateTime<chrono::Utc>,
    day: chrono::NaiveDate,
    ticket: uuid::Uuid,
) -> Result<Value, ToolError> {
    Ok(json!({"when": when, "day": day, "ticket": ticket}))
}

/// Resolve a ticket.
#[tool(effect = "pure")]
async fn resolve_ticket(ticket_id: String, resolution: Resolution) -> Result<Value, ToolError> {
    Ok(json!({"ticket_id": ticket_id, "resolution": resolution}))
}

/// Pay.
#[tool(effect = "pure")]
async fn pay(method: Method, message: Message) -> Result<Value, ToolError> {
    Ok(json!({"method": method, "message": message}))
}

/// Ship an order.
#[tool(effect = "pure")]
async fn ship(
    address: Address,
    lines: Vec<Line>,
    tags: HashMap<String, u32>,
    point: (f64, f64),
    express: bool,
) -> Result<Value, ToolError> {
    Ok(json!({"address": address, "lines": lines, "tags": tags, "point": point, "express": express}))
}

/// Log in.
#[tool(effect = "pure")]
async fn login(user: String, #[sensitive] token: String) -> Result<Value, ToolError> {
    Ok(json!({"user": user, "token": token}))
}

/// The tools, in the order the first byte picks them.
const TOOLS: [&str; 7] = [
    "issue_refund",
    "numbers",
    "schedule",
    "resolve_ticket",
    "pay",
    "ship",
    "login",
];

/// One runtime, one dispatcher, one run for every input (pure tools journal nothing).
struct Harness {
    runtime: tokio::runtime::Runtime,
    dispatcher: Dispatcher,
    run: RunContext,
}

static HARNESS: LazyLock<Harness> = LazyLock::new(|| {
    tracing::subscriber::set_global_default(DecodingRejections).expect("the only subscriber");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a tokio runtime");
    let toolkit: Toolkit = effect_tool::toolkit![IssueRefund, Numbers, Schedule, ResolveTicket, Pay, Ship, Login];
    Harness {
        runtime,
        dispatcher: toolkit.dispatcher(Engine::new(MemoryStore::new())),
        run: RunContext::new("fuzz"),
    }
});

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let Ok(arguments) = std::str::from_utf8(rest) else {
        return;
    };
    let tool = TOOLS[usize::from(pick) % TOOLS.len()];
    let outcome = call(tool, arguments);
    match &outcome {
        ToolOutcome::Output(output) => check_stable(tool, output),
        ToolOutcome::Rejected(rejection) => check_rejection(tool, arguments, rejection),
        other => panic!("{tool}({arguments:?}): neither ran nor was rejected: {other:?}"),
    }
});

/// Dispatch one call of `tool` with `arguments`; it must not be rejected by serde after the
/// validator accepted it.
fn call(tool: &str, arguments: &str) -> ToolOutcome {
    let h = &*HARNESS;
    let call = ToolCall::new("call-1", tool, arguments);
    REJECTED_BY_DECODING.store(false, Ordering::SeqCst);
    let outcome = h.runtime.block_on(h.dispatcher.call(&h.run, &call)).outcome;
    assert!(
        !REJECTED_BY_DECODING.load(Ordering::SeqCst),
        "{tool}({arguments:?}): the validator accepted what serde refused: {outcome:?}"
    );
    outcome
}

/// Set when the dispatcher logs that decoding refused arguments the validator accepted.
static REJECTED_BY_DECODING: AtomicBool = AtomicBool::new(false);

/// What the dispatcher logs for a call the validator let through and serde refused.
const DECODING_REJECTION: &str = "tool call rejected by decoding";

/// A subscriber that only watches for [`DECODING_REJECTION`].
struct DecodingRejections;

impl tracing::Subscriber for DecodingRejections {
    fn enabled(&self, metadata: &tracing::Metadata<'_>) -> bool {
        metadata.is_event()
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut message = MessageIs(false);
        event.record(&mut message);
        if message.0 {
            REJECTED_BY_DECODING.store(true, Ordering::SeqCst);
        }
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// Whether an event's message is [`DECODING_REJECTION`].
struct MessageIs(bool);

impl tracing::field::Visit for MessageIs {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" && format!("{value:?}") == DECODING_REJECTION {
            self.0 = true;
        }
    }
}

/// Sending what a call returned (its decoded arguments) runs again and returns the same.
fn check_stable(tool: &str, output: &Value) {
    match call(tool, &output.to_string()) {
        ToolOutcome::Output(again) => assert_eq!(&again, output, "{tool}: decoded arguments changed when sent again"),
        other => panic!("{tool}: its own decoded arguments {output} do not run again: {other:?}"),
    }
}

/// A rejection of `login` hides the secret.
fn check_rejection(tool: &str, arguments: &str, rejection: &Rejection) {
    if tool == "login" {
        check_secret_hidden(arguments, rejection);
    }
}

/// The value of `token`, when it is distinctive enough to look for (long, letters and digits,
/// written once), never appears in what the model reads of the rejection.
fn check_secret_hidden(arguments: &str, rejection: &Rejection) {
    let Ok(Value::Object(args)) = serde_json::from_str::<Value>(arguments) else {
        return;
    };
    let Some(Value::String(token)) = args.get("token") else {
        return;
    };
    let distinctive = token.len() >= 16
        && token.bytes().any(|b| b.is_ascii_digit())
        && token.bytes().any(|b| b.is_ascii_alphabetic())
        && arguments.matches(token.as_str()).count() == 1;
    if distinctive {
        let text = format!("{rejection:?}");
        assert!(
            !text.contains(token.as_str()),
            "the secret token shows in the rejection: {text}"
        );
    }
}
