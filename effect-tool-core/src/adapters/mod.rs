//! Adapters: the agent frameworks and protocols a toolkit is served through, each behind its
//! feature: `mcp` (an MCP server over stdio and Streamable HTTP) and `rig` (rig tools); and
//! `http`, the HTTP client a tool calls an API with, sending the effect key as `Idempotency-Key`.

#[cfg(feature = "http")]
pub mod http;
#[cfg(feature = "mcp")]
pub mod mcp;
#[cfg(feature = "rig")]
pub mod rig;
