//! Values: what a declaration and a record are made of, knowing nothing of tools, runs or stores.
//!
//! [`class`] (effect classes and key windows), [`canonical`] (RFC 8785 canonical JSON, the bytes
//! keys are hashed from), [`outcome`] (how a tool's failure is classified), [`marker`] (the opaque
//! marker a tool writes into what it sends), [`schema`] (the JSON Schemas providers accept).

pub mod canonical;
pub mod class;
pub(crate) mod commands;
// The SHA-256 hex of keys and ids, and shell quoting for printed commands: used inside the
// crate, and by the CLI through `crate::__cli` (not an API).
pub mod callback;
pub(crate) mod digest;
pub mod marker;
pub mod outcome;
pub mod schema;
pub(crate) mod shell;
