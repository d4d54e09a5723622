//! # effect-tool
//!
//! Make LLM-agent tool calls safe to run again: declare what running a tool twice does, and
//! the runtime journals the call under an effect key, returns recorded results instead of
//! re-running, reconciles unknown outcomes, and otherwise stops with
//! [`SideEffectRetryBlocked`] so a person decides.
//!
//! This crate is the facade: it re-exports [`effect_tool_core`] and the `#[tool]` attribute.

#![warn(missing_docs)]

pub use effect_tool_core::*;
