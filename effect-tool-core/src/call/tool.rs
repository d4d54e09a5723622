//! The trait a declared tool implements. `#[tool(...)]` generates it; a manual impl must state
//! the effect class too (the associated const has no default).

use std::future::Future;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::call::context::{EffectCtx, RunContext};
use crate::decide::policy::RetryPolicy;
use crate::value::class::{EffectClass, Window};
use crate::value::outcome::ClassifyError;

/// How a tool's effect key is made, as written in the declaration (for manifests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyRule {
    /// `<scope>:<tool>:<sha256 hex of the canonical JSON input>` (sensitive fields left out).
    Default,
    /// The named argument fields, canonicalized and hashed.
    Fields(&'static [&'static str]),
    /// A closure over the arguments; the text is the closure as written in the source.
    Custom(&'static str),
}

impl std::fmt::Display for KeyRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KeyRule::Default => f.write_str("default"),
            KeyRule::Fields(fields) => write!(f, "fields({})", fields.join(", ")),
            KeyRule::Custom(src) => write!(f, "custom({src})"),
        }
    }
}

/// A value a tool takes from the run (a `#[secret]` argument): the application gives it with
/// [`RunContext::with_value`]; it is never in the schema and never reaches the model.
#[derive(Clone, Copy)]
pub struct Injected {
    /// The type's name as written in the declaration, for the error when it is missing.
    pub type_name: &'static str,
    /// Whether a run holds it (`RunContext::has_value::<T>`).
    pub present: fn(&RunContext) -> bool,
}

impl std::fmt::Debug for Injected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.type_name)
    }
}

/// Two entries are equal when they name the same type, as written in the declaration (what a
/// manifest shows); the `present` functions are not compared.
impl PartialEq for Injected {
    fn eq(&self, other: &Self) -> bool {
        self.type_name == other.type_name
    }
}

impl Eq for Injected {}

/// The first value `T` takes from the run that `run` does not hold (its type's name).
pub fn missing_value<T: Tool>(run: &RunContext) -> Option<&'static str> {
    T::INJECTED.iter().find(|i| !(i.present)(run)).map(|i| i.type_name)
}

/// [`missing_value`] as the error a call returns before anything runs.
pub fn check_values<T: Tool>(run: &RunContext) -> Result<(), crate::EffectError<T::Error>> {
    match missing_value::<T>(run) {
        None => Ok(()),
        Some(type_name) => Err(crate::EffectError::MissingValue {
            tool: T::NAME.to_owned(),
            type_name: type_name.to_owned(),
        }),
    }
}

/// What a tool's error type must provide: a message, and whether it says what happened.
pub trait ToolErrorBound: ClassifyError + std::fmt::Display + std::fmt::Debug + Send + Sync + 'static {}
impl<E> ToolErrorBound for E where E: ClassifyError + std::fmt::Display + std::fmt::Debug + Send + Sync + 'static {}

/// A tool a model can call, with its declared effect class.
///
/// Write it with `#[effect_tool::tool(...)]`; by hand, every associated item without a default
/// must be given, the effect class among them:
///
/// ```
/// use effect_tool_core::{EffectClass, EffectCtx, Tool, ToolError};
///
/// struct Echo;
///
/// impl Tool for Echo {
///     type Args = String;
///     type Output = String;
///     type Error = ToolError;
///     const NAME: &'static str = "echo";
///     const CLASS: EffectClass = EffectClass::Pure;
///
///     async fn call(&self, _ctx: &EffectCtx, args: String) -> Result<String, ToolError> {
///         Ok(args)
///     }
/// }
/// ```
pub trait Tool: Send + Sync + 'static {
    /// The arguments the model passes, decoded from JSON (cloned for retries).
    type Args: Clone + Serialize + DeserializeOwned + schemars::JsonSchema + Send + Sync + 'static;
    /// What the tool returns; recorded in the journal and replayed.
    type Output: Serialize + DeserializeOwned + Send + Sync + 'static;
    /// The tool's error, which says whether a failure is definitive, transient or unknown.
    type Error: ToolErrorBound;

    /// The tool's name as the model sees it.
    const NAME: &'static str;
    /// The effect class. No default: every tool must say what running it twice does.
    const CLASS: EffectClass;
    /// What the tool does, for the model (the doc comment under `#[tool]`).
    const DESCRIPTION: &'static str = "";
    /// How the effect key is made (for manifests; [`Tool::key`] computes custom keys).
    const KEY_RULE: KeyRule = KeyRule::Default;
    /// Where the key is unique.
    const WINDOW: Window = Window::Run;
    /// Whether the tool's keys are shared by every principal that calls it (`#[tool(shared_keys)]`).
    /// By default a call made for a principal ([`crate::RunContext::with_principal`], as the MCP
    /// server does for an authenticated caller) has a key of that principal's own, so that no
    /// principal can replay, or pre-empt, another's call by sending the same arguments.
    const SHARED_KEYS: bool = false;
    /// How long a record lives before `gc` may drop it (`None`: kept until removed).
    const TTL: Option<Duration> = None;
    /// The longest an execution may take; when it passes, the outcome is unknown.
    const TIMEOUT: Option<Duration> = None;
    /// Every name of the sensitive argument fields (`#[sensitive]`): the serialized name, and
    /// each other name serde accepts when decoding (`rename(deserialize = ...)`, `alias`, a
    /// container's `rename_all`: a hand-written impl lists them all). The model supplies these
    /// values (they are in the schema); they are never stored, logged, hashed into a key or
    /// quoted in an error text, under whichever of these names they are sent.
    const SENSITIVE: &'static [&'static str] = &[];
    /// The values the tool takes from the run (`#[secret]` arguments): checked before anything
    /// runs, never in the schema.
    const INJECTED: &'static [Injected] = &[];
    /// Whether [`Tool::recover`] is implemented (it asks the remote system whether the effect
    /// already exists).
    const HAS_RECOVER: bool = false;
    /// Whether [`Tool::compensate`] is implemented.
    const HAS_COMPENSATE: bool = false;
    /// The role whose approval the call waits for, if any (see [`Tool::needs_approval`]).
    const APPROVAL: Option<&'static str> = None;
    /// The condition under which approval is needed, as written (`when = |a| ...`), for
    /// manifests; `None`: every call needs it.
    const APPROVAL_WHEN: Option<&'static str> = None;
    /// When the key is found recorded under a different input: `false` logs a warning and
    /// returns the record, `true` fails the call with [`crate::EffectError::InputMismatch`].
    const STRICT_INPUT: bool = false;
    /// The MCP `openWorldHint`: whether the tool reaches outside systems.
    const OPEN_WORLD: Option<bool> = None;
    /// Retry overrides, clamped to what the class allows.
    const RETRY: RetryPolicy = RetryPolicy::DEFAULT;

    /// The JSON Schema of [`Tool::Args`] as exported to models.
    fn input_schema() -> serde_json::Value {
        crate::value::schema::input_schema::<Self::Args>()
    }

    /// The JSON Schema of [`Tool::Output`], if known: the engine keeps it in the journal
    /// ([`crate::Store::put_output_schema`], once per tool and process), so that an output a
    /// person records by hand ([`crate::StoreExt::resolve`], `effect-tool resolve --applied
    /// --output`, the console) is checked against it and `effect-tool show` can say what shape
    /// is expected.
    ///
    /// `#[tool]` returns the schema of the output type, which must implement
    /// [`schemars::JsonSchema`] (a type without it is a compile error naming
    /// `effect_tool::hooks::ToolOutputSchema`). The toolkit exports it as the tool's MCP
    /// `outputSchema` ([`crate::toolkit::mcp_output_schema`]) and the manifest names its digest. The default, for a manual impl, is `None` (outputs recorded by
    /// hand are then not checked); return
    /// `Some(effect_tool_core::value::schema::output_schema::<Self::Output>())` to have them checked.
    fn output_schema() -> Option<serde_json::Value> {
        None
    }

    /// The output type's name as the manifest writes it (`# output: <tool>: <type> ...`, when
    /// [`Tool::output_schema`] is `Some`): `#[tool]` gives the `Ok` type as written in the
    /// function's signature (`Refund`, `Vec<Refund>`); the default is the compiler's name of
    /// [`Tool::Output`].
    fn output_type() -> &'static str {
        std::any::type_name::<Self::Output>()
    }

    /// A custom effect key from the arguments (`None`: the rule's default key).
    fn key(&self, args: &Self::Args) -> Option<String> {
        let _ = args;
        None
    }

    /// Whether this call needs approval (`approval = "role", when = |args| ...`).
    fn needs_approval(&self, args: &Self::Args) -> bool {
        let _ = args;
        Self::APPROVAL.is_some()
    }

    /// Run the tool.
    fn call(&self, ctx: &EffectCtx, args: Self::Args)
    -> impl Future<Output = Result<Self::Output, Self::Error>> + Send;

    /// Ask the remote system whether the effect already exists: `Some(output)` if it does.
    fn recover(
        &self,
        ctx: &EffectCtx,
        args: &Self::Args,
    ) -> impl Future<Output = Result<Option<Self::Output>, Self::Error>> + Send {
        let _ = (ctx, args);
        async { Ok(None) }
    }

    /// Undo a completed compensable effect.
    fn compensate(
        &self,
        ctx: &EffectCtx,
        args: &Self::Args,
        output: &Self::Output,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send {
        let _ = (ctx, args, output);
        async { Ok(()) }
    }
}

/// Everything a declaration says about a tool, as data (for manifests, exports, adapters).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolMeta {
    /// The tool's name.
    pub name: &'static str,
    /// The description for the model.
    pub description: &'static str,
    /// The effect class.
    pub class: EffectClass,
    /// How the key is made.
    pub key_rule: KeyRule,
    /// Where the key is unique.
    pub window: Window,
    /// Whether the keys are shared by every principal ([`Tool::SHARED_KEYS`]).
    pub shared_keys: bool,
    /// The records' time to live.
    pub ttl: Option<Duration>,
    /// The execution timeout.
    pub timeout: Option<Duration>,
    /// The names of the sensitive argument fields ([`Tool::SENSITIVE`]).
    pub sensitive: &'static [&'static str],
    /// The values the tool takes from the run (its `#[secret]` arguments), by type.
    pub injected: &'static [Injected],
    /// Whether a `recover` hook is declared.
    pub has_recover: bool,
    /// Whether a `compensate` hook is declared.
    pub has_compensate: bool,
    /// The approving role, if any.
    pub approval: Option<&'static str>,
    /// The approval condition as written, if any.
    pub approval_when: Option<&'static str>,
    /// The MCP `openWorldHint`.
    pub open_world: Option<bool>,
    /// The retry limits.
    pub retry: RetryPolicy,
}

impl ToolMeta {
    /// The metadata of `T`.
    pub fn of<T: Tool>() -> ToolMeta {
        ToolMeta {
            name: T::NAME,
            description: T::DESCRIPTION,
            class: T::CLASS,
            key_rule: T::KEY_RULE,
            window: T::WINDOW,
            shared_keys: T::SHARED_KEYS,
            ttl: T::TTL,
            timeout: T::TIMEOUT,
            sensitive: T::SENSITIVE,
            injected: T::INJECTED,
            has_recover: T::HAS_RECOVER,
            has_compensate: T::HAS_COMPENSATE,
            approval: T::APPROVAL,
            approval_when: T::APPROVAL_WHEN,
            open_world: T::OPEN_WORLD,
            retry: T::RETRY,
        }
    }
}
