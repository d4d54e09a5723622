//! Abandoning a run: undo each completed compensable effect, newest first.
//!
//! Each compensation is journaled as its own effect under `compensate:<key>`, so it never runs
//! twice even if the abandonment is retried or runs in two processes at once. Failures are
//! retried per the tool's retry policy and reported; the original record is marked
//! [`RecordState::Compensated`] once its compensation is recorded.

use std::collections::HashMap;
use std::sync::Arc;

use crate::call::context::{EffectCtx, RunContext};
use crate::call::error::StoreError;
use crate::decide::policy::{Decision, PolicyInput, decide};
use crate::decide::record::{EffectRecord, Intent, OpOutcome, RecordState};
use crate::engine::Engine;
use crate::engine::dyn_tool::DynTool;
use crate::store::{Filter, StoreExt};
use crate::value::class::EffectClass;
use crate::value::outcome::Outcome;

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
        // Newest effect first: undo in the reverse order of doing.
        records.sort_by(|a, b| b.updated_at.cmp(&a.updated_at).then(b.created_at.cmp(&a.created_at)));
        let mut report = AbandonReport::default();
        for rec in records {
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

    /// Compensate one record: `Ok(true)` if it ran now, `Ok(false)` if it was already recorded.
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
        let store = self.store();
        let key = compensation_key(&rec.key);
        let intent = Intent {
            tool: format!("{}.compensate", rec.tool),
            class: EffectClass::Idempotent,
            run_id: run.run_id().to_owned(),
            thread_id: run.thread_id().map(str::to_owned),
            call_id: None,
            fingerprint: rec.fingerprint.clone(),
            input: rec.input.clone(),
            ttl_ms: None,
            approval: None,
            approval_ttl_ms: None,
            holder: Some(Box::new(self.holder().clone())),
        };
        let lease_ms = self.config().lease.as_millis() as u64;
        // Before the claim: the compensation's context carries it (its markers).
        let marker_secret = self.marker_secret().await.map_err(|e| e.to_string())?;
        let mut exec = 0;
        loop {
            let attempt = match store
                .claim(&key, intent.clone(), lease_ms, true)
                .await
                .map_err(|e| e.to_string())?
            {
                OpOutcome::Claimed { attempt, .. } => attempt,
                OpOutcome::Recorded(_) => {
                    mark_compensated(self, &rec.key, actor).await;
                    return Ok(false);
                }
                OpOutcome::InFlight(_) => {
                    tokio::time::sleep(self.config().poll_interval).await;
                    continue;
                }
                other => return Err(format!("the compensation record is in an unexpected state: {other:?}")),
            };
            exec += 1;
            let ctx = EffectCtx::new(
                run.clone(),
                meta.name,
                rec.class,
                None,
                Some(key.clone()),
                attempt,
                None,
            )
            .signed(marker_secret.clone());
            let output = rec.output.clone().unwrap_or(serde_json::Value::Null);
            // Under the lease, renewed while it runs: a slow compensation keeps its claim, so
            // a second abandonment waits for it instead of taking it over and undoing twice.
            // A panicking compensation is caught: its outcome is unknown (in doubt), reported as
            // failed, and the next abandonment runs it again.
            let undo = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(tool.compensate_json(
                &ctx,
                rec.input.clone(),
                output,
            )));
            let result = match self.leased(&ctx, undo).await {
                Ok(result) => result,
                Err(panic) => {
                    let message = format!(
                        "the compensation of `{}` panicked: {}; abandon the run again to retry it",
                        rec.key,
                        crate::engine::panic_message(panic.as_ref())
                    );
                    let _ = store.mark_in_doubt(&key, attempt, message.clone()).await;
                    return Err(message);
                }
            };
            match result {
                Ok(()) => {
                    if let Err(e) = store.complete(&key, attempt, serde_json::Value::Null).await {
                        tracing::warn!(error = %e, key, "compensation ran but its record failed");
                    }
                    mark_compensated(self, &rec.key, actor).await;
                    return Ok(true);
                }
                Err(e) => {
                    let failure = match &e {
                        crate::EffectError::Tool { failure, .. } => Outcome::Failed(*failure),
                        _ => Outcome::Failed(crate::Failure::Definitive),
                    };
                    let decision = decide(PolicyInput {
                        class: EffectClass::Idempotent,
                        outcome: failure,
                        attempt: exec,
                        retry: meta.retry,
                        has_recover: false,
                        abandoned: false,
                        jitter: fastrand::f64(),
                    });
                    let _ = store.release(&key, attempt, Some(e.to_string())).await;
                    match decision {
                        Decision::Retry { after } => tokio::time::sleep(after).await,
                        _ => return Err(e.to_string()),
                    }
                }
            }
        }
    }
}

async fn mark_compensated(engine: &Engine, key: &str, actor: &str) {
    match engine.store().mark_compensated(key, actor).await {
        Ok(_) => {}
        Err(StoreError::Rejected(crate::decide::record::Rejected::InvalidState {
            state: RecordState::Compensated,
            ..
        })) => {}
        Err(e) => {
            tracing::warn!(error = %e, key, "compensation recorded but the effect could not be marked compensated")
        }
    }
}
