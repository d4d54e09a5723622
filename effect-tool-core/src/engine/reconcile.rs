//! Reconciling a record nobody calls again: a stale claim, a record in doubt, or a record
//! pending its provider's callback past the deadline ([`EffectRecord::is_overdue`]: in doubt
//! too, since the callback will be refused as late), of a tool with a `recover` hook, claimed
//! (stage 4a's claim, taking the unknown outcome over), checked with
//! [`Tool::verify`] under the claim (stage 4b's check, its settle delay included), and settled
//! by what it found: the output recorded (applied), the claim released so that the next call
//! runs it (not applied), or the record left in doubt to be asked again later (inconclusive, a
//! failed check). Nothing of the tool's own `call` ever runs here. Every verdict is audited
//! (action `reconcile`). The loop that finds such records and elects one reconciler per journal
//! is the toolkit's [`Reconciler`](crate::toolkit::Reconciler).

use std::time::Duration;

use serde_json::json;
use tokio::time::Instant;

use super::complete::Completion;
use super::lead::{Recovered, settle_wait};
use super::lease::{Held, LeaseClock};
use super::lifecycle::Engine;
use crate::call::context::{EffectCtx, RunContext};
use crate::call::error::StoreError;
use crate::call::key;
use crate::call::tool::{Recovery, Tool};
use crate::decide::record::{AuditEntry, EffectRecord, Intent, Op, OpOutcome, RecordState};
use crate::store::StoreExt;

/// What reconciling one record ended with ([`Engine::reconcile_record`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReconcileVerdict {
    /// `recover` found the effect: its output is recorded (disposition of the next call: a
    /// replay).
    Applied,
    /// `recover` found no effect: the claim is released, and the next call runs the tool.
    NotApplied,
    /// `recover` could not tell yet: the record stays in doubt; ask again after `retry_after`
    /// (the tool's, if it said).
    Inconclusive {
        /// Why, as the tool said.
        reason: String,
        /// When to ask again, if the tool said.
        retry_after: Option<Duration>,
    },
    /// The check failed (an error, a timeout, a panic): the record stays in doubt.
    Failed {
        /// What failed.
        reason: String,
    },
    /// Not asked yet: the tool's settle delay ([`Tool::RECOVER_SETTLE`]) has not passed since
    /// the outcome became unknown. Ask again after `wait`.
    Settling {
        /// How long is left.
        wait: Duration,
    },
    /// Nothing to do: the record is not a stale claim, in doubt, or pending past its deadline
    /// (another process settled or holds it, or its provider's callback may still come), or its tool has no `recover` hook, or the engine is shutting down.
    Skipped {
        /// Why, in words.
        reason: String,
    },
}

impl ReconcileVerdict {
    /// The verdict's name in the audit trail and in reports.
    pub fn name(&self) -> &'static str {
        match self {
            ReconcileVerdict::Applied => "applied",
            ReconcileVerdict::NotApplied => "not-applied",
            ReconcileVerdict::Inconclusive { .. } => "inconclusive",
            ReconcileVerdict::Failed { .. } => "failed",
            ReconcileVerdict::Settling { .. } => "settling",
            ReconcileVerdict::Skipped { .. } => "skipped",
        }
    }
}

/// The actor of a reconciler's audit entries.
pub const RECONCILER_ACTOR: &str = "effect-tool reconciler";

fn skipped(reason: impl Into<String>) -> ReconcileVerdict {
    ReconcileVerdict::Skipped { reason: reason.into() }
}

impl Engine {
    /// Reconcile `rec` (a stale claim, a record in doubt, or a record pending its callback past
    /// the deadline, of `tool`) with no caller: take it over, ask [`Tool::verify`], and record what it found (see the [module](self)). Nothing
    /// of the tool's `call` runs. Each verdict but [`ReconcileVerdict::Skipped`] and
    /// [`ReconcileVerdict::Settling`] leaves an audit entry (action `reconcile`, actor
    /// [`RECONCILER_ACTOR`]).
    ///
    /// `run` is the run the hook sees (its id is the record's; give it the values the tool
    /// takes from the run, its `#[secret]` arguments, as the application's runs do).
    pub async fn reconcile_record<T: Tool>(
        &self,
        tool: &T,
        rec: &EffectRecord,
        run: RunContext,
    ) -> Result<ReconcileVerdict, StoreError> {
        let store = &self.inner.store;
        if !T::HAS_RECOVER {
            return Ok(skipped(format!(
                "{} has no recover hook: a person resolves it",
                tool.declared_name()
            )));
        }
        if rec.tool != tool.declared_name() {
            return Ok(skipped(format!(
                "the record is of {}, not {}",
                rec.tool,
                tool.declared_name()
            )));
        }
        let now = store.now();
        if !(rec.state == RecordState::InDoubt || rec.is_stale(now) || rec.is_overdue(now)) {
            return Ok(skipped(
                "neither a stale claim, nor in doubt, nor pending past its deadline: nothing unknown to reconcile",
            ));
        }
        let since = unknown_since(rec);
        if let Some(wait) = settle_wait(T::RECOVER_SETTLE, since, now) {
            return Ok(ReconcileVerdict::Settling { wait });
        }
        let args: T::Args = match serde_json::from_value(key::unbind(rec.input.clone(), T::SENSITIVE)) {
            Ok(args) => args,
            Err(e) => {
                let reason = format!("the recorded arguments do not decode ({e}): a person resolves it");
                return self.audited(rec, ReconcileVerdict::Failed { reason }, None).await;
            }
        };
        let secret = self.marker_secret().await?;
        let intent = Intent {
            tool: rec.tool.clone(),
            class: T::CLASS,
            run_id: rec.run_id.clone(),
            thread_id: rec.thread_id.clone(),
            call_id: rec.call_id.clone(),
            fingerprint: rec.fingerprint.clone(),
            input: rec.input.clone(),
            ttl_ms: T::TTL.map(|d| d.as_millis() as u64),
            approval: None,
            approval_ttl_ms: None,
            holder: Some(Box::new(self.inner.holder.clone())),
        };
        let lease = self.inner.config.lease;
        let sent = Instant::now();
        let claim = Op::Claim {
            intent,
            lease_ms: lease.as_millis() as u64,
            takeover_in_doubt: true,
        };
        let (attempt, previous) = match store.apply(&rec.key, claim).await {
            Ok(OpOutcome::Claimed { attempt, previous, .. }) => (attempt, previous),
            Ok(OpOutcome::InFlight(_)) => return Ok(skipped("another attempt holds a live claim")),
            Ok(other) => return Ok(skipped(format!("already settled ({})", outcome_name(&other)))),
            Err(StoreError::Rejected(r)) => return Ok(skipped(format!("the journal refused the claim: {r}"))),
            Err(e) => return Err(e),
        };
        if previous.is_none() {
            // Released (or completed and expired) meanwhile: nothing unknown is left to check.
            let _ = store
                .release(
                    &rec.key,
                    attempt,
                    Some("the reconciler found nothing unknown left".to_owned()),
                )
                .await;
            return Ok(skipped("settled meanwhile"));
        }
        let mut run = run;
        if let Some(thread) = &rec.thread_id {
            run = run.with_thread(thread.clone());
        }
        let clock = LeaseClock::new(sent, lease);
        let ctx = EffectCtx::new(
            run,
            tool.declared_name(),
            T::CLASS,
            rec.call_id.clone(),
            Some(rec.key.clone()),
            attempt,
            Some(clock.clone()),
        )
        .signed(secret);
        let held = Held {
            attempt,
            previous,
            lease: clock,
            ctx,
        };
        let verdict = match self.recover_held(tool, &held, &args, since).await {
            Recovered::Answer(Ok(Recovery::Applied(out))) => match serde_json::to_value(&out) {
                Ok(output) => {
                    let again = || serde_json::to_value(&out).ok();
                    match self
                        .complete_under_claim(tool.declared_name(), &rec.key, &held, output, again)
                        .await
                    {
                        Completion::Written => ReconcileVerdict::Applied,
                        Completion::Fenced => return Ok(skipped("another attempt took the key over")),
                        Completion::Failed => ReconcileVerdict::Failed {
                            reason: "recover found the effect, but the journal did not record it".to_owned(),
                        },
                    }
                }
                Err(e) => {
                    let reason = format!("recover found the effect, but its output does not serialize: {e}");
                    let _ = store.mark_in_doubt(&rec.key, attempt, reason.clone()).await;
                    ReconcileVerdict::Failed { reason }
                }
            },
            Recovered::Answer(Ok(Recovery::NotApplied)) => {
                let reason = "the reconciler's recover found the effect not applied; the next call runs it";
                match store.release(&rec.key, attempt, Some(reason.to_owned())).await {
                    Ok(_) => ReconcileVerdict::NotApplied,
                    Err(StoreError::Rejected(_)) => return Ok(skipped("another attempt took the key over")),
                    Err(e) => return Err(e),
                }
            }
            Recovered::Answer(Ok(Recovery::Inconclusive { reason, retry_after })) => {
                let why = format!("recover was inconclusive ({reason}); the reconciler asks again later");
                let _ = store.mark_in_doubt(&rec.key, attempt, why).await;
                ReconcileVerdict::Inconclusive { reason, retry_after }
            }
            Recovered::Answer(Err(e)) => {
                let reason = format!("recover failed: {e}");
                let _ = store.mark_in_doubt(&rec.key, attempt, reason.clone()).await;
                ReconcileVerdict::Failed { reason }
            }
            Recovered::Unfinished(lost) => {
                let reason = format!("recover {}", lost.reason());
                let _ = store.mark_in_doubt(&rec.key, attempt, reason.clone()).await;
                ReconcileVerdict::Failed { reason }
            }
            Recovered::Lapsed => return Ok(skipped("the claim's lease lapsed before recover was asked")),
            Recovered::Aborted => {
                let reason = "the engine shut down while recover ran".to_owned();
                let _ = store.mark_in_doubt(&rec.key, attempt, reason.clone()).await;
                ReconcileVerdict::Failed { reason }
            }
        };
        self.audited(rec, verdict, Some(attempt)).await
    }

    /// Audit `verdict` on `rec` (by this attempt, if it claimed), and return it.
    async fn audited(
        &self,
        rec: &EffectRecord,
        verdict: ReconcileVerdict,
        attempt: Option<u32>,
    ) -> Result<ReconcileVerdict, StoreError> {
        let reason = match &verdict {
            ReconcileVerdict::Inconclusive { reason, .. } | ReconcileVerdict::Failed { reason } => Some(reason.clone()),
            _ => None,
        };
        let entry = AuditEntry {
            key: rec.key.clone(),
            at: self.inner.store.now(),
            actor: RECONCILER_ACTOR.to_owned(),
            action: "reconcile".to_owned(),
            detail: Some(json!({
                "verdict": verdict.name(),
                "attempt": attempt,
                "was": rec.state,
                "reason": reason,
                "holder": self.inner.holder.to_string(),
            })),
        };
        if let Err(e) = self.inner.store.append_audit(entry).await {
            tracing::warn!(error = %e, key = rec.key, "could not audit the reconciler's verdict");
        }
        tracing::info!(key = rec.key, verdict = verdict.name(), "reconciled");
        Ok(verdict)
    }
}

/// Since when `rec`'s outcome is unknown: its last write, or for a record pending its callback,
/// its deadline (until then the provider's answer could still tell).
fn unknown_since(rec: &EffectRecord) -> crate::decide::record::Millis {
    match (rec.state, rec.lease_until) {
        (RecordState::Pending, Some(deadline)) => deadline.max(rec.updated_at),
        _ => rec.updated_at,
    }
}

/// A claim's answer in words.
fn outcome_name(outcome: &OpOutcome) -> &'static str {
    match outcome {
        OpOutcome::Recorded(_) => "recorded",
        OpOutcome::InDoubt(_) => "in doubt",
        OpOutcome::AwaitingApproval(_) => "awaiting approval",
        OpOutcome::Denied(_) => "denied",
        OpOutcome::Compensated(_) => "compensated",
        _ => "another state",
    }
}
