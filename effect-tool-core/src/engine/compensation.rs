//! Abandoning a run: undo each completed compensable effect, newest first.
//!
//! Each compensation is journaled as its own effect under `compensate:<key>`
//! (its intent: [`compensation_intent`]), so it never runs twice even if the
//! abandonment is retried or runs in two processes at once. It goes through a call's stages
//! (numbered as in the [layer's docs](super)): 4a claim, 4d execute (under the claim's guarded
//! lease, renewed by the same renewal as a call's), 4e settle a failure (the tool's retry
//! policy), 4f record. The original record is marked [`RecordState::Compensated`] once its
//! compensation is recorded. A person who undid an effect by hand records it with
//! [`record_compensated_by_hand`] under the same key, so an abandonment never runs it again.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Value, json};
use tokio::time::Instant;

use super::complete::Completion;
use super::execute::panic_message;
use super::lease::{Held, LeaseClock, Leased};
use super::lifecycle::Engine;
use crate::call::context::{EffectCtx, RunContext};
use crate::call::error::{EffectError, StoreError};
use crate::decide::policy::{Decision, PolicyInput, decide};
use crate::decide::record::RecordState;
use crate::decide::record::{EffectRecord, Holder, Intent, OpOutcome, Rejected};
use crate::engine::dyn_tool::DynTool;
use crate::store::{Filter, Store, StoreExt};
use crate::value::class::EffectClass;
use crate::value::outcome::{Failure, Outcome};

/// The actor recorded in the audit trail for compensations the runtime runs.
pub const COMPENSATION_ACTOR: &str = "effect-tool:abandon";

/// What abandoning a run did.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct AbandonReport {
    /// Keys whose compensation ran now, newest effect first.
    pub compensated: Vec<String>,
    /// Keys whose compensation had already been recorded (by an earlier abandonment).
    pub already_compensated: Vec<String>,
    /// Keys whose compensation failed, with the error; abandoning again retries them.
    pub failed: Vec<(String, String)>,
    /// Keys of completed compensable effects whose tool is not among the given tools.
    pub unknown_tool: Vec<String>,
    /// Keys of compensable effects of the run still running or in doubt: nothing was undone
    /// for them. Once they settle (a person resolves the ones in doubt), abandon again.
    pub pending: Vec<String>,
}

impl AbandonReport {
    /// Whether every compensation is recorded.
    pub fn is_complete(&self) -> bool {
        self.failed.is_empty() && self.unknown_tool.is_empty() && self.pending.is_empty()
    }
}

/// The key under which the compensation of `key` is journaled. (The CLI reaches it through
/// `crate::__cli`.)
pub(crate) fn compensation_key(key: &str) -> String {
    format!("compensate:{key}")
}

/// The intent under which the compensation of `rec` is journaled (under
/// `compensate:<key>`): an idempotent effect of the tool `<tool>.compensate`, in `run_id` and
/// `thread_id`, with the effect's fingerprint and input, claimed by `holder` (`None`: a person).
pub fn compensation_intent(
    rec: &EffectRecord,
    run_id: &str,
    thread_id: Option<&str>,
    holder: Option<Holder>,
) -> Intent {
    Intent {
        tool: format!("{}.compensate", rec.tool),
        class: EffectClass::Idempotent,
        run_id: run_id.to_owned(),
        thread_id: thread_id.map(str::to_owned),
        call_id: None,
        fingerprint: rec.fingerprint.clone(),
        input: rec.input.clone(),
        ttl_ms: None,
        approval: None,
        approval_ttl_ms: None,
        holder: holder.map(Box::new),
    }
}

/// The completed compensable effects among `records`, newest first: the order an abandonment
/// undoes them in (the reverse order of doing).
pub fn to_compensate(records: &[EffectRecord]) -> Vec<EffectRecord> {
    let mut undo: Vec<EffectRecord> = records
        .iter()
        .filter(|r| r.state == RecordState::Completed && r.class == EffectClass::Compensable)
        .cloned()
        .collect();
    newest_first(&mut undo);
    undo
}

fn newest_first(records: &mut [EffectRecord]) {
    records.sort_by(|a, b| b.updated_at.cmp(&a.updated_at).then(b.created_at.cmp(&a.created_at)));
}

/// Why [`record_compensated_by_hand`] recorded nothing.
#[derive(Debug, thiserror::Error)]
pub enum ByHandRefused {
    /// An application is running the compensation right now.
    #[error("its compensation is running right now in an application; wait for it")]
    Running,
    /// The compensation's record is in a state a person cannot record over (in doubt,
    /// awaiting approval, denied, ...).
    #[error("its compensation record is in an unexpected state ({0})")]
    UnexpectedState(&'static str),
    /// The journal failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// How long the claim of a compensation recorded by hand is held (it is completed at once).
const BY_HAND_LEASE_MS: u64 = 60_000;

/// Record that `by` (a person) undid the effect `rec` by hand: its compensation is journaled as
/// done (under `compensate:<key>`, with [`compensation_intent`], so an abandonment never runs
/// it), then `rec` is marked compensated by `by`. A compensation already recorded is kept.
pub async fn record_compensated_by_hand(store: &dyn Store, rec: &EffectRecord, by: &str) -> Result<(), ByHandRefused> {
    let key = compensation_key(&rec.key);
    let intent = compensation_intent(rec, &rec.run_id, rec.thread_id.as_deref(), None);
    match store.claim(&key, intent, BY_HAND_LEASE_MS, false).await? {
        OpOutcome::Claimed { attempt, .. } => {
            store
                .complete(&key, attempt, json!({ "compensated_by_hand": by }))
                .await?;
        }
        OpOutcome::Recorded(_) => {}
        OpOutcome::InFlight(_) => return Err(ByHandRefused::Running),
        other => return Err(ByHandRefused::UnexpectedState(other.state_name())),
    }
    store.mark_compensated(&rec.key, by).await?;
    Ok(())
}

impl Engine {
    /// Abandon `run`: run the compensation of each of its completed compensable effects once,
    /// newest first. `tools` are the tools that may have made them (a toolkit's tools). The
    /// audit trail names the runtime ([`COMPENSATION_ACTOR`]) as who compensated.
    pub async fn abandon_run(&self, run: &RunContext, tools: &[Arc<dyn DynTool>]) -> Result<AbandonReport, StoreError> {
        self.abandon_run_by(run, tools, COMPENSATION_ACTOR).await
    }

    /// [`Engine::abandon_run`] on behalf of `actor` (a person, e.g. through the operator
    /// console), whom the audit trail names as who compensated each effect.
    pub async fn abandon_run_by(
        &self,
        run: &RunContext,
        tools: &[Arc<dyn DynTool>],
        actor: &str,
    ) -> Result<AbandonReport, StoreError> {
        let by_name: HashMap<&'static str, &Arc<dyn DynTool>> = tools.iter().map(|t| (t.meta().name, t)).collect();
        let mut report = AbandonReport::default();
        for rec in self.compensable_effects(run).await? {
            // Still running, or its outcome unknown: nothing to undo yet, but say so.
            if matches!(rec.state, RecordState::Claimed | RecordState::InDoubt) {
                report.pending.push(rec.key.clone());
                continue;
            }
            let Some(tool) = by_name.get(rec.tool.as_str()) else {
                report.unknown_tool.push(rec.key.clone());
                continue;
            };
            match self.compensate_one(run, tool.as_ref(), &rec, actor).await {
                Ok(true) => report.compensated.push(rec.key.clone()),
                Ok(false) => report.already_compensated.push(rec.key.clone()),
                Err(e) => report.failed.push((rec.key.clone(), e)),
            }
        }
        Ok(report)
    }

    /// The run's compensable effects that are done, compensated, running or in doubt, newest
    /// first.
    async fn compensable_effects(&self, run: &RunContext) -> Result<Vec<EffectRecord>, StoreError> {
        let filter = Filter {
            run_id: Some(run.run_id().to_owned()),
            states: vec![
                RecordState::Completed,
                RecordState::Compensated,
                RecordState::Claimed,
                RecordState::InDoubt,
            ],
            ..Filter::default()
        };
        let mut records = self.store().list(&filter).await?;
        records.retain(|r| r.class == EffectClass::Compensable);
        newest_first(&mut records);
        Ok(records)
    }

    /// Compensate one record: `Ok(true)` if it ran now, `Ok(false)` if it was already recorded
    /// (or the policy does not compensate it). The stages of a call, in a loop (a retry, a wait
    /// for another process claim again).
    async fn compensate_one(
        &self,
        run: &RunContext,
        tool: &dyn DynTool,
        rec: &EffectRecord,
        actor: &str,
    ) -> Result<bool, String> {
        let meta = tool.meta();
        let decision = decide(PolicyInput {
            class: rec.class,
            outcome: Outcome::Success,
            attempt: 1,
            retry: meta.retry,
            has_recover: meta.has_recover,
            abandoned: true,
            jitter: 0.0,
        });
        if decision != Decision::Compensate {
            return Ok(false);
        }
        // Before the claim: the compensation's context carries it (its markers).
        let marker_secret = self.marker_secret().await.map_err(|e| e.to_string())?;
        let undo = Undo {
            engine: self,
            run,
            tool,
            rec,
            key: compensation_key(&rec.key),
            marker_secret,
        };
        let mut exec = 0;
        loop {
            let held = match undo.claim().await? {
                Claimed::Held(held) => held,
                Claimed::Recorded => {
                    undo.mark_compensated(actor).await;
                    return Ok(false);
                }
                Claimed::Again => continue,
            };
            exec += 1;
            match undo.execute(&held).await {
                Ok(()) => {
                    undo.record(&held).await;
                    undo.mark_compensated(actor).await;
                    return Ok(true);
                }
                Err(failure) => undo.settle_failure(&held, failure, exec).await?,
            }
        }
    }
}

/// The compensation of one effect, across its stages.
struct Undo<'a> {
    engine: &'a Engine,
    run: &'a RunContext,
    tool: &'a dyn DynTool,
    rec: &'a EffectRecord,
    /// `compensate:<key>`, the key of the effect's compensation.
    key: String,
    marker_secret: Option<crate::value::marker::MarkerSecret>,
}

/// What stage 4a of a compensation leads to.
enum Claimed {
    /// The claim is this attempt's.
    Held(Held),
    /// The compensation is recorded already.
    Recorded,
    /// Another process runs it: claim again after the poll interval.
    Again,
}

/// How stage 4d of a compensation failed.
enum UndoFailed {
    /// The hook answered with an error: the policy decides (stage 4e).
    Error(EffectError<String>),
    /// It did not answer (panicked, stopped at the shutdown deadline): its outcome is unknown,
    /// the claim is marked in doubt with this reason, and abandoning again runs it again.
    Unknown(String),
    /// The claim's lease lapsed while it ran: it was stopped, and the claim is left as a crash
    /// leaves it, for the next abandonment to take over.
    Lapsed,
}

impl Undo<'_> {
    /// Stage 4a: claim the compensation's key.
    async fn claim(&self) -> Result<Claimed, String> {
        let engine = self.engine;
        let intent = compensation_intent(
            self.rec,
            self.run.run_id(),
            self.run.thread_id(),
            Some(engine.holder().clone()),
        );
        let lease = engine.config().lease;
        // The lease runs from when the claim was sent (the journal's from when it was written).
        let sent = Instant::now();
        let claimed = engine
            .store()
            .claim(&self.key, intent, lease.as_millis() as u64, true)
            .await
            .map_err(|e| e.to_string())?;
        let attempt = match claimed {
            OpOutcome::Claimed { attempt, .. } => attempt,
            OpOutcome::Recorded(_) => return Ok(Claimed::Recorded),
            OpOutcome::InFlight(_) => {
                tokio::time::sleep(engine.config().poll_interval).await;
                return Ok(Claimed::Again);
            }
            other => return Err(format!("the compensation record is in an unexpected state: {other:?}")),
        };
        let lease = LeaseClock::new(sent, lease);
        let ctx = EffectCtx::new(
            self.run.clone(),
            self.tool.meta().name,
            self.rec.class,
            None,
            Some(self.key.clone()),
            attempt,
            Some(lease.clone()),
        )
        .signed(self.marker_secret.clone());
        Ok(Claimed::Held(Held {
            attempt,
            previous: None,
            lease,
            ctx,
        }))
    }

    /// Stage 4d: run the compensation hook under the claim's guarded lease (a slow compensation
    /// keeps its claim, so a second abandonment waits for it instead of taking it over and
    /// undoing twice). A panicking compensation is caught: its outcome is unknown.
    async fn execute(&self, held: &Held) -> Result<(), UndoFailed> {
        let output = self.rec.output.clone().unwrap_or(Value::Null);
        let hook = self.tool.compensate_json(&held.ctx, self.rec.input.clone(), output);
        let hook = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(hook));
        let unknown = match self.engine.under_claim(held, true, hook).await {
            Leased::Done(Ok(Ok(()))) => return Ok(()),
            Leased::Done(Ok(Err(e))) => return Err(UndoFailed::Error(e)),
            Leased::Done(Err(panic)) => format!(
                "the compensation of `{}` panicked: {}; abandon the run again to retry it",
                self.rec.key,
                panic_message(panic.as_ref())
            ),
            Leased::Aborted => format!(
                "the engine's shutdown deadline passed while the compensation of `{}` was running: the outcome is unknown; abandon the run again to retry it",
                self.rec.key
            ),
            Leased::Lapsed => {
                tracing::warn!(
                    key = self.key,
                    "the compensation's lease lapsed while it ran; it was stopped and nothing is written"
                );
                return Err(UndoFailed::Lapsed);
            }
        };
        let _ = self
            .engine
            .store()
            .mark_in_doubt(&self.key, held.attempt, unknown.clone())
            .await;
        Err(UndoFailed::Unknown(unknown))
    }

    /// Stage 4e: the compensation failed; its tool's retry policy says whether to run it again
    /// (`Ok`: claim again) or to report it (`Err`).
    async fn settle_failure(&self, held: &Held, failure: UndoFailed, exec: u32) -> Result<(), String> {
        let e = match failure {
            UndoFailed::Error(e) => e,
            UndoFailed::Unknown(message) => return Err(message),
            UndoFailed::Lapsed => {
                return Err(format!(
                    "the compensation of `{}` lost its claim's lease while it ran and was stopped: its outcome is unknown; abandon the run again to retry it",
                    self.rec.key
                ));
            }
        };
        let outcome = match &e {
            EffectError::Tool { failure, .. } => Outcome::Failed(*failure),
            _ => Outcome::Failed(Failure::Definitive),
        };
        let decision = decide(PolicyInput {
            class: EffectClass::Idempotent,
            outcome,
            attempt: exec,
            retry: self.tool.meta().retry,
            has_recover: false,
            abandoned: false,
            jitter: fastrand::f64(),
        });
        let _ = self
            .engine
            .store()
            .release(&self.key, held.attempt, Some(e.to_string()))
            .await;
        match decision {
            Decision::Retry { after } => {
                tokio::time::sleep(after).await;
                Ok(())
            }
            _ => Err(e.to_string()),
        }
    }

    /// Stage 4f: record the compensation under its claim, as a call's output is recorded
    /// ([`Engine::complete_under_claim`]: retried for [`Engine::with_store_retry`] while the
    /// lease is renewed, fenced). A record that fails is logged and reported; the effect is
    /// marked compensated all the same (the compensation ran).
    async fn record(&self, held: &Held) {
        let tool = self.tool.meta().name;
        let written = self
            .engine
            .complete_under_claim(tool, &self.key, held, Value::Null, || Some(Value::Null))
            .await;
        if let Completion::Fenced = written {
            tracing::warn!(
                key = self.key,
                "compensation ran but the journal refused its record: another attempt owns its claim"
            );
        }
    }

    /// Mark the effect compensated by `actor` (already marked: nothing to do).
    async fn mark_compensated(&self, actor: &str) {
        match self.engine.store().mark_compensated(&self.rec.key, actor).await {
            Ok(_) => {}
            Err(StoreError::Rejected(Rejected::InvalidState {
                state: RecordState::Compensated,
                ..
            })) => {}
            Err(e) => {
                tracing::warn!(error = %e, key = self.rec.key, "compensation recorded but the effect could not be marked compensated")
            }
        }
    }
}
