//! JSON Schemas of tool arguments in the shape model providers accept.

use schemars::JsonSchema;

/// The JSON Schema of `T`, as exported to models.
pub fn input_schema<T: JsonSchema>() -> serde_json::Value {
    let schema = schemars::SchemaGenerator::default().into_root_schema_for::<T>();
    let mut value = schema.to_value();
    if let Some(obj) = value.as_object_mut() {
        obj.remove("$schema");
    }
    value
}
