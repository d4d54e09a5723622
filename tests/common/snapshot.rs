//! JSON snapshots under `tests/snapshots/`, compared as JSON values (key order does not matter)
//! and written sorted, so that a diff shows a reviewer what changed; `UPDATE_SNAPSHOTS=1`
//! re-blesses them.

use std::path::PathBuf;

use serde_json::Value;

/// Compare `value` with the stored `tests/snapshots/<folder>/<name>.json`, or write it there
/// when `UPDATE_SNAPSHOTS` is set. A failure names the snapshot as `what` and shows the new text.
pub fn assert_json(folder: &str, name: &str, what: &str, value: &Value) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/snapshots")
        .join(folder)
        .join(format!("{name}.json"));
    let pretty = serde_json::to_string_pretty(&sorted(value)).unwrap() + "\n";
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, pretty).unwrap();
        return;
    }
    let stored = std::fs::read_to_string(&path)
        .unwrap_or_else(|_| panic!("no snapshot {}: run with UPDATE_SNAPSHOTS=1", path.display()));
    let stored: Value = serde_json::from_str(&stored).unwrap();
    assert_eq!(
        &stored, value,
        "{what} changed; if intended, re-bless with UPDATE_SNAPSHOTS=1 and review the diff.\nnow:\n{pretty}"
    );
}

/// `value` with every object's keys in sorted order, so a snapshot's text does not depend on
/// serde_json's map order (`preserve_order`, turned on by some dependency).
fn sorted(value: &Value) -> Value {
    match value {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            Value::Object(keys.into_iter().map(|k| (k.clone(), sorted(&m[k]))).collect())
        }
        Value::Array(a) => Value::Array(a.iter().map(sorted).collect()),
        other => other.clone(),
    }
}
