//! serde attributes on tool arguments: keys follow the name the model and the journal see
//! (`rename`, `alias`, `default`, `with`). Effects are counted by a downstream ledger the engine
//! cannot see.

use crate::common;

use std::sync::LazyLock;

use common::ledger::Downstream;
use effect_tool::{CallOptions, DynTool, Engine, MemoryStore, RunContext, ToolCall, ToolError, tool, toolkit};

static SHIPPED: LazyLock<Downstream> = LazyLock::new(Downstream::default);

/// Ship one item; the warehouse applies a shipment once per idempotency key it sees.
#[tool(effect = "irreversible", key(item_code))]
async fn ship(
    ctx: &effect_tool::EffectCtx,
    /// The item's stock-keeping unit.
    #[serde(rename = "sku")]
    item_code: String,
) -> Result<String, ToolError> {
    SHIPPED.apply(&ctx.idempotency_key());
    Ok(format!("shipped {item_code}"))
}

fn call(id: &str, name: &str, arguments: &str) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: name.into(),
        arguments: arguments.into(),
    }
}

#[tokio::test]
async fn a_renamed_key_field_keys_on_its_value() {
    let engine = Engine::new(MemoryStore::new());
    let run = RunContext::new("run-ship");
    let kit = toolkit![Ship];
    let dispatcher = kit.dispatcher(engine.clone());
    let a = dispatcher
        .dispatch(&run, &[call("c1", "ship", r#"{"sku": "A"}"#)])
        .await;
    let b = dispatcher
        .dispatch(&run, &[call("c2", "ship", r#"{"sku": "B"}"#)])
        .await;
    assert_eq!(a[0].output().and_then(|v| v.as_str()), Some("shipped A"));
    assert_eq!(b[0].output().and_then(|v| v.as_str()), Some("shipped B"));
    assert_eq!(SHIPPED.effects(), 2, "shipping A then B ships both");
    // The same item again, under another call id: the same effect, not a second shipment.
    let again = dispatcher
        .dispatch(&run, &[call("c3", "ship", r#"{"sku": "A"}"#)])
        .await;
    assert_eq!(again[0].output().and_then(|v| v.as_str()), Some("shipped A"));
    assert_eq!(SHIPPED.requests(), 2, "a repeated shipment of A is replayed");
}

static RESERVED: LazyLock<Downstream> = LazyLock::new(Downstream::default);

/// Lower-cases a code on the way in and out (a `with` module).
mod lower {
    pub fn serialize<S: serde::Serializer>(v: &str, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&v.to_lowercase())
    }
    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
        let s: String = serde::Deserialize::deserialize(d)?;
        Ok(s.to_lowercase())
    }
}

/// Reserve stock of an item in a warehouse.
#[tool(effect = "idempotent", key(item, warehouse, quantity))]
async fn reserve(
    ctx: &effect_tool::EffectCtx,
    /// The item (older clients send `code`).
    #[serde(alias = "code")]
    item: String,
    /// The warehouse code, any case.
    #[serde(with = "lower")]
    #[schemars(with = "String")]
    warehouse: String,
    /// How many; one when left out.
    #[serde(default = "one")]
    quantity: u32,
) -> Result<String, ToolError> {
    RESERVED.apply(&ctx.idempotency_key());
    Ok(format!("{quantity} of {item} in {warehouse}"))
}

fn one() -> u32 {
    1
}

/// A call with JSON arguments through the engine, as an adapter makes it (`DynTool`): serde
/// decodes them, aliases included (the toolkit's schema validation names only the serialized
/// names, so an alias is for callers that do not go through it).
async fn through_engine(engine: &Engine, run: &RunContext, id: &str, args: &str) -> Result<String, String> {
    let args: serde_json::Value = serde_json::from_str(args).map_err(|e| e.to_string())?;
    let report = DynTool::call_json(&Reserve, engine, run, CallOptions::call_id(id), args).await;
    match report.result {
        Ok(v) => Ok(v.as_str().unwrap_or_default().to_owned()),
        Err(e) => Err(e.to_string()),
    }
}

#[tokio::test]
async fn alias_with_and_default_key_on_the_value_the_journal_keeps() {
    let engine = Engine::new(MemoryStore::new());
    let run = RunContext::new("run-reserve");
    let same = [
        r#"{"item": "A", "warehouse": "BER", "quantity": 1}"#,
        r#"{"code": "A", "warehouse": "ber"}"#,
        r#"{"item": "A", "warehouse": "Ber", "quantity": 1}"#,
    ];
    for (i, args) in same.iter().enumerate() {
        let out = through_engine(&engine, &run, &format!("s{i}"), args).await;
        assert_eq!(out.as_deref(), Ok("1 of A in ber"), "{args}");
    }
    assert_eq!(RESERVED.effects(), 1, "one reservation, however it was spelled");
    let different = [
        r#"{"code": "B", "warehouse": "ber"}"#,
        r#"{"item": "A", "warehouse": "MUC"}"#,
        r#"{"item": "A", "warehouse": "ber", "quantity": 2}"#,
    ];
    for (i, args) in different.iter().enumerate() {
        let out = through_engine(&engine, &run, &format!("d{i}"), args).await;
        assert!(out.is_ok(), "{args}: {out:?}");
    }
    assert_eq!(RESERVED.effects(), 4, "each different reservation is applied");
}

/// Where a parcel goes.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct Address {
    /// The street and number.
    pub street: String,
    /// The city.
    pub city: String,
}

static LABELS: LazyLock<Downstream> = LazyLock::new(Downstream::default);

/// Print a shipping label for an address (its fields are top-level arguments).
#[tool(effect = "idempotent")]
async fn print_label(
    ctx: &effect_tool::EffectCtx,
    /// The address.
    #[serde(flatten)]
    address: Address,
) -> Result<String, ToolError> {
    LABELS.apply(&ctx.idempotency_key());
    Ok(format!("{}, {}", address.street, address.city))
}

#[tokio::test]
async fn a_flattened_argument_takes_its_fields_at_the_top_level() {
    let engine = Engine::new(MemoryStore::new());
    let run = RunContext::new("run-label");
    let kit = toolkit![PrintLabel];
    let dispatcher = kit.dispatcher(engine.clone());
    let one = dispatcher
        .dispatch(
            &run,
            &[call("c1", "print_label", r#"{"street": "Main 1", "city": "Oslo"}"#)],
        )
        .await;
    assert_eq!(
        one[0].output().and_then(|v| v.as_str()),
        Some("Main 1, Oslo"),
        "{one:?}"
    );
    let two = dispatcher
        .dispatch(
            &run,
            &[call("c2", "print_label", r#"{"street": "Main 2", "city": "Oslo"}"#)],
        )
        .await;
    assert_eq!(
        two[0].output().and_then(|v| v.as_str()),
        Some("Main 2, Oslo"),
        "{two:?}"
    );
    assert_eq!(LABELS.effects(), 2, "two addresses, two labels");
}
