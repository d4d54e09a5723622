//! A call whose effect a provider finishes later: [`EffectCtx::pending`] hands the tool a
//! callback token for the provider, and the engine keeps the record pending until the
//! provider's answer settles it (see [`crate::value::callback`] for the token,
//! [`crate::decide::record::Op::Pend`] and [`crate::decide::record::Op::Settle`] for the
//! record).
//!
//! ```ignore
//! #[tool(effect = "irreversible", key = "payout:{request_id}")]
//! async fn payout(ctx: &EffectCtx, request_id: String, cents: u64) -> Result<Payout, PayError> {
//!     let token = ctx.pending(Duration::from_secs(3600))?;
//!     let id = bank.start_payout(&request_id, cents, &format!("{WEBHOOK}?token={token}")).await?;
//!     Ok(Payout { id, status: Status::Pending })
//! }
//! ```
//!
//! What the tool returns is the model's answer to this call (a receipt: "started, pending");
//! it is not recorded. The record waits for the provider's answer, which is recorded and
//! replayed to every later call of the key, as the tool's output (it must have the output's
//! shape).

use std::time::Duration;

use super::context::EffectCtx;
use crate::value::callback::CallbackToken;

/// Why [`EffectCtx::pending`] has no callback token to give: nothing was promised to a
/// provider. Return an error from the tool (before starting the effect).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("tool `{tool}` asked for a callback token, but {reason}")]
pub struct NoCallback {
    /// The tool.
    pub tool: &'static str,
    /// What is missing, and what to do.
    pub reason: &'static str,
}

impl EffectCtx {
    /// Make this call wait for a provider's callback: the effect the tool starts is finished
    /// by the provider later (a payout, a long job), and its answer, sent back with the
    /// returned token within `within` of the tool's return, is the call's recorded output.
    ///
    /// Hand the token (its `Display` text, URL-safe) to the provider, e.g. in the webhook URL
    /// it calls back ([`crate::ops::callback`] receives it) or in its metadata, then return a
    /// receipt as the tool's output: the model reads it for this call, the journal does not
    /// record it. Until the callback comes the record is pending: a later call of the same key
    /// waits a while for the answer, then is told the call is still pending. Past the deadline
    /// the record is in doubt (a person resolves it, or the tool's `verify` when called again).
    /// A tool that then fails instead of returning leaves nothing pending: its failure is
    /// settled as usual.
    ///
    /// Asked twice in one call, the same token is returned (the first deadline stands). Refused
    /// ([`NoCallback`]) outside the engine, for a call without a key, for a transactional
    /// call, for a `one_write` call ([`crate::Tool::ONE_WRITE`]: it holds no claim), or when the journal keeps no marker secret to sign the token with.
    pub fn pending(&self, within: Duration) -> Result<CallbackToken, NoCallback> {
        let refuse = |reason| NoCallback {
            tool: self.tool,
            reason,
        };
        let key = self.key.as_deref().ok_or_else(|| {
            refuse("the call has no effect key (a pure tool, or a context outside the engine): only a journaled call can wait for a callback")
        })?;
        if self.transaction.is_some() {
            return Err(refuse(
                "a transactional call commits its record with its own transaction and cannot wait for a callback: declare the tool without `transactional`",
            ));
        }
        if self.claimless {
            return Err(refuse(
                "a `one_write` call runs without a claim, and only a claim can wait for a callback: declare the tool without `one_write`",
            ));
        }
        let secret = self.marker_secret.as_ref().ok_or_else(|| {
            refuse("the journal keeps no marker secret to sign the token with: give the engine one (`Engine::with_marker_secret`) or use a store that keeps one")
        })?;
        let (token, _) = self
            .callback
            .get_or_init(|| (CallbackToken::issue(secret, self.tool, key, self.attempt), within));
        Ok(token.clone())
    }

    /// The callback this call asked for, if any, and how long after the tool returns it is
    /// due (for the engine at stage 4f).
    pub(crate) fn pending_callback(&self) -> Option<(&CallbackToken, Duration)> {
        self.callback.get().map(|(t, d)| (t, *d))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::context::RunContext;
    use crate::value::class::EffectClass;
    use crate::value::marker::MarkerSecret;

    fn journaled() -> EffectCtx {
        EffectCtx::new(
            RunContext::new("run-1"),
            "payout",
            EffectClass::Idempotent,
            None,
            Some("payout:7".to_owned()),
            1,
            None,
        )
        .signed(Some(MarkerSecret::from_bytes([7; 32])))
    }

    /// A journaled call with a claim gets a token, the same one when it asks again.
    #[test]
    fn a_claimed_call_gets_one_token() {
        let ctx = journaled();
        let token = ctx.pending(Duration::from_secs(60)).expect("a token");
        assert_eq!(
            ctx.pending(Duration::from_secs(5)).unwrap().to_string(),
            token.to_string()
        );
        assert_eq!(ctx.pending_callback().map(|(_, d)| d), Some(Duration::from_secs(60)));
    }

    /// Every context that cannot wait for a callback says why and what to do; nothing is kept.
    #[test]
    fn a_call_without_a_claim_or_a_secret_is_refused() {
        let cases = [
            (
                EffectCtx::detached(RunContext::new("run-1"), "payout", EffectClass::Idempotent),
                "no effect key",
            ),
            (journaled().without_claim(), "declare the tool without `one_write`"),
            (journaled().signed(None), "no marker secret"),
        ];
        for (ctx, says) in cases {
            let refused = ctx.pending(Duration::from_secs(60)).expect_err("refused");
            assert_eq!(refused.tool, "payout");
            assert!(refused.to_string().contains(says), "{refused}");
            assert!(ctx.pending_callback().is_none());
        }
    }
}
