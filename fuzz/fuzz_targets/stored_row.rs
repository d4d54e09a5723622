//! Decoding of stored rows (`store/row.rs`, `RecordState`/`EffectClass` names, the JSON
//! columns, `record.rs`'s types), through a real SQLite journal: each input is one row of
//! `effect_records`, written with a raw connection the way a damaged or foreign journal could
//! hold it, then read through the store.
//!
//! Input: one column a line, in the table's order (`key`, `version`, `tool`, ...), each `t:`
//! text, `i:` integer, `r:` real, `b:` hex blob, `n` or empty for NULL (any other line is
//! text). For every row the table takes:
//! - `get` never panics and never answers a backend failure or "no record": it reads the
//!   record or reports it corrupt or of another version, naming its key;
//! - a record read has the row's key, state and version, and survives a round trip through
//!   its own JSON form;
//! - `lookup_recorded` (the replay path, fewer columns) agrees with `get` on every record
//!   `get` reads, and refuses a version `get` refuses;
//! - `list_report` returns exactly that record, or skips the row under its key.

#![no_main]

use std::path::PathBuf;
use std::sync::{LazyLock, Mutex};

use effect_tool::decide::record::RECORD_VERSION;
use effect_tool::store::sqlite::{SqliteOptions, SqliteStore, Synchronous};
use effect_tool::{EffectRecord, Filter, Store, StoreError};
use libfuzzer_sys::fuzz_target;
use rusqlite::types::{Value as Sql, ValueRef};

/// The table's columns, in the order of the input's lines.
const COLUMNS: [&str; 21] = [
    "key",
    "version",
    "tool",
    "class",
    "run_id",
    "thread_id",
    "call_id",
    "fingerprint",
    "input",
    "state",
    "attempt",
    "lease_until",
    "output",
    "reason",
    "approval_role",
    "decided_by",
    "created_at",
    "updated_at",
    "expires_at",
    "call_ids",
    "holder",
];

/// One journal for the whole run: the store under test and a raw connection to its file.
struct Harness {
    runtime: tokio::runtime::Runtime,
    store: SqliteStore,
    raw: Mutex<rusqlite::Connection>,
}

static HARNESS: LazyLock<Harness> = LazyLock::new(|| {
    let dir = if std::path::Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    let path = dir.join(format!("effect-tool-fuzz-stored-row-{}.db", std::process::id()));
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    let options = SqliteOptions {
        synchronous: Synchronous::Normal,
        read_connections: 1,
        ..SqliteOptions::default()
    };
    let store = SqliteStore::open_with(&path, options).expect("open the journal");
    let raw = rusqlite::Connection::open(&path).expect("open the journal's file");
    raw.execute_batch("PRAGMA synchronous = OFF;").expect("pragma");
    Harness {
        runtime: tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a tokio runtime"),
        store,
        raw: Mutex::new(raw),
    }
});

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let h = &*HARNESS;
    let Some(key) = write_row(h, &cells(text)) else {
        return;
    };
    h.runtime.block_on(check_row(&h.store, key));
});

/// The 21 cells of the row `text` describes.
fn cells(text: &str) -> Vec<Sql> {
    let mut lines = text.split('\n');
    COLUMNS.iter().map(|_| lines.next().map_or(Sql::Null, cell)).collect()
}

/// One cell from its line.
fn cell(line: &str) -> Sql {
    let (tag, rest) = line.split_at_checked(2).unwrap_or(("", line));
    let parsed = match tag {
        "t:" => Some(Sql::Text(rest.to_owned())),
        "i:" => rest.parse().ok().map(Sql::Integer),
        "r:" => rest.parse().ok().map(Sql::Real),
        "b:" => unhex(rest).map(Sql::Blob),
        _ if line.is_empty() || line == "n" => Some(Sql::Null),
        _ => None,
    };
    parsed.unwrap_or_else(|| Sql::Text(line.to_owned()))
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Replace the table's content with this one row. `None` when the table refuses it (a NULL
/// in a NOT NULL column); `Some(None)` when its key, as stored, is not UTF-8 text.
fn write_row(h: &Harness, cells: &[Sql]) -> Option<Option<String>> {
    let raw = h.raw.lock().unwrap_or_else(|e| e.into_inner());
    raw.execute("DELETE FROM effect_records", []).expect("clear the table");
    let marks: Vec<String> = (1..=COLUMNS.len()).map(|i| format!("?{i}")).collect();
    let sql = format!(
        "INSERT INTO effect_records ({}) VALUES ({})",
        COLUMNS.join(", "),
        marks.join(", ")
    );
    raw.execute(&sql, rusqlite::params_from_iter(cells)).ok()?;
    let key = raw
        .query_row("SELECT key FROM effect_records", [], |r| {
            Ok(match r.get_ref(0)? {
                ValueRef::Text(bytes) => std::str::from_utf8(bytes).ok().map(str::to_owned),
                _ => None,
            })
        })
        .expect("read the key back");
    Some(key)
}

/// The properties of the one row in the journal, under `key` if it is text.
async fn check_row(store: &SqliteStore, key: Option<String>) {
    let listing = store
        .list_report(&Filter::all())
        .await
        .expect("a list never fails on a bad row");
    assert_eq!(listing.records.len() + listing.skipped.len(), 1, "{listing:?}");
    let Some(key) = key else {
        return;
    };
    let got = store.get(&key).await;
    match &got {
        Ok(Some(rec)) => {
            check_record(&key, rec);
            assert_eq!(
                listing.records,
                vec![rec.clone()],
                "list and get read the row differently"
            );
        }
        Ok(None) => panic!("the row under {key:?} was not found"),
        Err(e) => {
            check_refusal(&key, e);
            assert_eq!(
                listing.skipped.first().map(|s| s.key.as_str()),
                Some(key.as_str()),
                "{listing:?}"
            );
        }
    }
    check_lookup(store, &key, &got).await;
}

/// A record read from the row under `key`.
fn check_record(key: &str, rec: &EffectRecord) {
    assert_eq!(rec.key, key);
    assert_eq!(rec.version, RECORD_VERSION);
    let json = serde_json::to_string(rec).expect("a record serializes");
    let back: EffectRecord = serde_json::from_str(&json).unwrap_or_else(|e| panic!("{json} does not decode: {e}"));
    assert_eq!(&back, rec, "the record's JSON form does not round-trip");
}

/// An error reading the row under `key`: corrupt or another version, naming the key.
fn check_refusal(key: &str, e: &StoreError) {
    assert!(
        matches!(e, StoreError::Corrupt { .. } | StoreError::UnsupportedVersion { .. }),
        "reading the row under {key:?} failed as {e:?}, not as a corrupt record"
    );
    assert_eq!(e.key(), Some(key), "{e}");
}

/// The replay path agrees with `get`.
async fn check_lookup(store: &SqliteStore, key: &str, got: &Result<Option<EffectRecord>, StoreError>) {
    let recorded = store.lookup_recorded(key).await;
    match (got, &recorded) {
        (Ok(Some(rec)), Ok(Some(r))) => {
            assert_eq!(r.state(), rec.state);
            assert_eq!(r.fingerprint(), rec.fingerprint);
        }
        (Ok(Some(_)), other) => panic!("get read the row under {key:?}, lookup_recorded answered {other:?}"),
        (Err(StoreError::UnsupportedVersion { .. }), other) => assert!(
            matches!(other, Err(StoreError::UnsupportedVersion { .. })),
            "get refused the version of {key:?}, lookup_recorded answered {other:?}"
        ),
        (_, Err(e)) => check_refusal(key, e),
        _ => {}
    }
}
