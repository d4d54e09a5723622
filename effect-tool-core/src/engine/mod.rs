//! The call engine: what happens to every call of a tool.
//!
//! A call of a pure tool runs at once (retried as the policy says). Every other call goes
//! through the journal in four stages, numbered the same everywhere (the code's docs,
//! ARCHITECTURE.md's "call path"):
//!
//! 1. **identify** (`entry.rs`): the key, the input's fingerprint and the redacted input the
//!    journal keeps ([`crate::call::key::identify`]).
//!    1b. **policies** (`policies.rs`, feature `policy`): the deployment's Cedar policies
//!    ([`crate::decide::cedar`]) allow the call, deny it (a reason for the model, nothing
//!    journaled) or ask a role to approve it (the claim parks it); a declared approval stays.
//! 2. **replay** (`replay.rs`): a read-only lookup; a recorded result is returned and nothing
//!    runs. A record of another tool under the key is refused
//!    ([`EffectError::KeyOfAnotherTool`](crate::call::error::EffectError::KeyOfAnotherTool)):
//!    a key names one effect of one tool. Then the run's budgets, if it has any
//!    (`budget.rs`, [`crate::call::budget::Budgets`]): spent through the journal, bound to the
//!    key (a replay spent nothing; the same key is charged once); a refusal is
//!    [`EffectError::BudgetExceeded`](crate::call::error::EffectError::BudgetExceeded) and
//!    nothing is claimed.
//! 3. **join** (`join.rs`): an identical call already leading in this process → wait for it and
//!    share its result.
//! 4. **lead** (`lead.rs`), the leading call's stages, in a loop:
//!    - 4a **claim**: a write-ahead intent with a lease, or what the journal holds instead (a
//!      recorded result, another process's live claim to wait for, an approval to wait for
//!      ([`ApprovalPending`](crate::call::error::ApprovalPending)), a record in doubt);
//!    - 4b **take over**: a stale claim or a record in doubt → `recover` if declared; else an
//!      `idempotent` tool runs again under the same key, a `compensable` or `irreversible` one
//!      stops ([`SideEffectRetryBlocked`](crate::call::error::SideEffectRetryBlocked));
//!    - 4c **start**: the last checks before the tool (cancelled, shutting down, lease ours);
//!    - 4d **execute** (`execute.rs`): the tool under its timeout and its guarded lease
//!      (`lease.rs`: a tool is not started, and its future not polled further, once its lease
//!      has lapsed on this process's monotonic clock);
//!    - 4e **settle a failure**: the [`crate::decide::policy`] decides (retry, reconcile, block,
//!      fail); a retry first spends a unit of the run's retry budget, if it has one, and ends
//!      the call as its last attempt would when the budget is spent;
//!    - 4f **record**: the output under the claim, fenced (only the attempt holding the claim
//!      can complete it), a write the journal fails retried for a while
//!      ([`Engine::with_store_retry`]).
//!
//! The compensation of an abandoned run (`compensation.rs`) goes through stages 4a, 4d, 4e and
//! 4f too, under the same lease renewal.
//!
//! Rooms: `lifecycle.rs` ([`Engine`], its configuration, [`Engine::shutdown`]), `report.rs`
//! (the public report types), `entry.rs` (the entry points and the journaled path), `ongoing.rs`
//! (the call on its way), `policies.rs` (stage 1b), `replay.rs`, `join.rs`, `lead.rs`, `execute.rs`, `lease.rs`,
//! `complete.rs` (stage 4f's write), `errors.rs` (the errors the engine makes), `run_handle.rs` ([`RunHandle`]), `compensation.rs`,
//! `budget.rs` (the run's budgets, spent), `reconcile.rs` (a record nobody calls again,
//! reconciled by [`Engine::reconcile_record`]), `observe.rs` (events and metrics),
//! `instrumented.rs` (the store as the engine sees it),
//! `dyn_tool.rs` (tools behind a trait object).

mod budget;
mod callback;
pub mod compensation;
mod complete;
pub mod dyn_tool;
mod entry;
mod errors;
mod execute;
mod grant;
mod instrumented;
mod join;
mod lead;
pub(crate) mod lease;
mod lifecycle;
mod observe;
mod one_write;
mod ongoing;
#[cfg(feature = "policy")]
mod policies;
pub mod reconcile;
mod replay;
mod report;
mod run_handle;
mod transact;

pub(crate) use errors::output_mismatch;
pub(crate) use execute::panic_message;
pub use lifecycle::{DEFAULT_STORE_RETRY, Engine, EngineConfig};
pub use observe::{CallEvent, EVENT_BUFFER, EngineEvent, METRICS, MetricInfo, MetricKind, describe_metrics};
pub use reconcile::{RECONCILER_ACTOR, ReconcileVerdict};
pub use report::{CallOptions, CallReport, Disposition, ShutdownReport};
pub use run_handle::RunHandle;
