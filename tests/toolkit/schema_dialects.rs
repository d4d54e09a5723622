//! Every argument type a user writes, compiled for every provider dialect, each output checked
//! against that provider's documented rules by a checker of its own (written from the
//! provider's documentation, not from the compiler's rule table), and snapshot-tested
//! (`tests/snapshots/dialects/<case>.<dialect>.json`).
//!
//! Re-bless after an intended change: `UPDATE_SNAPSHOTS=1 cargo test --test toolkit schema_dialects::`,
//! then read the diff.

use crate::common;

use std::collections::{BTreeMap, HashMap};

use effect_tool::value::schema::{self, Dialect, MAX_SAFE_INTEGER, compile, input_schema};
use effect_tool::{Tool, ToolError, tool};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// A postal address.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct Address {
    pub street: String,
    /// The postal code.
    pub zip: String,
}

/// A category tree.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct Category {
    pub name: String,
    pub children: Vec<Category>,
}

#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct Scalars {
    pub a: i8,
    pub b: i16,
    pub c: i32,
    pub d: i64,
    pub e: u8,
    pub f: u16,
    pub g: u32,
    pub h: u64,
    pub i: usize,
    pub j: isize,
    pub x: f32,
    pub y: f64,
    pub flag: bool,
    pub s: String,
    pub ch: char,
}

#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct Options {
    pub note: Option<String>,
    pub count: Option<u32>,
    pub address: Option<Address>,
}

#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct Lists {
    pub ids: Vec<u64>,
    pub addresses: Vec<Address>,
}

#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct Tuples {
    /// Latitude and longitude.
    pub point: (f64, f64),
    pub labelled: (String, u32),
}

#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct Maps {
    pub counts: HashMap<String, u32>,
    pub by_name: BTreeMap<String, Address>,
}

#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct Nested {
    pub shipping: Address,
    pub billing: Option<Address>,
}

#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct Recursive {
    pub tree: Category,
}

/// Externally tagged (serde's default).
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum External {
    Refund { amount_cents: u64 },
    Replace(Address),
    Close,
}

/// Internally tagged.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Internal {
    /// A card, by its last digits.
    Card { last4: String },
    /// A bank transfer.
    Transfer { iban: String },
}

/// Adjacently tagged.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "t", content = "c", rename_all = "snake_case")]
pub enum Adjacent {
    Text(String),
    Count(u32),
}

/// Untagged.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Untagged {
    Id(u64),
    Name(String),
}

#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct Enums {
    pub external: External,
    pub internal: Internal,
    pub adjacent: Adjacent,
    pub untagged: Untagged,
}

#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct Foreign {
    pub when: chrono::DateTime<chrono::Utc>,
    pub day: chrono::NaiveDate,
    pub id: uuid::Uuid,
    pub site: url::Url,
}

#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct Untyped {
    pub data: Value,
    pub extra: Option<Value>,
}

#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct Flattened {
    pub name: String,
    #[serde(flatten)]
    pub address: Address,
}

#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct Defaults {
    pub order_id: String,
    #[serde(default)]
    pub notify: bool,
    #[serde(default = "five")]
    pub limit: u32,
}

fn five() -> u32 {
    5
}

#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct Constrained {
    #[schemars(length(min = 1, max = 200))]
    pub note: String,
    #[schemars(range(min = 1, max = 10))]
    pub quantity: u8,
    #[schemars(email)]
    pub contact: String,
}

/// One case: its name, its exported schema, and a real value of the type (serialized by serde).
struct Case {
    name: &'static str,
    schema: Value,
    sample: Value,
}

fn case<T: JsonSchema + Serialize + for<'de> Deserialize<'de>>(name: &'static str, sample: Value) -> Case {
    let typed: T = serde_json::from_value(sample).unwrap_or_else(|e| panic!("{name}: sample does not decode: {e}"));
    Case {
        name,
        schema: input_schema::<T>(),
        sample: serde_json::to_value(&typed).unwrap(),
    }
}

fn cases() -> Vec<Case> {
    let address = json!({"street": "Main St 1", "zip": "12345"});
    vec![
        case::<Scalars>(
            "scalars",
            json!({"a": -1, "b": -2, "c": -3, "d": -4, "e": 5, "f": 6, "g": 7, "h": 8, "i": 9, "j": -10,
                   "x": 1.5, "y": -2.25, "flag": true, "s": "text", "ch": "c"}),
        ),
        case::<Options>("options", json!({"note": null, "count": 3, "address": address})),
        case::<Lists>("lists", json!({"ids": [1, 2], "addresses": [address]})),
        case::<Tuples>("tuples", json!({"point": [52.5, 13.4], "labelled": ["a", 1]})),
        case::<Maps>("maps", json!({"counts": {"a": 1}, "by_name": {"home": address}})),
        case::<Nested>("nested", json!({"shipping": address, "billing": null})),
        case::<Recursive>(
            "recursive",
            json!({"tree": {"name": "root", "children": [{"name": "leaf", "children": []}]}}),
        ),
        case::<Enums>(
            "enums",
            json!({"external": {"refund": {"amount_cents": 5}}, "internal": {"kind": "card", "last4": "4242"},
                   "adjacent": {"t": "count", "c": 3}, "untagged": "x"}),
        ),
        case::<Foreign>(
            "foreign",
            json!({"when": "2026-12-01T10:00:00Z", "day": "2026-12-01",
                   "id": "67e55044-10b1-426f-9247-bb680e5fe0c8", "site": "https://example.com/a"}),
        ),
        case::<Untyped>("untyped", json!({"data": {"any": [1, "x"]}, "extra": null})),
        case::<Flattened>("flatten", json!({"name": "Ann", "street": "Main St 1", "zip": "12345"})),
        case::<Defaults>("defaults", json!({"order_id": "o-1"})),
        case::<Constrained>(
            "constrained",
            json!({"note": "late", "quantity": 2, "contact": "a@example.com"}),
        ),
    ]
}

// ---------------------------------------------------------------------------------------------
// Checkers, one per provider, from the provider's documentation.

/// Walk every subschema of `schema` (properties, items, prefixItems, anyOf/oneOf/allOf,
/// additionalProperties, $defs), with its path.
fn walk<'a>(schema: &'a Value, path: String, out: &mut Vec<(String, &'a Value)>) {
    out.push((path.clone(), schema));
    let Value::Object(s) = schema else { return };
    for (k, v) in s {
        match k.as_str() {
            "properties" | "$defs" => {
                if let Value::Object(m) = v {
                    for (name, sub) in m {
                        walk(sub, format!("{path}/{k}/{name}"), out);
                    }
                }
            }
            "anyOf" | "oneOf" | "allOf" | "prefixItems" => {
                if let Value::Array(list) = v {
                    for (i, sub) in list.iter().enumerate() {
                        walk(sub, format!("{path}/{k}/{i}"), out);
                    }
                }
            }
            "items" | "additionalProperties" if v.is_object() => walk(v, format!("{path}/{k}"), out),
            _ => {}
        }
    }
}

fn nodes(schema: &Value) -> Vec<(String, &Value)> {
    let mut out = Vec::new();
    walk(schema, String::new(), &mut out);
    out
}

fn is_array_node(s: &Value) -> bool {
    match s.get("type") {
        Some(Value::String(t)) => t == "array",
        Some(Value::Array(ts)) => ts.iter().any(|t| t == "array"),
        _ => false,
    }
}

/// OpenAI Structured Outputs ("Supported schemas"): root an object (not `anyOf`); every object
/// closed (`additionalProperties: false`) with every property in `required`; only the listed
/// keywords; arrays with `items`; string formats from the list; every node typed; at most 10
/// levels of nesting.
fn check_openai_strict(name: &str, schema: &Value) {
    const KEYWORDS: &[&str] = &[
        "type",
        "description",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "enum",
        "const",
        "anyOf",
        "$ref",
        "$defs",
        "pattern",
        "format",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minItems",
        "maxItems",
    ];
    const FORMATS: &[&str] = &[
        "date-time",
        "time",
        "date",
        "duration",
        "email",
        "hostname",
        "ipv4",
        "ipv6",
        "uuid",
    ];
    assert_eq!(schema["type"], "object", "{name}: root object");
    assert!(schema.get("anyOf").is_none(), "{name}: root anyOf");
    for (path, node) in nodes(schema) {
        let Value::Object(s) = node else {
            panic!("{name}{path}: boolean schema in strict mode")
        };
        for k in s.keys() {
            assert!(
                KEYWORDS.contains(&k.as_str()),
                "{name}{path}: `{k}` not supported in strict mode"
            );
        }
        assert!(
            ["type", "anyOf", "$ref", "enum", "const"]
                .iter()
                .any(|k| s.contains_key(*k)),
            "{name}{path}: untyped node in strict mode"
        );
        if let Some(Value::Object(props)) = s.get("properties") {
            assert_eq!(
                s.get("additionalProperties"),
                Some(&Value::Bool(false)),
                "{name}{path}: not closed"
            );
            let mut required: Vec<&str> = s["required"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap())
                .collect();
            let mut keys: Vec<&str> = props.keys().map(String::as_str).collect();
            required.sort_unstable();
            keys.sort_unstable();
            assert_eq!(required, keys, "{name}{path}: every property must be required");
        }
        if let Some(ap) = s.get("additionalProperties") {
            assert_eq!(
                ap,
                &Value::Bool(false),
                "{name}{path}: additionalProperties must be false"
            );
        }
        if is_array_node(node) {
            assert!(s.contains_key("items"), "{name}{path}: array without items");
        }
        if let Some(Value::String(f)) = s.get("format") {
            assert!(FORMATS.contains(&f.as_str()), "{name}{path}: format {f}");
        }
        assert!(
            path.matches("/properties/").count() <= 10,
            "{name}{path}: deeper than 10 levels"
        );
    }
}

/// OpenAI function calling, non-strict: root an object; every array has `items` (the API
/// refuses "array schema missing items").
fn check_openai(name: &str, schema: &Value) {
    assert_eq!(schema["type"], "object", "{name}: root object");
    for (path, node) in nodes(schema) {
        if is_array_node(node) {
            assert!(node.get("items").is_some(), "{name}{path}: array schema missing items");
        }
    }
    meta_valid(name, schema);
}

/// Anthropic: `input_schema` is a JSON Schema whose root is `type: object`.
fn check_anthropic(name: &str, schema: &Value) {
    assert_eq!(schema["type"], "object", "{name}: root object");
    meta_valid(name, schema);
}

/// MCP: `inputSchema` is a JSON Schema (2020-12 by default) with `type: object` at the root.
fn check_mcp(name: &str, schema: &Value) {
    assert_eq!(schema["type"], "object", "{name}: root object");
    meta_valid(name, schema);
}

/// Gemini `parameters`: the `Schema` object (OpenAPI 3.0 subset). Only its fields; `type` one
/// of the `Type` enum (one type, never an array, never `NULL` for a nullable value: `nullable`);
/// OBJECT with non-empty `properties`; ARRAY with `items`; `enum` only on STRING (format
/// `enum`); string formats `enum` and `date-time`; no `$ref`, `$defs`, `additionalProperties`,
/// `prefixItems`, `const`, `oneOf`, `allOf`.
fn check_gemini_parameters(name: &str, schema: &Value) {
    const FIELDS: &[&str] = &[
        "type",
        "format",
        "title",
        "description",
        "nullable",
        "enum",
        "maxItems",
        "minItems",
        "properties",
        "required",
        "minProperties",
        "maxProperties",
        "minLength",
        "maxLength",
        "pattern",
        "example",
        "anyOf",
        "propertyOrdering",
        "default",
        "items",
        "minimum",
        "maximum",
    ];
    const TYPES: &[&str] = &["STRING", "NUMBER", "INTEGER", "BOOLEAN", "ARRAY", "OBJECT"];
    for (path, node) in nodes(schema) {
        let Value::Object(s) = node else {
            panic!("{name}{path}: boolean schema")
        };
        for k in s.keys() {
            assert!(
                FIELDS.contains(&k.as_str()),
                "{name}{path}: `{k}` is not a Gemini Schema field"
            );
        }
        match s.get("type") {
            Some(Value::String(t)) => assert!(TYPES.contains(&t.as_str()), "{name}{path}: type {t}"),
            Some(other) => panic!("{name}{path}: type must be one string, got {other}"),
            None => assert!(s.contains_key("anyOf"), "{name}{path}: no type"),
        }
        let ty = s.get("type").and_then(Value::as_str);
        if ty == Some("OBJECT") {
            assert!(
                s.get("properties")
                    .and_then(Value::as_object)
                    .is_some_and(|p| !p.is_empty()),
                "{name}{path}: OBJECT needs non-empty properties"
            );
        }
        if ty == Some("ARRAY") {
            assert!(s.contains_key("items"), "{name}{path}: ARRAY needs items");
        }
        if let Some(Value::Array(values)) = s.get("enum") {
            assert_eq!(ty, Some("STRING"), "{name}{path}: enum on a non-string");
            assert!(
                values.iter().all(Value::is_string),
                "{name}{path}: enum values must be strings"
            );
        }
        if let Some(Value::String(f)) = s.get("format") {
            let ok = match ty {
                Some("STRING") => ["enum", "date-time"].contains(&f.as_str()),
                Some("NUMBER") => ["float", "double"].contains(&f.as_str()),
                Some("INTEGER") => ["int32", "int64"].contains(&f.as_str()),
                _ => false,
            };
            assert!(ok, "{name}{path}: format {f} on {ty:?}");
        }
    }
}

/// Gemini `parametersJsonSchema`: JSON Schema, with the keywords Gemini documents.
fn check_gemini_json_schema(name: &str, schema: &Value) {
    const KEYWORDS: &[&str] = &[
        "$id",
        "$defs",
        "$ref",
        "$anchor",
        "type",
        "format",
        "title",
        "description",
        "enum",
        "items",
        "prefixItems",
        "minItems",
        "maxItems",
        "minimum",
        "maximum",
        "anyOf",
        "oneOf",
        "properties",
        "additionalProperties",
        "required",
        "propertyOrdering",
    ];
    assert_eq!(schema["type"], "object", "{name}: root object");
    for (path, node) in nodes(schema) {
        if let Value::Object(s) = node {
            for k in s.keys() {
                assert!(
                    KEYWORDS.contains(&k.as_str()),
                    "{name}{path}: `{k}` not documented for Gemini"
                );
            }
        }
    }
    meta_valid(name, schema);
}

fn meta_valid(name: &str, schema: &Value) {
    if let Err(e) = jsonschema::draft202012::meta::validate(schema) {
        panic!("{name}: not a valid 2020-12 schema: {e}\n{schema:#}");
    }
}

fn checker(d: Dialect) -> fn(&str, &Value) {
    match d {
        Dialect::OpenAiStrict => check_openai_strict,
        Dialect::OpenAi => check_openai,
        Dialect::Anthropic => check_anthropic,
        Dialect::GeminiParameters => check_gemini_parameters,
        Dialect::GeminiJsonSchema => check_gemini_json_schema,
        Dialect::Mcp => check_mcp,
    }
}

fn snapshot(name: &str, value: &Value) {
    common::snapshot::assert_json("dialects", name, name, value);
}

#[test]
fn every_case_in_every_dialect_follows_the_providers_rules() {
    for c in cases() {
        // The exported schema accepts what serde writes.
        let v = jsonschema::draft202012::new(&c.schema).unwrap();
        assert!(
            v.is_valid(&c.sample),
            "{}: exported schema rejects {}",
            c.name,
            c.sample
        );
        for d in Dialect::ALL {
            let compiled = compile(&c.schema, d);
            let label = format!("{}.{}", c.name, d);
            if d == Dialect::OpenAiStrict && !compiled.is_strict() {
                // Not sent strict: the non-strict export is what OpenAI gets; the report says why.
                assert!(!compiled.not_strict.is_empty(), "{label}");
                snapshot(
                    &label,
                    &json!({"not_strict": compiled.not_strict, "moved": compiled.moved}),
                );
                continue;
            }
            checker(d)(&label, &compiled.schema);
            snapshot(&label, &json!({"schema": compiled.schema, "moved": compiled.moved}));
            // JSON Schema dialects still accept the real value (strict: after the null-for-
            // default rule, an Option's None is `null`, which serde wrote already).
            if matches!(
                d,
                Dialect::OpenAi | Dialect::Anthropic | Dialect::Mcp | Dialect::GeminiJsonSchema
            ) {
                let v = jsonschema::draft202012::new(&compiled.schema).unwrap();
                assert!(v.is_valid(&c.sample), "{label}: rejects {}", c.sample);
            }
        }
    }
}

fn case_schema(name: &str) -> Value {
    cases().into_iter().find(|c| c.name == name).unwrap().schema
}

#[test]
fn integers_carry_their_bounds() {
    let s = case_schema("scalars");
    let p = &s["properties"];
    let bounds = |f: &str| (p[f]["minimum"].as_i64(), p[f]["maximum"].as_i64());
    assert_eq!(bounds("a"), (Some(-128), Some(127)));
    assert_eq!(bounds("b"), (Some(-32768), Some(32767)));
    assert_eq!(bounds("c"), (Some(i32::MIN.into()), Some(i32::MAX.into())));
    assert_eq!(bounds("d"), (Some(-MAX_SAFE_INTEGER), Some(MAX_SAFE_INTEGER)));
    assert_eq!(bounds("e"), (Some(0), Some(255)));
    assert_eq!(bounds("f"), (Some(0), Some(65535)));
    assert_eq!(bounds("g"), (Some(0), Some(u32::MAX.into())));
    assert_eq!(bounds("h"), (Some(0), Some(MAX_SAFE_INTEGER)));
    assert_eq!(bounds("i"), (Some(0), Some(MAX_SAFE_INTEGER)));
    assert_eq!(bounds("j"), (Some(-MAX_SAFE_INTEGER), Some(MAX_SAFE_INTEGER)));
    assert_eq!(MAX_SAFE_INTEGER, 9_007_199_254_740_991);
}

#[test]
fn tuples_have_items_for_openai_and_a_homogeneous_one_is_strict() {
    let s = case_schema("tuples");
    let openai = compile(&s, Dialect::OpenAi).schema;
    assert!(openai["properties"]["point"]["items"].is_object(), "{openai:#}");
    assert!(openai["properties"]["labelled"]["items"].is_object(), "{openai:#}");
    let strict = compile(&s, Dialect::OpenAiStrict);
    assert!(!strict.is_strict());
    assert_eq!(strict.not_strict.len(), 1, "{:?}", strict.not_strict);
    assert!(
        strict.not_strict[0].starts_with("`labelled`: a tuple"),
        "{:?}",
        strict.not_strict
    );

    #[derive(Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct Point {
        point: (f64, f64),
    }
    schema::assert_strict::<Point>();
    let strict = compile(&input_schema::<Point>(), Dialect::OpenAiStrict).schema;
    assert_eq!(
        strict["properties"]["point"],
        json!({"type": "array", "items": {"type": "number"}, "minItems": 2, "maxItems": 2})
    );
}

#[test]
fn the_issues_three_causes_of_silent_non_strict() {
    // A map: not strict, and the reason names the field.
    let err = schema::check_strict::<Maps>().unwrap_err();
    assert!(err.reasons.iter().any(|r| r.starts_with("`counts`: a map")), "{err}");
    // `#[serde(default)]`: strict now (null reads as "left out").
    schema::assert_strict::<Defaults>();
    let strict = compile(&case_schema("defaults"), Dialect::OpenAiStrict).schema;
    assert_eq!(strict["properties"]["notify"]["type"], json!(["boolean", "null"]));
    // `Option<serde_json::Value>`: not strict, because the value has no type.
    let err = schema::check_strict::<Untyped>().unwrap_err();
    assert!(
        err.reasons
            .iter()
            .any(|r| r.starts_with("`extra`: accepts any JSON value")),
        "{err}"
    );
    assert!(err.to_string().contains("cannot be strict"), "{err}");
}

#[test]
fn what_strict_mode_cannot_say_moves_into_the_description() {
    let strict = compile(&case_schema("constrained"), Dialect::OpenAiStrict);
    assert!(strict.is_strict(), "{:?}", strict.not_strict);
    let note = &strict.schema["properties"]["note"];
    assert!(
        note.get("maxLength").is_none() && note.get("minLength").is_none(),
        "{note}"
    );
    assert_eq!(note["description"], "1 to 200 characters.");
    assert_eq!(
        strict.schema["properties"]["quantity"]["maximum"], 10,
        "bounds are taken"
    );
    assert!(
        strict
            .moved
            .iter()
            .any(|m| m.starts_with("`note`: `minLength`/`maxLength`")),
        "{:?}",
        strict.moved
    );
    // Anthropic keeps them.
    let anthropic = compile(&case_schema("constrained"), Dialect::Anthropic).schema;
    assert_eq!(anthropic["properties"]["note"]["maxLength"], 200);
}

#[test]
fn gemini_parameters_have_no_json_schema_only_shapes() {
    let maps = compile(&case_schema("maps"), Dialect::GeminiParameters).schema;
    assert_eq!(maps["properties"]["counts"]["type"], "ARRAY");
    assert_eq!(
        maps["properties"]["counts"]["items"]["required"],
        json!(["key", "value"])
    );
    let options = compile(&case_schema("options"), Dialect::GeminiParameters).schema;
    assert_eq!(
        options["properties"]["note"],
        json!({"type": "STRING", "nullable": true})
    );
    let foreign = compile(&case_schema("foreign"), Dialect::GeminiParameters);
    assert_eq!(foreign.schema["properties"]["id"]["description"], "A UUID.");
    assert_eq!(foreign.schema["properties"]["when"]["format"], "date-time");
    let recursive = compile(&case_schema("recursive"), Dialect::GeminiParameters);
    assert!(!recursive.schema.to_string().contains("$ref"));
    assert!(
        recursive.moved.iter().any(|m| m.contains("recursive")),
        "{:?}",
        recursive.moved
    );
}

/// Tools through the toolkit: the export report, `check_strict` and the manifest say why a tool
/// is not strict.
mod toolkit {
    use super::*;

    /// Count things.
    #[tool(effect = "pure")]
    async fn count_things(counts: HashMap<String, u32>) -> Result<u32, ToolError> {
        Ok(counts.values().sum())
    }

    /// Look up an order.
    #[tool(effect = "pure")]
    async fn lookup(order_id: String, note: Option<String>) -> Result<String, ToolError> {
        Ok(format!("{order_id}{note:?}"))
    }

    #[test]
    fn reports_check_and_manifest_say_why() {
        let kit = effect_tool::toolkit![CountThings, Lookup];
        let openai = kit.openai_tools();
        assert_eq!(openai[0]["function"]["strict"], false);
        assert_eq!(openai[1]["function"]["strict"], true);
        let report = kit.export_report(Dialect::OpenAiStrict);
        assert!(!report[0].strict && report[0].not_strict[0].starts_with("`counts`: a map"));
        assert!(report[1].strict);
        let err = kit.check_strict().unwrap_err();
        assert_eq!(err.len(), 1);
        assert_eq!(err[0].type_name, "count_things");
        let manifest = kit.manifest();
        assert!(
            manifest.contains("\n# not strict: count_things: `counts`: a map"),
            "{manifest}"
        );
        let gemini = kit.gemini_tools();
        assert_eq!(gemini[0]["parameters"]["properties"]["counts"]["type"], "ARRAY");
        assert_eq!(gemini[1]["name"], "lookup");
        assert!(kit.gemini_json_schema_tools()[0]["parametersJsonSchema"].is_object());
        assert_eq!(CountThings::NAME, "count_things");
    }
}
