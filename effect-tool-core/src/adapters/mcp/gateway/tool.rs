//! An upstream tool under its declaration: a [`DynTool`] of the toolkit the gateway serves, so
//! that its calls go through the engine and the journal as a `#[tool]`'s do.
//!
//! The engine is generic over [`Tool`], whose class and `recover` flag are constants: each
//! upstream tool is called through [`Via`], one type per class and `recover` flag, holding the
//! rest of its declaration (role, ttl, window, retry, key, timeout) as values the engine reads
//! through [`Tool`]'s `declared_*` methods. Every gateway call is journaled under the tool name
//! [`JOURNAL_NAME`]; its input names the upstream tool (`{"tool": ..., "arguments": ...}`).

use std::sync::Arc;

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::declare::{KeyDecl, ToolDecl, lookup};
use super::upstream::{Upstream, output_of};
use crate::call::context::{EffectCtx, RunContext};
use crate::call::error::EffectError;
use crate::call::tool::{KeyRule, Tool, ToolMeta};
use crate::decide::policy::RetryPolicy;
use crate::engine::dyn_tool::DynTool;
use crate::engine::{CallOptions, CallReport, Disposition, Engine};
use crate::value::class::{EffectClass, Window};
use crate::value::outcome::ToolError;

/// The tool name every gateway call is journaled under (the upstream tool is in its input).
pub const JOURNAL_NAME: &str = "mcp-gateway";

/// What the journal keeps as a gateway call's input: the tool as the model named it and its
/// arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GatewayCall {
    /// The tool's name as the gateway exposes it.
    pub tool: String,
    /// The arguments the model sent.
    pub arguments: Value,
}

/// One upstream tool, exposed under `exposed` with declaration `decl`.
pub(super) struct Declared {
    pub(super) exposed: &'static str,
    pub(super) upstream_tool: String,
    pub(super) upstream: Arc<Upstream>,
    pub(super) decl: ToolDecl,
    pub(super) input_schema: Value,
    pub(super) output_schema: Option<Value>,
    pub(super) approval: Option<&'static str>,
    pub(super) meta: ToolMeta,
}

fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

impl Declared {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        exposed: String,
        upstream_tool: String,
        upstream: Arc<Upstream>,
        decl: ToolDecl,
        description: String,
        input_schema: Value,
        output_schema: Option<Value>,
        open_world: Option<bool>,
    ) -> Declared {
        // The names and texts live as long as the process: a gateway's tools are made once, at
        // start, and `ToolMeta` is the declaration as `'static` data.
        let exposed = leak(exposed);
        let description = leak(description);
        let approval = decl.approval.clone().map(leak);
        let key_rule = match &decl.key {
            KeyDecl::Default => KeyRule::Default,
            KeyDecl::Fields(f) => KeyRule::Fields(Box::leak(
                f.iter().cloned().map(leak).collect::<Vec<_>>().into_boxed_slice(),
            )),
            KeyDecl::Template(t) => KeyRule::Custom(leak(format!("\"{t}\""))),
        };
        let meta = ToolMeta {
            name: exposed,
            description,
            class: decl.class,
            key_rule,
            window: decl.window,
            shared_keys: false,
            ttl: decl.ttl,
            timeout: decl.timeout,
            sensitive: &[],
            injected: &[],
            has_recover: decl.recover.is_some(),
            has_compensate: false,
            approval,
            approval_when: decl.approval_when.as_ref().map(|c| leak(c.to_string())),
            open_world,
            retry: decl.retry,
            costs: &[],
        };
        Declared {
            exposed,
            upstream_tool,
            upstream,
            decl,
            input_schema,
            output_schema,
            approval,
            meta,
        }
    }

    /// The effect key the declaration gives `arguments` (`None`: the engine's default key).
    fn key(&self, arguments: &Value) -> Option<String> {
        match &self.decl.key {
            KeyDecl::Default => None,
            KeyDecl::Fields(fields) => {
                let picked: serde_json::Map<String, Value> = fields
                    .iter()
                    .map(|f| (f.clone(), lookup(arguments, f).cloned().unwrap_or(Value::Null)))
                    .collect();
                let canonical = crate::value::canonical::to_string(&Value::Object(picked));
                Some(format!(
                    "{}:{}",
                    self.exposed,
                    crate::value::digest::sha256_hex(canonical.as_bytes())
                ))
            }
            KeyDecl::Template(t) => Some(format!(
                "{}:{}",
                self.exposed,
                super::declare::fill(t, arguments).unwrap_or_else(|| {
                    // An argument the template names is absent: the whole input keys the call.
                    crate::value::digest::sha256_hex(crate::value::canonical::to_string(arguments).as_bytes())
                })
            )),
        }
    }

    async fn call_upstream(&self, ctx: &EffectCtx, arguments: Value) -> Result<Value, ToolError> {
        let result = self
            .upstream
            .call(&self.upstream_tool, arguments, ctx.effect_key(), self.decl.timeout)
            .await?;
        Ok(output_of(&result))
    }

    async fn recover_upstream(&self, arguments: &Value) -> Result<Option<Value>, ToolError> {
        let Some(r) = &self.decl.recover else {
            return Ok(None);
        };
        let args: serde_json::Map<String, Value> = r
            .args
            .iter()
            .map(|(k, v)| (k.clone(), fill_value(v, arguments)))
            .collect();
        let result = match self
            .upstream
            .call(&r.tool, Value::Object(args), None, self.decl.timeout)
            .await
        {
            Ok(result) => result,
            // The lookup said it failed (not found, say): the effect is not there.
            Err(e) if e.kind == Some(crate::Failure::Definitive) => return Ok(None),
            Err(e) => return Err(e),
        };
        let output = output_of(&result);
        let probe = match (&output, &result.structured_content) {
            (Value::String(s), None) => serde_json::from_str(s).unwrap_or(output.clone()),
            _ => output.clone(),
        };
        let found = match &r.found {
            Some(pointer) => probe.pointer(pointer).is_some_and(non_empty),
            None => non_empty(&probe),
        };
        Ok(found.then_some(output))
    }
}

/// A recover argument: a string that is one `{path}` gives the argument's value as is; any other
/// string is a template; anything else is taken as written.
fn fill_value(v: &Value, arguments: &Value) -> Value {
    match v {
        Value::String(s) if s.starts_with('{') && s.ends_with('}') && s[1..].find('{').is_none() => {
            lookup(arguments, &s[1..s.len() - 1]).cloned().unwrap_or(Value::Null)
        }
        Value::String(s) => Value::String(super::declare::fill(s, arguments).unwrap_or_default()),
        other => other.clone(),
    }
}

fn non_empty(v: &Value) -> bool {
    match v {
        Value::Null | Value::Bool(false) => false,
        Value::String(s) => !s.trim().is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
        Value::Bool(true) | Value::Number(_) => true,
    }
}

/// An upstream tool as the engine calls it: `CLASS` is the class's index in
/// [`EffectClass::ALL`], `RECOVER` whether a `recover` is declared.
pub(super) struct Via<const CLASS: usize, const RECOVER: bool>(pub(super) Arc<Declared>);

const fn class_at(i: usize) -> EffectClass {
    EffectClass::ALL[i]
}

impl<const CLASS: usize, const RECOVER: bool> Tool for Via<CLASS, RECOVER> {
    type Args = GatewayCall;
    type Output = Value;
    type Error = ToolError;

    const NAME: &'static str = JOURNAL_NAME;
    const CLASS: EffectClass = class_at(CLASS);
    const DESCRIPTION: &'static str = "An upstream MCP tool called through the gateway.";
    const HAS_RECOVER: bool = RECOVER;
    // An input that differs under the same key fails the call: a gateway key names the effect.
    const STRICT_INPUT: bool = true;

    fn declared_approval(&self) -> Option<&'static str> {
        self.0.approval
    }

    fn declared_ttl(&self) -> Option<std::time::Duration> {
        self.0.decl.ttl
    }

    fn declared_window(&self) -> Window {
        self.0.decl.window
    }

    fn declared_retry(&self) -> RetryPolicy {
        self.0.decl.retry
    }

    fn key(&self, args: &GatewayCall) -> Option<String> {
        self.0.key(&args.arguments)
    }

    fn needs_approval(&self, args: &GatewayCall) -> bool {
        self.0.approval.is_some()
            && self
                .0
                .decl
                .approval_when
                .as_ref()
                .is_none_or(|c| c.holds(&args.arguments))
    }

    async fn call(&self, ctx: &EffectCtx, args: GatewayCall) -> Result<Value, ToolError> {
        self.0.call_upstream(ctx, args.arguments).await
    }

    async fn recover(&self, _ctx: &EffectCtx, args: &GatewayCall) -> Result<Option<Value>, ToolError> {
        self.0.recover_upstream(&args.arguments).await
    }
}

/// The tool the toolkit holds: the declaration as [`ToolMeta`], calls through [`Via`].
pub(super) struct GatewayTool(pub(super) Arc<Declared>);

impl GatewayTool {
    async fn call_via<T: Tool<Args = GatewayCall, Output = Value, Error = ToolError>>(
        &self,
        via: T,
        engine: &Engine,
        run: &RunContext,
        opts: CallOptions,
        args: Value,
    ) -> CallReport<Value, String> {
        let call = GatewayCall {
            tool: self.0.exposed.to_owned(),
            arguments: args,
        };
        let report = engine.call_with_report(&via, run, opts, call).await;
        CallReport {
            result: report.result.map_err(|e| e.map_tool_error(|e| e.to_string())),
            disposition: report.disposition,
            key: report.key,
            input_differs: report.input_differs,
            edited: report.edited,
        }
    }
}

impl DynTool for GatewayTool {
    fn meta(&self) -> ToolMeta {
        self.0.meta.clone()
    }

    fn input_schema(&self) -> Value {
        self.0.input_schema.clone()
    }

    fn output_schema(&self) -> Option<Value> {
        self.0.output_schema.clone()
    }

    fn call_json<'a>(
        &'a self,
        engine: &'a Engine,
        run: &'a RunContext,
        opts: CallOptions,
        args: Value,
    ) -> BoxFuture<'a, CallReport<Value, String>> {
        let d = self.0.clone();
        let recover = d.decl.recover.is_some();
        Box::pin(async move {
            if !args.is_object() {
                return CallReport {
                    result: Err(EffectError::InvalidArguments {
                        tool: d.exposed.to_owned(),
                        message: "the arguments must be a JSON object".to_owned(),
                    }),
                    disposition: Disposition::Failed,
                    key: None,
                    input_differs: None,
                    edited: None,
                };
            }
            match (d.decl.class, recover) {
                (EffectClass::Pure, _) => self.call_via(Via::<0, false>(d), engine, run, opts, args).await,
                (EffectClass::Idempotent, false) => self.call_via(Via::<1, false>(d), engine, run, opts, args).await,
                (EffectClass::Idempotent, true) => self.call_via(Via::<1, true>(d), engine, run, opts, args).await,
                (EffectClass::Compensable, false) => self.call_via(Via::<2, false>(d), engine, run, opts, args).await,
                (EffectClass::Compensable, true) => self.call_via(Via::<2, true>(d), engine, run, opts, args).await,
                (EffectClass::Irreversible, false) => self.call_via(Via::<3, false>(d), engine, run, opts, args).await,
                (EffectClass::Irreversible, true) => self.call_via(Via::<3, true>(d), engine, run, opts, args).await,
            }
        })
    }

    fn compensate_json<'a>(
        &'a self,
        ctx: &'a EffectCtx,
        _args: Value,
        _output: Value,
    ) -> BoxFuture<'a, Result<(), EffectError<String>>> {
        Box::pin(async move {
            Err(EffectError::Tool {
                tool: self.0.exposed.to_owned(),
                key: ctx.effect_key().map(str::to_owned),
                failure: crate::Failure::Definitive,
                error: "the gateway runs no compensation of an upstream tool: undo the effect by hand, then record it with `effect-tool abandon <run> --mark-compensated`".to_owned(),
            })
        })
    }
}
