//! The PostgreSQL journal: many workers on many machines sharing one journal.
//!
//! ```no_run
//! # async fn demo() -> Result<(), effect_tool_core::StoreError> {
//! use effect_tool_core::Engine;
//! use effect_tool_core::store::postgres::PostgresStore;
//!
//! let store = PostgresStore::connect("postgres://app@db.internal/app").await?;
//! let engine = Engine::new(store);
//! # Ok(()) }
//! ```
//!
//! The schema's tables and columns, its migrations, and what the store promises per effect
//! class are written down in
//! [`docs/journal-format.md`](https://github.com/effect-tool/effect-tool/blob/main/docs/journal-format.md#postgresql).
//!
//! # Guarantees
//!
//! - **Its own schema** (`effect_tool` by default, [`PgOptions::schema`]) in an existing
//!   database. The backend creates and upgrades it itself with versioned migrations, recorded
//!   in `<schema>.migrations` and applied under an advisory lock so workers starting together
//!   do not race; [`PostgresStore::migration_sql`] prints the same SQL for a DBA who prefers to
//!   run it by hand (the backend then finds it applied and only checks it).
//! - **Atomic claims across machines.** Every operation reads the record, runs the one state
//!   machine ([`crate::decide::record::transition`]) and writes the result with a compare-and-set:
//!   `INSERT … ON CONFLICT (key) DO NOTHING` when there was no record, else `UPDATE … WHERE key
//!   = $1 AND row_version = $n AND attempt = $m AND holder IS NOT DISTINCT FROM $h` (every
//!   write takes a fresh `row_version` from a sequence, so the write lands only if nothing
//!   changed the record since it was read; the attempt number fences out late writers). The
//!   holder is in the compare too: a claim committed without waiting for the WAL flush can be
//!   lost in a crash together with the sequence values it used, so a row version can be handed
//!   out again, and another worker's fresh claim can carry the very `(row_version, attempt)` a
//!   worker still holds from before the crash; its holder (a random id per engine instance)
//!   differs, and the stale write finds nothing to change. A lost race is retried from the read. The audit
//!   entry of the operation is appended in the same statement (a data-modifying CTE), so the
//!   record and its audit line commit together. This is as atomic as `SELECT … FOR UPDATE` in a
//!   transaction, holds no row lock across round trips, and takes two round trips instead of
//!   four.
//! - **Fast paths.** A claim is first tried as one statement that inserts the record if the key
//!   is new and otherwise returns the existing record: a new key is claimed, and a recorded
//!   result is replayed, in one round trip. The claim holder's next write (renew, complete,
//!   release, mark in doubt) is a compare-and-set against the row version it wrote itself, also
//!   one round trip; if anything else changed the record in between, it falls back to reading.
//! - **Group commit.** A store's write goes alone as above only while no batch is being sent
//!   or queued and fewer than four of its writes are in flight alone (a sequential caller pays
//!   one round trip). Otherwise new-key claims and holders' writes queue, and a task sends
//!   all that is queued as one statement (the same insert and compare-and-set, over arrays)
//!   and one commit, then answers each caller what it would have
//!   been answered alone, and takes what queued meanwhile. A second such task, so that one
//!   statement runs while the other's commit is flushed, starts only for a queue worth a
//!   commit of its own (half the last statement's items, at least 8); many concurrent callers
//!   then share round trips and WAL flushes instead of queueing for pooled connections. A row
//!   the server refuses rolls its statement back, and the others of that statement are then
//!   written alone.
//! - **Durable, as the class asks.** Every write commits before its caller is answered, and
//!   waits for its WAL flush (the server's `synchronous_commit`), except the claim of an
//!   idempotent tool ([`Op::needs_flush`]): its statement sets `synchronous_commit = off` for
//!   its own transaction (`set_config(…, true)`, `SET LOCAL` as a function, so the claim stays
//!   one round trip; a group commit of only such claims does the same). That is the claim
//!   fast path (a new key); a claim that takes over a record goes the read-then-write path
//!   and waits for its flush, as every other write. Committed, it is seen by
//!   every worker at once; a crash of the server before the WAL writer flushes it (within
//!   three times `wal_writer_delay`, 600 ms by default) may lose it. That is safe: a lost
//!   claim only means the call runs again with the same key, which an idempotent tool allows,
//!   and it cannot be lost while a later write survives: PostgreSQL's WAL is one ordered log,
//!   and the record's commit (synchronous) flushes the WAL up to its own commit record, which
//!   comes after the claim's (the record updates the row the claim inserted). Recovery replays
//!   a prefix of the log. Compensable and irreversible claims, records, and a person's
//!   decisions wait for the flush as before. A worker's own death (SIGKILL) loses nothing the
//!   server has committed.
//! - **Leases on the database's clock.** Reads return `clock_timestamp()`, which is the `now`
//!   given to the state machine for writes based on that read; [`Store::now`] is the local clock
//!   corrected by the offset to the database's clock measured on every read (so fast-path writes
//!   and the engine's waits are on the database's clock too, within a round trip).
//! - **Append-only audit:** a trigger refuses updates and deletes of `<schema>.audit`.
//! - Records are columns and `json` (exact text, so outputs round-trip byte for byte), with a
//!   `version` column; a record of a newer version is refused with
//!   [`StoreError::UnsupportedVersion`] and left untouched.
//!
//! # Timeouts
//!
//! Every wait is bounded, so a server that stops answering gives an error, never a hang:
//! opening a connection by [`PgOptions::connect_timeout`], waiting for a pooled one by
//! [`PgOptions::wait_timeout`], and one operation's statements by
//! [`PgOptions::statement_timeout`] (10 s by default). The last is checked by the client, so it
//! holds when the server cannot enforce its own `statement_timeout` (stopped, partitioned away,
//! a dead TCP peer). An operation past it fails with [`StoreError::Backend`] whose outcome is
//! unknown (the server may still commit what it was sent), exactly as a lost connection's; its
//! connection is closed rather than pooled, so the next caller does not wait behind it. The
//! engine treats that error as it treats a lost connection: a claim whose answer was lost is
//! released once the journal answers again, and a record write is retried within
//! [`crate::Engine::with_store_retry`]'s window. `gc` deletes in chunks, each its own statement
//! and transaction, sized to take about 100 ms each (from 1,000 records, halving after a slower
//! chunk and doubling after a fast one, between 100 and 10,000), so a large collection fits the
//! same bound and holds its row locks (which a claim of a collected key waits for) briefly.
//!
//! A server-side `statement_timeout` shorter than this one (`ALTER ROLE app SET
//! statement_timeout = '5s'`) turns a slow statement into a clean error (rolled back, outcome
//! known) before the client gives up on it.
//!
//! # Connection settings
//!
//! The URL (`postgres://user:password@host:port/db?...`) or a key=value conninfo string
//! (`host=db user=app dbname=app`). What it leaves out is read as libpq reads it: `PGHOST`,
//! `PGPORT`, `PGUSER`, `PGDATABASE`, `PGAPPNAME`, `PGPASSWORD` or the password file
//! (`PGPASSFILE`, `~/.pgpass`, only when the group and others cannot read it), and `PGSSLMODE`,
//! `PGSSLROOTCERT`, `PGSSLCERT` and `PGSSLKEY` when neither the URL nor [`PgOptions`] sets them.
//!
//! - `application_name=…` names the store's sessions in `pg_stat_activity` (default
//!   `effect-tool`, or `PGAPPNAME`).
//! - `options=-c statement_timeout=5000` (URL-encoded: `options=-c%20statement_timeout%3D5000`)
//!   sets server settings for the store's sessions, as with libpq: a server-side statement
//!   timeout shorter than [`PgOptions::statement_timeout`] turns a statement stuck behind a
//!   lock into a clean error (`57014`). PgBouncer refuses `options` unless its
//!   `ignore_startup_parameters` lists it; set the timeout on the role there (`ALTER ROLE app
//!   SET statement_timeout = '5s'`).
//! - Several hosts (`host=a,b port=5432,5432 target_session_attrs=read-write`, or
//!   `postgres://app@a:5432,b:5432/app?target_session_attrs=read-write`) are tried in order; with
//!   `read-write` a standby is passed over, so after a failover the promoted server is found.
//!   See [Failover](self#failover).
//! - `pgbouncer=true`: the connections go through a pooler in transaction mode. See
//!   [Poolers](self#poolers).
//!
//! # TLS
//!
//! Connections use TLS through rustls (no OpenSSL needed), with libpq's `sslmode` and root
//! file, exactly as libpq uses them (the table is in the `tls` module's source docs):
//! `disable` (plain), `prefer` (the default: TLS if the server offers it), `require` (TLS),
//! `verify-ca` (the certificate must chain to the root file) and `verify-full` (and name the
//! host). The root file is `sslrootcert=PATH` in the URL, [`PgOptions::ssl_root_cert`] or
//! `PGSSLROOTCERT`, else libpq's default `~/.postgresql/root.crt` when it exists; `prefer` and
//! `require` check the chain against it too when there is one (and nothing when there is
//! none), the verifying modes refuse to connect without one. The platform's trusted roots are
//! used only when asked for, with `sslrootcert=system` (which implies `verify-full`, as in libpq
//! 16). Managed servers (RDS, Cloud SQL, Azure, Supabase, ...) work with
//! `?sslmode=verify-full&sslrootcert=/path/to/their-ca.pem`, publicly signed ones (Neon, ...)
//! with `?sslrootcert=system`. A root file that is named and missing is an error (libpq would
//! go on unchecked in `prefer` and `require`).
//!
//! - **`prefer` falls back to plain TCP** when the TLS attempt fails after the server accepted
//!   TLS (a failed handshake, or the server refusing the encrypted session, e.g. a `hostnossl`
//!   rule), as libpq does; `require` and the verifying modes never do.
//! - **Client certificates** (mTLS, for `clientcert=verify-ca|verify-full` or `cert`
//!   authentication in `pg_hba.conf`): `sslcert=PATH&sslkey=PATH` in the URL (or
//!   [`PgOptions::ssl_cert`] and [`PgOptions::ssl_key`], or `PGSSLCERT` and `PGSSLKEY`), PEM
//!   files: the certificate (with its chain) and an unencrypted private key (PKCS#8, PKCS#1 or
//!   SEC1). As libpq: with none named, `~/.postgresql/postgresql.crt` and `postgresql.key` are
//!   used when the certificate exists; a key the group or others may read is refused (0600, or
//!   0640 owned by root). Unlike libpq, a certificate named explicitly must exist (libpq goes on
//!   without it), and encrypted keys (`sslpassword`) are not supported.
//!
//! ```no_run
//! # async fn demo() -> Result<(), effect_tool_core::StoreError> {
//! use effect_tool_core::store::postgres::PostgresStore;
//!
//! let url = "postgres://app@db.example.com/app?sslmode=verify-full&sslrootcert=/etc/effect-tool/db-ca.pem";
//! let store = PostgresStore::connect(url).await?;
//! # Ok(()) }
//! ```
//!
//! # Poolers
//!
//! In front of the server, a pooler in session mode (PgBouncer's `pool_mode = session`) needs
//! nothing. In **transaction mode** (`pool_mode = transaction`, the usual PgBouncer setup;
//! Supavisor's and RDS Proxy's pinning-free mode are alike) each transaction may run in another
//! server session, so add `pgbouncer=true` to the URL ([`PgOptions::transaction_pooler`]):
//!
//! - **Prepared statements**: none. Every statement is sent unnamed with its parameter types
//!   (parse, bind, execute and sync in one round trip), so it never depends on an earlier
//!   transaction's session. Without `pgbouncer=true`, a statement prepared in one session and
//!   run in another fails with `26000` or `42P05`, and the error says to add it.
//! - **`SET`**: none at session level. The idempotent claim's `synchronous_commit = off` is
//!   `set_config(…, true)` inside its own statement (transaction-local); connection settings go
//!   in the startup packet (`application_name`, which PgBouncer tracks) or on the role.
//! - **Advisory locks**: only `pg_advisory_xact_lock`, transaction-scoped (migrations and the
//!   marker secret, each in one transaction), which transaction mode carries whole.
//! - **`LISTEN`**: impossible in transaction mode (the session is handed on after the
//!   statement). The store does not listen; [`Store::changed`] never completes, and a task
//!   waiting for a person's decision ([`crate::RunHandle::wait_for_approval`]) polls the record
//!   (from 20 ms, doubling to 1 s). Decisions still send `NOTIFY`, for stores connected directly.
//!
//! The conformance suite runs through a real PgBouncer 1.18 in transaction mode
//! (`tests/pg_production/bouncer.rs`). PgBouncer's own limits apply: a statement must finish
//! within its `query_timeout` if set, and `max_client_conn` must allow the pool of every worker
//! ([`PgOptions::pool_size`] each).
//!
//! # Failover
//!
//! With a primary and standbys (Patroni, RDS or Cloud SQL high availability, a DNS name or
//! proxy that follows the primary, or a multi-host string with
//! `target_session_attrs=read-write`), a failover looks like this to the store:
//!
//! - **Connections in flight fail.** An operation whose connection dies, or that was still
//!   waiting for its answer, fails with [`StoreError::Backend`], and its outcome is **unknown**,
//!   never "not written": a `COMMIT` may have reached the old primary (and, with synchronous
//!   replication, the standby). The engine then looks its claim up again, or retries its
//!   record write within [`crate::Engine::with_store_retry`]'s window. An error the server
//!   sent is taken as a rollback only when it is a plain `ERROR`; `FATAL` (the session ended,
//!   e.g. while a commit waited for a synchronous standby, when PostgreSQL has committed
//!   locally), connection exceptions (`08`), operator interventions (`57`), `40003` and
//!   internal errors (`XX`) are unknown outcomes.
//! - **Reconnecting with backoff.** Once a store has connected, new connections that fail are
//!   tried again after 25 ms, doubling to 1 s, all callers of a store sharing one schedule, for
//!   up to [`PgOptions::connect_timeout`] per operation, so calls made during the failover wait
//!   for the new primary instead of failing at once. (A store that never reached its server
//!   fails at once: `connect_with` says so.) Pooled connections to the old primary are
//!   dropped as they are found closed.
//! - **What survives.** With synchronous replication (`synchronous_standby_names` and the
//!   default `synchronous_commit = on`), every write the store acknowledged, except an
//!   idempotent tool's claim (committed without waiting for the flush, see above), is on the
//!   standby before the caller hears of it. With asynchronous replication, the last writes the
//!   old primary acknowledged may be missing on the new one: a lost claim of a compensable or
//!   irreversible tool whose effect happened is then an effect the journal does not know about.
//!   Use synchronous replication for those tools.
//!
//! `tests/pg_production/failover.rs` kills a primary (SIGKILL of its postmaster) under four
//! worker processes calling tools of every class against a multi-host string, promotes its
//! synchronous standby, and checks against the workers' own ledgers that no compensable or
//! irreversible effect happened twice, no result a worker received is missing from the new
//! primary, and every completed record was written by the attempt that ran. Measured on a
//! loaded 2-core machine: no call was recorded for 150 to 170 ms around the kill, the
//! promotion (`pg_ctl promote`) took about 200 ms, and every worker recorded calls again within
//! 50 ms of it.
//!
//! # Waiting for a person
//!
//! A person's decision (approve, deny, resolve, amend) sends the record's key with `NOTIFY` on
//! the channel `effect_tool.<schema>`, from the statement that writes the decision (delivered
//! only if it commits). [`Store::changed`] listens on a connection of its own, outside the pool,
//! opened on first use and opened again with backoff when lost (every waiter is then woken once,
//! as a decision may have been missed); so a task waiting in one process wakes when a person
//! decides through another. Not behind a transaction pooler (see [Poolers](self#poolers)).
//!
//! # Compatibility
//!
//! What the store relies on, for users of PostgreSQL-compatible databases to judge (only
//! PostgreSQL 15, and PgBouncer 1.18 in front of it, are tested here; no compatible database
//! is claimed):
//!
//! - PostgreSQL 11 or later by the features used (the newest is `EXECUTE FUNCTION` in
//!   `CREATE TRIGGER`), tested on 15 only; the extended query protocol, with named prepared
//!   statements unless [`PgOptions::transaction_pooler`].
//! - SQL: `INSERT … ON CONFLICT (key) DO NOTHING … RETURNING`, data-modifying common table
//!   expressions (`WITH … AS (INSERT|UPDATE|DELETE … RETURNING …)`) whose results are joined and
//!   unioned in one statement, `unnest` of several arrays `WITH ORDINALITY`, `= ANY($n)` over a
//!   `text[]`, `LEFT JOIN` against a one-row subquery, `count(*)` over a deleting CTE.
//! - Types: `text`, `integer`, `bigint`, `json` (kept as exact text), `timestamptz` (the
//!   migrations table), a `SEQUENCE` with `nextval`, `bigserial`.
//! - Functions: `clock_timestamp()`, `extract(epoch from …)`, `set_config(name, value, true)`
//!   (for `synchronous_commit`), `pg_advisory_xact_lock`, `hashtext`, `pg_notify`.
//! - DDL: `CREATE SCHEMA`, tables `WITH (fillfactor = 80)`, a partial index, `COMMENT ON`, a
//!   PL/pgSQL trigger function (`RAISE EXCEPTION`) with a `BEFORE UPDATE OR DELETE … FOR EACH
//!   ROW` trigger, and the catalogs `pg_namespace` and `pg_tables`.
//! - Behaviour: `READ COMMITTED` statements that see rows committed after their snapshot when
//!   `ON CONFLICT` finds them; `synchronous_commit` set per transaction; one ordered WAL (the
//!   durability argument above); `LISTEN`/`NOTIFY` (optional: without them waiters poll).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::{Manager, Pool, QueueMode, Runtime};
use tokio_postgres::types::ToSql;

/// `$body`, a future that uses the pooled connection `$client`, bounded by
/// [`PgOptions::statement_timeout`]: past it, the connection is closed instead of pooled (see
/// [`PostgresStore::abandon`]) and the operation fails with an unknown outcome.
macro_rules! bounded {
    ($store:expr, $client:ident, $body:expr) => {
        match tokio::time::timeout($store.shared.options.statement_timeout, $body).await {
            Ok(result) => result,
            Err(_) => Err($store.abandon($client)),
        }
    };
}

mod batch;
mod connect;
mod grants;
mod libpq;
mod listen;
mod query;
mod rows;
mod schema;
mod settings;
mod statements;
mod store;
mod tls;
mod transaction;

use rows::*;
pub use schema::SCHEMA_VERSION;
use schema::*;
use statements::*;

pub use tls::SslMode;
/// The PostgreSQL client the store is built on, for a transactional tool's statements
/// ([`PgTransaction::client`]): the same version, whatever the application depends on.
pub use tokio_postgres;
pub use transaction::PgTransaction;

use self::batch::{Answer, Work};
use self::query::{RECORD_TYPES, Stmt};
use super::row::StoredRow;
use super::{Filter, Store};
use crate::call::error::StoreError;
use crate::decide::record::{
    AuditEntry, EffectRecord, Millis, Op, OpOutcome, RECORD_VERSION, RecordState, now_millis, transition,
};
use crate::value::class::EffectClass;
use tokio_postgres::types::Type;

/// `err` and its causes, each once (tokio-postgres's errors do not show their cause, e.g. the
/// server's own message of a refused connection).
fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut out = err.to_string();
    let mut next = err.source();
    while let Some(e) = next {
        let text = e.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        next = e.source();
    }
    out
}

/// Settings of a [`PostgresStore`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgOptions {
    /// The schema the journal lives in (created if missing; default `effect_tool`). Lowercase
    /// letters, digits and `_`, not starting with a digit.
    pub schema: String,
    /// The most connections the pool opens (default 16).
    pub pool_size: usize,
    /// How long opening a connection may take (default 10 s).
    pub connect_timeout: Duration,
    /// How long an operation waits for a free pooled connection (default 30 s).
    pub wait_timeout: Duration,
    /// How long one operation's statements may take on their connection (default 10 s). A
    /// server that does not answer within it (stopped, partitioned away, or stuck) gives a
    /// [`StoreError::Backend`] whose outcome is unknown, as a lost connection's is, and the
    /// connection is closed instead of going back to the pool. Checked by the client, so it
    /// holds when the server cannot enforce its own `statement_timeout`. See
    /// [Timeouts](self#timeouts).
    pub statement_timeout: Duration,
    /// How connections are secured when the URL has no `sslmode` (the URL's wins); `None`:
    /// [`SslMode::Prefer`], libpq's default. See [TLS](self#tls).
    pub ssl_mode: Option<SslMode>,
    /// A PEM file of the root certificate(s) the server's certificate must chain to, when the
    /// URL has no `sslrootcert` (the URL's wins; then `PGSSLROOTCERT`, then
    /// `~/.postgresql/root.crt` if it exists): the CA of a private or self-signed server, or
    /// `system` for the platform's trusted roots. See [TLS](self#tls).
    pub ssl_root_cert: Option<PathBuf>,
    /// A PEM file of this client's certificate (and its chain), shown to a server that asks for
    /// one, when the URL has no `sslcert` (the URL's wins, then `PGSSLCERT`). See
    /// [TLS](self#tls).
    pub ssl_cert: Option<PathBuf>,
    /// The PEM file of [`PgOptions::ssl_cert`]'s private key, when the URL has no `sslkey` (the
    /// URL's wins, then `PGSSLKEY`). Readable by its owner only (0600), as libpq requires.
    pub ssl_key: Option<PathBuf>,
    /// The connections go through a pooler in transaction mode (PgBouncer with `pool_mode =
    /// transaction`, Supavisor, RDS Proxy...), where one session's prepared statements and
    /// `LISTEN` do not survive its transaction: statements are sent unnamed, and
    /// [`Store::changed`] never fires (waiters poll). Also set by `pgbouncer=true` in the URL.
    /// See [Poolers](self#poolers).
    pub transaction_pooler: bool,
}

impl Default for PgOptions {
    fn default() -> Self {
        PgOptions {
            schema: "effect_tool".to_owned(),
            pool_size: 16,
            connect_timeout: Duration::from_secs(10),
            wait_timeout: Duration::from_secs(30),
            statement_timeout: Duration::from_secs(10),
            ssl_mode: None,
            ssl_root_cert: None,
            ssl_cert: None,
            ssl_key: None,
            transaction_pooler: false,
        }
    }
}

/// A journal in a PostgreSQL schema, shared by every worker that connects to it. Cheap to
/// clone; clones share the pool.
#[derive(Clone)]
pub struct PostgresStore {
    shared: Arc<Inner>,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("schema", &self.shared.options.schema)
            .field("pool_size", &self.shared.options.pool_size)
            .finish_non_exhaustive()
    }
}

struct Inner {
    pool: Pool,
    options: PgOptions,
    /// Statements are sent unnamed ([`PgOptions::transaction_pooler`]).
    unnamed: bool,
    /// When the next connection attempt may go, after failed ones.
    backoff: connect::Backoff,
    /// The `LISTEN` connection that wakes [`Store::changed`]; `None` behind a transaction
    /// pooler.
    listener: Option<listen::Listener>,
    sql: Sql,
    /// The TLS settings, to explain failed connections.
    tls: tls::Tls,
    /// Database clock minus local clock, in ms.
    clock_offset: AtomicI64,
    /// The rows this store wrote last for claims it holds: (row version, record).
    held: Mutex<HashMap<String, (i64, EffectRecord)>>,
    /// Writes waiting to be sent together (group commit).
    batcher: batch::Batcher,
}

const HELD_MAX: usize = 10_000;

/// How `gc` sizes its chunks: 1,000 records at first, 100 to 10,000, each statement to take
/// about 100 ms ([`super::GcPace`]). Each chunk is its own transaction (under
/// [`PgOptions::statement_timeout`]), whose row locks (which a claim of the same key waits for)
/// last until its commit.
const GC_PACE: super::GcPace = super::GcPace::new(1_000, 100, 10_000, Duration::from_millis(100));

impl PostgresStore {
    /// Connect to the database at `url` (`postgres://user:pass@host:port/db`), create or
    /// upgrade the journal in schema `effect_tool`, with a pool of 16 connections.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        PostgresStore::connect_with(url, PgOptions::default()).await
    }

    /// Connect with `options`. The URL may carry `sslmode` and `sslrootcert` (see
    /// [TLS](self#tls)); they win over [`PgOptions::ssl_mode`] and [`PgOptions::ssl_root_cert`].
    pub async fn connect_with(url: &str, options: PgOptions) -> Result<Self, StoreError> {
        let schema = quoted_schema(&options.schema)?;
        let env = libpq::process_env;
        let ssl_mode = match (options.ssl_mode, env("PGSSLMODE")) {
            (Some(mode), _) => Some(mode),
            (None, Some(name)) => Some(SslMode::parse(&name).ok_or_else(|| {
                StoreError::Backend(format!(
                    "invalid PGSSLMODE `{name}`: use disable, prefer, require, verify-ca or verify-full"
                ))
            })?),
            (None, None) => None,
        };
        let path = |given: &Option<PathBuf>, var: &str| given.clone().or_else(|| env(var).map(PathBuf::from));
        let root_cert = path(&options.ssl_root_cert, "PGSSLROOTCERT");
        let cert = path(&options.ssl_cert, "PGSSLCERT");
        let key = path(&options.ssl_key, "PGSSLKEY");
        let home = env("HOME").map(PathBuf::from);
        let (url, params) = tls::split_params(url)?;
        let tls = tls::resolve(
            &params,
            tls::Given {
                mode: ssl_mode,
                root_cert: root_cert.as_deref(),
                cert: cert.as_deref(),
                key: key.as_deref(),
                home: home.as_deref(),
            },
        )?;
        let unnamed = match params.get("pgbouncer") {
            None => options.transaction_pooler,
            Some("true" | "1" | "on" | "yes") => true,
            Some("false" | "0" | "off" | "no") => false,
            Some(other) => {
                return Err(StoreError::Backend(format!(
                    "invalid pgbouncer=`{other}` in the PostgreSQL URL: use pgbouncer=true when the connections go through a pooler in transaction mode, or leave it out"
                )));
            }
        };
        let mut config: tokio_postgres::Config = url.parse().map_err(|e| {
            StoreError::Backend(format!(
                "invalid PostgreSQL URL (expected postgres://user:password@host:port/database): {e}"
            ))
        })?;
        let passwords = libpq::apply(&mut config, &env);
        if config.get_application_name().is_none() {
            config.application_name("effect-tool");
        }
        config.connect_timeout(options.connect_timeout);
        config.ssl_mode(tls.tokio_mode());
        let connector = connect::Connector {
            tls: tls.connector()?,
            prefer: tls.mode == SslMode::Prefer,
            passwords: passwords.clone(),
        };
        let listener = (!unnamed).then(|| {
            listen::Listener::new(
                config.clone(),
                connector.tls.clone(),
                connector.prefer,
                passwords,
                listen::channel(&options.schema),
            )
        });
        let manager = Manager::from_connect(config, connector, deadpool_postgres::ManagerConfig::default());
        let pool = Pool::builder(manager)
            .max_size(options.pool_size.max(1))
            // The most recently used connection first: a sequential caller keeps one warm
            // connection (and server process) instead of rotating through all of them.
            .queue_mode(QueueMode::Lifo)
            .runtime(Runtime::Tokio1)
            .create_timeout(Some(options.connect_timeout))
            .wait_timeout(Some(options.wait_timeout))
            .build()
            .map_err(|e| StoreError::Backend(format!("cannot build the PostgreSQL pool: {e}")))?;
        let store = PostgresStore {
            shared: Arc::new(Inner {
                pool,
                sql: Sql::new(&schema, &listen::channel(&options.schema)),
                unnamed,
                backoff: connect::Backoff::default(),
                listener,
                options,
                tls,
                clock_offset: AtomicI64::new(0),
                held: Mutex::new(HashMap::new()),
                batcher: batch::Batcher::default(),
            }),
        };
        store.migrate().await?;
        store.sync_clock().await?;
        Ok(store)
    }

    /// The settings.
    pub fn options(&self) -> &PgOptions {
        &self.shared.options
    }

    /// Run `stmt` on `client` ([`query::rows`]: prepared, or unnamed behind a transaction pooler).
    async fn rows(
        &self,
        client: &deadpool_postgres::Object,
        stmt: &Stmt,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<tokio_postgres::Row>, StoreError> {
        query::rows(client, self.shared.unnamed, stmt, params).await.map_err(pg)
    }

    /// [`PostgresStore::rows`] of a statement that answers exactly one row.
    async fn row(
        &self,
        client: &deadpool_postgres::Object,
        stmt: &Stmt,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<tokio_postgres::Row, StoreError> {
        let mut rows = self.rows(client, stmt, params).await?;
        match rows.len() {
            1 => Ok(rows.swap_remove(0)),
            n => Err(StoreError::Backend(format!(
                "PostgreSQL answered {n} rows where the journal's statement returns one: is the connection going through a proxy that rewrites queries?"
            ))),
        }
    }

    /// A pooled connection. When none can be opened (the server is down, failing over, or
    /// refuses) after the store has connected once, attempts go on with backoff ([`connect`])
    /// until [`PgOptions::connect_timeout`] has passed since the first.
    async fn client(&self) -> Result<deadpool_postgres::Object, StoreError> {
        let until = tokio::time::Instant::now() + self.shared.options.connect_timeout;
        loop {
            self.shared.backoff.wait().await;
            let e = match self.shared.pool.get().await {
                Ok(client) => {
                    self.shared.backoff.succeeded();
                    return Ok(client);
                }
                Err(e) => e,
            };
            // Only a failure to open a connection is worth another attempt; a pool that is
            // full until `wait_timeout` is not.
            let opening = matches!(
                e,
                deadpool_postgres::PoolError::Backend(_)
                    | deadpool_postgres::PoolError::Timeout(deadpool_postgres::TimeoutType::Create)
            );
            // A refusal by the TLS rules will not change by trying again.
            let tls = self.shared.tls.explain(&e);
            if opening && tls.is_none() && self.shared.backoff.reconnecting() {
                let wait = self.shared.backoff.failed();
                if tokio::time::Instant::now() + wait < until {
                    tracing::debug!(error = %error_chain(&e), ?wait, "cannot connect to PostgreSQL; trying again");
                    continue;
                }
            }
            if let Some(tls) = tls {
                return Err(StoreError::Backend(format!("cannot connect to PostgreSQL: {tls}")));
            }
            return Err(StoreError::Backend(format!(
                "cannot get a PostgreSQL connection: {}; check that the database is up and reachable",
                error_chain(&e)
            )));
        }
    }

    /// Close `client`, whose statements did not finish within [`PgOptions::statement_timeout`],
    /// instead of pooling it (its server may never answer, and the next caller would wait
    /// behind the abandoned statement), and say why the operation failed.
    fn abandon(&self, client: deadpool_postgres::Object) -> StoreError {
        drop(deadpool_postgres::Object::take(client));
        let limit = self.shared.options.statement_timeout;
        tracing::warn!(?limit, "PostgreSQL did not answer in time; its connection is closed");
        StoreError::Backend(format!(
            "PostgreSQL did not answer within {limit:?} (PgOptions::statement_timeout): the server is stopped, \
             unreachable or overloaded, and whether this operation's writes were applied is unknown; the \
             connection was closed. Check the server (or raise the timeout for a slow one), then call again: \
             the engine reconciles a claim it may have left"
        ))
    }

    async fn sync_clock(&self) -> Result<(), StoreError> {
        let client = self.client().await?;
        bounded!(self, client, async {
            for _ in 0..3 {
                let before = now_millis();
                let db: i64 = self.row(&client, &self.shared.sql.clock, &[]).await?.get(0);
                self.observe_clock(db, before);
            }
            Ok(())
        })
    }

    fn observe_clock(&self, db_now: Millis, sent_at: Millis) {
        let local = (sent_at + now_millis()) / 2;
        self.shared.clock_offset.store(db_now - local, Ordering::Relaxed);
    }

    fn remember(&self, key: &str, row_version: i64, rec: &EffectRecord) {
        let mut held = self.shared.held.lock().unwrap_or_else(|e| e.into_inner());
        if held.len() >= HELD_MAX {
            held.clear();
        }
        held.insert(key.to_owned(), (row_version, rec.clone()));
    }

    fn forget(&self, key: &str) -> Option<(i64, EffectRecord)> {
        self.shared.held.lock().unwrap_or_else(|e| e.into_inner()).remove(key)
    }

    /// After a successful write: keep the row of a claim this store holds, drop it otherwise.
    fn after_write(&self, key: &str, row_version: i64, rec: &EffectRecord) {
        if rec.state == RecordState::Claimed {
            self.remember(key, row_version, rec);
        } else {
            self.forget(key);
        }
    }

    /// Insert `rec` if the key is still absent; its row version, or `None` if someone else
    /// inserted first.
    async fn insert(&self, client: &deadpool_postgres::Object, rec: &EffectRecord) -> Result<Option<i64>, StoreError> {
        let p = RecordParams::new(rec);
        let row = self
            .rows(client, &self.shared.sql.insert, &p.refs())
            .await?
            .into_iter()
            .next();
        Ok(row.map(|r| r.get(0)))
    }

    /// [`PostgresStore::insert`] with `audit` appended in the same statement.
    async fn insert_audited(
        &self,
        client: &deadpool_postgres::Object,
        rec: &EffectRecord,
        audit: &AuditEntry,
    ) -> Result<Option<i64>, StoreError> {
        let p = RecordParams::new(rec);
        let detail = audit.detail.as_ref().map(|d| d.to_string());
        let mut params = p.refs();
        params.extend_from_slice(&[&audit.at, &audit.actor, &audit.action, &detail]);
        let row = self
            .rows(client, &self.shared.sql.insert_audited, &params)
            .await?
            .into_iter()
            .next();
        Ok(row.map(|r| r.get(0)))
    }

    /// Write `rec` over the row at `row_version` (and `attempt`, and `holder` as stored), with
    /// the op's audit entry; the new row version, or `None` if the row changed since it was read.
    #[allow(clippy::too_many_arguments)]
    async fn update(
        &self,
        client: &deadpool_postgres::Object,
        rec: &EffectRecord,
        row_version: i64,
        attempt: u32,
        holder: Option<&str>,
        audit: Option<AuditEntry>,
        notify: bool,
    ) -> Result<Option<i64>, StoreError> {
        let stmt = if notify {
            &self.shared.sql.update_notify
        } else {
            &self.shared.sql.update
        };
        let p = RecordParams::new(rec);
        let attempt = i64::from(attempt);
        let (at, actor, action, detail) = match &audit {
            Some(a) => (
                Some(a.at),
                Some(a.actor.as_str()),
                Some(a.action.as_str()),
                a.detail.as_ref().map(|d| d.to_string()),
            ),
            None => (None, None, None, None),
        };
        let mut params = p.refs();
        params.extend_from_slice(&[&row_version, &attempt, &at, &actor, &action, &detail, &holder]);
        let row = self.rows(client, stmt, &params).await?.into_iter().next();
        Ok(row.map(|r| r.get(0)))
    }

    /// The holder's fast path: a compare-and-set against the row this store wrote last.
    async fn apply_held(&self, key: &str, op: &Op) -> Result<HeldWrite, StoreError> {
        // A person's decision takes the general path, which notifies waiters.
        if op.is_decision() {
            return Ok(HeldWrite::NotHeld);
        }
        let Some((row_version, held)) = self.forget(key) else {
            return Ok(HeldWrite::NotHeld);
        };
        let now = self.now();
        let Ok(mut t) = transition(key, Some(&held), op, now) else {
            return Ok(HeldWrite::NotHeld);
        };
        let audit = t.audit.take();
        let Some(rec) = &t.write else {
            return Ok(HeldWrite::NotHeld);
        };
        // As this store wrote it: the compare-and-set's holder is text for text.
        let holder = crate::store::row::holder_text(&held);
        let written = match self.shared.batcher.alone() {
            Some(_alone) => {
                let client = self.client().await?;
                bounded!(
                    self,
                    client,
                    self.update(&client, rec, row_version, held.attempt, holder.as_deref(), audit, false)
                )?
            }
            None => match self
                .batched(Work::Update {
                    rec: rec.clone(),
                    row_version,
                    attempt: held.attempt,
                    holder,
                    audit,
                })
                .await?
            {
                Answer::Done { written, .. } => written,
                Answer::Alone => None,
            },
        };
        match written {
            Some(v) => {
                self.after_write(key, v, rec);
                Ok(HeldWrite::Written(t.outcome))
            }
            None => Ok(HeldWrite::Changed { row_version, held }),
        }
    }

    /// The general path: read (with the database's clock), transition, compare-and-set;
    /// retried when another writer got there first. `held` is the claim this store held (its
    /// row version and record) when its fast path found the row changed
    /// ([`HeldWrite::Changed`]).
    async fn apply_read(
        &self,
        client: &deadpool_postgres::Object,
        key: &str,
        op: &Op,
        held: Option<(i64, EffectRecord)>,
    ) -> Result<OpOutcome, StoreError> {
        for _ in 0..1000 {
            let sent = now_millis();
            let row = self.row(client, &self.shared.sql.read, &[&key]).await?;
            let db_now: i64 = row.get(0);
            self.observe_clock(db_now, sent);
            // The holder as stored, for the compare-and-set (text for text).
            let current = PgRow::from_row(&row, 1)?
                .map(|r| {
                    let holder = r.row.holder.clone();
                    r.decode().map(|(rec, version)| (rec, version, holder))
                })
                .transpose()?;
            if let (Some((row_version, mine)), Some((rec, _, stored))) = (&held, &current)
                && let Err(lost) = claim_lost_with_its_attempt(key, mine, rec, stored)
            {
                // Kept, so that every later write of the lost claim is refused too.
                self.remember(key, *row_version, mine);
                return Err(lost);
            }
            let mut t = transition(key, current.as_ref().map(|(rec, ..)| rec), op, db_now)?;
            let audit = t.audit.take();
            let Some(rec) = &t.write else { return Ok(t.outcome) };
            let written = match (&current, audit) {
                (None, None) => self.insert(client, rec).await?,
                (None, Some(audit)) => self.insert_audited(client, rec, &audit).await?,
                (Some((before, row_version, holder)), audit) => {
                    self.update(
                        client,
                        rec,
                        *row_version,
                        before.attempt,
                        holder.as_deref(),
                        audit,
                        op.is_decision(),
                    )
                    .await?
                }
            };
            if let Some(v) = written {
                self.after_write(key, v, rec);
                return Ok(t.outcome);
            }
            // Another writer changed the record between the read and the write: read again.
        }
        Err(StoreError::Backend(format!(
            "record `{key}` kept changing under 1000 attempts to {}: too much contention on one key",
            op.name()
        )))
    }

    /// The claim fast path: insert if new, else decide from the record found.
    async fn claim_fast(&self, key: &str, op: &Op) -> Result<Option<OpOutcome>, StoreError> {
        let now = self.now();
        let t = transition(key, None, op, now)?;
        let Some(fresh) = &t.write else {
            return Ok(Some(t.outcome));
        };
        let (db_now, inserted, before) = match self.shared.batcher.alone() {
            Some(_alone) => {
                let client = self.client().await?;
                let sql = if op.needs_flush() {
                    &self.shared.sql.claim_fast
                } else {
                    &self.shared.sql.claim_fast_unflushed
                };
                let (row, sent) = bounded!(self, client, async {
                    let p = RecordParams::new(fresh);
                    let sent = now_millis();
                    Ok((self.row(&client, sql, &p.refs()).await?, sent))
                })?;
                let db_now: i64 = row.get(0);
                self.observe_clock(db_now, sent);
                (db_now, row.get::<_, Option<i64>>(1), PgRow::from_row(&row, 2)?)
            }
            None => match self.batched(Work::Insert(fresh.clone())).await? {
                Answer::Done {
                    db_now,
                    written,
                    before,
                } => (db_now, written, before.map(|b| *b)),
                Answer::Alone => return Ok(None),
            },
        };
        if let Some(v) = inserted {
            self.after_write(key, v, fresh);
            return Ok(Some(t.outcome));
        }
        let Some(current) = before else {
            // Inserted by someone else after this statement's snapshot: take the general path.
            return Ok(None);
        };
        let (current, _) = current.decode()?;
        let t = transition(key, Some(&current), op, db_now)?;
        Ok(t.write.is_none().then_some(t.outcome))
    }
}

fn quoted_schema(name: &str) -> Result<String, StoreError> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        && !name.as_bytes()[0].is_ascii_digit();
    if ok {
        Ok(format!("\"{name}\""))
    } else {
        Err(StoreError::Backend(format!(
            "invalid schema name `{name}`: use lowercase letters, digits and `_` (at most 63, not starting with a digit)"
        )))
    }
}

fn pg(e: tokio_postgres::Error) -> StoreError {
    match e.as_db_error() {
        Some(db) => {
            let code = db.code().code();
            // A prepared statement unknown to, or already taken in, the server session: the
            // connection goes through a pooler that moves sessions between transactions.
            let pooler = if code == "26000" || code == "42P05" {
                "; the connections seem to go through a pooler in transaction mode (PgBouncer's pool_mode = transaction), which keeps no prepared statements: add pgbouncer=true to the URL (PgOptions::transaction_pooler)"
            } else {
                ""
            };
            StoreError::Backend(format!(
                "PostgreSQL: {code}: {}{}{pooler}",
                db.message(),
                db.detail().map(|d| format!(" ({d})")).unwrap_or_default()
            ))
        }
        None => StoreError::Backend(format!("PostgreSQL: {e}")),
    }
}

/// Whether `e` says for certain that its statement was rolled back (nothing of it
/// committed): an error the server sent (`ERROR`) that leaves the session usable. Anything
/// else may hide a commit: no answer at all (the connection lost after the statement, or its
/// `COMMIT`, was sent), a `FATAL` or `PANIC` that ended the session (a shutdown, a backend
/// terminated while its commit waited for a synchronous standby: the transaction committed
/// locally), a connection exception (class `08`), an operator intervention (class `57`, a
/// cancelled wait for a synchronous standby among them), `40003` (statement completion
/// unknown) or an internal error (class `XX`). Those are unknown outcomes, never "not written".
pub(super) fn rolled_back(e: &tokio_postgres::Error) -> bool {
    let Some(db) = e.as_db_error() else { return false };
    let severity = db.parsed_severity();
    let code = db.code().code();
    let unknown_class = ["08", "57", "XX"].iter().any(|c| code.starts_with(c)) || code == "40003";
    matches!(severity, Some(tokio_postgres::error::Severity::Error)) && !unknown_class
}

/// What the holder's fast path did ([`PostgresStore::apply_held`]).
enum HeldWrite {
    /// Written: the operation's outcome.
    Written(OpOutcome),
    /// This store holds no claim of the key (or the operation is not a holder's): the general
    /// path decides.
    NotHeld,
    /// This store held the claim `held` (written at `row_version`), and the row changed since:
    /// the general path decides, and refuses a claim that only looks like it.
    Changed { row_version: i64, held: EffectRecord },
}

/// Refuse a holder's write when the row is a claim at the writer's own attempt number under
/// another holder: the writer's claim was lost (a commit that never reached the disk, in a crash
/// or a failover, with the sequence values it used) and another worker claimed the key afresh,
/// starting again at the same attempt. The state machine, which fences by attempt number only,
/// would take the write for the holder's.
fn claim_lost_with_its_attempt(
    key: &str,
    mine: &EffectRecord,
    rec: &EffectRecord,
    stored: &Option<String>,
) -> Result<(), StoreError> {
    let attempt = mine.attempt;
    if rec.state == RecordState::Claimed && rec.attempt == attempt && *stored != crate::store::row::holder_text(mine) {
        return Err(StoreError::Rejected(crate::decide::record::Rejected::Fenced {
            key: key.to_owned(),
            attempt,
            current: rec.attempt,
            state: rec.state,
        }));
    }
    Ok(())
}
