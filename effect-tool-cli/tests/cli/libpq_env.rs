//! The PostgreSQL journal reads libpq's environment as `psql` does: a `postgres://` URL that
//! names nothing connects where `PGHOST`, `PGPORT`, `PGUSER` and `PGDATABASE` say, through the
//! real binary against the test server. (The password file's matching is unit-tested in
//! `store/postgres/libpq.rs`: the test server trusts its local users, so a password it does not
//! check proves nothing here.)

use crate::common;

#[test]
fn a_bare_url_connects_where_the_pg_variables_say() {
    let Some(url) = std::env::var("EFFECT_TOOL_PG_URL").ok().filter(|u| !u.is_empty()) else {
        assert!(
            std::env::var("EFFECT_TOOL_REQUIRE_PG").as_deref() != Ok("1"),
            "EFFECT_TOOL_REQUIRE_PG=1 but EFFECT_TOOL_PG_URL is unset"
        );
        eprintln!("*** SKIPPED a_bare_url_connects_where_the_pg_variables_say: EFFECT_TOOL_PG_URL is unset ***");
        return;
    };
    // postgres://USER@HOST:PORT/DB
    let rest = url.strip_prefix("postgres://").expect("a postgres:// URL");
    let (user, rest) = rest.split_once('@').expect("a user");
    let (host_port, db) = rest.split_once('/').expect("a database");
    let db = db.split('?').next().unwrap();
    let (host, port) = host_port.split_once(':').expect("a port");
    let env = [("PGHOST", host), ("PGPORT", port), ("PGUSER", user), ("PGDATABASE", db)];

    let out = common::run(
        &["--store", "postgres://", "list", "--json", "--limit", "1"],
        None,
        &env,
    );
    out.ok();
    // The control: the same command without PGPORT goes to port 5432, where nobody listens.
    let out = common::run(&["--store", "postgres://", "list"], None, &env[..1]);
    assert_ne!(out.code, 0, "{}", out.stdout);
}

/// `PGSSLCERT` and `PGSSLKEY` give the client certificate, as with `psql`: the role
/// `effect_tool_mtls` of the test server needs one (`clientcert=verify-full`), and the same
/// command without them is refused.
#[test]
fn pgsslcert_and_pgsslkey_give_the_client_certificate() {
    let (Some(url), Some(ca)) = (
        std::env::var("EFFECT_TOOL_PG_URL").ok().filter(|u| !u.is_empty()),
        std::env::var("EFFECT_TOOL_PG_CA").ok().filter(|u| !u.is_empty()),
    ) else {
        assert!(
            std::env::var("EFFECT_TOOL_REQUIRE_PG").as_deref() != Ok("1"),
            "EFFECT_TOOL_REQUIRE_PG=1 but EFFECT_TOOL_PG_URL or EFFECT_TOOL_PG_CA is unset"
        );
        eprintln!(
            "*** SKIPPED pgsslcert_and_pgsslkey_give_the_client_certificate: EFFECT_TOOL_PG_URL or _CA is unset ***"
        );
        return;
    };
    let port = url.rsplit(':').next().unwrap().split('/').next().unwrap();
    let dir = std::path::Path::new(&ca).parent().unwrap();
    let (cert, key) = (dir.join("client.crt"), dir.join("client.key"));
    let store =
        format!("postgres://effect_tool_mtls@localhost:{port}/effect_tool_test?sslmode=verify-full&sslrootcert={ca}");
    let env = [
        ("PGSSLCERT", cert.to_str().unwrap()),
        ("PGSSLKEY", key.to_str().unwrap()),
    ];
    common::run(&["--store", &store, "list", "--json", "--limit", "1"], None, &env).ok();
    let out = common::run(&["--store", &store, "list"], None, &[]);
    assert_ne!(out.code, 0, "refused without a certificate: {}", out.stdout);
}
