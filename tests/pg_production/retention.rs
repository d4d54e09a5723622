//! `gc` against a claim made at the same moment: a record whose ttl ran out is claimed again
//! (a new call with the same key) while `gc` is deleting it. The claim must survive: deleting
//! it would let the next identical call claim afresh and apply its effect a second time.
//!
//! Made deterministic with a row lock: a session of the test locks the expired row, `gc` is
//! started and waits for that lock (seen in `pg_stat_activity`), the session then writes the
//! row as a claim does (state `claimed`, no expiry) and commits, and `gc` goes on.

use std::time::Duration;

use effect_tool_core::store::postgres::{PgOptions, PostgresStore};
use effect_tool_core::{Store, StoreExt};

use super::support;

#[test]
fn gc_keeps_a_record_claimed_again_while_it_runs() {
    let Some(url) = support::pg_url("gc_keeps_a_record_claimed_again_while_it_runs") else {
        return;
    };
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let schema = support::schema("gc_race");
        let app = format!("et-gc-race-{}", std::process::id());
        let store = PostgresStore::connect_with(
            &format!("{url}?application_name={app}"),
            PgOptions {
                schema: schema.clone(),
                pool_size: 2,
                ..PgOptions::default()
            },
        )
        .await
        .unwrap();
        let intent = effect_tool_core::decide::record::Intent {
            ttl_ms: Some(1),
            ..crate::common::intent("gc-race")
        };
        let effect_tool_core::decide::record::OpOutcome::Claimed { attempt, .. } =
            store.claim("k", intent, 30_000, false).await.unwrap()
        else {
            panic!("a new key is claimed")
        };
        let done = store.complete("k", attempt, serde_json::json!("out")).await.unwrap();
        let expired_at = done.expires_at.expect("a ttl");

        let lock = support::raw(&url).await;
        lock.batch_execute(&format!(
            "BEGIN; SELECT 1 FROM \"{schema}\".records WHERE key = 'k' FOR UPDATE"
        ))
        .await
        .unwrap();
        let gc = {
            let store = store.clone();
            tokio::spawn(async move { store.gc(expired_at + 1).await })
        };
        // gc waits for the row.
        let until = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let waiting: i64 = lock
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'",
                    &[&app],
                )
                .await
                .unwrap()
                .get(0);
            if waiting > 0 {
                break;
            }
            assert!(std::time::Instant::now() < until, "gc never waited for the row");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // The row is claimed again, as a new call's claim writes it.
        lock.batch_execute(&format!(
            "UPDATE \"{schema}\".records SET state = 'claimed', expires_at = NULL, attempt = attempt + 1,
               row_version = nextval('\"{schema}\".row_version_seq') WHERE key = 'k'; COMMIT"
        ))
        .await
        .unwrap();
        let dropped = gc.await.unwrap().unwrap();
        assert_eq!(dropped, 0, "the claimed record is not collected");
        let rec = store.get("k").await.unwrap().expect("the new claim survives gc");
        assert_eq!(rec.state, effect_tool_core::decide::record::RecordState::Claimed);
    });
}
