//! The journal conformance suite on SQLite, including several processes racing the same keys
//! on one file.
//!
//! Run: `cargo test --test store_sqlite`

use effect_tool_core::conformance::SqliteHarness;

effect_tool_core::conformance_tests!(sqlite, SqliteHarness, durable);
