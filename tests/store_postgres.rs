//! The journal conformance suite on PostgreSQL, including several processes racing the same
//! keys on one database.
//!
//! Needs a server: `eval "$(.ci/postgres.sh start)"` exports `EFFECT_TOOL_PG_URL`; then
//! `cargo test --features postgres --test store_postgres`. Without a URL the cases print a loud
//! SKIPPED line and pass, unless `EFFECT_TOOL_REQUIRE_PG=1` (CI), where they fail.

#[cfg(feature = "postgres")]
use effect_tool_core::conformance::PostgresHarness;

#[cfg(feature = "postgres")]
effect_tool_core::conformance_tests!(postgres, PostgresHarness, durable);

/// Built without the `postgres` feature: nothing to run, which CI must not accept.
#[cfg(not(feature = "postgres"))]
#[test]
fn postgres_feature_disabled() {
    assert!(
        !effect_tool_core::conformance::postgres_required(),
        "EFFECT_TOOL_REQUIRE_PG=1 but the tests were built without the `postgres` feature: run `cargo test --features postgres`"
    );
    eprintln!("\n*** SKIPPED POSTGRES conformance: built without `--features postgres` ***\n");
}

/// Migrations: applied once even when many workers start together, printable for a DBA (and
/// then found applied), and a schema of a newer effect-tool is refused untouched.
#[cfg(feature = "postgres")]
mod postgres_migrations {
    use effect_tool_core::conformance::{Harness, PostgresHarness, run};
    use effect_tool_core::store::postgres::{PgOptions, PostgresStore};
    use effect_tool_core::{Store, StoreExt};

    fn url() -> String {
        std::env::var("EFFECT_TOOL_PG_URL").expect("checked by the harness")
    }

    fn options(schema: &str) -> PgOptions {
        PgOptions {
            schema: schema.to_owned(),
            pool_size: 2,
            ..PgOptions::default()
        }
    }

    async fn raw() -> tokio_postgres::Client {
        let (client, conn) = tokio_postgres::connect(&url(), tokio_postgres::NoTls).await.unwrap();
        tokio::spawn(conn);
        client
    }

    fn schema(what: &str) -> String {
        format!("et_mig_{what}_{}_{:08x}", std::process::id(), rand32())
    }

    fn rand32() -> u32 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos()
    }

    #[test]
    fn concurrent_workers_migrate_once() {
        run::<PostgresHarness, _, _>("concurrent_workers_migrate_once", || async {
            let s = schema("race");
            let connects = (0..8).map(|_| {
                let s = s.clone();
                tokio::spawn(async move { PostgresStore::connect_with(&url(), options(&s)).await })
            });
            for c in futures::future::join_all(connects).await {
                c.unwrap().expect("every worker connects");
            }
            let rows = raw()
                .await
                .query(&format!("SELECT version, name FROM \"{s}\".migrations"), &[])
                .await
                .unwrap();
            assert_eq!(rows.len(), 1, "migration 1 recorded exactly once");
            assert_eq!(rows[0].get::<_, i32>(0), 1);
        });
    }

    #[test]
    fn dba_sql_then_connect() {
        run::<PostgresHarness, _, _>("dba_sql_then_connect", || async {
            let s = schema("dba");
            let sql = PostgresStore::migration_sql_for(&s).unwrap();
            assert!(sql.contains(&format!("CREATE TABLE \"{s}\".records")), "{sql}");
            assert!(sql.contains("BEGIN;") && sql.contains("COMMIT;"));
            raw()
                .await
                .batch_execute(&sql)
                .await
                .expect("the DBA script runs as is");
            let store = PostgresStore::connect_with(&url(), options(&s)).await.unwrap();
            let intent = effect_tool_core::record::Intent {
                tool: "t".into(),
                class: effect_tool_core::EffectClass::Idempotent,
                run_id: "r".into(),
                thread_id: None,
                call_id: None,
                fingerprint: "f".into(),
                input: serde_json::json!({}),
                ttl_ms: None,
                approval: None,
            };
            store.claim("k", intent, 30_000, false).await.unwrap();
            assert!(store.get("k").await.unwrap().is_some());
            let rows = raw()
                .await
                .query(&format!("SELECT version FROM \"{s}\".migrations"), &[])
                .await
                .unwrap();
            assert_eq!(rows.len(), 1, "found applied, not applied again");
            assert!(PostgresStore::migration_sql().contains("\"effect_tool\".records"));
            assert!(PostgresStore::migration_sql_for("Robert'); DROP TABLE x;--").is_err());
        });
    }

    #[test]
    fn newer_schema_is_refused_untouched() {
        run::<PostgresHarness, _, _>("newer_schema_is_refused_untouched", || async {
            let s = schema("newer");
            drop(PostgresStore::connect_with(&url(), options(&s)).await.unwrap());
            let client = raw().await;
            client
                .execute(
                    &format!("INSERT INTO \"{s}\".migrations (version, name) VALUES (99, 'from the future')"),
                    &[],
                )
                .await
                .unwrap();
            let err = PostgresStore::connect_with(&url(), options(&s))
                .await
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("migration 99") && err.contains("upgrade effect-tool"),
                "{err}"
            );
            let n: i64 = client
                .query_one(&format!("SELECT count(*) FROM \"{s}\".migrations"), &[])
                .await
                .unwrap()
                .get(0);
            assert_eq!(n, 2, "left untouched");
        });
    }

    #[test]
    fn audit_trail_is_append_only() {
        run::<PostgresHarness, _, _>("audit_trail_is_append_only", || async {
            let h = PostgresHarness::fresh().await;
            let store = h.store();
            let mut intent = effect_tool_core::record::Intent {
                tool: "t".into(),
                class: effect_tool_core::EffectClass::Irreversible,
                run_id: "r".into(),
                thread_id: None,
                call_id: None,
                fingerprint: "f".into(),
                input: serde_json::json!({}),
                ttl_ms: None,
                approval: None,
            };
            intent.approval = Some("ops".into());
            store.claim("k", intent, 30_000, false).await.unwrap();
            store.approve("k", "ann", "ops").await.unwrap();
            let locator = h.locator().unwrap();
            let schema = locator.split(' ').next().unwrap();
            let err = raw()
                .await
                .execute(&format!("DELETE FROM \"{schema}\".audit"), &[])
                .await
                .unwrap_err();
            let message = err.as_db_error().map(|e| e.message().to_owned()).unwrap_or_default();
            assert!(message.contains("append-only"), "{message}");
            assert_eq!(store.audit(Some("k")).await.unwrap().len(), 1);
        });
    }
}
