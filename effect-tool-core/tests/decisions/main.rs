//! The decision core, stated exactly: the record state machine and the policy, keys, RFC 8785
//! canonical JSON (the reference vectors), markers, property tests, and what fuzzing found.
//!
//! One test binary for all of them (each binary links the whole crate): a test is named
//! `<file>::<test>`, e.g. `cargo test -p effect-tool-core --all-features --test decisions jcs::`.

mod callback_decisions;
mod decision_core;
mod fuzz_regressions;
mod grants;
mod identity;
mod jcs;
mod key_props;
mod record_mutants;
