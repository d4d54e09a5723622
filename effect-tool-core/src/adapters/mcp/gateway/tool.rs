//! An upstream tool under its declaration: a [`DynTool`] of the toolkit the gateway serves, so
//! that its calls go through the engine and the journal as a `#[tool]`'s do.
//!
//! The engine is generic over [`Tool`], whose class and `recover` flag are constants: each
//! upstream tool is called through [`Via`], one type per class and `recover` flag, holding the
//! rest of its declaration (role, ttl, window, retry, key, timeout) as values the engine reads
//! through [`Tool`]'s `declared_*` methods, its name among them: each call is journaled, keyed
//! and reported under the name the gateway exposes (`write_file`, or `fs__write_file` when
//! prefixed), with the model's arguments as its input, as a `#[tool]`'s call is. A key of one
//! upstream tool never replays another's (the engine refuses a key recorded under another name).

use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::{Map, Value};

use super::declare::{KeyDecl, ToolDecl, lookup};
use super::upstream::{Upstream, output_of};
use crate::call::context::{EffectCtx, RunContext};
use crate::call::error::EffectError;
use crate::call::tool::{KeyRule, Tool, ToolMeta};
use crate::decide::policy::RetryPolicy;
use crate::engine::dyn_tool::DynTool;
use crate::engine::{CallOptions, CallReport, Engine};
use crate::value::class::{EffectClass, Window};
use crate::value::outcome::ToolError;

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
    // A JSON object: anything else is refused, before anything runs, by the decoding every
    // dynamic call goes through ([`DynTool::call_json`] of a `Tool`), with serde's message.
    type Args = Map<String, Value>;
    type Output = Value;
    type Error = ToolError;

    // Never what the engine journals: it reads `declared_name`, the upstream tool's exposed name.
    const NAME: &'static str = "mcp-gateway";
    const CLASS: EffectClass = class_at(CLASS);
    const DESCRIPTION: &'static str = "An upstream MCP tool called through the gateway.";
    const HAS_RECOVER: bool = RECOVER;
    // An input that differs under the same key fails the call: a gateway key names the effect.
    const STRICT_INPUT: bool = true;

    fn declared_name(&self) -> &'static str {
        self.0.exposed
    }

    fn declared_input_schema(&self) -> Value {
        self.0.input_schema.clone()
    }

    fn declared_output_schema(&self) -> Option<Value> {
        self.0.output_schema.clone()
    }

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

    fn key(&self, args: &Map<String, Value>) -> Option<String> {
        self.0.key(&Value::Object(args.clone()))
    }

    fn needs_approval(&self, args: &Map<String, Value>) -> bool {
        self.0.approval.is_some()
            && self
                .0
                .decl
                .approval_when
                .as_ref()
                .is_none_or(|c| c.holds(&Value::Object(args.clone())))
    }

    async fn call(&self, ctx: &EffectCtx, args: Map<String, Value>) -> Result<Value, ToolError> {
        self.0.call_upstream(ctx, Value::Object(args)).await
    }

    async fn recover(&self, _ctx: &EffectCtx, args: &Map<String, Value>) -> Result<Option<Value>, ToolError> {
        self.0.recover_upstream(&Value::Object(args.clone())).await
    }
}

/// The tool the toolkit holds: the declaration as [`ToolMeta`], calls through [`Via`].
pub(super) struct GatewayTool(pub(super) Arc<Declared>);

/// `$f` applied to the [`Via`] of `$d`'s class and `recover` flag.
macro_rules! via {
    ($d:expr, |$via:ident| $f:expr) => {{
        let d: Arc<Declared> = $d;
        match (d.decl.class, d.decl.recover.is_some()) {
            (EffectClass::Pure, _) => {
                let $via = Via::<0, false>(d);
                $f
            }
            (EffectClass::Idempotent, false) => {
                let $via = Via::<1, false>(d);
                $f
            }
            (EffectClass::Idempotent, true) => {
                let $via = Via::<1, true>(d);
                $f
            }
            (EffectClass::Compensable, false) => {
                let $via = Via::<2, false>(d);
                $f
            }
            (EffectClass::Compensable, true) => {
                let $via = Via::<2, true>(d);
                $f
            }
            (EffectClass::Irreversible, false) => {
                let $via = Via::<3, false>(d);
                $f
            }
            (EffectClass::Irreversible, true) => {
                let $via = Via::<3, true>(d);
                $f
            }
        }
    }};
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
        // The call path of every `Tool` behind a trait object: the same decoding of the
        // arguments, the same errors, the same report.
        let d = self.0.clone();
        Box::pin(async move { via!(d, |via| DynTool::call_json(&via, engine, run, opts, args).await) })
    }

    fn reconcile_json<'a>(
        &'a self,
        engine: &'a Engine,
        rec: &'a crate::decide::record::EffectRecord,
        run: RunContext,
    ) -> BoxFuture<'a, Result<crate::engine::ReconcileVerdict, crate::call::error::StoreError>> {
        // A declared `recover` asks the upstream, as for a call; without one it is skipped.
        let d = self.0.clone();
        Box::pin(async move { via!(d, |via| engine.reconcile_record(&via, rec, run).await) })
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
