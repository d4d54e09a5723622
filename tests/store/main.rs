//! The journals (`effect_tool::store`): the conformance suite on every store, process death,
//! disk faults, the files a journal makes.
//!
//! One test binary for all of them (each binary links the whole crate): a test is named
//! `<file>::<test>`, e.g. `cargo test --all-features --test store store_memory::`.

#[path = "../common/mod.rs"]
mod common;

mod crash_postgres;
mod crash_sqlite;
mod journal_faults;
mod journal_files;
mod store_memory;
mod store_postgres;
mod store_sqlite;
mod transactional;
