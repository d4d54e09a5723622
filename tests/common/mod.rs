//! Helpers shared by the integration tests: the downstream ledger that counts effects where the
//! engine cannot see it, scripted tools, journals that fail on purpose, worker processes, HTTP
//! as the console and MCP clients send it, log capture, and the Python MCP client. Each test
//! binary includes it once (`#[path = "../common/mod.rs"] mod common;` in its `main.rs`, or
//! `mod common;` in a binary of one file); its files reach it as `crate::common`.

// Every test binary compiles this whole module but uses only part of it.
#![allow(dead_code, unused_macros, unused_imports)]

#[cfg(all(feature = "console", feature = "sqlite"))]
pub mod browser;
pub mod capture;
#[cfg(all(feature = "console", feature = "sqlite"))]
pub mod console;
pub mod desk;
pub mod http;
pub mod journal;
pub mod ledger;
pub mod mail;
#[cfg(feature = "mcp")]
pub mod mcp;
pub mod own_postgres;
pub mod python;
pub mod script;
pub mod snapshot;
pub mod transact;
pub mod worker;

use std::time::Duration;

use effect_tool::{EngineConfig, RunContext, Tool};

/// A short lease (60 ms) polled every 2 ms, so that stale claims and takeovers happen within a
/// test.
pub fn short() -> EngineConfig {
    EngineConfig {
        lease: Duration::from_millis(60),
        poll_interval: Duration::from_millis(2),
    }
}

/// An engine on `store` with the [`short`] lease, whose journal writes that must not be dropped
/// are retried for 100 ms only (tests whose journal keeps failing then go on at once).
pub fn short_engine(store: impl effect_tool::Store + 'static) -> effect_tool::Engine {
    effect_tool::Engine::with_config(store, short()).with_store_retry(Duration::from_millis(100))
}

/// The run `id` (no thread).
pub fn run(id: &str) -> RunContext {
    RunContext::new(id)
}

/// The journal key the engine uses for `tool` called with `args` in `run`.
pub fn key_of<T: Tool>(tool: &T, run: &RunContext, args: &T::Args) -> String {
    effect_tool::call::key::identify(tool, run, args).unwrap().key
}

/// The one test of a PostgreSQL test binary built without the `postgres` feature: it fails
/// where PostgreSQL is required (`EFFECT_TOOL_REQUIRE_PG=1`, as in CI), else says loudly that
/// `what` was skipped.
pub fn postgres_feature_disabled(what: &str) {
    assert!(
        !effect_tool_core::testing::conformance::postgres_required(),
        "EFFECT_TOOL_REQUIRE_PG=1 but the tests were built without the `postgres` feature: run `cargo test --features postgres`"
    );
    eprintln!("\n*** SKIPPED POSTGRES {what}: built without `--features postgres` ***\n");
}

/// A claim's intent for the store-level tests: tool `t`, run `run_id`, a small input.
pub fn intent(run_id: &str) -> effect_tool::decide::record::Intent {
    effect_tool::decide::record::Intent {
        tool: "t".into(),
        class: effect_tool::EffectClass::Idempotent,
        run_id: run_id.into(),
        thread_id: None,
        call_id: None,
        fingerprint: "f".into(),
        input: serde_json::json!({ "n": 1 }),
        ttl_ms: None,
        approval: None,
        approval_ttl_ms: None,
        holder: None,
    }
}
