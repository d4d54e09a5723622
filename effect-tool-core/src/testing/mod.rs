//! A testing kit for effect-classified tools. Feature `testing`.
//!
//! The one test every tool with an effect should have: run it twice, and across a crash, and
//! count the effect with a counter the engine cannot see (the fake downstream's own count).
//!
//! ```ignore
//! #[tokio::test]
//! async fn refund_applies_once() {
//!     let payments = FakePayments::default(); // dedupes by idempotency key, counts refunds
//!     let tool = IssueRefund::new(payments.clone());
//!     let args = IssueRefundArgs { order_id: "o-1".into(), amount_cents: 500 };
//!     effect_tool::testing::assert_once_when_run_twice(&tool, args.clone(), || payments.refunds()).await;
//!     effect_tool::testing::assert_once_across_crash(&tool, args, || payments.refunds()).await;
//! }
//! ```
//!
//! - [`EffectHarness::run_twice`]: two identical calls at the same time, a client's retry under
//!   the same call id, and the model re-planning the call under a new call id.
//! - [`EffectHarness::run_across_crash`]: a first attempt claims the key and applies the
//!   effect, then "crashes" (its claim is never completed; its lease expires); a restarted
//!   engine on the same journal calls again. Depending on the class and hooks the call is
//!   reconciled (`recover`), re-run with the same idempotency key (idempotent: the downstream
//!   must dedupe on [`crate::EffectCtx::idempotency_key`]), or blocked for a person
//!   (compensable/irreversible without `recover`). Either way the effect must be counted once.
//! - [`ScriptedModel`]: plays tool-call turns through a [`Dispatcher`] the way a model does,
//!   including the awkward ones (re-planned calls, parallel identical calls, truncated JSON).
//!
//! A `pure` tool has no effect: the helpers check that its counter does not move at all.

use std::sync::Arc;
use std::time::Duration;

pub mod conformance;
pub mod sim;

use serde_json::Value;

use crate::call::context::{EffectCtx, RunContext};
use crate::call::error::EffectError;
use crate::call::key;
use crate::call::tool::Tool;
use crate::decide::record::{Intent, OpOutcome};
use crate::engine::{CallOptions, CallReport, Disposition, Engine, EngineConfig};
use crate::store::{MemoryStore, Store, StoreExt};
use crate::toolkit::{Dispatcher, ToolCall, ToolResult};
use crate::value::class::EffectClass;

/// Who approves calls awaiting approval during the helpers' runs.
pub const TEST_APPROVER: &str = "effect-tool-testing";

/// What [`EffectHarness::run_twice`] saw.
#[derive(Debug)]
pub struct TwiceReport {
    /// Effects counted before the calls.
    pub before: usize,
    /// Effects counted after them.
    pub after: usize,
    /// What happened to each call, in order: two at the same time, a retry under the same
    /// call id, a re-plan under a new call id.
    pub dispositions: Vec<Disposition>,
}

impl TwiceReport {
    /// How many effects the calls applied.
    pub fn effects(&self) -> usize {
        self.after.saturating_sub(self.before)
    }
}

/// What [`EffectHarness::run_across_crash`] saw.
#[derive(Debug)]
pub struct CrashReport {
    /// Effects counted before the crashed attempt.
    pub before: usize,
    /// Effects counted after the crashed attempt (before the restart).
    pub after_crash: usize,
    /// Effects counted after the call on the restarted engine.
    pub after: usize,
    /// What the restarted engine did: `Reconciled` (recover found the effect), `Executed`
    /// (idempotent re-run with the same key), or `Blocked` (a person must resolve the key).
    pub disposition: Disposition,
    /// The restarted call's output, or its error (tool errors as text).
    pub result: Result<Value, EffectError<String>>,
    /// The effect key.
    pub key: String,
}

impl CrashReport {
    /// How many effects the crashed attempt and the restarted call applied together.
    pub fn effects(&self) -> usize {
        self.after.saturating_sub(self.before)
    }
}

/// Runs a tool in the situations that make tools run twice, over one journal.
#[derive(Clone)]
pub struct EffectHarness {
    store: Arc<dyn Store>,
    run: RunContext,
    lease: Duration,
}

impl std::fmt::Debug for EffectHarness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EffectHarness")
            .field("run", &self.run)
            .field("lease", &self.lease)
            .finish_non_exhaustive()
    }
}

impl Default for EffectHarness {
    fn default() -> Self {
        EffectHarness::new()
    }
}

impl EffectHarness {
    /// A harness on a fresh in-memory journal, in a run of its own, with a 100 ms lease for
    /// the crashed attempt.
    pub fn new() -> Self {
        EffectHarness::with_store(MemoryStore::new())
    }

    /// A harness on `store` (e.g. a SQLite file, to test across real processes' journal).
    pub fn with_store(store: impl Store) -> Self {
        EffectHarness {
            store: Arc::new(store),
            run: RunContext::new(format!("effect-test-{:08x}", fastrand::u32(..))),
            lease: Duration::from_millis(100),
        }
    }

    /// Run the calls in `run`.
    pub fn with_run(mut self, run: RunContext) -> Self {
        self.run = run;
        self
    }

    /// The lease of the crashed attempt's claim (how long the restart waits for it to expire).
    pub fn with_lease(mut self, lease: Duration) -> Self {
        self.lease = lease.max(Duration::from_millis(1));
        self
    }

    /// The journal.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// The run the calls belong to.
    pub fn run(&self) -> &RunContext {
        &self.run
    }

    /// A fresh engine on the harness's journal (what a restarted process would build).
    pub fn engine(&self) -> Engine {
        Engine::new(self.store.clone())
    }

    /// Call `tool` with `args` as call `call_id` on `engine`, approving it (as
    /// [`TEST_APPROVER`]) if it waits for approval.
    async fn call_approving<T: Tool>(
        &self,
        engine: &Engine,
        tool: &T,
        call_id: &str,
        args: T::Args,
    ) -> CallReport<T::Output, T::Error> {
        let report = engine
            .call_with_report(tool, &self.run, CallOptions::call_id(call_id), args.clone())
            .await;
        if let Err(EffectError::ApprovalPending(p)) = &report.result {
            // The approver looks at the parked record and approves its input.
            let parked = match self.store.get(&p.key).await {
                Ok(Some(rec)) => rec,
                other => panic!(
                    "the testing kit could not read the parked record `{}`: {other:?}",
                    p.key
                ),
            };
            if let Err(e) = self
                .store
                .approve(&p.key, TEST_APPROVER, &p.role, &parked.fingerprint)
                .await
            {
                panic!("the testing kit could not approve `{}` as `{}`: {e}", p.key, p.role);
            }
            return engine
                .call_with_report(tool, &self.run, CallOptions::call_id(call_id), args)
                .await;
        }
        report
    }

    /// Call `tool` the ways a model and a client repeat a call: two identical calls at the same
    /// time, a retry under the first call id, a re-plan under a new call id. Calls waiting for
    /// approval are approved. `effects` counts the tool's effects (outside the engine).
    ///
    /// # Panics
    ///
    /// If a call fails other than by being blocked (the expected answer for an irreversible
    /// tool without a key called again under a new call id).
    pub async fn run_twice<T: Tool>(&self, tool: &T, args: T::Args, effects: impl Fn() -> usize) -> TwiceReport {
        let engine = self.engine();
        let before = effects();
        let (a, b) = futures::join!(
            self.call_approving(&engine, tool, "effect-test-call-1", args.clone()),
            self.call_approving(&engine, tool, "effect-test-call-1", args.clone()),
        );
        let retry = self
            .call_approving(&engine, tool, "effect-test-call-1", args.clone())
            .await;
        let replan = self.call_approving(&engine, tool, "effect-test-call-2", args).await;
        let mut dispositions = Vec::new();
        for (what, report) in [
            ("the first of two identical calls", a),
            ("the second of two identical calls", b),
            ("the retry under the same call id", retry),
            ("the re-plan under a new call id", replan),
        ] {
            match &report.result {
                Ok(_) | Err(EffectError::Blocked(_)) => dispositions.push(report.disposition),
                Err(e) => panic!("{what} of `{}` failed: {e}", T::NAME),
            }
        }
        TwiceReport {
            before,
            after: effects(),
            dispositions,
        }
    }

    /// Apply `tool`'s effect in an attempt that crashes before recording it (its claim is left
    /// behind and its lease expires), then call again on a restarted engine over the same
    /// journal. `effects` counts the tool's effects (outside the engine).
    ///
    /// # Panics
    ///
    /// If the journal refuses the crashed attempt's claim (the key is already recorded: use a
    /// fresh harness), or for a pure tool (nothing is journaled, so nothing can be left behind:
    /// use [`EffectHarness::run_twice`]).
    pub async fn run_across_crash<T: Tool>(&self, tool: &T, args: T::Args, effects: impl Fn() -> usize) -> CrashReport {
        assert!(
            T::CLASS != EffectClass::Pure,
            "`{}` is pure: it is not journaled, so no claim can be left behind by a crash; check it with run_twice",
            T::NAME
        );
        let key::CallIdentity {
            key,
            fingerprint,
            input,
            ..
        } = key::identify_with(
            tool,
            &self.run,
            &args,
            // The engine that takes over binds sensitive values under the journal's secret.
            self.store
                .marker_secret()
                .await
                .unwrap_or_else(|e| panic!("the testing kit could not read the journal's marker secret: {e}"))
                .as_ref(),
        )
        .unwrap_or_else(|e| panic!("the arguments of `{}` do not serialize: {e}", T::NAME));
        let intent = Intent {
            tool: T::NAME.to_owned(),
            class: T::CLASS,
            run_id: self.run.run_id().to_owned(),
            thread_id: self.run.thread_id().map(str::to_owned),
            call_id: Some("effect-test-crashed".to_owned()),
            fingerprint,
            input,
            ttl_ms: T::TTL.map(|d| d.as_millis() as u64),
            // The crashed attempt is past any approval: it was running.
            approval: None,
            approval_ttl_ms: None,
            holder: None,
        };
        let lease_ms = self.lease.as_millis().max(1) as u64;
        let attempt = match self.store.claim(&key, intent, lease_ms, false).await {
            Ok(OpOutcome::Claimed { attempt, .. }) => attempt,
            Ok(other) => panic!(
                "the testing kit could not claim `{key}` for the crashed attempt: {other:?} (use a fresh harness)"
            ),
            Err(e) => panic!("the testing kit could not claim `{key}` for the crashed attempt: {e}"),
        };
        let before = effects();
        let ctx = EffectCtx::new(
            self.run.clone(),
            T::NAME,
            T::CLASS,
            Some("effect-test-crashed".to_owned()),
            Some(key.clone()),
            attempt,
            None,
        )
        // Signed as the engine that takes over will check it.
        .signed(
            self.store
                .marker_secret()
                .await
                .unwrap_or_else(|e| panic!("the testing kit could not read the journal's marker secret: {e}")),
        );
        // The effect happens; the process dies before the record: the claim stays behind.
        let crashed = tool.call(&ctx, args.clone()).await;
        if let Err(e) = &crashed {
            tracing::warn!(error = %e, "the crashed attempt's tool call failed");
        }
        let after_crash = effects();
        // Wait for the lease to expire on the journal's clock.
        let until = self.store.now() + lease_ms as i64;
        while self.store.now() <= until {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }

        let restarted = Engine::with_config(
            self.store.clone(),
            EngineConfig {
                lease: Duration::from_secs(30),
                ..EngineConfig::default()
            },
        );
        let report = self
            .call_approving(&restarted, tool, "effect-test-after-restart", args)
            .await;
        let result = match report.result {
            Ok(out) => serde_json::to_value(out).map_err(|e| EffectError::Codec {
                tool: T::NAME.to_owned(),
                key: key.clone(),
                message: e.to_string(),
            }),
            Err(e) => Err(e.map_tool_error(|e| e.to_string())),
        };
        CrashReport {
            before,
            after_crash,
            after: effects(),
            disposition: report.disposition,
            result,
            key,
        }
    }
}

/// Run `tool` twice (two at once, a retry, a re-plan) on a fresh journal and assert that
/// `effects` went up by exactly one (by zero for a pure tool).
///
/// # Panics
///
/// With a message naming the tool and what happened, when the count is wrong or a call fails.
pub async fn assert_once_when_run_twice<T: Tool>(tool: &T, args: T::Args, effects: impl Fn() -> usize) -> TwiceReport {
    let report = EffectHarness::new().run_twice(tool, args, effects).await;
    let expected = usize::from(T::CLASS != EffectClass::Pure);
    assert_eq!(
        report.effects(),
        expected,
        "`{}` ({}) applied {} effects for four identical calls (expected {expected}); dispositions: {:?}. {}",
        T::NAME,
        T::CLASS,
        report.effects(),
        report.dispositions,
        if T::CLASS == EffectClass::Pure {
            "A pure tool must not change anything: declare its real class."
        } else {
            "Check the key rule: identical calls must map to one key."
        }
    );
    report
}

/// Crash `tool` between its effect and its record, restart, call again, and assert that
/// `effects` went up by exactly one in total.
///
/// For an idempotent tool without `recover`, this holds only if the tool passes
/// [`EffectCtx::idempotency_key`] downstream and the downstream (the fake `effects` counts)
/// dedupes on it. For a compensable or irreversible tool without `recover`, the restarted call
/// is blocked for a person (and the count stays one).
///
/// # Panics
///
/// With a message naming the tool and what to fix, when the count is wrong or the restarted
/// call fails in an unexpected way.
pub async fn assert_once_across_crash<T: Tool>(tool: &T, args: T::Args, effects: impl Fn() -> usize) -> CrashReport {
    let report = EffectHarness::new().run_across_crash(tool, args, effects).await;
    assert_eq!(
        report.after_crash.saturating_sub(report.before),
        1,
        "the crashed attempt of `{}` did not apply its effect (counted {} → {}): the counter must count this tool's effects",
        T::NAME,
        report.before,
        report.after_crash
    );
    let hint = match (T::CLASS, T::HAS_RECOVER) {
        (EffectClass::Idempotent, false) => {
            "the restarted attempt ran again with the same key: pass ctx.idempotency_key() downstream and make the downstream dedupe on it, or declare `recover`"
        }
        (_, true) => {
            "`recover` did not find the effect the crashed attempt applied: make it look for the key or the marker"
        }
        _ => "a compensable or irreversible tool without `recover` must be blocked after a crash",
    };
    assert_eq!(
        report.effects(),
        1,
        "`{}` ({}) applied {} effects across a crash (expected 1; restarted call: {}): {hint}",
        T::NAME,
        T::CLASS,
        report.effects(),
        report.disposition
    );
    match (&report.result, report.disposition) {
        (Ok(_), Disposition::Reconciled | Disposition::Executed | Disposition::Replayed) => {}
        (Err(EffectError::Blocked(_)), Disposition::Blocked)
            if T::CLASS != EffectClass::Idempotent || T::HAS_RECOVER => {}
        (other, d) => panic!("the restarted call of `{}` ended {d}: {other:?}", T::NAME),
    }
    report
}

/// A model that plays scripted tool-call turns through a [`Dispatcher`].
///
/// ```ignore
/// let transcript = ScriptedModel::adversarial("issue_refund", json!({"order_id": "o-1", "amount_cents": 5}))
///     .play(&dispatcher, &run)
///     .await;
/// assert_eq!(payments.refunds(), 1);
/// ```
#[derive(Debug, Clone, Default)]
pub struct ScriptedModel {
    turns: Vec<Vec<ToolCall>>,
    next_id: usize,
}

/// Every turn's results, in order.
#[derive(Debug, Clone, Default)]
pub struct Transcript {
    /// The results of each turn, in call order.
    pub turns: Vec<Vec<ToolResult>>,
}

impl Transcript {
    /// Every result, turn after turn.
    pub fn results(&self) -> impl Iterator<Item = &ToolResult> {
        self.turns.iter().flatten()
    }

    /// The result of the call with this id.
    pub fn result(&self, call_id: &str) -> Option<&ToolResult> {
        self.results().find(|r| r.call_id == call_id)
    }

    /// The model-facing text of every result, turn after turn.
    pub fn contents(&self) -> Vec<String> {
        self.results().map(ToolResult::content).collect()
    }
}

impl ScriptedModel {
    /// A model with no turns.
    pub fn new() -> Self {
        ScriptedModel::default()
    }

    fn id(&mut self) -> String {
        self.next_id += 1;
        format!("call_{}", self.next_id)
    }

    /// A turn of raw calls (their ids as given).
    pub fn turn(mut self, calls: impl IntoIterator<Item = ToolCall>) -> Self {
        self.turns.push(calls.into_iter().collect());
        self
    }

    /// A turn with one call of `name` with `args`, under a new call id.
    pub fn call(mut self, name: &str, args: Value) -> Self {
        let id = self.id();
        self.turn([ToolCall::new(id, name, args.to_string())])
    }

    /// A turn repeating the previous turn's first call under a new call id (the model
    /// re-planning the same step).
    ///
    /// # Panics
    ///
    /// If there is no previous call.
    pub fn replan(mut self) -> Self {
        let previous = self
            .turns
            .iter()
            .rev()
            .find_map(|t| t.first())
            .cloned()
            .expect("replan needs an earlier call to repeat");
        let id = self.id();
        self.turn([ToolCall::new(id, previous.name, previous.arguments)])
    }

    /// A turn with `n` identical calls of `name` with `args` (parallel tool calls), each under
    /// its own call id.
    pub fn parallel(mut self, name: &str, args: Value, n: usize) -> Self {
        let text = args.to_string();
        let calls: Vec<ToolCall> = (0..n).map(|_| ToolCall::new(self.id(), name, text.clone())).collect();
        self.turn(calls)
    }

    /// A turn with one call whose JSON arguments are cut off halfway (a model hitting its
    /// output limit).
    pub fn truncated(mut self, name: &str, args: Value) -> Self {
        let text = args.to_string();
        let cut = (0..=text.len() / 2)
            .rev()
            .find(|i| text.is_char_boundary(*i))
            .unwrap_or(0);
        let id = self.id();
        self.turn([ToolCall::new(id, name, &text[..cut])])
    }

    /// The turns that make tools run twice, for one call: the call; the same call re-planned
    /// under a new id; three identical calls in one turn; the call with truncated arguments.
    /// A correct tool applies one effect for all of it.
    pub fn adversarial(name: &str, args: Value) -> Self {
        ScriptedModel::new()
            .call(name, args.clone())
            .replan()
            .parallel(name, args.clone(), 3)
            .truncated(name, args)
    }

    /// The scripted turns.
    pub fn turns(&self) -> &[Vec<ToolCall>] {
        &self.turns
    }

    /// Play every turn through `dispatcher` in `run`, one after the other.
    pub async fn play(&self, dispatcher: &Dispatcher, run: &RunContext) -> Transcript {
        let mut transcript = Transcript::default();
        for calls in &self.turns {
            transcript.turns.push(dispatcher.dispatch(run, calls).await);
        }
        transcript
    }
}
