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

/// What a tool's check of the remote system found ([`Tool::verify`]): whether the effect of a
/// call whose outcome is unknown exists.
///
/// [`Tool::recover`] answers with an `Option` (`Some(output)`: applied, `None`: not applied);
/// [`Tool::verify`] adds a third answer, [`Recovery::Inconclusive`], for a lookup that cannot
/// tell yet (a search index behind its writes, a replica that lags, a rate-limited API). The
/// default `verify` is `recover`'s answer, with a recover error classified as transient
/// ([`crate::Failure::Transient`]) read as inconclusive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recovery<O> {
    /// The effect exists: this output is recorded as the call's result.
    Applied(O),
    /// The effect does not exist: the call may run.
    NotApplied,
    /// The remote system cannot tell yet: the record stays in doubt and is asked again later
    /// (by the next identical call, or by a [reconciler](crate::toolkit::Reconciler)).
    Inconclusive {
        /// Why, in words (kept as the record's reason and in the audit trail).
        reason: String,
        /// How long to wait before asking again, if the tool knows (`None`: the reconciler's
        /// own interval).
        retry_after: Option<Duration>,
    },
}

impl<O> Recovery<O> {
    /// [`Recovery::Inconclusive`] with `reason`, to be asked again at the reconciler's pace.
    pub fn inconclusive(reason: impl Into<String>) -> Self {
        Recovery::Inconclusive {
            reason: reason.into(),
            retry_after: None,
        }
    }

    /// [`Recovery::Inconclusive`] with `reason`, to be asked again after `after`.
    pub fn inconclusive_after(reason: impl Into<String>, after: Duration) -> Self {
        Recovery::Inconclusive {
            reason: reason.into(),
            retry_after: Some(after),
        }
    }

    /// The verdict's name in the audit trail: `applied`, `not-applied`, `inconclusive`.
    pub fn verdict(&self) -> &'static str {
        match self {
            Recovery::Applied(_) => "applied",
            Recovery::NotApplied => "not-applied",
            Recovery::Inconclusive { .. } => "inconclusive",
        }
    }
}

/// `Some(output)` is [`Recovery::Applied`], `None` [`Recovery::NotApplied`]: what
/// [`Tool::recover`] answers.
impl<O> From<Option<O>> for Recovery<O> {
    fn from(found: Option<O>) -> Self {
        match found {
            Some(out) => Recovery::Applied(out),
            None => Recovery::NotApplied,
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
    /// How long a write takes to show in what [`Tool::recover`] reads (a search index, a
    /// replica): the engine asks `recover` no sooner than this after the outcome became unknown
    /// (`None`: at once). A record that is younger is left for later by a reconciler; a call
    /// waits it out under its claim. `#[tool(recover = ..., recover_settle = "30s")]` sets it.
    const RECOVER_SETTLE: Option<Duration> = None;
    /// Whether `recover` is also asked before an execution that has no recorded result
    /// (`#[tool(recover = ..., recover_first)]`), not only after an unknown outcome: a
    /// journal restored from a backup, a record past its ttl, or an effect made by another path
    /// is then found and recorded instead of run again. Costs one `recover` (a read of the
    /// remote system) before every first execution; ignored without a `recover` hook.
    const RECOVER_FIRST: bool = false;
    /// Whether [`Tool::compensate`] is implemented.
    const HAS_COMPENSATE: bool = false;
    /// The role whose approval the call waits for, if any (see [`Tool::needs_approval`]).
    const APPROVAL: Option<&'static str> = None;
    /// The condition under which approval is needed, as written (`when = |a| ...`), for
    /// manifests; `None`: every call needs it.
    const APPROVAL_WHEN: Option<&'static str> = None;
    /// How long a person's approval of a call stays valid (`#[tool(approval_ttl = "2h")]`):
    /// a call that comes after it lapsed parks for a new approval. `None`: 24 hours
    /// ([`crate::decide::record::DEFAULT_APPROVAL_TTL_MS`]).
    const APPROVAL_TTL: Option<Duration> = None;
    /// When the key is found recorded under a different input: `false` logs a warning and
    /// returns the record, `true` fails the call with [`crate::EffectError::InputMismatch`].
    const STRICT_INPUT: bool = false;
    /// The MCP `openWorldHint`: whether the tool reaches outside systems.
    const OPEN_WORLD: Option<bool> = None;
    /// Retry overrides, clamped to what the class allows.
    const RETRY: RetryPolicy = RetryPolicy::DEFAULT;
    /// Whether the tool's effect is a write to the database that holds the journal, made in
    /// the journal's own transaction (`#[tool(transactional)]`): the engine opens one
    /// transaction per call, claims the key in it, gives it to the tool
    /// ([`EffectCtx::transaction`]) and records the output in it before the one commit. The
    /// tool's writes and its record commit together or not at all, so such a call is never in
    /// doubt. Needs a store with transactions ([`crate::Store::begin_transaction`]: SQLite,
    /// PostgreSQL); on any other, the call fails before anything runs. Not with
    /// [`Tool::APPROVAL`] (a parked call would wait outside the transaction).
    const TRANSACTIONAL: bool = false;
    /// Whether an idempotent call's one journal write is its record (`#[tool(one_write)]`).
    ///
    /// When the journal has no record of the call's key, the tool runs before anything is
    /// written (no claim), and its completed output is then recorded if the key still has no
    /// record; if another process recorded the same key meanwhile, that record wins and this
    /// call answers with it (a replay). One write per call instead of a claim and a record.
    /// An identical call in this process still joins the running one; an identical call in
    /// another process finds no claim to wait for and runs too. The idempotent class allows it:
    /// both pass the same key downstream ([`EffectCtx::idempotency_key`]), which applies it once.
    ///
    /// What a reader of the journal sees: nothing while the call runs (`effect-tool list` shows
    /// no call in flight), then its completed record. A crash while it runs leaves nothing
    /// behind, and the next call runs it again under the same key. A failure that leaves the
    /// outcome unknown is still written down, as a record in doubt, for a person to look at.
    /// Such a call cannot wait for a callback: [`EffectCtx::pending`] refuses it (only a claim
    /// can wait).
    ///
    /// Applies only to idempotent tools with no approval ([`Tool::APPROVAL`]: a person's
    /// decision needs the claim that parks the call), no `recover` hook ([`Tool::HAS_RECOVER`]:
    /// it is asked about a claim's unknown outcome) and not [`Tool::TRANSACTIONAL`] (the
    /// transaction already makes the claim and the record one commit); `#[tool]` refuses every
    /// other combination at compile time. The engine ignores it on a manual impl of any other
    /// class, and on a call that needs an approval or has a `recover` hook or a transaction: such
    /// a call is claimed as usual.
    const ONE_WRITE: bool = false;

    /// The units this tool declares a cost in (`#[tool(cost(refund_cents = |a| ...))]`): each
    /// call charges [`Tool::costs`] to the run's spend budget of that unit, if it has one
    /// ([`crate::call::budget::Budgets::spend`]).
    const COSTS: &'static [&'static str] = &[];

    /// Whether [`Tool::to_model`] is implemented (`#[tool(to_model = path)]`): the model reads
    /// a view of the output, not the output.
    const HAS_VIEW: bool = false;

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

    /// The name this tool's calls are journaled, keyed and reported under: [`Tool::NAME`],
    /// unless the tool is declared at run time (each tool of the MCP gateway is one type per
    /// effect class, named by its upstream tool). The engine reads the name only through this
    /// method: two tools of one type with different names never share a key or a record.
    fn declared_name(&self) -> &'static str {
        Self::NAME
    }

    /// The arguments' JSON Schema the journal keeps for a person's edit of a parked call
    /// ([`crate::Store::put_input_schema`]): [`Tool::input_schema`], unless the tool is declared
    /// at run time (a tool of the MCP gateway: the upstream's `inputSchema`).
    fn declared_input_schema(&self) -> serde_json::Value {
        Self::input_schema()
    }

    /// The output's JSON Schema the journal keeps for a person's record of an output
    /// ([`crate::Store::put_output_schema`]): [`Tool::output_schema`], unless the tool is
    /// declared at run time (a tool of the MCP gateway: the upstream's `outputSchema`).
    fn declared_output_schema(&self) -> Option<serde_json::Value> {
        Self::output_schema()
    }

    /// The approving role of this tool's calls: [`Tool::APPROVAL`], unless the tool is declared
    /// at run time (a tool of the MCP gateway, whose declaration is read from a file) and says
    /// otherwise. The engine journals this role with every call that [`Tool::needs_approval`].
    fn declared_approval(&self) -> Option<&'static str> {
        Self::APPROVAL
    }

    /// The records' time to live: [`Tool::TTL`], unless the tool is declared at run time.
    fn declared_ttl(&self) -> Option<Duration> {
        Self::TTL
    }

    /// Where the key is unique: [`Tool::WINDOW`], unless the tool is declared at run time.
    fn declared_window(&self) -> Window {
        Self::WINDOW
    }

    /// The retry limits: [`Tool::RETRY`], unless the tool is declared at run time.
    fn declared_retry(&self) -> RetryPolicy {
        Self::RETRY
    }

    /// What the model reads of `output`, when it is not the output itself
    /// (`#[tool(to_model = path)]`): a summary, an image, a form with fields left out. `None`
    /// (the default): the output, as JSON text (a string as it is).
    ///
    /// The journal records the whole output and a replay returns it whole to code; every
    /// result the model reads goes through this view, executed, replayed, shared or reconciled
    /// (see [`crate::call::view`]). Implement it with [`Tool::HAS_VIEW`] set to `true`.
    fn to_model(&self, output: &Self::Output) -> Option<crate::call::view::ModelOutput> {
        let _ = output;
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

    /// What this call costs, per unit of [`Tool::COSTS`] (`#[tool(cost(unit = |a| ...))]`):
    /// charged to the run's spend budgets before the call is claimed. The default costs nothing.
    fn costs(&self, args: &Self::Args) -> Vec<(&'static str, u64)> {
        let _ = args;
        Vec::new()
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

    /// Ask the remote system whether the effect exists, with an answer for "cannot tell yet"
    /// ([`Recovery::Inconclusive`]). The engine asks this, never [`Tool::recover`] directly.
    ///
    /// The default calls `recover`: `Some` is applied, `None` not applied, and an error
    /// classified as transient ([`crate::ClassifyError::failure`] is
    /// [`crate::Failure::Transient`]) inconclusive; any other error is the hook's failure (the
    /// record stays in doubt). Implement it instead of `recover` to answer inconclusive
    /// yourself.
    fn verify(
        &self,
        ctx: &EffectCtx,
        args: &Self::Args,
    ) -> impl Future<Output = Result<Recovery<Self::Output>, Self::Error>> + Send {
        let asked = self.recover(ctx, args);
        async move {
            match asked.await {
                Ok(found) => Ok(Recovery::from(found)),
                Err(e) => match crate::value::outcome::ClassifyError::failure(&e) {
                    Some(crate::value::outcome::Failure::Transient { retry_after }) => Ok(Recovery::Inconclusive {
                        reason: e.to_string(),
                        retry_after,
                    }),
                    _ => Err(e),
                },
            }
        }
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
    /// The units the tool declares a cost in ([`Tool::COSTS`]), charged to the run's spend
    /// budgets.
    pub costs: &'static [&'static str],
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
            costs: T::COSTS,
        }
    }
}
