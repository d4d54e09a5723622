//! Decisions: pure functions of a record and an operation, knowing nothing of stores' SQL or the
//! engine.
//!
//! [`identity`] (who a person is across the console, MCP and the CLI; four eyes between
//! them), [`budget`] (whether a call may spend what it asks of its run's budgets), [`grant`]
//! (whether a standing approval covers a call), [`policy`] (retry, reconcile or block: a function
//! of class, outcome and attempt) and [`record`] (the record, its one state machine `transition`,
//! the audit entries it writes); with the feature `policy`, [`cedar`] (a deployment's Cedar
//! policies: allow, deny with a reason, require an approval).

pub mod budget;
#[cfg(feature = "policy")]
#[cfg_attr(docsrs, doc(cfg(feature = "policy")))]
pub mod cedar;
pub mod grant;
pub mod identity;
pub mod policy;
pub mod record;
