//! The toolkit a model talks to: declared tools, their definitions in each provider's format,
//! and the dispatch of one model turn's tool calls through the [`Engine`].
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
//! Only types implementing [`Tool`] can be added, and [`Tool::CLASS`] has no default: nothing
//! gets into a toolkit without an effect class.

mod dispatch;
mod export;
pub mod manifest;
pub mod review;
mod validate;
pub mod wire;

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

use crate::call::tool::{Tool, ToolMeta};
use crate::engine::Engine;
use crate::engine::dyn_tool::DynTool;

pub use dispatch::{
    DEFAULT_CONCURRENCY, DEFAULT_MAX_ARGUMENT_BYTES, Dispatcher, Rejection, Stop, ToolCall, ToolOutcome, ToolResult,
    anthropic_tool_results_message,
};
pub use export::{ExportReport, mcp_annotations};
pub use wire::{
    ProviderCall, ProviderRecord, ProviderRecorded, Turn, TurnResults, WireError, WireFormat, gemini_function_responses,
};

/// Two tools of one name were added to a toolkit. A model addresses tools by name, so each
/// name must be unique: rename one (`#[tool(name = "...")]` or [`Tool::NAME`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "a tool named `{name}` is already in the toolkit ({existing}); cannot add {added}: tool names must be unique, rename one of them"
)]
pub struct DuplicateTool {
    /// The name both tools use.
    pub name: String,
    /// The tool already in the toolkit (its Rust type and class).
    pub existing: String,
    /// The tool that was refused (its Rust type and class).
    pub added: String,
}

struct Entry {
    tool: Arc<dyn DynTool>,
    meta: ToolMeta,
    schema: validate::ArgumentSchema,
    type_name: &'static str,
}

impl Entry {
    fn describe(&self) -> String {
        format!("`{}`, {}", self.type_name, self.meta.class)
    }
}

/// Declared tools, by name, in the order they were added.
///
/// Cheap to clone (the tools are shared). Adding a second tool with a name already present is
/// an error: [`Toolkit::try_add`] returns [`DuplicateTool`]; [`Toolkit::add`] and
/// [`Toolkit::with`] panic with the same message (a duplicate is a programming error, found on
/// the first run).
#[derive(Clone, Default)]
pub struct Toolkit {
    entries: Vec<Arc<Entry>>,
    by_name: BTreeMap<&'static str, usize>,
}

impl std::fmt::Debug for Toolkit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Toolkit").field("tools", &self.names()).finish()
    }
}

impl Toolkit {
    /// An empty toolkit.
    pub fn new() -> Self {
        Toolkit::default()
    }

    /// Add `tool`, or fail if a tool of the same name is already present.
    pub fn try_add<T: Tool>(&mut self, tool: T) -> Result<&mut Self, DuplicateTool> {
        self.try_add_shared(Arc::new(tool))
    }

    /// Add a tool shared with other owners (e.g. one holding clients), or fail on a duplicate name.
    pub fn try_add_shared<T: Tool>(&mut self, tool: Arc<T>) -> Result<&mut Self, DuplicateTool> {
        let entry = Entry {
            meta: ToolMeta::of::<T>(),
            schema: validate::ArgumentSchema::new(T::input_schema()),
            type_name: std::any::type_name::<T>(),
            tool,
        };
        if let Some(&i) = self.by_name.get(T::NAME) {
            return Err(DuplicateTool {
                name: T::NAME.to_owned(),
                existing: self.entries[i].describe(),
                added: entry.describe(),
            });
        }
        self.by_name.insert(T::NAME, self.entries.len());
        self.entries.push(Arc::new(entry));
        Ok(self)
    }

    /// Add `tool`.
    ///
    /// # Panics
    ///
    /// If a tool of the same name is already present (see [`Toolkit::try_add`]).
    #[track_caller]
    pub fn add<T: Tool>(&mut self, tool: T) -> &mut Self {
        if let Err(e) = self.try_add(tool) {
            panic!("{e}");
        }
        self
    }

    /// Add `tool`, builder style.
    ///
    /// # Panics
    ///
    /// If a tool of the same name is already present (see [`Toolkit::try_add`]).
    #[track_caller]
    pub fn with<T: Tool>(mut self, tool: T) -> Self {
        self.add(tool);
        self
    }

    /// Add a shared tool, builder style.
    ///
    /// # Panics
    ///
    /// If a tool of the same name is already present.
    #[track_caller]
    pub fn with_shared<T: Tool>(mut self, tool: Arc<T>) -> Self {
        if let Err(e) = self.try_add_shared(tool) {
            panic!("{e}");
        }
        self
    }

    /// The tool called `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn DynTool>> {
        self.by_name.get(name).map(|&i| &self.entries[i].tool)
    }

    /// The declaration of the tool called `name`.
    pub fn meta(&self, name: &str) -> Option<&ToolMeta> {
        self.by_name.get(name).map(|&i| &self.entries[i].meta)
    }

    /// The exported argument schema of the tool called `name`.
    pub fn input_schema(&self, name: &str) -> Option<&Value> {
        self.by_name.get(name).map(|&i| self.entries[i].schema.schema())
    }

    /// The argument schema of the tool called `name`, with its compiled validator.
    pub(crate) fn argument_schema(&self, name: &str) -> Option<&validate::ArgumentSchema> {
        self.by_name.get(name).map(|&i| &self.entries[i].schema)
    }

    /// The tools' names, in the order they were added.
    pub fn names(&self) -> Vec<&'static str> {
        self.entries.iter().map(|e| e.meta.name).collect()
    }

    /// Every tool's declaration, in the order they were added.
    pub fn metas(&self) -> Vec<ToolMeta> {
        self.entries.iter().map(|e| e.meta.clone()).collect()
    }

    /// The manifest: every tool's name, class, key rule, window, approval and hooks as stable
    /// text, one line per tool sorted by name (see [`crate::toolkit::manifest`]). Commit it beside the
    /// code and compare it in a test, so a changed effect declaration is a one-line diff in
    /// review.
    ///
    /// A tool that cannot be sent with OpenAI's `"strict": true` gets a comment line after the
    /// tools saying why (`# not strict: <tool>: <reason>`; see [`crate::toolkit::manifest::render_with_strict`]).
    pub fn manifest(&self) -> String {
        let not_strict: Vec<(&str, Vec<String>)> = self
            .export_report(crate::value::schema::Dialect::OpenAiStrict)
            .into_iter()
            .filter(|r| !r.strict)
            .map(|r| (r.tool, r.not_strict))
            .collect();
        crate::toolkit::manifest::render_with_strict(&self.metas(), &not_strict)
    }

    /// Abandon `run`: compensate each of its completed compensable effects made by these tools
    /// (see [`crate::Engine::abandon_run`]).
    pub async fn abandon_run(
        &self,
        engine: &crate::Engine,
        run: &crate::RunContext,
    ) -> Result<crate::AbandonReport, crate::StoreError> {
        let tools: Vec<Arc<dyn DynTool>> = self.tools().cloned().collect();
        engine.abandon_run(run, &tools).await
    }

    /// The tools, in the order they were added.
    pub fn tools(&self) -> impl Iterator<Item = &Arc<dyn DynTool>> {
        self.entries.iter().map(|e| &e.tool)
    }

    /// How many tools there are.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn definitions(&self) -> impl Iterator<Item = export::Definition<'_>> {
        self.entries.iter().map(|e| export::Definition {
            meta: &e.meta,
            schema: e.schema.schema(),
        })
    }

    /// OpenAI Chat Completions `tools`: `{"type": "function", "function": {name, description,
    /// parameters, strict}}`, strict where the schema can be (no maps, no untyped values, no
    /// tuples of mixed types: [`crate::value::schema::strict_report`]), else non-strict;
    /// [`Toolkit::export_report`] and [`Toolkit::manifest`] say why.
    pub fn openai_tools(&self) -> Vec<Value> {
        self.definitions().map(|d| d.openai_chat()).collect()
    }

    /// OpenAI Responses API `tools`: `{"type": "function", name, description, parameters,
    /// strict}`.
    pub fn openai_responses_tools(&self) -> Vec<Value> {
        self.definitions().map(|d| d.openai_responses()).collect()
    }

    /// Gemini `functionDeclarations`: `{name, description, parameters}`, the parameters in
    /// Gemini's OpenAPI 3.0 subset ([`Dialect::GeminiParameters`](crate::value::schema::Dialect)):
    /// `nullable` instead of type arrays, no `additionalProperties`, maps as lists of
    /// `{"key", "value"}` entries (the dispatcher turns them back into objects), tuples as
    /// `items`, recursive types unrolled [`UNROLL_DEPTH`](crate::value::schema::UNROLL_DEPTH) levels.
    /// Send them as `{"tools": [{"functionDeclarations": [...]}]}`.
    /// [`Toolkit::export_report`] says what each tool lost; a tool that lost something can use
    /// [`Toolkit::gemini_json_schema_tools`] instead.
    pub fn gemini_tools(&self) -> Vec<Value> {
        self.definitions().map(|d| d.gemini()).collect()
    }

    /// Gemini `functionDeclarations` with `parametersJsonSchema` (JSON Schema: maps, tuples and
    /// recursive types as they are).
    pub fn gemini_json_schema_tools(&self) -> Vec<Value> {
        self.definitions().map(|d| d.gemini_json_schema()).collect()
    }

    /// What exporting each tool for `dialect` changed: whether it is strict and why not (OpenAI),
    /// and what the dialect cannot express. For [`Dialect::OpenAi`](crate::value::schema::Dialect::OpenAi) and
    /// [`Dialect::OpenAiStrict`](crate::value::schema::Dialect::OpenAiStrict) alike the report is of what [`Toolkit::openai_tools`] sends.
    pub fn export_report(&self, dialect: crate::value::schema::Dialect) -> Vec<ExportReport> {
        self.definitions().map(|d| d.report(dialect)).collect()
    }

    /// Fail, naming every tool that cannot be sent with OpenAI's `"strict": true` and why. Call
    /// it at start-up or in a test when every tool is meant to be strict.
    pub fn check_strict(&self) -> Result<(), Vec<crate::value::schema::NotStrict>> {
        let failed: Vec<crate::value::schema::NotStrict> = self
            .export_report(crate::value::schema::Dialect::OpenAiStrict)
            .into_iter()
            .filter(|r| !r.strict)
            .map(|r| crate::value::schema::NotStrict {
                type_name: r.tool.to_owned(),
                reasons: r.not_strict,
            })
            .collect();
        if failed.is_empty() { Ok(()) } else { Err(failed) }
    }

    /// Anthropic Messages API `tools`: `{name, description, input_schema}`.
    pub fn anthropic_tools(&self) -> Vec<Value> {
        self.definitions().map(|d| d.anthropic()).collect()
    }

    /// MCP `tools/list` entries: `{name, description, inputSchema, annotations, _meta}`, the
    /// annotations derived from the class ([`mcp_annotations`]) and `_meta` carrying the
    /// declaration (`effect-tool/class`, `effect-tool/key`, `effect-tool/window`,
    /// `effect-tool/approval`).
    pub fn mcp_tools(&self) -> Vec<Value> {
        self.definitions().map(|d| d.mcp()).collect()
    }

    /// The values this toolkit's tools take from the run (`#[secret]` arguments) that `run` does not
    /// hold, as "`tool` takes a `Type`" phrases, for the error of a server or adapter that would
    /// otherwise list tools every call of which fails.
    #[cfg(any(feature = "mcp", feature = "rig"))]
    pub(crate) fn missing_values(&self, run: &crate::RunContext) -> Vec<String> {
        let mut missing: Vec<String> = self
            .tools()
            .flat_map(|tool| {
                let name = tool.meta().name;
                tool.injected()
                    .iter()
                    .filter(|i| !(i.present)(run))
                    .map(move |i| format!("`{name}` takes a `{}`", i.type_name))
            })
            .collect();
        missing.sort();
        missing
    }

    /// A dispatcher of this toolkit's calls through `engine`, with the default concurrency.
    pub fn dispatcher(&self, engine: Engine) -> Dispatcher {
        Dispatcher::new(self.clone(), engine)
    }
}
