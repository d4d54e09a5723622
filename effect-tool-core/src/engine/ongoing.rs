//! One journaled call on its way through the engine: its tool, run, key and fingerprint.

use super::report::{Disposition, Settled};
use crate::call::context::RunContext;
use crate::call::error::{BlockReason, EffectError, SideEffectRetryBlocked};
use crate::call::tool::Tool;

/// A journaled call of `T`, from its identity (stage 1) to its end.
pub(super) struct Call<'a, T> {
    pub(super) tool: &'a T,
    pub(super) run: &'a RunContext,
    pub(super) call_id: Option<String>,
    pub(super) key: &'a str,
    pub(super) fingerprint: &'a str,
    /// Whether the tool declares its own key (an unkeyed irreversible call is refused under a
    /// new tool-call id).
    pub(super) keyed: bool,
    /// Whether another input under the key fails the call ([`Tool::STRICT_INPUT`], or a key the
    /// client sent: [`RunContext::client_key`]) instead of getting the recorded result.
    pub(super) strict_input: bool,
    /// Set when the call gets a result made for another input
    /// ([`CallReport::input_differs`](super::CallReport::input_differs)).
    pub(super) input_differs: std::sync::OnceLock<Vec<String>>,
    /// The role the deployment's policies ask to approve the call (stage 1b), when its
    /// declaration asks none for it.
    pub(super) policy_approval: Option<String>,
    /// Whether a person approved these arguments already (an approval's edited arguments, run
    /// under their own key): the call does not park for approval.
    pub(super) approved: bool,
    /// Set when the call ran with arguments a person edited before approving
    /// ([`CallReport::edited`](super::CallReport::edited)): the fields changed.
    pub(super) edited: std::sync::OnceLock<Vec<String>>,
}

impl<T: Tool> Call<'_, T> {
    /// The name the call is journaled under ([`Tool::declared_name`]).
    pub(super) fn name(&self) -> &'static str {
        self.tool.declared_name()
    }

    /// The call as the journal keeps it ([`Intent`]): its redacted `input`, the approval it
    /// needs (if any) and the engine's `holder`.
    pub(super) fn intent(
        &self,
        input: serde_json::Value,
        approval: Option<String>,
        holder: &crate::decide::record::Holder,
    ) -> crate::decide::record::Intent {
        crate::decide::record::Intent {
            tool: self.name().to_owned(),
            class: T::CLASS,
            run_id: self.run.run_id().to_owned(),
            thread_id: self.run.thread_id().map(str::to_owned),
            call_id: self.call_id.clone(),
            fingerprint: self.fingerprint.to_owned(),
            input,
            ttl_ms: self.tool.declared_ttl().map(|d| d.as_millis() as u64),
            approval,
            approval_ttl_ms: T::APPROVAL_TTL.map(|d| d.as_millis() as u64),
            holder: Some(Box::new(holder.clone())),
        }
    }

    /// The context the tool runs with at `attempt`: under `lease` (a claim's), markers signed
    /// with `secret` (the journal's, if it keeps one).
    pub(super) fn context(
        &self,
        attempt: u32,
        lease: Option<std::sync::Arc<crate::call::lease::LeaseClock>>,
        secret: Option<crate::value::marker::MarkerSecret>,
    ) -> crate::call::context::EffectCtx {
        crate::call::context::EffectCtx::new(
            self.run.clone(),
            self.name(),
            T::CLASS,
            self.call_id.clone(),
            Some(self.key.to_owned()),
            attempt,
            lease,
        )
        .signed(secret)
    }

    /// The call stops with [`SideEffectRetryBlocked`] for `reason`.
    pub(super) fn blocked<O>(&self, reason: BlockReason) -> Settled<O, T::Error> {
        let err = SideEffectRetryBlocked {
            key: self.key.to_owned(),
            tool: self.name().to_owned(),
            run_id: self.run.run_id().to_owned(),
            reason,
        };
        tracing::warn!(%err, "blocked");
        (Err(EffectError::Blocked(err)), Disposition::Blocked)
    }
}
