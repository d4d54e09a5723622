//! The journal conformance suite on PostgreSQL, including several processes racing the same
//! keys on one database.
//!
//! Needs a server: `eval "$(.ci/postgres.sh start)"` exports `EFFECT_TOOL_PG_URL`; then
//! `cargo test --features postgres --test store store_postgres::`. Without a URL the cases print a loud
//! SKIPPED line and pass, unless `EFFECT_TOOL_REQUIRE_PG=1` (CI), where they fail.

use crate::common;

#[cfg(feature = "postgres")]
use effect_tool_core::testing::conformance::PostgresHarness;

#[cfg(feature = "postgres")]
effect_tool_core::conformance_tests!(postgres, PostgresHarness, durable);

/// Built without the `postgres` feature: nothing to run, which CI must not accept.
#[cfg(not(feature = "postgres"))]
#[test]
fn postgres_feature_disabled() {
    common::postgres_feature_disabled("conformance");
}

/// Migrations: applied once even when many workers start together, printable for a DBA (and
/// then found applied), and a schema of a newer effect-tool is refused untouched.
#[cfg(feature = "postgres")]
mod postgres_migrations {
    use effect_tool_core::store::postgres::{PgOptions, PostgresStore};
    use effect_tool_core::testing::conformance::{Harness, PostgresHarness, run};
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
            let versions: Vec<i32> = rows.iter().map(|r| r.get(0)).collect();
            assert_eq!(
                versions.len(),
                effect_tool_core::store::postgres::SCHEMA_VERSION as usize
            );
            assert_eq!(
                versions
                    .iter()
                    .copied()
                    .collect::<std::collections::BTreeSet<i32>>()
                    .len(),
                versions.len(),
                "each migration recorded exactly once: {versions:?}"
            );
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
            let intent = effect_tool_core::decide::record::Intent {
                tool: "t".into(),
                class: effect_tool_core::EffectClass::Idempotent,
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
            store.claim("k", intent, 30_000, false).await.unwrap();
            assert!(store.get("k").await.unwrap().is_some());
            let rows = raw()
                .await
                .query(&format!("SELECT version FROM \"{s}\".migrations"), &[])
                .await
                .unwrap();
            assert_eq!(
                rows.len(),
                effect_tool_core::store::postgres::SCHEMA_VERSION as usize,
                "found applied, not applied again"
            );
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
            assert_eq!(
                n,
                i64::from(effect_tool_core::store::postgres::SCHEMA_VERSION) + 1,
                "left untouched"
            );
        });
    }

    #[test]
    fn audit_trail_is_append_only() {
        run::<PostgresHarness, _, _>("audit_trail_is_append_only", || async {
            let h = PostgresHarness::fresh().await;
            let store = h.store();
            let mut intent = effect_tool_core::decide::record::Intent {
                tool: "t".into(),
                class: effect_tool_core::EffectClass::Irreversible,
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
            intent.approval = Some("ops".into());
            store.claim("k", intent, 30_000, false).await.unwrap();
            store
                .approve("k", "ann", "ops", &store.get("k").await.unwrap().unwrap().fingerprint)
                .await
                .unwrap();
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

/// TLS against the server of `.ci/postgres.sh` (its throwaway CA in `EFFECT_TOOL_PG_CA`, a
/// certificate for `localhost` / 127.0.0.1, and a role `effect_tool_tls_only` that pg_hba.conf
/// refuses over plain TCP). Whether a session is encrypted is read from the server's side
/// (`pg_stat_ssl` of the store's own connections, found by a unique `application_name`), over a
/// separate plain connection.
#[cfg(feature = "postgres")]
mod postgres_tls {
    use effect_tool_core::store::postgres::{PgOptions, PostgresStore, SslMode};
    use effect_tool_core::testing::conformance::{PostgresHarness, postgres_required, run};
    use effect_tool_core::{Store, StoreExt};

    use crate::common::intent;

    /// The URL of the plain server (`postgres://postgres@127.0.0.1:PORT/effect_tool_test`).
    fn url() -> String {
        std::env::var("EFFECT_TOOL_PG_URL").expect("checked by the harness")
    }

    /// Run a case that needs the server's CA: fails when PostgreSQL is required and the CA is
    /// not given, skips loudly otherwise.
    fn run_tls<F, Fut>(case: &str, f: F)
    where
        F: FnOnce(String) -> Fut,
        Fut: std::future::Future<Output = ()>,
    {
        match std::env::var("EFFECT_TOOL_PG_CA").ok().filter(|ca| !ca.is_empty()) {
            Some(ca) => run::<PostgresHarness, _, _>(case, || f(ca)),
            None if postgres_required() => panic!(
                "EFFECT_TOOL_REQUIRE_PG=1 but EFFECT_TOOL_PG_CA is unset: start the server with `eval \"$(.ci/postgres.sh start)\"`, which exports it"
            ),
            None => eprintln!(
                "\n*** SKIPPED POSTGRES TLS case `{case}`: EFFECT_TOOL_PG_CA is unset (start the server with `eval \"$(.ci/postgres.sh start)\"`) ***\n"
            ),
        }
    }

    fn unique(what: &str) -> String {
        format!("et_tls_{what}_{}_{:016x}", std::process::id(), fastrand_u64())
    }

    fn fastrand_u64() -> u64 {
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos(),
        );
        h.finish()
    }

    /// `url()` with query parameters (percent-encoded values) and another user or host.
    fn with(params: &[(&str, &str)]) -> String {
        let mut out = url();
        for (i, (k, v)) in params.iter().enumerate() {
            let encoded: String = v
                .bytes()
                .map(|b| match b {
                    b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'/' | b'-' | b'.' | b'_' => (b as char).to_string(),
                    _ => format!("%{b:02X}"),
                })
                .collect();
            out.push(if i == 0 { '?' } else { '&' });
            out.push_str(&format!("{k}={encoded}"));
        }
        out
    }

    fn as_user(url: &str, user: &str) -> String {
        url.replacen("postgres://postgres@", &format!("postgres://{user}@"), 1)
    }

    fn options(schema: &str) -> PgOptions {
        PgOptions {
            schema: schema.to_owned(),
            pool_size: 2,
            ..PgOptions::default()
        }
    }

    /// Connect, and use the journal (a claim and a read), so its connections are open.
    async fn use_journal(url: &str, options: PgOptions) -> PostgresStore {
        let store = PostgresStore::connect_with(url, options)
            .await
            .unwrap_or_else(|e| panic!("connecting to {url}: {e}"));
        let key = unique("k");
        store.claim(&key, intent("r"), 30_000, false).await.unwrap();
        assert!(store.get(&key).await.unwrap().is_some());
        store
    }

    /// Whether each server session named `app` is encrypted, seen from the server over a
    /// separate plain connection.
    async fn sessions_encrypted(app: &str) -> Vec<bool> {
        let (client, conn) = tokio_postgres::connect(&format!("{}?sslmode=disable", url()), tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        client
            .query(
                "SELECT s.ssl FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) WHERE a.application_name = $1",
                &[&app],
            )
            .await
            .unwrap()
            .iter()
            .map(|row| row.get::<_, bool>(0))
            .collect()
    }

    #[test]
    fn require_encrypts_the_journal_connections() {
        run_tls("require_encrypts_the_journal_connections", |_ca| async move {
            let app = unique("require");
            // No CA: `require` encrypts without checking the (self-signed) certificate.
            let store = use_journal(
                &with(&[("sslmode", "require"), ("application_name", &app)]),
                options(&app),
            )
            .await;
            let seen = sessions_encrypted(&app).await;
            assert!(!seen.is_empty(), "the journal's connections are visible on the server");
            assert!(
                seen.iter().all(|ssl| *ssl),
                "every journal connection is encrypted: {seen:?}"
            );
            drop(store);
            // The role refused over plain TCP gets in with `require`.
            use_journal(
                &as_user(&with(&[("sslmode", "require")]), "effect_tool_tls_only"),
                options(&app),
            )
            .await;
        });
    }

    #[test]
    fn disable_stays_plain() {
        run_tls("disable_stays_plain", |_ca| async move {
            let app = unique("disable");
            let _store = use_journal(
                &with(&[("sslmode", "disable"), ("application_name", &app)]),
                options(&app),
            )
            .await;
            let seen = sessions_encrypted(&app).await;
            assert!(!seen.is_empty(), "the journal's connections are visible on the server");
            assert!(
                seen.iter().all(|ssl| !ssl),
                "no journal connection is encrypted: {seen:?}"
            );
            // The server refuses the TLS-only role over plain TCP: `disable` really is plain.
            let err = PostgresStore::connect_with(
                &as_user(&with(&[("sslmode", "disable")]), "effect_tool_tls_only"),
                options(&app),
            )
            .await
            .unwrap_err()
            .to_string();
            assert!(
                err.contains("refuses connections without TLS (sslmode=disable)")
                    && err.contains("no encryption")
                    && err.contains("connect with sslmode=require"),
                "{err}"
            );
        });
    }

    #[test]
    fn prefer_is_the_default_and_takes_tls() {
        run_tls("prefer_is_the_default_and_takes_tls", |_ca| async move {
            let app = unique("prefer");
            let _store = use_journal(&with(&[("application_name", &app)]), options(&app)).await;
            let seen = sessions_encrypted(&app).await;
            assert!(!seen.is_empty() && seen.iter().all(|ssl| *ssl), "{seen:?}");
        });
    }

    #[test]
    fn verify_full_with_the_ca_connects() {
        run_tls("verify_full_with_the_ca_connects", |ca| async move {
            // In the URL (the certificate names 127.0.0.1, the URL's host).
            let app = unique("vfull");
            let _store = use_journal(
                &with(&[
                    ("sslmode", "verify-full"),
                    ("sslrootcert", &ca),
                    ("application_name", &app),
                ]),
                options(&app),
            )
            .await;
            let seen = sessions_encrypted(&app).await;
            assert!(!seen.is_empty() && seen.iter().all(|ssl| *ssl), "{seen:?}");
            // In the options, for the TLS-only role, by the name `localhost`.
            let options = PgOptions {
                ssl_mode: Some(SslMode::VerifyFull),
                ssl_root_cert: Some(ca.into()),
                ..options(&app)
            };
            let url = as_user(&url(), "effect_tool_tls_only").replace("@127.0.0.1:", "@localhost:");
            use_journal(&url, options).await;
        });
    }

    #[test]
    fn verify_full_without_the_ca_says_what_to_do() {
        run_tls("verify_full_without_the_ca_says_what_to_do", |_ca| async move {
            let app = unique("noca");
            for mode in ["verify-full", "verify-ca"] {
                let err = PostgresStore::connect_with(&with(&[("sslmode", mode)]), options(&app))
                    .await
                    .unwrap_err()
                    .to_string();
                // As libpq: no sslrootcert and no ~/.postgresql/root.crt (the platform's roots
                // are not used unless sslrootcert=system).
                assert!(
                    err.contains(&format!("sslmode={mode}"))
                        && err.contains("sslrootcert=PATH")
                        && (err.contains("root.crt` does not exist") || err.contains("no home folder")),
                    "{err}"
                );
            }
        });
    }

    #[test]
    fn verify_full_checks_the_host_name_and_verify_ca_does_not() {
        run_tls(
            "verify_full_checks_the_host_name_and_verify_ca_does_not",
            |ca| async move {
                let app = unique("name");
                // The certificate names localhost and 127.0.0.1, not this host; hostaddr reaches the
                // server all the same.
                let other_host = |mode: &str| {
                    with(&[("sslmode", mode), ("sslrootcert", &ca), ("hostaddr", "127.0.0.1")])
                        .replace("@127.0.0.1:", "@db.effect-tool.invalid:")
                };
                let err = PostgresStore::connect_with(&other_host("verify-full"), options(&app))
                    .await
                    .unwrap_err()
                    .to_string();
                assert!(
                    err.contains("does not name the host") && err.contains("verify-ca"),
                    "{err}"
                );
                use_journal(&other_host("verify-ca"), options(&app)).await;
            },
        );
    }

    #[test]
    fn require_with_a_root_file_checks_the_chain() {
        run_tls("require_with_a_root_file_checks_the_chain", |ca| async move {
            let app = unique("reqca");
            use_journal(&with(&[("sslmode", "require"), ("sslrootcert", &ca)]), options(&app)).await;
            // The server's own certificate is no CA of itself: as libpq does, `require` with a
            // root file refuses a server that does not chain to it.
            let not_the_ca = std::path::Path::new(&ca).with_file_name("server.crt");
            assert!(
                not_the_ca.is_file(),
                "{} (written by .ci/postgres.sh)",
                not_the_ca.display()
            );
            let err = PostgresStore::connect_with(
                &with(&[("sslmode", "require"), ("sslrootcert", not_the_ca.to_str().unwrap())]),
                options(&app),
            )
            .await
            .unwrap_err()
            .to_string();
            assert!(
                err.contains("certificate is not trusted")
                    && err
                        .contains("sslmode=require with a root certificate, which checks the chain as verify-ca does")
                    && err.contains("leave out the root certificate"),
                "{err}"
            );
            // A root file that is not there is named, with what to give instead.
            let err = PostgresStore::connect_with(
                &with(&[("sslmode", "verify-full"), ("sslrootcert", "/nonexistent/ca.pem")]),
                options(&app),
            )
            .await
            .unwrap_err()
            .to_string();
            assert!(err.contains("/nonexistent/ca.pem") && err.contains("PEM"), "{err}");
        });
    }
}

/// Group commit: writes of many concurrent callers of one store share statements and commits,
/// and each still gets the answer it would have had alone. Commits are counted from the rows'
/// `xmin` (the transaction that last wrote each row), read over a separate connection.
#[cfg(feature = "postgres")]
mod postgres_group_commit {
    use std::sync::Arc;
    use std::time::Duration;

    use effect_tool::{CallOptions, EffectClass::Irreversible, Engine, EngineConfig, RunContext};
    use effect_tool_core::decide::record::{OpOutcome, Rejected};
    use effect_tool_core::testing::conformance::{Harness, PostgresHarness, run};
    use effect_tool_core::{StoreError, StoreExt};
    use serde_json::json;

    use crate::common::intent;
    use crate::common::ledger::Downstream;
    use crate::common::script::{Script, Step, scripted};

    scripted!(Pay, Irreversible, recover = false, max_delay = Duration::from_millis(2));

    /// A plain connection to the harness's database, and its schema.
    async fn raw(h: &PostgresHarness) -> (tokio_postgres::Client, String) {
        let locator = h.locator().unwrap();
        let (schema, url) = locator.split_once(' ').unwrap();
        let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.unwrap();
        tokio::spawn(conn);
        (client, schema.to_owned())
    }

    /// Rows in `state`, and how many transactions last wrote them.
    async fn rows_and_commits(h: &PostgresHarness, state: &str) -> (i64, i64) {
        let (client, schema) = raw(h).await;
        let row = client
            .query_one(
                &format!("SELECT count(*), count(DISTINCT xmin::text) FROM \"{schema}\".records WHERE state = $1"),
                &[&state],
            )
            .await
            .unwrap();
        (row.get(0), row.get(1))
    }

    /// Claims 0..32, each started by `claim` after the one before has run up to its wait, while
    /// a lock on the table holds every insert, so that the path of each is known: the first four
    /// go alone (the store is idle, four the most in flight alone), the fifth starts the first
    /// batch runner, which sends it at once (one item), the next eight queue and the eighth
    /// starts the second runner (a batch worth a commit), which sends them, and the other 19
    /// queue behind those. Then the lock is let go, and the first runner back sends the 19.
    /// What each claim's task answered, in order.
    async fn claims_behind_a_lock<T: Send + 'static>(
        h: &PostgresHarness,
        claim: impl Fn(usize) -> tokio::task::JoinHandle<T>,
    ) -> Vec<T> {
        let (client, schema) = raw(h).await;
        client
            .batch_execute(&format!(r#"BEGIN; LOCK TABLE "{schema}".records IN SHARE MODE"#))
            .await
            .unwrap();
        // Watched from outside the locking transaction, whose view of the server's activity is
        // the one it took first.
        let (watch, _) = raw(h).await;
        let mut claims: Vec<_> = (0..4).map(&claim).collect();
        held_by_lock(&watch, &schema, 4).await;
        claims.push(claim(4));
        held_by_lock(&watch, &schema, 5).await;
        // One by one, each task (and a runner it starts) running up to its wait before the
        // next: the load of callers that come while a runner is busy, not all at once.
        for n in 5..32 {
            claims.push(claim(n));
            tokio::time::sleep(Duration::from_millis(2)).await;
            if n == 12 {
                held_by_lock(&watch, &schema, 6).await;
            }
        }
        // Let the 19 queue (each task runs up to its wait for the batch).
        tokio::time::sleep(Duration::from_millis(50)).await;
        client.batch_execute("COMMIT").await.unwrap();
        futures::future::join_all(claims)
            .await
            .into_iter()
            .map(|r| r.expect("a claim's task"))
            .collect()
    }

    /// Wait until `n` statements on `schema`'s tables wait for a lock.
    async fn held_by_lock(client: &tokio_postgres::Client, schema: &str, n: i64) {
        for _ in 0..2000 {
            let waiting: i64 = client
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND strpos(query, $1) > 0",
                    &[&schema],
                )
                .await
                .unwrap()
                .get(0);
            if waiting >= n {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!(
            "{n} statements never waited for the table lock: do four writes go alone while the store is idle, and is the second batch runner started by eight queued writes?"
        );
    }

    /// `records` records are completed, and fewer transactions than that last wrote them.
    async fn assert_commits_shared(h: &PostgresHarness, records: i64) {
        let (rows, commits) = rows_and_commits(h, "completed").await;
        assert_eq!(rows, records);
        assert!(
            commits < rows,
            "{rows} concurrent completions took {commits} commits: none were shared"
        );
    }

    /// 64 tasks make 512 calls of an irreversible tool over 256 keys, each key called by two
    /// tasks at once: every key's effect happens once (counted downstream), every call gets
    /// its result, and the completions took fewer commits than there are records.
    #[test]
    fn postgres_concurrent_callers_share_commits_and_run_each_key_once() {
        run::<PostgresHarness, _, _>("concurrent_callers_share_commits", || async {
            let h = PostgresHarness::fresh().await;
            let down = Arc::new(Downstream::default());
            let tool = Pay(Script::new(&down, &[Step::Ok]));
            let config = EngineConfig {
                lease: Duration::from_secs(30),
                poll_interval: Duration::from_millis(2),
            };
            let engine = Engine::with_config(h.store(), config);
            let run = RunContext::new("group-commit");
            let tasks: Vec<_> = (0..64)
                .map(|t| {
                    let (engine, tool, run) = (engine.clone(), tool.clone(), run.clone());
                    tokio::spawn(async move {
                        for i in 0..8 {
                            let to = format!("to-{}", (t * 4 + i) % 256);
                            let out = engine.call(&tool, &run, CallOptions::default(), to.clone()).await;
                            assert!(
                                out.as_deref().is_ok_and(|o| o.starts_with(&format!("done for {to} "))),
                                "{out:?}"
                            );
                        }
                    })
                })
                .collect();
            for t in tasks {
                t.await.unwrap();
            }
            assert_eq!((down.requests(), down.effects()), (256, 256), "one execution per key");
            assert_commits_shared(&h, 256).await;
        });
    }

    /// A claim taken over by another handle fences its first holder's late writes, sent
    /// together; the new holder's writes, sent together, land.
    #[test]
    fn postgres_batched_writes_of_a_taken_over_claim_are_fenced() {
        run::<PostgresHarness, _, _>("batched_writes_fenced", || async {
            let h = PostgresHarness::fresh().await;
            let first = h.store();
            let second = PostgresHarness::open(&h.locator().unwrap()).await;
            let keys: Vec<String> = (0..32).map(|n| format!("fenced-{n}")).collect();
            for k in &keys {
                first.claim(k, intent("first"), 1, false).await.unwrap();
            }
            tokio::time::sleep(Duration::from_millis(30)).await;
            for k in &keys {
                let taken = second.claim(k, intent("second"), 30_000, false).await.unwrap();
                assert!(matches!(taken, OpOutcome::Claimed { attempt: 2, .. }), "{taken:?}");
            }
            let late = keys.iter().map(|k| {
                let (s, k) = (first.clone(), k.clone());
                tokio::spawn(async move { s.complete(&k, 1, json!("late")).await })
            });
            for r in futures::future::join_all(late).await {
                let r = r.unwrap();
                assert!(
                    matches!(
                        r,
                        Err(StoreError::Rejected(Rejected::Fenced {
                            attempt: 1,
                            current: 2,
                            ..
                        }))
                    ),
                    "{r:?}"
                );
            }
            let done = keys.iter().map(|k| {
                let (s, k) = (second.clone(), k.clone());
                tokio::spawn(async move { s.complete(&k, 2, json!(format!("second {k}"))).await })
            });
            for r in futures::future::join_all(done).await {
                r.unwrap().unwrap();
            }
            for k in &keys {
                let rec = first.get(k).await.unwrap().unwrap();
                assert_eq!((rec.attempt, rec.output), (2, Some(json!(format!("second {k}")))));
            }
            assert_commits_shared(&h, 32).await;
        });
    }

    /// A row the server refuses fails its own write only: the statement it was sent in is
    /// rolled back as a whole, and the other writes of that statement are made alone. A
    /// sequence (not rolled back) counts the rows the server was asked to insert: the refused
    /// row, sent in a batch and then alone, makes it more than one per claim.
    #[test]
    fn postgres_a_refused_row_fails_its_own_write_only() {
        run::<PostgresHarness, _, _>("refused_row_alone", || async {
            let h = PostgresHarness::fresh().await;
            let (client, schema) = raw(&h).await;
            client
                .batch_execute(&format!(
                    r#"CREATE SEQUENCE "{schema}".insert_attempts;
                    CREATE FUNCTION "{schema}".refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$
                    BEGIN
                        PERFORM nextval('"{schema}".insert_attempts');
                        IF NEW.run_id = 'poison' THEN RAISE EXCEPTION 'this row is refused'; END IF;
                        RETURN NEW;
                    END $$;
                    CREATE TRIGGER refuse_poison BEFORE INSERT ON "{schema}".records
                        FOR EACH ROW EXECUTE FUNCTION "{schema}".refuse_poison();"#
                ))
                .await
                .unwrap();
            // The refused row is among the 19 that queue behind the two runners' statements.
            let store = h.store();
            let claim = |n: usize| {
                let s = store.clone();
                let run = if n == 16 { "poison" } else { "fine" };
                tokio::spawn(async move { (n, s.claim(&format!("k-{n}"), intent(run), 30_000, false).await) })
            };
            for r in claims_behind_a_lock(&h, claim).await {
                match r {
                    (16, Err(StoreError::Backend(e))) => assert!(e.contains("this row is refused"), "{e}"),
                    (16, other) => panic!("the refused row's claim fails with the server's error, got {other:?}"),
                    (_, r) => assert!(matches!(r, Ok(OpOutcome::Claimed { attempt: 1, .. })), "{r:?}"),
                }
            }
            let (rows, _) = rows_and_commits(&h, "claimed").await;
            assert_eq!(rows, 31);
            let attempts: i64 = client
                .query_one(&format!("SELECT last_value FROM \"{schema}\".insert_attempts"), &[])
                .await
                .unwrap()
                .get(0);
            assert!(
                attempts > 32,
                "{attempts} inserts for 32 claims: no statement carried several"
            );
        });
    }

    /// The items of each batch statement sent while `body` runs on a fresh journal, as
    /// `effect_tool_store_batch_items` recorded them (label `flush`, then items), smallest
    /// first; `None` if PostgreSQL is not available (and not required). On a current-thread
    /// runtime, so that the recorder (local to this thread) sees the runners' tasks too.
    fn batch_items<F, Fut>(name: &str, body: F) -> Option<Vec<(String, f64)>>
    where
        F: FnOnce(PostgresHarness) -> Fut,
        Fut: std::future::Future<Output = ()>,
    {
        use effect_tool_core::testing::conformance::Availability;
        if let Availability::Unavailable { reason, required } = PostgresHarness::availability() {
            assert!(!required, "PostgreSQL is required here: {reason}");
            eprintln!("\n*** SKIPPED POSTGRES {name}: {reason} ***\n");
            return None;
        }
        let recorder = metrics_util::debugging::DebuggingRecorder::new();
        let snapshots = recorder.snapshotter();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        metrics::with_local_recorder(&recorder, || {
            rt.block_on(async { body(PostgresHarness::fresh().await).await })
        });
        let mut items: Vec<(String, f64)> = snapshots
            .snapshot()
            .into_vec()
            .into_iter()
            .filter(|(key, ..)| key.key().name() == "effect_tool_store_batch_items")
            .flat_map(|(key, _, _, value)| {
                let flush = key
                    .key()
                    .labels()
                    .find(|l| l.key() == "flush")
                    .map(|l| l.value().to_owned())
                    .unwrap_or_default();
                match value {
                    metrics_util::debugging::DebugValue::Histogram(samples) => {
                        samples.into_iter().map(|v| (flush.clone(), v.0)).collect::<Vec<_>>()
                    }
                    other => panic!("effect_tool_store_batch_items is a histogram, got {other:?}"),
                }
            })
            .collect();
        items.sort_by(|a, b| a.1.total_cmp(&b.1));
        Some(items)
    }

    /// Each batch statement's items are recorded in `effect_tool_store_batch_items`, labelled by
    /// whether its commit waits for the WAL flush, and under load no statement of a few items is
    /// sent beside a busy one. A lock on the table holds every insert (see
    /// [`claims_behind_a_lock`]): the first four claims go alone (not recorded), the fifth is
    /// the first runner's statement of one item, the next eight the second runner's (started by
    /// a queue worth a commit, not by the first write that found a runner busy), and the 19
    /// queued behind them one statement. Idempotent claims need no flush of their own, so
    /// every statement is `flush="false"`.
    #[test]
    fn postgres_batch_statements_record_their_items() {
        let Some(items) = batch_items("batch_items", |h| async move {
            let store = h.store();
            let claim = |n: usize| {
                let s = store.clone();
                tokio::spawn(async move { s.claim(&format!("k-{n}"), intent("items"), 30_000, false).await })
            };
            for r in claims_behind_a_lock(&h, claim).await {
                assert!(matches!(r, Ok(OpOutcome::Claimed { attempt: 1, .. })), "{r:?}");
            }
        }) else {
            return;
        };
        let runts = items.iter().filter(|(_, n)| *n <= 2.0).count();
        assert_eq!(
            runts, 1,
            "statements of one or two items: only the first runner's first, sent while no runner was busy ({items:?})"
        );
        let f = |n: f64| ("false".to_owned(), n);
        assert_eq!(items, vec![f(1.0), f(8.0), f(19.0)], "the batch statements' items");
    }

    /// A sequential caller's writes go alone, each one round trip: no batch statement is sent
    /// (the histogram has no sample), through the store and through the engine, and every
    /// write lands.
    #[test]
    fn postgres_a_sequential_caller_writes_alone() {
        let Some(items) = batch_items("sequential_alone", |h| async move {
            let store = h.store();
            for n in 0..16 {
                let key = format!("seq-{n}");
                let attempt = match store.claim(&key, intent("seq"), 30_000, false).await.unwrap() {
                    OpOutcome::Claimed { attempt, .. } => attempt,
                    other => panic!("{other:?}"),
                };
                store.complete(&key, attempt, json!(n)).await.unwrap();
            }
            let down = Arc::new(Downstream::default());
            let tool = Pay(Script::new(&down, &[Step::Ok]));
            let engine = Engine::new(store.clone());
            let run = RunContext::new("sequential");
            for n in 0..16 {
                let to = format!("seq-to-{n}");
                let out = engine.call(&tool, &run, CallOptions::default(), to.clone()).await;
                assert!(
                    out.as_deref().is_ok_and(|o| o.starts_with(&format!("done for {to} "))),
                    "{out:?}"
                );
            }
            assert_eq!((down.requests(), down.effects()), (16, 16));
            let (rows, _) = rows_and_commits(&h, "completed").await;
            assert_eq!(rows, 32);
        }) else {
            return;
        };
        assert_eq!(items, vec![], "a sequential caller's writes sent as batch statements");
    }
}

/// One row the store cannot read (a newer record version, corrupt JSON, an unknown state)
/// never fails a whole list: it is skipped and reported with its key; `abandon_run` keeps
/// working.
#[cfg(feature = "postgres")]
#[test]
fn postgres_lists_skip_rows_they_cannot_read_and_report_them() {
    use effect_tool_core::testing::conformance::{Harness, PostgresHarness, run};
    use effect_tool_core::{Filter, Store, StoreExt};
    run::<PostgresHarness, _, _>("lists_skip_rows_they_cannot_read", || async {
        let h = PostgresHarness::fresh().await;
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
        let locator = h.locator().unwrap();
        let (schema, url) = locator.split_once(' ').unwrap();
        let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.unwrap();
        tokio::spawn(conn);
        client
            .batch_execute(&format!(
                "INSERT INTO \"{schema}\".records (key, version, tool, class, run_id, fingerprint, input, state, attempt, created_at, updated_at, call_ids)
                   VALUES ('corrupt-json', 1, 't', 'idempotent', 'r', 'f', '{{}}', 'completed', 1, 0, 0, '[not json');
                 INSERT INTO \"{schema}\".records (key, version, tool, class, run_id, fingerprint, input, state, attempt, created_at, updated_at)
                   VALUES ('unknown-state', 1, 't', 'idempotent', 'r', 'f', '{{}}', 'quantum', 1, 0, 0);"
            ))
            .await
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
        assert_eq!(skipped, ["corrupt-json", "from-the-future", "unknown-state"]);
        assert_eq!(store.list(&Filter::all()).await.unwrap().len(), 2);
        let engine = effect_tool_core::Engine::new(store.clone());
        let report = engine
            .abandon_run(&effect_tool_core::RunContext::new("r"), &[])
            .await
            .expect("abandon_run keeps working");
        assert!(report.compensated.is_empty());
    });
}

/// `gc` deletes in chunks (each its own statement under the statement timeout): a collection
/// larger than one chunk drops every expired record, and keeps the unexpired ones and the
/// claims a chunk boundary falls near.
#[cfg(feature = "postgres")]
#[test]
fn postgres_gc_collects_more_than_one_chunk() {
    use effect_tool_core::testing::conformance::{Harness, PostgresHarness, run};
    use effect_tool_core::{Filter, Store};
    run::<PostgresHarness, _, _>("gc_collects_more_than_one_chunk", || async {
        let h = PostgresHarness::fresh().await;
        let store = h.store();
        let locator = h.locator().unwrap();
        let (schema, url) = locator.split_once(' ').unwrap();
        let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.unwrap();
        tokio::spawn(conn);
        // 25,000 completed records expired between 1,000 and 8,000 (each chunk resumes from the
        // latest one the last chunk deleted, and ties span chunks); 10 completed records
        // expiring at 10^12; 10 claims expired at 1,000 (claims are never collected).
        client
            .batch_execute(&format!(
                "INSERT INTO \"{schema}\".records (key, version, tool, class, run_id, fingerprint, input, state, attempt, created_at, updated_at, expires_at)
                   SELECT 'old-' || i, 1, 't', 'idempotent', 'r', 'f', '{{}}', 'completed', 1, 0, 0, 1000 + i % 7000 FROM generate_series(1, 25000) i;
                 INSERT INTO \"{schema}\".records (key, version, tool, class, run_id, fingerprint, input, state, attempt, created_at, updated_at, expires_at)
                   SELECT 'new-' || i, 1, 't', 'idempotent', 'r', 'f', '{{}}', 'completed', 1, 0, 0, 1000000000000 FROM generate_series(1, 10) i;
                 INSERT INTO \"{schema}\".records (key, version, tool, class, run_id, fingerprint, input, state, attempt, created_at, updated_at, expires_at, lease_until)
                   SELECT 'claim-' || i, 1, 't', 'idempotent', 'r', 'f', '{{}}', 'claimed', 1, 0, 0, 1000, 1000 FROM generate_series(1, 10) i;"
            ))
            .await
            .unwrap();
        assert_eq!(store.gc(10_000).await.expect("gc"), 25_000);
        let left = store.list(&Filter::all()).await.unwrap();
        assert_eq!(left.len(), 20, "the unexpired records and the claims stay");
        assert!(left.iter().all(|r| !r.key.starts_with("old-")));
        assert_eq!(store.gc(10_000).await.expect("gc again"), 0);
    });
}

/// Fencing that a lost write cannot undo (issue 36.5). A claim committed without waiting for the
/// WAL flush (an idempotent tool's, `synchronous_commit = off`) can be lost in a crash or a
/// failover together with the sequence values it used: the row version comes back, and a fresh
/// claim of the key starts again at attempt 1. A worker that still holds the lost claim in its
/// cache then finds a row with its very `(row_version, attempt)`; its write must not land.
#[cfg(feature = "postgres")]
mod postgres_lost_claim {
    use effect_tool_core::StoreError;
    use effect_tool_core::StoreExt;
    use effect_tool_core::decide::record::{Holder, OpOutcome, RecordState, Rejected};
    use effect_tool_core::testing::conformance::{Harness, PostgresHarness, run};
    use serde_json::json;

    use crate::common::intent;

    fn holder(instance: &str) -> Option<Box<Holder>> {
        Some(Box::new(Holder {
            worker: None,
            instance: instance.to_owned(),
            host: "test".to_owned(),
            pid: 1,
        }))
    }

    async fn row(client: &tokio_postgres::Client, schema: &str, key: &str) -> (i64, i64, String) {
        let r = client
            .query_one(
                &format!("SELECT row_version, attempt, holder FROM \"{schema}\".records WHERE key = $1"),
                &[&key],
            )
            .await
            .unwrap();
        (r.get(0), r.get(1), r.get(2))
    }

    #[test]
    fn postgres_a_lost_claim_whose_row_version_and_attempt_come_back_is_not_overwritten() {
        run::<PostgresHarness, _, _>("lost_claim_fence", || async {
            let h = PostgresHarness::fresh().await;
            let locator = h.locator().unwrap();
            let (schema, url) = locator.split_once(' ').unwrap();
            let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.unwrap();
            tokio::spawn(conn);
            // Two workers, each with its own store (and its own cache of the claims it holds).
            let a = PostgresHarness::open(&locator).await;
            let b = PostgresHarness::open(&locator).await;
            let key = "refund:lost-claim";

            let mut mine = intent("r");
            mine.holder = holder("worker-a");
            let taken = a.claim(key, mine, 60_000, false).await.unwrap();
            assert!(matches!(taken, OpOutcome::Claimed { attempt: 1, .. }), "{taken:?}");
            let (version, attempt, _) = row(&client, schema, key).await;
            assert_eq!(attempt, 1);

            // The crash: worker a's claim, and the sequence values it used, never reached the
            // disk. Worker a does not know; it still holds the claim.
            client
                .batch_execute(&format!(
                    "DELETE FROM \"{schema}\".records WHERE key = '{key}';
                     SELECT setval('\"{schema}\".row_version_seq', {version}, false);"
                ))
                .await
                .unwrap();
            let mut theirs = intent("r");
            theirs.holder = holder("worker-b");
            let taken = b.claim(key, theirs, 60_000, false).await.unwrap();
            assert!(matches!(taken, OpOutcome::Claimed { attempt: 1, .. }), "{taken:?}");
            let (version_b, attempt_b, holder_b) = row(&client, schema, key).await;
            assert_eq!(
                (version_b, attempt_b),
                (version, attempt),
                "the set-up must hand out the lost claim's row version and attempt again"
            );
            assert!(holder_b.contains("worker-b"), "{holder_b}");

            // Worker a's writes: each refused, none lands on worker b's claim.
            let renew = a.renew(key, 1, 60_000).await.unwrap_err();
            assert!(
                matches!(renew, StoreError::Rejected(Rejected::Fenced { .. })),
                "a renewal of the lost claim must be fenced: {renew}"
            );
            let complete = a.complete(key, 1, json!("worker a's output")).await.unwrap_err();
            assert!(
                matches!(complete, StoreError::Rejected(Rejected::Fenced { .. })),
                "a completion of the lost claim must be fenced: {complete}"
            );
            let now = b.get(key).await.unwrap().unwrap();
            assert_eq!(now.state, RecordState::Claimed);
            assert!(
                now.output.is_none(),
                "worker a's output landed on worker b's claim: {now:?}"
            );
            assert_eq!(now.holder.as_ref().unwrap().instance, "worker-b");

            // Worker b still holds its claim and records its result.
            let done = b.complete(key, 1, json!("worker b's output")).await.unwrap();
            assert_eq!(done.state, RecordState::Completed);
            assert_eq!(done.output, Some(json!("worker b's output")));
        });
    }
}
