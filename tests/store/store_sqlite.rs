//! The journal conformance suite on SQLite, including several processes racing the same keys
//! on one file.
//!
//! Run: `cargo test --test store store_sqlite::`

use crate::common;

use effect_tool_core::testing::conformance::SqliteHarness;

effect_tool_core::conformance_tests!(sqlite, SqliteHarness, durable);

/// SQLite specifics: another process's write lock is waited out within the bound and reported
/// clearly past it; the audit trail refuses updates and deletes.
mod sqlite_specifics {
    use std::time::Duration;

    use effect_tool_core::decide::record::OpOutcome;
    use effect_tool_core::store::sqlite::{SqliteOptions, SqliteStore};
    use effect_tool_core::testing::conformance::{ScratchDir, SqliteHarness, run};
    use effect_tool_core::{Store, StoreExt};

    use crate::common::intent;

    /// Hold the write lock of `path` from another connection for `hold`.
    fn hold_write_lock(path: std::path::PathBuf, hold: Duration) -> std::sync::mpsc::Receiver<()> {
        let (locked, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let conn = rusqlite::Connection::open(path).unwrap();
            conn.execute_batch("BEGIN IMMEDIATE").unwrap();
            locked.send(()).unwrap();
            std::thread::sleep(hold);
            conn.execute_batch("COMMIT").unwrap();
        });
        rx
    }

    #[test]
    fn a_busy_journal_is_waited_on_within_the_bound() {
        run::<SqliteHarness, _, _>("a_busy_journal_is_waited_on_within_the_bound", || async {
            let dir = ScratchDir::new("busy-wait");
            let path = dir.path().join("j.db");
            let store = SqliteStore::open(&path).unwrap();
            hold_write_lock(path, Duration::from_millis(300)).recv().unwrap();
            let outcome = store.claim("k", intent("r"), 30_000, false).await.unwrap();
            assert!(matches!(outcome, OpOutcome::Claimed { attempt: 1, .. }), "{outcome:?}");
        });
    }

    /// A caller applies its write on its own thread, but one that finds the journal locked by
    /// another process waits for it off the async runtime: here, on a single-threaded runtime,
    /// the task that lets the lock go must keep running while the claim waits. Were the wait
    /// on the runtime's thread, the lock would never be let go and the claim would fail.
    #[test]
    fn a_locked_journal_is_waited_for_off_the_async_runtime() {
        let dir = ScratchDir::new("busy-runtime");
        let path = dir.path().join("j.db");
        let options = SqliteOptions {
            busy_timeout: Duration::from_secs(30),
            ..SqliteOptions::default()
        };
        let store = SqliteStore::open_with(&path, options).unwrap();
        let (release, released) = std::sync::mpsc::channel::<()>();
        let (locked, is_locked) = std::sync::mpsc::channel();
        let holder = std::thread::spawn(move || {
            let conn = rusqlite::Connection::open(path).unwrap();
            conn.execute_batch("BEGIN IMMEDIATE").unwrap();
            locked.send(()).unwrap();
            released.recv().unwrap();
            conn.execute_batch("COMMIT").unwrap();
        });
        is_locked.recv().unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            // Lets the lock go once it has run a few times, which it can only do while the
            // claim below waits without holding the runtime's one thread.
            let releaser = tokio::spawn(async move {
                for _ in 0..5 {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                release.send(()).unwrap();
            });
            let outcome = store.claim("k", intent("r"), 30_000, false).await.unwrap();
            assert!(matches!(outcome, OpOutcome::Claimed { attempt: 1, .. }), "{outcome:?}");
            releaser.await.unwrap();
        });
        holder.join().unwrap();
    }

    /// Callers that stop waiting (their future dropped after it queued its write) neither lose
    /// their write nor stall the journal: the leader applies what they queued, passes the
    /// connection on to callers still waiting, and later writes go through.
    #[test]
    fn writes_of_callers_that_stop_waiting_are_applied_and_the_journal_stays_writable() {
        use futures::FutureExt;
        let dir = ScratchDir::new("abandoned-waiters");
        let store = std::sync::Arc::new(SqliteStore::open(dir.path().join("j.db")).unwrap());
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            // Rounds of racing callers: a dropped waiter is met by chance, so race often.
            for round in 0..20 {
                let tasks: Vec<_> = (0..300)
                    .map(|i| {
                        let store = store.clone();
                        tokio::spawn(async move {
                            let key = format!("k{round}-{i}");
                            let claim = store.claim(&key, intent("r"), 30_000, false);
                            if i % 2 == 0 {
                                // Polled once, then dropped if it had to wait for the leader.
                                claim.now_or_never().map(|r| r.unwrap());
                            } else {
                                claim.await.unwrap();
                            }
                        })
                    })
                    .collect();
                for task in tasks {
                    task.await.unwrap();
                }
                let last = tokio::time::timeout(
                    Duration::from_secs(60),
                    store.claim(&format!("after-{round}"), intent("r"), 30_000, false),
                )
                .await
                .expect("the journal stays writable");
                assert!(matches!(last.unwrap(), OpOutcome::Claimed { attempt: 1, .. }));
                for i in 0..300 {
                    let rec = store.get(&format!("k{round}-{i}")).await.unwrap();
                    assert!(rec.is_some(), "the write of caller {i} of round {round} was applied");
                }
            }
        });
    }

    /// Commits in the write-ahead log `wal`, read from its frames (SQLite's documented file
    /// format): a frame whose "database size after commit" field is not zero ends a commit;
    /// frames left from before the last restart carry another salt and are skipped.
    fn commits_in_wal(wal: &std::path::Path) -> usize {
        let bytes = std::fs::read(wal).unwrap();
        let be32 = |at: usize| u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap());
        let page = be32(8) as usize;
        let salt = (be32(16), be32(20));
        let mut commits = 0;
        let mut at = 32;
        while at + 24 + page <= bytes.len() && (be32(at + 8), be32(at + 12)) == salt {
            if be32(at + 4) != 0 {
                commits += 1;
            }
            at += 24 + page;
        }
        commits
    }

    /// On a single-threaded runtime, concurrent writers still share commits under
    /// `synchronous = FULL`: the commit (its fsync) runs off the runtime's one thread, so
    /// the other callers queue behind it and the next transaction takes them all. Counted in
    /// the write-ahead log's own frames: far fewer commits than claims.
    #[test]
    fn concurrent_writes_share_commits_on_a_single_threaded_runtime() {
        let dir = ScratchDir::new("current-thread-group-commit");
        let path = dir.path().join("j.db");
        let store = std::sync::Arc::new(SqliteStore::open(&path).unwrap());
        let before = commits_in_wal(&path.with_extension("db-wal"));
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            // Fewer operations than a background checkpoint waits for: the log is not reset.
            let tasks: Vec<_> = (0..64)
                .map(|i| {
                    let store = store.clone();
                    tokio::spawn(async move {
                        let outcome = store.claim(&format!("k{i}"), intent("r"), 30_000, false).await.unwrap();
                        assert!(matches!(outcome, OpOutcome::Claimed { attempt: 1, .. }), "{outcome:?}");
                    })
                })
                .collect();
            for task in tasks {
                task.await.unwrap();
            }
        });
        let commits = commits_in_wal(&path.with_extension("db-wal")) - before;
        assert!(commits < 16, "64 claims took {commits} commits");
        for i in 0..64 {
            assert!(rt.block_on(store.get(&format!("k{i}"))).unwrap().is_some());
        }
    }

    #[test]
    fn a_journal_locked_past_the_bound_is_a_clear_error() {
        run::<SqliteHarness, _, _>("a_journal_locked_past_the_bound_is_a_clear_error", || async {
            let dir = ScratchDir::new("busy-bound");
            let path = dir.path().join("j.db");
            let options = SqliteOptions {
                busy_timeout: Duration::from_millis(100),
                ..SqliteOptions::default()
            };
            let store = SqliteStore::open_with(&path, options).unwrap();
            hold_write_lock(path, Duration::from_millis(1500)).recv().unwrap();
            let err = store
                .claim("k", intent("r"), 30_000, false)
                .await
                .unwrap_err()
                .to_string();
            assert!(err.contains("stayed locked") && err.contains("busy_timeout"), "{err}");
            assert_eq!(store.get("k").await.unwrap(), None, "nothing was written");
            tokio::time::sleep(Duration::from_millis(1600)).await;
            assert!(matches!(
                store.claim("k", intent("r"), 30_000, false).await.unwrap(),
                OpOutcome::Claimed { .. }
            ));
        });
    }

    #[test]
    fn the_audit_trail_is_append_only() {
        run::<SqliteHarness, _, _>("the_audit_trail_is_append_only", || async {
            let dir = ScratchDir::new("audit");
            let path = dir.path().join("j.db");
            let store = SqliteStore::open(&path).unwrap();
            let mut i = intent("r");
            i.approval = Some("ops".into());
            store.claim("k", i, 30_000, false).await.unwrap();
            store
                .approve("k", "ann", "ops", &store.get("k").await.unwrap().unwrap().fingerprint)
                .await
                .unwrap();
            let conn = rusqlite::Connection::open(&path).unwrap();
            for sql in ["DELETE FROM effect_audit", "UPDATE effect_audit SET actor = 'mallory'"] {
                let err = conn.execute(sql, []).unwrap_err().to_string();
                assert!(err.contains("append-only"), "{sql}: {err}");
            }
            let trail = store.audit(Some("k")).await.unwrap();
            assert_eq!(trail.len(), 1);
            assert_eq!(trail[0].actor, "ann");
        });
    }

    #[test]
    fn records_are_plain_columns_and_json() {
        run::<SqliteHarness, _, _>("records_are_plain_columns_and_json", || async {
            let dir = ScratchDir::new("columns");
            let path = dir.path().join("j.db");
            let store = SqliteStore::open(&path).unwrap();
            store.claim("k", intent("r"), 30_000, false).await.unwrap();
            store.complete("k", 1, serde_json::json!({"id": "re_1"})).await.unwrap();
            let conn = rusqlite::Connection::open(&path).unwrap();
            let (state, input, output, version): (String, String, String, i64) = conn
                .query_row(
                    "SELECT state, input, output, version FROM effect_records WHERE key = 'k'",
                    [],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
                )
                .unwrap();
            assert_eq!(
                (state.as_str(), input.as_str(), output.as_str(), version),
                ("completed", r#"{"n":1}"#, r#"{"id":"re_1"}"#, 1)
            );
            let schema: String = conn
                .query_row(
                    "SELECT value FROM effect_tool_meta WHERE name = 'schema_version'",
                    [],
                    |r| r.get(0),
                )
                .unwrap();
            let current = effect_tool_core::store::sqlite::SCHEMA_VERSION;
            assert_eq!(schema, current.to_string());
            let user_version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap();
            assert_eq!(user_version, i64::from(current));
            let mode: String = conn.query_row("PRAGMA journal_mode", [], |r| r.get(0)).unwrap();
            assert_eq!(mode, "wal");
        });
    }
}

/// No byte of the journal's files (database and write-ahead log) holds a secret argument.
#[test]
fn sqlite_secret_arguments_never_reach_the_files() {
    use effect_tool_core::testing::conformance::{ChargeArgs, ChargeCard, SECRET, ScratchDir, SqliteHarness, run};
    run::<SqliteHarness, _, _>("secret_arguments_never_reach_the_files", || async {
        let dir = ScratchDir::new("secret-files");
        let path = dir.path().join("j.db");
        let engine = effect_tool_core::Engine::new(effect_tool_core::store::sqlite::SqliteStore::open(&path).unwrap());
        let run = effect_tool_core::RunContext::new("r");
        for n in 0..20 {
            let args = ChargeArgs {
                order_id: format!("ord_{n}"),
                card_number: SECRET.to_owned(),
            };
            engine
                .call(&ChargeCard::default(), &run, Default::default(), args)
                .await
                .unwrap();
        }
        let holds = |bytes: &[u8], needle: &str| bytes.windows(needle.len()).any(|w| w == needle.as_bytes());
        let mut stored_input_found = false;
        for entry in std::fs::read_dir(dir.path()).unwrap() {
            let bytes = std::fs::read(entry.unwrap().path()).unwrap();
            assert!(!holds(&bytes, SECRET), "a journal file holds the secret");
            stored_input_found |= holds(&bytes, "ord_19");
        }
        // The search does find what is stored: the non-secret argument is there.
        assert!(stored_input_found, "the journal files hold the recorded inputs");
    });
}

/// One row the store cannot read (a newer record version, corrupt JSON, a column of the wrong
/// type) never fails a whole list: it is skipped and reported with its key; `abandon_run` and
/// the records around it keep working.
#[test]
fn sqlite_lists_skip_rows_they_cannot_read_and_report_them() {
    use effect_tool_core::testing::conformance::{Harness, SqliteHarness, run};
    use effect_tool_core::{Filter, Store, StoreExt};
    run::<SqliteHarness, _, _>("lists_skip_rows_they_cannot_read", || async {
        let h = SqliteHarness::fresh().await;
        let store = h.store();
        for k in ["good-1", "good-2"] {
            match store.claim(k, common::intent("r"), 30_000, false).await.unwrap() {
                effect_tool_core::decide::record::OpOutcome::Claimed { attempt, .. } => {
                    store.complete(k, attempt, serde_json::json!(k)).await.unwrap();
                }
                other => panic!("{other:?}"),
            }
        }
        assert!(h.plant_future_record("from-the-future").await);
        let path = h.locator().unwrap();
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.busy_timeout(std::time::Duration::from_secs(10)).unwrap();
        conn.execute_batch(
            "INSERT INTO effect_records (key, version, tool, class, run_id, fingerprint, input, state, attempt, created_at, updated_at)
               VALUES ('corrupt-json', 1, 't', 'idempotent', 'r', 'f', '{not json', 'completed', 1, 0, 0);
             INSERT INTO effect_records (key, version, tool, class, run_id, fingerprint, input, state, attempt, created_at, updated_at)
               VALUES ('wrong-type', 1, 't', 'idempotent', 'r', 'f', '{}', 'completed', 'one', 0, 0);",
        )
        .unwrap();

        let listing = store
            .list_report(&Filter::all())
            .await
            .expect("a list never fails whole");
        let mut good: Vec<&str> = listing.records.iter().map(|r| r.key.as_str()).collect();
        good.sort();
        assert_eq!(good, ["good-1", "good-2"]);
        let mut skipped = listing.skipped_keys();
        skipped.sort();
        assert_eq!(skipped, ["corrupt-json", "from-the-future", "wrong-type"]);
        let future = listing.skipped.iter().find(|s| s.key == "from-the-future").unwrap();
        assert!(future.reason.contains("version"), "{future:?}");
        assert_eq!(store.list(&Filter::all()).await.unwrap().len(), 2);
        let run_only = Filter {
            run_id: Some("r".to_owned()),
            ..Filter::all()
        };
        assert_eq!(store.list_report(&run_only).await.unwrap().skipped.len(), 3);
        // abandon_run lists the run: it still works.
        let engine = effect_tool_core::Engine::new(store.clone());
        let report = engine
            .abandon_run(&effect_tool_core::RunContext::new("r"), &[])
            .await
            .expect("abandon_run keeps working");
        assert!(report.compensated.is_empty());
    });
}

/// A pending record (a provider's callback awaited) is written at record version 2, so a build
/// from before callbacks refuses the row instead of reporting it corrupt, and its gc (which
/// collects version 1 only) leaves it past its ttl; settled, the row is version 1 again. A
/// pending row written at version 1 (by the builds that introduced callbacks) is still read.
#[test]
fn sqlite_pending_rows_are_written_at_record_version_2() {
    use effect_tool_core::decide::record::{Op, OpOutcome, RecordState};
    use effect_tool_core::testing::conformance::{Harness, SqliteHarness, run};
    use effect_tool_core::{Store, StoreExt};
    run::<SqliteHarness, _, _>("pending_rows_are_written_at_record_version_2", || async {
        let h = SqliteHarness::fresh().await;
        let store = h.store();
        let mut short = common::intent("r");
        short.ttl_ms = Some(1);
        assert!(matches!(
            store.claim("waits", short, 30_000, false).await.unwrap(),
            OpOutcome::Claimed { attempt: 1, .. }
        ));
        let digest = "ab".repeat(32);
        let pend = Op::Pend {
            attempt: 1,
            token_digest: digest.clone(),
            deadline: store.now() + 600_000,
        };
        assert!(matches!(store.apply("waits", pend).await.unwrap(), OpOutcome::Done(_)));
        let conn = rusqlite::Connection::open(h.locator().unwrap()).unwrap();
        conn.busy_timeout(std::time::Duration::from_secs(10)).unwrap();
        let version = |key: &str| -> i64 {
            conn.query_row("SELECT version FROM effect_records WHERE key = ?1", [key], |r| r.get(0))
                .unwrap()
        };
        assert_eq!(version("waits"), 2);
        // An older build's gc: version 1 only (its statement, with the states it kept).
        std::thread::sleep(std::time::Duration::from_millis(20));
        let gone = conn
            .execute(
                "DELETE FROM effect_records WHERE version = 1 AND expires_at IS NOT NULL AND expires_at <= ?1
                   AND state NOT IN ('claimed', 'in-doubt', 'awaiting-approval')",
                [store.now()],
            )
            .unwrap();
        assert_eq!(gone, 0, "an older build's gc leaves a pending record alone");
        assert_eq!(store.get("waits").await.unwrap().unwrap().state, RecordState::Pending);

        // Settled ("not applied": released), it is version 1 again.
        let settle = Op::Settle {
            attempt: 1,
            token_digest: digest,
            by: "bank".to_owned(),
            verdict: effect_tool_core::decide::record::Verdict::NotApplied,
        };
        store.apply("waits", settle).await.unwrap();
        assert_eq!(version("waits"), 1);

        // A pending row at version 1, as the builds that introduced callbacks wrote it.
        conn.execute(
            "INSERT INTO effect_records (key, version, tool, class, run_id, fingerprint, input, state, attempt,
               lease_until, output, created_at, updated_at)
             VALUES ('older', 1, 't', 'idempotent', 'r', 'f', '{}', 'pending', 1, ?1,
               '{\"$callback\":{\"token_digest\":\"cd\"}}', 0, 0)",
            [store.now() + 600_000],
        )
        .unwrap();
        let older = store.get("older").await.unwrap().expect("read");
        assert_eq!((older.state, older.version), (RecordState::Pending, 1));
    });
}

/// `gc` deletes in chunks, each its own write: a collection larger than one chunk drops every
/// expired record and keeps the unexpired ones and the claims, and a write made while it runs
/// goes between two chunks instead of waiting for the whole collection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_gc_collects_in_chunks_that_let_other_writes_in() {
    use effect_tool::decide::record::{Op, RECORD_VERSION};
    use effect_tool::store::sqlite::SqliteStore;
    use effect_tool::{Filter, Store};

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.db");
    let store = SqliteStore::open(&path).unwrap();
    {
        // 20,000 completed records expired at 1,000; 10 expiring at 10^12; 10 expired claims.
        let mut raw = rusqlite::Connection::open(&path).unwrap();
        let tx = raw.transaction().unwrap();
        let mut insert = tx
            .prepare(
                "INSERT INTO effect_records (key, version, tool, class, run_id, fingerprint, input, state, attempt,
                   created_at, updated_at, expires_at, lease_until)
                 VALUES (?1, ?2, 't', 'idempotent', 'r', 'f', '{}', ?3, 1, 0, 0, ?4, ?5)",
            )
            .unwrap();
        let rows = (0..20_000)
            .map(|i| (format!("old-{i}"), "completed", 1_000i64, None))
            .chain((0..10).map(|i| (format!("new-{i}"), "completed", 1_000_000_000_000, None)))
            .chain((0..10).map(|i| (format!("claim-{i}"), "claimed", 1_000, Some(1_000i64))));
        for (key, state, expires, lease) in rows {
            insert
                .execute(rusqlite::params![key, RECORD_VERSION, state, expires, lease])
                .unwrap();
        }
        drop(insert);
        tx.commit().unwrap();
    }
    let collecting = {
        let store = store.clone();
        tokio::spawn(async move { store.gc(2_000).await })
    };
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    // A write while gc runs: answered between two chunks.
    let intent = effect_tool::decide::record::Intent {
        tool: "t".into(),
        class: effect_tool::EffectClass::Idempotent,
        run_id: "r".into(),
        thread_id: None,
        call_id: None,
        fingerprint: "f".into(),
        input: serde_json::json!({}),
        ttl_ms: None,
        approval: None,
        approval_ttl_ms: None,
        holder: None,
    };
    store
        .apply(
            "during-gc",
            Op::Claim {
                intent,
                lease_ms: 60_000,
                takeover_in_doubt: false,
            },
        )
        .await
        .unwrap();
    assert!(
        !collecting.is_finished(),
        "the write waited for the whole collection instead of one chunk"
    );
    assert_eq!(collecting.await.unwrap().expect("gc"), 20_000);
    let left = store.list(&Filter::all()).await.unwrap();
    assert_eq!(
        left.len(),
        21,
        "the unexpired records, the claims and the new claim stay"
    );
    assert!(left.iter().all(|r| !r.key.starts_with("old-")));
    assert_eq!(store.gc(2_000).await.expect("gc again"), 0);
    let _ = store.get("during-gc").await.unwrap().unwrap();
}
