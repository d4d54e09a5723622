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
//! The modules are the layers, lowest first; a layer uses only the ones before it
//! (`scripts/layers.py` checks it):
//!
//! - [`value`]: classes, canonical JSON, outcomes, markers, the schemas providers accept;
//! - [`decide`]: the retry policy and the record's one state machine;
//! - [`call`]: a call's context, errors, the `Tool` trait, effect keys;
//! - [`store`]: the journal and its backends;
//! - [`engine`]: the call algorithm, compensation, the object-safe tool;
//! - [`toolkit`]: what a model talks to (export, validation, dispatch, the manifest);
//! - [`ops`]: what operators use (notifications, gauges; with features, Prometheus and the console);
//! - [`adapters`]: with features, an MCP server and rig tools;
//! - `testing` (feature `testing`): the testing kit, the simulation and the backends' conformance suite.
//!
//! The names at the root are what a user of the attribute needs.

#![warn(missing_docs)]
// docs.rs (`--cfg docsrs`, nightly): each feature-gated item says which feature it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod value;

pub mod decide;

pub mod call;

pub mod store;

pub mod engine;

pub mod toolkit;

pub mod ops;

pub mod adapters;

#[cfg(feature = "testing")]
pub mod testing;

pub use call::context::{EffectCtx, ProgressEvent, ProgressSink, RunContext};
pub use call::error::{ApprovalPending, BlockReason, EffectError, SideEffectRetryBlocked, StoreError};
pub use call::tool::{Injected, KeyRule, Tool, ToolMeta, check_values, missing_value};
pub use decide::policy::{Decision, RetryPolicy};
pub use decide::record::{EffectRecord, RecordState, Verdict};
pub use engine::compensation::AbandonReport;
pub use engine::dyn_tool::DynTool;
pub use engine::{CallEvent, CallOptions, CallReport, Disposition, Engine, EngineConfig, EngineEvent, RunHandle};
pub use store::{Filter, MemoryStore, Store, StoreExt};
pub use toolkit::{Dispatcher, ToolCall, ToolOutcome, ToolResult, Toolkit};
pub use value::class::{EffectClass, Window};
pub use value::outcome::{ClassifyError, Failure, Outcome, ToolError};

pub use tokio_util::sync::CancellationToken;

mod moved;
#[allow(deprecated)]
pub use moved::*;
