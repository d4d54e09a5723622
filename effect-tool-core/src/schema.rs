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
//! | `format: "uint64"`, `"int32"`, `"double"`, `"float"`, ... | removed (`minimum: 0` kept for unsigned) | not JSON Schema formats; Gemini and OpenAI reject them |
//! | `format` on strings other than the standard ones | removed | same; `date-time`, `email`, `uuid`, ... are kept |
//! | `oneOf` (enums) | `anyOf` | serde's enum branches are disjoint, so `anyOf` accepts the same values, and more providers take it |
//! | `const: x` | `enum: [x]` | the same constraint; `const` is missing from several providers' subsets |
//! | object without `additionalProperties` | `additionalProperties: false` | the model learns it cannot add fields (the args struct rejects them anyway) |
//!
//! Recursive types are the one exception: their `$ref`s cannot be inlined and stay, with the
//! `$defs` they point to. Nullable values keep JSON Schema's type arrays (`["string", "null"]`).
//!
//! [`strict_schema`] rewrites an exported schema for OpenAI's strict mode, where every property
//! must be listed in `required` and optional ones are made nullable instead.

use schemars::JsonSchema;
use serde_json::{Map, Value};

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
/// let schema = effect_tool_core::schema::input_schema::<Args>();
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

/// The JSON Schema draft that exported schemas follow (their `$schema` is removed on export).
pub const DRAFT: &str = "https://json-schema.org/draft/2020-12/schema";

/// Rewrite one schema node and everything under it.
fn clean(schema: &mut Value) {
    let Value::Object(s) = schema else { return };
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
/// let strict = effect_tool_core::schema::strict_schema(&schema);
/// assert_eq!(strict["required"], json!(["id", "note"]));
/// assert_eq!(strict["properties"]["note"]["type"], json!(["string", "null"]));
/// assert_eq!(strict["additionalProperties"], false);
/// ```
pub fn strict_schema(schema: &Value) -> Value {
    let mut out = schema.clone();
    clean(&mut out);
    make_strict(&mut out, 0);
    out
}

/// [`strict_schema`], or `None` when strict mode would change what the schema accepts: an
/// optional property that does not already accept `null`, a map (`additionalProperties` as a
/// schema), or a keyword OpenAI's strict mode does not support. A caller can then export the
/// tool non-strict instead.
pub fn strict_schema_exact(schema: &Value) -> Option<Value> {
    if schema.get("type").and_then(Value::as_str) != Some("object") || !exact(schema, 0) {
        return None;
    }
    Some(strict_schema(schema))
}

/// Keywords OpenAI's strict mode rejects.
const STRICT_UNSUPPORTED: &[&str] = &[
    "patternProperties",
    "unevaluatedProperties",
    "propertyNames",
    "minProperties",
    "maxProperties",
    "unevaluatedItems",
    "contains",
    "minContains",
    "maxContains",
    "uniqueItems",
    "if",
    "then",
    "else",
    "not",
    "dependentRequired",
    "dependentSchemas",
    "allOf",
];

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

/// Whether strict mode keeps the meaning of `schema`.
fn exact(schema: &Value, depth: usize) -> bool {
    if depth > MAX_DEPTH {
        return false;
    }
    let Value::Object(s) = schema else {
        return schema.is_boolean();
    };
    if STRICT_UNSUPPORTED.iter().any(|k| s.contains_key(*k)) {
        return false;
    }
    if matches!(
        s.get("additionalProperties"),
        Some(Value::Object(_)) | Some(Value::Bool(true))
    ) {
        return false;
    }
    let required: Vec<&str> = s
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if let Some(Value::Object(props)) = s.get("properties") {
        for (name, prop) in props {
            if !required.contains(&name.as_str()) && !accepts_null(prop) {
                return false;
            }
            if !exact(prop, depth + 1) {
                return false;
            }
        }
    }
    for key in ["anyOf", "oneOf", "prefixItems"] {
        if let Some(Value::Array(list)) = s.get(key)
            && !list.iter().all(|c| exact(c, depth + 1))
        {
            return false;
        }
    }
    for key in ["$defs", "definitions"] {
        if let Some(Value::Object(map)) = s.get(key)
            && !map.values().all(|c| exact(c, depth + 1))
        {
            return false;
        }
    }
    match s.get("items") {
        Some(items) => exact(items, depth + 1),
        None => true,
    }
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
        assert_eq!(s["properties"]["n"], json!({"type": "integer", "minimum": 0}));
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
            strict_schema_exact(&s).is_none(),
            "tags/kind/nested/either were optional and not nullable"
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
