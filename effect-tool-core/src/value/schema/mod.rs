//! JSON Schemas of tool arguments in the shape model providers accept.
//!
//! schemars writes a correct JSON Schema (draft 2020-12), but providers accept subsets of it, and
//! the users of other Rust tool libraries found the gaps one failed request at a time (rmcp's and
//! rig's issue trackers: `$ref`s the model cannot follow, `format: "uint"` rejected by Gemini,
//! `$schema` rejected, optional fields refused by OpenAI's strict mode). [`input_schema`] exports
//! every tool in the shape that the major providers take as is:
//!
//! | what schemars writes | what is exported | why |
//! |---|---|---|
//! | `$schema: ".../2020-12/schema"` | removed | some providers reject unknown top-level keywords; the shape is still draft 2020-12 |
//! | root `title` (the Rust type name) | removed | noise for the model (`IssueRefundArgs`) |
//! | `$ref` + `$defs` for nested types | inlined, `$defs` removed | several providers do not resolve references; models read inline schemas better |
//! | `format: "uint64"`, `"int32"`, `"double"`, `"float"`, ... | removed; integers get `minimum`/`maximum` | not JSON Schema formats; Gemini and OpenAI reject them. 8-, 16- and 32-bit integers carry their type's range; 64-bit ones (and `usize`, `isize`, 128-bit) ±[`MAX_SAFE_INTEGER`], the range effect keys hold exactly |
//! | `format` on strings other than the standard ones | removed | same; `date-time`, `email`, `uuid`, ... are kept |
//! | `oneOf` (enums) | `anyOf` | serde's enum branches are disjoint, so `anyOf` accepts the same values, and more providers take it |
//! | `const: x` | `enum: [x]` | the same constraint; `const` is missing from several providers' subsets |
//! | object without `additionalProperties` | `additionalProperties: false` | the model learns it cannot add fields (the args struct rejects them anyway) |
//!
//! Recursive types are the one exception: their `$ref`s cannot be inlined and stay, with the
//! `$defs` they point to. Nullable values keep JSON Schema's type arrays (`["string", "null"]`).
//!
//! That schema is then compiled once per provider dialect ([`compile`], [`Dialect`]): OpenAI
//! strict and non-strict, Anthropic, Gemini `parameters` (OpenAPI 3.0 subset) and
//! `parametersJsonSchema`, MCP. Each dialect's rules are one [`Rules`] table
//! ([`Dialect::rules`]). What a dialect cannot express is moved into the description, reported
//! in [`Compiled::moved`], and still enforced by the dispatcher; why a schema cannot be strict is
//! in [`Compiled::not_strict`] ([`strict_report`], [`check_strict`], [`assert_strict`]).
//!
//! [`strict_schema`] rewrites an exported schema for OpenAI's strict mode, where every property
//! must be listed in `required` and optional ones are made nullable instead.

mod dialect;

use schemars::JsonSchema;
use serde_json::{Map, Value};

pub use dialect::{Compiled, Dialect, MapRule, Rules, TupleRule, UNROLL_DEPTH, UntypedRule, compile};

/// String formats defined by JSON Schema and accepted by providers; every other `format` is
/// removed from exported schemas.
pub const STANDARD_STRING_FORMATS: &[&str] = &[
    "date-time",
    "date",
    "time",
    "duration",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "uri",
    "uuid",
];

/// String formats OpenAI's strict mode accepts (a subset of [`STANDARD_STRING_FORMATS`]: no
/// `uri`); [`strict_schema`] removes the others.
pub const STRICT_STRING_FORMATS: &[&str] = &[
    "date-time",
    "date",
    "time",
    "duration",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "uuid",
];

/// The JSON Schema of `T`, as exported to models (see the [module docs](self) for what is
/// changed from schemars' output and why).
///
/// ```
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct Args {
///     /// How much, in cents.
///     amount_cents: u64,
/// }
///
/// let schema = effect_tool_core::value::schema::input_schema::<Args>();
/// assert_eq!(schema["type"], "object");
/// assert_eq!(schema["additionalProperties"], false);
/// assert_eq!(schema["properties"]["amount_cents"]["minimum"], 0);
/// assert!(schema["properties"]["amount_cents"].get("format").is_none());
/// assert!(schema.get("$schema").is_none());
/// ```
pub fn input_schema<T: JsonSchema>() -> Value {
    let generator = schemars::generate::SchemaSettings::draft2020_12()
        .with(|s| s.inline_subschemas = true)
        .into_generator();
    let mut value = generator.into_root_schema_for::<T>().to_value();
    if let Value::Object(root) = &mut value {
        root.remove("$schema");
        root.remove("title");
    }
    clean(&mut value);
    drop_unused_defs(&mut value);
    value
}

/// The JSON Schema of a tool's output type `T`, as the journal keeps it for the people who
/// record an output by hand ([`crate::Tool::output_schema`], [`crate::StoreExt::resolve`]).
///
/// Unlike [`input_schema`], nothing is changed for a provider: it is schemars' own draft
/// 2020-12 schema (`$schema` kept, nested types under `$defs`), so that it accepts what
/// `serde_json::from_value::<T>` accepts (unknown fields included, unless `T` denies them).
///
/// ```
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct Refund {
///     id: String,
///     amount_cents: u64,
/// }
///
/// let schema = effect_tool_core::value::schema::output_schema::<Refund>();
/// assert_eq!(schema["type"], "object");
/// assert_eq!(schema["required"], serde_json::json!(["id", "amount_cents"]));
/// ```
pub fn output_schema<T: JsonSchema>() -> Value {
    schemars::generate::SchemaSettings::draft2020_12()
        .into_generator()
        .into_root_schema_for::<T>()
        .to_value()
}

/// What `#[tool]` generates for [`crate::Tool::output_schema`]: `Some(schema)` when the
/// output type implements [`JsonSchema`], `None` when it does not (autoref specialization,
/// which works for the concrete types generated code names). Not for use by hand: a manual
/// `impl Tool` returns `Some(output_schema::<Self::Output>())` itself.
#[doc(hidden)]
pub mod probe {
    use std::marker::PhantomData;

    /// The output type `T`, whose schema is asked for.
    pub struct OutputSchemaProbe<T: ?Sized>(PhantomData<T>);

    impl<T: ?Sized> OutputSchemaProbe<T> {
        /// The probe.
        pub const fn new() -> Self {
            OutputSchemaProbe(PhantomData)
        }
    }

    impl<T: ?Sized> Default for OutputSchemaProbe<T> {
        fn default() -> Self {
            Self::new()
        }
    }

    /// Chosen when `T` implements `JsonSchema`: its schema.
    pub trait ViaJsonSchema {
        /// The schema.
        fn output_schema(&self) -> Option<serde_json::Value>;
    }

    impl<T: schemars::JsonSchema> ViaJsonSchema for &OutputSchemaProbe<T> {
        fn output_schema(&self) -> Option<serde_json::Value> {
            Some(super::output_schema::<T>())
        }
    }

    /// Chosen otherwise: no schema.
    pub trait ViaNothing {
        /// No schema.
        fn output_schema(&self) -> Option<serde_json::Value>;
    }

    impl<T: ?Sized> ViaNothing for OutputSchemaProbe<T> {
        fn output_schema(&self) -> Option<serde_json::Value> {
            None
        }
    }
}

/// The JSON Schema draft that exported schemas follow (their `$schema` is removed on export).
pub const DRAFT: &str = "https://json-schema.org/draft/2020-12/schema";

/// Rewrite one schema node and everything under it.
fn clean(schema: &mut Value) {
    let Value::Object(s) = schema else { return };
    if let Some(Value::String(format)) = s.get("format")
        && let Some((lo, hi)) = integer_bounds(format)
        && type_includes(s, "integer")
    {
        s.entry("minimum").or_insert_with(|| Value::from(lo));
        s.entry("maximum").or_insert_with(|| Value::from(hi));
    }
    if let Some(Value::String(format)) = s.get("format") {
        let is_string = type_includes(s, "string");
        if !(is_string && STANDARD_STRING_FORMATS.contains(&format.as_str())) {
            s.remove("format");
        }
    }
    if !s.contains_key("anyOf")
        && let Some(options) = s.remove("oneOf")
    {
        s.insert("anyOf".into(), options);
    }
    if let Some(c) = s.remove("const") {
        s.entry("enum").or_insert_with(|| Value::Array(vec![c]));
    }
    if s.contains_key("properties") && !s.contains_key("additionalProperties") {
        s.insert("additionalProperties".into(), Value::Bool(false));
    }
    for (key, child) in s.iter_mut() {
        match key.as_str() {
            // Subschemas by name.
            "properties" | "$defs" | "definitions" | "patternProperties" | "dependentSchemas" => {
                if let Value::Object(map) = child {
                    map.values_mut().for_each(clean);
                }
            }
            // Lists of subschemas.
            "anyOf" | "oneOf" | "allOf" | "prefixItems" => {
                if let Value::Array(list) = child {
                    list.iter_mut().for_each(clean);
                }
            }
            // Single subschemas.
            "items"
            | "additionalProperties"
            | "not"
            | "if"
            | "then"
            | "else"
            | "contains"
            | "propertyNames"
            | "unevaluatedProperties"
            | "unevaluatedItems" => clean(child),
            // Values, not schemas (`default`, `examples`, `enum`, ...).
            _ => {}
        }
    }
}

/// The largest integer a 64-bit argument may take: 2^53 − 1, the largest that canonical JSON
/// (RFC 8785, which writes numbers as IEEE doubles) keys exactly. Larger values are refused
/// when the key is made, so the schema says so up front.
pub const MAX_SAFE_INTEGER: i64 = (1 << 53) - 1;

/// The bounds exported for schemars' integer formats: the Rust type's own range for 8, 16 and
/// 32 bits, and ±[`MAX_SAFE_INTEGER`] for 64 and 128 bits and `usize`/`isize`.
fn integer_bounds(format: &str) -> Option<(i64, i64)> {
    Some(match format {
        "int8" => (i8::MIN.into(), i8::MAX.into()),
        "int16" => (i16::MIN.into(), i16::MAX.into()),
        "int32" => (i32::MIN.into(), i32::MAX.into()),
        "uint8" => (0, u8::MAX.into()),
        "uint16" => (0, u16::MAX.into()),
        "uint32" => (0, u32::MAX.into()),
        "int64" | "int128" | "int" => (-MAX_SAFE_INTEGER, MAX_SAFE_INTEGER),
        "uint64" | "uint128" | "uint" => (0, MAX_SAFE_INTEGER),
        _ => return None,
    })
}

fn type_includes(s: &Map<String, Value>, ty: &str) -> bool {
    match s.get("type") {
        Some(Value::String(t)) => t == ty,
        Some(Value::Array(ts)) => ts.iter().any(|t| t == ty),
        _ => false,
    }
}

/// Remove `$defs` when the schema no longer refers to them (everything was inlined); a
/// recursive type keeps its `$ref` and the definitions with it.
fn drop_unused_defs(root: &mut Value) {
    let Value::Object(s) = root else { return };
    let Some(defs) = s.remove("$defs") else { return };
    if s.values().any(contains_ref) {
        s.insert("$defs".into(), defs);
    }
}

fn contains_ref(v: &Value) -> bool {
    match v {
        Value::Object(m) => m.contains_key("$ref") || m.values().any(contains_ref),
        Value::Array(a) => a.iter().any(contains_ref),
        _ => false,
    }
}

/// The schema rewritten for OpenAI's strict mode (`"strict": true` function calling and
/// structured outputs).
///
/// Strict mode requires, for every object: `additionalProperties: false`, and every property
/// listed in `required`. A property that was optional becomes required *and nullable*
/// (`"type": ["integer", "null"]`, or `anyOf: [..., {"type": "null"}]`), so the model sends
/// `null` where it would have left the field out. Also: `oneOf` becomes `anyOf`, formats outside
/// [`STRICT_STRING_FORMATS`] are removed, and `default` is removed (strict mode never leaves a
/// field out, so a default cannot apply).
///
/// For arguments generated by `#[tool]` this accepts exactly what the tool accepts: optional
/// arguments are `Option<T>`, and serde reads `null` as `None`. A hand-written args type with
/// `#[serde(default)]` on a non-`Option` field would receive `null` for it; use
/// [`strict_schema_exact`] to tell when strict mode would change what a schema accepts.
///
/// ```
/// use serde_json::json;
/// let schema = json!({
///     "type": "object",
///     "properties": {"id": {"type": "string"}, "note": {"type": "string"}},
///     "required": ["id"]
/// });
/// let strict = effect_tool_core::value::schema::strict_schema(&schema);
/// assert_eq!(strict["required"], json!(["id", "note"]));
/// assert_eq!(strict["properties"]["note"]["type"], json!(["string", "null"]));
/// assert_eq!(strict["additionalProperties"], false);
/// ```
pub fn strict_schema(schema: &Value) -> Value {
    let mut out = schema.clone();
    clean(&mut out);
    compile(&out, Dialect::OpenAiStrict).schema
}

/// [`strict_schema`], or `None` when the schema cannot be strict ([`strict_report`] says why: a
/// map, a value of any type, a tuple of mixed types, `allOf`, ...). A caller can then export the
/// tool non-strict instead.
///
/// An optional property that does not accept `null` (a `#[serde(default)]` field) can be
/// strict: the schema makes it required and nullable, and the
/// [`Dispatcher`](crate::toolkit::Dispatcher) reads a `null` there as "left out", so the
/// default applies.
pub fn strict_schema_exact(schema: &Value) -> Option<Value> {
    let mut out = schema.clone();
    clean(&mut out);
    let compiled = compile(&out, Dialect::OpenAiStrict);
    compiled.is_strict().then_some(compiled.schema)
}

/// Why `schema` (an exported schema) cannot be sent to OpenAI with `"strict": true`, one reason
/// per field; empty when it can.
pub fn strict_report(schema: &Value) -> Vec<String> {
    let mut out = schema.clone();
    clean(&mut out);
    compile(&out, Dialect::OpenAiStrict).not_strict
}

/// `T`'s arguments cannot be sent with OpenAI's `"strict": true`; the reasons say which field
/// and why, and what to change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{type_name}` cannot be strict (OpenAI strict mode):\n  - {}", reasons.join("\n  - "))]
pub struct NotStrict {
    /// The Rust type of the arguments (or the tool's name).
    pub type_name: String,
    /// One reason per field.
    pub reasons: Vec<String>,
}

/// Whether `T`'s exported schema can be strict, and if not why. `#[tool(strict)]` runs this in
/// a generated test; [`crate::toolkit::Toolkit::check_strict`] runs it on every tool.
pub fn check_strict<T: JsonSchema>() -> Result<(), NotStrict> {
    let reasons = strict_report(&input_schema::<T>());
    if reasons.is_empty() {
        Ok(())
    } else {
        Err(NotStrict {
            type_name: std::any::type_name::<T>().to_owned(),
            reasons,
        })
    }
}

/// Panic, with the reasons, unless `T`'s exported schema can be strict. For a test of your own:
///
/// ```
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct Args { order_id: String, note: Option<String> }
/// effect_tool_core::value::schema::assert_strict::<Args>();
/// ```
///
/// ```should_panic
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct Args { counts: std::collections::HashMap<String, u32> }
/// // panics: "`counts`: a map (`HashMap`/`BTreeMap`): strict mode needs every property named ..."
/// effect_tool_core::value::schema::assert_strict::<Args>();
/// ```
#[track_caller]
pub fn assert_strict<T: JsonSchema>() {
    if let Err(e) = check_strict::<T>() {
        panic!("{e}");
    }
}

const MAX_DEPTH: usize = 64;

fn make_strict(schema: &mut Value, depth: usize) {
    if depth > MAX_DEPTH {
        return;
    }
    let Value::Object(s) = schema else { return };
    s.remove("default");
    if let Some(Value::String(format)) = s.get("format")
        && !STRICT_STRING_FORMATS.contains(&format.as_str())
    {
        s.remove("format");
    }
    for (key, child) in s.iter_mut() {
        match key.as_str() {
            "$defs" | "definitions" => {
                if let Value::Object(map) = child {
                    map.values_mut().for_each(|c| make_strict(c, depth + 1));
                }
            }
            "anyOf" | "prefixItems" => {
                if let Value::Array(list) = child {
                    list.iter_mut().for_each(|c| make_strict(c, depth + 1));
                }
            }
            "items" => make_strict(child, depth + 1),
            "additionalProperties" if child.is_object() => make_strict(child, depth + 1),
            _ => {}
        }
    }
    let Some(Value::Object(props)) = s.get("properties") else {
        return;
    };
    let required: Vec<String> = s
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect())
        .unwrap_or_default();
    // Sorted, so the output does not depend on serde_json's map order (`preserve_order`).
    let mut names: Vec<String> = props.keys().cloned().collect();
    names.sort();
    let mut props = props.clone();
    for (name, prop) in props.iter_mut() {
        make_strict(prop, depth + 1);
        if !required.contains(name) && !accepts_null(prop) {
            make_nullable(prop);
        }
    }
    s.insert("properties".into(), Value::Object(props));
    s.insert(
        "required".into(),
        Value::Array(names.into_iter().map(Value::String).collect()),
    );
    s.insert("additionalProperties".into(), Value::Bool(false));
}

/// Whether a schema already accepts `null`.
fn accepts_null(schema: &Value) -> bool {
    match schema {
        Value::Bool(b) => *b,
        Value::Object(s) => {
            type_includes(s, "null")
                || s.get("enum")
                    .and_then(Value::as_array)
                    .is_some_and(|e| e.iter().any(Value::is_null))
                || ["anyOf", "oneOf"].iter().any(|k| {
                    s.get(*k)
                        .and_then(Value::as_array)
                        .is_some_and(|o| o.iter().any(accepts_null))
                })
        }
        _ => false,
    }
}

/// Make a schema accept `null` too: add `"null"` to a type (and to an `enum`), or wrap it in
/// `anyOf`.
fn make_nullable(schema: &mut Value) {
    let Value::Object(s) = schema else { return };
    let simple_type = match s.get("type") {
        Some(Value::String(_)) | Some(Value::Array(_)) => !s.contains_key("anyOf"),
        _ => false,
    };
    if simple_type {
        let ty = s.remove("type").expect("checked above");
        let mut types = match ty {
            Value::Array(ts) => ts,
            other => vec![other],
        };
        types.push(Value::String("null".into()));
        s.insert("type".into(), Value::Array(types));
        if let Some(Value::Array(values)) = s.get_mut("enum") {
            values.push(Value::Null);
        }
        return;
    }
    if let Some(Value::Array(options)) = s.get_mut("anyOf") {
        options.push(serde_json::json!({"type": "null"}));
        return;
    }
    // Any other schema: wrap it, keeping its description at the top for the model.
    let description = s.remove("description");
    let inner = Value::Object(std::mem::take(s));
    s.insert(
        "anyOf".into(),
        Value::Array(vec![inner, serde_json::json!({"type": "null"})]),
    );
    if let Some(d) = description {
        s.insert("description".into(), d);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    #[test]
    #[allow(clippy::needless_borrow)] // the two `&` choose the impl (autoref specialization)
    fn the_output_probe_gives_a_schema_only_for_a_type_that_has_one() {
        use super::probe::{OutputSchemaProbe, ViaJsonSchema as _, ViaNothing as _};
        #[derive(schemars::JsonSchema)]
        #[allow(dead_code)]
        struct Typed {
            id: String,
        }
        #[allow(dead_code)]
        struct Untyped;
        let typed = (&&OutputSchemaProbe::<Typed>::new()).output_schema();
        assert_eq!(typed, Some(output_schema::<Typed>()));
        assert_eq!((&&OutputSchemaProbe::<Untyped>::new()).output_schema(), None);
    }

    #[test]
    fn formats_providers_reject_are_removed_and_bounds_kept() {
        let mut s = json!({
            "type": "object",
            "properties": {
                "n": {"type": "integer", "format": "uint64", "minimum": 0},
                "x": {"type": "number", "format": "double"},
                "when": {"type": "string", "format": "date-time"},
                "site": {"type": "string", "format": "uri"},
                "odd": {"type": "string", "format": "int64"}
            }
        });
        clean(&mut s);
        assert_eq!(
            s["properties"]["n"],
            json!({"type": "integer", "minimum": 0, "maximum": MAX_SAFE_INTEGER})
        );
        assert_eq!(s["properties"]["x"], json!({"type": "number"}));
        assert_eq!(s["properties"]["when"]["format"], "date-time");
        assert!(s["properties"]["odd"].get("format").is_none());
        assert_eq!(s["additionalProperties"], false);
        assert_eq!(s["properties"]["site"]["format"], "uri");
        let strict = strict_schema(&s);
        assert!(
            strict["properties"]["site"].get("format").is_none(),
            "OpenAI strict mode rejects uri"
        );
        assert_eq!(strict["properties"]["when"]["format"], "date-time");
    }

    #[test]
    fn strict_makes_optional_properties_required_and_nullable() {
        let s = json!({
            "type": "object",
            "properties": {
                "id": {"type": "string"},
                "opt": {"type": ["integer", "null"], "default": null},
                "tags": {"type": "array", "items": {"type": "string"}},
                "kind": {"type": "string", "enum": ["a", "b"]},
                "nested": {"type": "object", "properties": {"z": {"type": "boolean"}}},
                "either": {"anyOf": [{"type": "string"}, {"type": "integer"}]}
            },
            "required": ["id"]
        });
        let strict = strict_schema(&s);
        let mut required: Vec<&str> = strict["required"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        required.sort_unstable();
        assert_eq!(required, ["either", "id", "kind", "nested", "opt", "tags"]);
        assert_eq!(strict["properties"]["opt"], json!({"type": ["integer", "null"]}));
        assert_eq!(strict["properties"]["tags"]["type"], json!(["array", "null"]));
        assert_eq!(strict["properties"]["kind"]["enum"], json!(["a", "b", null]));
        assert_eq!(strict["properties"]["nested"]["required"], json!(["z"]));
        assert_eq!(strict["properties"]["nested"]["additionalProperties"], false);
        assert_eq!(strict["properties"]["either"]["anyOf"][2], json!({"type": "null"}));
        assert!(
            strict_schema_exact(&s).is_some(),
            "optional fields that do not take null are strict: the dispatcher reads null as left out"
        );

        let only_options = json!({
            "type": "object",
            "properties": {"id": {"type": "string"}, "opt": {"type": ["integer", "null"]}},
            "required": ["id"]
        });
        let exact = strict_schema_exact(&only_options).unwrap();
        assert_eq!(exact["required"].as_array().map(Vec::len), Some(2));
        let map = json!({"type": "object", "properties": {"m": {"type": "object", "additionalProperties": {"type": "string"}}}, "required": ["m"]});
        assert!(strict_schema_exact(&map).is_none());
    }
}
