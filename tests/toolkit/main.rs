//! What a model talks to (`effect_tool::toolkit`, and the schemas of `value::schema` it
//! exports): dispatch of a model's turn, the texts and errors the model reads, schemas per
//! provider, the manifest, sensitive values kept from the model.
//!
//! One test binary for all of them (each binary links the whole crate): a test is named
//! `<file>::<test>`, e.g. `cargo test --all-features --test toolkit dispatch_turns::`.

#[path = "../common/mod.rs"]
mod common;

mod approvals_model_text;
mod dispatch_identical;
mod dispatch_truth;
mod dispatch_turns;
mod dispatch_wire;
mod macro_manifest;
mod model_errors;
mod model_view;
mod schema_dialects;
mod schema_snapshots;
mod sensitive_names;
