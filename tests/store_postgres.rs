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
