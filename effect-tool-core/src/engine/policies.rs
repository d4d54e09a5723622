//! Stage 1b, the deployment's policies (feature `policy`): after the call is identified and
//! before anything is replayed or claimed, its [Cedar policies](crate::decide::cedar) allow it,
//! deny it (the call ends with [`EffectError::Denied`], a reason written for the model), or ask a
//! role to approve it (the claim parks it, as a declared approval does). Declarations are the
//! floor: a declared approval stays whatever the policies say. In shadow mode the call goes on
//! as declared, and what the policies would have done is audited, counted and logged.

use std::sync::Arc;

use serde_json::Value;

use super::lifecycle::Engine;
use super::observe;
use super::report::{CallReport, Disposition};
use crate::call::context::RunContext;
use crate::call::error::EffectError;
use crate::call::tool::Tool;
use crate::decide::cedar::{PolicyDecision, PolicyMode, PolicyRequest, audit_entry};

pub use crate::decide::cedar::Policies;

/// What the policies leave the call to do.
pub(super) enum Gate {
    /// Go on; `Some(role)`: the call also needs `role`'s approval (a role the policies ask, the
    /// tool's declaration asking none for this call).
    Go(Option<String>),
    /// The call ends here: denied by `by` (the policies, named), for `reason` (for the model).
    Denied {
        /// The deciding policies, as the error names them.
        by: String,
        /// Why, for the model.
        reason: String,
    },
}

impl Engine {
    /// Ask `policies` about every call from now on (this engine and its clones), before the
    /// claim: see [`crate::decide::cedar`] for what they can say, and
    /// [`Engine::set_policies`] to replace them while the engine runs.
    pub fn with_policies(self, policies: Policies) -> Self {
        self.set_policies(Some(policies));
        self
    }

    /// Replace the policies (`None`: none, every call as declared) for the calls that start
    /// from now on: a reload of the policy file needs no restart.
    pub fn set_policies(&self, policies: Option<Policies>) {
        *self.inner.policies.write().unwrap_or_else(|e| e.into_inner()) = policies.map(Arc::new);
    }

    /// The policies in force, if any.
    pub fn policies(&self) -> Option<Arc<Policies>> {
        self.inner.policies.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Stage 1b: ask the policies about a call of `T` with `args` (`key`: the effect key, `None`
    /// for a pure tool, which is not journaled and so neither audited nor parked: a policy's
    /// approval denies it). `declared`: the role the declaration asks for this call.
    pub(super) async fn ask_policies<T: Tool>(
        &self,
        tool: &T,
        run: &RunContext,
        key: Option<&str>,
        args: &T::Args,
        declared: Option<&'static str>,
    ) -> Gate {
        let Some(policies) = self.policies() else {
            return Gate::Go(None);
        };
        let mut args = serde_json::to_value(args).unwrap_or(Value::Null);
        if let Value::Object(fields) = &mut args {
            for name in T::SENSITIVE {
                fields.remove(*name);
            }
        }
        let request = PolicyRequest {
            principal: run.principal(),
            run_id: run.run_id(),
            thread_id: run.thread_id(),
            agent: run.agent(),
            tool: tool.declared_name(),
            class: T::CLASS,
            declared_approval: tool.declared_approval(),
            args: &args,
        };
        let mode = policies.mode();
        let mut decision = policies.evaluate(&request);
        if key.is_none()
            && let PolicyDecision::RequireApproval { role, policies } = decision
        {
            decision = PolicyDecision::Deny {
                reason: format!(
                    "it needs approval by `{role}`, and a call of a tool that changes nothing is not journaled, so it cannot wait for one; tell the user"
                ),
                policies,
            };
        }
        observe::policy_decided(&self.inner.events, tool.declared_name(), key, &decision, mode);
        if decision != PolicyDecision::Allow {
            match mode {
                PolicyMode::Shadow => tracing::info!(
                    tool = tool.declared_name(),
                    key,
                    decision = decision.as_str(),
                    policies = ?decision.policies(),
                    "shadow policy: the call goes on as declared; enforced, the policies would have decided otherwise"
                ),
                PolicyMode::Enforce => tracing::info!(
                    tool = tool.declared_name(),
                    key,
                    decision = decision.as_str(),
                    policies = ?decision.policies(),
                    "policy decision"
                ),
            }
            if let Some(key) = key {
                let store = &self.inner.store;
                let entry = audit_entry(key, &decision, mode, &request, declared, store.now());
                if let Err(e) = store.append_audit(entry).await {
                    tracing::warn!(tool = tool.declared_name(), key, error = %e, "the policy decision could not be audited");
                }
            }
        }
        if mode == PolicyMode::Shadow {
            return Gate::Go(None);
        }
        match decision {
            PolicyDecision::Allow => Gate::Go(None),
            // The floor: a declared approval stays (and is the one the record waits for).
            PolicyDecision::RequireApproval { role, .. } => Gate::Go(declared.is_none().then_some(role)),
            PolicyDecision::Deny { reason, policies } => Gate::Denied {
                by: if policies.is_empty() {
                    "the deployment's policies".to_owned()
                } else {
                    format!(
                        "the deployment's policy {}",
                        policies.iter().map(|p| format!("`{p}`")).collect::<Vec<_>>().join(", ")
                    )
                },
                reason,
            },
        }
    }
}

/// The report of a call the policies denied: nothing ran, nothing was journaled.
pub(super) fn denied<T: Tool>(
    tool: &str,
    by: String,
    reason: String,
    key: Option<&str>,
) -> CallReport<T::Output, T::Error> {
    CallReport {
        result: Err(EffectError::Denied {
            tool: tool.to_owned(),
            key: key.unwrap_or_default().to_owned(),
            by,
            reason: Some(reason),
        }),
        disposition: Disposition::Rejected,
        key: key.map(str::to_owned),
        input_differs: None,
        edited: None,
    }
}
