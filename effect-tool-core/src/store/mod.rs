//! The journal: one async store trait, the operations built on it, and its backends.
//!
//! The journal's format (every table and column of both backends, the JSON inside, the version
//! counters) and what each store promises per effect class are written down once, in
//! [`docs/journal-format.md`](https://github.com/effect-tool/effect-tool/blob/main/docs/journal-format.md).
//!
//! # Rooms
//!
//! - [`Store`] (`backend.rs`): the trait a backend implements. Five operations are required
//!   (`get`, `apply`, `list`, `gc`, `audit`); the others are provided, and a backend overrides
//!   them for a fast path (`lookup`, `lookup_recorded`, `claim_unseen`, `list_report`,
//!   `claim_answers_replays`) or a capability of its own (`append_audit`, `marker_secret`,
//!   `put_output_schema`, `output_schema`, `changed`, `now`, `backend_name`).
//! - [`StoreExt`] (`operations.rs`): the named operations (claim, complete, approve, ...), each
//!   one [`Store::apply`] of an [`Op`](crate::decide::record::Op), for every store at once.
//! - `layer.rs`: wrapping a store, written once, so that the crate's wrappers (the engine's
//!   instrumentation, the simulation's faulty journal) forward every method of [`Store`].
//! - [`Filter`], [`Listing`] (`listing.rs`), [`Recorded`] (`recorded.rs`): what lists take and
//!   give, and what a replay reads.
//! - [`collectable`] (`gc.rs`): what garbage collection may delete, for every backend.
//! - The backends: [`memory`], `sqlite` and `postgres` (features of the same names), each in
//!   rooms of its own (schema and migrations, statements, the trait impl); `row.rs`, the one
//!   decoding of a stored row for both SQL backends.
//! - [`markers`], [`approval`]: finding a record from a marker; waiting for a person.
//! - [`election`]: leases elected through the journal (one reconciler per journal).
//! - [`grant`]: standing approvals ([`GrantsExt`]: make, list, revoke), kept by every built-in
//!   store (`Store::put_grant`, `grants`, `grant`, `revoke_grant`).
//!
//! # Durability follows the class
//!
//! Every operation is committed (visible to every process sharing the journal) before its
//! caller is answered; what must also be flushed (surviving a power loss) is said by
//! [`Op::needs_flush`](crate::decide::record::Op::needs_flush): everything but the claim of an
//! idempotent tool. Why that is safe, and what each backend does, is the section "What each
//! store promises, per class" of the journal's format.
//!
//! The state machine ([`crate::decide::record::transition`]) is the same for every backend, run
//! inside the backend's atomic section by [`Store::apply`]. The conformance suite
//! (`effect_tool_core::testing::conformance`, feature `testing`) checks every backend against the
//! same lifecycle.

pub mod approval;
mod backend;
pub mod callback;
pub mod election;
mod gc;
pub mod grant;
mod layer;
mod listing;
pub mod markers;
pub mod memory;
mod operations;
#[cfg(feature = "postgres")]
pub mod postgres;
mod recorded;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod row;
#[cfg(feature = "sqlite")]
pub mod sqlite;
pub mod transaction;

pub(crate) use backend::StoreClock;
pub use backend::{Store, input_schema_name};
pub use gc::collectable;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) use gc::{GcPace, collectable_sql};
pub use grant::{GrantError, GrantsExt, NewGrant};
#[cfg(feature = "testing")]
pub(crate) use layer::Access;
pub(crate) use layer::{BoxFuture, Brief, Layered, Operation, StoreLayer};
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) use listing::skipped;
pub use listing::{Cursor, Filter, Listing, Skipped};
pub use memory::MemoryStore;
pub use operations::{StoreExt, check_edit, check_output};
pub use recorded::Recorded;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) use row::OUTPUT_SCHEMA_ROW;
pub use transaction::JournalTransaction;
