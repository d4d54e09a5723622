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
//! Applications depend on the facade, `effect-tool`, which re-exports these modules and the
//! macros, and whose root is what a user of the attribute names. This crate's root keeps the
//! names of earlier releases.

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

pub use call::budget::Budgets;
pub use call::context::{EffectCtx, ProgressEvent, ProgressSink, RunContext};
pub use call::error::{ApprovalPending, BlockReason, EffectError, SideEffectRetryBlocked, StoreError};
pub use call::redact::{Redactor, Site};
pub use call::tool::{Injected, KeyRule, Recovery, Tool, ToolMeta, check_values, missing_value};
pub use call::view::{ModelOutput, ModelPart};
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
// The old path of `call::tool` (not deprecated: see moved.rs). Outside `moved` so that the
// facade, which re-exports the attribute of the same name, can re-export it hidden.
#[doc(hidden)]
pub use call::tool;

/// What the facade (`effect-tool`) re-exports as this crate's features have it: the testing
/// kit and its macros exist when anything in the build turns this crate's `testing` feature on
/// (a dev-dependency does), whatever the facade's own features say; and the old module paths,
/// deprecated, for one release. The facade names everything else one by one. Not an API.
#[doc(hidden)]
pub mod __facade {
    #[allow(deprecated)]
    pub use crate::moved::*;
    #[cfg(feature = "testing")]
    pub use crate::testing;
    #[cfg(feature = "testing")]
    pub use crate::{conformance_tests, crash_tests};
}

/// What only the `effect-tool` command (crate `effect-tool-cli`) uses: shell quoting and
/// escaping for what it prints, and the digests and keys its offline commands compute. Not an
/// API: anything here may change or go in any release, which is why the CLI depends on this
/// crate's exact version. Their old public paths (`shell::quote`, `key::sha256_hex`, ...) are
/// deprecated shims for one release.
#[doc(hidden)]
pub mod __cli {
    pub use crate::value::digest::sha256_hex;
    pub use crate::value::shell::{is_hidden, quote};

    /// `args` without the sensitive top-level fields `secrets` (by serialized name): what the
    /// engine stores, logs and hashes.
    pub fn redact(args: serde_json::Value, secrets: &[&str]) -> serde_json::Value {
        crate::call::key::redact(args, secrets)
    }

    /// The key under which the compensation of the record `key` is journaled.
    pub fn compensation_key(key: &str) -> String {
        crate::engine::compensation::compensation_key(key)
    }
}
