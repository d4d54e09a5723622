//! A run's budgets, spent by the engine ([`crate::call::budget::Budgets`]): a call's charges
//! before stage 4's claim (after stage 2: a replay spends nothing), a retry's before its
//! backoff. Each spend is one atomic [`Store::spend`](crate::store::Store::spend), bound to the
//! call's effect key (a retry: the key and its attempt), so a key is charged once however many
//! workers or retries reach it.

use super::errors::store_error;
use super::lifecycle::Engine;
use super::observe;
use crate::call::budget::Budgets;
use crate::call::context::RunContext;
use crate::call::error::EffectError;
use crate::call::tool::Tool;
use crate::decide::budget::{Spend, SpendOutcome};
use crate::decide::record::RecordState;

impl Engine {
    /// The budgets of `run`: its own ([`RunContext::with_budgets`]), else the engine's
    /// ([`Engine::with_budgets`]), if any.
    pub(super) fn budgets_of<'a>(&'a self, run: &'a RunContext) -> Option<&'a Budgets> {
        run.budgets().or(self.inner.budgets.as_deref())
    }

    /// Spend what one call of `tool` with `args` asks of `run`'s budgets, bound to `key`.
    /// `Err`: a budget refuses it (or the journal could not be asked): the call must not run.
    pub(super) async fn spend_call<T: Tool>(
        &self,
        tool: &T,
        run: &RunContext,
        key: &str,
        journaled: bool,
        args: &T::Args,
    ) -> Result<(), EffectError<T::Error>> {
        let Some(budgets) = self.budgets_of(run) else {
            return Ok(());
        };
        let charges = budgets.charges_for_call(tool.declared_name(), &tool.costs(args));
        if charges.is_empty() {
            return Ok(());
        }
        let store = &self.inner.store;
        // A store whose claim answers replays skipped stage 2's lookup: a replay spends
        // nothing, so look now.
        if journaled
            && store.claim_answers_replays()
            && let Ok(Some(rec)) = store.lookup_recorded(key).await
            && rec.state() == RecordState::Completed
            && !rec.is_expired(store.now())
        {
            return Ok(());
        }
        let spend = Spend {
            run_id: run.run_id().to_owned(),
            key: key.to_owned(),
            tool: tool.declared_name().to_owned(),
            charges,
        };
        match store.spend(&spend).await {
            Ok(SpendOutcome::Spent { .. }) => Ok(()),
            Ok(SpendOutcome::Exceeded(overdraft)) => {
                observe::budget_exceeded(&self.inner.events, tool.declared_name(), run.run_id(), key, &overdraft);
                Err(EffectError::BudgetExceeded {
                    tool: tool.declared_name().to_owned(),
                    key: journaled.then(|| key.to_owned()),
                    overdraft,
                })
            }
            Err(e) => Err(store_error::<T>(tool.declared_name(), e)),
        }
    }

    /// Spend one unit of `run`'s retry budget for the retry of `key` after attempt `attempt`.
    /// `false`: the budget is spent (or the journal could not be asked): do not retry.
    pub(super) async fn spend_retry(&self, tool: &'static str, run: &RunContext, key: &str, attempt: u32) -> bool {
        let Some(budgets) = self.budgets_of(run) else {
            return true;
        };
        let charges = budgets.charges_for_retry();
        if charges.is_empty() {
            return true;
        }
        let key = format!("{key}#retry{attempt}");
        let spend = Spend {
            run_id: run.run_id().to_owned(),
            key: key.clone(),
            tool: tool.to_owned(),
            charges,
        };
        match self.inner.store.spend(&spend).await {
            Ok(SpendOutcome::Spent { .. }) => true,
            Ok(SpendOutcome::Exceeded(overdraft)) => {
                tracing::info!(
                    tool,
                    key,
                    limit = overdraft.limit,
                    "the run's retry budget is spent: no retry"
                );
                observe::budget_exceeded(&self.inner.events, tool, run.run_id(), &key, &overdraft);
                false
            }
            Err(e) => {
                tracing::warn!(tool, key, error = %e, "could not spend the run's retry budget: no retry");
                false
            }
        }
    }
}
