//! The trait a journal backend implements ([`Store`]): five operations it must implement, and
//! the provided ones a backend overrides for a fast path or a capability of its own. Wrapping a
//! store forwards every one of them: [`Arc`](std::sync::Arc) here, the crate's own wrappers
//! through [`super::layer::Layered`] (written once, so none can be forgotten).

use async_trait::async_trait;
use serde_json::Value;

use super::{Filter, Listing, Recorded};
use crate::call::error::StoreError;
use crate::decide::budget::{Spend, SpendOutcome};
use crate::decide::grant::Grant;
use crate::decide::record::{AuditEntry, EffectRecord, Millis, Op, OpOutcome};

/// A journal backend.
///
/// Implementations must make [`Store::apply`] atomic per key across every process sharing the
/// journal: read the record, run [`crate::decide::record::transition`], write the result, append the
/// op's audit entry, as one unit.
///
/// Durability, per class (see [the module docs](crate::store#durability-follows-the-class), and
/// [the journal's format](https://github.com/effect-tool/effect-tool/blob/main/docs/journal-format.md#what-each-store-promises-per-class)): every
/// operation is committed before it is answered; one for which [`Op::needs_flush`] is `true`
/// (a compensable or irreversible claim, every record, release, in-doubt mark and person's
/// decision) must also be on disk, surviving a power loss. The claim of an idempotent tool may
/// be answered before it is on disk only if a later flushed write cannot survive without it
/// (one log written in commit order, as SQLite's and PostgreSQL's WALs are); a store that
/// cannot promise that flushes it too, which is always correct.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// The record under `key`.
    async fn get(&self, key: &str) -> Result<Option<EffectRecord>, StoreError>;

    /// The record under `key`, shared: a read-only lookup that never takes a write lock.
    /// Backends answer it from a read connection; the default calls [`Store::get`].
    async fn lookup(&self, key: &str) -> Result<Option<std::sync::Arc<EffectRecord>>, StoreError> {
        Ok(self.get(key).await?.map(std::sync::Arc::new))
    }

    /// What a replay needs of the record under `key` (see [`Recorded`]): the engine's first
    /// look at a key. The default answers from [`Store::lookup`] without copying; a backend
    /// that decodes rows may read only these few columns instead of the whole record.
    async fn lookup_recorded(&self, key: &str) -> Result<Option<Recorded>, StoreError> {
        Ok(self.lookup(key).await?.map(Recorded::from))
    }

    /// Whether a claim answers a recorded key as cheaply as [`Store::lookup`] (one round trip
    /// that also returns the recorded result). The engine then claims at once instead of
    /// looking up first; backends whose claims take a write lock keep the default, `false`.
    fn claim_answers_replays(&self) -> bool {
        false
    }

    /// Apply an operation atomically (see [`crate::decide::record::transition`]). Refusals come back
    /// as [`StoreError::Rejected`].
    async fn apply(&self, key: &str, op: Op) -> Result<OpOutcome, StoreError>;

    /// Apply `op` (a [`Op::Claim`]) to a key the caller has just looked up
    /// ([`Store::lookup_recorded`]) and found no record under: most likely a new key, so a
    /// backend whose claims first read the record to answer without writing (a replay, a live
    /// claim) may go straight to its write path. Exactly as atomic as [`Store::apply`], which
    /// the default calls: the hint only skips a read, never a check.
    async fn claim_unseen(&self, key: &str, op: Op) -> Result<OpOutcome, StoreError> {
        self.apply(key, op).await
    }

    /// The records that pass `filter`, newest first. A row the backend cannot read (a newer
    /// record version, a corrupt row) is skipped and logged, never a failure of the whole
    /// list; [`Store::list_report`] also says which.
    async fn list(&self, filter: &Filter) -> Result<Vec<EffectRecord>, StoreError>;

    /// The same as [`Store::list`], with the rows skipped ([`Listing::skipped`]). The default
    /// (for backends that hold decoded records, which they can always read) skips nothing.
    async fn list_report(&self, filter: &Filter) -> Result<Listing, StoreError> {
        Ok(Listing {
            records: self.list(filter).await?,
            skipped: Vec::new(),
        })
    }

    /// Drop records whose ttl has passed at `now`, except those a person still needs (in doubt,
    /// awaiting approval) and claims, live or stale (see [`collectable`](super::collectable)). Returns how many
    /// were dropped.
    async fn gc(&self, now: Millis) -> Result<u64, StoreError>;

    /// The audit trail of `key` (or of every key), oldest first.
    async fn audit(&self, key: Option<&str>) -> Result<Vec<AuditEntry>, StoreError>;

    /// Append `entry` to the audit trail on its own, with no record write: for the engine's
    /// decisions that change no record, such as an attempt that lost its claim
    /// ([`crate::decide::record::claim_lost_entry`]). The built-in stores append it; the default keeps
    /// nothing, for a backend without an audit trail of its own.
    async fn append_audit(&self, entry: AuditEntry) -> Result<(), StoreError> {
        let _ = entry;
        Ok(())
    }

    /// The backend's clock, in milliseconds since the Unix epoch. Leases are computed on it.
    fn now(&self) -> Millis {
        crate::decide::record::now_millis()
    }

    /// The secret this journal signs markers with (see [`crate::value::marker`]'s "Signed markers"):
    /// created once (random, 32 bytes) and kept, so that every process on the journal shares
    /// it and it survives restarts. The engine loads it once, before its first journaled call.
    ///
    /// The built-in stores keep one (memory: per store; SQLite and PostgreSQL: a row of their
    /// meta table, created on first use). The default, `None`, keeps none: markers are then
    /// plain, which anyone can forge, unless the engine is given a secret
    /// ([`crate::Engine::with_marker_secret`]).
    async fn marker_secret(&self) -> Result<Option<crate::value::marker::MarkerSecret>, StoreError> {
        Ok(None)
    }

    /// Keep `schema`, the JSON Schema of `tool`'s output ([`crate::Tool::output_schema`]), in
    /// the journal, replacing the one kept before: the engine writes it once per tool and
    /// process, before the tool's first journaled call, so that a person who records an
    /// output by hand is checked against it ([`StoreExt::resolve`](super::StoreExt::resolve)). One small row per tool,
    /// not per record.
    ///
    /// The built-in stores keep it (memory: per store; SQLite and PostgreSQL: a row of their
    /// meta table, `output_schema:<tool>`). The default keeps nothing: outputs recorded by hand
    /// are then not checked.
    async fn put_output_schema(&self, tool: &str, schema: &Value) -> Result<(), StoreError> {
        let _ = (tool, schema);
        Ok(())
    }

    /// The JSON Schema of `tool`'s output kept by [`Store::put_output_schema`], if any. The
    /// default keeps none.
    async fn output_schema(&self, tool: &str) -> Result<Option<Value>, StoreError> {
        let _ = tool;
        Ok(None)
    }

    /// Keep `schema`, the JSON Schema of `tool`'s arguments as exported to models, in the
    /// journal: the engine writes it beside the output schema for a tool that waits for
    /// approval, so that a person who edits a call's arguments before approving it is checked
    /// against it ([`StoreExt::approve_edited`](super::StoreExt::approve_edited)). The default
    /// keeps it as the output schema of the name [`input_schema_name`] gives (every built-in
    /// store: a row `output_schema:input:<tool>` of its meta table).
    async fn put_input_schema(&self, tool: &str, schema: &Value) -> Result<(), StoreError> {
        self.put_output_schema(&input_schema_name(tool), schema).await
    }

    /// The JSON Schema of `tool`'s arguments kept by [`Store::put_input_schema`], if any.
    async fn input_schema(&self, tool: &str) -> Result<Option<Value>, StoreError> {
        self.output_schema(&input_schema_name(tool)).await
    }

    /// Check and spend a run's budgets, atomically across every process sharing the journal:
    /// read what the run spent of each budget of `spend` and whether its key was charged,
    /// run [`crate::decide::budget::decide`], and write the charges it returns, as one unit
    /// (all or none). A key already charged to a budget is not charged again.
    ///
    /// The built-in stores keep the charges (memory: per store; SQLite: `effect_budget_spends`;
    /// PostgreSQL: `budget_spends`). The default keeps none and refuses with
    /// [`StoreError::Backend`]: a run with budgets on such a store fails its calls rather than
    /// running them unbudgeted.
    async fn spend(&self, spend: &Spend) -> Result<SpendOutcome, StoreError> {
        let _ = spend;
        Err(StoreError::Backend(
            "this journal keeps no budgets (its store does not implement `Store::spend`): nothing ran; run without budgets, or on a store that keeps them (memory, SQLite, PostgreSQL)"
                .to_owned(),
        ))
    }

    /// Keep `grant`, a new standing approval ([`crate::decide::grant`]), with its audit entry
    /// ([`crate::decide::grant::created_entry`]) in the same atomic section. Refused when a
    /// grant of its id exists. The caller checked it ([`GrantsExt::add_grant`](super::GrantsExt::add_grant)).
    ///
    /// The built-in stores keep grants (memory: per store; SQLite: `effect_grants`; PostgreSQL:
    /// `grants`). The default keeps none and refuses, saying which stores do.
    async fn put_grant(&self, grant: &Grant) -> Result<(), StoreError> {
        let _ = grant;
        Err(no_grants())
    }

    /// The standing approvals, of `tool` only if given, revoked and expired ones included,
    /// oldest first. The default (a store that keeps none) has none.
    async fn grants(&self, tool: Option<&str>) -> Result<Vec<Grant>, StoreError> {
        let _ = tool;
        Ok(Vec::new())
    }

    /// The grant `id`, if the journal has it: read after every revocation committed before it
    /// was asked (the engine asks again after a granted claim, before the tool runs). The
    /// default looks through [`Store::grants`].
    async fn grant(&self, id: &str) -> Result<Option<Grant>, StoreError> {
        Ok(self.grants(None).await?.into_iter().find(|g| g.id == id))
    }

    /// Revoke the grant `id` as `by`, at the journal's clock, with its audit entry
    /// ([`crate::decide::grant::revoke`]) in the same atomic section; a grant revoked already
    /// stays as it was. The grant as it is now, or `None` when the journal has no grant `id`.
    /// The default refuses, as [`Store::put_grant`] does.
    async fn revoke_grant(&self, id: &str, by: &str) -> Result<Option<Grant>, StoreError> {
        let _ = (id, by);
        Err(no_grants())
    }

    /// Completes when a person's decision on `key` (approve, deny, resolve, amend) was made,
    /// so that a task waiting for it
    /// ([`RunHandle::wait_for_approval`](crate::RunHandle::wait_for_approval)) reads the record
    /// again at once. A hint, not a guarantee (it may also complete for no decision): waiters
    /// poll as well. The default never completes (waiters only poll). [`MemoryStore`](super::MemoryStore) wakes
    /// for decisions made through the same store object; the PostgreSQL store for decisions
    /// made through any store on the journal, in any process (`LISTEN`/`NOTIFY`; not behind a
    /// pooler in transaction mode). SQLite's does not implement it: decisions of other processes
    /// are found by polling.
    async fn changed(&self, key: &str) {
        let _ = key;
        std::future::pending::<()>().await
    }

    /// Open a transaction of the journal's own database for one call of a transactional tool
    /// on `key` ([`crate::Tool::TRANSACTIONAL`], see [`super::transaction`]), holding whatever
    /// lock makes a second call of the same key wait for its commit. `None`: this store has no
    /// transactions to give (the default, and [`MemoryStore`](super::MemoryStore)'s); the
    /// engine then fails the call before anything runs, saying which store to use.
    async fn begin_transaction(&self, key: &str) -> Result<Option<Box<dyn super::JournalTransaction>>, StoreError> {
        let _ = key;
        Ok(None)
    }

    /// The kind of store, for spans and metrics (`db.system.name`, the `store` label):
    /// `memory`, `sqlite`, `postgresql`, or `custom` (the default) for other stores.
    fn backend_name(&self) -> &'static str {
        "custom"
    }
}

/// What an `async fn` of [`Store`] returns once `async_trait` has rewritten it.
type BoxFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

#[async_trait]
impl<S: Store + ?Sized> Store for std::sync::Arc<S> {
    async fn get(&self, key: &str) -> Result<Option<EffectRecord>, StoreError> {
        (**self).get(key).await
    }
    async fn lookup(&self, key: &str) -> Result<Option<std::sync::Arc<EffectRecord>>, StoreError> {
        (**self).lookup(key).await
    }
    // The engine's path (its store is an `Arc<dyn Store>`): these three hand on the inner
    // store's future instead of boxing it in one more.
    fn lookup_recorded<'life0, 'life1, 'async_trait>(
        &'life0 self,
        key: &'life1 str,
    ) -> BoxFuture<'async_trait, Result<Option<Recorded>, StoreError>>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        Self: 'async_trait,
    {
        (**self).lookup_recorded(key)
    }
    fn apply<'life0, 'life1, 'async_trait>(
        &'life0 self,
        key: &'life1 str,
        op: Op,
    ) -> BoxFuture<'async_trait, Result<OpOutcome, StoreError>>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        Self: 'async_trait,
    {
        (**self).apply(key, op)
    }
    fn claim_unseen<'life0, 'life1, 'async_trait>(
        &'life0 self,
        key: &'life1 str,
        op: Op,
    ) -> BoxFuture<'async_trait, Result<OpOutcome, StoreError>>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        Self: 'async_trait,
    {
        (**self).claim_unseen(key, op)
    }
    async fn list(&self, filter: &Filter) -> Result<Vec<EffectRecord>, StoreError> {
        (**self).list(filter).await
    }
    async fn list_report(&self, filter: &Filter) -> Result<Listing, StoreError> {
        (**self).list_report(filter).await
    }
    async fn gc(&self, now: Millis) -> Result<u64, StoreError> {
        (**self).gc(now).await
    }
    async fn audit(&self, key: Option<&str>) -> Result<Vec<AuditEntry>, StoreError> {
        (**self).audit(key).await
    }
    async fn append_audit(&self, entry: AuditEntry) -> Result<(), StoreError> {
        (**self).append_audit(entry).await
    }
    fn now(&self) -> Millis {
        (**self).now()
    }
    fn claim_answers_replays(&self) -> bool {
        (**self).claim_answers_replays()
    }
    async fn marker_secret(&self) -> Result<Option<crate::value::marker::MarkerSecret>, StoreError> {
        (**self).marker_secret().await
    }
    fn backend_name(&self) -> &'static str {
        (**self).backend_name()
    }
    async fn put_output_schema(&self, tool: &str, schema: &Value) -> Result<(), StoreError> {
        (**self).put_output_schema(tool, schema).await
    }
    async fn output_schema(&self, tool: &str) -> Result<Option<Value>, StoreError> {
        (**self).output_schema(tool).await
    }
    async fn changed(&self, key: &str) {
        (**self).changed(key).await
    }
    async fn begin_transaction(&self, key: &str) -> Result<Option<Box<dyn super::JournalTransaction>>, StoreError> {
        (**self).begin_transaction(key).await
    }
    async fn spend(&self, spend: &Spend) -> Result<SpendOutcome, StoreError> {
        (**self).spend(spend).await
    }
    async fn put_grant(&self, grant: &Grant) -> Result<(), StoreError> {
        (**self).put_grant(grant).await
    }
    async fn grants(&self, tool: Option<&str>) -> Result<Vec<Grant>, StoreError> {
        (**self).grants(tool).await
    }
    async fn grant(&self, id: &str) -> Result<Option<Grant>, StoreError> {
        (**self).grant(id).await
    }
    async fn revoke_grant(&self, id: &str, by: &str) -> Result<Option<Grant>, StoreError> {
        (**self).revoke_grant(id, by).await
    }
}

/// A journal's clock: the system's ([`crate::decide::record::now_millis`]) unless a simulation gave
/// it one (`MemoryStore::with_clock`, `SqliteStore::open_with_clock`, feature `testing`).
#[derive(Clone, Default)]
pub(crate) struct StoreClock(Option<std::sync::Arc<dyn Fn() -> Millis + Send + Sync>>);

impl StoreClock {
    /// A clock read from `clock`.
    #[cfg(feature = "testing")]
    pub(crate) fn new(clock: impl Fn() -> Millis + Send + Sync + 'static) -> Self {
        StoreClock(Some(std::sync::Arc::new(clock)))
    }

    /// The time, in milliseconds since the Unix epoch.
    pub(crate) fn now(&self) -> Millis {
        match &self.0 {
            Some(clock) => clock(),
            None => crate::decide::record::now_millis(),
        }
    }
}

impl std::fmt::Debug for StoreClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "StoreClock(set)"
        } else {
            "StoreClock(system)"
        })
    }
}

/// The name under which [`Store::put_input_schema`] keeps a tool's argument schema by default:
/// `input:<tool>` (a declared tool's name holds no `:`).
pub fn input_schema_name(tool: &str) -> String {
    format!("input:{tool}")
}

/// The refusal of a store that keeps no standing approvals.
fn no_grants() -> StoreError {
    StoreError::Backend(
        "this journal keeps no standing approvals (its store does not implement `Store::put_grant`): nothing was granted or revoked; use a store that keeps them (memory, SQLite, PostgreSQL)"
            .to_owned(),
    )
}
