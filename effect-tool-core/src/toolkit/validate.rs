//! Checking a model's arguments against a tool's exported JSON Schema before anything runs, and
//! suggesting tool names for a name the model got wrong.
//!
//! The validator covers the keywords schemars emits for argument types (`type`, `properties`,
//! `required`, `additionalProperties`, `items`, `prefixItems`, `enum`, `const`, `anyOf`, `oneOf`,
//! `allOf`, `$ref` into `$defs`/`definitions`, numeric bounds, string and array lengths, and the
//! integer `format`s such as `uint8`). Keywords it does not know are ignored: serde's decoding,
//! which runs next, is the final word. Its job is an error message that names the field.

use serde_json::{Map, Value};

/// The first few violations of `schema` by `value`, each as `` `path`: what is wrong ``.
/// Empty when the value fits (as far as the supported keywords tell).
pub(crate) fn violations(schema: &Value, value: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let mut v = Validator {
        root: schema,
        out: &mut out,
        depth: 0,
    };
    v.check(schema, value, "");
    out.truncate(MAX_REPORTED);
    out
}

const MAX_REPORTED: usize = 5;
const MAX_DEPTH: usize = 64;

struct Validator<'a> {
    root: &'a Value,
    out: &'a mut Vec<String>,
    depth: usize,
}

impl Validator<'_> {
    fn fail(&mut self, path: &str, message: String) {
        let at = if path.is_empty() {
            "arguments".to_owned()
        } else {
            format!("`{path}`")
        };
        self.out.push(format!("{at}: {message}"));
    }

    fn check(&mut self, schema: &Value, value: &Value, path: &str) {
        if self.out.len() >= MAX_REPORTED || self.depth > MAX_DEPTH {
            return;
        }
        let Value::Object(s) = schema else {
            if schema == &Value::Bool(false) {
                self.fail(path, "no value is allowed here".to_owned());
            }
            return;
        };
        self.depth += 1;
        self.check_object(s, value, path);
        self.depth -= 1;
    }

    fn check_object(&mut self, s: &Map<String, Value>, value: &Value, path: &str) {
        if let Some(Value::String(r)) = s.get("$ref") {
            match resolve(self.root, r) {
                Some(target) => self.check(target, value, path),
                None => tracing::debug!(reference = %r, "schema reference not resolved; skipped"),
            }
        }
        if let Some(t) = s.get("type") {
            let allowed: Vec<&str> = match t {
                Value::String(t) => vec![t.as_str()],
                Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
                _ => Vec::new(),
            };
            if !allowed.is_empty() && !allowed.iter().any(|t| has_type(value, t)) {
                self.fail(
                    path,
                    format!("expected {}, got {}", allowed.join(" or "), describe(value)),
                );
                return;
            }
        }
        if let Some(Value::Array(options)) = s.get("enum")
            && !options.contains(value)
        {
            let list: Vec<String> = options.iter().map(Value::to_string).collect();
            self.fail(
                path,
                format!("expected one of {}, got {}", list.join(", "), describe(value)),
            );
            return;
        }
        if let Some(c) = s.get("const")
            && c != value
        {
            self.fail(path, format!("expected {c}, got {}", describe(value)));
            return;
        }
        if let Some(Value::Array(all)) = s.get("allOf") {
            for sub in all {
                self.check(sub, value, path);
            }
        }
        for key in ["anyOf", "oneOf"] {
            if let Some(Value::Array(options)) = s.get(key) {
                self.check_alternatives(options, value, path);
            }
        }
        match value {
            Value::Object(obj) => self.check_properties(s, obj, path),
            Value::Array(items) => self.check_items(s, items, path),
            Value::Number(_) => self.check_number(s, value, path),
            Value::String(text) => self.check_string(s, text, path),
            _ => {}
        }
    }

    fn check_alternatives(&mut self, options: &[Value], value: &Value, path: &str) {
        let mut best: Option<Vec<String>> = None;
        for option in options {
            let found = violations_at(self.root, option, value, path);
            if found.is_empty() {
                return;
            }
            if best.as_ref().is_none_or(|b| found.len() < b.len()) {
                best = Some(found);
            }
        }
        if options.is_empty() {
            return;
        }
        let consts: Option<Vec<String>> = options.iter().map(|o| o.get("const").map(Value::to_string)).collect();
        match best {
            Some(found) if options.len() == 1 || is_nullable_pair(options) => self.out.extend(found),
            _ => match consts {
                Some(list) => self.fail(
                    path,
                    format!("expected one of {}, got {}", list.join(", "), describe(value)),
                ),
                None => self.fail(
                    path,
                    format!("{} does not match any of the allowed shapes", describe(value)),
                ),
            },
        }
    }

    fn check_properties(&mut self, s: &Map<String, Value>, obj: &Map<String, Value>, path: &str) {
        let props = s.get("properties").and_then(Value::as_object);
        if let Some(Value::Array(required)) = s.get("required") {
            for name in required.iter().filter_map(Value::as_str) {
                if !obj.contains_key(name) {
                    self.fail(path, format!("missing required field `{name}`"));
                }
            }
        }
        for (name, v) in obj {
            let child = join(path, name);
            match props.and_then(|p| p.get(name)) {
                Some(sub) => self.check(sub, v, &child),
                None => match s.get("additionalProperties") {
                    Some(Value::Bool(false)) => {
                        let known: Vec<&str> = props
                            .map(|p| p.keys().map(String::as_str).collect())
                            .unwrap_or_default();
                        let hint = match nearest(name, known.iter().copied()).first() {
                            Some(n) => format!(" (did you mean `{n}`?)"),
                            None if known.is_empty() => String::new(),
                            None => format!(" (known fields: {})", known.join(", ")),
                        };
                        self.fail(path, format!("unknown field `{name}`{hint}"));
                    }
                    Some(sub @ Value::Object(_)) => self.check(sub, v, &child),
                    _ => {}
                },
            }
        }
    }

    fn check_items(&mut self, s: &Map<String, Value>, items: &[Value], path: &str) {
        let prefix = s.get("prefixItems").and_then(Value::as_array);
        for (i, item) in items.iter().enumerate() {
            let child = join(path, &i.to_string());
            match prefix.and_then(|p| p.get(i)) {
                Some(sub) => self.check(sub, item, &child),
                None => {
                    if let Some(sub) = s.get("items") {
                        self.check(sub, item, &child);
                    }
                }
            }
        }
        if let Some(min) = s.get("minItems").and_then(Value::as_u64)
            && (items.len() as u64) < min
        {
            self.fail(path, format!("expected at least {min} items, got {}", items.len()));
        }
        if let Some(max) = s.get("maxItems").and_then(Value::as_u64)
            && (items.len() as u64) > max
        {
            self.fail(path, format!("expected at most {max} items, got {}", items.len()));
        }
    }

    fn check_number(&mut self, s: &Map<String, Value>, value: &Value, path: &str) {
        let Some(n) = value.as_f64() else { return };
        let bound = |k: &str| s.get(k).and_then(Value::as_f64);
        if let Some(min) = bound("minimum")
            && n < min
        {
            self.fail(path, format!("{value} is below the minimum {}", fmt_num(min)));
            return;
        }
        if let Some(max) = bound("maximum")
            && n > max
        {
            self.fail(path, format!("{value} is above the maximum {}", fmt_num(max)));
            return;
        }
        if let Some(min) = bound("exclusiveMinimum")
            && n <= min
        {
            self.fail(path, format!("{value} must be greater than {}", fmt_num(min)));
            return;
        }
        if let Some(max) = bound("exclusiveMaximum")
            && n >= max
        {
            self.fail(path, format!("{value} must be less than {}", fmt_num(max)));
            return;
        }
        if let Some(Value::String(format)) = s.get("format")
            && let Some((lo, hi)) = integer_range(format)
        {
            let fits = match (value.as_i64(), value.as_u64()) {
                (Some(i), _) => i128::from(i) >= lo && i128::from(i) <= hi,
                (None, Some(u)) => i128::from(u) <= hi,
                _ => false,
            };
            if !fits {
                self.fail(path, format!("{value} does not fit in {format} ({lo}..={hi})"));
            }
        }
    }

    fn check_string(&mut self, s: &Map<String, Value>, text: &str, path: &str) {
        let len = text.chars().count() as u64;
        if let Some(min) = s.get("minLength").and_then(Value::as_u64)
            && len < min
        {
            self.fail(path, format!("expected at least {min} characters, got {len}"));
        }
        if let Some(max) = s.get("maxLength").and_then(Value::as_u64)
            && len > max
        {
            self.fail(path, format!("expected at most {max} characters, got {len}"));
        }
    }
}

fn violations_at(root: &Value, schema: &Value, value: &Value, path: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut v = Validator {
        root,
        out: &mut out,
        depth: 0,
    };
    v.check(schema, value, path);
    out
}

/// `[{...}, {"type": "null"}]`: report the non-null branch's errors as they are.
fn is_nullable_pair(options: &[Value]) -> bool {
    options.len() == 2
        && options
            .iter()
            .any(|o| o.get("type").and_then(Value::as_str) == Some("null"))
}

fn resolve<'a>(root: &'a Value, reference: &str) -> Option<&'a Value> {
    let pointer = reference.strip_prefix('#')?;
    root.pointer(pointer)
}

fn has_type(value: &Value, t: &str) -> bool {
    match t {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "boolean" => value.is_boolean(),
        "null" => value.is_null(),
        "number" => value.is_number(),
        "integer" => value.is_i64() || value.is_u64() || value.as_f64().is_some_and(|f| f.fract() == 0.0),
        _ => true,
    }
}

fn describe(value: &Value) -> String {
    let kind = match value {
        Value::Null => return "null".to_owned(),
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => return "an array".to_owned(),
        Value::Object(_) => return "an object".to_owned(),
    };
    let mut text = value.to_string();
    if text.len() > 40 {
        let cut = (0..=37).rev().find(|i| text.is_char_boundary(*i)).unwrap_or(0);
        text.truncate(cut);
        text.push_str("...");
    }
    format!("{kind} {text}")
}

fn fmt_num(n: f64) -> String {
    Value::from(n).to_string().trim_end_matches(".0").to_owned()
}

fn integer_range(format: &str) -> Option<(i128, i128)> {
    Some(match format {
        "uint8" => (0, u8::MAX.into()),
        "uint16" => (0, u16::MAX.into()),
        "uint32" | "uint" => (0, u32::MAX.into()),
        "uint64" => (0, u64::MAX.into()),
        "int8" => (i8::MIN.into(), i8::MAX.into()),
        "int16" => (i16::MIN.into(), i16::MAX.into()),
        "int32" | "int" => (i32::MIN.into(), i32::MAX.into()),
        "int64" => (i64::MIN.into(), i64::MAX.into()),
        _ => return None,
    })
}

fn join(path: &str, segment: &str) -> String {
    if path.is_empty() {
        segment.to_owned()
    } else {
        format!("{path}.{segment}")
    }
}

/// Up to three of `candidates` close to `name` (edit distance, case and `-`/`_` ignored, or one
/// containing the other), nearest first.
pub(crate) fn nearest<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    let norm = |s: &str| s.to_lowercase().replace('-', "_");
    let wanted = norm(name);
    let mut scored: Vec<(usize, &str)> = candidates
        .into_iter()
        .filter_map(|c| {
            let cand = norm(c);
            let d = levenshtein(&wanted, &cand);
            let limit = (wanted.chars().count().max(cand.chars().count()) / 3).max(2);
            let contains = wanted.len() >= 3 && (cand.contains(&wanted) || wanted.contains(&cand));
            (d <= limit || contains).then_some((d, c))
        })
        .collect();
    scored.sort();
    scored.into_iter().take(3).map(|(_, c)| c).collect()
}

fn levenshtein(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = if ca == *cb { prev } else { 1 + prev.min(cur).min(row[j]) };
            prev = cur;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "order_id": {"type": "string", "minLength": 1},
                "amount_cents": {"type": "integer", "format": "uint64", "minimum": 0},
                "note": {"type": ["string", "null"]},
                "line": {"$ref": "#/$defs/Line"},
                "mode": {"enum": ["fast", "slow"]}
            },
            "required": ["order_id", "amount_cents"],
            "additionalProperties": false,
            "$defs": {"Line": {"type": "object", "properties": {"sku": {"type": "string"}}, "required": ["sku"]}}
        })
    }

    #[test]
    fn accepts_valid_arguments() {
        let ok = json!({"order_id": "o1", "amount_cents": 5, "note": null, "line": {"sku": "a"}, "mode": "fast"});
        assert!(violations(&schema(), &ok).is_empty());
    }

    #[test]
    fn names_the_field() {
        let bad = json!({"order_id": "o1", "amount_cents": "five"});
        assert_eq!(
            violations(&schema(), &bad),
            vec!["`amount_cents`: expected integer, got string \"five\""]
        );
        let bad = json!({"amount_cents": -1, "line": {}, "mode": "medium", "ordr_id": 1});
        let found = violations(&schema(), &bad);
        assert!(
            found.contains(&"arguments: missing required field `order_id`".to_owned()),
            "{found:?}"
        );
        assert!(
            found
                .iter()
                .any(|m| m.starts_with("`amount_cents`: -1 is below the minimum 0")),
            "{found:?}"
        );
        assert!(
            found.contains(&"`line`: missing required field `sku`".to_owned()),
            "{found:?}"
        );
        assert!(
            found.iter().any(|m| m.starts_with("`mode`: expected one of")),
            "{found:?}"
        );
        assert!(
            found
                .iter()
                .any(|m| m.contains("unknown field `ordr_id` (did you mean `order_id`?)")),
            "{found:?}"
        );
    }

    #[test]
    fn documented_enums_list_their_values() {
        let s = json!({"oneOf": [{"const": "fast", "description": "Fast."}, {"const": "slow"}]});
        assert!(violations(&s, &json!("slow")).is_empty());
        assert_eq!(
            violations(&s, &json!("medium")),
            vec!["arguments: expected one of \"fast\", \"slow\", got string \"medium\""]
        );
    }

    #[test]
    fn integer_formats_bound_values() {
        let s = json!({"type": "integer", "format": "uint8"});
        assert!(violations(&s, &json!(255)).is_empty());
        assert_eq!(
            violations(&s, &json!(256)),
            vec!["arguments: 256 does not fit in uint8 (0..=255)"]
        );
    }

    #[test]
    fn suggests_near_names() {
        let names = ["issue_refund", "send_email", "lookup_order"];
        assert_eq!(nearest("issue_refnd", names), vec!["issue_refund"]);
        assert_eq!(nearest("Send-Email", names), vec!["send_email"]);
        assert_eq!(nearest("refund", names), vec!["issue_refund"]);
        assert!(nearest("deploy", names).is_empty());
    }
}
