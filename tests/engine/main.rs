//! The engine (`effect_tool::engine`) and what it decides with: calls, replays, races, faults
//! (real processes and signals), people in the loop and approvals as the journal sees them,
//! keys and markers (`call::key`, `value::marker`) as calls use them, what code is told at the
//! edges, and the testing kit (`testing`) that drives the engine twice and across a crash.
//!
//! One test binary for all of them (each binary links the whole crate): a test is named
//! `<file>::<test>`, e.g. `cargo test --all-features --test engine engine_core::`.

#[path = "../common/mod.rs"]
mod common;

mod approvals_bind;
mod approvals_edit;
mod approvals_granted;
mod approvals_ttl;
mod budgets;
mod declared_names;
mod engine_cancellation;
mod engine_core;
mod engine_faults_hang;
mod engine_faults_pause;
mod engine_faults_restart;
mod engine_faults_shutdown;
mod engine_faults_store;
mod engine_matrix;
mod engine_people;
mod engine_races;
mod keys_big_integers;
mod markers_forged;
mod markers_opaque;
#[cfg(feature = "policy")]
mod policy_cedar;
mod reconcile_no_caller;
mod reconcile_overdue;
mod testing_kit;
mod truth_edges;
