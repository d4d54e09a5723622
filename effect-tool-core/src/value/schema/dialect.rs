//! One schema compiler per provider dialect, from the one exported schema ([`super::input_schema`]).
//!
//! Every provider takes a different subset of JSON Schema. Each dialect's rules are written down
//! once, in its [`Rules`] ([`Dialect::rules`]); [`compile`] applies them and reports what it had
//! to change ([`Compiled::moved`]) and, for OpenAI's strict mode, why a schema cannot be strict
//! ([`Compiled::not_strict`]).
//!
//! What a dialect cannot express is not lost silently: a constraint the provider does not take
//! (`maxLength` under OpenAI's strict mode, `format: uuid` under Gemini's `parameters`) is moved
//! into the field's description ("at most 200 characters", "a UUID"), and the
//! [`Dispatcher`](crate::toolkit::Dispatcher) still enforces it against the full schema before
//! anything runs.

use serde_json::{Map, Value, json};

/// A provider's schema dialect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dialect {
    /// OpenAI function calling with `"strict": true` (Chat Completions and Responses take the same
    /// schemas): the Structured Outputs subset.
    OpenAiStrict,
    /// OpenAI function calling with `"strict": false`: JSON Schema, but every array needs `items`.
    OpenAi,
    /// Anthropic's Messages API `input_schema`: JSON Schema with an object at the root.
    Anthropic,
    /// Gemini's `functionDeclarations[].parameters`: a subset of the OpenAPI 3.0 Schema object.
    GeminiParameters,
    /// Gemini's `functionDeclarations[].parametersJsonSchema`: JSON Schema, a documented subset
    /// of keywords.
    GeminiJsonSchema,
    /// MCP `tools/list` `inputSchema`: JSON Schema (draft 2020-12 by default).
    Mcp,
}

/// How a dialect writes a tuple (`prefixItems` in JSON Schema 2020-12).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TupleRule {
    /// `prefixItems` as is.
    PrefixItems,
    /// `prefixItems`, plus `items` (the union of the positions' schemas): the provider requires
    /// `items` on every array.
    PrefixItemsAndItems,
    /// No `prefixItems`: `items` is the union of the positions' schemas, `minItems`/`maxItems`
    /// the tuple's length, and the positions are described in the description. A tuple whose
    /// positions differ is then not exact.
    Items,
}

/// How a dialect writes a map (`HashMap`/`BTreeMap`: an object whose `additionalProperties` is a
/// schema).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MapRule {
    /// As JSON Schema writes it.
    Keep,
    /// A list of `{"key", "value"}` entries (the provider's objects need named properties); the
    /// dispatcher turns the list back into an object before checking and decoding.
    Entries,
    /// Not expressible: the schema cannot be strict.
    NotStrict,
}

/// How a dialect writes a value of any type (`serde_json::Value`, an untyped `{}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UntypedRule {
    /// `{}` as is.
    Keep,
    /// The provider needs a type: a string, a number or a boolean (`anyOf`), said in the
    /// description. Lists and objects cannot be sent in this dialect.
    Scalars,
    /// Not expressible: the schema cannot be strict.
    NotStrict,
}

/// One dialect's rules, in one place. See [`Dialect::rules`] for each provider's table.
#[derive(Debug, Clone, Copy)]
pub struct Rules {
    /// The dialect.
    pub dialect: Dialect,
    /// A short name (`openai-strict`, `gemini-parameters`, ...).
    pub name: &'static str,
    /// Where the provider documents these rules.
    pub documentation: &'static str,
    /// The keywords the provider takes (`None`: all of JSON Schema). A constraint outside the
    /// list is moved into the description; an annotation outside it (`title`, `examples`) is
    /// dropped.
    pub keywords: Option<&'static [&'static str]>,
    /// The string `format`s the provider takes; another format is moved into the description.
    pub string_formats: &'static [&'static str],
    /// Whether `$ref`/`$defs` (left only for recursive types) are taken. Without them a
    /// recursive type is unrolled [`UNROLL_DEPTH`] levels deep, and deeper levels are left out.
    pub refs: bool,
    /// Whether `"type": ["string", "null"]` is taken; otherwise `"nullable": true` (OpenAPI 3.0).
    pub type_arrays: bool,
    /// Whether `additionalProperties: false` is taken (and, with strict, required).
    pub closed_objects: bool,
    /// Maps.
    pub maps: MapRule,
    /// Tuples.
    pub tuples: TupleRule,
    /// Values of any type.
    pub untyped: UntypedRule,
    /// Strict mode: every property in `required` (optional ones made nullable), no `default`.
    pub strict: bool,
    /// Types in upper case (`STRING`, `OBJECT`): the OpenAPI `Type` enum of Gemini's `Schema`.
    pub upper_case_types: bool,
    /// The deepest nesting of objects the provider takes (`None`: no documented limit).
    pub max_object_depth: Option<usize>,
}

/// How many levels of a recursive type are written out in a dialect without `$ref`.
pub const UNROLL_DEPTH: usize = 3;

/// Keywords of OpenAI's Structured Outputs ("Supported schemas"): types, `properties`,
/// `required`, `additionalProperties: false`, `items`, `enum`/`const`, `anyOf`, `$ref`/`$defs`,
/// string `pattern`/`format`, numeric bounds and `multipleOf`, `minItems`/`maxItems`. Not
/// `minLength`/`maxLength`, `prefixItems`, `allOf`, `oneOf`, `not`, `if`, `default`.
const OPENAI_STRICT_KEYWORDS: &[&str] = &[
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

/// Fields of Gemini's `Schema` (OpenAPI 3.0 subset, `ai.google.dev/api/caching#Schema`).
const GEMINI_PARAMETERS_KEYWORDS: &[&str] = &[
    "type",
    "format",
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
    "anyOf",
    "propertyOrdering",
    "items",
    "minimum",
    "maximum",
];

/// Keywords of Gemini's `parametersJsonSchema` (the JSON Schema support documented for
/// structured output and function declarations).
const GEMINI_JSON_SCHEMA_KEYWORDS: &[&str] = &[
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

impl Dialect {
    /// Every dialect.
    pub const ALL: [Dialect; 6] = [
        Dialect::OpenAiStrict,
        Dialect::OpenAi,
        Dialect::Anthropic,
        Dialect::GeminiParameters,
        Dialect::GeminiJsonSchema,
        Dialect::Mcp,
    ];

    /// This dialect's rules: the one place they are written down.
    pub const fn rules(self) -> &'static Rules {
        match self {
            Dialect::OpenAiStrict => &Rules {
                dialect: Dialect::OpenAiStrict,
                name: "openai-strict",
                documentation: "https://platform.openai.com/docs/guides/structured-outputs#supported-schemas",
                keywords: Some(OPENAI_STRICT_KEYWORDS),
                string_formats: super::STRICT_STRING_FORMATS,
                refs: true,
                type_arrays: true,
                closed_objects: true,
                maps: MapRule::NotStrict,
                tuples: TupleRule::Items,
                untyped: UntypedRule::NotStrict,
                strict: true,
                upper_case_types: false,
                max_object_depth: Some(10),
            },
            Dialect::OpenAi => &Rules {
                dialect: Dialect::OpenAi,
                name: "openai",
                documentation: "https://platform.openai.com/docs/guides/function-calling",
                keywords: None,
                string_formats: super::STANDARD_STRING_FORMATS,
                refs: true,
                type_arrays: true,
                closed_objects: true,
                maps: MapRule::Keep,
                tuples: TupleRule::PrefixItemsAndItems,
                untyped: UntypedRule::Keep,
                strict: false,
                upper_case_types: false,
                max_object_depth: None,
            },
            Dialect::Anthropic => &Rules {
                dialect: Dialect::Anthropic,
                name: "anthropic",
                documentation: "https://docs.anthropic.com/en/docs/agents-and-tools/tool-use/implement-tool-use",
                keywords: None,
                string_formats: super::STANDARD_STRING_FORMATS,
                refs: true,
                type_arrays: true,
                closed_objects: true,
                maps: MapRule::Keep,
                tuples: TupleRule::PrefixItems,
                untyped: UntypedRule::Keep,
                strict: false,
                upper_case_types: false,
                max_object_depth: None,
            },
            Dialect::GeminiParameters => &Rules {
                dialect: Dialect::GeminiParameters,
                name: "gemini-parameters",
                documentation: "https://ai.google.dev/api/caching#Schema",
                keywords: Some(GEMINI_PARAMETERS_KEYWORDS),
                string_formats: &["date-time"],
                refs: false,
                type_arrays: false,
                closed_objects: false,
                maps: MapRule::Entries,
                tuples: TupleRule::Items,
                untyped: UntypedRule::Scalars,
                strict: false,
                upper_case_types: true,
                max_object_depth: None,
            },
            Dialect::GeminiJsonSchema => &Rules {
                dialect: Dialect::GeminiJsonSchema,
                name: "gemini-json-schema",
                documentation: "https://ai.google.dev/api/caching#FunctionDeclaration",
                keywords: Some(GEMINI_JSON_SCHEMA_KEYWORDS),
                string_formats: &["date-time", "date", "time"],
                refs: true,
                type_arrays: true,
                closed_objects: true,
                maps: MapRule::Keep,
                tuples: TupleRule::PrefixItems,
                untyped: UntypedRule::Keep,
                strict: false,
                upper_case_types: false,
                max_object_depth: None,
            },
            Dialect::Mcp => &Rules {
                dialect: Dialect::Mcp,
                name: "mcp",
                documentation: "https://modelcontextprotocol.io/specification/2025-11-25/server/tools",
                keywords: None,
                string_formats: super::STANDARD_STRING_FORMATS,
                refs: true,
                type_arrays: true,
                closed_objects: true,
                maps: MapRule::Keep,
                tuples: TupleRule::PrefixItems,
                untyped: UntypedRule::Keep,
                strict: false,
                upper_case_types: false,
                max_object_depth: None,
            },
        }
    }

    /// The dialect's short name.
    pub fn as_str(self) -> &'static str {
        self.rules().name
    }
}

impl std::fmt::Display for Dialect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A schema compiled for one dialect, with what had to change.
#[derive(Debug, Clone, PartialEq)]
pub struct Compiled {
    /// The dialect.
    pub dialect: Dialect,
    /// The schema to send.
    pub schema: Value,
    /// What the dialect cannot express, field by field (`` `note`: at most 200 characters, moved
    /// into the description ``), sorted. The dispatcher still enforces all of it.
    pub moved: Vec<String>,
    /// Why the schema cannot be strict ([`Dialect::OpenAiStrict`] only; empty: it can). When it
    /// is not empty, [`Compiled::schema`] must not be sent with `"strict": true`. Sorted.
    pub not_strict: Vec<String>,
}

impl Compiled {
    /// Whether the schema may be sent with `"strict": true`.
    pub fn is_strict(&self) -> bool {
        self.dialect == Dialect::OpenAiStrict && self.not_strict.is_empty()
    }
}

/// Compile the exported schema `schema` ([`super::input_schema`]) for `dialect`.
///
/// ```
/// use effect_tool_core::value::schema::{Dialect, compile};
/// let schema = serde_json::json!({
///     "type": "object",
///     "properties": {"note": {"type": "string", "maxLength": 200}},
///     "required": ["note"],
///     "additionalProperties": false
/// });
/// let strict = compile(&schema, Dialect::OpenAiStrict);
/// assert!(strict.is_strict());
/// assert!(strict.schema["properties"]["note"].get("maxLength").is_none());
/// assert_eq!(strict.schema["properties"]["note"]["description"], "At most 200 characters.");
/// ```
pub fn compile(schema: &Value, dialect: Dialect) -> Compiled {
    let rules = dialect.rules();
    let mut c = Compiler {
        rules,
        root: schema,
        moved: Vec::new(),
        not_strict: Vec::new(),
        unrolling: Vec::new(),
    };
    let root_is_object = schema.get("type").and_then(Value::as_str) == Some("object");
    if rules.strict && !root_is_object {
        c.not_strict
            .push("arguments: the root is not a plain object (strict mode needs `type: object` at the root)".into());
    }
    if rules.strict && (schema.get("anyOf").is_some() || schema.get("oneOf").is_some()) {
        c.not_strict_at(
            "",
            "the arguments are a union (`anyOf`, e.g. a `#[serde(flatten)]`ed enum): strict mode needs one object at the root",
        );
    }
    let mut out = c.node(schema, "", 0).unwrap_or_else(|| json!({"type": "object"}));
    if let Value::Object(root) = &mut out {
        if rules.refs {
            if let Some(Value::Object(defs)) = schema.get("$defs") {
                let mut compiled = Map::new();
                for (name, def) in defs {
                    if let Some(d) = c.node(def, &format!("$defs.{name}"), 1) {
                        compiled.insert(name.clone(), d);
                    }
                }
                root.insert("$defs".into(), Value::Object(compiled));
            }
        } else {
            root.remove("$defs");
        }
    }
    if rules.strict {
        super::make_strict(&mut out, 0);
    }
    let Compiler {
        mut moved,
        mut not_strict,
        ..
    } = c;
    // Sorted, so that the lists do not depend on the order a map keeps its names in (serde_json's
    // `preserve_order`, which another crate in the build may turn on).
    moved.sort();
    not_strict.sort();
    Compiled {
        dialect,
        schema: out,
        moved,
        not_strict: if rules.strict { not_strict } else { Vec::new() },
    }
}

struct Compiler<'a> {
    rules: &'static Rules,
    root: &'a Value,
    moved: Vec<String>,
    not_strict: Vec<String>,
    /// The `$ref`s being unrolled (dialects without references).
    unrolling: Vec<String>,
}

fn at(path: &str) -> String {
    if path.is_empty() {
        "arguments".to_owned()
    } else {
        format!("`{path}`")
    }
}

fn child_path(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_owned()
    } else {
        format!("{path}.{name}")
    }
}

/// Keywords that are values or structure, handled by the compiler itself (never moved into the
/// description).
const STRUCTURAL: &[&str] = &[
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "prefixItems",
    "anyOf",
    "oneOf",
    "allOf",
    "enum",
    "const",
    "$ref",
    "$defs",
    "description",
    "nullable",
    "format",
];

impl Compiler<'_> {
    fn not_strict_at(&mut self, path: &str, why: &str) {
        let line = format!("{}: {why}", at(path));
        if !self.not_strict.contains(&line) {
            self.not_strict.push(line);
        }
    }

    fn moved_at(&mut self, path: &str, what: &str) {
        let line = format!("{}: {what}", at(path));
        if !self.moved.contains(&line) {
            self.moved.push(line);
        }
    }

    /// One node; `None` when the dialect cannot write it at all (a recursive type unrolled to
    /// its limit): the caller leaves it out.
    ///
    /// The stages run in this order, each on the node's keywords `s`; what a dialect cannot
    /// say as a keyword is collected in `notes` and ends up in the description.
    fn node(&mut self, schema: &Value, path: &str, depth: usize) -> Option<Value> {
        let mut s: Map<String, Value> = match schema {
            Value::Object(m) => m.clone(),
            Value::Bool(true) => Map::new(),
            Value::Bool(false) => return Some(Value::Bool(false)),
            _ => return Some(schema.clone()),
        };
        if let Some(r) = self.reference_to_unroll(&s) {
            return self.unroll(s, r, path, depth);
        }
        let mut notes: Vec<String> = Vec::new();
        self.any_value(&mut s, &mut notes, path);
        self.one_of_and_all_of(&mut s, path);
        if !self.rules.type_arrays && nullable_without_type_arrays(&mut s) == Nullable::OneBranchLeft {
            return self.node(&Value::Object(s), path, depth);
        }
        self.enums(&mut s, &mut notes, path);
        self.string_format(&mut s, &mut notes, path);
        self.arrays(&mut s, &mut notes, path, depth)?;
        self.properties(&mut s, path, depth);
        self.extra_properties(&mut s, &mut notes, path, depth)?;
        self.unions(&mut s, path, depth)?;
        self.keywords_not_taken(&mut s, &mut notes, path);
        describe_notes(&mut s, &notes);
        if self.rules.upper_case_types {
            upper_case_types(&mut s);
        }
        Some(Value::Object(s))
    }

    /// The `$ref` of `s`, when the dialect takes no references (it is written out in place).
    fn reference_to_unroll(&self, s: &Map<String, Value>) -> Option<String> {
        match s.get("$ref") {
            Some(Value::String(r)) if !self.rules.refs => Some(r.clone()),
            _ => None,
        }
    }

    /// References (dialects without `$ref`): the target written out in place, its description
    /// and sibling keywords overridden by the referring node's; left out past [`UNROLL_DEPTH`]
    /// levels of one recursive type.
    fn unroll(&mut self, mut s: Map<String, Value>, r: String, path: &str, depth: usize) -> Option<Value> {
        if self.unrolling.iter().filter(|u| **u == r).count() >= UNROLL_DEPTH {
            self.moved_at(
                path,
                &format!("a recursive type nested deeper than {UNROLL_DEPTH} levels is left out"),
            );
            return None;
        }
        let target = r.strip_prefix('#').and_then(|p| self.root.pointer(p)).cloned()?;
        s.remove("$ref");
        let mut merged = match target {
            Value::Object(m) => m,
            _ => Map::new(),
        };
        if let Some(d) = s.remove("description") {
            merged.insert("description".into(), d);
        }
        merged.extend(s);
        self.unrolling.push(r);
        let out = self.node(&Value::Object(merged), path, depth);
        self.unrolling.pop();
        out
    }

    /// Any value (no type at all): kept, refused by strict mode, or a union of scalars.
    fn any_value(&mut self, s: &mut Map<String, Value>, notes: &mut Vec<String>, path: &str) {
        let typed = [
            "type",
            "anyOf",
            "oneOf",
            "allOf",
            "enum",
            "const",
            "$ref",
            "properties",
            "items",
        ]
        .iter()
        .any(|k| s.contains_key(*k));
        if typed {
            return;
        }
        match self.rules.untyped {
            UntypedRule::Keep => {}
            UntypedRule::NotStrict => self.not_strict_at(
                path,
                "accepts any JSON value (`serde_json::Value`): strict mode needs a type; give the field a concrete type",
            ),
            UntypedRule::Scalars => {
                s.insert(
                    "anyOf".into(),
                    json!([{"type": "string"}, {"type": "number"}, {"type": "boolean"}]),
                );
                notes.push("any JSON value".into());
                self.moved_at(
                    path,
                    "accepts any JSON value; Gemini's `parameters` can only say string, number or boolean (use `parametersJsonSchema` for lists and objects)",
                );
            }
        }
    }

    /// `oneOf` is `anyOf` for serde's disjoint branches (the export already rewrote it);
    /// `allOf` is refused by strict mode.
    fn one_of_and_all_of(&mut self, s: &mut Map<String, Value>, path: &str) {
        if let Some(o) = s.remove("oneOf") {
            s.entry("anyOf").or_insert(o);
        }
        if s.contains_key("allOf") && self.rules.strict {
            self.not_strict_at(
                path,
                "uses `allOf` (e.g. `#[serde(flatten)]` of an enum), which strict mode does not take",
            );
        }
    }

    /// Enums: a `const` is an enum of one; Gemini's enums are strings (others are described).
    fn enums(&mut self, s: &mut Map<String, Value>, notes: &mut Vec<String>, path: &str) {
        if let Some(c) = s.remove("const") {
            s.entry("enum").or_insert_with(|| Value::Array(vec![c]));
        }
        if self.rules.upper_case_types
            && let Some(Value::Array(values)) = s.get("enum").cloned()
        {
            if values.iter().all(Value::is_string) {
                s.entry("type").or_insert_with(|| json!("string"));
                s.insert("format".into(), json!("enum"));
            } else {
                s.remove("enum");
                let list: Vec<String> = values.iter().map(Value::to_string).collect();
                notes.push(format!("one of {}", list.join(", ")));
                self.moved_at(path, "an enum of non-strings, moved into the description");
            }
        }
    }

    /// String formats: one the dialect does not take is moved into the description.
    fn string_format(&mut self, s: &mut Map<String, Value>, notes: &mut Vec<String>, path: &str) {
        if let Some(Value::String(format)) = s.get("format").cloned() {
            let rules = self.rules;
            let keep = format == "enum" && rules.upper_case_types || rules.string_formats.contains(&format.as_str());
            if !keep {
                s.remove("format");
                notes.push(describe_format(&format));
                self.moved_at(path, &format!("`format: {format}` moved into the description"));
            }
        }
    }

    /// Arrays: a tuple's positions (as the dialect writes tuples), or a list's items. `None`
    /// when a position or the items cannot be written.
    fn arrays(&mut self, s: &mut Map<String, Value>, notes: &mut Vec<String>, path: &str, depth: usize) -> Option<()> {
        if let Some(Value::Array(positions)) = s.get("prefixItems").cloned() {
            return self.tuple(s, notes, &positions, path, depth);
        }
        if let Some(items) = s.get("items").cloned() {
            let c = self.node(&items, &format!("{path}[]"), depth)?;
            s.insert("items".into(), c);
        }
        Some(())
    }

    /// A tuple (`prefixItems`), as the dialect's [`TupleRule`] writes it.
    fn tuple(
        &mut self,
        s: &mut Map<String, Value>,
        notes: &mut Vec<String>,
        positions: &[Value],
        path: &str,
        depth: usize,
    ) -> Option<()> {
        let rules = self.rules;
        let mut compiled = Vec::new();
        for (i, p) in positions.iter().enumerate() {
            compiled.push(self.node(p, &format!("{path}[{i}]"), depth)?);
        }
        let mut union: Vec<Value> = Vec::new();
        for c in &compiled {
            if !union.contains(c) {
                union.push(c.clone());
            }
        }
        let items = if union.len() == 1 {
            union.pop().unwrap_or_default()
        } else {
            json!({"anyOf": union})
        };
        let n = compiled.len();
        s.entry("minItems").or_insert_with(|| json!(n));
        s.entry("maxItems").or_insert_with(|| json!(n));
        match rules.tuples {
            TupleRule::PrefixItems => {
                s.insert("prefixItems".into(), Value::Array(compiled));
            }
            TupleRule::PrefixItemsAndItems => {
                s.insert("prefixItems".into(), Value::Array(compiled));
                s.insert("items".into(), items);
            }
            TupleRule::Items => {
                s.remove("prefixItems");
                let exact = items.get("anyOf").is_none();
                s.insert("items".into(), items);
                if !exact {
                    let kinds: Vec<String> = positions.iter().map(short_type).collect();
                    notes.push(format!("exactly {n} items, in this order: {}", kinds.join(", ")));
                    self.moved_at(
                        path,
                        "a tuple of different types: its positions are described, not typed",
                    );
                    if rules.strict {
                        self.not_strict_at(
                            path,
                            "a tuple whose positions have different types: strict mode has no `prefixItems`; use a struct",
                        );
                    }
                }
            }
        }
        Some(())
    }

    /// Objects' named properties, one level deeper; a property the dialect cannot write is left
    /// out (and no longer required).
    fn properties(&mut self, s: &mut Map<String, Value>, path: &str, depth: usize) {
        let Some(Value::Object(props)) = s.get("properties").cloned() else {
            return;
        };
        let rules = self.rules;
        if let Some(limit) = rules.max_object_depth
            && depth + 1 > limit
            && rules.strict
        {
            self.not_strict_at(
                path,
                &format!("objects nested deeper than {limit} levels, strict mode's limit"),
            );
        }
        let mut out = Map::new();
        let mut dropped = Vec::new();
        for (name, p) in &props {
            match self.node(p, &child_path(path, name), depth + 1) {
                Some(c) => {
                    out.insert(name.clone(), c);
                }
                None => dropped.push(name.clone()),
            }
        }
        if !dropped.is_empty()
            && let Some(Value::Array(required)) = s.get_mut("required")
        {
            required.retain(|r| !dropped.iter().any(|d| d == r));
        }
        s.insert("properties".into(), Value::Object(out));
    }

    /// `additionalProperties`: maps (as the dialect's [`MapRule`] writes them), extra
    /// properties of a schema beside named ones, and closedness (dropped where the dialect does
    /// not take it). `None` when the values' schema cannot be written.
    fn extra_properties(
        &mut self,
        s: &mut Map<String, Value>,
        notes: &mut Vec<String>,
        path: &str,
        depth: usize,
    ) -> Option<()> {
        let rules = self.rules;
        match s.get("additionalProperties").cloned() {
            Some(Value::Object(_)) | Some(Value::Bool(true)) if !s.contains_key("properties") => {
                self.map(s, notes, path, depth)?;
            }
            Some(Value::Object(extra)) => {
                // Properties and a schema for the others (rare in argument types).
                if rules.strict {
                    self.not_strict_at(
                        path,
                        "an object with extra properties of a schema: strict mode needs them closed",
                    );
                }
                let v = self.node(&Value::Object(extra), &format!("{path}{{}}"), depth + 1)?;
                s.insert("additionalProperties".into(), v);
            }
            _ => {}
        }
        if !rules.closed_objects {
            s.remove("additionalProperties");
        }
        Some(())
    }

    /// A map (`HashMap`/`BTreeMap`: no named properties, a schema for the values).
    fn map(&mut self, s: &mut Map<String, Value>, notes: &mut Vec<String>, path: &str, depth: usize) -> Option<()> {
        let rules = self.rules;
        let value_schema = s.get("additionalProperties").cloned().unwrap_or(Value::Bool(true));
        match rules.maps {
            MapRule::Keep => {
                let v = self.node(&value_schema, &format!("{path}{{}}"), depth + 1)?;
                s.insert("additionalProperties".into(), v);
            }
            MapRule::NotStrict => {
                self.not_strict_at(
                    path,
                    "a map (`HashMap`/`BTreeMap`): strict mode needs every property named; use a `Vec` of entries or a struct",
                );
                let v = self.node(&value_schema, &format!("{path}{{}}"), depth + 1)?;
                s.insert("additionalProperties".into(), v);
            }
            MapRule::Entries => {
                let v = self.node(&value_schema, &format!("{path}{{}}"), depth + 1)?;
                let t = |name: &str| {
                    if rules.upper_case_types {
                        name.to_uppercase()
                    } else {
                        name.to_owned()
                    }
                };
                s.remove("additionalProperties");
                s.insert("type".into(), json!("array"));
                s.insert(
                    "items".into(),
                    json!({
                        "type": t("object"),
                        "properties": {"key": {"type": t("string")}, "value": v},
                        "required": ["key", "value"]
                    }),
                );
                notes.push("a list of {\"key\", \"value\"} entries, keys unique".into());
                self.moved_at(path, "a map, written as a list of key/value entries");
            }
        }
        Some(())
    }

    /// Unions (`anyOf`, `allOf`): each branch compiled; `None` when no `anyOf` branch can be
    /// written.
    fn unions(&mut self, s: &mut Map<String, Value>, path: &str, depth: usize) -> Option<()> {
        if let Some(Value::Array(options)) = s.get("anyOf").cloned() {
            let compiled: Vec<Value> = options.iter().filter_map(|o| self.node(o, path, depth)).collect();
            if compiled.is_empty() {
                return None;
            }
            s.insert("anyOf".into(), Value::Array(compiled));
        }
        if let Some(Value::Array(options)) = s.get("allOf").cloned() {
            let compiled: Vec<Value> = options.iter().filter_map(|o| self.node(o, path, depth)).collect();
            s.insert("allOf".into(), Value::Array(compiled));
        }
        Some(())
    }

    /// Keywords the dialect does not take: constraints moved into the description, structure
    /// and annotations left out; strict mode takes no `default`.
    fn keywords_not_taken(&mut self, s: &mut Map<String, Value>, notes: &mut Vec<String>, path: &str) {
        let rules = self.rules;
        if let Some(allowed) = rules.keywords {
            self.length_bounds(s, notes, allowed, path);
            let keys: Vec<String> = s.keys().cloned().collect();
            for k in keys {
                if allowed.contains(&k.as_str()) {
                    continue;
                }
                let Some(v) = s.remove(&k) else { continue };
                if k == "allOf" && !rules.strict {
                    self.moved_at(path, "`allOf` is not taken and was left out");
                }
                if STRUCTURAL.contains(&k.as_str()) {
                    continue;
                }
                if let Some(text) = describe_constraint(&k, &v) {
                    notes.push(text);
                    self.moved_at(path, &format!("`{k}` moved into the description"));
                }
            }
        }
        if rules.strict {
            s.remove("default");
        }
    }

    /// A string's length bounds the dialect does not take, as one phrase.
    fn length_bounds(&mut self, s: &mut Map<String, Value>, notes: &mut Vec<String>, allowed: &[&str], path: &str) {
        let min = (!allowed.contains(&"minLength"))
            .then(|| s.get("minLength").and_then(Value::as_u64))
            .flatten();
        let max = (!allowed.contains(&"maxLength"))
            .then(|| s.get("maxLength").and_then(Value::as_u64))
            .flatten();
        if min.is_none() && max.is_none() {
            return;
        }
        s.remove("minLength");
        s.remove("maxLength");
        let chars = |n: u64| {
            if n == 1 {
                "1 character".to_owned()
            } else {
                format!("{n} characters")
            }
        };
        notes.push(match (min, max) {
            (Some(a), Some(b)) if a == b => format!("exactly {}", chars(a)),
            (Some(a), Some(b)) => format!("{a} to {}", chars(b)),
            (Some(a), None) => format!("at least {}", chars(a)),
            (None, Some(b)) => format!("at most {}", chars(b)),
            (None, None) => String::new(),
        });
        self.moved_at(path, "`minLength`/`maxLength` moved into the description");
    }
}

/// What [`nullable_without_type_arrays`] left of a node.
#[derive(Debug, PartialEq, Eq)]
enum Nullable {
    /// The node, compiled on.
    Rewritten,
    /// A union of `null` and one branch became that branch (nullable): compile it anew.
    OneBranchLeft,
}

/// Nullability without type arrays (OpenAPI 3.0 `nullable`): `"type": [T, "null"]`, a union
/// with a `null` branch and an enum with `null` become `"nullable": true`.
fn nullable_without_type_arrays(s: &mut Map<String, Value>) -> Nullable {
    if let Some(Value::Array(types)) = s.get("type").cloned() {
        let non_null: Vec<Value> = types.iter().filter(|t| *t != "null").cloned().collect();
        if non_null.len() < types.len() {
            s.insert("nullable".into(), Value::Bool(true));
        }
        match non_null.len() {
            0 => {
                s.remove("type");
            }
            1 => {
                s.insert("type".into(), non_null[0].clone());
            }
            _ => {
                s.remove("type");
                let options: Vec<Value> = non_null.into_iter().map(|t| json!({"type": t})).collect();
                s.insert("anyOf".into(), Value::Array(options));
            }
        }
    }
    if let Some(Value::Array(options)) = s.get("anyOf").cloned() {
        let is_null = |o: &Value| o.get("type").and_then(Value::as_str) == Some("null");
        if options.iter().any(is_null) {
            let rest: Vec<Value> = options.into_iter().filter(|o| !is_null(o)).collect();
            s.insert("nullable".into(), Value::Bool(true));
            if rest.len() == 1 {
                s.remove("anyOf");
                if let Value::Object(branch) = &rest[0] {
                    for (k, v) in branch {
                        if k == "description" && s.contains_key("description") {
                            continue;
                        }
                        s.insert(k.clone(), v.clone());
                    }
                }
                return Nullable::OneBranchLeft;
            }
            s.insert("anyOf".into(), Value::Array(rest));
        }
    }
    if let Some(Value::Array(values)) = s.get_mut("enum")
        && values.iter().any(Value::is_null)
    {
        values.retain(|v| !v.is_null());
        s.insert("nullable".into(), Value::Bool(true));
    }
    Nullable::Rewritten
}

/// What the dialect could not say as keywords, appended to the description.
fn describe_notes(s: &mut Map<String, Value>, notes: &[String]) {
    if notes.is_empty() {
        return;
    }
    let text = sentence(&notes.join("; "));
    let description = match s.get("description").and_then(Value::as_str) {
        Some(d) if !d.is_empty() => format!("{d} ({})", notes.join("; ")),
        _ => text,
    };
    s.insert("description".into(), Value::String(description));
}

/// Types in upper case (`STRING`, `OBJECT`), as Gemini's `parameters` write them.
fn upper_case_types(s: &mut Map<String, Value>) {
    match s.get_mut("type") {
        Some(Value::String(t)) => *t = t.to_uppercase(),
        Some(Value::Array(ts)) => {
            for t in ts.iter_mut() {
                if let Value::String(t) = t {
                    *t = t.to_uppercase();
                }
            }
        }
        _ => {}
    }
}

/// A constraint, as a phrase for the description; `None` for annotations that are dropped.
fn describe_constraint(keyword: &str, v: &Value) -> Option<String> {
    let n = || v.to_string();
    Some(match keyword {
        "pattern" => format!("matching the regular expression {}", n()),
        "minimum" => format!("at least {}", n()),
        "maximum" => format!("at most {}", n()),
        "exclusiveMinimum" => format!("greater than {}", n()),
        "exclusiveMaximum" => format!("less than {}", n()),
        "multipleOf" => format!("a multiple of {}", n()),
        "minItems" => format!("at least {} items", n()),
        "maxItems" => format!("at most {} items", n()),
        "uniqueItems" if v == &Value::Bool(true) => "items unique".to_owned(),
        "minProperties" => format!("at least {} entries", n()),
        "maxProperties" => format!("at most {} entries", n()),
        "default" if !v.is_null() => format!("default {}", n()),
        _ => return None,
    })
}

fn describe_format(format: &str) -> String {
    match format {
        "uuid" => "a UUID".to_owned(),
        "date-time" => "an RFC 3339 date-time".to_owned(),
        "date" => "a date (YYYY-MM-DD)".to_owned(),
        "time" => "a time (HH:MM:SS)".to_owned(),
        "duration" => "an ISO 8601 duration".to_owned(),
        "email" => "an email address".to_owned(),
        "uri" => "a URI".to_owned(),
        "hostname" => "a host name".to_owned(),
        "ipv4" => "an IPv4 address".to_owned(),
        "ipv6" => "an IPv6 address".to_owned(),
        other => format!("format {other}"),
    }
}

fn short_type(schema: &Value) -> String {
    match schema.get("type") {
        Some(Value::String(t)) => t.clone(),
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(" or "),
        _ => "any value".to_owned(),
    }
}

fn sentence(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => format!("{}{}.", first.to_uppercase(), chars.as_str()),
        None => String::new(),
    }
}
