//! [`Budgets`]: what one run may spend, configured on the engine ([`crate::Engine::with_budgets`])
//! or on a run ([`RunContext::with_budgets`](crate::call::context::RunContext::with_budgets)).
//!
//! A run's budgets are checked and spent atomically through the journal before a call is
//! claimed, bound to the call's effect key (see [`crate::decide::budget`]): replays spend
//! nothing, a second worker of the run joining the same key spends nothing, and two workers
//! never both spend the last unit. A call refused by a budget never runs
//! ([`crate::EffectError::BudgetExceeded`]). Nothing is refunded: a charged call that fails
//! keeps its charge, and calling it again under the same key costs nothing more.

use std::collections::BTreeMap;

use crate::decide::budget::{CALLS, CALLS_OF, Charge, RETRIES, SPEND};

/// The budgets of a run. Every limit is optional; a budget not set is unlimited.
///
/// ```
/// use effect_tool_core::call::budget::Budgets;
///
/// let budgets = Budgets::new()
///     .calls(20)                          // at most 20 tool calls in the run
///     .calls_of("issue_refund", 3)        // at most 3 of them refunds
///     .spend("refund_cents", 25_000)      // tools declaring `cost(refund_cents = ...)` share 25,000
///     .retries(5);                        // at most 5 retries in the whole run
/// assert_eq!(budgets.limit_of_spend("refund_cents"), Some(25_000));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Budgets {
    calls: Option<u64>,
    calls_of: BTreeMap<String, u64>,
    spend: BTreeMap<String, u64>,
    retries: Option<u64>,
}

impl Budgets {
    /// No limits.
    pub fn new() -> Self {
        Self::default()
    }

    /// At most `n` tool calls in the run (every tool, pure ones too; a replay is no call).
    pub fn calls(mut self, n: u64) -> Self {
        self.calls = Some(n);
        self
    }

    /// At most `n` calls of `tool` in the run.
    pub fn calls_of(mut self, tool: impl Into<String>, n: u64) -> Self {
        self.calls_of.insert(tool.into(), n);
        self
    }

    /// At most `limit` of `unit` spent in the run: the tools that declare a cost in `unit`
    /// (`#[tool(cost(unit = |a| ...))]`) charge it with each call.
    pub fn spend(mut self, unit: impl Into<String>, limit: u64) -> Self {
        self.spend.insert(unit.into(), limit);
        self
    }

    /// At most `n` retries in the run, across every tool (the engine's own retries after a
    /// failure; the first attempt of a call is no retry). A call whose retry the budget refuses
    /// ends as its last attempt would.
    pub fn retries(mut self, n: u64) -> Self {
        self.retries = Some(n);
        self
    }

    /// Whether no limit is set.
    pub fn is_unlimited(&self) -> bool {
        self.calls.is_none() && self.calls_of.is_empty() && self.spend.is_empty() && self.retries.is_none()
    }

    /// The limit of calls in the run, if set.
    pub fn limit_of_calls(&self) -> Option<u64> {
        self.calls
    }

    /// The limit of calls of `tool`, if set.
    pub fn limit_of_calls_of(&self, tool: &str) -> Option<u64> {
        self.calls_of.get(tool).copied()
    }

    /// The limit of `unit`, if set.
    pub fn limit_of_spend(&self, unit: &str) -> Option<u64> {
        self.spend.get(unit).copied()
    }

    /// The limit of retries, if set.
    pub fn limit_of_retries(&self) -> Option<u64> {
        self.retries
    }

    /// What one call of `tool` with these `costs` (unit, amount: [`crate::Tool::costs`]) asks
    /// of the run: a unit of the calls budget and of the tool's, and each declared cost whose
    /// unit has a limit. Empty when no budget applies.
    pub fn charges_for_call(&self, tool: &str, costs: &[(&'static str, u64)]) -> Vec<Charge> {
        let mut charges = Vec::new();
        if let Some(limit) = self.calls {
            charges.push(Charge {
                budget: CALLS.to_owned(),
                amount: 1,
                limit,
            });
        }
        if let Some(&limit) = self.calls_of.get(tool) {
            charges.push(Charge {
                budget: format!("{CALLS_OF}{tool}"),
                amount: 1,
                limit,
            });
        }
        for &(unit, amount) in costs {
            if let Some(&limit) = self.spend.get(unit) {
                charges.push(Charge {
                    budget: format!("{SPEND}{unit}"),
                    amount,
                    limit,
                });
            }
        }
        charges
    }

    /// What one retry asks of the run: a unit of the retries budget, if set.
    pub fn charges_for_retry(&self) -> Vec<Charge> {
        self.retries
            .map(|limit| Charge {
                budget: RETRIES.to_owned(),
                amount: 1,
                limit,
            })
            .into_iter()
            .collect()
    }
}

/// How a budget's journal name (`calls`, `calls_of:<tool>`, `spend:<unit>`, `retries`) reads
/// in a sentence: "calls of this run", "`issue_refund` calls of this run", "refund_cents
/// budget of this run", "retries of this run".
pub fn describe(budget: &str) -> String {
    if let Some(tool) = budget.strip_prefix(CALLS_OF) {
        format!("budget of `{tool}` calls in this run")
    } else if let Some(unit) = budget.strip_prefix(SPEND) {
        format!("{unit} budget of this run")
    } else if budget == RETRIES {
        "retry budget of this run".to_owned()
    } else if budget == CALLS {
        "budget of tool calls in this run".to_owned()
    } else {
        format!("budget `{budget}` of this run")
    }
}

/// `25000` as `25,000`.
pub fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_grouped_by_thousands() {
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(25_000), "25,000");
        assert_eq!(grouped(1_234_567), "1,234,567");
    }

    #[test]
    fn only_budgets_with_a_limit_are_charged() {
        let b = Budgets::new().calls(2).spend("cents", 100);
        let charges = b.charges_for_call("refund", &[("cents", 40), ("points", 3)]);
        let names: Vec<_> = charges.iter().map(|c| c.budget.as_str()).collect();
        assert_eq!(names, ["calls", "spend:cents"]);
        assert!(Budgets::new().charges_for_call("refund", &[("cents", 1)]).is_empty());
        assert!(Budgets::new().charges_for_retry().is_empty());
    }
}
