//! Declared tools as [rig](https://docs.rs/rig-core) tools, with the effect engine in between.
//! Feature `rig` (rig-core 0.44; rig's agent runtime is the `rig-agent` crate).
//!
//! [`RigTool`] wraps one declared tool as a typed `rig_core::tool::Tool`; [`dynamic_tools`]
//! turns a whole [`Toolkit`] into rig `DynamicTool`s. Either way every call goes through the
//! toolkit's [`Dispatcher`]: arguments are checked against the tool's schema (nothing runs when
//! they do not fit), the call is journaled under its effect key, a panic is caught, and a
//! blocked call or one awaiting approval comes back as a rig tool error whose model feedback
//! says what happened and whose source is a [`RigCallError`] the application can downcast.
//!
//! ```ignore
//! let agent = rig_agent::AgentBuilder::new(model)
//!     .tool(RigTool::new(IssueRefund::new(payments), engine.clone(), RunContext::new("run-1")))
//!     .build();
//! ```
//!
//! # Run and call ids
//!
//! rig does not tell a tool the model's tool-call id, so each invocation gets a fresh call id:
//! an idempotent or keyed call re-planned by the model is replayed from the journal, and an
//! irreversible tool without a key called again with identical arguments is blocked
//! ([`crate::SideEffectRetryBlocked`]), as for any new call id. The run is the one the
//! adapter was built with, unless the agent run's `ToolContext` carries an [`EffectRun`]
//! (set it per prompt with `agent.prompt(..).tool_context(ctx)`); the adapter's run still
//! provides the rest: thread (unless the `EffectRun` names one), agent, cancellation token and
//! the application's values, which tools with `#[secret]` arguments take. An adapter whose run
//! lacks a value one of its tools takes is refused when it is built (a panic that names the
//! tool and the value), rather than failing every call.
//!
//! After each call, the `ToolContext` result metadata holds an [`EffectReport`] (key,
//! disposition, outcome).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use rig_core::completion::message::ToolName;
use rig_core::tool::{ContextValue, DynamicTool, ToolContext, ToolErrorKind, ToolExecutionError, ToolOutput};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::call::context::RunContext;
use crate::call::error::EffectError;
use crate::call::tool::Tool;
use crate::engine::Engine;
use crate::toolkit::{Dispatcher, ToolCall, ToolOutcome, ToolResult, Toolkit};

pub use rig_core;

/// The run an agent's tool calls belong to, passed through rig's `ToolContext`
/// (`agent.prompt(..).tool_context(ctx)` with `ctx.insert(EffectRun::new("run-7"))`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EffectRun {
    /// The run id.
    pub run_id: String,
    /// The conversation thread, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread_id: Option<String>,
}

impl EffectRun {
    /// A run with this id and no thread.
    pub fn new(run_id: impl Into<String>) -> Self {
        EffectRun {
            run_id: run_id.into(),
            thread_id: None,
        }
    }

    /// The thread the run belongs to.
    pub fn with_thread(mut self, thread_id: impl Into<String>) -> Self {
        self.thread_id = Some(thread_id.into());
        self
    }
}

impl ContextValue for EffectRun {
    const KEY: &'static str = "effect-tool/run";
}

/// What happened to one call, published in the `ToolContext` result metadata.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EffectReport {
    /// The tool.
    pub tool: String,
    /// The call id the adapter gave the call.
    pub call_id: String,
    /// The effect key, when the call reached the journal.
    pub key: Option<String>,
    /// What the engine did (`executed`, `replayed`, `shared`, `blocked`, ...).
    pub disposition: String,
    /// `output`, `rejected`, `blocked`, `awaiting-approval`, `failed` or `panicked`.
    pub outcome: String,
}

impl ContextValue for EffectReport {
    const KEY: &'static str = "effect-tool/report";
}

/// A call that did not produce an output, as the source of the rig tool error: downcast it
/// (`error.downcast_ref::<RigCallError>()`) to match on [`ToolOutcome`] (blocked, awaiting
/// approval, ...) and read the key.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct RigCallError {
    /// The result of the call (its outcome is never [`ToolOutcome::Output`]).
    pub result: ToolResult,
    message: String,
}

impl RigCallError {
    /// The blocked error, if the call was blocked.
    pub fn blocked(&self) -> Option<&crate::SideEffectRetryBlocked> {
        self.result.blocked()
    }

    /// The pending approval, if the call waits for one.
    pub fn approval_pending(&self) -> Option<&crate::ApprovalPending> {
        self.result.approval_pending()
    }

    fn into_execution_error(self) -> ToolExecutionError {
        let (kind, code, retryable) = match &self.result.outcome {
            ToolOutcome::Rejected(r) => match r {
                crate::toolkit::Rejection::UnknownTool { .. } => (ToolErrorKind::NotFound, "rejected", false),
                _ => (ToolErrorKind::InvalidArgs, "rejected", false),
            },
            ToolOutcome::Blocked(_) => (ToolErrorKind::Other, "blocked", false),
            ToolOutcome::AwaitingApproval(_) => (ToolErrorKind::PermissionDenied, "awaiting-approval", false),
            ToolOutcome::Failed(e) => match e {
                EffectError::Cancelled { .. } | EffectError::Interrupted { .. } => {
                    (ToolErrorKind::Cancelled, "failed", false)
                }
                EffectError::TimedOut { .. } => (ToolErrorKind::Timeout, "failed", false),
                EffectError::Tool {
                    failure: crate::Failure::Transient { .. },
                    ..
                } => (ToolErrorKind::Other, "failed", true),
                _ => (ToolErrorKind::Other, "failed", false),
            },
            ToolOutcome::Panicked { .. } => (ToolErrorKind::Other, "panicked", false),
            ToolOutcome::Output(_) => (ToolErrorKind::Other, "failed", false),
        };
        let feedback = self.message.clone();
        ToolExecutionError::new(kind, feedback.clone())
            .with_model_feedback(feedback)
            .with_retryable(retryable)
            .with_code(format!("effect-tool/{code}"))
            .with_source(self)
    }
}

/// Runs calls for rig: the dispatcher, the default run, and fresh call ids.
#[derive(Clone)]
struct Bridge {
    dispatcher: Dispatcher,
    run: RunContext,
}

static NEXT_CALL: AtomicU64 = AtomicU64::new(1);

impl Bridge {
    fn run_for(&self, context: &ToolContext) -> RunContext {
        match context.get::<EffectRun>() {
            Ok(Some(er)) => {
                // The adapter's run with the named run id (and thread): its agent, cancellation
                // and the application's values (`#[secret]` arguments) stay.
                let run = self.run.clone().with_run_id(er.run_id);
                match er.thread_id {
                    Some(thread) => run.with_thread(thread),
                    None => run,
                }
            }
            Ok(None) => self.run.clone(),
            Err(e) => {
                tracing::warn!(error = %e, "the ToolContext's effect-tool/run does not decode; using the adapter's run");
                self.run.clone()
            }
        }
    }

    async fn call(&self, context: &mut ToolContext, name: &str, args: Value) -> Result<ToolOutput, ToolExecutionError> {
        let run = self.run_for(context);
        let call_id = format!(
            "rig-{}-{}",
            NEXT_CALL.fetch_add(1, Ordering::Relaxed),
            crate::decide::record::now_millis()
        );
        let call = ToolCall::new(call_id.clone(), name, args.to_string());
        let result = self.dispatcher.call(&run, &call).await;
        let report = EffectReport {
            tool: name.to_owned(),
            call_id,
            key: result.key.clone(),
            disposition: result.disposition.as_str().to_owned(),
            outcome: outcome_name(&result.outcome).to_owned(),
        };
        if let Err(e) = context.insert_result(report) {
            tracing::warn!(error = %e, "could not publish the effect report in the ToolContext");
        }
        match &result.outcome {
            // A tool's view (`to_model`): its parts, never the whole output it keeps from the model.
            ToolOutcome::Output(_) if result.view.is_some() => Ok(view_output(&result.model_output())),
            ToolOutcome::Output(Value::String(s)) => Ok(ToolOutput::text(s.clone())),
            ToolOutcome::Output(v) => Ok(ToolOutput::json(v.clone())),
            _ => {
                let message = result.content();
                Err(RigCallError { result, message }.into_execution_error())
            }
        }
    }
}

/// A view's parts as rig's tool output: text blocks and base64 image blocks.
fn view_output(view: &crate::call::view::ModelOutput) -> ToolOutput {
    use crate::call::view::ModelPart;
    use rig_core::completion::message::{ImageMediaType, MimeType, ToolResultContent};
    let blocks: Vec<ToolResultContent> = view
        .parts()
        .iter()
        .map(|p| match p {
            ModelPart::Text { text } => ToolResultContent::text(text.clone()),
            ModelPart::Image { mime_type, data } => {
                ToolResultContent::image_base64(data.clone(), ImageMediaType::from_mime_type(mime_type), None)
            }
        })
        .collect();
    ToolOutput::content(blocks).unwrap_or_else(|_| ToolOutput::text(""))
}

fn outcome_name(outcome: &ToolOutcome) -> &'static str {
    match outcome {
        ToolOutcome::Output(_) => "output",
        ToolOutcome::Rejected(_) => "rejected",
        ToolOutcome::Blocked(_) => "blocked",
        ToolOutcome::AwaitingApproval(_) => "awaiting-approval",
        ToolOutcome::Failed(_) => "failed",
        ToolOutcome::Panicked { .. } => "panicked",
    }
}

/// One declared tool as a rig tool: `AgentBuilder::tool(RigTool::new(tool, engine, run))`.
pub struct RigTool<T: Tool> {
    bridge: Bridge,
    description: String,
    schema: Value,
    _tool: std::marker::PhantomData<fn() -> T>,
}

impl<T: Tool> Clone for RigTool<T> {
    fn clone(&self) -> Self {
        RigTool {
            bridge: self.bridge.clone(),
            description: self.description.clone(),
            schema: self.schema.clone(),
            _tool: std::marker::PhantomData,
        }
    }
}

impl<T: Tool> std::fmt::Debug for RigTool<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RigTool")
            .field("tool", &T::NAME)
            .field("run", &self.bridge.run)
            .finish_non_exhaustive()
    }
}

impl<T: Tool> RigTool<T> {
    /// `tool`, called through `engine` in `run` (unless the `ToolContext` names another run:
    /// then in that run, with `run`'s values).
    ///
    /// # Panics
    ///
    /// If the tool takes a value from the run (a `#[secret]` argument) that `run` does not hold
    /// ([`RunContext::with_value`]): every call would fail.
    pub fn new(tool: T, engine: Engine, run: RunContext) -> Self {
        RigTool::shared(Arc::new(tool), engine, run)
    }

    /// A shared `tool`, called through `engine` in `run`.
    ///
    /// # Panics
    ///
    /// As [`RigTool::new`].
    pub fn shared(tool: Arc<T>, engine: Engine, run: RunContext) -> Self {
        if let Some(missing) = crate::call::tool::missing_value::<T>(&run) {
            panic!(
                "{}",
                missing_values_message(&[format!("`{}` takes a `{missing}`", T::NAME)])
            );
        }
        let toolkit = Toolkit::new().with_shared(tool);
        RigTool {
            bridge: Bridge {
                dispatcher: toolkit.dispatcher(engine),
                run,
            },
            description: T::DESCRIPTION.to_owned(),
            schema: T::input_schema(),
            _tool: std::marker::PhantomData,
        }
    }
}

impl<T: Tool> rig_core::tool::Tool for RigTool<T> {
    const NAME: &'static str = T::NAME;
    type Args = Value;
    type Output = ToolOutput;
    type Error = ToolExecutionError;

    fn description(&self) -> String {
        self.description.clone()
    }

    fn parameters(&self) -> Value {
        self.schema.clone()
    }

    async fn call(&self, context: &mut ToolContext, args: Value) -> Result<ToolOutput, ToolExecutionError> {
        self.bridge.call(context, T::NAME, args).await
    }
}

/// What a rig adapter built with a run that lacks a tool's values says.
fn missing_values_message(missing: &[String]) -> String {
    format!(
        "the run given to the rig adapter lacks values its tools take from the run (`#[secret]` arguments): {}; give them to the run with `RunContext::with_value` (every call would fail without them)",
        missing.join(", ")
    )
}

/// Every tool of `dispatcher`'s toolkit as a rig `DynamicTool`, called in `run`
/// (`AgentBuilder::dynamic_tools(dynamic_tools(&dispatcher, run))`).
///
/// # Panics
///
/// If a tool takes a value from the run (a `#[secret]` argument) that `run` does not hold
/// ([`RunContext::with_value`]): every call of it would fail.
pub fn dynamic_tools(dispatcher: &Dispatcher, run: RunContext) -> Vec<DynamicTool> {
    let missing = dispatcher.toolkit().missing_values(&run);
    if !missing.is_empty() {
        panic!("{}", missing_values_message(&missing));
    }
    let bridge = Bridge {
        dispatcher: dispatcher.clone(),
        run,
    };
    let toolkit = dispatcher.toolkit();
    toolkit
        .names()
        .into_iter()
        .filter_map(|name| {
            let meta = toolkit.meta(name)?;
            let schema = toolkit.input_schema(name)?.clone();
            let tool_name = ToolName::new(name.to_owned()).ok()?;
            let bridge = bridge.clone();
            Some(DynamicTool::new_with_context(
                tool_name,
                meta.description,
                schema,
                move |context: &mut ToolContext, args: Value| {
                    let bridge = bridge.clone();
                    Box::pin(async move { bridge.call(context, name, args).await })
                        as rig_core::wasm_compat::WasmBoxedFuture<'_, _>
                },
            ))
        })
        .collect()
}
