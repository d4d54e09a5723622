//! Budgets of a run, decided: whether a call may spend what it asks of its run's budgets
//! (calls, calls of one tool, a spend in a unit the tool declares, retries). A pure function of
//! what the journal holds for the run ([`Spent`]) and the call's [`Spend`]; every store runs it
//! inside its own atomic section ([`crate::store::Store::spend`]) and writes back what it returns,
//! so that two workers of one run never both spend its last unit.
//!
//! A spend is bound to a key (the call's effect key, or the key and attempt of a retry): a key
//! that was charged once is never charged again, so a retry, a re-planned call under the same
//! key or a second worker joining it spends nothing. Nothing is refunded: a call that was
//! charged and then failed, was denied or parked keeps its charge (its key is charged, and
//! calling it again costs nothing more).

use serde::{Deserialize, Serialize};

/// The budget every call of a run spends one unit of ([`crate::call::budget::Budgets::calls`]).
pub const CALLS: &str = "calls";
/// The prefix of a budget of one tool's calls: `calls_of:<tool>`.
pub const CALLS_OF: &str = "calls_of:";
/// The prefix of a spend budget in a tool's declared unit: `spend:<unit>`.
pub const SPEND: &str = "spend:";
/// The budget every retry of a run spends one unit of.
pub const RETRIES: &str = "retries";

/// One budget a call asks to spend from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Charge {
    /// The budget's name in the journal: [`CALLS`], `calls_of:<tool>`, `spend:<unit>` or
    /// [`RETRIES`].
    pub budget: String,
    /// What this call spends of it.
    pub amount: u64,
    /// The run's limit of this budget.
    pub limit: u64,
}

/// What a call asks of its run's budgets, bound to `key`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Spend {
    /// The run.
    pub run_id: String,
    /// What the spend is bound to: the effect key of a call (or `<key>#retry<n>` for a retry).
    /// A key charged once is not charged again.
    pub key: String,
    /// The tool that asks.
    pub tool: String,
    /// Every budget it spends from, all or none.
    pub charges: Vec<Charge>,
}

/// What the journal holds of one budget of the run, read in the store's atomic section.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Spent {
    /// Spent so far in the run.
    pub total: u64,
    /// Whether this spend's key was already charged to this budget.
    pub charged: bool,
}

/// A budget a call would overdraw: what the model and the person are told.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Overdraft {
    /// The budget's name in the journal (see [`Charge::budget`]).
    pub budget: String,
    /// The run's limit.
    pub limit: u64,
    /// Spent so far in the run.
    pub spent: u64,
    /// What the call asks.
    pub asks: u64,
}

impl Overdraft {
    /// What is left of the budget.
    pub fn left(&self) -> u64 {
        self.limit.saturating_sub(self.spent)
    }
}

/// The store's answer to a [`Spend`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SpendOutcome {
    /// Charged (the budgets named; those the key had already been charged to are left out):
    /// the call may go on.
    Spent {
        /// The budgets charged by this spend.
        charged: Vec<String>,
    },
    /// Refused: nothing was charged, the call must not run.
    Exceeded(Overdraft),
}

/// Decide a spend. `spent(budget)` reads what the journal holds for the run and the spend's
/// key. `Ok`: the charges to write (each budget not yet charged to the key); `Err`: the first
/// budget the call would overdraw, and nothing is written.
pub fn decide(spend: &Spend, mut spent: impl FnMut(&str) -> Spent) -> Result<Vec<Charge>, Overdraft> {
    let mut write = Vec::new();
    for charge in &spend.charges {
        let now = spent(&charge.budget);
        if now.charged {
            continue;
        }
        if now.total.saturating_add(charge.amount) > charge.limit {
            return Err(Overdraft {
                budget: charge.budget.clone(),
                limit: charge.limit,
                spent: now.total,
                asks: charge.amount,
            });
        }
        write.push(charge.clone());
    }
    Ok(write)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spend(charges: &[(&str, u64, u64)]) -> Spend {
        Spend {
            run_id: "r".into(),
            key: "k".into(),
            tool: "t".into(),
            charges: charges
                .iter()
                .map(|&(budget, amount, limit)| Charge {
                    budget: budget.into(),
                    amount,
                    limit,
                })
                .collect(),
        }
    }

    #[test]
    fn the_last_unit_is_spent_and_one_more_is_refused() {
        let s = spend(&[(CALLS, 1, 3)]);
        assert_eq!(
            decide(&s, |_| Spent {
                total: 2,
                charged: false
            })
            .unwrap()
            .len(),
            1
        );
        let over = decide(&s, |_| Spent {
            total: 3,
            charged: false,
        })
        .unwrap_err();
        assert_eq!((over.limit, over.spent, over.asks, over.left()), (3, 3, 1, 0));
    }

    #[test]
    fn a_charged_key_spends_nothing_again_even_at_the_limit() {
        let s = spend(&[(CALLS, 1, 3)]);
        assert!(
            decide(&s, |_| Spent {
                total: 3,
                charged: true
            })
            .unwrap()
            .is_empty()
        );
    }

    #[test]
    fn all_or_nothing_the_first_overdraft_names_its_budget() {
        let s = spend(&[(CALLS, 1, 10), ("spend:cents", 30_000, 25_000)]);
        let over = decide(&s, |_| Spent::default()).unwrap_err();
        assert_eq!(over.budget, "spend:cents");
        assert_eq!((over.left(), over.asks), (25_000, 30_000));
    }

    #[test]
    fn amounts_near_the_top_do_not_wrap() {
        let s = spend(&[(CALLS, u64::MAX, u64::MAX - 1)]);
        assert!(
            decide(&s, |_| Spent {
                total: 5,
                charged: false
            })
            .is_err()
        );
    }
}
