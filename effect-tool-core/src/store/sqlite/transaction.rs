//! The journal's transaction on SQLite ([`crate::store::transaction`]): one connection of the
//! journal's file, `BEGIN IMMEDIATE` (SQLite's write lock, which every other writer of the
//! file, in this process or another, waits for, up to [`SqliteOptions::busy_timeout`]), the
//! claim, the tool's writes and the record, one `COMMIT` (flushed as the store's
//! `synchronous` says, `FULL` by default).

use std::any::Any;

use super::*;
use crate::store::JournalTransaction;

/// The journal's transaction as a transactional tool sees it on a SQLite journal
/// ([`crate::EffectCtx::transaction`]): the journal file's connection, inside the transaction
/// that records the call.
///
/// ```ignore
/// #[tool(effect = "irreversible", transactional, key = |a| format!("pay:{}", a.order))]
/// async fn pay(ctx: &EffectCtx, order: String, cents: i64) -> Result<String, ToolError> {
///     let tx = ctx.transaction::<SqliteTransaction>().map_err(|e| ToolError::definitive(e.to_string()))?;
///     tx.with(|conn| conn.execute("INSERT INTO payments (order_id, cents) VALUES (?1, ?2)", (&order, cents)))
///         .map_err(|e| ToolError::definitive(e.to_string()))?;
///     Ok(format!("paid {order}"))
/// }
/// ```
///
/// The application's tables live in the journal's file (create them beside the journal's own
/// `effect_*` tables). While the tool runs, the transaction holds SQLite's write lock: every
/// other write to the file waits for it, so keep the tool short (no network calls in it).
pub struct SqliteTransaction {
    /// `None` once the transaction ended (committed or rolled back).
    conn: Mutex<Option<Connection>>,
}

impl std::fmt::Debug for SqliteTransaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteTransaction").finish_non_exhaustive()
    }
}

impl SqliteTransaction {
    /// Run `f` on the connection, inside the journal's transaction (do not `COMMIT` or
    /// `ROLLBACK` in it: the engine does, with the record). After the call ended (a handle
    /// kept past the tool), the transaction is gone and `f` does not run: the answer is
    /// `SQLITE_MISUSE`.
    pub fn with<R>(&self, f: impl FnOnce(&Connection) -> rusqlite::Result<R>) -> rusqlite::Result<R> {
        let guard = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        match guard.as_ref() {
            Some(conn) => f(conn),
            None => Err(rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_MISUSE),
                Some(
                    "the journal's transaction of this call has ended: use the handle only while the tool runs"
                        .to_owned(),
                ),
            )),
        }
    }

    fn take(&self) -> Option<Connection> {
        self.conn.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

/// An open transaction of a SQLite journal.
struct SqliteTx {
    handle: Arc<SqliteTransaction>,
    shared: Arc<Inner>,
}

impl SqliteStore {
    /// A connection of the pool (or a new one) with `BEGIN IMMEDIATE` done: the write lock is
    /// this transaction's until it ends.
    pub(super) async fn begin(&self) -> Result<Box<dyn JournalTransaction>, StoreError> {
        let shared = self.shared.clone();
        let conn = tokio::task::spawn_blocking(move || {
            let conn = match shared.take_reader() {
                Some(c) => c,
                None => open_connection(&shared.path, &shared.options, false)?,
            };
            conn.busy_timeout(shared.options.busy_timeout).map_err(backend)?;
            match conn.execute_batch("BEGIN IMMEDIATE") {
                Ok(()) => Ok(conn),
                Err(e) if is_busy(&e) => Err(StoreError::Backend(format!(
                    "SQLite journal {} stayed locked by another writer for more than {:?}: the transactional call did not start, nothing ran; retry, or raise SqliteOptions::busy_timeout",
                    shared.path.display(),
                    shared.options.busy_timeout
                ))),
                Err(e) => Err(backend(e)),
            }
        })
        .await
        .map_err(|e| StoreError::Backend(format!("a SQLite transaction failed to start: {e}")))??;
        Ok(Box::new(SqliteTx {
            handle: Arc::new(SqliteTransaction {
                conn: Mutex::new(Some(conn)),
            }),
            shared: self.shared.clone(),
        }))
    }
}

#[async_trait]
impl JournalTransaction for SqliteTx {
    fn handle(&self) -> Arc<dyn Any + Send + Sync> {
        self.handle.clone()
    }

    async fn apply(&mut self, key: &str, op: Op) -> Result<OpOutcome, StoreError> {
        let now = self.shared.clock.now();
        let mut fresh = Cached::default();
        self.handle
            .with(|conn| apply_in_tx(conn, key, &op, &mut fresh, now))
            .map_err(backend)?
    }

    async fn commit(self: Box<Self>) -> Result<(), StoreError> {
        let Some(conn) = self.handle.take() else {
            return Err(StoreError::Backend("the transaction had already ended".to_owned()));
        };
        let shared = self.shared.clone();
        tokio::task::spawn_blocking(move || match conn.execute_batch("COMMIT") {
            Ok(()) => {
                shared.give_back(conn);
                Ok(())
            }
            // Not pooled: dropping it rolls back whatever is left.
            Err(e) => Err(backend(e)),
        })
        .await
        .map_err(|e| StoreError::Backend(format!("a SQLite commit failed to run: {e}")))?
    }

    async fn rollback(self: Box<Self>) {
        let Some(conn) = self.handle.take() else { return };
        let shared = self.shared.clone();
        let _ = tokio::task::spawn_blocking(move || {
            if conn.execute_batch("ROLLBACK").is_ok() {
                shared.give_back(conn);
            }
        })
        .await;
    }
}

impl Drop for SqliteTx {
    /// Neither committed nor rolled back (the call's future was dropped): the connection is
    /// closed, which rolls the transaction back.
    fn drop(&mut self) {
        drop(self.handle.take());
    }
}
