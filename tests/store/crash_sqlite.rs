//! Real process death on SQLite: a child process applies an effect (a line in a ledger file)
//! and is SIGKILLed before it records it; the restarted call reconciles through `recover`,
//! re-runs an idempotent tool with the same idempotency key (the ledger dedupes), or stops an
//! irreversible one with `SideEffectRetryBlocked`. Never a silent second effect.
//!
//! Run: `cargo test --test store crash_sqlite::`

use effect_tool_core::testing::conformance::SqliteHarness;

effect_tool_core::crash_tests!(sqlite, SqliteHarness);
