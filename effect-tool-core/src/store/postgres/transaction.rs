//! The journal's transaction on PostgreSQL ([`crate::store::transaction`]): one pooled
//! connection, `BEGIN`, the claim, the tool's statements and the record, one `COMMIT` (flushed
//! as the server's `synchronous_commit` says: on by default). Two calls of one key: the
//! second's claim waits on the first's uncommitted row (its unique key or its row lock), then
//! reads what the first committed. No session state, no advisory lock held past the
//! transaction, no prepared statement of the store's own behind a pooler: it works through
//! PgBouncer in transaction mode, where the whole transaction runs on one server session.

use std::any::Any;

use super::*;
use crate::store::JournalTransaction;

/// The journal's transaction as a transactional tool sees it on a PostgreSQL journal
/// ([`crate::EffectCtx::transaction`]): a connection of the store's pool, inside the
/// transaction that records the call.
///
/// ```ignore
/// #[tool(effect = "irreversible", transactional, key = |a| format!("pay:{}", a.order))]
/// async fn pay(ctx: &EffectCtx, order: String, cents: i64) -> Result<String, ToolError> {
///     let tx = ctx.transaction::<PgTransaction>().map_err(|e| ToolError::definitive(e.to_string()))?;
///     tx.client()
///         .execute("INSERT INTO payments (order_id, cents) VALUES ($1, $2)", &[&order, &cents])
///         .await
///         .map_err(|e| ToolError::definitive(e.to_string()))?;
///     Ok(format!("paid {order}"))
/// }
/// ```
///
/// The application's tables are in the journal's database (any schema). Behind PgBouncer in
/// transaction mode, the transaction keeps one server session to the end, so the client's
/// prepared statements work within it; `query_typed` sends them unnamed, which any pooler
/// carries. Statements the tool sends after an error of its own fail (PostgreSQL aborts the
/// transaction): return the error.
pub struct PgTransaction {
    client: deadpool_postgres::Object,
}

impl std::fmt::Debug for PgTransaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgTransaction").finish_non_exhaustive()
    }
}

impl PgTransaction {
    /// The connection, inside the journal's transaction. Do not `COMMIT` or `ROLLBACK`: the
    /// engine does, with the record. Kept past the tool (a handle the tool stored), its
    /// statements would no longer be in the transaction: use it only while the tool runs.
    pub fn client(&self) -> &tokio_postgres::Client {
        &self.client
    }
}

/// An open transaction of a PostgreSQL journal.
struct PgTx {
    handle: Arc<PgTransaction>,
    store: PostgresStore,
    /// Committed or rolled back.
    ended: bool,
}

impl PostgresStore {
    /// A pooled connection with `BEGIN` done.
    pub(super) async fn begin(&self) -> Result<Box<dyn JournalTransaction>, StoreError> {
        let client = self.client().await?;
        match tokio::time::timeout(self.shared.options.statement_timeout, client.batch_execute("BEGIN")).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(pg(e)),
            Err(_) => return Err(self.abandon(client)),
        }
        Ok(Box::new(PgTx {
            handle: Arc::new(PgTransaction { client }),
            store: PostgresStore {
                shared: self.shared.clone(),
            },
            ended: false,
        }))
    }
}

#[async_trait]
impl JournalTransaction for PgTx {
    fn handle(&self) -> Arc<dyn Any + Send + Sync> {
        self.handle.clone()
    }

    /// The store's general path (read, transition, compare-and-set) on this transaction's
    /// connection; nothing is remembered for the holder's fast path (the rows are not
    /// committed yet).
    async fn apply(&mut self, key: &str, op: Op) -> Result<OpOutcome, StoreError> {
        let outcome = self.store.apply_read(&self.handle.client, key, &op, None).await;
        self.store.forget(key);
        outcome
    }

    async fn commit(mut self: Box<Self>) -> Result<(), StoreError> {
        self.ended = true;
        let store = &self.store;
        let client = &self.handle.client;
        match tokio::time::timeout(store.shared.options.statement_timeout, client.batch_execute("COMMIT")).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) if rolled_back(&e) => Err(StoreError::Backend(format!(
                "PostgreSQL rolled the transactional call back at its commit ({}): nothing of it was written",
                pg(e)
            ))),
            Ok(Err(e)) => Err(StoreError::Backend(format!(
                "PostgreSQL did not confirm the commit of a transactional call ({}): whether it committed is unknown until the record is read",
                pg(e)
            ))),
            Err(_) => Err(StoreError::Backend(format!(
                "PostgreSQL did not answer the commit of a transactional call within {:?} (PgOptions::statement_timeout): whether it committed is unknown until the record is read",
                store.shared.options.statement_timeout
            ))),
        }
    }

    async fn rollback(mut self: Box<Self>) {
        self.ended = true;
        let limit = self.store.shared.options.statement_timeout;
        let _ = tokio::time::timeout(limit, self.handle.client.batch_execute("ROLLBACK")).await;
    }
}

impl Drop for PgTx {
    /// Neither committed nor rolled back (the call's future was dropped): roll back on a task
    /// of its own before the connection goes back to the pool, and close it if that fails.
    fn drop(&mut self) {
        if self.ended {
            return;
        }
        let handle = self.handle.clone();
        let limit = self.store.shared.options.statement_timeout;
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let ok = matches!(
                    tokio::time::timeout(limit, handle.client.batch_execute("ROLLBACK")).await,
                    Ok(Ok(()))
                );
                if !ok && let Ok(tx) = Arc::try_unwrap(handle) {
                    drop(deadpool_postgres::Object::take(tx.client));
                }
            });
        } else if let Ok(tx) = Arc::try_unwrap(handle) {
            drop(deadpool_postgres::Object::take(tx.client));
        }
    }
}
