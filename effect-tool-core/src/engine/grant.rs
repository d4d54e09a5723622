//! Standing approvals at stage 4a ([`crate::decide::grant`]): before a claim that would park
//! for a person, a live grant covering the call turns it into [`Op::ClaimGranted`]; after that
//! claim committed, and before the tool runs, the grant is read again, so that a revocation (or
//! the end of its period) committed before then lets nothing run: the claim is given back and
//! the call parks as it would have.

use crate::call::error::StoreError;
use crate::call::tool::Tool;
use crate::decide::grant::{Grant, GrantCall, covers, pick};
use crate::decide::record::{Intent, Op};
use crate::engine::Engine;
use crate::store::{GrantError, GrantsExt, NewGrant, StoreExt};

impl Engine {
    /// Make a standing approval of `T`'s calls ([`crate::decide::grant`]): `T`'s argument
    /// schema is kept in the journal first (as before its first call that needs approval), so
    /// that the condition is checked against it; then [`GrantsExt::add_grant`]. `new.tool` is
    /// set to `T`'s name.
    pub async fn grant<T: Tool>(&self, mut new: NewGrant) -> Result<Grant, GrantError> {
        let store = &self.inner.store;
        store.put_input_schema(T::NAME, &T::input_schema()).await?;
        new.tool = T::NAME.to_owned();
        store.add_grant(new).await
    }

    /// Revoke the standing approval `id` as `by` ([`crate::Store::revoke_grant`]): from when
    /// this returns, it lets no call through. `None`: the journal has no grant `id`.
    pub async fn revoke_grant(&self, id: &str, by: &str) -> Result<Option<Grant>, StoreError> {
        self.inner.store.revoke_grant(id, by).await
    }

    /// The journal's standing approvals, of `tool` only if given, revoked and expired ones
    /// included ([`crate::Store::grants`]).
    pub async fn grants(&self, tool: Option<&str>) -> Result<Vec<Grant>, StoreError> {
        self.inner.store.grants(tool).await
    }

    /// The first live grant of the journal that covers the call of `intent` needing `role`'s
    /// approval. A journal that cannot be read gives none: the call parks, as without grants.
    pub(super) async fn covering_grant(&self, role: &str, intent: &Intent) -> Option<Grant> {
        let store = &self.inner.store;
        let grants = match store.live_grants(Some(&intent.tool)).await {
            Ok(g) => g,
            Err(e) => {
                tracing::warn!(error = %e, "could not read the standing approvals; the call waits for a person");
                return None;
            }
        };
        pick(&grants, &grant_call(role, intent), store.now()).cloned()
    }

    /// After a granted claim at `attempt` committed: the grant read again covers the call at
    /// the journal's time, else the claim is released (nothing ran) and `false` says to claim
    /// again (the call then parks, or uses another grant).
    pub(super) async fn grant_still_covers(
        &self,
        key: &str,
        attempt: u32,
        grant: &Grant,
        role: &str,
        intent: &Intent,
    ) -> bool {
        let store = &self.inner.store;
        let why = match store.grant(&grant.id).await {
            Ok(Some(now)) => match covers(&now, &grant_call(role, intent), store.now()) {
                Ok(()) => return true,
                Err(e) => e.to_string(),
            },
            Ok(None) => "the grant is gone from the journal".to_owned(),
            Err(e) => format!("the grant could not be read again ({e})"),
        };
        let reason = format!(
            "standing approval {} no longer covers this call ({why}); released before the tool ran: nothing happened",
            grant.id
        );
        tracing::info!(grant = %grant.id, %why, "a granted claim was given back before the tool ran");
        if let Err(e) = store.release(key, attempt, Some(reason)).await {
            tracing::warn!(error = %e, "could not release a claim whose grant lapsed; it goes stale");
        }
        false
    }
}

/// What a grant is asked about the call of `intent`.
fn grant_call<'a>(role: &'a str, intent: &'a Intent) -> GrantCall<'a> {
    GrantCall {
        tool: &intent.tool,
        role,
        input: &intent.input,
        run_id: &intent.run_id,
        thread_id: intent.thread_id.as_deref(),
    }
}

/// `claim` (an [`Op::Claim`]) under `grant`: [`Op::ClaimGranted`].
pub(super) fn granted(claim: Op, grant: &Grant) -> Op {
    match claim {
        Op::Claim {
            intent,
            lease_ms,
            takeover_in_doubt,
        } => Op::ClaimGranted {
            intent,
            lease_ms,
            takeover_in_doubt,
            grant: grant.usage(),
        },
        other => other,
    }
}
