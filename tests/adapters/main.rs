//! The adapters (`effect_tool::adapters`): the MCP server over stdio and Streamable HTTP, driven
//! by the official Python SDK's clients and by raw HTTP (principals, limits, sessions), and
//! declared tools inside a real rig agent.
//!
//! One test binary for all of them (each binary links the whole crate): a test is named
//! `<file>::<test>`, e.g. `cargo test --all-features --test adapters mcp_principals::`.

#[path = "../common/mod.rs"]
mod common;

mod gateway;
mod gateway_servers;
mod http_idempotency;
mod mcp_http_limits;
mod mcp_http_python_client;
mod mcp_output_keys;
mod mcp_principals;
mod mcp_progress_python_client;
mod mcp_stdio_python_client;
mod mcp_tasks;
mod rig_agent;
