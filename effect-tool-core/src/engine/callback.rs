//! Stage 4f for a call whose effect a provider finishes later ([`EffectCtx::pending`]): the
//! claim becomes a pending record instead of a completed one; and stage 4a for a call that meets
//! a pending record: it waits a while for the provider's callback, then is told the call is
//! still pending.
//!
//! [`EffectCtx::pending`]: crate::EffectCtx::pending

use std::time::Duration;

use super::complete::Completion;
use super::lease::Held;
use super::lifecycle::Engine;
use crate::call::error::StoreError;
use crate::decide::record::{EffectRecord, Op, RecordState, Rejected};
use crate::value::callback::CallbackToken;

impl Engine {
    /// Turn `held`'s claim of `key` into a record pending the provider's callback (one write).
    /// Refused because another attempt owns the key: [`Completion::Fenced`]. A journal that
    /// fails: [`Completion::Failed`], logged; the effect started and the claim left behind goes
    /// stale, so the next call of the key reconciles it (as after a crash).
    pub(super) async fn pend_under_claim(
        &self,
        key: &str,
        held: &Held,
        (token, within): (&CallbackToken, Duration),
    ) -> Completion {
        let store = &self.inner.store;
        let within = i64::try_from(within.as_millis()).unwrap_or(i64::MAX);
        let op = Op::Pend {
            attempt: held.attempt,
            token_digest: token.digest(),
            deadline: store.now().saturating_add(within),
        };
        match store.apply(key, op).await {
            Ok(_) => Completion::Written,
            Err(StoreError::Rejected(Rejected::Fenced { .. })) => Completion::Fenced,
            Err(error) => {
                tracing::warn!(%error, key, "could not record that the call waits for its callback; the claim is left to go stale and be reconciled");
                Completion::Failed
            }
        }
    }

    /// A call met `rec`, pending its callback: wait for it to be settled (or to go in doubt) for
    /// at most the engine's lease ([`crate::EngineConfig::lease`]) and the record's deadline,
    /// woken by [`crate::Store::changed`] and polling meanwhile. `true`: the record is no longer
    /// waiting (claim again: it replays, or is in doubt); `false`: it still is, or the run was
    /// cancelled or the engine is shutting down.
    pub(super) async fn wait_for_callback(&self, key: &str, rec: &EffectRecord, run: &crate::RunContext) -> bool {
        let store = &self.inner.store;
        let left = rec.lease_until.map_or(0, |d| d.saturating_sub(store.now()).max(0)) as u64;
        let wait = self.inner.config.lease.min(Duration::from_millis(left));
        let waited = async {
            let mut poll = Duration::from_millis(20);
            loop {
                tokio::select! {
                    _ = store.changed(key) => {}
                    _ = tokio::time::sleep(poll) => {}
                }
                poll = (poll * 2).min(Duration::from_millis(500));
                match store.get(key).await {
                    Ok(Some(now)) if now.state == RecordState::Pending && !now.is_overdue(store.now()) => {}
                    _ => return true,
                }
            }
        };
        tokio::select! {
            biased;
            _ = run.cancellation().cancelled() => false,
            _ = self.inner.draining.cancelled() => false,
            settled = tokio::time::timeout(wait, waited) => settled.unwrap_or(false),
        }
    }
}
