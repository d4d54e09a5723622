//! What `#[tool]` declares and what the model sees: the macro at run time, serde and protected
//! values, schemas per provider, dispatch, the model's errors, the MCP server and the rig adapter.
//!
//! One test binary for all of them (each binary links the whole crate): a test is named
//! `<file>::<test>`, e.g. `cargo test --all-features --test declarations macro_basic::`.

#[path = "../common/mod.rs"]
mod common;

mod decl_secrets;
mod decl_serde;
mod dispatch_identical;
mod dispatch_truth;
mod dispatch_turns;
mod dispatch_wire;
mod macro_basic;
mod macro_manifest;
mod macro_runtime;
mod macro_strict;
mod mcp_http_limits;
mod mcp_http_python_client;
mod mcp_principals;
mod mcp_stdio_python_client;
mod model_errors;
mod rig_agent;
mod schema_dialects;
mod schema_snapshots;
mod sensitive_names;
