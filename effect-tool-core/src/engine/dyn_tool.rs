//! Tools behind a trait object, with JSON in and out: what toolkits, adapters and the
//! compensation of abandoned runs work with.

use futures::future::BoxFuture;
use serde_json::Value;

use crate::call::context::{EffectCtx, RunContext};
use crate::call::error::EffectError;
use crate::call::tool::{Tool, ToolMeta};
use crate::engine::{CallOptions, CallReport, Disposition, Engine};

/// A declared tool, object-safe, JSON in and out. Every [`Tool`] is one.
pub trait DynTool: Send + Sync + 'static {
    /// The declaration as data.
    fn meta(&self) -> ToolMeta;

    /// The JSON Schema of the arguments, as exported to models.
    fn input_schema(&self) -> Value;

    /// The JSON Schema of the tool's output, if known ([`Tool::output_schema`]).
    fn output_schema(&self) -> Option<Value> {
        None
    }

    /// The output type's name, for the manifest ([`Tool::output_type`]); `None`: unnamed (the
    /// manifest writes `-`).
    fn output_type(&self) -> Option<String> {
        None
    }

    /// The values the tool takes from the run (its `#[secret]` arguments,
    /// [`Tool::INJECTED`]): what a server or adapter must give its runs before the tool can run.
    fn injected(&self) -> &'static [crate::call::tool::Injected] {
        &[]
    }

    /// How long a person's approval of a call stays valid ([`Tool::APPROVAL_TTL`]; `None`: the
    /// journal's default, 24 hours).
    fn approval_ttl(&self) -> Option<std::time::Duration> {
        None
    }

    /// Whether `recover` is asked before every first execution ([`Tool::RECOVER_FIRST`], with a
    /// `recover` hook).
    fn recover_first(&self) -> bool {
        false
    }

    /// How long after an unknown outcome `recover` is first asked ([`Tool::RECOVER_SETTLE`],
    /// with a `recover` hook; `None`: at once).
    fn recover_settle(&self) -> Option<std::time::Duration> {
        None
    }

    /// Whether the tool's calls run before any journal write, their record the one write
    /// ([`Tool::ONE_WRITE`]): declared, on an idempotent tool with no approval, no `recover`
    /// hook and no transaction (the engine claims any other's calls as usual).
    fn one_write(&self) -> bool {
        false
    }

    /// What the model reads of `output` (a recorded output of this tool) when the tool declares a
    /// view ([`Tool::to_model`]); `None` when it reads the output itself. An output that no
    /// longer decodes as the tool's output type gives a text that says the result cannot be
    /// shown, never the output.
    fn to_model_json(&self, output: &Value) -> Option<crate::call::view::ModelOutput> {
        let _ = output;
        None
    }

    /// Decode `args` and call the tool through `engine`. Arguments that do not decode come back
    /// as [`EffectError::InvalidArguments`] and nothing runs. Tool errors become strings.
    fn call_json<'a>(
        &'a self,
        engine: &'a Engine,
        run: &'a RunContext,
        opts: CallOptions,
        args: Value,
    ) -> BoxFuture<'a, CallReport<Value, String>>;

    /// Whether `output` is an output of this tool (it decodes into the tool's output type), as
    /// a person's resolution must be; the decoder's message when not.
    fn check_output(&self, output: &Value) -> Result<(), String> {
        let _ = output;
        Ok(())
    }

    /// Reconcile `rec`, a stale claim, a record in doubt or a record pending its callback past
    /// the deadline, of this tool, with no caller
    /// ([`Engine::reconcile_record`]). The default, for implementations of this trait other
    /// than a [`Tool`]'s, skips it.
    fn reconcile_json<'a>(
        &'a self,
        engine: &'a Engine,
        rec: &'a crate::decide::record::EffectRecord,
        run: RunContext,
    ) -> BoxFuture<'a, Result<crate::engine::ReconcileVerdict, crate::call::error::StoreError>> {
        let _ = (engine, rec, run);
        Box::pin(async {
            Ok(crate::engine::ReconcileVerdict::Skipped {
                reason: "this tool cannot be reconciled without a caller".to_owned(),
            })
        })
    }

    /// Run the tool's compensation for a recorded call (`args` and `output` as stored).
    fn compensate_json<'a>(
        &'a self,
        ctx: &'a EffectCtx,
        args: Value,
        output: Value,
    ) -> BoxFuture<'a, Result<(), EffectError<String>>>;
}

impl<T: Tool> DynTool for T {
    fn meta(&self) -> ToolMeta {
        ToolMeta::of::<T>()
    }

    fn input_schema(&self) -> Value {
        T::input_schema()
    }

    fn output_schema(&self) -> Option<Value> {
        T::output_schema()
    }

    fn output_type(&self) -> Option<String> {
        Some(T::output_type().to_owned())
    }

    fn injected(&self) -> &'static [crate::call::tool::Injected] {
        T::INJECTED
    }

    fn approval_ttl(&self) -> Option<std::time::Duration> {
        T::APPROVAL_TTL
    }

    fn recover_first(&self) -> bool {
        T::RECOVER_FIRST && T::HAS_RECOVER
    }

    fn recover_settle(&self) -> Option<std::time::Duration> {
        T::RECOVER_SETTLE.filter(|_| T::HAS_RECOVER)
    }

    fn one_write(&self) -> bool {
        super::one_write::declared::<T>() && Tool::declared_approval(self).is_none()
    }

    fn check_output(&self, output: &Value) -> Result<(), String> {
        serde_json::from_value::<T::Output>(output.clone())
            .map(drop)
            .map_err(|e| e.to_string())
    }

    fn to_model_json(&self, output: &Value) -> Option<crate::call::view::ModelOutput> {
        if !T::HAS_VIEW {
            return None;
        }
        match serde_json::from_value::<T::Output>(output.clone()) {
            Ok(out) => Tool::to_model(self, &out),
            Err(e) => {
                tracing::warn!(tool = Tool::declared_name(self), error = %e, "a recorded output does not decode as the tool's output type; the model is told it cannot be shown");
                Some(crate::call::view::unviewable(Tool::declared_name(self)))
            }
        }
    }

    fn call_json<'a>(
        &'a self,
        engine: &'a Engine,
        run: &'a RunContext,
        opts: CallOptions,
        args: Value,
    ) -> BoxFuture<'a, CallReport<Value, String>> {
        Box::pin(async move {
            let args_json = args;
            let args: T::Args = match serde_json::from_value(args_json.clone()) {
                Ok(a) => a,
                Err(e) => {
                    // serde quotes the value it could not decode: never a sensitive one.
                    let err = EffectError::InvalidArguments {
                        tool: Tool::declared_name(self).to_owned(),
                        message: crate::call::key::scrub(e.to_string(), &args_json, T::SENSITIVE),
                    };
                    return CallReport {
                        result: Err(err),
                        disposition: Disposition::Failed,
                        key: None,
                        input_differs: None,
                        edited: None,
                    };
                }
            };
            // The arguments as sent, to cut sensitive values out of error texts by value (a tool
            // error that echoes a `#[sensitive]` argument).
            let sent = if T::SENSITIVE.is_empty() {
                Value::Null
            } else {
                args_json
            };
            let report = engine.call_with_report(self, run, opts, args).await;
            let result = match report.result {
                Ok(out) => serde_json::to_value(out).map_err(|e| EffectError::Codec {
                    tool: Tool::declared_name(self).to_owned(),
                    key: report.key.clone().unwrap_or_default(),
                    message: format!("output does not serialize: {e}"),
                }),
                Err(e) => Err(crate::call::key::scrub_error(
                    e.map_tool_error(|e| e.to_string()),
                    &sent,
                    T::SENSITIVE,
                )),
            };
            CallReport {
                result,
                disposition: report.disposition,
                key: report.key,
                input_differs: report.input_differs,
                edited: report.edited,
            }
        })
    }

    fn reconcile_json<'a>(
        &'a self,
        engine: &'a Engine,
        rec: &'a crate::decide::record::EffectRecord,
        run: RunContext,
    ) -> BoxFuture<'a, Result<crate::engine::ReconcileVerdict, crate::call::error::StoreError>> {
        Box::pin(engine.reconcile_record(self, rec, run))
    }

    fn compensate_json<'a>(
        &'a self,
        ctx: &'a EffectCtx,
        args: Value,
        output: Value,
    ) -> BoxFuture<'a, Result<(), EffectError<String>>> {
        Box::pin(async move {
            let key = ctx.effect_key().unwrap_or_default();
            let codec = |message: String| EffectError::Codec {
                tool: Tool::declared_name(self).to_owned(),
                key: key.to_owned(),
                message,
            };
            // The values the tool takes from the run: the application gives them again.
            crate::call::tool::check_values::<T>(&ctx.run).map_err(|e| e.map_tool_error(|e| e.to_string()))?;
            // The journal binds sensitive values by their digests: the tool is given none.
            let args: T::Args = serde_json::from_value(crate::call::key::unbind(args, T::SENSITIVE)).map_err(|e| {
                let sensitive = if T::SENSITIVE.is_empty() {
                    String::new()
                } else {
                    format!(
                        " The journal does not keep the sensitive fields ({}): each needs a default (`#[serde(default)]` or an `Option`) for the compensation to decode without it.",
                        T::SENSITIVE.join(", ")
                    )
                };
                codec(format!(
                    "the recorded arguments do not decode as this tool's argument type: {e}.{sensitive} This compensation cannot run as recorded: undo the effect by hand, then record it with `effect-tool abandon {} --mark-compensated`",
                    crate::value::shell::quote(ctx.run_id())
                ))
            })?;
            let output: T::Output =
                serde_json::from_value(output).map_err(|e| codec(crate::engine::output_mismatch(key, &e)))?;
            self.compensate(ctx, &args, &output)
                .await
                .map_err(|e| EffectError::Tool {
                    tool: Tool::declared_name(self).to_owned(),
                    key: ctx.effect_key().map(str::to_owned),
                    failure: crate::ClassifyError::failure(&e).unwrap_or(crate::Failure::Unknown),
                    error: e.to_string(),
                })
        })
    }
}
