//! RFC 8785 JSON Canonicalization Scheme (JCS).
//!
//! Object members sorted by the UTF-16 code units of their names, numbers in ECMAScript
//! `Number.prototype.toString` form (via `ryu-js`), strings with minimal escaping, no
//! whitespace. Output is byte-identical to every other RFC 8785 implementation, so agents in
//! other languages can compute the same keys and share a store.

use serde_json::Value;

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
pub fn canonicalize_str(json: &str) -> Result<String, serde_json::Error> {
    let value: Value = serde_json::from_str(json)?;
    Ok(to_string(&value))
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
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            // serde_json's map is sorted by UTF-8 bytes (or insertion order with
            // `preserve_order`); RFC 8785 wants UTF-16 code units, which differ for
            // characters above the BMP versus U+E000..U+FFFF.
            entries.sort_by(|a, b| a.0.encode_utf16().cmp(b.0.encode_utf16()));
            out.push('{');
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(out, k);
                out.push(':');
                write_value(out, v);
            }
            out.push('}');
        }
    }
}

fn write_number(out: &mut String, n: &serde_json::Number) {
    // Integers that a double holds exactly print as integers; everything else goes through
    // the IEEE-754 double, as RFC 8785 requires.
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
    fn utf16_order() {
        // U+10000 (surrogates D800 DC00) sorts before U+E000 in UTF-16, after it in UTF-8.
        let v = json!({"\u{e000}": 1, "\u{10000}": 2});
        assert_eq!(to_string(&v), "{\"\u{10000}\":2,\"\u{e000}\":1}");
    }
}
