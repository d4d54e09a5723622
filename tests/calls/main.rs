//! The engine's behaviour: calls, replays, races, faults (real processes and signals), people in
//! the loop, approvals, the testing kit.
//!
//! One test binary for all of them (each binary links the whole crate): a test is named
//! `<file>::<test>`, e.g. `cargo test --all-features --test calls engine_core::`.

#[path = "../common/mod.rs"]
mod common;

mod approvals_bind;
mod approvals_stale;
mod console_api;
mod console_browser;
mod console_hosts;
mod console_roles;
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
mod http_idempotency;
mod keys_big_integers;
mod markers_forged;
mod markers_opaque;
mod outputs_resolved;
mod people_notify;
mod testing_kit;
mod truth_edges;
mod webhook_hardening;
