//! Operations: what the people who run agents use, built on the engine and the journal.
//!
//! [`notify`] (needs-a-person notifications, webhooks), [`gauges`] (the journal's records needing
//! a person, as gauges); with features, `prometheus` (the `/metrics` endpoint) and `console`
//! (the operator console and its JSON API) and `identity` (the identities file: who is who
//! across the console, MCP and the CLI).

#[cfg(feature = "callback-webhook")]
pub mod callback;
#[cfg(feature = "console")]
pub mod console;
pub mod gauges;
#[cfg(feature = "console")]
pub mod identity;
pub mod notify;
#[cfg(feature = "prometheus")]
pub mod prometheus;
