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
