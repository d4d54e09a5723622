//! What `#[tool]` and `#[tools]` generate (the `effect-tool-macros` crate), at run time: names,
//! constants, keys, approval, hooks, strict schemas, serde attributes on arguments, and the two
//! kinds of protected values (`#[secret]`, `#[sensitive]`). The compile-fail cases are the
//! `ui-tests` crate's; the crate-level lints, `tests/macro_lints.rs`.
//!
//! One test binary for all of them (each binary links the whole crate): a test is named
//! `<file>::<test>`, e.g. `cargo test --all-features --test macros macro_basic::`.

#[path = "../common/mod.rs"]
mod common;

mod decl_secrets;
mod decl_serde;
mod macro_basic;
mod macro_one_write;
mod macro_runtime;
mod macro_stream;
mod macro_strict;
