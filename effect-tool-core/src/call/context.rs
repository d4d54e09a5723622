//! The contexts around a call: the [`RunContext`] a caller provides and the [`EffectCtx`] a tool
//! receives.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::call::error::ClaimLost;
use crate::call::lease::LeaseClock;
use crate::value::class::EffectClass;
use crate::value::marker;

/// A callback that receives progress values a tool reports while it runs.
pub type ProgressSink = Arc<dyn Fn(&ProgressEvent) + Send + Sync>;

/// One progress value reported by a running tool.
#[derive(Debug, Clone, PartialEq)]
pub struct ProgressEvent {
    /// The tool that reported it.
    pub tool: String,
    /// The tool call it belongs to, if the caller named one.
    pub call_id: Option<String>,
    /// The value, as JSON.
    pub value: serde_json::Value,
}

/// What the caller knows about the run a call belongs to: run id, thread id, agent,
/// cancellation, and the values the application holds for its tools.
///
/// ```
/// use effect_tool_core::RunContext;
///
/// #[derive(Clone)]
/// struct SmtpPassword(String);
///
/// let run = RunContext::new("run-42")
///     .with_thread("thread-7")
///     .with_agent("support-bot")
///     .with_value(SmtpPassword("hunter2".into()));
/// assert_eq!(run.run_id(), "run-42");
/// assert!(run.value::<SmtpPassword>().is_some());
/// // Values never print: only their types do.
/// assert!(!format!("{run:?}").contains("hunter2"));
/// ```
///
/// **Values the application holds** (API tokens, passwords, clients) are given to the run with
/// [`RunContext::with_value`], one per type, and reach the tools that take them as `#[secret]`
/// arguments (or read them with [`EffectCtx::value`]). They live in this process only: never in
/// a schema, never sent to the model, never written to the journal, the logs or a key. A tool
/// whose value is missing does not run (`EffectError::MissingValue`); to compensate a run
/// (`abandon_run`), give the values to the run passed to it again.
#[derive(Clone)]
pub struct RunContext(
    // Shared: the engine hands a copy to every execution, which then costs a reference count
    // (not the run id's string and the cancellation token's locked count).
    Arc<RunParts>,
);

#[derive(Clone)]
struct RunParts {
    run_id: String,
    thread_id: Option<String>,
    principal: Option<String>,
    /// The client's own key for this call (an MCP `idempotencyKey`, an `Idempotency-Key`
    /// header): the effect key, instead of the tool's rule.
    client_key: Option<String>,
    agent: Option<String>,
    cancellation: CancellationToken,
    progress: Option<ProgressSink>,
    /// The run's own budgets, if given (else the engine's).
    budgets: Option<Arc<crate::call::budget::Budgets>>,
    /// The application's values, by type; the name is the type's, for `Debug`.
    values: HashMap<TypeId, (&'static str, Arc<dyn Any + Send + Sync>)>,
}

impl std::fmt::Debug for RunContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunContext")
            .field("run_id", &self.0.run_id)
            .field("thread_id", &self.0.thread_id)
            .field("principal", &self.0.principal)
            .field("client_key", &self.0.client_key)
            .field("agent", &self.0.agent)
            .field("cancelled", &self.0.cancellation.is_cancelled())
            .field(
                "values",
                &self.0.values.values().map(|(name, _)| *name).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl RunContext {
    /// A run with this id, no thread, and a fresh cancellation token.
    pub fn new(run_id: impl Into<String>) -> Self {
        RunContext(Arc::new(RunParts {
            run_id: run_id.into(),
            thread_id: None,
            principal: None,
            client_key: None,
            agent: None,
            cancellation: CancellationToken::new(),
            progress: None,
            budgets: None,
            values: HashMap::new(),
        }))
    }

    /// This run's budgets ([`crate::call::budget::Budgets`]), in place of the engine's
    /// ([`crate::Engine::with_budgets`]). Every worker of the run must be given the same: the
    /// journal counts what the run spent, each call checks it against the limits it was given.
    pub fn with_budgets(mut self, budgets: crate::call::budget::Budgets) -> Self {
        Arc::make_mut(&mut self.0).budgets = Some(Arc::new(budgets));
        self
    }

    /// The budgets given to this run with [`RunContext::with_budgets`], if any.
    pub fn budgets(&self) -> Option<&crate::call::budget::Budgets> {
        self.0.budgets.as_deref()
    }

    /// The same context (thread, principal, agent, cancellation, progress, values) for the run
    /// `run_id`: for an adapter that takes the run id from each request, and the rest, the
    /// application's values included, from the run it was given.
    pub fn with_run_id(mut self, run_id: impl Into<String>) -> Self {
        Arc::make_mut(&mut self.0).run_id = run_id.into();
        self
    }

    /// The conversation thread the run belongs to (used by `window = "thread"` keys).
    pub fn with_thread(mut self, thread_id: impl Into<String>) -> Self {
        Arc::make_mut(&mut self.0).thread_id = Some(thread_id.into());
        self
    }

    /// The authenticated caller the run acts for (the MCP server sets the principal of an
    /// authenticated request). Keys are then that principal's own: a
    /// `cross-run` key is scoped to it (`principal:<id>:...`, see [`crate::call::key`]), unless the
    /// tool declares `shared_keys`. Run and thread ids are not changed: scope them too when
    /// principals may name the same ones (the MCP server prefixes them with the principal).
    pub fn with_principal(mut self, principal: impl Into<String>) -> Self {
        Arc::make_mut(&mut self.0).principal = Some(principal.into());
        self
    }

    /// The principal the run acts for, if any ([`RunContext::with_principal`]).
    pub fn principal(&self) -> Option<&str> {
        self.0.principal.as_deref()
    }

    /// The client's own idempotency key for the calls made in this context (an MCP request's
    /// `idempotencyKey`, an HTTP `Idempotency-Key` header): it becomes the effect key of a
    /// journaled call instead of the tool's key rule, scoped to the tool and the principal
    /// ([`crate::call::key::client_key`]), and a call under it with other arguments than the
    /// recorded one fails with [`crate::EffectError::InputMismatch`] (the Stripe rule: never a
    /// replay of another request). Meant for a context made per request, as the MCP server
    /// makes one: every call made in it gets the same key.
    pub fn with_client_key(mut self, key: impl Into<String>) -> Self {
        Arc::make_mut(&mut self.0).client_key = Some(key.into());
        self
    }

    /// The client's idempotency key, if any ([`RunContext::with_client_key`]).
    pub fn client_key(&self) -> Option<&str> {
        self.0.client_key.as_deref()
    }

    /// The agent running it, for the tools ([`EffectCtx::agent`]) and the `execute_tool`
    /// spans (`gen_ai.agent.name`); records keep the run and thread ids, not the agent.
    pub fn with_agent(mut self, agent: impl Into<String>) -> Self {
        Arc::make_mut(&mut self.0).agent = Some(agent.into());
        self
    }

    /// Share a cancellation token: cancelling it reaches every tool of the run.
    pub fn with_cancellation(mut self, token: CancellationToken) -> Self {
        Arc::make_mut(&mut self.0).cancellation = token;
        self
    }

    /// Receive the progress values tools report ([`EffectCtx::progress`]).
    pub fn with_progress(mut self, sink: ProgressSink) -> Self {
        Arc::make_mut(&mut self.0).progress = Some(sink);
        self
    }

    /// Give the run's tools a value the application holds (a token, a password, a client): a
    /// `#[secret] name: T` argument receives it, and [`EffectCtx::value`] reads it. One value per
    /// type (a second one of the same type replaces the first), so give each its own type: a
    /// newtype such as `struct SmtpPassword(String)`, not a bare `String`. It stays in this
    /// process: never in a schema, the model's context, the journal, the logs or a key.
    pub fn with_value<T: Send + Sync + 'static>(mut self, value: T) -> Self {
        Arc::make_mut(&mut self.0)
            .values
            .insert(TypeId::of::<T>(), (std::any::type_name::<T>(), Arc::new(value)));
        self
    }

    /// The value of type `T` given with [`RunContext::with_value`], if any.
    pub fn value<T: Send + Sync + 'static>(&self) -> Option<&T> {
        self.0
            .values
            .get(&TypeId::of::<T>())
            .and_then(|(_, v)| v.downcast_ref::<T>())
    }

    /// Whether the run holds a value of type `T` (what the engine checks before a tool that
    /// takes one runs).
    pub fn has_value<T: Send + Sync + 'static>(&self) -> bool {
        self.0.values.contains_key(&TypeId::of::<T>())
    }

    /// The run id.
    pub fn run_id(&self) -> &str {
        &self.0.run_id
    }

    /// The thread id, if any.
    pub fn thread_id(&self) -> Option<&str> {
        self.0.thread_id.as_deref()
    }

    /// The agent name, if any.
    pub fn agent(&self) -> Option<&str> {
        self.0.agent.as_deref()
    }

    /// The run's cancellation token.
    pub fn cancellation(&self) -> &CancellationToken {
        &self.0.cancellation
    }

    /// Cancel the run: tools see it through [`EffectCtx::cancellation`].
    pub fn cancel(&self) {
        self.0.cancellation.cancel();
    }

    pub(crate) fn progress_sink(&self) -> Option<&ProgressSink> {
        self.0.progress.as_ref()
    }
}

impl EffectCtx {
    /// The value of type `T` the application gave the run ([`RunContext::with_value`]), if
    /// any: what a `#[secret]` argument receives, for hooks (`recover`, `compensate`) that need
    /// it too.
    pub fn value<T: Send + Sync + 'static>(&self) -> Option<&T> {
        self.run.value::<T>()
    }
}

/// What a tool receives for one call: who is calling, under which effect key, which attempt.
///
/// Injected by the runtime; never part of the tool's schema.
#[derive(Clone)]
pub struct EffectCtx {
    pub(crate) run: RunContext,
    pub(crate) tool: &'static str,
    pub(crate) class: EffectClass,
    pub(crate) call_id: Option<String>,
    pub(crate) key: Option<String>,
    pub(crate) attempt: u32,
    /// The lease of the claim this call holds, on the engine's clock (`None`: not journaled).
    pub(crate) lease: Option<Arc<LeaseClock>>,
    /// The journal's marker secret ([`marker`]'s "Signed markers"); `None` outside the engine or
    /// for a journal that keeps none.
    pub(crate) marker_secret: Option<marker::MarkerSecret>,
    /// The journal's transaction this call runs in ([`crate::Tool::TRANSACTIONAL`]): the
    /// store's handle ([`EffectCtx::transaction`]), `None` for any other call.
    pub(crate) transaction: Option<Arc<dyn Any + Send + Sync>>,
    /// The provider's callback this call waits for, once the tool asked for one
    /// ([`EffectCtx::pending`]): shared by the context's clones, read by the engine at 4f.
    pub(crate) callback: Arc<std::sync::OnceLock<(crate::value::callback::CallbackToken, std::time::Duration)>>,
    /// Whether the call runs without a claim ([`crate::Tool::ONE_WRITE`]): its one journal
    /// write is its record.
    pub(crate) claimless: bool,
}

impl std::fmt::Debug for EffectCtx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EffectCtx")
            .field("run", &self.run)
            .field("tool", &self.tool)
            .field("class", &self.class)
            .field("call_id", &self.call_id)
            .field("key", &self.key)
            .field("attempt", &self.attempt)
            .field("lease_remaining", &self.lease_remaining())
            .field("in_transaction", &self.transaction.is_some())
            .finish()
    }
}

/// Why [`EffectCtx::transaction`] has no transaction to give: the tool is not declared
/// `transactional`, runs outside the engine, or asked for another store's handle. Nothing was
/// written: return an error from the tool.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("tool `{tool}` asked for a `{expected}`, but {reason}")]
pub struct NoTransaction {
    /// The tool.
    pub tool: &'static str,
    /// The handle's type it asked for.
    pub expected: &'static str,
    /// What is missing, and what to do.
    pub reason: &'static str,
}

/// Longest effect key passed downstream unchanged by [`EffectCtx::idempotency_key`].
pub const MAX_DOWNSTREAM_KEY_LEN: usize = 200;

impl EffectCtx {
    /// A context for calling a tool directly, outside the engine (tests, pure tools).
    pub fn detached(run: RunContext, tool: &'static str, class: EffectClass) -> Self {
        EffectCtx::new(run, tool, class, None, None, 1, None)
    }

    /// The one place a context is made (by the engine, the testing kit, compensation and
    /// [`EffectCtx::detached`]).
    pub(crate) fn new(
        run: RunContext,
        tool: &'static str,
        class: EffectClass,
        call_id: Option<String>,
        key: Option<String>,
        attempt: u32,
        lease: Option<Arc<LeaseClock>>,
    ) -> Self {
        EffectCtx {
            run,
            tool,
            class,
            call_id,
            key,
            attempt,
            lease,
            marker_secret: None,
            transaction: None,
            callback: Arc::default(),
            claimless: false,
        }
    }

    /// The same context for a call that runs without a claim ([`crate::Tool::ONE_WRITE`]).
    pub(crate) fn without_claim(mut self) -> Self {
        self.claimless = true;
        self
    }

    /// The same context inside the journal's transaction `handle` (a transactional call).
    pub(crate) fn in_transaction(mut self, handle: Arc<dyn Any + Send + Sync>) -> Self {
        self.transaction = Some(handle);
        self
    }

    /// The journal's transaction this call runs in, as the store's handle `X`: a
    /// [`SqliteTransaction`](crate::store::sqlite::SqliteTransaction) on a SQLite journal, a
    /// [`PgTransaction`](crate::store::postgres::PgTransaction) on a PostgreSQL one.
    ///
    /// Only a tool declared `#[tool(transactional)]` ([`crate::Tool::TRANSACTIONAL`]) gets one:
    /// what it writes through the handle commits with the call's record, in one commit, or is
    /// rolled back with it (an error from the tool, a panic, a timeout, a crash). Do not
    /// commit or roll back yourself.
    ///
    /// ```ignore
    /// let tx = ctx.transaction::<SqliteTransaction>()?;
    /// tx.with(|conn| conn.execute("INSERT INTO payments (id, cents) VALUES (?1, ?2)", (id, cents)))?;
    /// ```
    pub fn transaction<X: Any + Send + Sync>(&self) -> Result<&X, NoTransaction> {
        let found = self.transaction.as_ref().ok_or(NoTransaction {
            tool: self.tool,
            expected: std::any::type_name::<X>(),
            reason: "the call runs in no journal transaction: declare the tool `#[tool(transactional)]` and call it through an engine on a SQLite or PostgreSQL journal",
        })?;
        found.downcast_ref::<X>().ok_or(NoTransaction {
            tool: self.tool,
            expected: std::any::type_name::<X>(),
            reason: "the journal's transaction is of another store: ask for `SqliteTransaction` on a SQLite journal, `PgTransaction` on a PostgreSQL one",
        })
    }

    /// The same context with markers signed by `secret`, if there is one (the engine's).
    pub(crate) fn signed(mut self, secret: Option<marker::MarkerSecret>) -> Self {
        self.marker_secret = secret;
        self
    }

    /// The same context with markers signed by `secret` (see [`marker`]'s "Signed markers"):
    /// for tests and tools called outside the engine, which otherwise write plain markers.
    pub fn with_marker_secret(mut self, secret: marker::MarkerSecret) -> Self {
        self.marker_secret = Some(secret);
        self
    }

    /// The run id.
    pub fn run_id(&self) -> &str {
        self.run.run_id()
    }

    /// The thread id, if any.
    pub fn thread_id(&self) -> Option<&str> {
        self.run.thread_id()
    }

    /// The agent, if any.
    pub fn agent(&self) -> Option<&str> {
        self.run.agent()
    }

    /// The model's tool-call id, if the caller gave one.
    pub fn tool_call_id(&self) -> Option<&str> {
        self.call_id.as_deref()
    }

    /// The tool's name.
    pub fn tool(&self) -> &'static str {
        self.tool
    }

    /// The tool's effect class.
    pub fn class(&self) -> EffectClass {
        self.class
    }

    /// The effect key of this call (`None` for pure tools, which are not journaled).
    pub fn effect_key(&self) -> Option<&str> {
        self.key.as_deref()
    }

    /// The key to pass to the downstream system's idempotency mechanism (e.g. Stripe's
    /// `Idempotency-Key`): the same on every attempt of the same effect.
    ///
    /// This is the effect key when it is at most [`MAX_DOWNSTREAM_KEY_LEN`] bytes of visible
    /// ASCII, else `et-` followed by the SHA-256 hex of the effect key. For pure tools (no key)
    /// it is derived from the run and call id.
    pub fn idempotency_key(&self) -> String {
        let key = match &self.key {
            Some(k) => k.clone(),
            None => format!(
                "{}:{}:{}",
                self.run.run_id(),
                self.tool,
                self.call_id.as_deref().unwrap_or("-")
            ),
        };
        if key.len() <= MAX_DOWNSTREAM_KEY_LEN && key.bytes().all(|b| b.is_ascii_graphic()) {
            key
        } else {
            format!("et-{}", crate::value::digest::sha256_hex(key.as_bytes()))
        }
    }

    /// The attempt number: 1 on the first execution of this effect, then one more for every
    /// claim of the same key (after a crash, a retry, a reconciliation).
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The fencing token of this attempt, to pass downstream with the effect: it is the
    /// attempt number, so it grows with every claim of the key (never reused, even after the
    /// record expires). A downstream system that remembers the highest token it has seen per
    /// key and refuses lower ones cannot be reached by an attempt that lost its claim, however
    /// long that attempt was paused.
    ///
    /// A `one_write` call ([`crate::Tool::ONE_WRITE`]) holds no claim: its token is its run
    /// count in this call (1, then one more per retry), which another process running the same
    /// call gets too. A tool that fences downstream writes needs the claim: declare it without
    /// `one_write`.
    pub fn fencing_token(&self) -> u64 {
        u64::from(self.attempt)
    }

    /// Whether this attempt still holds its claim on the key, by the engine's own clock: call
    /// it as the last thing before the effect (after the last `.await` that precedes it), and
    /// do not apply the effect if it fails.
    ///
    /// The engine already stops a tool whose lease has lapsed at every await point: it is not
    /// started, and its future is not polled further (it is dropped), once the lease (counted
    /// from when the claim or its last renewal was sent, on this process's monotonic clock)
    /// has passed. What that cannot cover is the code between the tool's last `.await` and
    /// the effect itself: a process paused right there (a GC pause, a stopped VM, SIGSTOP)
    /// resumes and runs it without being polled again. This check narrows that window to the
    /// instant between the check and the effect; only a fencing token checked by the
    /// downstream system ([`EffectCtx::fencing_token`]) closes it. Note that the monotonic
    /// clock does not count time a machine spends suspended on every platform (Linux's
    /// `CLOCK_MONOTONIC` does not).
    ///
    /// Outside the engine (a detached context, a pure tool) and in a `one_write` call there is
    /// no claim and this always succeeds. On failure, return an error from the tool: the engine does not record this
    /// attempt, and the call returns [`crate::EffectError::ClaimLost`].
    pub fn ensure_lease(&self) -> Result<(), ClaimLost> {
        match &self.lease {
            Some(lease) if lease.lapsed() => {
                lease.refuse();
                Err(ClaimLost {
                    tool: self.tool.to_owned(),
                    key: self.key.clone().unwrap_or_default(),
                    attempt: self.attempt,
                })
            }
            _ => Ok(()),
        }
    }

    /// How long this attempt's claim still runs by the engine's clock before it is renewed
    /// (`None` outside the engine). Renewals extend it while the tool runs.
    pub fn lease_remaining(&self) -> Option<std::time::Duration> {
        self.lease.as_ref().map(|l| l.remaining())
    }

    /// The run's cancellation token: long-running tools should stop when it fires.
    pub fn cancellation(&self) -> &tokio_util::sync::CancellationToken {
        self.run.cancellation()
    }

    /// A hidden HTML comment carrying an opaque id of this call's effect key (never the key:
    /// see [`marker`]), to embed in what the tool creates (a comment, a PR description, an
    /// email) so that `recover` can find it with [`EffectCtx::contains_marker`], and an
    /// operator with `effect-tool show --marker`.
    ///
    /// The id is a MAC of the key under the journal's marker secret ([`marker::signed_marker`]),
    /// so that nobody without the secret can plant it; a plain [`marker::marker`] when there is
    /// no secret (a detached context, or a store that keeps none: see
    /// [`crate::Store::marker_secret`]).
    pub fn marker(&self) -> String {
        let key = self.marker_key();
        match &self.marker_secret {
            Some(secret) => marker::signed_marker(&key, secret),
            None => marker::marker(&key),
        }
    }

    /// Whether `text` carries this call's marker, as [`EffectCtx::marker`] writes it: signed
    /// with the journal's secret for this call's key. A planted plain marker, or one with a
    /// wrong MAC, does not count. It proves who *wrote* the marker, not who posted the text:
    /// where the author is known (a comment's user), check it too.
    ///
    /// Without a secret (see [`EffectCtx::marker`]) only the plain marker is looked for, which
    /// anyone could have written.
    pub fn contains_marker(&self, text: &str) -> bool {
        let key = self.marker_key();
        match &self.marker_secret {
            Some(secret) => marker::contains_marker(text, &key, secret),
            None => marker::contains_plain_marker(text, &key),
        }
    }

    fn marker_key(&self) -> std::borrow::Cow<'_, str> {
        match &self.key {
            Some(key) => std::borrow::Cow::Borrowed(key),
            None => std::borrow::Cow::Owned(self.idempotency_key()),
        }
    }

    /// Report a progress value to the caller (see [`RunContext::with_progress`]).
    pub fn progress<T: serde::Serialize>(&self, value: &T) {
        if let Some(sink) = self.run.progress_sink()
            && let Ok(value) = serde_json::to_value(value)
        {
            sink(&ProgressEvent {
                tool: self.tool.to_owned(),
                call_id: self.call_id.clone(),
                value,
            });
        }
    }
}
