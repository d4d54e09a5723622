//! The toolkit a model talks to: declared tools, their definitions in each provider's format,
//! and the dispatch of one model turn's tool calls through the [`Engine`](crate::engine::Engine).
//!
//! ```
//! use effect_tool_core::{EffectClass, EffectCtx, Tool, ToolError, toolkit::Toolkit};
//!
//! #[derive(Clone, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
//! struct Args { order_id: String }
//!
//! struct LookupOrder;
//! impl Tool for LookupOrder {
//!     type Args = Args;
//!     type Output = String;
//!     type Error = ToolError;
//!     const NAME: &'static str = "lookup_order";
//!     const CLASS: EffectClass = EffectClass::Pure;
//!     const DESCRIPTION: &'static str = "Find an order.";
//!     async fn call(&self, _ctx: &EffectCtx, a: Args) -> Result<String, ToolError> { Ok(a.order_id) }
//! }
//!
//! let toolkit = Toolkit::new().with(LookupOrder);
//! assert_eq!(toolkit.openai_tools()[0]["function"]["name"], "lookup_order");
//! assert_eq!(toolkit.mcp_tools()[0]["annotations"]["readOnlyHint"], true);
//! assert!(Toolkit::new().with(LookupOrder).try_add(LookupOrder).is_err());
//! ```
//!
//! Only types implementing [`Tool`](crate::call::tool::Tool) can be added, and
//! [`Tool::CLASS`](crate::call::tool::Tool::CLASS) has no default: nothing gets into a toolkit
//! without an effect class.

//!
//! Its rooms: [`registry`](Toolkit) (the tools by name), `export` (definitions in each
//! provider's shape, the export report, [`Toolkit::manifest`]), [`manifest`] (the manifest's
//! text), [`output`] (a tool's declared output: `outputSchema`, `structuredContent`, the check of
//! one against the other), `validate` (arguments checked against a tool's schema before a call), `dispatch`
//! ([`Dispatcher`]: one model turn's calls through the engine) and `with_engine`
//! ([`Toolkit::dispatcher`], [`Toolkit::abandon_run`]); with the feature `policy`, `policy`
//! (the tools' Cedar schema, `Toolkit::policy_tools`, `Toolkit::policy_schema`,
//! `Toolkit::check_policies`).

mod dispatch;
mod export;
pub mod manifest;
pub mod output;
#[cfg(feature = "policy")]
mod policy;
mod reconcile;
mod registry;
pub mod review;
mod validate;
pub mod wire;
mod with_engine;

pub use dispatch::{
    DEFAULT_CONCURRENCY, DEFAULT_MAX_ARGUMENT_BYTES, Denial, Dispatcher, Rejection, Stop, ToolCall, ToolOutcome,
    ToolResult, anthropic_tool_results_message,
};
pub use export::{ExportReport, mcp_annotations};
pub use output::{OutputSchema, mcp_output_schema};
pub use reconcile::{ReconcilePass, Reconciler, ReconcilerOptions};
pub use registry::{DuplicateTool, Toolkit};
pub use wire::{
    ProviderCall, ProviderRecord, ProviderRecorded, Turn, TurnResults, WireError, WireFormat, gemini_function_responses,
};
