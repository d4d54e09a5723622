//! Calls: what one call of a tool is made of, knowing nothing of stores' internals or the engine.
//!
//! [`budget`] (what a run may spend), [`error`] (what a call can end with), [`context`] (`RunContext`, `EffectCtx`: the run and
//! what a tool sees of its call), [`tool`] (the `Tool` trait the attribute implements),
//! [`key`] (effect keys, fingerprints, redaction), [`stream`] (tools that yield progress),
//! [`view`] (what the model reads of an output, `to_model`), [`redact`] (the engine's redaction
//! hook).

pub mod budget;
pub mod callback;
pub mod context;
pub mod error;
pub mod key;
pub(crate) mod lease;
pub mod redact;
pub mod stream;
pub mod tool;
pub mod view;
