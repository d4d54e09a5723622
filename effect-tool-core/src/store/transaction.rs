//! The journal's own transaction, for tools whose effect is a write to the database that holds
//! the journal ([`crate::Tool::TRANSACTIONAL`]): [`JournalTransaction`], opened by
//! [`Store::begin_transaction`](super::Store::begin_transaction).
//!
//! The engine claims the key inside it, hands [`JournalTransaction::handle`] to the tool
//! ([`crate::EffectCtx::transaction`]), records the output inside it, and commits once: the
//! tool's writes and its record are one commit. A crash before the commit leaves nothing (not
//! even a claim: no claim is flushed first), a crash after it leaves the record; such a call is
//! never in doubt. Two calls of one key are serialized by the transaction itself (the second
//! waits for the first's commit, then finds its record and replays it).

use std::any::Any;
use std::sync::Arc;

use async_trait::async_trait;

use crate::call::error::StoreError;
use crate::decide::record::{Op, OpOutcome};

/// One open transaction of the journal's database, for one call of a transactional tool.
///
/// Dropped without [`JournalTransaction::commit`], it rolls back (the built-in stores roll back
/// on drop, and a process that dies rolls back with its connection).
#[async_trait]
pub trait JournalTransaction: Send {
    /// The handle the tool reads with [`crate::EffectCtx::transaction`]: the store's own type
    /// ([`SqliteTransaction`](crate::store::sqlite::SqliteTransaction),
    /// [`PgTransaction`](crate::store::postgres::PgTransaction)).
    fn handle(&self) -> Arc<dyn Any + Send + Sync>;

    /// Apply `op` to the record of `key` inside this transaction, through
    /// [`crate::decide::record::transition`] as [`Store::apply`](super::Store::apply) does,
    /// the op's audit entry included. Nothing of it is visible to others before the commit.
    async fn apply(&mut self, key: &str, op: Op) -> Result<OpOutcome, StoreError>;

    /// Commit: the tool's writes and every op applied become durable together (flushed as
    /// any record is). An error may hide a commit (the connection lost after `COMMIT` was
    /// sent): read the record to know.
    async fn commit(self: Box<Self>) -> Result<(), StoreError>;

    /// Roll back: nothing of the tool's writes or of the ops applied remains.
    async fn rollback(self: Box<Self>);
}

/// The message for a transactional tool on a store without transactions: which stores have
/// them.
pub(crate) fn unsupported(tool: &str, backend: &str) -> StoreError {
    StoreError::Backend(format!(
        "tool `{tool}` is declared `transactional` (its effect is a write in the journal's own transaction), but this journal ({backend} store) has no transactions to give it: journal to SQLite (`SqliteStore::open`) or PostgreSQL (`PostgresStore::connect`), the database the tool writes to, or remove `transactional` from the declaration; nothing ran"
    ))
}
