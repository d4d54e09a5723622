//! RFC 8785 JSON Canonicalization Scheme (JCS).
//!
//! Object members sorted by the UTF-16 code units of their names, numbers in ECMAScript
//! `Number.prototype.toString` form (via `ryu-js`), strings with minimal escaping, no
//! whitespace. Output is byte-identical to every other RFC 8785 implementation, so agents in
//! other languages can compute the same keys and share a store.
//!
//! Conformance is tested against the reference implementations' vectors and 100,000
//! ECMAScript number-formatting lines (`effect-tool-core/tests/decisions/jcs.rs`, data in
//! `testdata/jcs`).
//!
//! Two details matter for interoperability:
//! - Numbers are parsed with `serde_json`'s `float_roundtrip` feature (this crate turns it on),
//!   so a decimal in the input becomes the nearest double, as in every other implementation;
//!   without it the parser may be off by one ULP and the key would differ.
//! - [`canonicalize_str`] rejects input RFC 8785 does not accept (I-JSON): duplicate member
//!   names, numbers out of the double's range, lone surrogates. [`to_string`] takes a parsed
//!   [`Value`], which cannot hold those.
//!
//! # Integers beyond ±(2^53 − 1): refused for keys
//!
//! RFC 8785 writes every number as an IEEE-754 double, so `9007199254740993` canonicalizes to
//! `9007199254740992`: two different integers, one canonical text, one key. [`to_string`] does
//! exactly what RFC 8785 says (it is the canonical form other implementations compute).
//! Keys and fingerprints go through [`try_to_string`] instead (via [`check_exact`]), which
//! **refuses** an integer beyond ±(2^53 − 1) (`Number.MAX_SAFE_INTEGER`, the I-JSON limit) with
//! a [`CanonicalError`] naming its JSON path: the engine refuses such a call as invalid
//! arguments before anything is claimed or run. Send such values as strings (a `String`
//! field, or `#[serde(with = ...)]` that writes the digits as a string).
//!
//! Refusing, rather than keying the digits exactly, keeps the promise that a key computed here
//! equals the one any other RFC 8785 implementation computes on the same input: an
//! implementation in JavaScript, Python or Go that keys an input this library would accept
//! always gets the same key. Inputs this library refuses are ones where other implementations
//! would round (and could merge two effects); an agent in another language sharing the store
//! should refuse them as well.
//!
//! The walk keeps its own stack instead of recursing, so a [`Value`] nested arbitrarily deep
//! (built in code) cannot overflow the thread's stack.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// The RFC 8785 canonical form of a JSON value.
///
/// Integers beyond ±(2^53 − 1) go through the double, as RFC 8785 says (see the module docs);
/// [`try_to_string`] refuses them instead, which is what keys use.
///
/// ```
/// let v = serde_json::json!({"b": 1.0, "a": [true, null, "x"]});
/// assert_eq!(effect_tool_core::value::canonical::to_string(&v), r#"{"a":[true,null,"x"],"b":1}"#);
/// ```
pub fn to_string(value: &Value) -> String {
    let mut out = String::with_capacity(128);
    // Without `exact` the walk has nothing to refuse.
    let _ = write_value(&mut out, value, false);
    out
}

/// The RFC 8785 canonical form of a JSON value, refusing what RFC 8785 would round into
/// another value's form: an integer beyond ±(2^53 − 1).
///
/// ```
/// use effect_tool_core::value::canonical::try_to_string;
/// let ok = serde_json::json!({"order": 9007199254740991u64});
/// assert_eq!(try_to_string(&ok).unwrap(), r#"{"order":9007199254740991}"#);
/// let big = serde_json::json!({"order": 9007199254740993u64});
/// let err = try_to_string(&big).unwrap_err();
/// assert!(err.to_string().starts_with("`$.order` is the integer 9007199254740993"), "{err}");
/// ```
pub fn try_to_string(value: &Value) -> Result<String, CanonicalError> {
    let mut out = String::with_capacity(128);
    write_value(&mut out, value, true)?;
    Ok(out)
}

/// Check that `value` has a canonical form every RFC 8785 implementation agrees on (no integer
/// beyond ±(2^53 − 1)), without building it.
pub fn check_exact(value: &Value) -> Result<(), CanonicalError> {
    // The walk writes into a sink that keeps nothing.
    write_value(&mut Sink, value, true)
}

/// Where the walk writes: a `String`, or nothing ([`check_exact`]).
trait Out {
    fn push(&mut self, c: char);
    fn push_str(&mut self, s: &str);
    fn push_display(&mut self, v: impl fmt::Display);
}

impl Out for String {
    fn push(&mut self, c: char) {
        String::push(self, c);
    }
    fn push_str(&mut self, s: &str) {
        String::push_str(self, s);
    }
    fn push_display(&mut self, v: impl fmt::Display) {
        use std::fmt::Write;
        let _ = write!(self, "{v}");
    }
}

/// Keeps nothing.
struct Sink;

impl Out for Sink {
    fn push(&mut self, _: char) {}
    fn push_str(&mut self, _: &str) {}
    fn push_display(&mut self, _: impl fmt::Display) {}
}

/// Serialize any value to JSON and return its canonical form, refusing what [`try_to_string`]
/// refuses.
///
/// ```
/// #[derive(serde::Serialize)]
/// struct Refund { order: u64, note: &'static str }
/// let text = effect_tool_core::value::canonical::to_canonical(&Refund { order: 7, note: "x" }).unwrap();
/// assert_eq!(text, r#"{"note":"x","order":7}"#);
/// assert!(effect_tool_core::value::canonical::to_canonical(&Refund { order: u64::MAX, note: "x" }).is_err());
/// ```
pub fn to_canonical<T: serde::Serialize + ?Sized>(value: &T) -> Result<String, CanonicalError> {
    let value = serde_json::to_value(value).map_err(|e| CanonicalError::Serialize(e.to_string()))?;
    try_to_string(&value)
}

/// Why a value has no canonical form every RFC 8785 implementation agrees on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CanonicalError {
    /// An integer beyond ±(2^53 − 1): RFC 8785 writes it as the nearest double, which it shares
    /// with other integers, so two different inputs would get one key.
    #[error(
        "`{path}` is the integer {value}, beyond ±(2^53 − 1) = ±9007199254740991: RFC 8785 keys numbers as doubles, \
         where it would share a key with a neighbouring integer (and its effect with theirs); \
         send it as a string instead (a `String` field, or `#[serde(with = ...)]` writing its digits as a string)"
    )]
    InexactInteger {
        /// Where in the value: `$.order`, `$.items[2].id`.
        path: String,
        /// The integer's digits.
        value: String,
    },
    /// The value did not serialize to JSON ([`to_canonical`]).
    #[error("the value does not serialize to JSON: {0}")]
    Serialize(String),
}

/// Parse JSON text and return its RFC 8785 canonical form.
///
/// Fails on invalid JSON and on what RFC 8785 (I-JSON) forbids: a member name twice in one
/// object (parsers disagree on which value wins, so two implementations could compute
/// different keys), a number outside the double's range, a lone surrogate.
///
/// ```
/// use effect_tool_core::value::canonical::canonicalize_str;
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
    // No `visit_string` or `visit_none`: JSON text never reaches them (serde_json hands strings
    // to `visit_str`/`visit_borrowed_str`, and `null` to `visit_unit`), and serde's defaults
    // forward `visit_string` to `visit_str`.
    fn visit_unit<E>(self) -> Result<Value, E> {
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

/// One open container of the walk: where it is, and what is left of it.
enum Frame<'a> {
    Array {
        items: std::slice::Iter<'a, Value>,
        index: usize,
    },
    Object {
        members: Members<'a>,
        name: Option<&'a str>,
    },
}

/// An object's members in RFC 8785 order.
enum Members<'a> {
    /// The map's own order is already the UTF-16 order (no copy, no sort).
    InOrder(serde_json::map::Iter<'a>),
    Sorted(std::vec::IntoIter<(&'a String, &'a Value)>),
}

impl<'a> Iterator for Members<'a> {
    type Item = (&'a String, &'a Value);
    fn next(&mut self) -> Option<Self::Item> {
        match self {
            Members::InOrder(it) => it.next(),
            Members::Sorted(it) => it.next(),
        }
    }
}

fn members(map: &Map<String, Value>) -> Members<'_> {
    // serde_json's map is sorted by UTF-8 bytes (or in insertion order with `preserve_order`);
    // RFC 8785 wants UTF-16 code units, which differ for characters above the BMP versus
    // U+E000..U+FFFF. Keys already in order and below U+E000 (the common case: ASCII names)
    // are written as they come, without sorting a copy. (A name is below U+E000 when its UTF-8
    // has no byte from 0xEE up: those lead U+E000 and above, continuation bytes are below.)
    let mut prev: Option<&str> = None;
    let in_order = map.keys().all(|k| {
        let ok = k.bytes().all(|b| b < 0xEE) && prev.is_none_or(|p| p < k.as_str());
        prev = Some(k);
        ok
    });
    if in_order {
        Members::InOrder(map.iter())
    } else {
        let mut entries: Vec<(&String, &Value)> = map.iter().collect();
        entries.sort_by(|a, b| a.0.encode_utf16().cmp(b.0.encode_utf16()));
        Members::Sorted(entries.into_iter())
    }
}

/// Write `value` in canonical form. The walk keeps its own stack of open containers instead of
/// recursing, so a value nested 100,000 deep (built in code; the parser stops at 128) costs
/// heap, not the thread's stack. With `exact`, an integer a double cannot hold fails the walk
/// with its path.
fn write_value<O: Out>(out: &mut O, value: &Value, exact: bool) -> Result<(), CanonicalError> {
    let mut stack: Vec<Frame<'_>> = Vec::new();
    let mut current = value;
    loop {
        match current {
            Value::Null => out.push_str("null"),
            Value::Bool(true) => out.push_str("true"),
            Value::Bool(false) => out.push_str("false"),
            Value::Number(n) => {
                if exact && !is_exact(n) {
                    return Err(CanonicalError::InexactInteger {
                        path: path_of(&stack),
                        value: n.to_string(),
                    });
                }
                write_number(out, n);
            }
            Value::String(s) => write_string(out, s),
            Value::Array(items) => {
                out.push('[');
                stack.push(Frame::Array {
                    items: items.iter(),
                    index: 0,
                });
            }
            Value::Object(map) => {
                out.push('{');
                stack.push(Frame::Object {
                    members: members(map),
                    name: None,
                });
            }
        }
        // The next value to write: the next item of the innermost open container, closing the
        // containers that are done.
        loop {
            let Some(frame) = stack.last_mut() else {
                return Ok(());
            };
            let next = match frame {
                Frame::Array { items, index } => items.next().inspect(|_| {
                    if *index > 0 {
                        out.push(',');
                    }
                    *index += 1;
                }),
                Frame::Object { members, name } => members.next().map(|(k, v)| {
                    if name.is_some() {
                        out.push(',');
                    }
                    *name = Some(k.as_str());
                    write_string(out, k);
                    out.push(':');
                    v
                }),
            };
            match next {
                Some(v) => {
                    current = v;
                    break;
                }
                None => {
                    out.push(if matches!(frame, Frame::Array { .. }) { ']' } else { '}' });
                    stack.pop();
                }
            }
        }
    }
}

/// The JSON path of the value the walk is at: `$`, `$.order`, `$.items[2].id`, `$["a b"]`.
fn path_of(stack: &[Frame<'_>]) -> String {
    let mut path = String::from("$");
    for frame in stack {
        match frame {
            Frame::Array { index, .. } => {
                use std::fmt::Write;
                let _ = write!(path, "[{}]", index.saturating_sub(1));
            }
            Frame::Object { name: Some(name), .. } => {
                let simple = !name.is_empty()
                    && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                    && !name.as_bytes()[0].is_ascii_digit();
                if simple {
                    path.push('.');
                    path.push_str(name);
                } else {
                    path.push('[');
                    write_string(&mut path, name);
                    path.push(']');
                }
            }
            Frame::Object { name: None, .. } => {}
        }
    }
    path
}

/// Largest integer magnitude every RFC 8785 implementation holds exactly: 2^53 − 1
/// (`Number.MAX_SAFE_INTEGER`; I-JSON, RFC 7493 §2.2).
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// Whether every RFC 8785 implementation reads `n` as the same number it is here: doubles
/// always, integers within ±(2^53 − 1).
fn is_exact(n: &serde_json::Number) -> bool {
    if let Some(i) = n.as_i64() {
        i.unsigned_abs() <= MAX_SAFE_INTEGER
    } else if let Some(u) = n.as_u64() {
        u <= MAX_SAFE_INTEGER
    } else {
        true
    }
}

fn write_number<O: Out>(out: &mut O, n: &serde_json::Number) {
    // Integers that a double holds exactly (|i| <= 2^53) print as their digits, which is what
    // ECMAScript prints for them; everything else goes through the IEEE-754 double, as RFC 8785
    // requires.
    const EXACT: u64 = 1 << 53;
    if let Some(i) = n.as_i64()
        && i.unsigned_abs() <= EXACT
    {
        out.push_display(i);
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
fn write_f64<O: Out>(out: &mut O, f: f64) {
    if f == 0.0 {
        // Both +0 and -0 print as "0".
        out.push('0');
        return;
    }
    let mut buf = ryu_js::Buffer::new();
    out.push_str(buf.format_finite(f));
}

fn write_string<O: Out>(out: &mut O, s: &str) {
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

    /// Take a deep value apart one level at a time: its own drop glue recurses.
    fn dismantle(mut v: Value) {
        loop {
            v = match v {
                Value::Array(mut items) => items.pop().unwrap_or(Value::Null),
                Value::Object(map) => map.into_iter().next().map_or(Value::Null, |(_, v)| v),
                _ => return,
            };
        }
    }

    #[test]
    fn a_value_nested_100_000_deep_does_not_overflow_the_stack() {
        const DEPTH: usize = 100_000;
        let mut v = json!(9_007_199_254_740_993u64);
        for i in 0..DEPTH {
            // Not `json!`, which would serialize (recursively) what it is given.
            v = if i % 2 == 0 {
                Value::Array(vec![v])
            } else {
                Value::Object(Map::from_iter([("a".to_owned(), v)]))
            };
        }
        let text = to_string(&v);
        let refused = try_to_string(&v);
        let checked = check_exact(&v);
        // Take it apart before asserting: a panic would drop it recursively.
        dismantle(v);
        let half = DEPTH / 2;
        assert!(text == format!(r#"{}9007199254740992{}"#, r#"{"a":["#.repeat(half), "]}".repeat(half)));
        // The refusal names the path, all the way down.
        let err = refused.unwrap_err();
        let CanonicalError::InexactInteger { path, .. } = &err else {
            panic!("{err}")
        };
        assert_eq!(path.len(), 1 + DEPTH / 2 * (".a".len() + "[0]".len()));
        assert!(path.starts_with("$.a[0].a[0]"), "{}", &path[..20]);
        assert_eq!(checked, Err(err));
    }

    #[test]
    fn integers_beyond_2_pow_53_are_refused_with_their_path() {
        let max = MAX_SAFE_INTEGER;
        for ok in [
            json!(max),
            json!(-(max as i64)),
            json!(0),
            json!(1.5e300),
            json!({"a": [max]}),
        ] {
            assert_eq!(try_to_string(&ok).unwrap(), to_string(&ok));
            assert!(check_exact(&ok).is_ok());
        }
        let cases = [
            (json!(max + 1), "$", "9007199254740992"),
            (json!(-(max as i64) - 1), "$", "-9007199254740992"),
            (
                json!({"order": 9_007_199_254_740_993u64}),
                "$.order",
                "9007199254740993",
            ),
            (
                json!({"o": [1, {"x y": u64::MAX}]}),
                r#"$.o[1]["x y"]"#,
                "18446744073709551615",
            ),
            (
                json!({"b": 1, "a": [0, 1, 2, i64::MIN]}),
                "$.a[3]",
                "-9223372036854775808",
            ),
            (
                json!({"\u{10000}": 1, "\u{e000}": [max + 2]}),
                "$[\"\u{e000}\"][0]",
                "9007199254740993",
            ),
        ];
        for (v, path, digits) in cases {
            let err = try_to_string(&v).unwrap_err();
            assert_eq!(
                err,
                CanonicalError::InexactInteger {
                    path: path.into(),
                    value: digits.into()
                }
            );
            assert_eq!(check_exact(&v), Err(err.clone()));
            let text = err.to_string();
            assert!(
                text.starts_with(&format!("`{path}` is the integer {digits}, beyond")),
                "{text}"
            );
            assert!(text.contains("send it as a string"), "{text}");
        }
        // RFC 8785 itself rounds them: what other implementations compute.
        assert_eq!(to_string(&json!(9_007_199_254_740_993u64)), "9007199254740992");
    }

    #[test]
    fn to_canonical_serializes_then_refuses_like_try_to_string() {
        #[derive(serde::Serialize)]
        struct Refund {
            order: u64,
            note: &'static str,
        }
        assert_eq!(
            to_canonical(&Refund { order: 7, note: "é" }).unwrap(),
            r#"{"note":"é","order":7}"#
        );
        let err = to_canonical(&Refund {
            order: u64::MAX,
            note: "",
        })
        .unwrap_err();
        assert!(
            matches!(&err, CanonicalError::InexactInteger { path, .. } if path == "$.order"),
            "{err}"
        );
        let map_with_int_keys: std::collections::HashMap<Vec<u8>, u8> = [(vec![1], 1)].into();
        let err = to_canonical(&map_with_int_keys).unwrap_err();
        assert!(matches!(err, CanonicalError::Serialize(_)), "{err}");
        assert!(
            err.to_string().starts_with("the value does not serialize to JSON: "),
            "{err}"
        );
    }

    #[test]
    fn utf16_order() {
        // U+10000 (surrogates D800 DC00) sorts before U+E000 in UTF-16, after it in UTF-8.
        let v = json!({"\u{e000}": 1, "\u{10000}": 2});
        assert_eq!(to_string(&v), "{\"\u{10000}\":2,\"\u{e000}\":1}");
        // Only names above U+E000 (the fast path's guard must not let UTF-8 order through):
        // U+10000 (D800 DC00) before U+E001 in UTF-16, after it in UTF-8.
        let v = json!({"\u{e001}": 1, "\u{10000}": 2});
        assert_eq!(to_string(&v), "{\"\u{10000}\":2,\"\u{e001}\":1}");
        // Above U+E000 on both sides, beside names below it: U+E001 (E001) after U+10000 (D800 DC00), U+FFFF last of
        // the BMP but still after the surrogates; ASCII before all of them.
        let v = json!({"\u{e001}": 1, "\u{10000}": 2, "\u{ffff}": 3, "a": 4, "\u{d7ff}": 5});
        assert_eq!(
            to_string(&v),
            "{\"a\":4,\"\u{d7ff}\":5,\"\u{10000}\":2,\"\u{e001}\":1,\"\u{ffff}\":3}"
        );
        // Names sharing a prefix: the shorter first.
        let v = json!({"\u{e001}\u{e001}": 1, "\u{e001}": 2});
        assert_eq!(to_string(&v), "{\"\u{e001}\":2,\"\u{e001}\u{e001}\":1}");
    }

    #[test]
    fn in_order_fast_path_only_for_names_below_u_e000() {
        // Keys sorted by UTF-8 (serde_json's map order) that UTF-16 orders differently: the
        // fast path must not take them as they come.
        let v = json!({"b": {"\u{e000}": 1, "\u{10000}": 2}, "a": 1});
        assert_eq!(to_string(&v), "{\"a\":1,\"b\":{\"\u{10000}\":2,\"\u{e000}\":1}}");
    }

    /// The fast path itself (output alone cannot tell it from sorting, which is always right):
    /// names below U+E000, in strictly increasing order, are taken as the map holds them; any
    /// other map is sorted. With serde_json's `preserve_order` (turned on by other crates of a
    /// build) the map is in insertion order, and an out-of-order map must be sorted too.
    #[test]
    fn the_fast_path_takes_only_names_below_u_e000_in_increasing_order() {
        let taken = |v: &Value| matches!(members(v.as_object().unwrap()), Members::InOrder(_));
        assert!(taken(&json!({"a": 1, "b": 2, "\u{d7ff}": 3})));
        assert!(taken(&json!({"only": 1})));
        assert!(
            !taken(&json!({"a": 1, "\u{e000}": 2})),
            "U+E000 itself is not below U+E000"
        );
        assert!(!taken(&json!({"\u{10000}": 1})));
        let mut out_of_order = Map::new();
        out_of_order.insert("b".into(), json!(1));
        out_of_order.insert("a".into(), json!(2));
        let insertion_ordered = out_of_order.keys().next().map(String::as_str) == Some("b");
        assert_eq!(taken(&Value::Object(out_of_order.clone())), !insertion_ordered);
        assert_eq!(to_string(&Value::Object(out_of_order)), r#"{"a":2,"b":1}"#);
    }

    #[test]
    fn write_string_escapes() {
        assert_eq!(
            to_string(&json!("\u{8}\u{c}\t\r\u{1f}\u{7f}/é")),
            "\"\\b\\f\\t\\r\\u001f\u{7f}/é\""
        );
        assert_eq!(to_string(&json!("\u{0}\u{10}")), "\"\\u0000\\u0010\"");
        assert_eq!(to_string(&json!([])), "[]");
        assert_eq!(to_string(&json!({})), "{}");
        assert_eq!(to_string(&json!([[], {}, [null]])), "[[],{},[null]]");
        assert_eq!(to_string(&json!(false)), "false");
    }
}
