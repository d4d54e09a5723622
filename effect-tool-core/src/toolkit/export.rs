//! Tool definitions in the shapes model providers and MCP clients read.

use serde_json::{Map, Value, json};

use crate::class::EffectClass;
use crate::tool::ToolMeta;

/// The MCP tool annotations a class implies (`readOnlyHint`, `destructiveHint`,
/// `idempotentHint`), plus `openWorldHint` when the tool declares it.
///
/// | class | readOnlyHint | destructiveHint | idempotentHint |
/// |---|---|---|---|
/// | pure | true | | |
/// | idempotent | false | false | true |
/// | compensable | false | false | false |
/// | irreversible | false | true | false |
///
/// (MCP reads `destructiveHint` and `idempotentHint` only when `readOnlyHint` is false.)
///
/// ```
/// use effect_tool_core::{EffectClass, toolkit::mcp_annotations};
/// let a = mcp_annotations(EffectClass::Irreversible, Some(true));
/// assert_eq!(a["destructiveHint"], true);
/// assert_eq!(a["openWorldHint"], true);
/// ```
pub fn mcp_annotations(class: EffectClass, open_world: Option<bool>) -> Value {
    let mut a = Map::new();
    let mut set = |k: &str, v: bool| {
        a.insert(k.to_owned(), Value::Bool(v));
    };
    match class {
        EffectClass::Pure => set("readOnlyHint", true),
        EffectClass::Idempotent => {
            set("readOnlyHint", false);
            set("destructiveHint", false);
            set("idempotentHint", true);
        }
        EffectClass::Compensable => {
            set("readOnlyHint", false);
            set("destructiveHint", false);
            set("idempotentHint", false);
        }
        EffectClass::Irreversible => {
            set("readOnlyHint", false);
            set("destructiveHint", true);
            set("idempotentHint", false);
        }
    }
    if let Some(open) = open_world {
        set("openWorldHint", open);
    }
    Value::Object(a)
}

/// One tool's definition, ready to be written in any provider's shape.
pub(crate) struct Definition<'a> {
    pub meta: &'a ToolMeta,
    pub schema: &'a Value,
}

impl Definition<'_> {
    /// The schema as providers get it: an object schema (a non-object argument type is wrapped
    /// as-is; providers reject it, which the tool's author sees at once).
    fn parameters(&self) -> Value {
        self.schema.clone()
    }

    pub fn openai_chat(&self) -> Value {
        let mut function = Map::new();
        function.insert("name".into(), json!(self.meta.name));
        if !self.meta.description.is_empty() {
            function.insert("description".into(), json!(self.meta.description));
        }
        match strict_schema(self.schema) {
            Some(strict) => {
                function.insert("parameters".into(), strict);
                function.insert("strict".into(), json!(true));
            }
            None => {
                function.insert("parameters".into(), self.parameters());
                function.insert("strict".into(), json!(false));
            }
        }
        json!({"type": "function", "function": function})
    }

    pub fn openai_responses(&self) -> Value {
        let mut tool = Map::new();
        tool.insert("type".into(), json!("function"));
        tool.insert("name".into(), json!(self.meta.name));
        if !self.meta.description.is_empty() {
            tool.insert("description".into(), json!(self.meta.description));
        }
        match strict_schema(self.schema) {
            Some(strict) => {
                tool.insert("parameters".into(), strict);
                tool.insert("strict".into(), json!(true));
            }
            None => {
                tool.insert("parameters".into(), self.parameters());
                tool.insert("strict".into(), json!(false));
            }
        }
        Value::Object(tool)
    }

    pub fn anthropic(&self) -> Value {
        let mut tool = Map::new();
        tool.insert("name".into(), json!(self.meta.name));
        if !self.meta.description.is_empty() {
            tool.insert("description".into(), json!(self.meta.description));
        }
        tool.insert("input_schema".into(), self.parameters());
        Value::Object(tool)
    }

    pub fn mcp(&self) -> Value {
        let mut tool = Map::new();
        tool.insert("name".into(), json!(self.meta.name));
        if !self.meta.description.is_empty() {
            tool.insert("description".into(), json!(self.meta.description));
        }
        tool.insert("inputSchema".into(), self.parameters());
        tool.insert(
            "annotations".into(),
            mcp_annotations(self.meta.class, self.meta.open_world),
        );
        tool.insert("_meta".into(), mcp_meta(self.meta));
        Value::Object(tool)
    }
}

/// The `_meta` of an MCP tool: the declaration under `effect-tool/…` names, so a client that
/// knows effect-tool can read the class and key rule.
pub(crate) fn mcp_meta(meta: &ToolMeta) -> Value {
    let mut m = Map::new();
    m.insert("effect-tool/class".into(), json!(meta.class.as_str()));
    m.insert("effect-tool/key".into(), json!(meta.key_rule.to_string()));
    m.insert("effect-tool/window".into(), json!(meta.window.as_str()));
    if let Some(role) = meta.approval {
        m.insert("effect-tool/approval".into(), json!(role));
    }
    Value::Object(m)
}

/// OpenAI's strict mode: formats it accepts on strings. Other formats (schemars' `uint64`,
/// `double`, ...) are dropped from strict schemas.
const STRICT_STRING_FORMATS: &[&str] = &[
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

/// Keywords OpenAI's strict mode rejects; a schema using them is exported non-strict.
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

/// The schema rewritten for OpenAI's strict function calling, or `None` when it cannot be made
/// strict without changing what it accepts.
///
/// Strict mode wants every object closed (`additionalProperties: false`) with every property
/// listed in `required`. A property that is not required may be made required only if its
/// schema already accepts `null` (an `Option` field: the model sends `null` for "absent", which
/// serde reads as `None`); an optional property that does not accept `null`, a map
/// (`additionalProperties` as a schema) or an unsupported keyword keeps the tool non-strict.
/// Integer formats are dropped (strict mode rejects them; the bound they imply is kept in the
/// non-strict description of the schema, and argument validation still applies them).
///
/// (A private helper for now: if `schema::strict_schema` lands, the toolkit should call it.)
pub(crate) fn strict_schema(schema: &Value) -> Option<Value> {
    let mut out = schema.clone();
    if out.get("type").and_then(Value::as_str) != Some("object") {
        return None;
    }
    make_strict(&mut out, 0).then_some(out)
}

fn make_strict(schema: &mut Value, depth: usize) -> bool {
    if depth > 64 {
        return false;
    }
    let Value::Object(s) = schema else {
        // `true` (anything) cannot be strict; `false` never validates anything useful.
        return false;
    };
    if STRICT_UNSUPPORTED.iter().any(|k| s.contains_key(*k)) {
        return false;
    }
    if let Some(Value::String(f)) = s.get("format") {
        let keep =
            s.get("type").and_then(Value::as_str) == Some("string") && STRICT_STRING_FORMATS.contains(&f.as_str());
        if !keep {
            s.remove("format");
        }
    }
    for key in ["$defs", "definitions"] {
        if let Some(Value::Object(defs)) = s.get_mut(key) {
            for def in defs.values_mut() {
                if !make_strict(def, depth + 1) {
                    return false;
                }
            }
        }
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(Value::Array(options)) = s.get_mut(key) {
            for o in options.iter_mut() {
                if !make_strict(o, depth + 1) {
                    return false;
                }
            }
        }
    }
    if let Some(Value::Array(options)) = s.remove("oneOf") {
        // Strict mode has anyOf, not oneOf; schemars' oneOf branches are disjoint (tagged
        // enums), so anyOf accepts the same values.
        s.insert("anyOf".into(), Value::Array(options));
    }
    if let Some(items) = s.get_mut("items")
        && !make_strict(items, depth + 1)
    {
        return false;
    }
    if let Some(Value::Array(prefix)) = s.get("prefixItems")
        && !prefix.is_empty()
    {
        return false;
    }
    let is_object = match s.get("type") {
        Some(Value::String(t)) => t == "object",
        Some(Value::Array(ts)) => ts.iter().any(|t| t == "object"),
        _ => s.contains_key("properties"),
    };
    if !is_object {
        return true;
    }
    match s.get("additionalProperties") {
        None | Some(Value::Bool(false)) => {}
        Some(Value::Bool(true)) | Some(Value::Object(_)) | Some(_) => return false,
    }
    s.insert("additionalProperties".into(), Value::Bool(false));
    let required: Vec<String> = s
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect())
        .unwrap_or_default();
    let mut all = Vec::new();
    if let Some(Value::Object(props)) = s.get_mut("properties") {
        for (name, prop) in props.iter_mut() {
            if !required.contains(name) && !accepts_null(prop) {
                return false;
            }
            // A default only applies when the field is absent, which strict mode never sends.
            if let Value::Object(p) = prop {
                p.remove("default");
            }
            if !make_strict(prop, depth + 1) {
                return false;
            }
            all.push(Value::String(name.clone()));
        }
    }
    s.insert(
        "properties".into(),
        s.get("properties").cloned().unwrap_or_else(|| json!({})),
    );
    s.insert("required".into(), Value::Array(all));
    true
}

fn accepts_null(schema: &Value) -> bool {
    match schema.get("type") {
        Some(Value::String(t)) if t == "null" => return true,
        Some(Value::Array(ts)) if ts.iter().any(|t| t == "null") => return true,
        _ => {}
    }
    ["anyOf", "oneOf"].iter().any(|k| {
        schema
            .get(*k)
            .and_then(Value::as_array)
            .is_some_and(|o| o.iter().any(accepts_null))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closes_objects_and_requires_everything() {
        let s = json!({
            "type": "object",
            "properties": {
                "id": {"type": "integer", "format": "uint64", "minimum": 0},
                "note": {"type": ["string", "null"], "default": null},
                "when": {"type": "string", "format": "date-time"}
            },
            "required": ["id", "when"]
        });
        let strict = strict_schema(&s).expect("strict-able");
        assert_eq!(strict["additionalProperties"], false);
        assert_eq!(strict["required"], json!(["id", "note", "when"]));
        assert!(strict["properties"]["id"].get("format").is_none());
        assert_eq!(strict["properties"]["when"]["format"], "date-time");
        assert!(strict["properties"]["note"].get("default").is_none());
    }

    #[test]
    fn optional_non_nullable_fields_stay_non_strict() {
        let s = json!({"type": "object", "properties": {"n": {"type": "integer", "default": 3}}, "required": []});
        assert_eq!(strict_schema(&s), None);
        let map = json!({"type": "object", "additionalProperties": {"type": "string"}});
        assert_eq!(strict_schema(&map), None);
    }

    #[test]
    fn annotations_follow_the_class() {
        assert_eq!(mcp_annotations(EffectClass::Pure, None), json!({"readOnlyHint": true}));
        assert_eq!(
            mcp_annotations(EffectClass::Idempotent, Some(false)),
            json!({"readOnlyHint": false, "destructiveHint": false, "idempotentHint": true, "openWorldHint": false})
        );
        assert_eq!(
            mcp_annotations(EffectClass::Compensable, None)["destructiveHint"],
            false
        );
        assert_eq!(
            mcp_annotations(EffectClass::Irreversible, None)["idempotentHint"],
            false
        );
    }
}
