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

use async_trait::async_trait;
use serde_json::Value;

use crate::call::error::StoreError;
use crate::decide::record::{AuditEntry, EffectRecord, Intent, Millis, Op, OpOutcome, RecordState, Verdict};

pub mod approval;
pub mod markers;
pub mod memory;
#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod row;
#[cfg(feature = "sqlite")]
pub mod sqlite;

pub use memory::MemoryStore;

/// Which records to list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    /// Only this run.
    pub run_id: Option<String>,
    /// Only this tool.
    pub tool: Option<String>,
    /// Only these states (empty: all).
    pub states: Vec<RecordState>,
    /// At most this many, newest first (`None`: all).
    pub limit: Option<usize>,
    /// Only records last updated at or after this time (ms since the Unix epoch, the
    /// journal's clock).
    pub updated_since: Option<Millis>,
    /// Only records last updated before this time.
    pub updated_before: Option<Millis>,
    /// Only records after this place in the listing's order (newest first, then by key): the
    /// next page after the one that ended there ([`Filter::next_page`]). A record updated while
    /// the pages are read moves to the front, before the pages already read: start again from
    /// the first page to see it.
    pub after: Option<Cursor>,
}

/// A place in a listing (records newest first by `updated_at`, then by key): the record a
/// page ended with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    /// The record's `updated_at`.
    pub updated_at: Millis,
    /// The record's key.
    pub key: String,
}

impl Cursor {
    /// The place of `rec`.
    pub fn of(rec: &EffectRecord) -> Cursor {
        Cursor {
            updated_at: rec.updated_at,
            key: rec.key.clone(),
        }
    }

    /// Whether `rec` comes after this place in a listing's order.
    pub fn precedes(&self, rec: &EffectRecord) -> bool {
        rec.updated_at < self.updated_at || (rec.updated_at == self.updated_at && rec.key > self.key)
    }
}

impl Filter {
    /// Every record.
    pub fn all() -> Self {
        Filter::default()
    }

    /// The same filter for the next page, after `last`, the last record of this one.
    ///
    /// ```
    /// # async fn demo(store: &dyn effect_tool_core::Store) -> Result<(), effect_tool_core::StoreError> {
    /// use effect_tool_core::store::Filter;
    ///
    /// let mut filter = Filter { limit: Some(100), ..Filter::all() };
    /// loop {
    ///     let page = store.list(&filter).await?;
    ///     // ... show the page ...
    ///     match page.last() {
    ///         Some(last) if page.len() == 100 => filter = filter.next_page(last),
    ///         _ => break,
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub fn next_page(self, last: &EffectRecord) -> Self {
        Filter {
            after: Some(Cursor::of(last)),
            ..self
        }
    }

    /// Whether `rec` passes the filter (used by backends that filter in memory).
    pub fn matches(&self, rec: &EffectRecord) -> bool {
        self.run_id.as_ref().is_none_or(|r| *r == rec.run_id)
            && self.tool.as_ref().is_none_or(|t| *t == rec.tool)
            && (self.states.is_empty() || self.states.contains(&rec.state))
            && self.updated_since.is_none_or(|t| rec.updated_at >= t)
            && self.updated_before.is_none_or(|t| rec.updated_at < t)
            && self.after.as_ref().is_none_or(|c| c.precedes(rec))
    }
}

/// What [`Store::list_report`] found: the records that pass the filter, and the rows it could
/// not read (a record of a newer version, a corrupt row), which it skipped instead of failing
/// the whole list.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Listing {
    /// The records, newest first.
    pub records: Vec<EffectRecord>,
    /// The rows skipped, in the order met.
    pub skipped: Vec<Skipped>,
}

/// A row a list could not read, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Skipped {
    /// The row's key, as stored (empty if even the key could not be read).
    pub key: String,
    /// Why it could not be read (its version is newer, a column is corrupt).
    pub reason: String,
}

impl Listing {
    /// The keys of the rows skipped.
    pub fn skipped_keys(&self) -> Vec<&str> {
        self.skipped.iter().map(|s| s.key.as_str()).collect()
    }
}

/// The prefix of the meta rows (SQLite's `effect_tool_meta`, PostgreSQL's `settings`) that keep
/// each tool's output schema ([`Store::put_output_schema`]), followed by the tool's name.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) const OUTPUT_SCHEMA_ROW: &str = "output_schema:";

/// A skipped row for `error`, under `key` when the error does not name one.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn skipped(error: &StoreError, key: Option<&str>) -> Skipped {
    let key = error.key().or(key).unwrap_or_default().to_owned();
    tracing::warn!(key = %key, error = %error, "list skipped a record it cannot read");
    Skipped {
        key,
        reason: error.to_string(),
    }
}

/// A journal backend.
///
/// Implementations must make [`Store::apply`] atomic per key across every process sharing the
/// journal: read the record, run [`crate::decide::record::transition`], write the result, append the
/// op's audit entry, as one unit.
///
/// Durability, per class (see [the module docs](crate::store#durability-follows-the-class)): every
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
    /// awaiting approval) and claims, live or stale (see [`collectable`]). Returns how many
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
    /// output by hand is checked against it ([`StoreExt::resolve`]). One small row per tool,
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

    /// Completes when a person's decision on `key` (approve, deny, resolve, amend) was made,
    /// so that a task waiting for it
    /// ([`RunHandle::wait_for_approval`](crate::RunHandle::wait_for_approval)) reads the record
    /// again at once. A hint, not a guarantee (it may also complete for no decision): waiters
    /// poll as well. The default never completes (waiters only poll). [`MemoryStore`] wakes
    /// for decisions made through the same store object; the PostgreSQL store for decisions
    /// made through any store on the journal, in any process (`LISTEN`/`NOTIFY`; not behind a
    /// pooler in transaction mode). SQLite's does not implement it: decisions of other processes
    /// are found by polling.
    async fn changed(&self, key: &str) {
        let _ = key;
        std::future::pending::<()>().await
    }

    /// The kind of store, for spans and metrics (`db.system.name`, the `store` label):
    /// `memory`, `sqlite`, `postgresql`, or `custom` (the default) for other stores.
    fn backend_name(&self) -> &'static str {
        "custom"
    }
}

/// The named operations of the journal, built on [`Store::apply`].
#[async_trait]
pub trait StoreExt: Store {
    /// Claim `key` for `intent` with a lease.
    async fn claim(
        &self,
        key: &str,
        intent: Intent,
        lease_ms: u64,
        takeover_in_doubt: bool,
    ) -> Result<OpOutcome, StoreError> {
        self.apply(
            key,
            Op::Claim {
                intent,
                lease_ms,
                takeover_in_doubt,
            },
        )
        .await
    }
    /// Extend the lease held by `attempt`.
    async fn renew(&self, key: &str, attempt: u32, lease_ms: u64) -> Result<EffectRecord, StoreError> {
        done(self.apply(key, Op::Renew { attempt, lease_ms }).await?)
    }
    /// Record the output of the claim held by `attempt` (fenced).
    async fn complete(&self, key: &str, attempt: u32, output: Value) -> Result<EffectRecord, StoreError> {
        done(self.apply(key, Op::Complete { attempt, output }).await?)
    }
    /// Release the claim held by `attempt`: nothing happened.
    async fn release(&self, key: &str, attempt: u32, reason: Option<String>) -> Result<EffectRecord, StoreError> {
        done(self.apply(key, Op::Release { attempt, reason }).await?)
    }
    /// Mark the claim held by `attempt` in doubt.
    async fn mark_in_doubt(&self, key: &str, attempt: u32, reason: String) -> Result<EffectRecord, StoreError> {
        done(self.apply(key, Op::MarkInDoubt { attempt, reason }).await?)
    }
    /// A person's verdict on a record in doubt.
    ///
    /// An output given as applied is checked first against the tool's output schema in the
    /// journal ([`Store::output_schema`]): one that does not match is refused with
    /// [`Rejected::OutputMismatch`](crate::decide::record::Rejected::OutputMismatch), which shows the
    /// schema, and nothing is recorded.
    async fn resolve(&self, key: &str, by: &str, verdict: Verdict) -> Result<EffectRecord, StoreError> {
        check_verdict(self, key, &verdict).await?;
        done(
            self.apply(
                key,
                Op::Resolve {
                    by: by.to_owned(),
                    verdict,
                },
            )
            .await?,
        )
    }
    /// A person corrects their resolution of `key` (see [`Op::Amend`]): refused unless the
    /// record's current state was set by a person's resolution. An output is checked as
    /// [`StoreExt::resolve`] checks it.
    async fn amend(&self, key: &str, by: &str, verdict: Verdict) -> Result<EffectRecord, StoreError> {
        check_verdict(self, key, &verdict).await?;
        done(
            self.apply(
                key,
                Op::Amend {
                    by: by.to_owned(),
                    verdict,
                },
            )
            .await?,
        )
    }
    /// A person approves a call awaiting approval, as `role`: the input they were shown, named
    /// by its `fingerprint` ([`EffectRecord::fingerprint`] of the record they looked at).
    ///
    /// Refused with [`Rejected::InputChanged`](crate::decide::record::Rejected::InputChanged) when the
    /// input parked under `key` now is another one (the model called again with other
    /// arguments after the person looked): nothing is approved, and the error shows the new
    /// input. There is deliberately no way to approve "whatever is parked": code that approves
    /// reads the record it decides on (`get`) and passes that record's fingerprint.
    async fn approve(&self, key: &str, by: &str, role: &str, fingerprint: &str) -> Result<EffectRecord, StoreError> {
        done(
            self.apply(
                key,
                Op::Approve {
                    by: by.to_owned(),
                    role: role.to_owned(),
                    fingerprint: fingerprint.to_owned(),
                },
            )
            .await?,
        )
    }
    /// A person denies a call awaiting approval.
    async fn deny(&self, key: &str, by: &str, reason: Option<String>) -> Result<EffectRecord, StoreError> {
        done(
            self.apply(
                key,
                Op::Deny {
                    by: by.to_owned(),
                    reason,
                },
            )
            .await?,
        )
    }
    /// Mark a completed compensable effect as undone.
    async fn mark_compensated(&self, key: &str, by: &str) -> Result<EffectRecord, StoreError> {
        done(self.apply(key, Op::MarkCompensated { by: by.to_owned() }).await?)
    }
}

impl<S: Store + ?Sized> StoreExt for S {}

/// Refuse a [`Verdict::Applied`] whose output does not match the output schema the journal
/// keeps for the record's tool. A verdict on a key with no record is left to the store to
/// refuse (`NotFound`).
async fn check_verdict<S: Store + ?Sized>(store: &S, key: &str, verdict: &Verdict) -> Result<(), StoreError> {
    let Verdict::Applied { output } = verdict else {
        return Ok(());
    };
    let Some(rec) = store.get(key).await? else {
        return Ok(());
    };
    match store.output_schema(&rec.tool).await? {
        Some(schema) => check_output(key, &rec.tool, &schema, output).map_err(StoreError::from),
        None => Ok(()),
    }
}

/// The most problems an [`Rejected::OutputMismatch`](crate::decide::record::Rejected::OutputMismatch)
/// lists.
const MAX_OUTPUT_PROBLEMS: usize = 5;

/// Whether `output` has the shape `schema` (the JSON Schema of `tool`'s output) describes:
/// `Err` lists what does not match, with the schema. A schema the validator cannot compile
/// (not written by effect-tool) checks nothing, and is logged.
pub fn check_output(
    key: &str,
    tool: &str,
    schema: &Value,
    output: &Value,
) -> Result<(), crate::decide::record::Rejected> {
    let validator = match jsonschema::validator_for(schema) {
        Ok(v) => v,
        Err(e) => {
            tracing::warn!(tool, error = %e, "the journal's output schema of this tool does not compile; the output recorded by hand is not checked");
            return Ok(());
        }
    };
    let problems: Vec<String> = validator
        .iter_errors(output)
        .take(MAX_OUTPUT_PROBLEMS)
        .map(|e| {
            let at = e.instance_path().as_str();
            let at = if at.is_empty() { "the output" } else { at };
            format!("`{at}`: {e}")
        })
        .collect();
    if problems.is_empty() {
        Ok(())
    } else {
        Err(crate::decide::record::Rejected::OutputMismatch(Box::new(
            crate::decide::record::OutputMismatch {
                key: key.to_owned(),
                tool: tool.to_owned(),
                problems,
                schema: schema.clone(),
            },
        )))
    }
}

fn done(outcome: OpOutcome) -> Result<EffectRecord, StoreError> {
    match outcome {
        OpOutcome::Done(rec) => Ok(std::sync::Arc::unwrap_or_clone(rec)),
        other => Err(StoreError::Backend(format!("unexpected outcome {other:?}"))),
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

/// The part of a record a replay reads: its state and expiry (is there a live result?), its
/// tool, the input fingerprint and tool-call id it was recorded under (is this the same call?),
/// and its output. Either a whole record, shared, or just these fields, as a backend read them.
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded(RecordedRepr);

#[derive(Debug, Clone, PartialEq)]
enum RecordedRepr {
    Shared(std::sync::Arc<EffectRecord>),
    // Boxed: `Recorded` stays two words, so the engine's replay path moves no more than an `Arc`.
    Parts(Box<Parts>),
}

#[derive(Debug, Clone, PartialEq)]
struct Parts {
    state: RecordState,
    tool: Option<String>,
    fingerprint: String,
    call_id: Option<String>,
    call_ids: Vec<String>,
    output: Option<Value>,
    expires_at: Option<Millis>,
}

impl Recorded {
    /// The fields a replay reads, from a backend that read only those (its record version
    /// already checked).
    pub fn new(
        state: RecordState,
        fingerprint: String,
        call_id: Option<String>,
        output: Option<Value>,
        expires_at: Option<Millis>,
    ) -> Self {
        Recorded(RecordedRepr::Parts(Box::new(Parts {
            state,
            tool: None,
            fingerprint,
            call_id,
            call_ids: Vec::new(),
            output,
            expires_at,
        })))
    }

    /// The same, with the other tool-call ids that received the result
    /// ([`EffectRecord::call_ids`]).
    pub fn with_call_ids(mut self, call_ids: Vec<String>) -> Self {
        match &mut self.0 {
            RecordedRepr::Parts(p) => p.call_ids = call_ids,
            RecordedRepr::Shared(rec) => std::sync::Arc::make_mut(rec).call_ids = call_ids,
        }
        self
    }

    /// The same, with the tool whose record it is ([`EffectRecord::tool`]). A backend should
    /// give it: without it, the engine cannot tell a record of another tool under the same key
    /// from its own, and claims instead of replaying (the claim then tells them apart).
    pub fn with_tool(mut self, tool: String) -> Self {
        match &mut self.0 {
            RecordedRepr::Parts(p) => p.tool = Some(tool),
            RecordedRepr::Shared(rec) => std::sync::Arc::make_mut(rec).tool = tool,
        }
        self
    }

    /// The tool whose record it is, if the backend read it ([`Recorded::with_tool`]).
    pub fn tool(&self) -> Option<&str> {
        match &self.0 {
            RecordedRepr::Shared(rec) => Some(&rec.tool),
            RecordedRepr::Parts(p) => p.tool.as_deref(),
        }
    }

    /// The whole record, when the backend answered with it (not only a replay's fields).
    pub(crate) fn record(&self) -> Option<&EffectRecord> {
        match &self.0 {
            RecordedRepr::Shared(rec) => Some(rec),
            RecordedRepr::Parts(_) => None,
        }
    }

    /// Whether the tool call `call_id` received the recorded result: the call that recorded it,
    /// or one that shared it or was taken over ([`EffectRecord::received_by`]).
    pub fn received_by(&self, call_id: &str) -> bool {
        match &self.0 {
            RecordedRepr::Shared(rec) => rec.received_by(call_id),
            RecordedRepr::Parts(p) => p.call_id.as_deref() == Some(call_id) || p.call_ids.iter().any(|c| c == call_id),
        }
    }

    /// The record's state.
    pub fn state(&self) -> RecordState {
        match &self.0 {
            RecordedRepr::Shared(rec) => rec.state,
            RecordedRepr::Parts(p) => p.state,
        }
    }

    /// The fingerprint of the input it was recorded under.
    pub fn fingerprint(&self) -> &str {
        match &self.0 {
            RecordedRepr::Shared(rec) => &rec.fingerprint,
            RecordedRepr::Parts(p) => &p.fingerprint,
        }
    }

    /// The tool-call id of the call that recorded it, if it had one.
    pub fn call_id(&self) -> Option<&str> {
        match &self.0 {
            RecordedRepr::Shared(rec) => rec.call_id.as_deref(),
            RecordedRepr::Parts(p) => p.call_id.as_deref(),
        }
    }

    /// The recorded output (JSON), if any.
    pub fn output(&self) -> Option<&Value> {
        match &self.0 {
            RecordedRepr::Shared(rec) => rec.output.as_ref(),
            RecordedRepr::Parts(p) => p.output.as_ref(),
        }
    }

    /// When the key expires (ms since the Unix epoch), if it has a ttl.
    pub fn expires_at(&self) -> Option<Millis> {
        match &self.0 {
            RecordedRepr::Shared(rec) => rec.expires_at,
            RecordedRepr::Parts(p) => p.expires_at,
        }
    }

    /// Whether its ttl has passed at `now`.
    pub fn is_expired(&self, now: Millis) -> bool {
        self.expires_at().is_some_and(|e| e <= now)
    }
}

impl From<std::sync::Arc<EffectRecord>> for Recorded {
    fn from(rec: std::sync::Arc<EffectRecord>) -> Self {
        Recorded(RecordedRepr::Shared(rec))
    }
}

impl From<EffectRecord> for Recorded {
    fn from(rec: EffectRecord) -> Self {
        Recorded::new(rec.state, rec.fingerprint, rec.call_id, rec.output, rec.expires_at)
            .with_call_ids(rec.call_ids)
            .with_tool(rec.tool)
    }
}

/// How many records the next chunk of a chunked [`Store::gc`] deletes (the SQLite and
/// PostgreSQL stores'). Every chunk holds locks other writes wait for until it commits, so its
/// size follows how long the last one took: over `target`, the next is half as large; under a
/// quarter of it, twice as large; always within `min..=max`. Whatever the journal's size and
/// the machine's speed, a write then waits for about `target` at a time, not for a chunk sized
/// for another machine.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
#[derive(Debug, Clone, Copy)]
pub(crate) struct GcPace {
    size: u64,
    min: u64,
    max: u64,
    target: std::time::Duration,
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
impl GcPace {
    /// Start at `size` records, and keep within `min..=max`.
    pub(crate) const fn new(size: u64, min: u64, max: u64, target: std::time::Duration) -> Self {
        GcPace { size, min, max, target }
    }

    /// The next chunk's size.
    pub(crate) fn size(&self) -> u64 {
        self.size
    }

    /// The last chunk took `took`: size the next.
    pub(crate) fn after(&mut self, took: std::time::Duration) {
        if took > self.target {
            self.size = (self.size / 2).max(self.min);
        } else if took < self.target / 4 {
            self.size = self.size.saturating_mul(2).min(self.max);
        }
    }
}

/// Whether garbage collection may drop `rec` at `now`: its ttl has passed, no person needs it,
/// and it is not a claim. A stale claim is kept too: it is the only evidence of a crash between
/// an effect and its record, and dropping it would let the next call of an irreversible tool run
/// again silently (and reuse the dead holder's fencing token) instead of reconciling.
pub fn collectable(rec: &EffectRecord, now: Millis) -> bool {
    rec.is_expired(now) && !rec.state.needs_person() && rec.state != RecordState::Claimed
}

#[cfg(all(test, any(feature = "sqlite", feature = "postgres")))]
mod tests {
    use super::GcPace;
    use std::time::Duration;

    #[test]
    fn a_gc_chunk_over_its_target_halves_the_next_and_one_well_under_doubles_it_within_bounds() {
        let ms = Duration::from_millis;
        let mut pace = GcPace::new(256, 16, 1_024, ms(100));
        pace.after(ms(101));
        assert_eq!(pace.size(), 128, "over the target: half");
        pace.after(ms(100));
        assert_eq!(pace.size(), 128, "at the target: the same");
        pace.after(ms(25));
        assert_eq!(pace.size(), 128, "a quarter of the target: the same");
        pace.after(ms(24));
        assert_eq!(pace.size(), 256, "under a quarter: twice");
        for _ in 0..10 {
            pace.after(ms(1));
        }
        assert_eq!(pace.size(), 1_024, "never over the most");
        for _ in 0..10 {
            pace.after(ms(1_000));
        }
        assert_eq!(pace.size(), 16, "never under the least");
    }
}
