//! The `effect-tool` command as an operator runs it: the real binary against real journals
//! (SQLite files, the test PostgreSQL), its offline commands, `serve`, and the libpq
//! configuration it reads.
//!
//! One test binary for all of them (each binary links the whole crate): a test is named
//! `<file>::<test>`, e.g. `cargo test -p effect-tool-cli --test cli flows::`.

#[path = "../common/mod.rs"]
mod common;

mod flows;
mod grants;
mod identities;
mod libpq_env;
mod manifest_review;
mod markers;
mod offline_commands;
mod policy_check;
mod quoted_commands;
mod serve;
mod serve_hosts;
mod store_commands;
