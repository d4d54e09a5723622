//! Adapters: the agent frameworks and protocols a toolkit is served through, each behind its
//! feature: `mcp` (an MCP server over stdio and Streamable HTTP) and `rig` (rig tools).

#[cfg(feature = "mcp")]
pub mod mcp;
#[cfg(feature = "rig")]
pub mod rig;
