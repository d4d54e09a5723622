//! Transactional tools (`#[tool(transactional)]`): the effect is a row in the application's
//! own table, in the database that holds the journal, written in the journal's transaction.
//! On SQLite and PostgreSQL: one call pays once and replays after; a tool that fails after
//! its write leaves neither the row nor a record; two workers racing one key pay once; a child
//! process SIGKILLed at every step of the call (after the claim, after the write, after the
//! record, after the commit) leaves all or nothing, never a record in doubt, and the
//! restarted call pays exactly once. The memory store, which has no transactions, refuses the
//! tool before it runs, saying which store to use.
//!
//! Run: `cargo test --all-features --test store transactional::` (PostgreSQL cases need
//! `EFFECT_TOOL_PG_URL`; they skip loudly without it, and fail where it is required).

use std::sync::atomic::{AtomicUsize, Ordering};

use effect_tool::{CallOptions, Disposition, EffectCtx, Engine, MemoryStore, RunContext, ToolError, tool};

use crate::common::transact::{self, Db};

fn scratch() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap()
}

#[cfg(feature = "sqlite")]
mod sqlite {
    use super::*;

    #[test]
    fn executes_once_then_replays() {
        let dir = scratch();
        runtime().block_on(transact::executes_once_then_replays(&Db::sqlite(dir.path())));
    }

    #[test]
    fn a_failure_after_the_write_leaves_nothing() {
        let dir = scratch();
        runtime().block_on(transact::a_failure_after_the_write_leaves_nothing(&Db::sqlite(
            dir.path(),
        )));
    }

    #[test]
    fn racing_calls_of_one_key_pay_once() {
        let dir = scratch();
        runtime().block_on(transact::racing_calls_of_one_key_pay_once(&Db::sqlite(dir.path())));
    }

    #[test]
    fn crash_at_every_step_pays_once_and_leaves_nothing_in_doubt() {
        let dir = scratch();
        runtime().block_on(transact::crash_at_every_step(
            &Db::sqlite(dir.path()),
            "transactional::child_process",
            dir.path(),
        ));
    }
}

#[cfg(feature = "postgres")]
mod postgres {
    use effect_tool_core::testing::conformance::{Availability, Harness, PG_URL_ENV, PostgresHarness};

    use super::*;

    /// The server's URL, or `None` (the case is skipped loudly, or fails where PostgreSQL is
    /// required).
    fn db(case: &str) -> Option<Db> {
        if let Availability::Unavailable { reason, required } = PostgresHarness::availability() {
            assert!(!required, "PostgreSQL case `{case}` is required here: {reason}");
            eprintln!("\n*** SKIPPED PostgreSQL transactional case `{case}`: {reason} ***\n");
            return None;
        }
        let url = std::env::var(PG_URL_ENV).unwrap();
        Some(Db::postgres(&url, &url))
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
        let dir = scratch();
        runtime().block_on(transact::crash_at_every_step(
            &db,
            "transactional::child_process",
            dir.path(),
        ));
    }
}

/// The entry point of the crash cases' child processes (run by them, with their job in the
/// environment).
#[test]
#[ignore = "entry point of the transactional crash cases' child processes; run by them"]
fn child_process() {
    transact::child_main();
}

static RAN: AtomicUsize = AtomicUsize::new(0);

/// Book a seat in the application's table, in the journal's transaction.
#[tool(effect = "idempotent", transactional, key(seat))]
async fn book_seat(
    _ctx: &EffectCtx,
    /// The seat.
    seat: String,
) -> Result<String, ToolError> {
    RAN.fetch_add(1, Ordering::SeqCst);
    Ok(format!("booked {seat}"))
}

/// A store without transactions refuses a transactional tool before it runs, and says which
/// stores have them.
#[test]
fn the_memory_store_refuses_a_transactional_tool_before_it_runs() {
    runtime().block_on(async {
        let engine = Engine::new(MemoryStore::new());
        let run = RunContext::new("tx-memory");
        let args = BookSeatArgs { seat: "12A".into() };
        let report = engine
            .call_with_report(&BookSeat, &run, CallOptions::default(), args)
            .await;
        let err = report.result.expect_err("refused");
        assert_eq!(report.disposition, Disposition::Failed);
        let text = err.to_string();
        for needed in [
            "book_seat",
            "transactional",
            "memory",
            "SqliteStore::open",
            "PostgresStore::connect",
            "nothing ran",
        ] {
            assert!(text.contains(needed), "`{needed}` missing from: {text}");
        }
        assert_eq!(RAN.load(Ordering::SeqCst), 0, "the tool never ran");
        assert!(
            engine.store().get(&report.key.unwrap()).await.unwrap().is_none(),
            "nothing journaled"
        );
    });
}

/// Outside a transactional call, `ctx.transaction()` says what is missing and what to do.
#[test]
fn a_context_without_a_transaction_says_how_to_get_one() {
    let ctx = EffectCtx::detached(RunContext::new("r"), "book_seat", effect_tool::EffectClass::Idempotent);
    #[cfg(feature = "sqlite")]
    {
        let err = ctx
            .transaction::<effect_tool::store::sqlite::SqliteTransaction>()
            .expect_err("no transaction");
        let text = err.to_string();
        assert!(
            text.contains("#[tool(transactional)]") && text.contains("SQLite"),
            "{text}"
        );
    }
    assert!(ctx.transaction::<String>().is_err());
}
