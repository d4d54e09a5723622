//! RFC 8785 JSON Canonicalization Scheme (JCS).
//!
//! Object members sorted by the UTF-16 code units of their names, numbers in ECMAScript
//! `Number.prototype.toString` form (via `ryu-js`), strings with minimal escaping, no
//! whitespace. Output is byte-identical to every other RFC 8785 implementation, so agents in
//! other languages can compute the same keys and share a store.
//!
//! Conformance is tested against the reference implementations' vectors and 100,000
//! ECMAScript number-formatting lines (`effect-tool-core/tests/jcs.rs`, data in
//! `testdata/jcs`).
//!
//! Two details matter for interoperability:
//! - Numbers are parsed with `serde_json`'s `float_roundtrip` feature (this crate turns it on),
//!   so a decimal in the input becomes the nearest double, as in every other implementation;
//!   without it the parser may be off by one ULP and the key would differ. Integers beyond
//!   2^53 go through the double too (`9007199254740993` canonicalizes to `9007199254740992`).
//! - [`canonicalize_str`] rejects input RFC 8785 does not accept (I-JSON): duplicate member
//!   names, numbers out of the double's range, lone surrogates. [`to_string`] takes a parsed
//!   [`Value`], which cannot hold those.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// The RFC 8785 canonical form of a JSON value.
///
/// ```
/// let v = serde_json::json!({"b": 1.0, "a": [true, null, "x"]});
/// assert_eq!(effect_tool_core::canonical::to_string(&v), r#"{"a":[true,null,"x"],"b":1}"#);
/// ```
pub fn to_string(value: &Value) -> String {
    let mut out = String::with_capacity(128);
    write_value(&mut out, value);
    out
}

/// Parse JSON text and return its RFC 8785 canonical form.
///
/// Fails on invalid JSON and on what RFC 8785 (I-JSON) forbids: a member name twice in one
/// object (parsers disagree on which value wins, so two implementations could compute
/// different keys), a number outside the double's range, a lone surrogate.
///
/// ```
/// use effect_tool_core::canonical::canonicalize_str;
/// assert_eq!(canonicalize_str(r#"{ "b": 1.50, "a": 1E3 }"#).unwrap(), r#"{"a":1000,"b":1.5}"#);
/// assert!(canonicalize_str(r#"{"a": 1, "a": 2}"#).is_err());
/// ```
pub fn canonicalize_str(json: &str) -> Result<String, serde_json::Error> {
    Ok(to_string(&parse_strict(json)?))
}

/// Parse JSON text into a [`Value`], rejecting duplicate member names (see
/// [`canonicalize_str`]).
pub fn parse_strict(json: &str) -> Result<Value, serde_json::Error> {
    serde_json::from_str::<Strict>(json).map(|s| s.0)
}

/// A [`Value`] deserialized with duplicate member names rejected.
struct Strict(Value);

impl<'de> Deserialize<'de> for Strict {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(StrictVisitor).map(Strict)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        serde_json::Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom("number is not finite"))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(Strict(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut members = Map::new();
        while let Some(name) = map.next_key::<String>()? {
            let Strict(value) = map.next_value()?;
            if members.contains_key(&name) {
                return Err(de::Error::custom(format_args!(
                    "duplicate member name `{name}` (RFC 8785 requires unique names)"
                )));
            }
            members.insert(name, value);
        }
        Ok(Value::Object(members))
    }
}

/// Serialize any value to JSON and return its canonical form.
pub fn to_canonical<T: serde::Serialize + ?Sized>(value: &T) -> Result<String, serde_json::Error> {
    Ok(to_string(&serde_json::to_value(value)?))
}

fn write_value(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(n) => write_number(out, n),
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => {
            // serde_json's map is sorted by UTF-8 bytes (or in insertion order with
            // `preserve_order`); RFC 8785 wants UTF-16 code units, which differ for characters
            // above the BMP versus U+E000..U+FFFF. Keys already in order and below U+E000 (the
            // common case: ASCII names) are written as they come, without sorting a copy.
            let mut prev: Option<&str> = None;
            let in_order = map.keys().all(|k| {
                let ok = k.chars().all(|c| c < '\u{e000}') && prev.is_none_or(|p| p < k.as_str());
                prev = Some(k);
                ok
            });
            out.push('{');
            if in_order {
                write_members(out, map.iter());
            } else {
                let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                entries.sort_by(|a, b| a.0.encode_utf16().cmp(b.0.encode_utf16()));
                write_members(out, entries.into_iter());
            }
            out.push('}');
        }
    }
}

fn write_members<'a>(out: &mut String, members: impl Iterator<Item = (&'a String, &'a Value)>) {
    for (i, (k, v)) in members.enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_string(out, k);
        out.push(':');
        write_value(out, v);
    }
}

fn write_number(out: &mut String, n: &serde_json::Number) {
    // Integers that a double holds exactly (|i| <= 2^53) print as their digits, which is what
    // ECMAScript prints for them; everything else goes through the IEEE-754 double, as RFC 8785
    // requires.
    const EXACT: u64 = 1 << 53;
    if let Some(i) = n.as_i64()
        && i.unsigned_abs() <= EXACT
    {
        use std::fmt::Write;
        let _ = write!(out, "{i}");
        return;
    }
    let f = if let Some(i) = n.as_i64() {
        i as f64
    } else if let Some(u) = n.as_u64() {
        u as f64
    } else {
        n.as_f64().unwrap_or(f64::NAN)
    };
    write_f64(out, f);
}

/// Append the ECMAScript string form of a finite double.
pub(crate) fn write_f64(out: &mut String, f: f64) {
    if f == 0.0 {
        // Both +0 and -0 print as "0".
        out.push('0');
        return;
    }
    let mut buf = ryu_js::Buffer::new();
    out.push_str(buf.format_finite(f));
}

fn write_string(out: &mut String, s: &str) {
    out.push('"');
    let mut start = 0;
    for (i, b) in s.bytes().enumerate() {
        let esc: Option<&str> = match b {
            b'"' => Some("\\\""),
            b'\\' => Some("\\\\"),
            b'\x08' => Some("\\b"),
            b'\t' => Some("\\t"),
            b'\n' => Some("\\n"),
            b'\x0c' => Some("\\f"),
            b'\r' => Some("\\r"),
            0..=0x1f => None,
            _ => continue,
        };
        out.push_str(&s[start..i]);
        match esc {
            Some(e) => out.push_str(e),
            None => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.push_str("\\u00");
                out.push(HEX[(b >> 4) as usize] as char);
                out.push(HEX[(b & 0xf) as usize] as char);
            }
        }
        start = i + 1;
    }
    out.push_str(&s[start..]);
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn basics() {
        assert_eq!(
            to_string(&json!({"b": [1, 2.5, -0.0], "a": "\u{1}\"\\\n"})),
            r#"{"a":"\u0001\"\\\n","b":[1,2.5,0]}"#
        );
        assert_eq!(to_string(&json!(1e21)), "1e+21");
        assert_eq!(to_string(&json!(1e-7)), "1e-7");
        assert_eq!(to_string(&json!(123456789012345680000.0)), "123456789012345680000");
    }

    #[test]
    fn strict_parsing() {
        let err = canonicalize_str(r#"{"x": {"a": 1, "a": 1}}"#).unwrap_err();
        assert!(err.to_string().contains("duplicate member name `a`"), "{err}");
        assert!(canonicalize_str(r#""\ud800""#).is_err());
        assert!(canonicalize_str("1e999").is_err());
        assert!(canonicalize_str("[1,]").is_err());
        assert_eq!(
            canonicalize_str(r#"[{"a":1},{"a":2}]"#).unwrap(),
            r#"[{"a":1},{"a":2}]"#
        );
    }

    #[test]
    fn utf16_order() {
        // U+10000 (surrogates D800 DC00) sorts before U+E000 in UTF-16, after it in UTF-8.
        let v = json!({"\u{e000}": 1, "\u{10000}": 2});
        assert_eq!(to_string(&v), "{\"\u{10000}\":2,\"\u{e000}\":1}");
    }
}
