//! Transactional tools (`#[tool(transactional)]`) through a real PgBouncer in transaction
//! pooling mode (`pgbouncer=true`): the whole call (claim, the tool's statements, record,
//! commit) is one transaction, which the pooler keeps on one server session. The same cases
//! as `tests/store/transactional.rs` on PostgreSQL: one payment then replays, a failure after
//! the write leaves nothing, two workers racing one key pay once, and a child process
//! SIGKILLed at every step of the call leaves all or nothing, never a record in doubt. The
//! payments are counted on the server itself, not through the pooler.

use effect_tool_core::testing::conformance::{Availability, Harness, PG_URL_ENV};

use super::bouncer::PgBouncerHarness;
use crate::common::transact::{self, Db};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap()
}

/// The journal through the pooler, the table counted on the server; `None` when PgBouncer or
/// the server is missing (skipped loudly, or a failure where PostgreSQL is required).
fn db(case: &str) -> Option<Db> {
    if let Availability::Unavailable { reason, required } = PgBouncerHarness::availability() {
        assert!(!required, "PgBouncer case `{case}` is required here: {reason}");
        eprintln!("\n*** SKIPPED PgBouncer transactional case `{case}`: {reason} ***\n");
        return None;
    }
    let server = std::env::var(PG_URL_ENV).unwrap();
    Some(Db::postgres(&PgBouncerHarness::url(), &server))
}

#[test]
fn executes_once_then_replays() {
    let Some(db) = db("executes_once_then_replays") else {
        return;
    };
    runtime().block_on(transact::executes_once_then_replays(&db));
}

#[test]
fn a_failure_after_the_write_leaves_nothing() {
    let Some(db) = db("a_failure_after_the_write_leaves_nothing") else {
        return;
    };
    runtime().block_on(transact::a_failure_after_the_write_leaves_nothing(&db));
}

#[test]
fn racing_calls_of_one_key_pay_once() {
    let Some(db) = db("racing_calls_of_one_key_pay_once") else {
        return;
    };
    runtime().block_on(transact::racing_calls_of_one_key_pay_once(&db));
}

#[test]
fn crash_at_every_step_pays_once_and_leaves_nothing_in_doubt() {
    let Some(db) = db("crash_at_every_step") else { return };
    let dir = tempfile::tempdir().unwrap();
    runtime().block_on(transact::crash_at_every_step(
        &db,
        "transactional_bouncer::child_process",
        dir.path(),
    ));
}

/// The entry point of the crash cases' child processes.
#[test]
#[ignore = "entry point of the transactional crash cases' child processes; run by them"]
fn child_process() {
    transact::child_main();
}
