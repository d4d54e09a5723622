//! Tool definitions in the shapes model providers and MCP clients read.

use serde_json::{Map, Value, json};

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
