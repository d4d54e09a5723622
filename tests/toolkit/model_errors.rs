//! Errors a model can act on: a corpus of malformed calls across the argument types, each sent
//! through the `Dispatcher` as a model would. Every rejection must name its field, say what was
//! expected, come back with disposition `rejected`, and run nothing (counted by the tools
//! themselves, outside the engine). Secret values never appear in what the model reads.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use effect_tool::toolkit::{ToolCall, Toolkit};
use effect_tool::{Disposition, Engine, MemoryStore, RunContext, ToolError, tool};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// Executions of any tool here: a rejected call must not move it.
static RAN: AtomicUsize = AtomicUsize::new(0);

/// The tests of this file share [`RAN`]: each holds this lock while it counts.
static COUNTING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn ran() -> usize {
    RAN.load(Ordering::SeqCst)
}

/// A postal address.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Address {
    pub street: String,
    pub zip: String,
}

/// One order line.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct Line {
    pub sku: String,
    pub quantity: u16,
}

/// How a ticket is resolved (internally tagged).
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Resolution {
    Refund { amount_cents: u64 },
    Replace { sku: String, address: Address },
    Close,
}

/// How to pay (externally tagged).
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Method {
    Card { last4: String },
    Invoice,
}

/// A message (adjacently tagged).
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "t", content = "c", rename_all = "snake_case")]
pub enum Message {
    Text(String),
    Count(u32),
}

/// Refund part of an order.
#[tool(effect = "pure")]
async fn issue_refund(order_id: String, amount_cents: u64, reason: Option<String>) -> Result<u64, ToolError> {
    RAN.fetch_add(1, Ordering::SeqCst);
    let _ = (order_id, reason);
    Ok(amount_cents)
}

/// Numbers of several widths.
#[tool(effect = "pure")]
async fn numbers(small: i8, mid: i32, big: i64, port: u16, ratio: f64, count: u32) -> Result<(), ToolError> {
    RAN.fetch_add(1, Ordering::SeqCst);
    let _ = (small, mid, big, port, ratio, count);
    Ok(())
}

/// Book a visit.
#[tool(effect = "pure")]
async fn schedule(
    when: chrono::DateTime<chrono::Utc>,
    day: chrono::NaiveDate,
    ticket: uuid::Uuid,
    site: url::Url,
) -> Result<(), ToolError> {
    RAN.fetch_add(1, Ordering::SeqCst);
    let _ = (when, day, ticket, site);
    Ok(())
}

/// Resolve a ticket.
#[tool(effect = "pure")]
async fn resolve_ticket(ticket_id: String, resolution: Resolution) -> Result<(), ToolError> {
    RAN.fetch_add(1, Ordering::SeqCst);
    let _ = (ticket_id, resolution);
    Ok(())
}

/// Pay.
#[tool(effect = "pure")]
async fn pay(method: Method, message: Message) -> Result<(), ToolError> {
    RAN.fetch_add(1, Ordering::SeqCst);
    let _ = (method, message);
    Ok(())
}

/// Ship an order.
#[tool(effect = "pure")]
async fn ship(
    address: Address,
    lines: Vec<Line>,
    tags: HashMap<String, u32>,
    point: (f64, f64),
    express: bool,
) -> Result<(), ToolError> {
    RAN.fetch_add(1, Ordering::SeqCst);
    let _ = (address, lines, tags, point, express);
    Ok(())
}

/// Log in to the billing system.
#[tool(effect = "pure")]
async fn login(user: String, #[sensitive] pin: u32) -> Result<(), ToolError> {
    RAN.fetch_add(1, Ordering::SeqCst);
    let _ = (user, pin);
    Ok(())
}

fn toolkit() -> Toolkit {
    effect_tool::toolkit![IssueRefund, Numbers, Schedule, ResolveTicket, Pay, Ship, Login]
}

fn good_ship() -> Value {
    json!({"address": {"street": "Main St 1", "zip": "123"}, "lines": [{"sku": "A", "quantity": 1}],
           "tags": {"gift": 1}, "point": [1.0, 2.0], "express": false})
}

/// `base` with the value at `pointer` replaced (or, for a top-level field, added).
fn with(mut base: Value, pointer: &str, v: Value) -> Value {
    match base.pointer_mut(pointer) {
        Some(slot) => *slot = v,
        None => {
            base[pointer.trim_start_matches('/')] = v;
        }
    }
    base
}

fn without(mut base: Value, field: &str) -> Value {
    base.as_object_mut().unwrap().remove(field);
    base
}

/// (tool, arguments, the field the message must name, a phrase of what was expected).
fn corpus() -> Vec<(&'static str, Value, &'static str, &'static str)> {
    let refund = json!({"order_id": "o-1", "amount_cents": 500});
    let numbers = json!({"small": 1, "mid": 2, "big": 3, "port": 80, "ratio": 0.5, "count": 1});
    let schedule = json!({"when": "2026-12-01T10:00:00Z", "day": "2026-12-01",
                          "ticket": "67e55044-10b1-426f-9247-bb680e5fe0c8", "site": "https://example.com"});
    let resolve = json!({"ticket_id": "t-1", "resolution": {"kind": "refund", "amount_cents": 5}});
    let pay = json!({"method": "invoice", "message": {"t": "count", "c": 1}});
    vec![
        // Strings and required fields.
        (
            "issue_refund",
            without(refund.clone(), "order_id"),
            "order_id",
            "missing required field",
        ),
        (
            "issue_refund",
            with(refund.clone(), "/order_id", json!(7)),
            "order_id",
            "expected string",
        ),
        (
            "issue_refund",
            with(refund.clone(), "/reason", json!(["late"])),
            "reason",
            "string or null",
        ),
        (
            "issue_refund",
            json!({"order_id": "o", "amount_cents": 1, "amout": 2}),
            "amout",
            "unknown field",
        ),
        // Integers: types, signs, overflows, fractions.
        (
            "issue_refund",
            with(refund.clone(), "/amount_cents", json!("five")),
            "amount_cents",
            "expected integer",
        ),
        (
            "issue_refund",
            with(refund.clone(), "/amount_cents", json!(-1)),
            "amount_cents",
            "below the minimum 0",
        ),
        (
            "issue_refund",
            with(refund.clone(), "/amount_cents", json!(10.5)),
            "amount_cents",
            "expected integer",
        ),
        (
            "issue_refund",
            with(refund.clone(), "/amount_cents", json!(9007199254740992u64)),
            "amount_cents",
            "above the maximum 9007199254740991",
        ),
        (
            "issue_refund",
            with(refund.clone(), "/amount_cents", json!(null)),
            "amount_cents",
            "expected integer",
        ),
        (
            "numbers",
            with(numbers.clone(), "/small", json!(128)),
            "small",
            "above the maximum 127",
        ),
        (
            "numbers",
            with(numbers.clone(), "/small", json!(-129)),
            "small",
            "below the minimum -128",
        ),
        (
            "numbers",
            with(numbers.clone(), "/mid", json!(3_000_000_000u64)),
            "mid",
            "above the maximum 2147483647",
        ),
        (
            "numbers",
            with(numbers.clone(), "/mid", json!(-3_000_000_000i64)),
            "mid",
            "below the minimum -2147483648",
        ),
        (
            "numbers",
            with(numbers.clone(), "/big", json!(1e300)),
            "big",
            "above the maximum",
        ),
        (
            "numbers",
            with(numbers.clone(), "/port", json!(70000)),
            "port",
            "above the maximum 65535",
        ),
        (
            "numbers",
            with(numbers.clone(), "/count", json!(4294967296u64)),
            "count",
            "above the maximum 4294967295",
        ),
        (
            "numbers",
            with(numbers.clone(), "/count", json!(true)),
            "count",
            "expected integer",
        ),
        (
            "numbers",
            with(numbers.clone(), "/ratio", json!("half")),
            "ratio",
            "expected number",
        ),
        (
            "numbers",
            without(numbers.clone(), "ratio"),
            "ratio",
            "missing required field",
        ),
        // Dates, UUIDs, URLs.
        (
            "schedule",
            with(schedule.clone(), "/when", json!("tomorrow")),
            "when",
            "RFC 3339 date-time",
        ),
        (
            "schedule",
            with(schedule.clone(), "/when", json!("2026-12-01 10:00")),
            "when",
            "RFC 3339 date-time",
        ),
        (
            "schedule",
            with(schedule.clone(), "/when", json!("2026-13-01T10:00:00Z")),
            "when",
            "RFC 3339 date-time",
        ),
        (
            "schedule",
            with(schedule.clone(), "/day", json!("01/12/2026")),
            "day",
            "a date such as",
        ),
        (
            "schedule",
            with(schedule.clone(), "/ticket", json!("not-a-uuid")),
            "ticket",
            "a UUID",
        ),
        (
            "schedule",
            with(schedule.clone(), "/ticket", json!("67e55044-10b1-426f-9247")),
            "ticket",
            "a UUID",
        ),
        (
            "schedule",
            with(schedule.clone(), "/site", json!("example.com")),
            "site",
            "absolute URI",
        ),
        (
            "schedule",
            with(schedule.clone(), "/site", json!(42)),
            "site",
            "expected string",
        ),
        // Internally tagged enum: wrong tag, missing tag, wrong field in the chosen variant.
        (
            "resolve_ticket",
            with(resolve.clone(), "/resolution", json!({"kind": "cash"})),
            "resolution.kind",
            "\"refund\", \"replace\", \"close\"",
        ),
        (
            "resolve_ticket",
            with(resolve.clone(), "/resolution", json!({"amount_cents": 5})),
            "resolution",
            "missing the tag `kind`",
        ),
        (
            "resolve_ticket",
            with(resolve.clone(), "/resolution", json!({"kind": "refund"})),
            "resolution",
            "missing required field `amount_cents` (variant \"refund\")",
        ),
        (
            "resolve_ticket",
            with(
                resolve.clone(),
                "/resolution",
                json!({"kind": "refund", "amount_cents": "5"}),
            ),
            "resolution.amount_cents",
            "expected integer",
        ),
        (
            "resolve_ticket",
            with(
                resolve.clone(),
                "/resolution",
                json!({"kind": "replace", "sku": "A", "address": {"street": "x"}}),
            ),
            "resolution.address",
            "missing required field `zip`",
        ),
        (
            "resolve_ticket",
            with(resolve.clone(), "/resolution", json!("close")),
            "resolution",
            "expected an object with `kind`",
        ),
        // Externally and adjacently tagged enums.
        (
            "pay",
            with(pay.clone(), "/method", json!("cash")),
            "method",
            "\"invoice\" or an object with one key of `card`",
        ),
        (
            "pay",
            with(pay.clone(), "/method", json!({"card": {}})),
            "method.card",
            "missing required field `last4`",
        ),
        (
            "pay",
            with(pay.clone(), "/method", json!({"card": {"last4": 4242}})),
            "method.card.last4",
            "expected string",
        ),
        (
            "pay",
            with(pay.clone(), "/message", json!({"t": "count", "c": "x"})),
            "message.c",
            "expected integer",
        ),
        (
            "pay",
            with(pay.clone(), "/message", json!({"t": "shout", "c": "x"})),
            "message.t",
            "\"text\", \"count\"",
        ),
        // Nested structs, lists, maps, tuples.
        (
            "ship",
            with(good_ship(), "/address/zip", json!(123)),
            "address.zip",
            "expected string",
        ),
        (
            "ship",
            with(good_ship(), "/address", json!("Main St 1")),
            "address",
            "expected object",
        ),
        (
            "ship",
            with(good_ship(), "/lines/0/quantity", json!(-2)),
            "lines[0].quantity",
            "below the minimum 0",
        ),
        (
            "ship",
            with(
                good_ship(),
                "/lines",
                json!([{"sku": "A", "quantity": 1}, {"quantity": 1}]),
            ),
            "lines[1]",
            "missing required field `sku`",
        ),
        (
            "ship",
            with(good_ship(), "/lines", json!({"sku": "A"})),
            "lines",
            "expected array",
        ),
        (
            "ship",
            with(good_ship(), "/tags/gift", json!("one")),
            "tags.gift",
            "expected integer",
        ),
        (
            "ship",
            with(good_ship(), "/tags", json!(["gift"])),
            "tags",
            "expected object",
        ),
        (
            "ship",
            with(good_ship(), "/point", json!([1.0])),
            "point",
            "at least 2 items",
        ),
        (
            "ship",
            with(good_ship(), "/point", json!([1.0, "north"])),
            "point[1]",
            "expected number",
        ),
        (
            "ship",
            with(good_ship(), "/express", json!("yes")),
            "express",
            "expected boolean",
        ),
        // A secret field: named, its value never shown.
        (
            "login",
            json!({"user": "ann", "pin": "hunter2-secret"}),
            "pin",
            "expected integer",
        ),
    ]
}

#[tokio::test]
async fn every_rejection_names_its_field_and_what_was_expected() {
    let dispatcher = toolkit().dispatcher(Engine::new(MemoryStore::new()));
    let run = RunContext::new("model-errors");
    let corpus = corpus();
    assert!(corpus.len() >= 40, "{} cases", corpus.len());
    let _counting = COUNTING.lock().await;
    let before = ran();
    let mut failures = Vec::new();
    for (i, (tool, args, field, expected)) in corpus.iter().enumerate() {
        let call = ToolCall::new(format!("c{i}"), *tool, args.to_string());
        let result = dispatcher.call(&run, &call).await;
        let content = result.content();
        // The path of the field (`lines[0].quantity`: ...), or for a missing or unknown field,
        // its parent's path with the field's name (arguments: missing required field `order_id`).
        let named = content.contains(&format!("`{field}`:")) || content.contains(&format!("field `{field}`"));
        if !result.is_rejected()
            || result.disposition != Disposition::Rejected
            || !named
            || !content.contains(expected)
            || content.contains("hunter2-secret")
        {
            failures.push(format!(
                "#{i} {tool} {args}: disposition {}, wanted `{field}` and {expected:?}, got:\n    {content}",
                result.disposition
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {}:\n{}",
        failures.len(),
        corpus.len(),
        failures.join("\n")
    );
    assert_eq!(ran(), before, "a rejected call ran");
}

#[tokio::test]
async fn integral_floats_are_integers_and_null_means_the_default() {
    let dispatcher = toolkit().dispatcher(Engine::new(MemoryStore::new()));
    let run = RunContext::new("normalize");
    let _counting = COUNTING.lock().await;
    let before = ran();
    let r = dispatcher
        .call(
            &run,
            &ToolCall::new("c1", "issue_refund", r#"{"order_id": "o-1", "amount_cents": 10.0}"#),
        )
        .await;
    assert_eq!(r.output(), Some(&json!(10)), "{}", r.content());
    assert_eq!(r.disposition, Disposition::Executed);
    let r = dispatcher
        .call(
            &run,
            &ToolCall::new(
                "c2",
                "numbers",
                r#"{"small": -1.0, "mid": 2e3, "big": 3, "port": 80.0, "ratio": 1, "count": 0}"#,
            ),
        )
        .await;
    assert!(!r.is_error(), "{}", r.content());
    // A map sent as Gemini's entry list.
    let mut ship = good_ship();
    ship["tags"] = json!([{"key": "gift", "value": 2}]);
    let r = dispatcher
        .call(&run, &ToolCall::new("c3", "ship", ship.to_string()))
        .await;
    assert!(!r.is_error(), "{}", r.content());
    assert_eq!(ran(), before + 3);
}

#[tokio::test]
async fn too_large_arguments_are_refused_before_anything_is_journaled() {
    /// A journaled tool whose runs are counted.
    #[tool(effect = "idempotent", key(note))]
    async fn save_note(note: String) -> Result<usize, ToolError> {
        RAN.fetch_add(1, Ordering::SeqCst);
        Ok(note.len())
    }
    let store = std::sync::Arc::new(MemoryStore::new());
    let kit = effect_tool::toolkit![SaveNote];
    let dispatcher = kit.dispatcher(Engine::new(store.clone())).with_max_argument_bytes(1024);
    assert_eq!(
        kit.dispatcher(Engine::new(MemoryStore::new())).max_argument_bytes(),
        effect_tool::toolkit::DEFAULT_MAX_ARGUMENT_BYTES
    );
    let run = RunContext::new("size");
    let _counting = COUNTING.lock().await;
    let before = ran();
    let big = json!({"note": "x".repeat(2000)}).to_string();
    let r = dispatcher.call(&run, &ToolCall::new("c1", "save_note", big)).await;
    assert!(r.is_rejected(), "{}", r.content());
    assert_eq!(r.disposition, Disposition::Rejected);
    assert!(r.content().contains("more than the 1024 bytes"), "{}", r.content());
    assert_eq!(ran(), before, "ran");
    use effect_tool::Store;
    let records = store.list(&effect_tool::Filter::all()).await.unwrap();
    assert!(records.is_empty(), "journaled: {records:?}");
    let small = json!({"note": "short"}).to_string();
    let r = dispatcher.call(&run, &ToolCall::new("c2", "save_note", small)).await;
    assert_eq!(r.disposition, Disposition::Executed, "{}", r.content());
    assert_eq!(ran(), before + 1);
}
