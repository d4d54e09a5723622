//! The journal: one async store trait, the operations built on it, and its backends.
//!
//! A backend implements five methods; the state machine ([`crate::decide::record::transition`]) is the
//! same for all of them, run inside the backend's atomic section by [`Store::apply`]. The
//! conformance suite (`effect_tool_core::testing::conformance`, feature `testing`) checks every backend
//! against the same lifecycle.
//!
//! # Durability follows the class
//!
//! Every operation is committed (visible to every process sharing the journal) before its
//! caller is answered. What must also be *flushed* (on disk, surviving a power loss) before
//! the answer is said by [`Op::needs_flush`]: everything but the claim of an idempotent tool
//! ([`crate::EffectClass::claim_needs_flush`]). Such a claim may reach the disk with the
//! holder's record, whose flush covers it in a backend whose log is written in commit order
//! (SQLite's WAL, PostgreSQL's WAL); a claim lost in a power failure only means the call runs
//! again with the same key, which the class allows. Compensable and irreversible claims are
//! flushed before the tool runs: they are the evidence that makes a later attempt reconcile
//! instead of acting twice. A backend may always flush more. The SQLite and PostgreSQL
//! modules say how each does it.

pub mod approval;
mod backend;
mod gc;
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

pub use backend::Store;
pub(crate) use backend::StoreClock;
pub use gc::collectable;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) use gc::{GcPace, collectable_sql};
pub(crate) use layer::{Access, BoxFuture, Brief, Layered, Operation, StoreLayer};
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) use listing::skipped;
pub use listing::{Cursor, Filter, Listing, Skipped};
pub use memory::MemoryStore;
pub use operations::{StoreExt, check_output};
pub use recorded::Recorded;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) use row::OUTPUT_SCHEMA_ROW;
