//! The argument schemas `#[tool]` exports, as snapshots a reviewer reads (`tests/snapshots/schema/`),
//! each checked against the meta-schema of the draft schemars declares for it, and against real
//! arguments serialized by serde (an exported schema must accept what the tool accepts).
//!
//! Re-bless after an intended change: `UPDATE_SNAPSHOTS=1 cargo test --test toolkit schema_snapshots::`,
//! then read the diff.

use crate::common;

use std::collections::{BTreeMap, HashMap};

use effect_tool::value::schema::{strict_schema, strict_schema_exact};
use effect_tool::{Tool, ToolError, tool};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

#[derive(Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Priority {
    Low,
    High,
}

/// How the customer pays.
#[derive(Clone, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Payment {
    /// A card, by its last digits.
    Card { last4: String },
    /// A bank transfer.
    Transfer { iban: String },
}

/// A postal address.
#[derive(Clone, Serialize, Deserialize, JsonSchema)]
pub struct Address {
    pub street: String,
    /// The postal code.
    pub zip: String,
}

#[derive(Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RenamedOrder {
    pub order_id: String,
    #[serde(rename = "amount")]
    pub amount_cents: u64,
}

#[derive(Clone, Serialize, Deserialize, JsonSchema)]
pub struct Category {
    pub name: String,
    pub children: Vec<Category>,
}

/// Strings.
#[tool(effect = "pure")]
async fn strings(name: String, initial: char) -> Result<(), ToolError> {
    let _ = (name, initial);
    Ok(())
}

/// Integers, signed and unsigned.
#[tool(effect = "pure")]
async fn integers(a: i64, b: u64, c: u8, d: i32, e: usize) -> Result<(), ToolError> {
    let _ = (a, b, c, d, e);
    Ok(())
}

/// Floats.
#[tool(effect = "pure")]
async fn floats(x: f64, y: f32) -> Result<(), ToolError> {
    let _ = (x, y);
    Ok(())
}

/// A flag.
#[tool(effect = "pure")]
async fn flags(on: bool) -> Result<(), ToolError> {
    let _ = on;
    Ok(())
}

/// Enums: unit variants and internally tagged variants with docs.
#[tool(effect = "pure")]
async fn enums(priority: Priority, payment: Payment) -> Result<(), ToolError> {
    let _ = (priority, payment);
    Ok(())
}

/// Optional values.
#[tool(effect = "pure")]
async fn options(note: Option<String>, count: Option<u32>, address: Option<Address>) -> Result<(), ToolError> {
    let _ = (note, count, address);
    Ok(())
}

/// Lists.
#[tool(effect = "pure")]
async fn lists(ids: Vec<u64>, addresses: Vec<Address>) -> Result<(), ToolError> {
    let _ = (ids, addresses);
    Ok(())
}

/// Maps.
#[tool(effect = "pure")]
async fn maps(counts: HashMap<String, u32>, by_name: BTreeMap<String, Address>) -> Result<(), ToolError> {
    let _ = (counts, by_name);
    Ok(())
}

/// Nested structs.
#[tool(effect = "pure")]
async fn nested(shipping: Address, billing: Address) -> Result<(), ToolError> {
    let _ = (shipping, billing);
    Ok(())
}

/// Renamed fields.
#[tool(effect = "pure")]
async fn renamed(order: RenamedOrder, #[serde(rename = "sku")] item_code: String) -> Result<(), ToolError> {
    let _ = (order, item_code);
    Ok(())
}

/// Refund part of an order.
///
/// The amount is in cents.
#[tool(effect = "idempotent", key(order_id))]
async fn documented(
    /// The order to refund.
    order_id: String,
    /// How much, in cents.
    amount_cents: u64,
    /// Why, in the customer's words.
    ///
    /// Shown on the receipt.
    reason: Option<String>,
) -> Result<(), ToolError> {
    let _ = (order_id, amount_cents, reason);
    Ok(())
}

/// A recursive type: the one case where a `$ref` stays.
#[tool(effect = "pure")]
async fn recursive(tree: Category) -> Result<(), ToolError> {
    let _ = tree;
    Ok(())
}

/// Compare with the stored snapshot (as JSON values: key order does not matter), or write it
/// when `UPDATE_SNAPSHOTS` is set.
fn assert_snapshot(name: &str, value: &Value) {
    common::snapshot::assert_json("schema", name, &format!("schema {name}"), value);
}

/// The draft schemars declares for `T` (its `$schema`, removed on export).
fn declared_draft<T: JsonSchema>() -> String {
    let schema = schemars::schema_for!(T);
    schema.as_value()["$schema"].as_str().unwrap().to_owned()
}

/// Validate `schema` against the meta-schema of `draft`.
fn assert_meta_valid(name: &str, draft: &str, schema: &Value) {
    let result = match draft {
        "https://json-schema.org/draft/2020-12/schema" => jsonschema::draft202012::meta::validate(schema),
        "https://json-schema.org/draft/2019-09/schema" => jsonschema::draft201909::meta::validate(schema),
        "http://json-schema.org/draft-07/schema#" => jsonschema::draft7::meta::validate(schema),
        other => panic!("{name}: unexpected draft {other}"),
    };
    if let Err(e) = result {
        panic!("{name}: not a valid {draft} schema: {e}\n{schema:#}");
    }
}

/// Every check for one tool: snapshot of the exported and strict schemas, both valid under the
/// declared draft's meta-schema, both accepting `sample`.
fn check<T: Tool>(name: &str, sample: Value) {
    let exported = T::input_schema();
    let draft = declared_draft::<T::Args>();
    assert_eq!(draft, effect_tool::value::schema::DRAFT);
    assert_meta_valid(name, &draft, &exported);
    assert_snapshot(name, &exported);

    // The shape rules, whatever the snapshot says.
    assert_eq!(exported["type"], "object", "{name}: object root");
    assert_eq!(exported["additionalProperties"], false, "{name}");
    assert!(exported.get("$schema").is_none(), "{name}");
    let text = exported.to_string();
    for format in [
        "uint", "int64", "int32", "uint64", "uint32", "uint8", "double", "float", "int8",
    ] {
        assert!(
            !text.contains(&format!("\"format\":\"{format}\"")),
            "{name}: format {format} left"
        );
    }
    if name != "recursive" {
        assert!(!text.contains("$ref") && !text.contains("$defs"), "{name}: refs left");
    }

    // Real arguments decode and validate.
    let args: T::Args = serde_json::from_value(sample.clone()).unwrap_or_else(|e| panic!("{name}: sample: {e}"));
    let sample = serde_json::to_value(&args).unwrap();
    let validator = jsonschema::draft202012::new(&exported).unwrap();
    if let Err(e) = validator.validate(&sample) {
        panic!("{name}: exported schema rejects {sample}: {e}");
    }

    let strict = strict_schema(&exported);
    assert_meta_valid(name, &draft, &strict);
    assert_snapshot(&format!("{name}.strict"), &strict);
    let validator = jsonschema::draft202012::new(&strict).unwrap();
    if let Err(e) = validator.validate(&sample) {
        panic!("{name}: strict schema rejects {sample}: {e}");
    }
}

#[test]
fn strings_schema() {
    check::<Strings>("strings", json!({"name": "Ada", "initial": "A"}));
}

#[test]
fn integers_schema() {
    check::<Integers>("integers", json!({"a": -1, "b": 2, "c": 3, "d": -4, "e": 5}));
    let schema = Integers::input_schema();
    assert_eq!(schema["properties"]["b"]["minimum"], 0, "unsigned keeps its bound");
    assert_eq!(schema["properties"]["c"]["maximum"], 255);
}

#[test]
fn floats_schema() {
    check::<Floats>("floats", json!({"x": 1.5, "y": -2.0}));
}

#[test]
fn bool_schema() {
    check::<Flags>("bool", json!({"on": true}));
}

#[test]
fn enums_schema() {
    check::<Enums>(
        "enums",
        json!({"priority": "high", "payment": {"kind": "card", "last4": "4242"}}),
    );
    let text = Enums::input_schema().to_string();
    assert!(!text.contains("oneOf") && !text.contains("\"const\""), "{text}");
}

#[test]
fn option_schema() {
    check::<Options>("option", json!({"note": null, "count": 3, "address": null}));
    check::<Options>("option", json!({}));
    let schema = Options::input_schema();
    assert!(schema.get("required").is_none_or(|r| r.as_array().unwrap().is_empty()));
    let strict = strict_schema(&schema);
    assert_eq!(strict["required"].as_array().unwrap().len(), 3);
    assert!(
        strict_schema_exact(&schema).is_some(),
        "Option fields already accept null"
    );
}

#[test]
fn vec_schema() {
    check::<Lists>(
        "vec",
        json!({"ids": [1, 2], "addresses": [{"street": "Main St 1", "zip": "12345"}]}),
    );
}

#[test]
fn maps_schema() {
    check::<Maps>(
        "maps",
        json!({"counts": {"a": 1}, "by_name": {"home": {"street": "x", "zip": "y"}}}),
    );
    assert!(
        strict_schema_exact(&Maps::input_schema()).is_none(),
        "maps cannot be strict"
    );
}

#[test]
fn nested_schema() {
    check::<Nested>(
        "nested",
        json!({"shipping": {"street": "a", "zip": "1"}, "billing": {"street": "b", "zip": "2"}}),
    );
    let schema = Nested::input_schema();
    assert_eq!(schema["properties"]["shipping"]["additionalProperties"], false);
    assert_eq!(
        schema["properties"]["billing"]["properties"]["zip"]["description"],
        "The postal code."
    );
}

#[test]
fn renamed_schema() {
    check::<Renamed>(
        "renamed",
        json!({"order": {"orderId": "o-1", "amount": 5}, "sku": "X-1"}),
    );
}

#[test]
fn docs_schema() {
    check::<Documented>(
        "docs",
        json!({"order_id": "o-1", "amount_cents": 250, "reason": "late"}),
    );
    let schema = Documented::input_schema();
    assert_eq!(schema["properties"]["order_id"]["description"], "The order to refund.");
    assert!(
        schema.get("description").is_none(),
        "the tool's description is not repeated"
    );
    assert_eq!(
        Documented::DESCRIPTION,
        "Refund part of an order.\n\nThe amount is in cents."
    );
}

#[test]
fn recursive_schema() {
    check::<Recursive>(
        "recursive",
        json!({"tree": {"name": "root", "children": [{"name": "leaf", "children": []}]}}),
    );
}

#[test]
fn unknown_fields_are_rejected_by_the_args_and_the_schema() {
    let bad = json!({"on": true, "extra": 1});
    assert!(serde_json::from_value::<FlagsArgs>(bad.clone()).is_err());
    let validator = jsonschema::draft202012::new(&Flags::input_schema()).unwrap();
    assert!(validator.validate(&bad).is_err());
}
