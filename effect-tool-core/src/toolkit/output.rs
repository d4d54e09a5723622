//! A tool's declared output: its JSON Schema, the MCP form of it (`outputSchema`), the
//! `structuredContent` an output becomes, and the check of one against the other.
//!
//! MCP asks that a tool's `outputSchema` describe a JSON object, and that `structuredContent`
//! be that object. An output whose schema is an object schema (a struct, a map; its root says
//! `"type": "object"`) is sent as it is. Any other output (a string, a number, a list, an enum,
//! an `Option`, `serde_json::Value`) is wrapped, always and in both places, under one field,
//! [`RESULT_FIELD`]:
//!
//! | output type | `outputSchema` | `structuredContent` |
//! |---|---|---|
//! | `struct Refund { id: String }` | `{"type": "object", "properties": {"id": ...}, ...}` | `{"id": "r-1"}` |
//! | `Vec<Refund>`, `String`, `Option<Refund>`, ... | `{"type": "object", "properties": {"result": <schema>}, "required": ["result"]}` | `{"result": <output>}` |
//!
//! The text content of an MCP result is the output itself either way (a string as is, anything
//! else as JSON), so a client that reads text sees no wrapper.
//!
//! ```
//! use effect_tool_core::toolkit::{OutputSchema, mcp_output_schema};
//! use serde_json::json;
//!
//! let list = effect_tool_core::value::schema::output_schema::<Vec<String>>();
//! let out = OutputSchema::new(Some("Vec<String>".into()), list);
//! assert!(out.is_wrapped());
//! assert_eq!(out.mcp()["required"], json!(["result"]));
//! let content = out.structured_content(&json!(["a", "b"]));
//! assert_eq!(content, json!({"result": ["a", "b"]}));
//! assert!(out.check(&content).is_ok());
//! assert!(out.check(&json!({"result": [1]})).is_err());
//! # let _ = mcp_output_schema;
//! ```

use std::sync::OnceLock;

use serde_json::{Map, Value, json};

/// The field a non-object output is wrapped under, in both `outputSchema` and
/// `structuredContent` (see the [module docs](self)).
pub const RESULT_FIELD: &str = "result";

/// At most this many violations are named when an output does not fit its schema.
const MAX_REPORTED: usize = 3;

/// Whether `schema`'s root describes a JSON object and nothing else (`"type": "object"`): such
/// an output is sent as `structuredContent` as it is; any other is wrapped.
pub fn is_object_schema(schema: &Value) -> bool {
    schema.get("type").and_then(Value::as_str) == Some("object")
}

/// The MCP `outputSchema` of an output schema: `schema` itself when it is an object schema
/// ([`is_object_schema`]), else an object schema with one required field, [`RESULT_FIELD`],
/// holding it (its `$defs` and `$schema` moved to the root, so that its references still
/// resolve).
pub fn mcp_output_schema(schema: &Value) -> Value {
    if is_object_schema(schema) {
        return schema.clone();
    }
    let mut inner = schema.clone();
    let mut root = Map::new();
    if let Value::Object(o) = &mut inner {
        if let Some(draft) = o.remove("$schema") {
            root.insert("$schema".into(), draft);
        }
        o.remove("title");
    }
    let defs = match &mut inner {
        Value::Object(o) => o.remove("$defs"),
        _ => None,
    };
    root.insert("type".into(), json!("object"));
    let mut properties = Map::new();
    properties.insert(RESULT_FIELD.into(), inner);
    root.insert("properties".into(), Value::Object(properties));
    root.insert("required".into(), json!([RESULT_FIELD]));
    root.insert("additionalProperties".into(), json!(false));
    if let Some(defs) = defs {
        root.insert("$defs".into(), defs);
    }
    Value::Object(root)
}

/// A tool's declared output: the type's name, its JSON Schema (as the journal keeps it,
/// [`crate::value::schema::output_schema`]), its digest, its MCP form, and a validator of
/// `structuredContent`, compiled when first needed.
pub struct OutputSchema {
    type_name: Option<String>,
    schema: Value,
    digest: String,
    mcp: Value,
    wrapped: bool,
    compiled: OnceLock<Option<jsonschema::Validator>>,
}

impl std::fmt::Debug for OutputSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutputSchema")
            .field("type_name", &self.type_name)
            .field("digest", &self.digest)
            .field("wrapped", &self.wrapped)
            .finish_non_exhaustive()
    }
}

impl OutputSchema {
    /// The declared output of a tool whose output type is `type_name` (`None`: not known) and
    /// whose JSON Schema is `schema`.
    pub fn new(type_name: Option<String>, schema: Value) -> OutputSchema {
        let digest = schema_digest(&schema);
        let wrapped = !is_object_schema(&schema);
        let mcp = mcp_output_schema(&schema);
        OutputSchema {
            type_name,
            schema,
            digest,
            mcp,
            wrapped,
            compiled: OnceLock::new(),
        }
    }

    /// The output type's name as the manifest writes it, if known.
    pub fn type_name(&self) -> Option<&str> {
        self.type_name.as_deref()
    }

    /// The output type's JSON Schema, as the tool declares it.
    pub fn schema(&self) -> &Value {
        &self.schema
    }

    /// The first 16 hex digits of the SHA-256 of the schema's canonical JSON (RFC 8785): what
    /// the manifest writes, so that a changed output shape is a diff in review.
    pub fn digest(&self) -> &str {
        &self.digest
    }

    /// The MCP `outputSchema` ([`mcp_output_schema`]).
    pub fn mcp(&self) -> &Value {
        &self.mcp
    }

    /// Whether outputs are wrapped under [`RESULT_FIELD`] (the schema is not an object schema).
    pub fn is_wrapped(&self) -> bool {
        self.wrapped
    }

    /// The MCP `structuredContent` of `output`: `{"result": output}` when wrapped, else the
    /// output as it is.
    pub fn structured_content(&self, output: &Value) -> Value {
        if self.wrapped {
            let mut m = Map::new();
            m.insert(RESULT_FIELD.into(), output.clone());
            Value::Object(m)
        } else {
            output.clone()
        }
    }

    /// Whether `structured` (a [`OutputSchema::structured_content`]) fits [`OutputSchema::mcp`];
    /// `Err` names the first few violations, each as `` `path`: what is wrong `` (paths only,
    /// never a value). A schema the validator cannot compile checks nothing (logged once).
    pub fn check(&self, structured: &Value) -> Result<(), String> {
        let Some(compiled) = self.compiled() else {
            return Ok(());
        };
        if compiled.is_valid(structured) {
            return Ok(());
        }
        let found: Vec<String> = compiled
            .iter_errors(structured)
            .take(MAX_REPORTED)
            .map(|e| {
                let path = e.instance_path().to_string();
                let path = if path.is_empty() { "/".to_owned() } else { path };
                format!("`{path}`: {}", violation_kind(&e))
            })
            .collect();
        Err(found.join("; "))
    }

    fn compiled(&self) -> Option<&jsonschema::Validator> {
        self.compiled
            .get_or_init(|| {
                jsonschema::options()
                    .build(&self.mcp)
                    .map_err(|e| {
                        tracing::warn!(error = %e, "a tool's output schema does not compile; its structured content is not checked")
                    })
                    .ok()
            })
            .as_ref()
    }
}

/// What a violation is, without the value that violates (an output may hold what the model
/// must not see, and the message goes to logs).
fn violation_kind(e: &jsonschema::ValidationError<'_>) -> String {
    use jsonschema::error::ValidationErrorKind as Kind;
    match e.kind() {
        Kind::Type { kind } => format!("not of type {kind:?}"),
        Kind::Required { property } => format!("missing required field {property}"),
        Kind::AdditionalProperties { unexpected } => format!("unexpected fields {}", unexpected.join(", ")),
        Kind::Enum { .. } | Kind::Constant { .. } => "not one of the allowed values".to_owned(),
        Kind::OneOfNotValid { .. } | Kind::AnyOf { .. } | Kind::OneOfMultipleValid { .. } => {
            "fits none (or more than one) of the allowed shapes".to_owned()
        }
        _ => "does not fit the schema".to_owned(),
    }
}

/// [`OutputSchema::digest`] of `schema`.
pub fn schema_digest(schema: &Value) -> String {
    let canonical = crate::value::canonical::to_string(schema);
    let mut hex = crate::value::digest::sha256_hex(canonical.as_bytes());
    hex.truncate(16);
    hex
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Serialize, schemars::JsonSchema)]
    struct Refund {
        id: String,
        amount_cents: u64,
    }

    #[derive(serde::Serialize, schemars::JsonSchema)]
    #[allow(dead_code)]
    enum Status {
        Open,
        Closed { refund: Refund },
    }

    fn of<T: schemars::JsonSchema>(name: &str) -> OutputSchema {
        OutputSchema::new(Some(name.into()), crate::value::schema::output_schema::<T>())
    }

    #[test]
    fn an_object_output_is_sent_as_it_is() {
        let out = of::<Refund>("Refund");
        assert!(!out.is_wrapped());
        assert_eq!(out.mcp(), out.schema());
        let v = json!({"id": "r-1", "amount_cents": 500});
        assert_eq!(out.structured_content(&v), v);
        assert!(out.check(&v).is_ok());
        let err = out.check(&json!({"id": 7})).unwrap_err();
        assert!(err.contains("`/id`: not of type"), "{err}");
        assert!(err.contains("amount_cents"), "{err}");
        assert!(!err.contains('7'), "no value in the message: {err}");
    }

    #[test]
    fn any_other_output_is_wrapped_with_its_definitions_at_the_root() {
        for out in [
            of::<Vec<Refund>>("Vec<Refund>"),
            of::<Option<Refund>>("Option<Refund>"),
            of::<Status>("Status"),
        ] {
            assert!(out.is_wrapped(), "{out:?}");
            let mcp = out.mcp();
            assert_eq!(mcp["type"], "object");
            assert!(mcp["$defs"].is_object(), "{mcp}");
            assert!(mcp["properties"][RESULT_FIELD].get("$defs").is_none(), "{mcp}");
        }
        let list = of::<Vec<Refund>>("Vec<Refund>");
        let v = json!([{"id": "r-1", "amount_cents": 1}]);
        assert_eq!(list.structured_content(&v), json!({"result": v}));
        assert!(list.check(&list.structured_content(&v)).is_ok());
        assert!(list.check(&list.structured_content(&json!([{"id": 1}]))).is_err());
        let status = of::<Status>("Status");
        let closed = json!({"Closed": {"refund": {"id": "r", "amount_cents": 2}}});
        assert!(status.check(&status.structured_content(&closed)).is_ok());
        assert!(status.check(&status.structured_content(&json!("Pending"))).is_err());
        let text = of::<String>("String");
        assert!(text.check(&text.structured_content(&json!("hello"))).is_ok());
        assert!(text.check(&json!("hello")).is_err(), "an unwrapped value does not fit");
    }

    #[test]
    fn the_digest_follows_the_shape() {
        assert_eq!(of::<Refund>("Refund").digest(), of::<Refund>("Other").digest());
        assert_ne!(of::<Refund>("Refund").digest(), of::<Status>("Refund").digest());
        assert_eq!(of::<Refund>("Refund").digest().len(), 16);
    }
}
