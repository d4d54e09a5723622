//! Property tests of canonical JSON, keys and markers.
//!
//! - The key and fingerprint of an input do not depend on the order its object members were
//!   written in (the JSON text is generated with members shuffled, then parsed).
//! - Canonical output parses back to an equal value, and canonicalizing it again changes
//!   nothing.
//! - Markers round-trip every key and never contain `--`, `>` or `<` inside the comment.

use effect_tool_core::__cli::sha256_hex;
use effect_tool_core::call::key::{call_key, fingerprint};
use effect_tool_core::value::canonical;
use effect_tool_core::value::marker::{
    MARKER_ID_LEN, MARKER_PREFIX, MARKER_SUFFIX, MarkerSecret, contains_marker, legacy_marker, marker, marker_id,
    parse_marker, parse_markers, plain_marker_id, signed_marker,
};
use effect_tool_core::{KeyRule, RunContext, Window};
use proptest::prelude::*;
use proptest::sample::Index;
use serde_json::{Map, Number, Value};

/// Any string: ASCII-heavy with controls, quotes and backslashes, plus arbitrary Unicode
/// (including characters outside the BMP, which sort differently in UTF-16 and UTF-8).
fn any_text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-zA-Z0-9_]{0,6}",
        "[\\x00-\\x20\"\\\\/\u{7f}\u{e000}\u{ff61}\u{10000}\u{1f602}]{0,4}",
        any::<String>(),
    ]
}

fn any_number() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        // Every finite double, from subnormals to the extremes.
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| Value::Number(Number::from_f64(f).unwrap())),
        (-1000i32..1000, -30i32..30).prop_map(|(m, e)| Value::from(f64::from(m) * 10f64.powi(e))),
    ]
}

fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any_number(),
        any_text().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(any_text(), inner, 0..6).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// An object at the top (tool arguments are objects).
fn any_args() -> impl Strategy<Value = Value> {
    prop::collection::btree_map(any_text(), any_json(), 0..8).prop_map(|m| Value::Object(m.into_iter().collect()))
}

/// Write `v` as JSON text with every object's members in an order picked by `order`, and
/// with insignificant whitespace, so the parser sees a genuinely different text.
fn write_shuffled(v: &Value, order: &mut impl FnMut(usize) -> usize, out: &mut String) {
    match v {
        Value::Object(map) => {
            let mut members: Vec<(&String, &Value)> = map.iter().collect();
            // Fisher-Yates with the supplied choices.
            for i in (1..members.len()).rev() {
                let j = order(i + 1);
                members.swap(i, j);
            }
            out.push_str("{ ");
            for (i, (k, v)) in members.into_iter().enumerate() {
                if i > 0 {
                    out.push_str(" ,\n");
                }
                out.push_str(&serde_json::to_string(k).unwrap());
                out.push_str(" : ");
                write_shuffled(v, order, out);
            }
            out.push_str(" }");
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_shuffled(item, order, out);
            }
            out.push(']');
        }
        other => out.push_str(&serde_json::to_string(other).unwrap()),
    }
}

/// JSON equality where numbers compare as the IEEE doubles RFC 8785 reads them as (`1.0`
/// prints as `1` and parses back as an integer; both are the same JSON number).
fn same_json(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => as_double(x) == as_double(y),
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same_json(a, b)),
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same_json(v, w)))
        }
        _ => a == b,
    }
}

fn as_double(n: &Number) -> f64 {
    if let Some(i) = n.as_i64() {
        i as f64
    } else if let Some(u) = n.as_u64() {
        u as f64
    } else {
        n.as_f64().unwrap()
    }
}

/// `v` with every number replaced by the double it stands for, as RFC 8785 reads it.
fn through_doubles(v: &Value) -> Value {
    match v {
        Value::Number(n) => Value::Number(Number::from_f64(as_double(n)).unwrap()),
        Value::Array(items) => Value::Array(items.iter().map(through_doubles).collect()),
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, v)| (k.clone(), through_doubles(v)))
                .collect::<Map<_, _>>(),
        ),
        other => other.clone(),
    }
}

/// JSON as written, objects keeping their members in text order (to check the order the
/// canonical form writes them in, whatever map type `serde_json` is built with).
#[derive(Debug)]
enum Written {
    Leaf,
    Array(Vec<Written>),
    Object(Vec<(String, Written)>),
}

impl<'de> serde::Deserialize<'de> for Written {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Written;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("JSON")
            }
            fn visit_bool<E>(self, _: bool) -> Result<Written, E> {
                Ok(Written::Leaf)
            }
            fn visit_i64<E>(self, _: i64) -> Result<Written, E> {
                Ok(Written::Leaf)
            }
            fn visit_u64<E>(self, _: u64) -> Result<Written, E> {
                Ok(Written::Leaf)
            }
            fn visit_f64<E>(self, _: f64) -> Result<Written, E> {
                Ok(Written::Leaf)
            }
            fn visit_str<E>(self, _: &str) -> Result<Written, E> {
                Ok(Written::Leaf)
            }
            fn visit_unit<E>(self) -> Result<Written, E> {
                Ok(Written::Leaf)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Written, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element()? {
                    items.push(item);
                }
                Ok(Written::Array(items))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Written, A::Error> {
                let mut members = Vec::new();
                while let Some(entry) = map.next_entry()? {
                    members.push(entry);
                }
                Ok(Written::Object(members))
            }
        }
        d.deserialize_any(V)
    }
}

/// Every object's member names strictly increase by UTF-16 code units.
fn members_sorted_by_utf16(w: &Written) -> bool {
    match w {
        Written::Leaf => true,
        Written::Array(items) => items.iter().all(members_sorted_by_utf16),
        Written::Object(members) => {
            members
                .windows(2)
                .all(|p| p[0].0.encode_utf16().cmp(p[1].0.encode_utf16()).is_lt())
                && members.iter().all(|(_, v)| members_sorted_by_utf16(v))
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Writing the same arguments with members in another order (and other whitespace) gives
    /// the same canonical text, fingerprint and key in every window.
    #[test]
    fn key_is_invariant_under_member_order(args in any_args(), choices in prop::collection::vec(any::<Index>(), 1..64)) {
        let mut n = 0;
        let mut order = |len: usize| { let c = choices[n % choices.len()].index(len); n += 1; c };
        let mut shuffled = String::new();
        write_shuffled(&args, &mut order, &mut shuffled);

        let original_text = serde_json::to_string(&args).unwrap();
        let a = canonical::parse_strict(&original_text).unwrap();
        let b = canonical::parse_strict(&shuffled).unwrap();
        prop_assert_eq!(canonical::to_string(&a), canonical::to_string(&b));
        prop_assert_eq!(canonical::canonicalize_str(&shuffled).unwrap(), canonical::to_string(&args));

        let run = RunContext::new("run-1").with_thread("thread-1");
        for window in [Window::Run, Window::Thread, Window::CrossRun] {
            let ka = call_key(KeyRule::Default, window, &run, "send_email", &a, None);
            let kb = call_key(KeyRule::Default, window, &run, "send_email", &b, None);
            prop_assert_eq!(&ka, &kb);
            let suffix = format!("send_email:{}", ka.fingerprint);
            prop_assert!(ka.key.ends_with(&suffix), "{} does not end with {}", ka.key, suffix);
        }
        prop_assert_eq!(fingerprint(&a), sha256_hex(canonical::to_string(&b).as_bytes()));
    }

    /// Canonical output is valid JSON that parses back to the same value (numbers compared as
    /// the doubles they denote).
    #[test]
    fn canonical_output_parses_back_to_an_equal_value(v in any_json()) {
        let text = canonical::to_string(&v);
        let back: Value = serde_json::from_str(&text).unwrap();
        prop_assert!(same_json(&back, &v), "{} parsed back as {}", text, back);
        // Exactly, once numbers are read as doubles.
        prop_assert_eq!(through_doubles(&back), through_doubles(&v));
    }

    /// Canonical output writes every object's members sorted by UTF-16 code units (RFC 8785
    /// §3.2.3), not by UTF-8 bytes or insertion order.
    #[test]
    fn canonical_members_are_sorted_by_utf16(v in any_json()) {
        let text = canonical::to_string(&v);
        let written: Written = serde_json::from_str(&text).unwrap();
        prop_assert!(members_sorted_by_utf16(&written), "{}", text);
    }

    /// Canonicalizing canonical output again changes nothing, byte for byte.
    #[test]
    fn canonicalization_is_idempotent(v in any_json()) {
        let once = canonical::to_string(&v);
        let twice = canonical::canonicalize_str(&once).unwrap();
        prop_assert_eq!(&once, &twice);
        // And the text has no insignificant whitespace outside strings.
        let reparsed: Value = serde_json::from_str(&once).unwrap();
        prop_assert_eq!(once.len(), canonical::to_string(&reparsed).len());
    }

    /// Every double formats as its shortest round-tripping ECMAScript form: parsing the
    /// canonical text gives the same double back.
    #[test]
    fn numbers_round_trip_through_their_canonical_text(f in any::<f64>().prop_filter("finite", |f| f.is_finite())) {
        let text = canonical::to_string(&Value::Number(Number::from_f64(f).unwrap()));
        let back: f64 = text.parse().unwrap();
        prop_assert_eq!(back, if f == 0.0 { 0.0 } else { f });
    }

    /// A marker carries the id of any key, shows nothing of it, and nothing inside it can end
    /// or open the comment.
    #[test]
    fn markers_carry_the_id_and_cannot_break_out(key in any_text(), before in any_text(), after in any_text()) {
        let secret = MarkerSecret::from_bytes([9; 32]);
        for (m, id) in [(marker(&key), plain_marker_id(&key)), (signed_marker(&key, &secret), marker_id(&key, &secret))] {
            prop_assert!(m.starts_with(MARKER_PREFIX) && m.ends_with(MARKER_SUFFIX));
            let inner = &m[MARKER_PREFIX.len()..m.len() - MARKER_SUFFIX.len()];
            prop_assert_eq!(inner, id.as_str());
            prop_assert!(inner.len() == MARKER_ID_LEN && inner.bytes().all(|b| b.is_ascii_hexdigit()), "{}", m);
            prop_assert_eq!(parse_marker(&m), Some(id.clone()));
            // Embedded in arbitrary text that itself holds no marker, it is found again.
            prop_assume!(!before.contains("<!--") && !after.contains("<!--"));
            let text = format!("{before}{m}{after}");
            prop_assert_eq!(parse_markers(&text), vec![id]);
        }
        // A legacy marker still round-trips its key.
        prop_assert_eq!(parse_marker(&legacy_marker(&key, Some(&secret))), Some(key.clone()));
        let text = format!("{before}{}{after}", legacy_marker(&key, Some(&secret)));
        prop_assert!(contains_marker(&text, &key, &secret));
    }

    /// Several markers in one text come back in order, legacy ones among them.
    #[test]
    fn several_markers_round_trip(keys in prop::collection::vec(any_text(), 0..5)) {
        let text: String = keys
            .iter()
            .enumerate()
            .map(|(i, k)| if i % 2 == 0 { format!("text {}\n", marker(k)) } else { format!("text {}\n", legacy_marker(k, None)) })
            .collect();
        let wanted: Vec<String> = keys
            .iter()
            .enumerate()
            .map(|(i, k)| if i % 2 == 0 { plain_marker_id(k) } else { k.clone() })
            .collect();
        prop_assert_eq!(parse_markers(&text), wanted);
    }
}
