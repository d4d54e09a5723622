//! Real process death on PostgreSQL (see `crash_sqlite.rs`).
//!
//! Needs `EFFECT_TOOL_PG_URL` (`eval "$(.ci/postgres.sh start)"`) and `--features postgres`;
//! skips loudly without it, unless `EFFECT_TOOL_REQUIRE_PG=1` (CI), where it fails.

#[cfg(feature = "postgres")]
use effect_tool_core::testing::conformance::PostgresHarness;

#[cfg(feature = "postgres")]
effect_tool_core::crash_tests!(postgres, PostgresHarness);

/// Built without the `postgres` feature: nothing to run, which CI must not accept.
#[cfg(not(feature = "postgres"))]
#[test]
fn postgres_feature_disabled() {
    crate::common::postgres_feature_disabled("crash tests");
}
