//! What operators use (`effect_tool::ops`): the web console and its HTTP API (roles, hosts and
//! origins, stale pages, outputs a person records, a real browser), and people told through
//! `on_needs_person` and webhooks.
//!
//! One test binary for all of them (each binary links the whole crate): a test is named
//! `<file>::<test>`, e.g. `cargo test --all-features --test ops console_api::`.

#[path = "../common/mod.rs"]
mod common;

mod approvals_stale;
mod callback_webhook;
mod console_api;
mod console_browser;
mod console_edit_browser;
mod console_grants_browser;
mod console_hosts;
mod console_identities;
mod console_policy_browser;
mod console_roles;
mod outputs_resolved;
mod people_notify;
mod webhook_hardening;
