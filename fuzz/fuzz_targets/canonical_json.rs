//! RFC 8785 canonical JSON (`effect_tool_core::value::canonical`).
//!
//! For any text the strict parser accepts:
//! - its canonical form re-parses to the same value (numbers compared as the doubles RFC 8785
//!   writes them as), and canonicalizing the canonical form again changes nothing;
//! - `canonicalize_str` is `to_string` of `parse_strict`;
//! - `check_exact` and `try_to_string` agree, and when they accept, `try_to_string` is the
//!   canonical form.
//!
//! For any text it refuses, `canonicalize_str` refuses too.

#![no_main]

use effect_tool::value::canonical::{canonicalize_str, check_exact, parse_strict, to_string, try_to_string};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match parse_strict(text) {
        Ok(value) => check_accepted(text, &value),
        Err(_) => assert!(
            canonicalize_str(text).is_err(),
            "parse_strict refused {text:?}, canonicalize_str did not"
        ),
    }
});

/// The properties of a value the strict parser read from `text`.
fn check_accepted(text: &str, value: &Value) {
    let canonical = to_string(value);
    assert_eq!(
        canonicalize_str(text).ok().as_deref(),
        Some(canonical.as_str()),
        "input {text:?}"
    );
    let reparsed =
        parse_strict(&canonical).unwrap_or_else(|e| panic!("canonical form {canonical:?} does not parse: {e}"));
    assert!(
        same_doubles(value, &reparsed),
        "{text:?} -> {canonical:?} reads back as another value"
    );
    assert_eq!(
        to_string(&reparsed),
        canonical,
        "canonicalizing {canonical:?} again changed it"
    );
    match try_to_string(value) {
        Ok(exact) => {
            assert_eq!(exact, canonical);
            assert!(check_exact(value).is_ok());
        }
        Err(e) => assert_eq!(check_exact(value), Err(e)),
    }
}

/// Whether `a` and `b` are the same JSON value, numbers compared as IEEE-754 doubles (how
/// RFC 8785 writes every number; -0 and 0 are one number).
fn same_doubles(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(xs), Value::Array(ys)) => {
            xs.len() == ys.len() && xs.iter().zip(ys).all(|(x, y)| same_doubles(x, y))
        }
        (Value::Object(xs), Value::Object(ys)) => {
            xs.len() == ys.len() && xs.iter().all(|(k, x)| ys.get(k).is_some_and(|y| same_doubles(x, y)))
        }
        _ => a == b,
    }
}
