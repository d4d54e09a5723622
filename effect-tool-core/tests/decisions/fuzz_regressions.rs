//! What the fuzz targets (`fuzz/`, see TESTING.md) found, kept as tests. Each input is also in
//! the target's corpus (`fuzz/corpus/<target>/regression-*`).

use effect_tool_core::value::marker::{MarkerSecret, contains_marker, legacy_marker, parse_markers};

/// Target `marker`: an unclosed prefix before a marker (quoted text, say) hid the marker, so
/// `recover` would not find the agent's own effect and could apply it again.
#[test]
fn an_unclosed_prefix_before_a_marker_does_not_hide_it() {
    let secret = MarkerSecret::from_bytes([7; 32]);
    let key = "a -->b";
    let unclosed = format!("{}67", "<!-- effect-tool:effect=\u{1a}".repeat(3));
    let plain = format!("{unclosed}{}", legacy_marker(key, None));
    assert_eq!(parse_markers(&plain), vec![key.to_owned()]);
    let signed = format!(
        "> <!-- effect-tool:effect=quoted\n{}",
        legacy_marker(key, Some(&secret))
    );
    assert_eq!(parse_markers(&signed), vec![key.to_owned()]);
    assert!(contains_marker(&signed, key, &secret));
    // A malformed marker before a good one is still skipped, the good one still found.
    let both = format!("<!-- effect-tool:effect=a b --> {}", legacy_marker("ok", None));
    assert_eq!(parse_markers(&both), vec!["ok".to_owned()]);
}

/// Target `marker`: `%+D` decoded as the byte 0x0D (`from_str_radix` takes a sign), a spelling
/// of a key that `marker` never writes.
#[test]
fn an_escape_is_two_hex_digits_and_nothing_else() {
    for escape in ["%+D", "%-1", "%+0", "% 1"] {
        let text = format!("<!-- effect-tool:effect=f3d3{escape}7 -->");
        assert_eq!(parse_markers(&text), Vec::<String>::new(), "{escape:?}");
    }
    assert_eq!(
        parse_markers("<!-- effect-tool:effect=f3d3%0D7 -->"),
        vec!["f3d3\r7".to_owned()]
    );
}

/// Target `stored_row`: a column holding a value of the wrong type (a blob where the input
/// JSON's text belongs) made `get` and `apply` fail as a backend error, which the engine may
/// retry, where `list` reported the row as corrupt. Now all three say corrupt, naming the key.
#[cfg(feature = "sqlite")]
#[tokio::test]
async fn a_column_of_the_wrong_type_is_a_corrupt_record() {
    use effect_tool_core::decide::record::{Op, Verdict};
    use effect_tool_core::store::sqlite::SqliteStore;
    use effect_tool_core::{Filter, Store, StoreError};

    let dir = std::env::temp_dir().join(format!("effect-tool-fuzz-regression-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("journal.db");
    let store = SqliteStore::open(&path).unwrap();
    let raw = rusqlite::Connection::open(&path).unwrap();
    let key = "run-1:issue_refund:ab12";
    let cases: [(&str, rusqlite::types::Value); 4] = [
        ("input", rusqlite::types::Value::Blob(b"{}".to_vec())),
        ("tool", rusqlite::types::Value::Blob(vec![0xff])),
        ("version", rusqlite::types::Value::Text("one".to_owned())),
        ("expires_at", rusqlite::types::Value::Real(1.5)),
    ];
    for (column, value) in cases {
        raw.execute("DELETE FROM effect_records", []).unwrap();
        raw.execute(
            "INSERT INTO effect_records (key, version, tool, class, run_id, fingerprint, input, state, attempt,
                 created_at, updated_at, output)
             VALUES (?1, 1, 'issue_refund', 'idempotent', 'run-1', 'fp', '{}', 'completed', 1, 1, 2, '{}')",
            [key],
        )
        .unwrap();
        raw.execute(&format!("UPDATE effect_records SET {column} = ?1"), [&value])
            .unwrap();
        let is_corrupt = |e: &StoreError| matches!(e, StoreError::Corrupt { key: k, .. } if k == key);
        let got = store.get(key).await.unwrap_err();
        assert!(is_corrupt(&got), "{column}: get answered {got:?}");
        let listing = store.list_report(&Filter::all()).await.unwrap();
        assert_eq!(listing.skipped_keys(), vec![key], "{column}");
        let resolved = store
            .apply(
                key,
                Op::Resolve {
                    by: "op".to_owned(),
                    verdict: Verdict::NotApplied,
                },
            )
            .await
            .unwrap_err();
        assert!(is_corrupt(&resolved), "{column}: apply answered {resolved:?}");
    }
    // The replay path reads fewer columns: those it reads are held to the same rule.
    raw.execute(
        "UPDATE effect_records SET version = 1, expires_at = 'soon', input = '{}', tool = 't'",
        [],
    )
    .unwrap();
    let recorded = store.lookup_recorded(key).await.unwrap_err();
    assert!(matches!(&recorded, StoreError::Corrupt { .. }), "{recorded:?}");
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}
