//! Stage 4 for an idempotent tool declared `one_write` ([`Tool::ONE_WRITE`]): the key's
//! leading call in this process, when the lookup (stage 2) found no record of the key.
//!
//! The tool runs before anything is written, and the call's one journal write is its record
//! ([`Op::Record`]: inserted if the key still has no record). Nothing holds the key meanwhile:
//! an identical call in this process joins this one (stage 3), but one in another process finds
//! no claim to wait for and runs too. The idempotent class allows it (both pass the same key
//! downstream, which applies it once); the first record written is the one the journal keeps,
//! and a call whose record finds another answers with that one (a replay). A call that comes
//! to lead after an identical call of this process ended since its lookup (the join counts
//! them, `Inflight::ended`) looks again first, so that one process never runs a key twice.
//!
//! A crash while the tool runs leaves nothing behind: the next call runs it again under the
//! same key, as the class promises for a claim lost in a crash. A failure is settled by the
//! policy as in stage 4e, with nothing to release: a retry runs again, a definitive failure
//! ends the call. An outcome that stays unknown (the tool's retries spent, or the call
//! cancelled while it ran) is written down as any other's: a claim and then "in doubt", two
//! writes on a path that is not the common one, so that the journal shows what a person may
//! need to look at.

use serde_json::Value;

use super::errors::tool_error;
use super::execute::{Exec, Unfinished, classify, interrupted_reason, run_tool};
use super::lifecycle::Engine;
use super::observe;
use super::ongoing::Call;
use super::report::{Disposition, Settled};
use crate::call::error::{BlockReason, EffectError, StoreError};
use crate::call::tool::Tool;
use crate::decide::policy::Decision;
use crate::decide::record::{Op, OpOutcome, Rejected};
use crate::store::{Recorded, StoreExt};
use crate::value::class::EffectClass;
use crate::value::outcome::{Failure, Outcome};

/// Whether `T`'s declaration lets its calls run without a claim: `one_write` on an idempotent
/// tool with no `recover` (asked about a claim's unknown outcome) that is not transactional.
/// Approvals are the call's to check ([`qualifies`]; [`super::dyn_tool`] for a declared one).
pub(super) const fn declared<T: Tool>() -> bool {
    T::ONE_WRITE && matches!(T::CLASS, EffectClass::Idempotent) && !T::HAS_RECOVER && !T::TRANSACTIONAL
}

/// Whether `call` of a tool declared `one_write` may run without a claim: [`declared`], with
/// no approval to wait for (declared for these arguments, asked by the deployment's policies,
/// or already given to edited arguments).
pub(super) fn qualifies<T: Tool>(call: &Call<'_, T>, args: &T::Args) -> bool {
    declared::<T>()
        && !call.approved
        && call.policy_approval.is_none()
        && !(call.tool.needs_approval(args) && call.tool.declared_approval().is_some())
}

/// How one run of the tool ended, for [`Engine::lead_one_write`].
enum Ran<O, E> {
    /// The call ends.
    Done(Settled<O, E>),
    /// Nothing needs writing: run again after this backoff.
    Retry(std::time::Duration),
}

impl Engine {
    /// Stage 4 of a `one_write` call whose key the journal did not know: run, then record.
    /// `looked`: no identical call of this process ended since the lookup; else the journal is
    /// asked again first (an identical call that ended in between may have recorded the key:
    /// then it replays, and one that left anything else takes the claimed path).
    pub(super) async fn lead_one_write<T: Tool>(
        &self,
        call: &Call<'_, T>,
        input: Value,
        args: T::Args,
        looked: bool,
    ) -> Settled<T::Output, T::Error> {
        if !looked {
            match self.lookup(call, &input).await {
                Err(replayed) => return replayed,
                Ok(true) => {}
                Ok(false) => return Box::pin(self.lead(call, input, args, false)).await,
            }
        }
        let mut exec = 0;
        loop {
            if let Some(stopped) = self.stopped::<T>(call.run, call.name(), call.key) {
                return stopped;
            }
            exec += 1;
            let secret = self.inner.marker_secret.get().cloned().flatten();
            let ctx = call.context(exec, None, secret).without_claim();
            let ran = run_tool(call.tool, &ctx, args.clone(), &self.inner.abort).await;
            drop(ctx);
            let after = match self.settle_run(call, &input, &args, ran, exec).await {
                Ran::Done(settled) => return settled,
                Ran::Retry(after) => after,
            };
            observe::tool_retried(call.name());
            self.back_off(call.run, after).await;
        }
    }

    /// What one run of the tool leads to: its record, a retry, or the call's failure (its
    /// unknown outcome written down first).
    async fn settle_run<T: Tool>(
        &self,
        call: &Call<'_, T>,
        input: &Value,
        args: &T::Args,
        ran: Exec<T::Output, T::Error>,
        exec: u32,
    ) -> Ran<T::Output, T::Error> {
        let (outcome, failure) = match ran {
            Exec::Done(Ok(out)) => return Ran::Done(self.record_unclaimed(call, input.clone(), out).await),
            Exec::Done(Err(e)) => (classify(&e), Err(e)),
            Exec::Unfinished(lost) => (Outcome::Failed(Failure::Unknown), Ok(lost)),
            Exec::Cancelled | Exec::Lapsed => {
                let reason = interrupted_reason(&self.inner.abort);
                self.leave_in_doubt(call, input.clone(), reason.to_owned()).await;
                let err = EffectError::Interrupted {
                    tool: call.name().to_owned(),
                    key: call.key.to_owned(),
                };
                return Ran::Done((Err(err), Disposition::Failed));
            }
        };
        let reason = match &failure {
            Err(e) => super::execute::error_text::<T>(args, e),
            Ok(lost) => lost.reason(),
        };
        let failed = |failure: Result<Unfinished, T::Error>| {
            let err = match failure {
                Err(e) => tool_error::<T>(call.name(), Some(call.key), outcome, e),
                Ok(lost) => lost.into_error(call.name(), Some(call.key)),
            };
            Ran::Done((Err(err), Disposition::Failed))
        };
        let decision = self.decide_failure(call, outcome, exec, exec).await;
        tracing::debug!(?decision, "tool failed (one write: nothing was claimed)");
        match decision {
            Decision::Retry { after } => Ran::Retry(after),
            Decision::Fail | Decision::Complete | Decision::Compensate => failed(failure),
            Decision::FailInDoubt => {
                self.leave_in_doubt(call, input.clone(), reason).await;
                failed(failure)
            }
            // No `recover` to ask (the declaration has none): a person decides.
            Decision::Block | Decision::Reconcile => {
                self.leave_in_doubt(call, input.clone(), reason).await;
                Ran::Done(call.blocked(BlockReason::UnknownOutcome))
            }
        }
    }

    /// The call's one write: its record, if the key still has none. Another call's result
    /// recorded meanwhile (another process ran the same call) is the one the journal keeps:
    /// this call answers with it. A write the journal fails leaves nothing: the call still
    /// succeeds (the effect happened), and the next identical call runs the tool again under
    /// the same key.
    async fn record_unclaimed<T: Tool>(
        &self,
        call: &Call<'_, T>,
        input: Value,
        out: T::Output,
    ) -> Settled<T::Output, T::Error> {
        let output = match serde_json::to_value(&out) {
            Ok(value) => value,
            Err(e) => {
                tracing::warn!(error = %e, key = call.key, "effect applied but its output does not serialize; nothing recorded, the next call runs it again under the same key");
                return (Ok(out), Disposition::Executed);
            }
        };
        let op = Op::Record {
            intent: call.intent(input, None, &self.inner.holder),
            output,
        };
        match self.inner.store.apply(call.key, op).await {
            Ok(OpOutcome::Done(_)) => (Ok(out), Disposition::Executed),
            Ok(OpOutcome::Recorded(rec)) => {
                tracing::debug!(
                    key = call.key,
                    "another call recorded this key's result first: it is the one kept"
                );
                self.replay(call, &Recorded::from(rec))
            }
            Ok(other) => {
                tracing::debug!(
                    key = call.key,
                    state = other.state_name(),
                    "the key holds another record now; this call's output answers it alone"
                );
                (Ok(out), Disposition::Executed)
            }
            Err(StoreError::Rejected(Rejected::KeyOfAnotherTool { recorded_tool, .. })) => {
                let err = super::errors::key_of_another_tool::<T>(call.name(), call.key, &recorded_tool);
                (Err(err), Disposition::Failed)
            }
            Err(e) => {
                tracing::warn!(error = %e, key = call.key, "effect applied but its record could not be written; the next call runs it again under the same key");
                (Ok(out), Disposition::Executed)
            }
        }
    }

    /// Write down an outcome that stays unknown: a claim of the key, then "in doubt" with
    /// `reason`. Where the key holds a record by then, it is left as it is.
    async fn leave_in_doubt<T: Tool>(&self, call: &Call<'_, T>, input: Value, reason: String) {
        let store = &self.inner.store;
        let claim = Op::Claim {
            intent: call.intent(input, None, &self.inner.holder),
            lease_ms: self.inner.config.lease.as_millis() as u64,
            takeover_in_doubt: true,
        };
        match store.apply(call.key, claim).await {
            Ok(OpOutcome::Claimed { attempt, .. }) => {
                if let Err(e) = store.mark_in_doubt(call.key, attempt, reason).await {
                    tracing::warn!(error = %e, key = call.key, "could not mark the unknown outcome in doubt; the claim is left to go stale");
                }
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, key = call.key, "could not write down the unknown outcome"),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use serde::{Deserialize, Serialize};
    use tokio::sync::Semaphore;

    use crate::call::context::{EffectCtx, RunContext};
    use crate::call::error::StoreError;
    use crate::call::tool::Tool;
    use crate::engine::{CallOptions, Disposition, Engine};
    use crate::store::{BoxFuture, Brief, Layered, MemoryStore, Operation, StoreLayer};
    use crate::value::class::EffectClass;
    use crate::value::outcome::ToolError;

    #[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
    struct Args {
        doc: String,
    }

    /// A `one_write` tool whose runs the test counts (the engine cannot see the counter).
    #[derive(Clone, Default)]
    struct Reindex {
        runs: Arc<AtomicUsize>,
    }

    impl Tool for Reindex {
        type Args = Args;
        type Output = String;
        type Error = ToolError;
        const NAME: &'static str = "reindex";
        const CLASS: EffectClass = EffectClass::Idempotent;
        const ONE_WRITE: bool = true;

        async fn call(&self, _ctx: &EffectCtx, args: Args) -> Result<String, ToolError> {
            self.runs.fetch_add(1, Ordering::SeqCst);
            Ok(format!("reindexed {}", args.doc))
        }
    }

    /// The first lookup answers (from the store as it was) only once `release` lets it, and
    /// says on `looked` that it has read.
    struct HoldFirstLookup {
        lookups: AtomicUsize,
        looked: Arc<Semaphore>,
        release: Arc<Semaphore>,
    }

    impl StoreLayer for HoldFirstLookup {
        fn around<'a, T: Brief + Send + 'a>(
            &'a self,
            op: Operation<'a>,
            fut: BoxFuture<'a, Result<T, StoreError>>,
        ) -> BoxFuture<'a, Result<T, StoreError>> {
            if op.name != "lookup" || self.lookups.fetch_add(1, Ordering::SeqCst) != 0 {
                return fut;
            }
            Box::pin(async move {
                let answer = fut.await;
                self.looked.add_permits(1);
                let _pass = self.release.acquire().await;
                answer
            })
        }
    }

    /// A call whose lookup found nothing, and an identical call of the same process that ran
    /// and recorded the key before the first one joined: the first one looks again and replays
    /// instead of running (it leads, since the other call no longer does).
    #[tokio::test]
    async fn a_call_that_leads_after_an_identical_call_ended_looks_again() {
        let looked = Arc::new(Semaphore::new(0));
        let release = Arc::new(Semaphore::new(0));
        let layer = HoldFirstLookup {
            lookups: AtomicUsize::new(0),
            looked: looked.clone(),
            release: release.clone(),
        };
        let store = Arc::new(Layered::new(Arc::new(MemoryStore::new()), layer));
        let engine = Engine::new(store);
        let (tool, run) = (Reindex::default(), RunContext::new("run-1"));
        let args = Args { doc: "d-1".to_owned() };

        let late = tokio::spawn({
            let (engine, tool, run, args) = (engine.clone(), tool.clone(), run.clone(), args.clone());
            async move { engine.call_with_report(&tool, &run, CallOptions::default(), args).await }
        });
        let _seen = looked.acquire().await.expect("the first lookup read the journal");
        let first = engine.call_with_report(&tool, &run, CallOptions::default(), args).await;
        assert_eq!(first.disposition, Disposition::Executed);
        release.add_permits(1);
        let late = late.await.expect("the late call ends");
        assert_eq!(late.result.expect("replayed"), "reindexed d-1");
        assert_eq!(late.disposition, Disposition::Replayed);
        assert_eq!(tool.runs.load(Ordering::SeqCst), 1, "one run for two identical calls");
    }
}
