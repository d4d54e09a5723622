//! The SQLite journal: the embedded default. A file path is all it takes.
//!
//! ```no_run
//! # fn main() -> Result<(), effect_tool_core::StoreError> {
//! use effect_tool_core::Engine;
//! use effect_tool_core::store::sqlite::SqliteStore;
//!
//! let engine = Engine::new(SqliteStore::open("effects.db")?);
//! # Ok(()) }
//! ```
//!
//! # Guarantees
//!
//! - **Safe across processes on one machine.** Every write runs under `BEGIN IMMEDIATE`
//!   (SQLite's write lock): read the record, run [`crate::decide::record::transition`], write it back,
//!   append the audit entry, commit. A database locked by another process is waited on for
//!   [`SqliteOptions::busy_timeout`], then reported as an error that says so. A process that
//!   is stopped (SIGSTOP, a debugger, a frozen container) inside one of these transactions
//!   keeps the lock until it resumes: every other process's write then fails this way, with
//!   nothing written, and no call runs twice. A process stopped between transactions holds
//!   nothing (WAL readers never block a writer), and its lease lapses as usual.
//! - **Durable, as the class asks.** WAL journal, `synchronous = FULL` by default: a call that
//!   returned has its record on disk, even if the machine loses power right after. Per class,
//!   under `FULL`:
//!
//!   | write | committed | on disk |
//!   |---|---|---|
//!   | claim of a compensable or irreversible tool | before the tool runs | before the tool runs (fsync of the WAL) |
//!   | claim of an idempotent tool | before the tool runs | with the next fsync of the WAL: its record's |
//!   | record (output, release, in doubt), a person's decision | before the call returns | before the call returns |
//!
//!   An idempotent claim is committed in a transaction of its own (or in a group commit of
//!   claims that need no flush either) under `synchronous = NORMAL`, set on the write connection
//!   between transactions ([`Op::needs_flush`]). Committed means in the WAL file, through the
//!   operating system: every process sees it and it survives the death of the process (a
//!   SIGKILL; tested by the crash cases), but not necessarily a power loss. Why that is safe:
//!   (1) a claim lost with the power only means the call runs again with the same key, which is
//!   what an idempotent tool allows (the same as a crash before the claim); (2) it cannot be
//!   lost while a later write survives: the WAL is one file appended in commit order, an fsync
//!   of it (the record's commit, or any other flushed commit after the claim's) writes every
//!   frame before it, and after a power loss SQLite keeps only the longest prefix of the WAL
//!   whose frames' running checksums hold, so what survives is always a prefix of the commits.
//!   A record is never kept without its claim, and a flushed claim or record of another tool is
//!   never lost because an idempotent claim before it was not flushed. `NORMAL`, not `OFF`: a
//!   checkpoint run inside such a commit still syncs before the WAL is reused, so nothing
//!   already on disk is lost with it.
//!
//!   [`Synchronous::Normal`] as the store's setting makes every commit like that idempotent
//!   claim: faster, but a power loss (not a process crash) may roll back the last commits: a
//!   claim or a recorded result written just before the power went out may be lost, and the
//!   next call then runs the effect again (idempotent tools with the same key; compensable and
//!   irreversible tools are only protected by their `recover` hook). Use it where that is
//!   acceptable.
//! - **Group commit, led by the callers.** rusqlite is blocking, and handing each write to a
//!   thread costs two thread wake-ups per commit (tens of µs each on a virtual machine, more
//!   than a commit without fsync). So there is no writer thread: one write connection is lent to
//!   one caller at a time. A caller that finds it free applies its operation at once, on its
//!   own thread (a short blocking section, like a file write: the transaction, and under
//!   `synchronous = FULL` the commit's fsync). Callers that arrive meanwhile queue; when the
//!   leader's commit is done, the oldest of them takes every queued operation into one
//!   transaction, each with its own transition, in arrival order, and one commit (one fsync)
//!   serves them all, so concurrent callers share commits instead of waiting for each other's
//!   fsync. A database locked by another process is not waited for on the caller's thread:
//!   the batch moves to tokio's blocking pool, which waits up to the busy timeout. With
//!   `synchronous = FULL` on a multi-thread runtime the leader commits inside
//!   `tokio::task::block_in_place`, so that the worker's other tasks (timers, servers) move to
//!   another thread for the fsync's length instead of waiting for it; on a current-thread
//!   runtime every such batch commits from the blocking pool, so that callers keep queueing
//!   behind its fsync instead of each paying its own. WAL
//!   checkpoints (copying committed pages into the database file, milliseconds each) run on a
//!   thread and connection of their own every 128 operations, so that a caller's commit
//!   copies few pages. Under a steady stream of writes they never let the WAL start over, so
//!   SQLite's automatic checkpoint, in a commit, still runs when the WAL reaches 10,000 pages
//!   (~40 MB) with `FULL`, 40,000 (~160 MB) with `NORMAL`, where it costs a larger share of a
//!   commit (SQLite's default is 1,000). With `FULL`, the checkpoint thread also keeps the WAL
//!   file a few MB longer than the frames in it, up to that bound (zeros written past its end
//!   under the write lock, then synced), so that a commit's fsync overwrites blocks the file
//!   already has instead of also growing the file, which cost a new (or reopened) journal's
//!   first ~2,000 calls up to twice as much.
//!   Reads (`get`, `list`, `audit`) run on tokio's blocking pool over separate read
//!   connections (WAL lets them proceed while a write commits).
//! - **Lookups and claims that need no write never take the write lock.** [`Store::lookup`]
//!   and [`Store::lookup_recorded`] (the engine's first look at a key, which reads only the seven
//!   columns a replay needs and leaves the input JSON undecoded) read without waiting (busy
//!   timeout 0) on the caller's thread: on the write connection when no leader holds it, whose
//!   page cache survives its own commits (a read connection's is dropped whenever another
//!   connection commits, so it would fetch the path to the row again on every new call), else on
//!   a pooled read connection. Writers arriving during such a read queue behind it as behind a
//!   leader. A claim first reads
//!   the record the same way (unless the engine's lookup has just found no record:
//!   [`Store::claim_unseen`]): if the state machine says nothing changes (a recorded result to
//!   replay, a live claim, a record in doubt, awaiting approval) the outcome is returned from
//!   that read, which is one consistent snapshot of the last commit. Anything else, or a busy
//!   database, goes to the write connection. This read is a point lookup by primary key and
//!   runs on the caller's thread: it does not wait for locks, only for the page cache (or the
//!   disk on a cold cache).
//! - **A claim's holder writes without reading it back.** The write connection keeps the claims
//!   it wrote; the holder's next operation (its output, a renewal, a release) runs the state
//!   machine on that record and writes with a guard that matches only while the row is still
//!   exactly that claim. A row changed elsewhere (another process took the claim over, a person
//!   resolved it) is read and decided as any other.
//!
//! # Schema (version 4)
//!
//! Created and upgraded by versioned migrations that the store applies itself at open, in one
//! transaction (version 2 replaced the index on every record's state by indexes on the states a
//! person acts on; version 3 added `call_ids`, the other tool calls that received a result; version 4 added
//! `holder`, who made the latest claim). Plain columns and JSON text, never Rust-layout blobs (see
//! [`SqliteStore::schema_sql`]):
//! `effect_tool_meta(name, value)` records `schema_version`, the marker secret and each tool's
//! output schema (`output_schema:<tool>`, JSON; an older effect-tool ignores these rows); `effect_records` holds one row per
//! key, its `version` column the record version ([`RECORD_VERSION`]); `effect_audit` is
//! append-only (triggers refuse updates and deletes). A journal written by a newer effect-tool
//! (a higher schema version) is refused at open; a record of a newer version is refused with
//! [`StoreError::UnsupportedVersion`] and left untouched, never misread.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::mpsc;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use rusqlite::{Connection, ErrorCode, OpenFlags, OptionalExtension, params};

use super::{Filter, OUTPUT_SCHEMA_ROW, Recorded, Store};
use crate::call::error::StoreError;
use crate::decide::record::{AuditEntry, EffectRecord, Millis, Op, OpOutcome, RECORD_VERSION, RecordState, transition};

/// The version of the SQLite schema this build writes and reads.
pub const SCHEMA_VERSION: u32 = 4;

/// How hard SQLite works to make a commit survive a power loss.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Synchronous {
    /// fsync the WAL on every commit: a returned call survives power loss (the default).
    #[default]
    Full,
    /// fsync only at checkpoints: survives process crashes, but a power loss may roll back the
    /// last commits (claims and recorded results), so an effect may run again after one. The
    /// WAL file may grow to ~160 MB under sustained writes before a commit checkpoints it (40
    /// MB with `Full`): fewer of those checkpoints, each with two fsyncs, keep `Normal` fast.
    Normal,
}

impl Synchronous {
    fn pragma(self) -> &'static str {
        match self {
            Synchronous::Full => "FULL",
            Synchronous::Normal => "NORMAL",
        }
    }
}

/// Settings of a [`SqliteStore`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqliteOptions {
    /// Durability of commits (default [`Synchronous::Full`]).
    pub synchronous: Synchronous,
    /// How long a write waits for another process's write lock before failing (default 10 s).
    pub busy_timeout: Duration,
    /// The most operations the writer applies in one transaction (default 256).
    pub max_batch: usize,
    /// Read connections kept open for `get`, `list`, `audit` and claim lookups (default 4).
    pub read_connections: usize,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            synchronous: Synchronous::Full,
            busy_timeout: Duration::from_secs(10),
            max_batch: 256,
            read_connections: 4,
        }
    }
}

/// A journal in a SQLite file, shared safely by every process on the machine that opens it.
/// Cheap to clone; clones share the write connection and the read connections.
#[derive(Clone)]
pub struct SqliteStore {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.shared.path)
            .field("options", &self.shared.options)
            .finish_non_exhaustive()
    }
}

struct Shared {
    path: PathBuf,
    options: SqliteOptions,
    writer: Mutex<writer::Writer>,
    /// Asks the checkpoint thread for a checkpoint (it stops when this is dropped).
    checkpoint: mpsc::SyncSender<()>,
    readers: Mutex<Vec<Connection>>,
    /// The journal's clock (the system's, unless a simulation set one).
    clock: super::StoreClock,
}

mod writer;

impl SqliteStore {
    /// Open (or create) the journal at `path` with default settings: WAL,
    /// `synchronous = FULL`, a 10 s bound on waiting for other processes.
    ///
    /// This does blocking file I/O (and may wait for another process's lock while creating the
    /// schema): call it at startup, not in a hot async path.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        SqliteStore::open_with(path, SqliteOptions::default())
    }

    /// Open (or create) the journal at `path` with `options`.
    pub fn open_with(path: impl AsRef<Path>, options: SqliteOptions) -> Result<Self, StoreError> {
        SqliteStore::open_clocked(path, options, super::StoreClock::default())
    }

    /// Open (or create) the journal at `path` with `options`, on `clock` instead of the
    /// system's (milliseconds since the Unix epoch): every lease, expiry and audit time it
    /// writes is read from it. For simulations ([`crate::testing::sim`]), whose time is
    /// tokio's paused clock.
    #[cfg(feature = "testing")]
    pub fn open_with_clock(
        path: impl AsRef<Path>,
        options: SqliteOptions,
        clock: impl Fn() -> Millis + Send + Sync + 'static,
    ) -> Result<Self, StoreError> {
        SqliteStore::open_clocked(path, options, super::StoreClock::new(clock))
    }

    fn open_clocked(
        path: impl AsRef<Path>,
        options: SqliteOptions,
        clock: super::StoreClock,
    ) -> Result<Self, StoreError> {
        let path = path.as_ref().to_path_buf();
        create_private(&path)?;
        let writer = open_connection(&path, &options, true)?;
        // Checkpoints run on their own thread and connection, asked for often enough that the
        // WAL rarely reaches SQLite's automatic checkpoint in a caller's commit.
        let checkpointer = open_connection(&path, &options, false)?;
        let ahead = WalAhead::new(&path, &options, &checkpointer);
        let (checkpoint, checkpoint_rx) = mpsc::sync_channel(1);
        std::thread::Builder::new()
            .name("effect-tool-sqlite-checkpoint".to_owned())
            .spawn(move || checkpoint_loop(checkpointer, checkpoint_rx, ahead))
            .map_err(|e| StoreError::Backend(format!("cannot start the SQLite checkpoint thread: {e}")))?;
        let mut readers = Vec::with_capacity(options.read_connections);
        for _ in 0..options.read_connections.max(1) {
            readers.push(open_connection(&path, &options, false)?);
        }
        let synchronous = options.synchronous;
        Ok(SqliteStore {
            shared: Arc::new(Shared {
                path,
                options,
                writer: Mutex::new(writer::Writer::new(writer, synchronous)),
                checkpoint,
                readers: Mutex::new(readers),
                clock,
            }),
        })
    }

    /// The file this journal lives in.
    pub fn path(&self) -> &Path {
        &self.shared.path
    }

    /// The settings it was opened with.
    pub fn options(&self) -> &SqliteOptions {
        &self.shared.options
    }

    /// The SQL of the current schema (what [`SqliteStore::open`] creates: every migration in
    /// order), for review.
    pub fn schema_sql() -> String {
        MIGRATIONS.iter().map(|(_, sql)| *sql).collect()
    }

    /// Apply `op` through the writer (see [`writer`]).
    async fn write(&self, key: &str, op: Op) -> Result<OpOutcome, StoreError> {
        let work = writer::Work::Apply {
            key: key.to_owned(),
            op,
        };
        match writer::submit(&self.shared, work).await {
            writer::Answer::Apply(answer) => answer,
            writer::Answer::Gc(_) | writer::Answer::PutMeta(_) => unreachable!("an operation is answered as one"),
        }
    }

    /// Run `f` on a read connection on tokio's blocking pool.
    async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let shared = self.shared.clone();
        tokio::task::spawn_blocking(move || {
            let conn = match shared.take_reader() {
                Some(c) => c,
                None => open_connection(&shared.path, &shared.options, false)?,
            };
            conn.busy_timeout(shared.options.busy_timeout).map_err(backend)?;
            let result = f(&conn);
            shared.give_back(conn);
            result
        })
        .await
        .map_err(|e| StoreError::Backend(format!("a SQLite read failed to run: {e}")))?
    }

    /// A point read by key on the caller's thread that never waits for a lock: on the write
    /// connection when no leader holds it (its page cache is warm, see
    /// [`writer::read_if_idle`]), else on a pooled read connection. `None` when no connection
    /// is free or the database is busy (the caller then takes a path that waits).
    fn read_now<T>(
        &self,
        key: &str,
        read: impl Fn(&Connection, &str) -> Result<T, StoreError>,
    ) -> Option<Result<T, StoreError>> {
        let no_wait = |conn: &Connection| {
            conn.busy_timeout(Duration::ZERO)
                .map_err(backend)
                .and_then(|()| read(conn, key))
        };
        let found = match writer::read_if_idle(&self.shared, no_wait) {
            Some(found) => found,
            None => {
                let conn = self.shared.take_reader()?;
                let found = no_wait(&conn);
                self.shared.give_back(conn);
                found
            }
        };
        match found {
            // Busy or failing: let a path that waits (and reports) handle it.
            Err(StoreError::Backend(_)) => None,
            other => Some(other),
        }
    }

    /// The claim fast path: answer from a read when the state machine writes nothing.
    fn claim_without_write(&self, key: &str, op: &Op) -> Option<Result<OpOutcome, StoreError>> {
        let current = match self.read_now(key, read_record)? {
            Ok(found) => found,
            Err(e) => return Some(Err(e)),
        };
        match transition(key, current.as_ref(), op, self.now()) {
            Ok(t) if t.write.is_none() => Some(Ok(t.outcome)),
            Ok(_) => None,
            Err(rejected) => Some(Err(rejected.into())),
        }
    }
}

impl Shared {
    fn lock_writer(&self) -> std::sync::MutexGuard<'_, writer::Writer> {
        // The writer's state is changed in single assignments under the lock: a panic elsewhere
        // cannot leave it half-changed.
        self.writer.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn take_reader(&self) -> Option<Connection> {
        self.readers.lock().unwrap_or_else(|e| e.into_inner()).pop()
    }

    fn give_back(&self, conn: Connection) {
        let mut readers = self.readers.lock().unwrap_or_else(|e| e.into_inner());
        if readers.len() < self.options.read_connections.max(1) {
            readers.push(conn);
        }
    }
}

#[async_trait]
impl Store for SqliteStore {
    fn backend_name(&self) -> &'static str {
        "sqlite"
    }

    fn now(&self) -> Millis {
        self.shared.clock.now()
    }

    async fn get(&self, key: &str) -> Result<Option<EffectRecord>, StoreError> {
        let key = key.to_owned();
        self.read(move |conn| read_record(conn, &key)).await
    }

    async fn lookup(&self, key: &str) -> Result<Option<Arc<EffectRecord>>, StoreError> {
        match self.read_now(key, read_record) {
            Some(found) => Ok(found?.map(Arc::new)),
            None => Ok(self.get(key).await?.map(Arc::new)),
        }
    }

    async fn lookup_recorded(&self, key: &str) -> Result<Option<Recorded>, StoreError> {
        match self.read_now(key, read_recorded) {
            Some(found) => found,
            None => {
                let key = key.to_owned();
                self.read(move |conn| read_recorded(conn, &key)).await
            }
        }
    }

    async fn apply(&self, key: &str, op: Op) -> Result<OpOutcome, StoreError> {
        if matches!(op, Op::Claim { .. })
            && let Some(answer) = self.claim_without_write(key, &op)
        {
            return answer;
        }
        self.write(key, op).await
    }

    /// The engine just looked and found no record: no read ahead of the writer's (which reads
    /// again under the write lock, so nothing is skipped but a read that would find nothing).
    async fn claim_unseen(&self, key: &str, op: Op) -> Result<OpOutcome, StoreError> {
        self.write(key, op).await
    }

    async fn list_report(&self, filter: &Filter) -> Result<super::Listing, StoreError> {
        let filter = filter.clone();
        self.read(move |conn| list_records(conn, &filter)).await
    }

    async fn list(&self, filter: &Filter) -> Result<Vec<EffectRecord>, StoreError> {
        Ok(self.list_report(filter).await?.records)
    }

    /// Deletes in chunks, each its own write transaction, so that other writes (of this process
    /// and of others) wait for one chunk at most, not for the whole collection; each chunk is
    /// sized to hold the write lock for about 25 ms (`GC_PACE`). A failure stops it; the
    /// records deleted until then stay deleted.
    async fn gc(&self, now: Millis) -> Result<u64, StoreError> {
        let mut pace = GC_PACE;
        let mut dropped = 0;
        loop {
            let limit = pace.size();
            let started = std::time::Instant::now();
            let chunk = match writer::submit(&self.shared, writer::Work::Gc { now, limit }).await {
                writer::Answer::Gc(answer) => answer?,
                writer::Answer::Apply(_) | writer::Answer::PutMeta(_) => unreachable!("a gc is answered as one"),
            };
            dropped += chunk;
            if chunk < limit {
                return Ok(dropped);
            }
            pace.after(started.elapsed());
        }
    }

    async fn audit(&self, key: Option<&str>) -> Result<Vec<AuditEntry>, StoreError> {
        let key = key.map(str::to_owned);
        self.read(move |conn| read_audit(conn, key.as_deref())).await
    }

    /// One autocommitted `INSERT` on a pooled connection (it waits for the write lock as any
    /// writer does, bounded by `busy_timeout`).
    async fn append_audit(&self, entry: AuditEntry) -> Result<(), StoreError> {
        self.read(move |conn| append_audit(conn, &entry).map_err(backend)).await
    }

    /// The row `output_schema:<tool>` of `effect_tool_meta` (JSON text), replaced when the
    /// schema changed; written through the writer, in its next batch (never on a read
    /// connection, which would contend with the writer for SQLite's write lock).
    async fn put_output_schema(&self, tool: &str, schema: &serde_json::Value) -> Result<(), StoreError> {
        let work = writer::Work::PutMeta {
            name: format!("{OUTPUT_SCHEMA_ROW}{tool}"),
            value: schema.to_string(),
            replace: true,
        };
        match writer::submit(&self.shared, work).await {
            writer::Answer::PutMeta(answer) => answer,
            writer::Answer::Apply(_) | writer::Answer::Gc(_) => unreachable!("a meta row is answered as one"),
        }
    }

    async fn output_schema(&self, tool: &str) -> Result<Option<serde_json::Value>, StoreError> {
        let name = format!("{OUTPUT_SCHEMA_ROW}{tool}");
        let path = self.shared.path.clone();
        self.read(move |conn| {
            let stored: Option<String> = conn
                .query_row("SELECT value FROM effect_tool_meta WHERE name = ?1", [&name], |r| r.get(0))
                .optional()
                .map_err(backend)?;
            stored
                .map(|text| {
                    serde_json::from_str(&text).map_err(|e| {
                        StoreError::Backend(format!(
                            "SQLite journal {}: row `{name}` of `effect_tool_meta` is not JSON ({e}): it was not written by effect-tool; delete it (the tool's next call writes it again)",
                            path.display()
                        ))
                    })
                })
                .transpose()
        })
        .await
    }

    /// The `marker_secret` row of `effect_tool_meta`, created on first use (the first writer
    /// wins; every process then reads the same one).
    async fn marker_secret(&self) -> Result<Option<crate::value::marker::MarkerSecret>, StoreError> {
        let path = self.shared.path.clone();
        self.read(move |conn| {
            let read = |conn: &Connection| -> Result<Option<String>, StoreError> {
                conn.query_row("SELECT value FROM effect_tool_meta WHERE name = 'marker_secret'", [], |r| r.get(0))
                    .optional()
                    .map_err(backend)
            };
            let stored = match read(conn)? {
                Some(stored) => stored,
                None => {
                    let fresh = crate::value::marker::MarkerSecret::random()
                        .map_err(|e| StoreError::Backend(format!("cannot create the journal's marker secret: {e}")))?;
                    conn.execute(
                        "INSERT INTO effect_tool_meta (name, value) VALUES ('marker_secret', ?1) ON CONFLICT (name) DO NOTHING",
                        [fresh.to_hex()],
                    )
                    .map_err(backend)?;
                    read(conn)?.unwrap_or_default()
                }
            };
            crate::value::marker::MarkerSecret::from_hex(&stored).map(Some).ok_or_else(|| {
                StoreError::Backend(format!(
                    "SQLite journal {}: its marker secret (row `marker_secret` of `effect_tool_meta`) is not 64 hex digits: it was not written by effect-tool; delete the row to make a new one (markers already posted will then no longer verify)",
                    path.display()
                ))
            })
        })
        .await
    }
}

const SCHEMA_V1: &str = "
CREATE TABLE IF NOT EXISTS effect_records (
    key           TEXT PRIMARY KEY NOT NULL,
    version       INTEGER NOT NULL,
    tool          TEXT NOT NULL,
    class         TEXT NOT NULL,
    run_id        TEXT NOT NULL,
    thread_id     TEXT,
    call_id       TEXT,
    fingerprint   TEXT NOT NULL,
    input         TEXT NOT NULL,   -- JSON
    state         TEXT NOT NULL,   -- claimed, completed, in-doubt, awaiting-approval, ...
    attempt       INTEGER NOT NULL,
    lease_until   INTEGER,         -- ms since the Unix epoch
    output        TEXT,            -- JSON
    reason        TEXT,
    approval_role TEXT,
    decided_by    TEXT,
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL,
    expires_at    INTEGER
) WITHOUT ROWID;
-- Few indexes, on columns that rarely change (an index is rewritten by every write that changes
-- one of its columns), ending in created_at so that new entries land on the last page.
-- Lists sort by updated_at in memory.
CREATE INDEX IF NOT EXISTS effect_records_state ON effect_records (state, created_at);
CREATE INDEX IF NOT EXISTS effect_records_run ON effect_records (run_id, created_at);
CREATE INDEX IF NOT EXISTS effect_records_expires ON effect_records (expires_at) WHERE expires_at IS NOT NULL;
CREATE TABLE IF NOT EXISTS effect_audit (
    id     INTEGER PRIMARY KEY AUTOINCREMENT,
    key    TEXT NOT NULL,
    at     INTEGER NOT NULL,
    actor  TEXT NOT NULL,
    action TEXT NOT NULL,
    detail TEXT              -- JSON
);
CREATE INDEX IF NOT EXISTS effect_audit_key ON effect_audit (key, id);
CREATE TRIGGER IF NOT EXISTS effect_audit_no_update BEFORE UPDATE ON effect_audit
BEGIN SELECT RAISE(ABORT, 'the effect-tool audit trail is append-only'); END;
CREATE TRIGGER IF NOT EXISTS effect_audit_no_delete BEFORE DELETE ON effect_audit
BEGIN SELECT RAISE(ABORT, 'the effect-tool audit trail is append-only'); END;
";

/// Version 2: the index on every record's state goes. Each new call inserted into it (claimed)
/// and moved its entry (completed): two more pages per call in the write-ahead log, a third
/// of a new call's writes, to serve lists by state that an operator runs now and then. What
/// remains indexed by state are the records a person must act on (exact-state partial indexes,
/// which a new call never enters); lists of other states scan the table.
const SCHEMA_V2: &str = "
DROP INDEX IF EXISTS effect_records_state;
-- Led by state so that the planner searches them for `state = '...'` (a partial index on its own
-- is only scanned, which it rarely prefers to the table).
CREATE INDEX IF NOT EXISTS effect_records_in_doubt ON effect_records (state, created_at) WHERE state = 'in-doubt';
CREATE INDEX IF NOT EXISTS effect_records_awaiting ON effect_records (state, created_at) WHERE state = 'awaiting-approval';
";

/// Version 3: `call_ids`, the other tool-call ids that received a record's result (a JSON
/// array; NULL when there are none, as in every row written before).
const SCHEMA_V3: &str = "
ALTER TABLE effect_records ADD COLUMN call_ids TEXT;
";

/// Version 4: `holder`, who made the latest claim (a JSON object: worker, instance, host,
/// pid; NULL in every row written before).
const SCHEMA_V4: &str = "
ALTER TABLE effect_records ADD COLUMN holder TEXT;
";

/// Every schema version and the SQL that brings the previous one to it, in order.
const MIGRATIONS: [(u32, &str); 4] = [(1, SCHEMA_V1), (2, SCHEMA_V2), (3, SCHEMA_V3), (4, SCHEMA_V4)];

fn backend(e: rusqlite::Error) -> StoreError {
    match fault_advice(&e, None) {
        Some(advice) => StoreError::Backend(format!("SQLite: {e}: {advice}")),
        None => StoreError::Backend(format!("SQLite: {e}")),
    }
}

/// What happened and what to do, for a failure of the disk or the journal file itself (full,
/// read-only, damaged, failing I/O), by SQLite's result code; `None` for any other failure.
/// `path` names the journal where the caller knows it. For a file SQLite cannot open, the
/// file is probed to tell a read-only file system or a denied permission from other causes.
fn fault_advice(e: &rusqlite::Error, path: Option<&Path>) -> Option<String> {
    let journal = match path {
        Some(p) => format!("the SQLite journal {}", p.display()),
        None => "the SQLite journal".to_owned(),
    };
    let read_only = || {
        format!(
            "{journal} is read-only (its file system is mounted read-only, or the file, its -wal and -shm files or its folder are not writable): remount it read-write or fix the permissions, then call again"
        )
    };
    match e.sqlite_error_code()? {
        ErrorCode::DiskFull => Some(format!(
            "the disk holding {journal} is full: free space on it (nothing was written), then call again"
        )),
        ErrorCode::ReadOnly => Some(read_only()),
        ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase => Some(format!(
            "{journal} is damaged (truncated, corrupt, or not a journal): stop every process using it, restore it from a backup (or move it and its -wal file aside to start an empty journal, losing its records), then call again"
        )),
        ErrorCode::SystemIoFailure => Some(format!(
            "reading or writing {journal} failed with an I/O error: check the disk and the kernel log, then call again"
        )),
        ErrorCode::CannotOpen => {
            let probe = path.map(|p| std::fs::OpenOptions::new().read(true).write(true).open(p));
            match probe {
                // EROFS: a read-only file system.
                Some(Err(io)) if io.raw_os_error() == Some(30) => Some(read_only()),
                Some(Err(io)) if io.kind() == std::io::ErrorKind::PermissionDenied => Some(read_only()),
                Some(Ok(_)) => Some(format!(
                    "{journal} exists but SQLite cannot open it or its -wal/-shm files: check that its folder is writable and not full, then call again"
                )),
                _ => Some(format!(
                    "{journal} cannot be opened: check that its folder exists, is writable and is on a local file system, then call again"
                )),
            }
        }
        _ => None,
    }
}

fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
    )
}

/// Create a new journal file readable and writable by its owner only (0600): it holds every
/// call's input and output. SQLite gives the `-wal` and `-shm` files it makes beside it the
/// same mode. A journal that exists keeps the mode its operator gave it; a `file:` URI or
/// `:memory:` is left to SQLite.
fn create_private(path: &Path) -> Result<(), StoreError> {
    let name = path.to_string_lossy();
    if name.starts_with("file:") || name == ":memory:" || name.is_empty() {
        return Ok(());
    }
    let mut create = std::fs::OpenOptions::new();
    create.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut create, 0o600);
    match create.open(path) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(StoreError::Backend(format!(
            "cannot create the SQLite journal {}: {e}; check that its folder exists and is writable",
            path.display()
        ))),
    }
}

fn open_connection(path: &Path, options: &SqliteOptions, writer: bool) -> Result<Connection, StoreError> {
    let fail = |e: rusqlite::Error| {
        if is_busy(&e) {
            StoreError::Backend(format!(
                "SQLite journal {} stayed locked by another process for more than {:?} while opening: {e}; retry, or raise SqliteOptions::busy_timeout",
                path.display(),
                options.busy_timeout
            ))
        } else {
            match fault_advice(&e, Some(path)) {
                Some(advice) => StoreError::Backend(format!("cannot open the SQLite journal: {e}: {advice}")),
                None => StoreError::Backend(format!("cannot open the SQLite journal {}: {e}", path.display())),
            }
        }
    };
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX
        | OpenFlags::SQLITE_OPEN_URI;
    let conn = Connection::open_with_flags(path, flags).map_err(fail)?;
    conn.busy_timeout(options.busy_timeout).map_err(fail)?;
    // One statement per set of changed columns (a dozen) beside the fixed ones.
    conn.set_prepared_statement_cache_capacity(64);
    if writer {
        let mode: String = conn
            .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
            .map_err(fail)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StoreError::Backend(format!(
                "SQLite journal {} cannot use WAL (journal_mode is `{mode}`): put it on a local file system",
                path.display()
            )));
        }
        migrate(&conn, path).map_err(|e| match e {
            Migrate::Sql(e) => fail(e),
            Migrate::Store(e) => e,
        })?;
        // The background checkpoints keep the WAL short; SQLite's own, in a commit, is the
        // safety net for when they fall behind.
        conn.execute_batch(&format!(
            "PRAGMA wal_autocheckpoint = {};",
            autocheckpoint_pages(options.synchronous)
        ))
        .map_err(fail)?;
    }
    conn.execute_batch(&format!("PRAGMA synchronous = {};", options.synchronous.pragma()))
        .map_err(fail)?;
    Ok(conn)
}

enum Migrate {
    Sql(rusqlite::Error),
    Store(StoreError),
}

impl From<rusqlite::Error> for Migrate {
    fn from(e: rusqlite::Error) -> Self {
        Migrate::Sql(e)
    }
}

/// Create the schema, or check that an existing one is a version this build reads.
fn migrate(conn: &Connection, path: &Path) -> Result<(), Migrate> {
    conn.execute_batch("BEGIN IMMEDIATE")?;
    let result = (|| {
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS effect_tool_meta (name TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL);",
        )?;
        let found: Option<String> = conn
            .query_row(
                "SELECT value FROM effect_tool_meta WHERE name = 'schema_version'",
                [],
                |r| r.get(0),
            )
            .optional()?;
        let at = match found.as_deref().map(str::parse::<u32>) {
            None => 0,
            Some(Ok(v)) if v <= SCHEMA_VERSION => v,
            Some(parsed) => {
                return Err(match parsed {
                    Ok(found) => Migrate::Store(StoreError::Backend(format!(
                        "SQLite journal {} has schema version {found}, this effect-tool reads version {SCHEMA_VERSION}: upgrade effect-tool to use it (the journal was left untouched)",
                        path.display()
                    ))),
                    Err(_) => Migrate::Store(StoreError::Backend(format!(
                        "SQLite journal {} has an unreadable schema version `{}`: it was not written by effect-tool",
                        path.display(),
                        found.unwrap_or_default()
                    ))),
                });
            }
        };
        if at == SCHEMA_VERSION {
            return Ok(());
        }
        for (version, sql) in MIGRATIONS {
            if version > at {
                conn.execute_batch(sql)?;
            }
        }
        conn.execute(
            "INSERT INTO effect_tool_meta (name, value) VALUES ('schema_version', ?1)
             ON CONFLICT (name) DO UPDATE SET value = excluded.value",
            [SCHEMA_VERSION.to_string()],
        )?;
        conn.execute_batch(&format!("PRAGMA user_version = {SCHEMA_VERSION};"))?;
        Ok(())
    })();
    match result {
        Ok(()) => {
            conn.execute_batch("COMMIT")?;
            Ok(())
        }
        Err(e) => {
            let _ = conn.execute_batch("ROLLBACK");
            Err(e)
        }
    }
}

const COLUMNS: &str = "key, version, tool, class, run_id, thread_id, call_id, fingerprint, input, state, attempt, \
     lease_until, output, reason, approval_role, decided_by, created_at, updated_at, expires_at, call_ids, holder";

use super::row::StoredRow as Row;

impl Row {
    fn from_sql(r: &rusqlite::Row<'_>) -> rusqlite::Result<Row> {
        Ok(Row {
            key: r.get(0)?,
            version: r.get(1)?,
            tool: r.get(2)?,
            class: r.get(3)?,
            run_id: r.get(4)?,
            thread_id: r.get(5)?,
            call_id: r.get(6)?,
            fingerprint: r.get(7)?,
            input: r.get(8)?,
            state: r.get(9)?,
            attempt: r.get(10)?,
            lease_until: r.get(11)?,
            output: r.get(12)?,
            reason: r.get(13)?,
            approval_role: r.get(14)?,
            decided_by: r.get(15)?,
            created_at: r.get(16)?,
            updated_at: r.get(17)?,
            expires_at: r.get(18)?,
            call_ids: r.get(19)?,
            holder: r.get(20)?,
        })
    }
}

static SELECT_RECORD: LazyLock<String> =
    LazyLock::new(|| format!("SELECT {COLUMNS} FROM effect_records WHERE key = ?1"));

/// The record under `key`: `Err` when the database fails, `Ok(Err(_))` when the row is there
/// but unreadable (a column of the wrong type, JSON that does not parse, a newer version).
fn read_row(conn: &Connection, key: &str) -> rusqlite::Result<Result<Option<EffectRecord>, StoreError>> {
    let row = conn
        .prepare_cached(&SELECT_RECORD)?
        .query_row([key], Row::from_sql)
        .optional();
    match row {
        Ok(row) => Ok(row.map(Row::decode).transpose()),
        Err(e) if is_column_type_error(&e) => Ok(Err(corrupt_column(key, &e))),
        Err(e) => Err(e),
    }
}

fn read_record(conn: &Connection, key: &str) -> Result<Option<EffectRecord>, StoreError> {
    read_row(conn, key).map_err(backend)?
}

/// Whether reading a column failed on the value it holds (its type, its range, its text's
/// UTF-8): the row is corrupt, the database is fine.
fn is_column_type_error(e: &rusqlite::Error) -> bool {
    matches!(
        e,
        rusqlite::Error::InvalidColumnType(..)
            | rusqlite::Error::FromSqlConversionFailure(..)
            | rusqlite::Error::IntegralValueOutOfRange(..)
            | rusqlite::Error::Utf8Error(..)
    )
}

/// The row under `key` holds a value of the wrong type in a column (`e`).
fn corrupt_column(key: &str, e: &rusqlite::Error) -> StoreError {
    StoreError::Corrupt {
        key: key.to_owned(),
        message: format!("a column has an unexpected type: {e}"),
    }
}

/// A failed column read of the row under `key`: corrupt when the value is at fault, a backend
/// failure otherwise.
fn column_error(key: &str, e: rusqlite::Error) -> StoreError {
    if is_column_type_error(&e) {
        corrupt_column(key, &e)
    } else {
        backend(e)
    }
}

/// What a replay reads ([`Store::lookup_recorded`]): seven columns instead of nineteen, and no
/// decode of the input JSON. The version is checked first, as [`Row::decode`] does.
fn read_recorded(conn: &Connection, key: &str) -> Result<Option<Recorded>, StoreError> {
    let corrupt = |message: String| StoreError::Corrupt {
        key: key.to_owned(),
        message,
    };
    let mut st = conn
        .prepare_cached(
            "SELECT version, state, fingerprint, call_id, output, expires_at, call_ids, tool FROM effect_records WHERE key = ?1",
        )
        .map_err(backend)?;
    let mut rows = st.query([key]).map_err(backend)?;
    let Some(r) = rows.next().map_err(backend)? else {
        return Ok(None);
    };
    let version: i64 = r.get(0).map_err(|e| column_error(key, e))?;
    if version != i64::from(RECORD_VERSION) {
        return Err(StoreError::UnsupportedVersion {
            key: key.to_owned(),
            found: u32::try_from(version).unwrap_or(u32::MAX),
            supported: RECORD_VERSION,
        });
    }
    let text = |i: usize| -> Result<Option<&str>, StoreError> {
        r.get_ref(i)
            .map_err(backend)?
            .as_str_or_null()
            .map_err(|e| corrupt(format!("column {i} is not text: {e}")))
    };
    let state = RecordState::from_str(text(1)?.unwrap_or_default()).map_err(corrupt)?;
    let fingerprint = text(2)?.unwrap_or_default().to_owned();
    let call_id = text(3)?.map(str::to_owned);
    let output = match text(4)? {
        Some(json) => {
            Some(serde_json::from_str(json).map_err(|e| corrupt(format!("its output is not valid JSON: {e}")))?)
        }
        None => None,
    };
    let expires_at: Option<i64> = r.get(5).map_err(|e| column_error(key, e))?;
    let call_ids = match text(6)? {
        Some(json) => serde_json::from_str::<Vec<String>>(json)
            .map_err(|e| corrupt(format!("its call ids are not a JSON list of strings: {e}")))?,
        None => Vec::new(),
    };
    let tool = text(7)?.unwrap_or_default().to_owned();
    Ok(Some(
        Recorded::new(state, fingerprint, call_id, output, expires_at)
            .with_call_ids(call_ids)
            .with_tool(tool),
    ))
}

/// How [`write_record`] finds the row it updates.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Guard {
    /// The row was read in this transaction: it is `before`.
    Read,
    /// `before` is a claim this writer wrote earlier ([`Held`]): update the row only if it is
    /// still exactly that claim (same state, attempt, lease, last change and version). Nothing
    /// but a renewal of the same attempt changes a claim without changing its state or attempt,
    /// and a renewal changes the lease and the time of the last change.
    Held,
}

/// Write `rec` over `before` (`None` if there is no row): an INSERT of a new row, or an UPDATE
/// of only the columns that changed, so that an index is only rewritten when its column changes
/// (a completion touches only the row). Returns how many rows were written: 0 only when a
/// [`Guard::Held`] update found the row changed by someone else.
fn write_record(
    conn: &Connection,
    before: Option<&EffectRecord>,
    rec: &EffectRecord,
    guard: Guard,
) -> rusqlite::Result<usize> {
    use rusqlite::ToSql;
    // Parameters are borrowed from the record (no copy of its strings); only JSON is written out.
    let output = rec.output.as_ref().map(|v| v.to_string());
    let call_ids = super::row::call_ids_text(rec);
    let holder = super::row::holder_text(rec);
    let Some(old) = before else {
        let input = rec.input.to_string();
        conn.prepare_cached(&INSERT_RECORD)?.execute(params![
            rec.key,
            rec.version,
            rec.tool,
            rec.class.as_str(),
            rec.run_id,
            rec.thread_id,
            rec.call_id,
            rec.fingerprint,
            input,
            rec.state.as_str(),
            rec.attempt,
            rec.lease_until,
            output,
            rec.reason,
            rec.approval_role,
            rec.decided_by,
            rec.created_at,
            rec.updated_at,
            rec.expires_at,
            call_ids,
            holder,
        ])?;
        return Ok(1);
    };
    let input = (old.input != rec.input).then(|| rec.input.to_string());
    // Column i of UPDATABLE changed: bit i of `changed`, its value in `values` (in order).
    let mut changed = 0u32;
    let mut values: Vec<&dyn ToSql> = vec![&rec.key];
    let columns: [(bool, &dyn ToSql); 20] = [
        (old.version != rec.version, &rec.version),
        (old.tool != rec.tool, &rec.tool),
        (old.class != rec.class, &rec.class.as_str()),
        (old.run_id != rec.run_id, &rec.run_id),
        (old.thread_id != rec.thread_id, &rec.thread_id),
        (old.call_id != rec.call_id, &rec.call_id),
        (old.fingerprint != rec.fingerprint, &rec.fingerprint),
        (input.is_some(), &input),
        (old.state != rec.state, &rec.state.as_str()),
        (old.attempt != rec.attempt, &rec.attempt),
        (old.lease_until != rec.lease_until, &rec.lease_until),
        (old.output != rec.output, &output),
        (old.reason != rec.reason, &rec.reason),
        (old.approval_role != rec.approval_role, &rec.approval_role),
        (old.decided_by != rec.decided_by, &rec.decided_by),
        (old.created_at != rec.created_at, &rec.created_at),
        (old.updated_at != rec.updated_at, &rec.updated_at),
        (old.expires_at != rec.expires_at, &rec.expires_at),
        (old.call_ids != rec.call_ids, &call_ids),
        (old.holder != rec.holder, &holder),
    ];
    for (i, (differs, value)) in columns.into_iter().enumerate() {
        if differs {
            changed |= 1 << i;
            values.push(value);
        }
    }
    if changed == 0 {
        return Ok(1);
    }
    let guarded = guard == Guard::Held;
    if guarded {
        values.extend([
            &old.attempt as &dyn ToSql,
            &old.updated_at,
            &old.lease_until,
            &old.version,
        ]);
    }
    let mask = changed | if guarded { GUARDED } else { 0 };
    let n = UPDATE_SQL.with(|cache| {
        let mut cache = cache.borrow_mut();
        let sql = cache.entry(mask).or_insert_with(|| update_sql(mask));
        conn.prepare_cached(sql)?.execute(values.as_slice())
    })?;
    debug_assert!(guarded || n == 1, "the record was read in this transaction");
    Ok(n)
}

/// The bit of an UPDATE's column mask that adds the [`Guard::Held`] condition.
const GUARDED: u32 = 1 << 31;

/// The columns an UPDATE may set, in the order of the bits of its column mask.
const UPDATABLE: [&str; 20] = [
    "version",
    "tool",
    "class",
    "run_id",
    "thread_id",
    "call_id",
    "fingerprint",
    "input",
    "state",
    "attempt",
    "lease_until",
    "output",
    "reason",
    "approval_role",
    "decided_by",
    "created_at",
    "updated_at",
    "expires_at",
    "call_ids",
    "holder",
];

thread_local! {
    /// The UPDATE statement of each set of changed columns, made once per thread (a dozen sets
    /// occur: one per kind of transition).
    static UPDATE_SQL: std::cell::RefCell<std::collections::HashMap<u32, String>> = Default::default();
}

fn update_sql(mask: u32) -> String {
    let assignments: Vec<String> = UPDATABLE
        .iter()
        .enumerate()
        .filter(|(i, _)| mask & (1 << i) != 0)
        .enumerate()
        .map(|(n, (_, name))| format!("{name} = ?{}", n + 2))
        .collect();
    let mut sql = format!("UPDATE effect_records SET {} WHERE key = ?1", assignments.join(", "));
    if mask & GUARDED != 0 {
        let g = assignments.len() + 2;
        sql.push_str(&format!(
            " AND state = 'claimed' AND attempt = ?{g} AND updated_at = ?{} AND lease_until IS ?{} AND version = ?{}",
            g + 1,
            g + 2,
            g + 3
        ));
    }
    sql
}

static INSERT_RECORD: LazyLock<String> = LazyLock::new(|| {
    format!(
        "INSERT INTO effect_records ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21)"
    )
});

fn append_audit(conn: &Connection, entry: &AuditEntry) -> rusqlite::Result<()> {
    let detail = entry.detail.as_ref().map(|v| v.to_string());
    conn.prepare_cached("INSERT INTO effect_audit (key, at, actor, action, detail) VALUES (?1, ?2, ?3, ?4, ?5)")?
        .execute(params![entry.key, entry.at, entry.actor, entry.action, detail])?;
    Ok(())
}

/// The SELECT of [`Store::list`] for `filter`, and its parameters.
fn list_sql(filter: &Filter) -> (String, Vec<rusqlite::types::Value>) {
    use rusqlite::types::Value as SqlValue;
    let mut sql = format!("SELECT {COLUMNS} FROM effect_records WHERE 1 = 1");
    let mut args: Vec<SqlValue> = Vec::new();
    if let Some(run) = &filter.run_id {
        args.push(SqlValue::Text(run.clone()));
        sql.push_str(&format!(" AND run_id = ?{}", args.len()));
    }
    if let Some(tool) = &filter.tool {
        args.push(SqlValue::Text(tool.clone()));
        sql.push_str(&format!(" AND tool = ?{}", args.len()));
    }
    if !filter.states.is_empty() {
        // Written out as literals (the states' own names, never user text), one equality each:
        // SQLite uses a partial index (`WHERE state = 'in-doubt'`) only for a term it can match
        // to the index's condition, which a bound parameter or an IN list is not.
        let terms: Vec<String> = filter
            .states
            .iter()
            .map(|state| format!("state = '{}'", state.as_str()))
            .collect();
        sql.push_str(&format!(" AND ({})", terms.join(" OR ")));
    }
    if let Some(since) = filter.updated_since {
        args.push(SqlValue::Integer(since));
        sql.push_str(&format!(" AND updated_at >= ?{}", args.len()));
    }
    if let Some(before) = filter.updated_before {
        args.push(SqlValue::Integer(before));
        sql.push_str(&format!(" AND updated_at < ?{}", args.len()));
    }
    if let Some(after) = &filter.after {
        args.push(SqlValue::Integer(after.updated_at));
        let at = args.len();
        args.push(SqlValue::Text(after.key.clone()));
        sql.push_str(&format!(
            " AND (updated_at < ?{at} OR (updated_at = ?{at} AND key > ?{}))",
            args.len()
        ));
    }
    sql.push_str(" ORDER BY updated_at DESC, key ASC");
    if let Some(limit) = filter.limit {
        args.push(SqlValue::Integer(i64::try_from(limit).unwrap_or(i64::MAX)));
        sql.push_str(&format!(" LIMIT ?{}", args.len()));
    }
    (sql, args)
}

/// The records `filter` selects; a row that cannot be read (a column of the wrong type, JSON
/// that does not parse, a newer record version) is skipped and reported.
fn list_records(conn: &Connection, filter: &Filter) -> Result<super::Listing, StoreError> {
    let (sql, args) = list_sql(filter);
    let mut st = conn.prepare(&sql).map_err(backend)?;
    let mut rows = st.query(rusqlite::params_from_iter(args)).map_err(backend)?;
    let mut listing = super::Listing::default();
    while let Some(r) = rows.next().map_err(backend)? {
        let key: Option<String> = r.get(0).ok();
        let decoded = Row::from_sql(r)
            .map_err(|e| corrupt_column(key.as_deref().unwrap_or_default(), &e))
            .and_then(Row::decode);
        match decoded {
            Ok(rec) => listing.records.push(rec),
            Err(e) => listing.skipped.push(super::skipped(&e, key.as_deref())),
        }
    }
    Ok(listing)
}

fn read_audit(conn: &Connection, key: Option<&str>) -> Result<Vec<AuditEntry>, StoreError> {
    let rows = conn
        .prepare_cached(
            "SELECT key, at, actor, action, detail FROM effect_audit WHERE ?1 IS NULL OR key = ?1 ORDER BY id",
        )
        .and_then(|mut st| {
            st.query_map([key], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, String>(3)?,
                    r.get::<_, Option<String>>(4)?,
                ))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()
        })
        .map_err(backend)?;
    rows.into_iter()
        .map(|(key, at, actor, action, detail)| {
            let detail = match detail {
                Some(text) => Some(serde_json::from_str(&text).map_err(|e| StoreError::Corrupt {
                    key: key.clone(),
                    message: format!("an audit entry's detail is not valid JSON: {e}"),
                })?),
                None => None,
            };
            Ok(AuditEntry {
                key,
                at,
                actor,
                action,
                detail,
            })
        })
        .collect()
}

/// The claims this process's writer holds, as it last wrote them, by key: the holder's next
/// operation on one (the record of its output, a renewal, a release) runs the state machine on
/// it and writes with [`Guard::Held`], instead of reading and decoding the row again. When the
/// row changed meanwhile (another process took the claim over, a person resolved it, gc, a
/// commit that failed after the entry was made) the guarded write matches no row and the
/// operation takes the read path: an entry can be stale, never wrong.
#[derive(Default)]
pub(super) struct Held(std::collections::HashMap<String, Arc<EffectRecord>>);

impl Held {
    /// More than this many claims held at once (claims whose holder never came back through
    /// this writer) and the map starts over: an entry only ever saves a read.
    const MAX: usize = 4096;

    fn note(&mut self, key: &str, rec: &Arc<EffectRecord>) {
        if rec.state == RecordState::Claimed {
            if self.0.len() >= Self::MAX {
                self.0.clear();
            }
            self.0.insert(key.to_owned(), rec.clone());
        } else {
            self.0.remove(key);
        }
    }
}

/// Apply one operation inside the writer's open transaction. The outer error aborts the
/// transaction (a database failure); the inner result is the operation's own answer.
fn apply_in_tx(
    conn: &Connection,
    key: &str,
    op: &Op,
    held: &mut Held,
    now: Millis,
) -> rusqlite::Result<Result<OpOutcome, StoreError>> {
    let holders_op = matches!(
        op,
        Op::Complete { .. } | Op::Renew { .. } | Op::Release { .. } | Op::MarkInDoubt { .. }
    );
    if holders_op
        && let Some(claim) = held.0.remove(key)
        && let Ok(t) = transition(key, Some(&*claim), op, now)
        && let Some(rec) = &t.write
        && write_record(conn, Some(&claim), rec, Guard::Held)? == 1
    {
        held.note(key, rec);
        if let Some(entry) = &t.audit {
            append_audit(conn, entry)?;
        }
        return Ok(Ok(t.outcome));
    }
    let current = match read_row(conn, key)? {
        Ok(rec) => rec,
        Err(e) => return Ok(Err(e)),
    };
    let t = match transition(key, current.as_ref(), op, now) {
        Ok(t) => t,
        Err(rejected) => return Ok(Err(rejected.into())),
    };
    if let Some(rec) = &t.write {
        write_record(conn, current.as_ref(), rec, Guard::Read)?;
        held.note(key, rec);
        if let Some(entry) = &t.audit {
            append_audit(conn, entry)?;
        }
    }
    Ok(Ok(t.outcome))
}

/// How [`SqliteStore::gc`] sizes its chunks: every other write of every process waits for a
/// garbage-collection transaction, so it deletes in chunks, each its own write, and writers
/// queued meanwhile go between two chunks. 256 records at first, 16 to 10,000, each chunk to
/// take about 25 ms ([`super::GcPace`]): a record deleted from a large journal costs from a few
/// µs to ~150 µs (its pages in three B-trees, read and written; BENCHMARKS.md, "Growth"), so a
/// fixed size would hold the lock for a millisecond on one journal and a second on another.
const GC_PACE: super::GcPace = super::GcPace::new(256, 16, 10_000, Duration::from_millis(25));

/// Write the row `name` of `effect_tool_meta`: replace its value when `replace` (and only if it
/// changed), else only create it (the first writer wins).
fn put_meta_in_tx(conn: &Connection, name: &str, value: &str, replace: bool) -> rusqlite::Result<()> {
    let sql = if replace {
        "INSERT INTO effect_tool_meta (name, value) VALUES (?1, ?2)
         ON CONFLICT (name) DO UPDATE SET value = excluded.value WHERE value <> excluded.value"
    } else {
        "INSERT INTO effect_tool_meta (name, value) VALUES (?1, ?2) ON CONFLICT (name) DO NOTHING"
    };
    conn.execute(sql, params![name, value]).map(drop)
}

/// Delete up to `limit` collectable records; how many were deleted.
fn gc_in_tx(conn: &Connection, now: Millis, limit: u64) -> rusqlite::Result<u64> {
    // The SQL form of `store::collectable`; records of another version are left alone. The
    // candidates come from the `expires_at` index, oldest first.
    static GC: LazyLock<String> = LazyLock::new(|| {
        format!(
            "DELETE FROM effect_records WHERE key IN (
                SELECT key FROM effect_records
                WHERE version = ?2 AND {}
                ORDER BY expires_at LIMIT ?3)",
            super::collectable_sql("?1")
        )
    });
    let n = conn
        .prepare_cached(&GC)?
        .execute(params![now, RECORD_VERSION, i64::try_from(limit).unwrap_or(i64::MAX)])?;
    Ok(n as u64)
}

/// How many operations the write connection applies between two background checkpoints (an
/// operation appends one to a dozen pages to the WAL; see [`autocheckpoint_pages`]).
const CHECKPOINT_EVERY_OPS: usize = 128;

/// The WAL size (in pages) at which SQLite checkpoints in the committing caller's transaction.
///
/// The background checkpoints copy frames into the database file, but under a steady stream
/// of writes they never let the WAL start over: it restarts only when a write begins with every
/// frame already copied, which a checkpoint running beside the writer does not reach. So this
/// checkpoint, in a commit, is what bounds the WAL file, and it runs every so many calls (about
/// every 1,200 new calls at 10,000 pages), with two fsyncs. SQLite's default, 1,000 pages,
/// would run it ten times as often.
///
/// - `FULL`: 10,000 pages (~40 MB of WAL at most). Each commit's own fsync dwarfs this
///   checkpoint's share: 4 times the bound measured no faster.
/// - `NORMAL`: 40,000 pages (~160 MB). With no fsync per commit, this checkpoint was 5.8% of
///   the writing thread's time at 10,000, and a sequential new call 15% slower than at 40,000
///   (BENCHMARKS.md). NORMAL is chosen for speed; its docs say what the WAL may grow to.
fn autocheckpoint_pages(synchronous: Synchronous) -> usize {
    match synchronous {
        Synchronous::Full => 10_000,
        Synchronous::Normal => 40_000,
    }
}

/// The checkpoint thread: copy committed WAL frames into the database file when the writer
/// asks, without blocking it (`PASSIVE` waits for no lock, and skips frames a reader still
/// needs). It syncs the database file as the connection's `synchronous` setting says before
/// the WAL is reused, as SQLite's own automatic checkpoints do: durability is unchanged. Then,
/// under `FULL`, it keeps the WAL file ahead of the frames written ([`WalAhead`]).
fn checkpoint_loop(conn: Connection, asked: mpsc::Receiver<()>, ahead: Option<WalAhead>) {
    while asked.recv().is_ok() {
        let done = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
            Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?, r.get::<_, i64>(2)?))
        });
        match done {
            Ok((_, frames, _)) => {
                if let Some(ahead) = &ahead {
                    ahead.keep_ahead(&conn, u64::try_from(frames).unwrap_or(0));
                }
            }
            Err(e) => {
                tracing::debug!(error = %e, "a background SQLite checkpoint failed; the next one, or the writer, will do it")
            }
        }
    }
}

/// How far ahead of the last frame written the WAL file is kept (bytes), at least.
const WAL_AHEAD_LOW: u64 = 4 << 20;
/// How much the WAL file is extended by at a time (bytes).
const WAL_AHEAD_STEP: u64 = 4 << 20;

/// Keeps the WAL file longer than the frames in it, with blocks already written (zeros), so
/// that a commit's fsync under `synchronous = FULL` does not also extend the file.
///
/// A commit that appends past the file's end makes its fsync write the file system's metadata
/// too (the new blocks, the file's size: on ext4 a journal commit), which measured about twice
/// the cost of an fsync that overwrites blocks the file already has (BENCHMARKS.md, "a fresh
/// journal"). The WAL grows until SQLite's checkpoint in a commit lets it start over
/// ([`autocheckpoint_pages`]), then is rewritten from its start; every new journal, and every
/// journal opened again (the last connection to close removes the WAL), went through that
/// growth: its first ~2,000 new calls.
///
/// Safe beside SQLite: the zeros are written past the file's end only while this connection
/// holds the write lock (`BEGIN IMMEDIATE`, then `ROLLBACK`: nothing is written to the
/// journal), so no frame is appended meanwhile, and SQLite reads a WAL only up to its last valid
/// frame (a zero frame ends recovery, as the end of the file does). The WAL has no locks of its
/// own (they are on the `-shm` file), so opening and closing it here releases none of SQLite's.
/// The extension is synced here, on the checkpoint thread, not by a caller's commit.
struct WalAhead {
    wal: PathBuf,
    /// A frame's size: the page and its 24-byte header.
    frame: u64,
    /// The most the WAL reaches before SQLite's checkpoint in a commit starts it over (bytes).
    bound: u64,
}

impl WalAhead {
    /// `None` unless the journal is a file with `synchronous = FULL` (with `NORMAL`, commits do
    /// not fsync, and the WAL's bound is four times larger).
    fn new(path: &Path, options: &SqliteOptions, conn: &Connection) -> Option<WalAhead> {
        let name = path.to_string_lossy();
        if options.synchronous != Synchronous::Full || name.starts_with("file:") || name == ":memory:" {
            return None;
        }
        // The name SQLite gives the WAL: its own full path of the journal, with `-wal`.
        let file: String = conn
            .query_row("SELECT file FROM pragma_database_list WHERE name = 'main'", [], |r| {
                r.get(0)
            })
            .ok()?;
        let page: i64 = conn.query_row("PRAGMA page_size", [], |r| r.get(0)).ok()?;
        let frame = u64::try_from(page).ok()? + 24;
        Some(WalAhead {
            wal: PathBuf::from(format!("{file}-wal")),
            frame,
            bound: 32 + (autocheckpoint_pages(options.synchronous) as u64 + 256) * frame,
        })
    }

    /// After a checkpoint found `frames` frames in the WAL: extend the file if its end is near.
    fn keep_ahead(&self, conn: &Connection, frames: u64) {
        let end = 32 + frames * self.frame;
        let Ok(len) = std::fs::metadata(&self.wal).map(|m| m.len()) else {
            return;
        };
        if len >= self.bound || end + WAL_AHEAD_LOW <= len {
            return;
        }
        if let Err(e) = self.extend(conn, (end.max(len) + WAL_AHEAD_STEP).min(self.bound)) {
            tracing::debug!(error = %e, wal = %self.wal.display(), "could not extend the SQLite WAL ahead of its writes");
        }
    }

    fn extend(&self, conn: &Connection, to: u64) -> Result<(), Box<dyn std::error::Error>> {
        use std::io::{Seek, SeekFrom, Write};
        let mut file = std::fs::OpenOptions::new().write(true).open(&self.wal)?;
        conn.execute_batch("BEGIN IMMEDIATE")?;
        let written = (|| -> std::io::Result<()> {
            // Under the write lock: the file's end is where the zeros may go.
            let len = file.metadata()?.len();
            if len < to {
                file.seek(SeekFrom::Start(len))?;
                let zeros = vec![0u8; 256 << 10];
                let mut at = len;
                while at < to {
                    let n = (to - at).min(zeros.len() as u64) as usize;
                    file.write_all(&zeros[..n])?;
                    at += n as u64;
                }
            }
            Ok(())
        })();
        conn.execute_batch("ROLLBACK")?;
        written?;
        file.sync_data()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> (PathBuf, PathBuf) {
        let dir = std::env::temp_dir().join(format!("effect-tool-sqlite-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("j.db");
        (dir, path)
    }

    fn indexes(conn: &Connection) -> Vec<String> {
        let mut st = conn
            .prepare("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'effect_records' AND sql IS NOT NULL ORDER BY name")
            .unwrap();
        st.query_map([], |r| r.get(0)).unwrap().map(Result::unwrap).collect()
    }

    #[tokio::test]
    async fn a_version_1_journal_is_migrated_with_its_records() {
        use crate::decide::record::{Intent, RecordState};
        use crate::store::StoreExt;
        let (dir, path) = scratch("migrate");
        // A journal as version 1 wrote it, with a record in doubt.
        {
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch("PRAGMA journal_mode = WAL;").unwrap();
            conn.execute_batch(SCHEMA_V1).unwrap();
            conn.execute_batch(
                "CREATE TABLE effect_tool_meta (name TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL);
                 INSERT INTO effect_tool_meta VALUES ('schema_version', '1');
                 PRAGMA user_version = 1;",
            )
            .unwrap();
            conn.execute(
                &format!("INSERT INTO effect_records ({}) VALUES ('k', 1, 'refund', 'irreversible', 'run', NULL, NULL, 'f', '{{\"n\":1}}', 'in-doubt', 1, NULL, NULL, 'crashed', NULL, NULL, 1, 2, NULL)", COLUMNS.trim_end_matches(", call_ids, holder")),
                [],
            )
            .unwrap();
            assert!(indexes(&conn).contains(&"effect_records_state".to_owned()));
        }
        let store = SqliteStore::open(&path).unwrap();
        let rec = store
            .get("k")
            .await
            .unwrap()
            .expect("the record survives the migration");
        assert_eq!(
            (rec.state, rec.reason.as_deref()),
            (RecordState::InDoubt, Some("crashed"))
        );
        let doubts = store
            .list(&Filter {
                states: vec![RecordState::InDoubt],
                ..Filter::default()
            })
            .await
            .unwrap();
        assert_eq!(doubts.len(), 1);
        // And the migrated journal takes new calls.
        let intent = Intent {
            tool: "refund".into(),
            class: crate::EffectClass::Idempotent,
            run_id: "run".into(),
            thread_id: None,
            call_id: None,
            fingerprint: "g".into(),
            input: serde_json::json!({"n": 2}),
            ttl_ms: None,
            approval: None,
            approval_ttl_ms: None,
            holder: None,
        };
        assert!(matches!(
            store.claim("k2", intent, 60_000, false).await.unwrap(),
            OpOutcome::Claimed { attempt: 1, .. }
        ));
        drop(store);
        let conn = Connection::open(&path).unwrap();
        assert_eq!(
            indexes(&conn),
            [
                "effect_records_awaiting",
                "effect_records_expires",
                "effect_records_in_doubt",
                "effect_records_run"
            ]
        );
        let version: String = conn
            .query_row(
                "SELECT value FROM effect_tool_meta WHERE name = 'schema_version'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(version, SCHEMA_VERSION.to_string());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn lists_of_records_a_person_must_act_on_use_an_index() {
        let (dir, path) = scratch("plan");
        drop(SqliteStore::open(&path).unwrap());
        let conn = Connection::open(&path).unwrap();
        let plan = |states: Vec<RecordState>| {
            let filter = Filter {
                states,
                ..Filter::default()
            };
            // The SQL `list_records` runs, planned instead of run.
            let (sql, _) = list_sql(&filter);
            let mut st = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
            let rows: Vec<String> = st.query_map([], |r| r.get(3)).unwrap().map(Result::unwrap).collect();
            rows.join("; ")
        };
        let doubts = plan(vec![RecordState::InDoubt]);
        assert!(doubts.contains("effect_records_in_doubt"), "{doubts}");
        let both = plan(vec![RecordState::InDoubt, RecordState::AwaitingApproval]);
        assert!(
            both.contains("effect_records_in_doubt") && both.contains("effect_records_awaiting"),
            "{both}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_journal_of_a_newer_schema_is_refused_untouched() {
        let dir = std::env::temp_dir().join(format!("effect-tool-sqlite-schema-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("j.db");
        let _ = std::fs::remove_file(&path);
        drop(SqliteStore::open(&path).unwrap());
        let conn = Connection::open(&path).unwrap();
        let newer = SCHEMA_VERSION + 1;
        conn.execute(
            "UPDATE effect_tool_meta SET value = ?1 WHERE name = 'schema_version'",
            [newer.to_string()],
        )
        .unwrap();
        drop(conn);
        let err = SqliteStore::open(&path).unwrap_err().to_string();
        assert!(err.contains(&format!("schema version {newer}")), "{err}");
        assert!(err.contains("upgrade effect-tool"), "{err}");
        let conn = Connection::open(&path).unwrap();
        let v: String = conn
            .query_row(
                "SELECT value FROM effect_tool_meta WHERE name = 'schema_version'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(v, newer.to_string());
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Valid frames at the start of a WAL file (its header's salts and page size), and the
    /// file's length.
    fn wal_frames(wal: &Path) -> (u64, u64) {
        let bytes = std::fs::read(wal).unwrap();
        let be32 = |at: usize| u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap());
        let page = be32(8) as usize;
        let salt = (be32(16), be32(20));
        let (mut frames, mut at) = (0, 32);
        while at + 24 + page <= bytes.len() && (be32(at + 8), be32(at + 12)) == salt {
            frames += 1;
            at += 24 + page;
        }
        (frames, bytes.len() as u64)
    }

    /// Under `FULL`, the checkpoint thread keeps the WAL file longer than its frames (zeros past
    /// them), and a journal whose WAL ends in those zeros opens with every record (a copy of
    /// the files without the `-shm`, as a crash or a power loss leaves them: SQLite recovers
    /// the WAL and stops at the first zero frame).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_wal_is_kept_ahead_of_its_frames_and_recovers_before_the_zeros() {
        use crate::decide::record::{Intent, RecordState};
        use crate::store::StoreExt;
        let (dir, path) = scratch("wal-ahead");
        let store = SqliteStore::open(&path).unwrap();
        let wal = PathBuf::from(format!("{}-wal", path.display()));
        let intent = Intent {
            class: crate::EffectClass::Irreversible,
            ..writer::tests::intent()
        };
        // Enough writes for a few background checkpoints, so that the thread has extended it.
        for i in 0..300 {
            let key = format!("k{i}");
            store.claim(&key, intent.clone(), 60_000, false).await.unwrap();
            store.complete(&key, 1, serde_json::json!(i)).await.unwrap();
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let (frames, len) = loop {
            let (frames, len) = wal_frames(&wal);
            if len >= 32 + frames * 4120 + WAL_AHEAD_LOW {
                break (frames, len);
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the WAL was never extended: {frames} frames, {len} bytes"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        assert!(frames > 0);
        // Past the frames ever written (a WAL that started over keeps older frames after its
        // new ones): zeros.
        let bytes = std::fs::read(&wal).unwrap();
        let tail = &bytes[(len - WAL_AHEAD_LOW) as usize..];
        assert!(
            tail.iter().all(|b| *b == 0),
            "the WAL's last bytes are zeros ({frames} frames, {len} bytes)"
        );

        // As a crash leaves it: the journal and its WAL, no shared memory.
        let copy = dir.join("copy");
        std::fs::create_dir_all(&copy).unwrap();
        std::fs::copy(&path, copy.join("j.db")).unwrap();
        std::fs::write(copy.join("j.db-wal"), &bytes).unwrap();
        let reopened = SqliteStore::open(copy.join("j.db")).unwrap();
        for i in 0..300 {
            let rec = reopened
                .get(&format!("k{i}"))
                .await
                .unwrap()
                .expect("every record survives");
            assert_eq!(
                (rec.state, rec.output),
                (RecordState::Completed, Some(serde_json::json!(i)))
            );
        }
        // And it goes on writing over the zeros.
        reopened.claim("after", intent, 60_000, false).await.unwrap();
        drop((store, reopened));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
