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
//! Every table, column and meta row, and how the version moves, is written down in
//! [`docs/journal-format.md`](https://github.com/effect-tool/effect-tool/blob/main/docs/journal-format.md#sqlite).
//! In short:
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
    shared: Arc<Inner>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.shared.path)
            .field("options", &self.shared.options)
            .finish_non_exhaustive()
    }
}

struct Inner {
    path: PathBuf,
    options: SqliteOptions,
    writer: Mutex<writer::Writer>,
    /// Asks the checkpoint thread for a checkpoint (it stops when this is dropped).
    checkpoint: mpsc::SyncSender<()>,
    readers: Mutex<Vec<Connection>>,
    /// The journal's clock (the system's, unless a simulation set one).
    clock: super::StoreClock,
}

mod checkpoint;
mod grants;
mod rows;
mod schema;
mod statements;
mod store;
mod transaction;
mod writer;

use checkpoint::*;
use rows::*;
/// The SQLite bindings the store is built on, for a transactional tool's writes
/// ([`SqliteTransaction::with`] hands it a `rusqlite::Connection`): the same version, whatever
/// the application depends on.
pub use rusqlite;
pub use schema::SCHEMA_VERSION;
use schema::*;
use statements::*;
pub use transaction::SqliteTransaction;

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
            shared: Arc::new(Inner {
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
            writer::Answer::Gc(_) | writer::Answer::PutMeta(_) | writer::Answer::Spend(_) => {
                unreachable!("an operation is answered as one")
            }
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

impl Inner {
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

/// How [`SqliteStore::gc`] sizes its chunks: every other write of every process waits for a
/// garbage-collection transaction, so it deletes in chunks, each its own write, and writers
/// queued meanwhile go between two chunks. 256 records at first, 16 to 10,000, each chunk to
/// take about 25 ms ([`super::GcPace`]): a record deleted from a large journal costs from a few
/// µs to ~150 µs (its pages in three B-trees, read and written; BENCHMARKS.md, "Growth"), so a
/// fixed size would hold the lock for a millisecond on one journal and a second on another.
const GC_PACE: super::GcPace = super::GcPace::new(256, 16, 10_000, Duration::from_millis(25));

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
    async fn an_output_schema_is_written_through_the_writer_whose_error_names_the_lock_it_waited_for() {
        let (dir, path) = scratch("schema-writer");
        let options = SqliteOptions {
            busy_timeout: Duration::from_millis(50),
            ..Default::default()
        };
        let store = SqliteStore::open_with(&path, options).unwrap();
        let schema = serde_json::json!({ "type": "string" });
        // Another process's write transaction holds SQLite's write lock.
        let other = Connection::open(&path).unwrap();
        other.execute_batch("BEGIN IMMEDIATE").unwrap();
        let err = store.put_output_schema("t", &schema).await.unwrap_err().to_string();
        assert!(
            err.contains("stayed locked by another process") && err.contains("nothing was written"),
            "the writer's answer, not a read connection's: {err}"
        );
        other.execute_batch("ROLLBACK").unwrap();
        store.put_output_schema("t", &schema).await.unwrap();
        assert_eq!(store.output_schema("t").await.unwrap(), Some(schema));
        drop((store, other));
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test]
    async fn a_marker_secret_is_created_through_the_writer_and_read_the_same_after() {
        let (dir, path) = scratch("secret-writer");
        let options = SqliteOptions {
            busy_timeout: Duration::from_millis(50),
            ..Default::default()
        };
        let store = SqliteStore::open_with(&path, options).unwrap();
        let other = Connection::open(&path).unwrap();
        other.execute_batch("BEGIN IMMEDIATE").unwrap();
        let err = store.marker_secret().await.unwrap_err().to_string();
        assert!(
            err.contains("stayed locked by another process") && err.contains("nothing was written"),
            "the writer's answer, not a read connection's: {err}"
        );
        other.execute_batch("ROLLBACK").unwrap();
        let made = store.marker_secret().await.unwrap().unwrap();
        let again = SqliteStore::open(&path)
            .unwrap()
            .marker_secret()
            .await
            .unwrap()
            .unwrap();
        assert_eq!(made.to_hex(), again.to_hex());
        drop((store, other));
        let _ = std::fs::remove_dir_all(dir);
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
