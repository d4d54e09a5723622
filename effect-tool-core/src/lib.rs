//! # effect-tool-core
//!
//! The runtime behind `#[tool(effect = "...")]`: make LLM-agent tool calls safe to run again.
//!
//! ```ignore
//! #[tool(effect = "idempotent", key = |a| format!("refund:{}:{}", a.order_id, a.amount_cents))]
//! async fn issue_refund(ctx: &EffectCtx, order_id: String, amount_cents: u64) -> Result<Refund, PayError>
//! ```
//!
//! Every call of a non-pure tool is journaled under an effect key. A recorded result is
//! returned instead of running again; parallel identical calls share one execution; an
//! unknown outcome is reconciled through the tool's `recover` hook, re-run with the same key
//! (idempotent), or stopped with [`SideEffectRetryBlocked`] so a person decides.
//!
//! The parts, a module each: [`class`] (effect classes), [`canonical`] (RFC 8785) and [`key`]
//! (effect keys), [`marker`], [`context`], [`outcome`] (failure classification), [`policy`],
//! [`record`] (the record state machine), [`store`] (the journal and its backends),
//! [`engine`] (the call algorithm), [`compensation`] (abandoning a run), [`error`],
//! [`tool`] and [`dyn_tool`] (the tool traits), [`stream`] (tools that yield progress),
//! [`schema`] (the schemas providers accept), [`manifest`] (declarations as text for review),
//! [`toolkit`] (what a model talks to); with features, `mcp` (an MCP server), `rig` (rig tools),
//! `testing` and `conformance` (the testing kit and the backends' conformance suite).

#![warn(missing_docs)]
// docs.rs (`--cfg docsrs`, nightly): each feature-gated item says which feature it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod canonical;
pub mod class;
pub mod compensation;
#[cfg(feature = "testing")]
pub mod conformance;
#[cfg(feature = "console")]
pub mod console;
pub mod context;
pub mod dyn_tool;
pub mod engine;
pub mod error;
pub mod gauges;
pub mod key;
pub mod manifest;
pub mod marker;
#[cfg(feature = "mcp")]
pub mod mcp;
pub mod notify;
pub mod outcome;
pub mod policy;
#[cfg(feature = "prometheus")]
pub mod prometheus;
pub mod record;
#[cfg(feature = "rig")]
pub mod rig;
pub mod schema;
pub mod shell;
pub mod store;
pub mod stream;
#[cfg(feature = "testing")]
pub mod testing;
pub mod tool;
pub mod toolkit;

pub use class::{EffectClass, Window};
pub use compensation::AbandonReport;
pub use context::{EffectCtx, ProgressEvent, ProgressSink, RunContext};
pub use dyn_tool::DynTool;
pub use engine::{CallEvent, CallReport, Disposition, EngineEvent, RunHandle};
pub use engine::{CallOptions, Engine, EngineConfig};
pub use error::{ApprovalPending, BlockReason, EffectError, SideEffectRetryBlocked, StoreError};
pub use outcome::{ClassifyError, Failure, Outcome, ToolError};
pub use policy::{Decision, RetryPolicy};
pub use record::{EffectRecord, RecordState, Verdict};
pub use store::{Filter, MemoryStore, Store, StoreExt};
pub use tool::{Injected, KeyRule, Tool, ToolMeta, check_values, missing_value};
pub use toolkit::{Dispatcher, ToolCall, ToolOutcome, ToolResult, Toolkit};

pub use tokio_util::sync::CancellationToken;
