//! The SQLite journal's files hold every call's input and output: they are created readable
//! by their owner only, whatever the process's umask lets others read.
//!
//! Run: `cargo test --test store journal_files::`

#![cfg(unix)]

use crate::common;

use std::os::unix::fs::PermissionsExt;

use effect_tool_core::store::sqlite::SqliteStore;
use effect_tool_core::testing::conformance::ScratchDir;
use effect_tool_core::{Store, StoreExt};

use common::intent;

fn mode(path: &std::path::Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[tokio::test]
async fn a_new_journal_and_its_wal_files_are_private() {
    let dir = ScratchDir::new("journal-mode");
    let path = dir.path().join("j.db");
    let store = SqliteStore::open(&path).unwrap();
    store.claim("k", intent("r"), 30_000, false).await.unwrap();
    let wal = dir.path().join("j.db-wal");
    let shm = dir.path().join("j.db-shm");
    assert!(
        wal.exists() && shm.exists(),
        "a write leaves the WAL files beside the journal"
    );
    for file in [&path, &wal, &shm] {
        assert_eq!(mode(file), 0o600, "{} is {:o}", file.display(), mode(file));
    }
    // The record is there: the file made beforehand is a journal like any other.
    assert!(store.get("k").await.unwrap().is_some());
}

#[tokio::test]
async fn an_existing_journal_keeps_the_mode_its_operator_gave_it() {
    let dir = ScratchDir::new("journal-mode-kept");
    let path = dir.path().join("j.db");
    drop(SqliteStore::open(&path).unwrap());
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
    let store = SqliteStore::open(&path).unwrap();
    store.claim("k", intent("r"), 30_000, false).await.unwrap();
    assert_eq!(mode(&path), 0o640);
}
