//! The journal conformance suite on the in-memory store.
//!
//! Run: `cargo test --test store store_memory::`

use effect_tool_core::testing::conformance::MemoryHarness;

effect_tool_core::conformance_tests!(memory, MemoryHarness);
