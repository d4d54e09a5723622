//! Checking a model's arguments against a tool's exported JSON Schema before anything runs, and
//! suggesting tool names for a name the model got wrong.
//!
//! Two parts, each doing what it is good at:
//!
//! - **Whether the arguments fit** is decided by the [`jsonschema`] crate, compiled once per
//!   tool ([`ArgumentSchema`]): every keyword of the schema's draft, `pattern`, `multipleOf`,
//!   `uniqueItems` and the string `format`s included. Arguments it accepts are accepted.
//! - **Why they do not** is said by the explainer below, which knows the shapes schemars emits
//!   for argument types and speaks to the model: the field's path (`payment.card.last4`,
//!   `lines[2].sku`), what was expected (a type, a range, an enum's tags, the missing fields of
//!   the variant the model chose, a near field name), and what was sent. For what it does not
//!   cover (a `pattern`, a `format`, a keyword it does not know), the crate's own errors are
//!   reported, at their instance path, in the same form.
//!
//! Neither ever prints the value of a sensitive field. serde's decoding, which runs next, is
//! the last word.
//!
//! [`normalize`] runs first: it makes the model's arguments what serde reads, where the schema
//! says what was meant (an integral float for an integer field, `null` for a field that has a
//! default, a map written as a list of `{"key", "value"}` entries).

use std::sync::OnceLock;

use serde_json::{Map, Value};

/// A tool's argument schema, compiled by [`jsonschema`] on first use and kept.
pub(crate) struct ArgumentSchema {
    schema: Value,
    compiled: OnceLock<Option<jsonschema::Validator>>,
}

impl ArgumentSchema {
    /// `schema`, to be compiled when first needed.
    pub(crate) fn new(schema: Value) -> Self {
        ArgumentSchema {
            schema,
            compiled: OnceLock::new(),
        }
    }

    /// The schema as exported.
    pub(crate) fn schema(&self) -> &Value {
        &self.schema
    }

    /// The compiled validator; `None` if the crate refused the schema (a hand-written schema
    /// it cannot read: then the explainer alone decides, and the refusal is logged once).
    fn compiled(&self) -> Option<&jsonschema::Validator> {
        self.compiled
            .get_or_init(|| {
                jsonschema::options()
                    .should_validate_formats(true)
                    .build(&self.schema)
                    .map_err(|e| {
                        tracing::warn!(error = %e, "a tool's argument schema does not compile; only the explainer checks its arguments")
                    })
                    .ok()
            })
            .as_ref()
    }
}

/// The first few violations of `schema` by `value`, each as `` `path`: what is wrong ``.
/// Empty when the value fits. The values of the top-level fields named in `secrets` are never
/// printed.
pub(crate) fn violations(schema: &ArgumentSchema, value: &Value, secrets: &[&str]) -> Vec<String> {
    let compiled = schema.compiled();
    if compiled.is_some_and(|c| c.is_valid(value)) {
        return Vec::new();
    }
    let mut out = violations_at(schema.schema(), schema.schema(), value, "", secrets);
    if out.is_empty()
        && let Some(compiled) = compiled
    {
        out = compiled
            .iter_errors(value)
            .take(MAX_REPORTED)
            .map(|e| crate_error(&e, value, secrets))
            .collect();
    }
    out.truncate(MAX_REPORTED);
    out
}

/// One of the [`jsonschema`] crate's errors, in the explainer's form: the instance path as a
/// field path, what was expected, what was sent (never a sensitive field's value).
fn crate_error(e: &jsonschema::ValidationError<'_>, root: &Value, secrets: &[&str]) -> String {
    use jsonschema::error::ValidationErrorKind as Kind;
    let path = field_path(e.instance_path().as_str(), root);
    let hidden = !path.is_empty() && secrets.contains(&top_field(&path));
    let sent = if hidden {
        format!("{} (a sensitive field: its value is not shown)", kind(e.instance()))
    } else {
        describe(e.instance())
    };
    let what = match e.kind() {
        Kind::Format { format } => format!("expected {}, got {sent}", format_expected(format)),
        Kind::Pattern { pattern } => format!("expected a string matching the pattern `{pattern}`, got {sent}"),
        _ if hidden => e.masked_with("the value").to_string(),
        _ => e.to_string(),
    };
    let at = if path.is_empty() {
        "arguments".to_owned()
    } else {
        format!("`{path}`")
    };
    format!("{at}: {what}")
}

/// A JSON pointer into `root` (`/lines/2/sku`) as a field path (`lines[2].sku`): a segment is
/// an index where the value it is taken from is an array.
fn field_path(pointer: &str, root: &Value) -> String {
    let mut path = String::new();
    let mut at = Some(root);
    for raw in pointer.split('/').skip(1) {
        let segment = raw.replace("~1", "/").replace("~0", "~");
        match (at, segment.parse::<usize>()) {
            (Some(Value::Array(items)), Ok(i)) => {
                path = index(&path, i);
                at = items.get(i);
            }
            (current, _) => {
                at = current.and_then(|v| v.get(&segment));
                path = join(&path, &segment);
            }
        }
    }
    path
}

/// What a string of `format` must look like, for a model to write it.
fn format_expected(format: &str) -> String {
    match format {
        "date-time" => "an RFC 3339 date-time such as \"2026-12-01T10:00:00Z\"".to_owned(),
        "date" => "a date such as \"2026-12-01\"".to_owned(),
        "time" => "a time such as \"10:00:00Z\"".to_owned(),
        "uuid" => "a UUID such as \"67e55044-10b1-426f-9247-bb680e5fe0c8\"".to_owned(),
        "email" => "an email address".to_owned(),
        "uri" => "an absolute URI such as \"https://example.com/\"".to_owned(),
        "ipv4" => "an IPv4 address".to_owned(),
        "ipv6" => "an IPv6 address".to_owned(),
        other => format!("a string of format `{other}`"),
    }
}

const MAX_REPORTED: usize = 5;
const MAX_DEPTH: usize = 64;

struct Validator<'a> {
    root: &'a Value,
    out: &'a mut Vec<String>,
    depth: usize,
    secrets: &'a [&'a str],
}

impl Validator<'_> {
    /// Whether `path` is inside a secret top-level field.
    fn secret(&self, path: &str) -> bool {
        !path.is_empty() && self.secrets.contains(&top_field(path))
    }

    /// What was sent, for the message: its kind and (unless secret) its value.
    fn describe(&self, value: &Value, path: &str) -> String {
        if self.secret(path) {
            format!("{} (a secret field: its value is not shown)", kind(value))
        } else {
            describe(value)
        }
    }

    /// The value itself, unless secret.
    fn shown(&self, value: &Value, path: &str) -> String {
        if self.secret(path) {
            "the value (a secret field: not shown)".to_owned()
        } else {
            value.to_string()
        }
    }

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
                    format!("expected {}, got {}", allowed.join(" or "), self.describe(value, path)),
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
                format!(
                    "expected one of {}, got {}",
                    list.join(", "),
                    self.describe(value, path)
                ),
            );
            return;
        }
        if let Some(c) = s.get("const")
            && c != value
        {
            self.fail(path, format!("expected {c}, got {}", self.describe(value, path)));
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
        if options.is_empty() {
            return;
        }
        let root = self.root;
        let resolved: Vec<&Value> = options.iter().map(|o| deref(root, o)).collect();
        if let Some(tag) = common_tag(&resolved) {
            return self.check_tagged(&resolved, &tag, value, path);
        }
        if let Some(handled) = self.check_external(&resolved, value, path) {
            return handled;
        }
        let mut best: Option<Vec<String>> = None;
        for option in options {
            let found = violations_at(self.root, option, value, path, self.secrets);
            if found.is_empty() {
                return;
            }
            if best.as_ref().is_none_or(|b| found.len() < b.len()) {
                best = Some(found);
            }
        }
        let consts: Option<Vec<String>> = resolved.iter().map(|o| single_value(o).map(Value::to_string)).collect();
        match best {
            Some(found) if options.len() == 1 || is_nullable_pair(options) => self.out.extend(found),
            _ => match consts {
                Some(list) => self.fail(
                    path,
                    format!(
                        "expected one of {}, got {}",
                        list.join(", "),
                        self.describe(value, path)
                    ),
                ),
                None => {
                    let kinds: Vec<String> = resolved.iter().map(|o| shape(o)).collect();
                    let mut message = format!(
                        "expected one of: {}; got {}",
                        kinds.join(", "),
                        self.describe(value, path)
                    );
                    if let Some(closest) = best.and_then(|b| b.into_iter().next()) {
                        message.push_str(&format!(" (closest: {closest})"));
                    }
                    self.fail(path, message)
                }
            },
        }
    }

    /// An internally or adjacently tagged enum: every variant is an object whose `tag` property
    /// takes one value.
    fn check_tagged(&mut self, options: &[&Value], tag: &str, value: &Value, path: &str) {
        let tags: Vec<&Value> = options
            .iter()
            .filter_map(|o| single_value(&o["properties"][tag]))
            .collect();
        let list: Vec<String> = tags.iter().map(|t| t.to_string()).collect();
        let Value::Object(obj) = value else {
            self.fail(
                path,
                format!(
                    "expected an object with `{tag}` one of {}, got {}",
                    list.join(", "),
                    self.describe(value, path)
                ),
            );
            return;
        };
        let Some(sent) = obj.get(tag) else {
            self.fail(path, format!("missing the tag `{tag}` (one of {})", list.join(", ")));
            return;
        };
        match options
            .iter()
            .position(|o| single_value(&o["properties"][tag]) == Some(sent))
        {
            Some(i) => {
                let found = violations_at(self.root, options[i], value, path, self.secrets);
                let variant = sent.to_string();
                self.out
                    .extend(found.into_iter().map(|m| format!("{m} (variant {variant})")));
            }
            None => {
                let at = join(path, tag);
                self.fail(
                    &at,
                    format!("expected one of {}, got {}", list.join(", "), self.describe(sent, &at)),
                );
            }
        }
    }

    /// An externally tagged enum (serde's default): unit variants as strings, the others as
    /// objects with the variant's name as their one key. `None` when `options` are not that.
    fn check_external(&mut self, options: &[&Value], value: &Value, path: &str) -> Option<()> {
        let mut units: Vec<&Value> = Vec::new();
        let mut keyed: Vec<(&str, &Value)> = Vec::new();
        for o in options {
            if let Some(Value::Array(values)) = o.get("enum")
                && values.iter().all(Value::is_string)
            {
                units.extend(values.iter());
                continue;
            }
            let props = o.get("properties")?.as_object()?;
            let required = o.get("required")?.as_array()?;
            if props.len() != 1 || required.len() != 1 {
                return None;
            }
            let (name, _) = props.iter().next()?;
            keyed.push((name.as_str(), o));
        }
        if keyed.is_empty() {
            return None;
        }
        let mut expected: Vec<String> = units.iter().map(|u| u.to_string()).collect();
        let names: Vec<String> = keyed.iter().map(|(n, _)| format!("`{n}`")).collect();
        expected.push(format!("an object with one key of {}", names.join(", ")));
        if let Value::Object(obj) = value
            && obj.len() == 1
            && let Some((_, schema)) = keyed.iter().find(|(n, _)| obj.contains_key(*n))
        {
            let found = violations_at(self.root, schema, value, path, self.secrets);
            self.out.extend(found);
            return Some(());
        }
        if units.contains(&value) {
            return Some(());
        }
        self.fail(
            path,
            format!("expected {}, got {}", expected.join(" or "), self.describe(value, path)),
        );
        Some(())
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
            let child = index(path, i);
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
        let shown = self.shown(value, path);
        let bound = |k: &str| s.get(k).and_then(Value::as_f64);
        if let Some(min) = bound("minimum")
            && n < min
        {
            self.fail(path, format!("{shown} is below the minimum {}", fmt_num(min)));
            return;
        }
        if let Some(max) = bound("maximum")
            && n > max
        {
            self.fail(path, format!("{shown} is above the maximum {}", fmt_num(max)));
            return;
        }
        if let Some(min) = bound("exclusiveMinimum")
            && n <= min
        {
            self.fail(path, format!("{shown} must be greater than {}", fmt_num(min)));
            return;
        }
        if let Some(max) = bound("exclusiveMaximum")
            && n >= max
        {
            self.fail(path, format!("{shown} must be less than {}", fmt_num(max)));
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

fn violations_at(root: &Value, schema: &Value, value: &Value, path: &str, secrets: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    let mut v = Validator {
        root,
        out: &mut out,
        depth: 0,
        secrets,
    };
    v.check(schema, value, path);
    out
}

/// `schema`, or what its `$ref` points to.
fn deref<'s>(root: &'s Value, schema: &'s Value) -> &'s Value {
    match schema.get("$ref").and_then(Value::as_str) {
        Some(r) => resolve(root, r).unwrap_or(schema),
        None => schema,
    }
}

/// The one value a schema allows (`enum: [x]` or `const: x`).
fn single_value(schema: &Value) -> Option<&Value> {
    if let Some(c) = schema.get("const") {
        return Some(c);
    }
    match schema.get("enum") {
        Some(Value::Array(values)) if values.len() == 1 => values.first(),
        _ => None,
    }
}

/// The property every option tags itself with (one value each, required), if there is one.
fn common_tag(options: &[&Value]) -> Option<String> {
    if options.len() < 2 {
        return None;
    }
    let first = options[0].get("properties")?.as_object()?;
    first
        .keys()
        .find(|name| {
            options.iter().all(|o| {
                single_value(&o["properties"][name.as_str()]).is_some()
                    && o.get("required")
                        .and_then(Value::as_array)
                        .is_some_and(|r| r.iter().any(|x| x == name.as_str()))
            })
        })
        .cloned()
}

/// A short description of what a schema takes, for "expected one of".
fn shape(schema: &Value) -> String {
    if let Some(v) = single_value(schema) {
        return v.to_string();
    }
    match schema.get("type") {
        Some(Value::String(t)) => t.clone(),
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(" or "),
        _ if schema.get("enum").is_some() => "one of the listed values".to_owned(),
        _ => "a value of another shape".to_owned(),
    }
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

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
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

fn join(path: &str, segment: &str) -> String {
    if path.is_empty() {
        segment.to_owned()
    } else {
        format!("{path}.{segment}")
    }
}

fn index(path: &str, i: usize) -> String {
    if path.is_empty() {
        format!("[{i}]")
    } else {
        format!("{path}[{i}]")
    }
}

/// The top-level field a path starts with.
fn top_field(path: &str) -> &str {
    let end = path.find(['.', '[']).unwrap_or(path.len());
    &path[..end]
}

/// Make the model's arguments what serde reads, where `schema` says what was meant:
///
/// - an integral float (`10.0`) for an integer field becomes the integer (JSON Schema counts it
///   as an integer; serde does not);
/// - `null` for an optional field that does not take `null` (a `#[serde(default)]` field: OpenAI's
///   strict mode makes the model send every field) is read as "left out", so the default applies;
/// - a map sent as a list of `{"key", "value"}` entries (how Gemini's `parameters` export
///   writes maps) becomes the object.
///
/// Anything else is left as it is, for [`violations`] to report.
pub(crate) fn normalize(schema: &Value, value: &mut Value) {
    normalize_at(schema, schema, value, 0);
}

fn normalize_at(root: &Value, schema: &Value, value: &mut Value, depth: usize) {
    if depth > MAX_DEPTH {
        return;
    }
    let schema = deref(root, schema);
    let Value::Object(s) = schema else { return };
    if let Value::Number(n) = value
        && !n.is_i64()
        && !n.is_u64()
        && type_includes(s, "integer")
        && !type_includes(s, "number")
        && let Some(f) = n.as_f64()
        && f.fract() == 0.0
    {
        if (0.0..18_446_744_073_709_551_616.0).contains(&f) {
            *value = Value::from(f as u64);
        } else if (-9_223_372_036_854_775_808.0..0.0).contains(&f) {
            *value = Value::from(f as i64);
        }
        return;
    }
    let is_map = !s.contains_key("properties") && s.get("additionalProperties").is_some_and(Value::is_object);
    if is_map
        && let Value::Array(entries) = value
        && entries.iter().all(|e| {
            e.as_object()
                .is_some_and(|o| o.len() == 2 && o.get("key").is_some_and(Value::is_string) && o.contains_key("value"))
        })
    {
        let mut map = Map::new();
        for e in entries.drain(..) {
            if let Value::Object(mut o) = e
                && let (Some(Value::String(k)), Some(v)) = (o.remove("key"), o.remove("value"))
            {
                map.insert(k, v);
            }
        }
        *value = Value::Object(map);
    }
    match value {
        Value::Object(obj) => {
            let props = s.get("properties").and_then(Value::as_object);
            let required: Vec<&str> = s
                .get("required")
                .and_then(Value::as_array)
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            if let Some(props) = props {
                obj.retain(|name, v| {
                    !(v.is_null()
                        && !required.contains(&name.as_str())
                        && props.get(name).is_some_and(|p| !accepts_null(root, p)))
                });
            }
            for (name, v) in obj.iter_mut() {
                match props.and_then(|p| p.get(name)) {
                    Some(sub) => normalize_at(root, sub, v, depth + 1),
                    None => {
                        if let Some(sub @ Value::Object(_)) = s.get("additionalProperties") {
                            normalize_at(root, sub, v, depth + 1);
                        }
                    }
                }
            }
        }
        Value::Array(items) => {
            let prefix = s.get("prefixItems").and_then(Value::as_array);
            for (i, item) in items.iter_mut().enumerate() {
                if let Some(sub) = prefix.and_then(|p| p.get(i)).or_else(|| s.get("items")) {
                    normalize_at(root, sub, item, depth + 1);
                }
            }
        }
        _ => {}
    }
    for key in ["anyOf", "oneOf"] {
        let Some(Value::Array(options)) = s.get(key) else {
            continue;
        };
        // The branch the value is meant for: the first one it fits once normalized.
        for option in options {
            let mut candidate = value.clone();
            normalize_at(root, option, &mut candidate, depth + 1);
            if violations_at(root, option, &candidate, "", &[]).is_empty() {
                *value = candidate;
                return;
            }
        }
    }
    if let Some(Value::Array(all)) = s.get("allOf") {
        for sub in all {
            normalize_at(root, sub, value, depth + 1);
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

fn accepts_null(root: &Value, schema: &Value) -> bool {
    violations_at(root, schema, &Value::Null, "", &[]).is_empty()
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

    fn schema() -> ArgumentSchema {
        ArgumentSchema::new(json!({
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
        }))
    }

    #[test]
    fn accepts_valid_arguments() {
        let ok = json!({"order_id": "o1", "amount_cents": 5, "note": null, "line": {"sku": "a"}, "mode": "fast"});
        assert!(violations(&schema(), &ok, &[]).is_empty());
    }

    #[test]
    fn names_the_field() {
        let bad = json!({"order_id": "o1", "amount_cents": "five"});
        assert_eq!(
            violations(&schema(), &bad, &[]),
            vec!["`amount_cents`: expected integer, got string \"five\""]
        );
        let bad = json!({"amount_cents": -1, "line": {}, "mode": "medium", "ordr_id": 1});
        let found = violations(&schema(), &bad, &[]);
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
        let s = ArgumentSchema::new(json!({"oneOf": [{"const": "fast", "description": "Fast."}, {"const": "slow"}]}));
        assert!(violations(&s, &json!("slow"), &[]).is_empty());
        assert_eq!(
            violations(&s, &json!("medium"), &[]),
            vec!["arguments: expected one of \"fast\", \"slow\", got string \"medium\""]
        );
    }

    #[test]
    fn integer_bounds_are_checked() {
        // schemars writes an integer type's range as `minimum`/`maximum` beside its `format`.
        let s = ArgumentSchema::new(json!({"type": "integer", "format": "uint8", "minimum": 0, "maximum": 255}));
        assert!(violations(&s, &json!(255), &[]).is_empty());
        assert_eq!(
            violations(&s, &json!(256), &[]),
            vec!["arguments: 256 is above the maximum 255"]
        );
    }

    /// What the explainer does not cover is decided, and reported at its path, by the
    /// `jsonschema` crate: a `pattern`, a `format`, `multipleOf`, `uniqueItems`.
    #[test]
    fn every_keyword_is_checked() {
        let s = ArgumentSchema::new(json!({
            "type": "object",
            "properties": {
                "sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$"},
                "lines": {"type": "array", "items": {"type": "object", "properties": {
                    "when": {"type": "string", "format": "date"},
                    "step": {"type": "integer", "multipleOf": 5}
                }}},
                "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": true},
                "pin": {"type": "string", "pattern": "^[0-9]{4}$"}
            }
        }));
        let ok = json!({"sku": "ABC-0001", "lines": [{"when": "2026-12-01", "step": 10}], "tags": ["a", "b"], "pin": "1234"});
        assert!(violations(&s, &ok, &[]).is_empty());
        assert_eq!(
            violations(&s, &json!({"sku": "abc-1"}), &[]),
            vec!["`sku`: expected a string matching the pattern `^[A-Z]{3}-[0-9]{4}$`, got string \"abc-1\""]
        );
        assert_eq!(
            violations(
                &s,
                &json!({"lines": [{"when": "2026-12-01"}, {"when": "tomorrow"}]}),
                &[]
            ),
            vec!["`lines[1].when`: expected a date such as \"2026-12-01\", got string \"tomorrow\""]
        );
        let step = violations(&s, &json!({"lines": [{"step": 7}]}), &[]);
        assert!(
            step.len() == 1 && step[0].starts_with("`lines[0].step`: 7 is not a multiple of 5"),
            "{step:?}"
        );
        let tags = violations(&s, &json!({"tags": ["a", "a"]}), &[]);
        assert!(tags.len() == 1 && tags[0].starts_with("`tags`: "), "{tags:?}");
        // A sensitive field's value is never printed, whichever part reports it.
        let pin = violations(&s, &json!({"pin": "12x4"}), &["pin"]);
        assert_eq!(pin.len(), 1);
        assert!(pin[0].starts_with("`pin`: ") && !pin[0].contains("12x4"), "{pin:?}");
    }

    #[test]
    fn suggests_near_names() {
        let names = ["issue_refund", "send_email", "lookup_order"];
        assert_eq!(nearest("issue_refnd", names), vec!["issue_refund"]);
        assert_eq!(nearest("Send-Email", names), vec!["send_email"]);
        assert_eq!(nearest("refund", names), vec!["issue_refund"]);
        assert!(nearest("deploy", names).is_empty());
    }

    /// What the fuzz target `arguments` found in the hand-written format checks this module had
    /// before the `jsonschema` crate took them over: a date-time whose last six bytes start
    /// inside a character panicked (a byte-index slice), and dates and offsets the calendar does
    /// not have passed. The same inputs, through today's check (also in
    /// `fuzz/corpus/arguments/`).
    #[test]
    fn formats_read_any_utf8_and_follow_the_calendar() {
        let problem = |format: &str, text: &str| {
            let schema = ArgumentSchema::new(json!({"type": "string", "format": format}));
            let found = violations(&schema, &json!(text), &[]);
            (!found.is_empty()).then(|| found.join("; "))
        };
        for text in [
            "2026-12-01T10:0\u{43c}0numb",
            "2026-12-01T1\u{e9}00:00",
            "2026-12-01T10:00:00+0\u{e9}:0",
        ] {
            assert!(problem("date-time", text).is_some(), "{text:?}");
            assert!(problem("time", text).is_some(), "{text:?}");
        }
        for date in [
            "8882-02-29",
            "2026-04-31",
            "1900-02-29",
            "2026-00-10",
            "2026-13-01",
            "2026-01-00",
        ] {
            assert!(problem("date", date).is_some(), "{date:?}");
        }
        for date in ["2024-02-29", "2000-02-29", "2026-01-31", "2026-04-30", "0000-02-29"] {
            assert_eq!(problem("date", date), None, "{date:?}");
        }
        for offset in ["+24:00", "-10:60", "+1a:00"] {
            let text = format!("2026-12-01T10:00:00{offset}");
            assert!(problem("date-time", &text).is_some(), "{text:?}");
        }
        assert_eq!(problem("date-time", "2026-12-01T10:00:00-23:59"), None);
        assert_eq!(problem("time", "10:00:00.5+05:30"), None);
    }
}
