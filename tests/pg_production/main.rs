//! PostgreSQL in production (issue 17): through PgBouncer in transaction pooling mode, client
//! certificates and libpq's `sslmode=prefer`, `LISTEN`/`NOTIFY` across store objects, and a
//! failover of a primary to its synchronous standby under worker processes.
//!
//! Needs `EFFECT_TOOL_PG_URL` (`eval "$(.ci/postgres.sh start)"`), `--features postgres`, and
//! for the pooler cases Debian's `pgbouncer` (`scripts/test.sh` installs it). Without them the
//! cases print a loud SKIPPED line and pass, unless `EFFECT_TOOL_REQUIRE_PG=1` (CI), where they
//! fail. The servers of their own (PgBouncer, the primary and standby) are started on free
//! ports by the cases and stopped by them, also when they fail.

//!
//! One test binary (as `tests/engine/` and the others, see TESTING.md, "Layout"): a test is named
//! `<file>::<test>`, e.g. `cargo test --all-features --test pg_production failover::`.

#[path = "../common/mod.rs"]
mod common;

#[cfg(feature = "postgres")]
mod bouncer;
#[cfg(feature = "postgres")]
mod certificates;
#[cfg(feature = "postgres")]
mod failover;
#[cfg(feature = "postgres")]
mod notify;
#[cfg(feature = "postgres")]
mod pgpass;
#[cfg(feature = "postgres")]
mod retention;
#[cfg(feature = "postgres")]
mod sslmodes;
#[cfg(feature = "postgres")]
mod support;
#[cfg(feature = "postgres")]
mod transactional_bouncer;

/// Built without the `postgres` feature: nothing to run, which CI must not accept.
#[cfg(not(feature = "postgres"))]
#[test]
fn postgres_feature_disabled() {
    common::postgres_feature_disabled("production cases (PgBouncer, certificates, notify, failover)");
}
