//! Markers (`effect_tool_core::value::marker`).
//!
//! - Any key's marker carries its id: `parse_marker(marker(k)) == plain_marker_id(k)`, the
//!   same for `signed_marker` and `marker_id`, and a legacy marker round-trips its key; nothing
//!   rendered can end the comment (`--`, `<`, `>`).
//! - A marker is found wherever it is: with any text before and after it, `parse_markers`
//!   still returns its id (or a legacy marker's key) and `contains_marker` verifies the signed
//!   one (and never the plain one).
//! - Parsing any text returns only ids and keys that text spells in the marker format (for a
//!   legacy key, each byte plain, if the encoder leaves it plain, or `%` and two hex digits in
//!   either case): checked against an independent reading of the format.
//!
//! Input: UTF-8 text, its parts separated by NUL bytes: the key, the text before its marker,
//! the text after it, and free text to parse (missing parts are empty).

#![no_main]

use effect_tool::value::marker::{
    MARKER_PREFIX, MARKER_SUFFIX, MarkerSecret, contains_marker, legacy_marker, marker, marker_id, parse_marker,
    parse_markers, plain_marker_id, signed_marker,
};

/// What markers written before the identifier start with.
const LEGACY_PREFIX: &str = "<!-- effect-tool:effect=";
use libfuzzer_sys::fuzz_target;

/// One case: a key, the text around its marker, and free text to parse.
struct Case<'a> {
    key: &'a str,
    before: &'a str,
    after: &'a str,
    text: &'a str,
}

impl<'a> Case<'a> {
    /// The parts of `text`, separated by NUL.
    fn split(text: &'a str) -> Self {
        let mut parts = text.splitn(4, '\0');
        let mut next = || parts.next().unwrap_or("");
        Case {
            key: next(),
            before: next(),
            after: next(),
            text: next(),
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let case = Case::split(text);
    // Any secret behaves alike: HMAC-SHA256 takes every key.
    let secret = MarkerSecret::from_bytes([7; 32]);
    check_round_trip(case.key, &secret);
    check_embedded(&case, &secret);
    check_spelling(case.text);
});

/// `marker` and `signed_marker` of `key` parse back to its id, a legacy marker to the key, and
/// none can end the comment early.
fn check_round_trip(key: &str, secret: &MarkerSecret) {
    for (m, carried) in [
        (marker(key), plain_marker_id(key)),
        (signed_marker(key, secret), marker_id(key, secret)),
        (legacy_marker(key, None), key.to_owned()),
        (legacy_marker(key, Some(secret)), key.to_owned()),
    ] {
        let inner = &m[4..m.len() - MARKER_SUFFIX.len()];
        assert!(!inner.contains("--") && !inner.contains(['<', '>']), "{m:?}");
        assert_eq!(parse_marker(&m).as_deref(), Some(carried.as_str()), "{m:?}");
    }
}

/// The marker of `case.key` between `case.before` and `case.after` is found, and verifies
/// only when signed.
fn check_embedded(case: &Case<'_>, secret: &MarkerSecret) {
    let (key, before, after) = (case.key, case.before, case.after);
    let plain = format!("{before}{}{after}", marker(key));
    let id = plain_marker_id(key);
    assert!(
        parse_markers(&plain).iter().any(|k| *k == id),
        "{plain:?} hides the marker of {key:?}"
    );
    assert!(!contains_marker(&plain, key, secret) || contains_marker(&format!("{before}{after}"), key, secret));
    let signed = format!("{before}{}{after}", signed_marker(key, secret));
    let id = marker_id(key, secret);
    assert!(
        parse_markers(&signed).iter().any(|k| *k == id),
        "{signed:?} hides the marker of {key:?}"
    );
    assert!(
        contains_marker(&signed, key, secret),
        "{signed:?}: the signed marker of {key:?} does not verify"
    );
    let legacy = format!("{before}{}{after}", legacy_marker(key, Some(secret)));
    assert!(
        parse_markers(&legacy).iter().any(|k| k == key),
        "{legacy:?} hides the legacy marker of {key:?}"
    );
    assert!(
        contains_marker(&legacy, key, secret),
        "{legacy:?}: the legacy marker of {key:?} does not verify"
    );
}

/// Every key parsed from `text` is spelled there as a marker: the prefix, each byte of the key
/// either as itself (if the encoder leaves it plain) or as `%` and two hex digits, then the
/// suffix or a MAC. An independent reading of the module's format, so that no other spelling
/// (a sign in an escape, a raw byte the encoder escapes) is read as a key.
fn check_spelling(text: &str) {
    for key in parse_markers(text) {
        let id = format!("{MARKER_PREFIX}{key}{MARKER_SUFFIX}");
        let spelled = text.to_ascii_lowercase().contains(&id)
            || text
                .match_indices(LEGACY_PREFIX)
                .any(|(at, _)| spells(&text.as_bytes()[at + LEGACY_PREFIX.len()..], key.as_bytes()));
        assert!(spelled, "{text:?} yields {key:?}, which it does not spell as a marker");
    }
}

/// Whether `text` starts with an encoding of `key` followed by the suffix or a MAC.
fn spells(text: &[u8], key: &[u8]) -> bool {
    let mut at = 0;
    for &b in key {
        let escaped = text.get(at..at + 3).is_some_and(|e| {
            e[0] == b'%' && e[1..].iter().all(u8::is_ascii_hexdigit) && hex_value(e[1]) * 16 + hex_value(e[2]) == b
        });
        if escaped {
            at += 3;
        } else if text.get(at) == Some(&b) && is_plain(b) {
            at += 1;
        } else {
            return false;
        }
    }
    let rest = &text[at..];
    rest.starts_with(MARKER_SUFFIX.as_bytes()) || rest.starts_with(b" mac=")
}

/// The bytes `marker` writes as themselves.
fn is_plain(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b":_./@+=,".contains(&b)
}

/// The value of one ASCII hex digit.
fn hex_value(d: u8) -> u8 {
    match d {
        b'0'..=b'9' => d - b'0',
        b'a'..=b'f' => d - b'a' + 10,
        _ => d - b'A' + 10,
    }
}
