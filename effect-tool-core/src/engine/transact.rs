//! Stage 4 for a transactional tool ([`Tool::TRANSACTIONAL`]): the key's leading call in this
//! process, inside the journal's own transaction (see [`crate::store::transaction`]).
//!
//! 4a–4f in one transaction: open it ([`Store::begin_transaction`], which makes a second call
//! of the key wait for this one's commit), claim in it, run the tool with the transaction in
//! its context, record in it, commit once. The tool's writes and the record commit together
//! or not at all: there is no claim anyone else ever sees, no lease, nothing to take over and
//! nothing in doubt. A failure of any kind (the tool's error, a panic, a timeout, a
//! cancellation, a crash of the process) rolls everything back: nothing happened, and the
//! policy may retry a transient error with a fresh transaction.
//!
//! [`Store::begin_transaction`]: crate::Store::begin_transaction

use serde_json::Value;
use tokio::time::Instant;

use super::errors::{cancelled, key_of_another_tool, shutting_down, store_error, tool_error};
use super::execute::{Exec, classify, policy_input, run_tool};
use super::lifecycle::Engine;
use super::observe;
use super::ongoing::Call;
use super::report::{Disposition, Settled};
use crate::call::error::{ApprovalPending, BlockReason, EffectError, StoreError};
use crate::call::tool::Tool;
use crate::decide::policy::{Decision, decide};
use crate::decide::record::{Op, OpOutcome, RecordState, Rejected};
use crate::store::Recorded;
use crate::value::outcome::{Failure, Outcome};

/// What one transaction of the call came to.
enum Attempt<O, E> {
    /// The call ends.
    Done(Settled<O, E>),
    /// Nothing was written: wait `after`, then try again in a new transaction.
    Retry(std::time::Duration),
    /// Another attempt held the key live outside a transaction (an earlier, non-transactional
    /// declaration of the tool): wait, then look again.
    Wait,
}

impl Engine {
    /// Stage 4 of a transactional call: claim, execute and record in one transaction.
    pub(super) async fn lead_in_transaction<T: Tool>(
        &self,
        call: &Call<'_, T>,
        input: Value,
        args: T::Args,
    ) -> Settled<T::Output, T::Error> {
        if let Some(role) = T::APPROVAL {
            let e = StoreError::Backend(format!(
                "tool `{}` is declared `transactional` and needs the approval of `{role}`: a call parked for a person cannot wait inside a transaction; remove `approval` or `transactional` from the declaration; nothing ran",
                call.name()
            ));
            return (Err(store_error::<T>(call.name(), e)), Disposition::Failed);
        }
        let mut exec = 0;
        let mut poll = self.inner.config.poll_interval;
        loop {
            if let Some(stopped) = self.stopped::<T>(call.run, call.name(), call.key) {
                return stopped;
            }
            exec += 1;
            match self.transact_once(call, &input, &args, exec).await {
                Attempt::Done(settled) => return settled,
                Attempt::Retry(after) => {
                    observe::tool_retried(call.name());
                    self.back_off(call.run, after).await;
                }
                Attempt::Wait => {
                    exec -= 1;
                    self.back_off(call.run, poll).await;
                    poll = (poll * 2).min(std::time::Duration::from_millis(500));
                }
            }
        }
    }

    /// One transaction: begin, claim, execute, record, commit (or roll back).
    async fn transact_once<T: Tool>(
        &self,
        call: &Call<'_, T>,
        input: &Value,
        args: &T::Args,
        exec: u32,
    ) -> Attempt<T::Output, T::Error> {
        let store = &self.inner.store;
        let failed = |e| Attempt::Done((Err(store_error::<T>(call.name(), e)), Disposition::Failed));
        let mut tx = match store.begin_transaction(call.key).await {
            Ok(Some(tx)) => tx,
            Ok(None) => {
                return failed(crate::store::transaction::unsupported(
                    call.name(),
                    store.backend_name(),
                ));
            }
            Err(e) => return failed(e),
        };
        let claim = Op::Claim {
            intent: call.intent(input.clone(), None, &self.inner.holder),
            lease_ms: self.inner.config.lease.as_millis() as u64,
            // A record in doubt here was left outside a transaction: a person decides.
            takeover_in_doubt: false,
        };
        let attempt = match tx.apply(call.key, claim).await {
            Ok(OpOutcome::Claimed {
                attempt,
                previous: None,
                ..
            }) => attempt,
            Ok(OpOutcome::Claimed { previous: Some(_), .. }) => {
                // A stale claim of an attempt made outside a transaction (an earlier
                // declaration of the tool): its effect may have happened. Nothing is taken
                // over here; a person resolves the claim.
                tx.rollback().await;
                return Attempt::Done(call.blocked(BlockReason::InDoubtAfterCrash));
            }
            Ok(OpOutcome::InFlight(_)) => {
                tx.rollback().await;
                return Attempt::Wait;
            }
            Ok(other) => {
                tx.rollback().await;
                return Attempt::Done(self.unclaimed_in_transaction(call, other));
            }
            Err(StoreError::Rejected(Rejected::KeyOfAnotherTool { recorded_tool, .. })) => {
                tx.rollback().await;
                let err = key_of_another_tool::<T>(call.name(), call.key, &recorded_tool);
                return Attempt::Done((Err(err), Disposition::Failed));
            }
            Err(e) => {
                tx.rollback().await;
                return failed(e);
            }
        };
        tracing::Span::current().record("effect_tool.attempt", i64::from(attempt));
        pause_at("claimed");
        let secret = self.inner.marker_secret.get().cloned().flatten();
        let ctx = call.context(attempt, None, secret).in_transaction(tx.handle());
        let ran = run_tool(call.tool, &ctx, args.clone(), &self.inner.abort).await;
        drop(ctx);
        let output = match ran {
            Exec::Done(Ok(output)) => output,
            Exec::Done(Err(e)) => {
                tx.rollback().await;
                return self.rolled_back(call, classify(&e), e, exec);
            }
            Exec::Unfinished(lost) => {
                tx.rollback().await;
                tracing::warn!(reason = %lost.reason(), "the transactional tool did not finish; its transaction was rolled back");
                return Attempt::Done((Err(lost.into_error(call.name(), Some(call.key))), Disposition::Failed));
            }
            Exec::Cancelled | Exec::Lapsed => {
                tx.rollback().await;
                return Attempt::Done(if self.inner.shutting_down() {
                    shutting_down::<T>(call.name(), call.key)
                } else {
                    cancelled::<T>(call.name(), call.key)
                });
            }
        };
        let value = match serde_json::to_value(&output) {
            Ok(v) => v,
            Err(e) => {
                tx.rollback().await;
                let e = StoreError::Backend(format!(
                    "the output does not serialize ({e}); the transaction was rolled back, nothing happened"
                ));
                return failed(e);
            }
        };
        if let Err(e) = tx.apply(call.key, Op::Complete { attempt, output: value }).await {
            tx.rollback().await;
            return failed(e);
        }
        pause_at("recorded");
        match tx.commit().await {
            Ok(()) => {
                pause_at("committed");
                Attempt::Done((Ok(output), Disposition::Executed))
            }
            Err(e) => self.commit_unknown(call, e, attempt, output).await,
        }
    }

    /// The tool failed and its transaction was rolled back: nothing happened, whatever the
    /// error says. A transient error is retried by the policy; anything else ends the call as
    /// a definitive failure.
    fn rolled_back<T: Tool>(
        &self,
        call: &Call<'_, T>,
        outcome: Outcome,
        error: T::Error,
        exec: u32,
    ) -> Attempt<T::Output, T::Error> {
        let outcome = match outcome {
            Outcome::Failed(Failure::Transient { retry_after }) => Outcome::Failed(Failure::Transient { retry_after }),
            _ => Outcome::Failed(Failure::Definitive),
        };
        match decide(policy_input::<T>(outcome, exec, call.tool.declared_retry())) {
            Decision::Retry { after } => Attempt::Retry(after),
            _ => Attempt::Done((
                Err(tool_error::<T>(call.name(), Some(call.key), outcome, error)),
                Disposition::Failed,
            )),
        }
    }

    /// The commit's answer was lost: the record says whether it committed (then the output is
    /// this call's), else nothing of it was written.
    async fn commit_unknown<T: Tool>(
        &self,
        call: &Call<'_, T>,
        error: StoreError,
        attempt: u32,
        output: T::Output,
    ) -> Attempt<T::Output, T::Error> {
        let window = self.inner.store_retry();
        let started = Instant::now();
        let mut backoff = std::time::Duration::from_millis(20);
        loop {
            match self.inner.store.get(call.key).await {
                Ok(Some(rec)) if rec.state == RecordState::Completed && rec.attempt == attempt => {
                    tracing::warn!(%error, "the commit's answer was lost, and the record shows it committed");
                    return Attempt::Done((Ok(output), Disposition::Executed));
                }
                Ok(_) => {
                    tracing::warn!(%error, "the transactional call did not commit: nothing of it was written");
                    return Attempt::Done((Err(store_error::<T>(call.name(), error)), Disposition::Failed));
                }
                Err(e) if started.elapsed() + backoff < window => {
                    tracing::debug!(error = %e, "the journal does not answer yet; reading the record again");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(std::time::Duration::from_secs(1));
                }
                Err(_) => return Attempt::Done((Err(store_error::<T>(call.name(), error)), Disposition::Failed)),
            }
        }
    }

    /// The claim met what the journal holds instead: a recorded result (replayed), a record a
    /// person must look at.
    fn unclaimed_in_transaction<T: Tool>(
        &self,
        call: &Call<'_, T>,
        outcome: OpOutcome,
    ) -> Settled<T::Output, T::Error> {
        let key = call.key.to_owned();
        let err = match outcome {
            OpOutcome::Recorded(rec) => return self.replay(call, &Recorded::from(rec)),
            OpOutcome::InDoubt(_) => return call.blocked(BlockReason::AwaitingResolution),
            OpOutcome::AwaitingApproval(rec) => {
                let pending = ApprovalPending {
                    key,
                    tool: call.name().to_owned(),
                    run_id: call.run.run_id().to_owned(),
                    role: rec.approval_role.unwrap_or_default(),
                };
                return (
                    Err(EffectError::ApprovalPending(pending)),
                    Disposition::AwaitingApproval,
                );
            }
            OpOutcome::Denied(rec) => EffectError::Denied {
                tool: call.name().to_owned(),
                key,
                by: rec.decided_by.unwrap_or_else(|| "a person".to_owned()),
                reason: rec.reason,
            },
            OpOutcome::Compensated(_) => EffectError::Compensated {
                tool: call.name().to_owned(),
                key,
            },
            OpOutcome::Claimed { .. } | OpOutcome::InFlight(_) | OpOutcome::Done(_) => store_error::<T>(
                call.name(),
                StoreError::Backend("claim answered with a non-claim outcome".to_owned()),
            ),
        };
        (Err(err), Disposition::Failed)
    }
}

/// The crash cases' fault point (feature `testing`): with `EFFECT_TOOL_TX_PAUSE` set to
/// `<step>:<file>`, a transactional call that reaches `step` (`claimed`, `recorded`,
/// `committed`) creates `file` and stops there for good, for its process to be killed.
#[cfg(feature = "testing")]
fn pause_at(step: &str) {
    let Ok(pause) = std::env::var("EFFECT_TOOL_TX_PAUSE") else {
        return;
    };
    let Some((at, file)) = pause.split_once(':') else {
        return;
    };
    if at == step {
        let _ = std::fs::write(file, step);
        loop {
            std::thread::sleep(std::time::Duration::from_secs(3600));
        }
    }
}

#[cfg(not(feature = "testing"))]
fn pause_at(_step: &str) {}
