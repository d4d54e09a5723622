//! # effect-tool
//!
//! Make LLM-agent tool calls safe to run again: one line next to the function declares what
//! running it twice does.
//!
//! ```
//! use effect_tool::{EffectCtx, Tool, ToolError, tool, toolkit};
//!
//! /// Refund part of an order.
//! #[tool(effect = "idempotent", key(order_id, amount_cents), ttl = "24h")]
//! async fn issue_refund(ctx: &EffectCtx, order_id: String, amount_cents: u64) -> Result<String, ToolError> {
//!     // Pass `ctx.idempotency_key()` to the payment system: the same on every attempt.
//!     Ok(format!("re_{order_id}_{amount_cents}_{}", ctx.attempt()))
//! }
//!
//! let toolkit = toolkit![IssueRefund];
//! assert_eq!(IssueRefund::NAME, "issue_refund");
//! assert!(toolkit.manifest().contains("issue_refund class=idempotent key=fields(order_id, amount_cents)"));
//! ```
//!
//! What that line guarantees: every call of a non-pure tool is journaled under its effect key;
//! a call whose key is recorded returns the recorded result instead of running again; parallel
//! identical calls share one execution; an unknown outcome (a crash or a timeout after sending) is reconciled
//! through the tool's `recover` hook, run again with the same key if the tool is idempotent,
//! or otherwise stopped with [`SideEffectRetryBlocked`] so a person decides. A tool that
//! declares no effect class does not compile.
//!
//! This crate is the facade over the runtime crate, `effect-tool-core`, and the macros: every
//! path below is `effect_tool::...`. The root holds what a user of the attribute names
//! (declaring tools, calling them, reading the journal, a model's turn); everything else is in
//! the modules named after the runtime's layers (see [Where things are](#where-things-are)).
//!
//! ## Declaring tools
//!
//! - [`#[tool]`](macro@tool) declares an `async fn` as a tool and generates `IssueRefundArgs` (the arguments,
//!   with their JSON Schema) and `IssueRefund` (the tool type); [`#[tools]`](macro@tools) does the same for
//!   methods of a value holding clients or state. Declarations that are not safe do not compile.
//! - [`toolkit!`] builds a [`Toolkit`] and checks at compile time that names are unique
//!   ([`unique_tool_names!`] only checks).
//! - [`value::schema`] holds the schema rules (what providers accept, OpenAI's strict mode);
//!   [`toolkit::manifest`] the stable text of every declaration, for review.
//! - [`hooks`] documents what a compile error about a declaration names: the shape of a tool's
//!   return, argument and output types and of its `recover` and `compensate` hooks.
//!
//! ## Calling tools
//!
//! Every call of a non-pure tool goes through an [`Engine`] over a journal ([`MemoryStore`],
//! `store::sqlite::SqliteStore`, `store::postgres::PostgresStore`): a call with the same key
//! returns the recorded result instead of running again.
//!
//! ```
//! use std::sync::atomic::{AtomicUsize, Ordering};
//! use effect_tool::{CallOptions, Disposition, EffectCtx, Engine, MemoryStore, RunContext, ToolError, tool};
//!
//! static EMAILS_SENT: AtomicUsize = AtomicUsize::new(0);
//!
//! /// Email a receipt.
//! #[tool(effect = "irreversible", key = |a| format!("receipt:{}", a.order_id))]
//! async fn send_receipt(order_id: String, to: String) -> Result<String, ToolError> {
//!     EMAILS_SENT.fetch_add(1, Ordering::SeqCst);
//!     Ok(format!("receipt for {order_id} sent to {to}"))
//! }
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let engine = Engine::new(MemoryStore::new());
//! let run = RunContext::new("run-1");
//! let args = SendReceiptArgs { order_id: "A-1".into(), to: "ann@example.com".into() };
//!
//! let first = engine.call_with_report(&SendReceipt, &run, CallOptions::call_id("c1"), args.clone()).await;
//! // The model re-plans: the same work under a new tool-call id.
//! let again = engine.call_with_report(&SendReceipt, &run, CallOptions::call_id("c2"), args).await;
//!
//! assert_eq!(first.disposition, Disposition::Executed);
//! assert_eq!(again.disposition, Disposition::Replayed);
//! assert_eq!(first.result.unwrap(), again.result.unwrap());
//! assert_eq!(EMAILS_SENT.load(Ordering::SeqCst), 1);
//! # });
//! ```

//! ## Where things are
//!
//! The modules are the runtime's layers, lowest first; each uses only the ones before it.
//!
//! | module | what it holds |
//! |---|---|
//! | [`value`] | effect classes and key windows, canonical JSON, failures and outcomes, markers, the schemas providers accept |
//! | [`decide`] | the retry policy and the record's one state machine (records, states, operations, the audit trail) |
//! | [`call`] | a call's context and errors, the `Tool` trait, effect keys, streamed results |
//! | [`store`] | the journal: the `Store` trait, [`MemoryStore`], `store::sqlite` and `store::postgres` (features `sqlite`, `postgres`) |
//! | [`engine`] | the call algorithm, compensation, the object-safe tool, events and metrics |
//! | [`toolkit`](mod@toolkit) | what a model talks to: export for each provider, validation, dispatch of a turn, the manifest |
//! | [`ops`] | what operators use: notifications, gauges; with features, Prometheus and the web console |
//! | [`adapters`] | with features, an MCP server (`mcp`, `mcp-http`) and rig tools (`rig`) |
//! | `testing` | feature `testing`: the testing kit, the simulation, the backends' conformance suite and its macros ([`conformance_tests!`](crate::conformance_tests), [`crash_tests!`](crate::crash_tests)) |
//!
//! Paths of earlier releases (`effect_tool::record`, `effect_tool::key`, `effect_tool::Outcome`,
//! ...) still work, deprecated, for one release; the deprecation note names the new path.

#![warn(missing_docs)]
// docs.rs (`--cfg docsrs`, nightly): each feature-gated item says which feature it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]

// The attribute and the macros.
pub use effect_tool_macros::{assert_declared, tool, toolkit, tools, unique_tool_names};

// Declaring a tool: what its body and its declaration name.
pub use effect_tool_core::{
    ClassifyError, EffectClass, EffectCtx, Failure, KeyRule, RetryPolicy, Tool, ToolError, ToolMeta, Toolkit, Window,
};

// Reconciling unknown outcomes: what a recover check found, and the reconciler that needs no
// caller.
pub use effect_tool_core::Recovery;
// What the model reads of an output (`#[tool(to_model = path)]`), and the engine's redaction
// hook.
pub use effect_tool_core::{ModelOutput, ModelPart, Redactor, Site};

// Calling tools: the engine, a run, what a call returns and how it can fail.
pub use effect_tool_core::{
    ApprovalPending, BlockReason, Budgets, CallOptions, CallReport, CancellationToken, Disposition, EffectError,
    Engine, EngineConfig, RunContext, RunHandle, SideEffectRetryBlocked, StoreError,
};

// Watching calls: the engine's events and a tool's progress.
pub use effect_tool_core::{CallEvent, EngineEvent, ProgressEvent, ProgressSink};

// The journal: a store and its records.
pub use effect_tool_core::{EffectRecord, Filter, MemoryStore, RecordState, Store, StoreExt, Verdict};

// A model's turn: the dispatcher, the calls it takes and the results it gives back.
pub use effect_tool_core::{Dispatcher, DynTool, ToolCall, ToolOutcome, ToolResult};

// Everything else, by layer.
pub use effect_tool_core::{adapters, call, decide, engine, ops, store, toolkit, value};

// The testing kit (`testing`) and its macros (`conformance_tests!`, `crash_tests!`) when the
// core's feature `testing` is on, by this crate's feature or by anything else in the build (a
// dev-dependency on `effect-tool-core` with `testing`, as this crate's own tests have); and the
// module paths of earlier releases, deprecated (each names its new path).
#[allow(deprecated)]
pub use effect_tool_core::__facade::*;
// The old module path `effect_tool::tool` (now `call::tool`), hidden. Not deprecated:
// `use effect_tool::tool;` imports the attribute, and with it this module of the same name.
#[doc(hidden)]
pub use effect_tool_core::tool;

// The root names of earlier releases that are now only in their layer, deprecated.
mod moved;
#[allow(deprecated)]
pub use moved::*;

pub mod hooks;

/// The schemars crate whose `JsonSchema` the argument types of tools implement (the version
/// effect-tool builds schemas with). A crate without its own `schemars` dependency can derive
/// it through this path: `#[derive(effect_tool::schemars::JsonSchema)]` with
/// `#[schemars(crate = "effect_tool::schemars")]`.
pub use ::schemars;

/// What the code the macros generate names (`::effect_tool::__private_0_1_0::...`): see
/// `src/private.rs`. The name carries the release; on a version bump, rename it here.
#[doc(hidden)]
#[path = "private.rs"]
pub mod __private_0_1_0;
