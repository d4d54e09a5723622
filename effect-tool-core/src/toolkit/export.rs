//! Tool definitions in the shapes model providers and MCP clients read.

use serde_json::{Map, Value, json};

use super::Toolkit;
use crate::call::tool::ToolMeta;
use crate::value::class::EffectClass;
use crate::value::schema::{self, Compiled, Dialect};

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
    /// The MCP `outputSchema`, when the tool declares its output.
    pub output: Option<&'a Value>,
}

/// What exporting one tool for one dialect changed: whether it is strict, why not, and what the
/// dialect could not express (moved into descriptions; the dispatcher still enforces it).
#[derive(Debug, Clone, PartialEq)]
pub struct ExportReport {
    /// The tool's name.
    pub tool: &'static str,
    /// The dialect.
    pub dialect: Dialect,
    /// Whether the tool is exported with `"strict": true` (OpenAI dialects only).
    pub strict: bool,
    /// Why it cannot be strict (OpenAI dialects; empty otherwise or when it is strict).
    pub not_strict: Vec<String>,
    /// What the dialect cannot express, field by field.
    pub moved: Vec<String>,
}

impl std::fmt::Display for ExportReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.tool, self.dialect)?;
        if matches!(self.dialect, Dialect::OpenAi | Dialect::OpenAiStrict) {
            write!(f, ": strict={}", if self.strict { "yes" } else { "no" })?;
        }
        for r in &self.not_strict {
            write!(f, "\n  not strict: {r}")?;
        }
        for m in &self.moved {
            write!(f, "\n  moved: {m}")?;
        }
        Ok(())
    }
}

impl Definition<'_> {
    fn base(&self) -> Map<String, Value> {
        let mut tool = Map::new();
        tool.insert("name".into(), json!(self.meta.name));
        if !self.meta.description.is_empty() {
            tool.insert("description".into(), json!(self.meta.description));
        }
        tool
    }

    /// The OpenAI parameters: strict when the schema can be, else non-strict.
    pub fn openai(&self) -> (Compiled, Option<Compiled>) {
        let strict = schema::compile(self.schema, Dialect::OpenAiStrict);
        if strict.is_strict() {
            (strict, None)
        } else {
            (schema::compile(self.schema, Dialect::OpenAi), Some(strict))
        }
    }

    pub fn report(&self, dialect: Dialect) -> ExportReport {
        let (compiled, not_strict) = match dialect {
            Dialect::OpenAi | Dialect::OpenAiStrict => {
                let (c, failed) = self.openai();
                (c, failed.map(|f| f.not_strict).unwrap_or_default())
            }
            d => (schema::compile(self.schema, d), Vec::new()),
        };
        ExportReport {
            tool: self.meta.name,
            dialect: compiled.dialect,
            strict: compiled.is_strict(),
            not_strict,
            moved: compiled.moved,
        }
    }

    pub fn openai_chat(&self) -> Value {
        let mut function = self.base();
        let (c, _) = self.openai();
        function.insert("strict".into(), json!(c.is_strict()));
        function.insert("parameters".into(), c.schema);
        json!({"type": "function", "function": function})
    }

    pub fn openai_responses(&self) -> Value {
        let mut tool = Map::new();
        tool.insert("type".into(), json!("function"));
        tool.extend(self.base());
        let (c, _) = self.openai();
        tool.insert("strict".into(), json!(c.is_strict()));
        tool.insert("parameters".into(), c.schema);
        Value::Object(tool)
    }

    pub fn anthropic(&self) -> Value {
        let mut tool = self.base();
        tool.insert(
            "input_schema".into(),
            schema::compile(self.schema, Dialect::Anthropic).schema,
        );
        Value::Object(tool)
    }

    /// A Gemini `functionDeclarations[]` item with `parameters` (OpenAPI subset); a tool without
    /// arguments has no `parameters` (Gemini refuses an object without properties).
    pub fn gemini(&self) -> Value {
        let mut tool = self.base();
        let has_args = self
            .schema
            .get("properties")
            .and_then(Value::as_object)
            .is_some_and(|p| !p.is_empty());
        if has_args {
            tool.insert(
                "parameters".into(),
                schema::compile(self.schema, Dialect::GeminiParameters).schema,
            );
        }
        Value::Object(tool)
    }

    /// A Gemini `functionDeclarations[]` item with `parametersJsonSchema`.
    pub fn gemini_json_schema(&self) -> Value {
        let mut tool = self.base();
        tool.insert(
            "parametersJsonSchema".into(),
            schema::compile(self.schema, Dialect::GeminiJsonSchema).schema,
        );
        Value::Object(tool)
    }

    pub fn mcp(&self) -> Value {
        let mut tool = self.base();
        tool.insert("inputSchema".into(), schema::compile(self.schema, Dialect::Mcp).schema);
        if let Some(output) = self.output {
            tool.insert("outputSchema".into(), output.clone());
        }
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
    // Whether the key is custom, never a closure's source (which may name internals).
    let key = match meta.key_rule {
        crate::call::tool::KeyRule::Default => "default".to_owned(),
        crate::call::tool::KeyRule::Fields(_) => meta.key_rule.to_string(),
        crate::call::tool::KeyRule::Custom(_) => "custom".to_owned(),
    };
    m.insert("effect-tool/key".into(), json!(key));
    m.insert("effect-tool/window".into(), json!(meta.window.as_str()));
    if let Some(role) = meta.approval {
        m.insert("effect-tool/approval".into(), json!(role));
    }
    Value::Object(m)
}

/// What a toolkit writes for providers and reviewers: each tool's definition in a provider's
/// shape, what that shape changed, and the manifest.
impl Toolkit {
    fn definitions(&self) -> impl Iterator<Item = Definition<'_>> {
        self.entries.iter().map(|e| Definition {
            meta: &e.meta,
            schema: e.schema.schema(),
            output: e.output.as_ref().map(|o| o.mcp()),
        })
    }

    /// OpenAI Chat Completions `tools`: `{"type": "function", "function": {name, description,
    /// parameters, strict}}`, strict where the schema can be (no maps, no untyped values, no
    /// tuples of mixed types: [`crate::value::schema::strict_report`]), else non-strict;
    /// [`Toolkit::export_report`] and [`Toolkit::manifest`] say why.
    pub fn openai_tools(&self) -> Vec<Value> {
        self.definitions().map(|d| d.openai_chat()).collect()
    }

    /// OpenAI Responses API `tools`: `{"type": "function", name, description, parameters,
    /// strict}`.
    pub fn openai_responses_tools(&self) -> Vec<Value> {
        self.definitions().map(|d| d.openai_responses()).collect()
    }

    /// Gemini `functionDeclarations`: `{name, description, parameters}`, the parameters in
    /// Gemini's OpenAPI 3.0 subset ([`Dialect::GeminiParameters`](crate::value::schema::Dialect)):
    /// `nullable` instead of type arrays, no `additionalProperties`, maps as lists of
    /// `{"key", "value"}` entries (the dispatcher turns them back into objects), tuples as
    /// `items`, recursive types unrolled [`UNROLL_DEPTH`](crate::value::schema::UNROLL_DEPTH) levels.
    /// Send them as `{"tools": [{"functionDeclarations": [...]}]}`.
    /// [`Toolkit::export_report`] says what each tool lost; a tool that lost something can use
    /// [`Toolkit::gemini_json_schema_tools`] instead.
    pub fn gemini_tools(&self) -> Vec<Value> {
        self.definitions().map(|d| d.gemini()).collect()
    }

    /// Gemini `functionDeclarations` with `parametersJsonSchema` (JSON Schema: maps, tuples and
    /// recursive types as they are).
    pub fn gemini_json_schema_tools(&self) -> Vec<Value> {
        self.definitions().map(|d| d.gemini_json_schema()).collect()
    }

    /// What exporting each tool for `dialect` changed: whether it is strict and why not (OpenAI),
    /// and what the dialect cannot express. For [`Dialect::OpenAi`](crate::value::schema::Dialect::OpenAi) and
    /// [`Dialect::OpenAiStrict`](crate::value::schema::Dialect::OpenAiStrict) alike the report is of what [`Toolkit::openai_tools`] sends.
    pub fn export_report(&self, dialect: crate::value::schema::Dialect) -> Vec<ExportReport> {
        self.definitions().map(|d| d.report(dialect)).collect()
    }

    /// Fail, naming every tool that cannot be sent with OpenAI's `"strict": true` and why. Call
    /// it at start-up or in a test when every tool is meant to be strict.
    pub fn check_strict(&self) -> Result<(), Vec<crate::value::schema::NotStrict>> {
        let failed: Vec<crate::value::schema::NotStrict> = self
            .export_report(crate::value::schema::Dialect::OpenAiStrict)
            .into_iter()
            .filter(|r| !r.strict)
            .map(|r| crate::value::schema::NotStrict {
                type_name: r.tool.to_owned(),
                reasons: r.not_strict,
            })
            .collect();
        if failed.is_empty() { Ok(()) } else { Err(failed) }
    }

    /// Anthropic Messages API `tools`: `{name, description, input_schema}`.
    pub fn anthropic_tools(&self) -> Vec<Value> {
        self.definitions().map(|d| d.anthropic()).collect()
    }

    /// MCP `tools/list` entries: `{name, description, inputSchema, outputSchema, annotations,
    /// _meta}`, the annotations derived from the class ([`mcp_annotations`]) and `_meta`
    /// carrying the declaration (`effect-tool/class`, `effect-tool/key`, `effect-tool/window`,
    /// `effect-tool/approval`). `outputSchema` is there when the tool declares its output (every
    /// `#[tool]` does): an object schema, a non-object output wrapped under `result` (see
    /// [`crate::toolkit::output`]).
    pub fn mcp_tools(&self) -> Vec<Value> {
        self.definitions().map(|d| d.mcp()).collect()
    }

    /// The manifest: every tool's name, class (and `one_write=yes`, when declared), key rule,
    /// window, approval (and its ttl, when declared) and hooks (and when `recover` is asked,
    /// when declared) as stable
    /// text, one line per tool sorted by name (see [`crate::toolkit::manifest`]). Commit it beside the
    /// code and compare it in a test, so a changed effect declaration is a one-line diff in
    /// review.
    ///
    /// A tool that cannot be sent with OpenAI's `"strict": true` gets a comment line after the
    /// tools saying why (`# not strict: <tool>: <reason>`; see [`crate::toolkit::manifest::render_with_strict`]).
    /// A tool that declares its output gets one naming the output type and its schema's digest
    /// (`# output: <tool>: <type> schema=<digest>`; see [`crate::toolkit::manifest::render_outputs`]),
    /// so that a changed output type or shape is a one-line diff too.
    pub fn manifest(&self) -> String {
        let not_strict: Vec<(&str, Vec<String>)> = self
            .export_report(crate::value::schema::Dialect::OpenAiStrict)
            .into_iter()
            .filter(|r| !r.strict)
            .map(|r| (r.tool, r.not_strict))
            .collect();
        let extras: Vec<(&str, crate::toolkit::manifest::LineExtras)> = self
            .tools()
            .map(|t| {
                let extras = crate::toolkit::manifest::LineExtras {
                    approval_ttl: t.approval_ttl(),
                    recover_first: t.recover_first(),
                    recover_settle: t.recover_settle(),
                    one_write: t.one_write(),
                };
                (t.meta().name, extras)
            })
            .collect();
        let outputs: Vec<(&str, Option<&str>, &str)> = self
            .entries
            .iter()
            .filter_map(|e| e.output.as_ref().map(|o| (e.meta.name, o.type_name(), o.digest())))
            .collect();
        let mut text = crate::toolkit::manifest::render_with_extras(&self.metas(), &extras, &not_strict);
        text.push_str(&crate::toolkit::manifest::render_outputs(&outputs));
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
