//! Stage 4f's write: `Op::Complete` of an output under the claim that made it, a write the
//! journal fails retried while the claim's lease is renewed. A call's record
//! (`lead.rs`) and a compensation's (`compensation.rs`) both go through it.

use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

use super::lease::{Held, renew_forever};
use super::lifecycle::Engine;
use super::observe;
use crate::call::error::StoreError;
use crate::decide::record::{Op, Rejected};

/// How stage 4f's write ended.
pub(super) enum Completion {
    /// The output is recorded (perhaps after retries).
    Written,
    /// The journal refused the write: an earlier try of it committed (its answer lost), or
    /// another attempt owns the key. The caller looks at the journal to tell which.
    Fenced,
    /// The journal failed for longer than [`Engine::with_store_retry`] (or the shutdown deadline
    /// passed, or it failed otherwise): nothing is recorded. Logged and reported
    /// ([`EngineEvent::RecordFailed`](super::EngineEvent::RecordFailed)); the effect happened,
    /// and the claim left behind makes the next attempt reconcile.
    Failed,
}

impl Engine {
    /// Record `output` under `held`'s claim of `key` (for `tool`). A backend failure is retried
    /// with backoff (20 ms, doubling to 1 s) while the lease is renewed, until the output is
    /// written, refused, or [`Engine::with_store_retry`] has passed (or the shutdown deadline);
    /// `again` gives the output for each retry (`None`: it no longer serializes, and the write
    /// fails).
    pub(super) async fn complete_under_claim(
        &self,
        tool: &'static str,
        key: &str,
        held: &Held,
        output: Value,
        again: impl Fn() -> Option<Value>,
    ) -> Completion {
        let attempt = held.attempt;
        // `apply`, not `complete`: the written record is not needed back (no copy of it).
        let error = match self.inner.store.apply(key, Op::Complete { attempt, output }).await {
            Ok(_) => return Completion::Written,
            Err(e) => e,
        };
        let retried = self.retry_completion(tool, key, attempt, error, again);
        let renew = renew_forever(
            self.inner.store.clone(),
            key.to_owned(),
            attempt,
            self.inner.config.lease,
            held.lease.clone(),
        );
        tokio::select! {
            biased;
            completion = retried => completion,
            _ = renew => unreachable!("lease renewal loops until the record is written"),
        }
    }

    /// The retries of [`Engine::complete_under_claim`], after its first write failed with `error`.
    async fn retry_completion(
        &self,
        tool: &'static str,
        key: &str,
        attempt: u32,
        mut error: StoreError,
        again: impl Fn() -> Option<Value>,
    ) -> Completion {
        let inner = &self.inner;
        let window = inner.store_retry();
        let started = Instant::now();
        let mut backoff = Duration::from_millis(20);
        loop {
            match error {
                StoreError::Rejected(Rejected::Fenced { .. }) => return Completion::Fenced,
                StoreError::Backend(_) if started.elapsed() + backoff < window && !inner.abort.is_cancelled() => {
                    observe::record_retried(tool);
                    if backoff == Duration::from_millis(20) {
                        tracing::warn!(%error, "could not record the effect's result; retrying");
                    } else {
                        tracing::debug!(%error, "could not record the effect's result; retrying");
                    }
                    tokio::select! {
                        biased;
                        _ = tokio::time::sleep(backoff) => {}
                        _ = inner.abort.cancelled() => {}
                    }
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                }
                e => {
                    tracing::warn!(error = %e, key, "effect applied but its record failed; the next attempt will reconcile");
                    observe::record_failed(&inner.events, tool, key, &e);
                    return Completion::Failed;
                }
            }
            let Some(output) = again() else {
                tracing::warn!(
                    key,
                    "effect applied but its output no longer serializes; the next attempt will reconcile"
                );
                return Completion::Failed;
            };
            match inner.store.apply(key, Op::Complete { attempt, output }).await {
                Ok(_) => {
                    tracing::info!("recorded the effect's result after retrying");
                    return Completion::Written;
                }
                Err(e) => error = e,
            }
        }
    }
}
