//! RFC 8785 conformance: the reference implementations' input/output vectors and 100,000
//! ECMAScript number-formatting lines (`testdata/jcs`, see its README).

use std::path::PathBuf;

use effect_tool_core::value::canonical;
use serde_json::Value;

fn jcs_dir() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/jcs"))
}

/// Every `input/<name>.json` canonicalizes to exactly the bytes of `output/<name>.json`.
#[test]
fn reference_vectors_match_byte_for_byte() {
    let mut names: Vec<PathBuf> = std::fs::read_dir(jcs_dir().join("input"))
        .expect("testdata/jcs/input is readable")
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    names.sort();
    // The six published vectors; a missing file must fail the test, not shrink it.
    let stems: Vec<String> = names
        .iter()
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(stems, ["arrays", "french", "structures", "unicode", "values", "weird"]);

    let mut failures = Vec::new();
    for input in &names {
        let text = std::fs::read_to_string(input).expect("input is UTF-8");
        let expected = std::fs::read(jcs_dir().join("output").join(input.file_name().unwrap())).expect("output exists");
        let got = canonical::canonicalize_str(&text).expect("input is valid JSON");
        if got.as_bytes() != expected.as_slice() {
            failures.push(format!(
                "{}:\n  expected {}\n  got      {}",
                input.display(),
                String::from_utf8_lossy(&expected),
                got
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Canonicalizing the expected output again changes nothing (the output is a fixed point).
#[test]
fn reference_outputs_are_fixed_points() {
    for entry in std::fs::read_dir(jcs_dir().join("output")).unwrap() {
        let path = entry.unwrap().path();
        let expected = std::fs::read_to_string(&path).unwrap();
        assert_eq!(
            canonical::canonicalize_str(&expected).unwrap(),
            expected,
            "{}",
            path.display()
        );
    }
}

/// `hex-ieee,expected` lines: the double with those bits prints as `expected`, both when
/// formatted directly and when parsed from its own JSON text (so the parser rounds right too).
#[test]
fn es6_number_formatting_100k() {
    let text = std::fs::read_to_string(jcs_dir().join("es6numbers-100k.txt")).expect("es6numbers-100k.txt");
    let mut lines = 0usize;
    let mut failures = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.is_empty() {
            continue;
        }
        lines += 1;
        let (hex, expected) = line
            .split_once(',')
            .unwrap_or_else(|| panic!("line {}: no comma: {line}", n + 1));
        let bits = u64::from_str_radix(hex, 16).unwrap_or_else(|e| panic!("line {}: bad hex {hex}: {e}", n + 1));
        let f = f64::from_bits(bits);
        assert!(f.is_finite(), "line {}: the vectors hold finite numbers only", n + 1);

        let direct = canonical::to_string(&Value::from(f));
        if direct != expected {
            failures.push(format!(
                "line {}: {hex}: expected {expected}, formatted {direct}",
                n + 1
            ));
            continue;
        }
        // Parsing the expected text back must give the same double and the same text.
        let reparsed = canonical::canonicalize_str(expected).expect("expected text is a JSON number");
        if reparsed != expected {
            failures.push(format!(
                "line {}: {hex}: `{expected}` re-canonicalized to {reparsed}",
                n + 1
            ));
        }
        if failures.len() > 20 {
            break;
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert_eq!(lines, 100_000, "the file holds 100,000 vectors");
}

/// Numbers JSON cannot carry as an IEEE double are rejected rather than silently changed.
#[test]
fn out_of_range_numbers_are_rejected() {
    assert!(canonical::canonicalize_str("1e400").is_err());
    assert!(canonical::canonicalize_str("[-1e999]").is_err());
}

/// Integers beyond 2^53 go through the double, as RFC 8785 requires (interop with JavaScript).
#[test]
fn large_integers_go_through_the_double() {
    assert_eq!(
        canonical::canonicalize_str("9007199254740993").unwrap(),
        "9007199254740992"
    );
    assert_eq!(
        canonical::canonicalize_str("-9223372036854775808").unwrap(),
        "-9223372036854776000"
    );
    assert_eq!(
        canonical::canonicalize_str("18446744073709551615").unwrap(),
        "18446744073709552000"
    );
    assert_eq!(
        canonical::canonicalize_str("100000000000000000000000").unwrap(),
        "1e+23"
    );
}

/// RFC 8785 §3.2.2.2: only `"`, `\` and the C0 controls are escaped; `\b \t \n \f \r` use the
/// short forms, the other controls `\u00xx` in lowercase hex; everything else (DEL, U+2028,
/// non-BMP characters, `/`) is written as is.
#[test]
fn string_escaping_is_minimal() {
    let all_controls: String = (0u8..0x20).map(char::from).collect();
    let got = canonical::to_string(&Value::String(all_controls));
    assert_eq!(
        got,
        r#""\u0000\u0001\u0002\u0003\u0004\u0005\u0006\u0007\b\t\n\u000b\f\r\u000e\u000f\u0010\u0011\u0012\u0013\u0014\u0015\u0016\u0017\u0018\u0019\u001a\u001b\u001c\u001d\u001e\u001f""#
    );
    assert_eq!(
        canonical::to_string(&Value::String("/\u{7f}\u{2028}😀é\"\\".into())),
        "\"/\u{7f}\u{2028}😀é\\\"\\\\\""
    );
}

/// Property names sort by UTF-16 code units, recursively, and arrays keep their order.
#[test]
fn members_sort_by_utf16_code_units() {
    // UTF-16: "\u{ff61}" = FF61, "😂" = D83D DE02, "\u{e000}" = E000. UTF-8 byte order would
    // put 😂 (F0 ..) last.
    let v: Value = serde_json::from_str(r#"{"\uff61":1,"😂":2,"\ue000":3,"a":{"b":[3,1],"a":0}}"#).unwrap();
    assert_eq!(
        canonical::to_string(&v),
        "{\"a\":{\"a\":0,\"b\":[3,1]},\"😂\":2,\"\u{e000}\":3,\"\u{ff61}\":1}"
    );
}
