//! The SQL text of the PostgreSQL journal's reads and writes, prepared once per connection
//! ([`Sql`]); the schema's is in `schema.rs`.

use super::*;

/// The statements, with the schema filled in.
pub(super) struct Sql {
    pub(super) claim_fast: Stmt,
    /// [`Sql::claim_fast`] committed without waiting for its WAL flush (see [`UNFLUSHED`]).
    pub(super) claim_fast_unflushed: Stmt,
    pub(super) batch: Stmt,
    /// [`Sql::batch`] committed without waiting for its WAL flush.
    pub(super) batch_unflushed: Stmt,
    pub(super) read: Stmt,
    pub(super) insert: Stmt,
    /// [`Sql::insert`] with the transition's audit entry in the same statement: a new record
    /// whose first write is audited (a claim a standing approval approved).
    pub(super) insert_audited: Stmt,
    pub(super) update: Stmt,
    /// [`Sql::update`] that also sends the record's key on the schema's notification channel
    /// ([`listen`]), in the same transaction: a person's decision.
    pub(super) update_notify: Stmt,
    pub(super) clock: Stmt,
    pub(super) gc: Stmt,
    pub(super) audit: Stmt,
    pub(super) append_audit: Stmt,
    pub(super) list_prefix: String,
}

/// Makes the statement's transaction commit without waiting for its WAL to reach the disk
/// (`SET LOCAL synchronous_commit = off`, as a function inside the one statement, so that the
/// claim stays one round trip): for claims that need no flush of their own
/// ([`Op::needs_flush`]). The record written after such a claim commits as every other write,
/// waiting for its WAL flush, which covers the claim's commit record before it.
pub(super) const UNFLUSHED: &str = "set_config('synchronous_commit', 'off', true)";

/// Take the schema's advisory lock (`$1`: the schema's name) until the transaction ends.
pub(super) const LOCK_SCHEMA: &str = "SELECT pg_advisory_xact_lock(hashtext('effect-tool:' || $1::text))::text";

/// Whether the schema (`$1`: its name) has its `settings` table (made on first use).
pub(super) const HAS_SETTINGS: &str = "SELECT 1 FROM pg_tables WHERE schemaname = $1 AND tablename = 'settings'";

pub(super) const CLOCK: &str = "(extract(epoch from clock_timestamp()) * 1000)::bigint";
pub(super) const COLS: &str = "key, version, tool, class, run_id, thread_id, call_id, fingerprint, input, state, attempt, \
     lease_until, output, reason, approval_role, decided_by, created_at, updated_at, expires_at, call_ids, holder";
pub(super) const VALUES: &str = "$1, $2, $3, $4, $5, $6, $7, $8, $9::text::json, $10, $11, $12, $13::text::json, $14, $15, $16, $17, $18, $19, $20, $21";

pub(super) fn select_cols(alias: &str) -> String {
    format!(
        "{a}key, {a}version, {a}tool, {a}class, {a}run_id, {a}thread_id, {a}call_id, {a}fingerprint, {a}input::text, \
         {a}state, {a}attempt, {a}lease_until, {a}output::text, {a}reason, {a}approval_role, {a}decided_by, \
         {a}created_at, {a}updated_at, {a}expires_at, {a}call_ids, {a}holder, {a}row_version",
        a = alias
    )
}

impl Sql {
    /// The statements for schema `s` (quoted), notifying on `channel`.
    pub(super) fn new(s: &str, channel: &str) -> Sql {
        let r = select_cols("r.");
        let claim_fast = |one: &str| {
            Stmt::new(
                format!(
                    "WITH ins AS (INSERT INTO {s}.records ({COLS}) VALUES ({VALUES}) ON CONFLICT (key) DO NOTHING RETURNING row_version)
                 SELECT {CLOCK} AS db_now, (SELECT row_version FROM ins) AS inserted, {r}
                 FROM (SELECT {one}) AS one LEFT JOIN {s}.records r ON r.key = $1"
                ),
                &RECORD_TYPES,
            )
        };
        let update_types: Vec<Type> = RECORD_TYPES
            .iter()
            .cloned()
            .chain([
                Type::INT8,
                Type::INT8,
                Type::INT8,
                Type::TEXT,
                Type::TEXT,
                Type::TEXT,
                Type::TEXT,
            ])
            .collect();
        let update = |notify: &str| {
            Stmt::new(
                format!(
                    "WITH upd AS (
                   UPDATE {s}.records SET version = $2, tool = $3, class = $4, run_id = $5, thread_id = $6,
                     call_id = $7, fingerprint = $8, input = $9::text::json, state = $10, attempt = $11,
                     lease_until = $12, output = $13::text::json, reason = $14, approval_role = $15,
                     decided_by = $16, created_at = $17, updated_at = $18, expires_at = $19,
                     call_ids = $20, holder = $21, row_version = nextval('{s}.row_version_seq')
                   WHERE key = $1 AND row_version = $22 AND attempt = $23 AND holder IS NOT DISTINCT FROM $28
                   RETURNING key, row_version),
                 aud AS (
                   INSERT INTO {s}.audit (key, at, actor, action, detail)
                   SELECT key, $24, $25, $26, $27::text::json FROM upd WHERE $26::text IS NOT NULL)
                 SELECT row_version{notify} FROM upd"
                ),
                &update_types,
            )
        };
        Sql {
            claim_fast: claim_fast("1"),
            claim_fast_unflushed: claim_fast(UNFLUSHED),
            batch: Stmt::new(batch::batch_sql(s, COLS, &r, CLOCK, None), &batch::ARRAY_PARAM_TYPES),
            batch_unflushed: Stmt::new(
                batch::batch_sql(s, COLS, &r, CLOCK, Some(UNFLUSHED)),
                &batch::ARRAY_PARAM_TYPES,
            ),
            read: Stmt::new(
                format!("SELECT {CLOCK} AS db_now, {r} FROM (SELECT 1) AS one LEFT JOIN {s}.records r ON r.key = $1"),
                &[Type::TEXT],
            ),
            insert: Stmt::new(
                format!(
                    "INSERT INTO {s}.records ({COLS}) VALUES ({VALUES}) ON CONFLICT (key) DO NOTHING RETURNING row_version"
                ),
                &RECORD_TYPES,
            ),
            insert_audited: Stmt::new(
                format!(
                    "WITH ins AS (INSERT INTO {s}.records ({COLS}) VALUES ({VALUES}) ON CONFLICT (key) DO NOTHING RETURNING key, row_version),
                 aud AS (
                   INSERT INTO {s}.audit (key, at, actor, action, detail)
                   SELECT key, $22, $23, $24, $25::text::json FROM ins)
                 SELECT row_version FROM ins"
                ),
                &RECORD_TYPES
                    .iter()
                    .cloned()
                    .chain([Type::INT8, Type::TEXT, Type::TEXT, Type::TEXT])
                    .collect::<Vec<_>>(),
            ),
            update: update(""),
            update_notify: update(&format!(", pg_notify('{channel}', key)::text")),
            clock: Stmt::new(format!("SELECT {CLOCK}"), &[]),
            gc: Stmt::new(
                format!(
                    // The conditions are repeated on the DELETE itself: a row changed (claimed
                    // again) after the subquery's snapshot is checked again as it is now, and
                    // kept (PostgreSQL rechecks only the DELETE's own conditions on the newer
                    // row, not the subquery's). Each chunk starts where the last one ended
                    // ($4, the latest `expires_at` it deleted, inclusive): the rows deleted
                    // before are dead until vacuumed, and a scan from the lowest `expires_at`
                    // would walk all of them again (14 s, past the statement timeout, for the
                    // last chunk of a 10^7-record collection).
                    "WITH gone AS (
                   DELETE FROM {s}.records WHERE key IN (
                     SELECT key FROM {s}.records
                     WHERE version <= $2 AND {collectable} AND expires_at >= $4
                     ORDER BY expires_at
                     LIMIT $3)
                     AND version <= $2 AND {collectable}
                   RETURNING expires_at)
                 SELECT count(*), max(expires_at) FROM gone",
                    collectable = crate::store::collectable_sql("$1"),
                ),
                &[Type::INT8, Type::INT4, Type::INT8, Type::INT8],
            ),
            audit: Stmt::new(
                format!(
                    "SELECT key, at, actor, action, detail::text FROM {s}.audit WHERE ($1::text IS NULL OR key = $1) ORDER BY id"
                ),
                &[Type::TEXT],
            ),
            append_audit: Stmt::new(
                format!(
                    "INSERT INTO {s}.audit (key, at, actor, action, detail) VALUES ($1, $2, $3, $4, $5::text::json)"
                ),
                &[Type::TEXT, Type::INT8, Type::TEXT, Type::TEXT, Type::TEXT],
            ),
            list_prefix: format!("SELECT {} FROM {s}.records WHERE true", select_cols("")),
        }
    }
}
