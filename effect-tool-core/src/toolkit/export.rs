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
        match crate::schema::strict_schema_exact(self.schema) {
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
        match crate::schema::strict_schema_exact(self.schema) {
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
    // Whether the key is custom, never a closure's source (which may name internals).
    let key = match meta.key_rule {
        crate::tool::KeyRule::Default => "default".to_owned(),
        crate::tool::KeyRule::Fields(_) => meta.key_rule.to_string(),
        crate::tool::KeyRule::Custom(_) => "custom".to_owned(),
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
