//! Client certificates, `sslmode=prefer`'s fallback, `application_name` and a server-side
//! statement timeout, against the shared server as `.ci/postgres.sh` sets it up: the role
//! `effect_tool_mtls` needs TLS and a certificate signed by the test CA naming it
//! (`clientcert=verify-full`), the role `effect_tool_plain_only` is refused over TLS.

use std::path::{Path, PathBuf};
use std::time::Duration;

use effect_tool_core::store::postgres::{PgOptions, PostgresStore};
use effect_tool_core::{Store, StoreExt};

use super::support;

fn options(schema: &str) -> PgOptions {
    PgOptions {
        schema: schema.to_owned(),
        pool_size: 2,
        connect_timeout: Duration::from_secs(5),
        ..PgOptions::default()
    }
}

/// `postgres://ROLE@localhost:PORT/effect_tool_test?QUERY` on the shared server (`localhost`:
/// the name its certificate has).
fn url_as(url: &str, role: &str, query: &str) -> String {
    let (_, port) = support::host_port(url);
    format!("postgres://{role}@localhost:{port}/effect_tool_test?{query}")
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// A copy of `file` in `dir` with permissions `mode`.
fn copy_with_mode(file: &Path, dir: &Path, mode: u32) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let to = dir.join(file.file_name().unwrap());
    std::fs::copy(file, &to).unwrap();
    std::fs::set_permissions(&to, std::fs::Permissions::from_mode(mode)).unwrap();
    to
}

/// mTLS: with the client certificate (in the URL, or in [`PgOptions`]) the role that requires
/// one connects and the journal works; without it, or with a key others can read, it does not,
/// and the error says what to do.
#[test]
fn a_server_that_requires_a_client_certificate_gets_one() {
    let Some(url) = support::pg_url("a_server_that_requires_a_client_certificate_gets_one") else {
        return;
    };
    let Some(tls) = support::tls_dir("a_server_that_requires_a_client_certificate_gets_one") else {
        return;
    };
    let (ca, cert, key) = (tls.join("ca.crt"), tls.join("client.crt"), tls.join("client.key"));
    runtime().block_on(async {
        let verify = format!("sslmode=verify-full&sslrootcert={}", ca.display());
        let with_cert = url_as(
            &url,
            "effect_tool_mtls",
            &format!("{verify}&sslcert={}&sslkey={}", cert.display(), key.display()),
        );
        let store = PostgresStore::connect_with(&with_cert, options(&support::schema("mtls")))
            .await
            .unwrap_or_else(|e| panic!("the client certificate in the URL: {e}"));
        store
            .claim("k", crate::common::intent("mtls"), 30_000, false)
            .await
            .unwrap();
        assert!(store.get("k").await.unwrap().is_some());

        // The same through the options (the URL names no certificate).
        let bare = url_as(&url, "effect_tool_mtls", &verify);
        let given = PgOptions {
            ssl_cert: Some(cert.clone()),
            ssl_key: Some(key.clone()),
            ..options(&support::schema("mtls_opt"))
        };
        PostgresStore::connect_with(&bare, given)
            .await
            .unwrap_or_else(|e| panic!("the client certificate in PgOptions: {e}"));

        // The control: without a certificate the server refuses the role.
        let err = PostgresStore::connect_with(&bare, options(&support::schema("mtls_none")))
            .await
            .expect_err("the server requires a client certificate")
            .to_string();
        assert!(err.contains("certificate"), "{err}");

        // A key the group or others can read is refused before connecting, as libpq does.
        let scratch = support::ScratchDir::new("mtls-key");
        let open_key = copy_with_mode(&key, &scratch.0, 0o644);
        let loose = url_as(
            &url,
            "effect_tool_mtls",
            &format!("{verify}&sslcert={}&sslkey={}", cert.display(), open_key.display()),
        );
        let err = PostgresStore::connect_with(&loose, options(&support::schema("mtls_loose")))
            .await
            .expect_err("a world-readable key is refused")
            .to_string();
        assert!(err.contains("chmod 0600"), "{err}");
    });
}

/// `sslmode=prefer` (the default) against a server that accepts TLS but refuses this role over
/// it: the TLS attempt fails, and the store connects in plain TCP, as libpq does.
/// `sslmode=require` does not fall back.
#[test]
fn prefer_falls_back_to_plain_tcp_after_a_failed_tls_attempt() {
    let Some(url) = support::pg_url("prefer_falls_back_to_plain_tcp_after_a_failed_tls_attempt") else {
        return;
    };
    runtime().block_on(async {
        let prefer = url_as(&url, "effect_tool_plain_only", "sslmode=prefer&application_name=et-prefer-fallback");
        let store = PostgresStore::connect_with(&prefer, options(&support::schema("prefer")))
            .await
            .unwrap_or_else(|e| panic!("prefer must fall back to plain TCP: {e}"));
        store
            .claim("k", crate::common::intent("prefer"), 30_000, false)
            .await
            .unwrap();
        // The store's sessions are plain TCP ones.
        let raw = support::raw(&url).await;
        let rows = raw
            .query(
                "SELECT s.ssl FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) WHERE a.application_name = 'et-prefer-fallback'",
                &[],
            )
            .await
            .unwrap();
        assert!(!rows.is_empty(), "the store's sessions are on the server");
        assert!(rows.iter().all(|r| !r.get::<_, bool>(0)), "plain TCP sessions");

        let require = url_as(&url, "effect_tool_plain_only", "sslmode=require");
        PostgresStore::connect_with(&require, options(&support::schema("require")))
            .await
            .expect_err("require never falls back to plain TCP");
    });
}

/// `application_name` (URL) names the store's sessions on the server, and libpq's `options`
/// parameter reaches the server: a server-side `statement_timeout` turns a statement stuck
/// behind a lock into a clean error long before the client's own timeout.
#[test]
fn application_name_and_a_server_statement_timeout() {
    let Some(url) = support::pg_url("application_name_and_a_server_statement_timeout") else {
        return;
    };
    runtime().block_on(async {
        let schema = support::schema("stmt_timeout");
        let named = format!("{url}?application_name=et-named-store&options=-c%20statement_timeout%3D200");
        let store = PostgresStore::connect_with(
            &named,
            PgOptions {
                statement_timeout: Duration::from_secs(20),
                ..options(&schema)
            },
        )
        .await
        .unwrap();
        store
            .claim("k", crate::common::intent("named"), 30_000, false)
            .await
            .unwrap();
        let raw = support::raw(&url).await;
        let n: i64 = raw
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'et-named-store'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert!(n >= 1, "the store's sessions carry its application_name");

        // Hold the records table locked; the store's read waits behind it until the server's
        // statement_timeout (200 ms) cancels it, not the client's (20 s).
        raw.batch_execute(&format!(
            "BEGIN; LOCK TABLE \"{schema}\".records IN ACCESS EXCLUSIVE MODE"
        ))
        .await
        .unwrap();
        let started = std::time::Instant::now();
        let err = store.get("k").await.expect_err("cancelled by the server").to_string();
        raw.batch_execute("ROLLBACK").await.unwrap();
        assert!(err.contains("57014"), "the server's statement timeout: {err}");
        eprintln!("server-side statement_timeout answered after {:?}", started.elapsed());
    });
}
