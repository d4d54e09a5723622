//! The SQLite journal's schema and its migrations: the SQL of every version, in order, and
//! the upgrade a store applies at open (see `docs/journal-format.md`).

use super::*;

/// The version of the SQLite schema this build writes and reads.
pub const SCHEMA_VERSION: u32 = 6;

pub(super) const SCHEMA_V1: &str = "
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
pub(super) const SCHEMA_V2: &str = "
DROP INDEX IF EXISTS effect_records_state;
-- Led by state so that the planner searches them for `state = '...'` (a partial index on its own
-- is only scanned, which it rarely prefers to the table).
CREATE INDEX IF NOT EXISTS effect_records_in_doubt ON effect_records (state, created_at) WHERE state = 'in-doubt';
CREATE INDEX IF NOT EXISTS effect_records_awaiting ON effect_records (state, created_at) WHERE state = 'awaiting-approval';
";

/// Version 3: `call_ids`, the other tool-call ids that received a record's result (a JSON
/// array; NULL when there are none, as in every row written before).
pub(super) const SCHEMA_V3: &str = "
ALTER TABLE effect_records ADD COLUMN call_ids TEXT;
";

/// Version 4: `holder`, who made the latest claim (a JSON object: worker, instance, host,
/// pid; NULL in every row written before).
pub(super) const SCHEMA_V4: &str = "
ALTER TABLE effect_records ADD COLUMN holder TEXT;
";

/// Version 5: `effect_budget_spends`, what each run spent of its budgets: one row per
/// (run, budget, key) charged, so that a key is charged once ([`crate::decide::budget`]).
pub(super) const SCHEMA_V5: &str = "
CREATE TABLE IF NOT EXISTS effect_budget_spends (
    run_id TEXT NOT NULL,
    budget TEXT NOT NULL,
    key TEXT NOT NULL,
    tool TEXT NOT NULL,
    amount INTEGER NOT NULL,
    at INTEGER NOT NULL,
    PRIMARY KEY (run_id, budget, key)
);
";

/// Version 6: `effect_grants`, the standing approvals ([`crate::decide::grant`]): one row per
/// grant, its JSON in `body` (row format `format`), revocations written into it.
pub(super) const SCHEMA_V6: &str = "
CREATE TABLE IF NOT EXISTS effect_grants (
    id TEXT PRIMARY KEY NOT NULL,
    tool TEXT NOT NULL,
    format INTEGER NOT NULL,
    body TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS effect_grants_tool ON effect_grants (tool, created_at);
";

/// Every schema version and the SQL that brings the previous one to it, in order.
pub(super) const MIGRATIONS: [(u32, &str); 6] = [
    (1, SCHEMA_V1),
    (2, SCHEMA_V2),
    (3, SCHEMA_V3),
    (4, SCHEMA_V4),
    (5, SCHEMA_V5),
    (6, SCHEMA_V6),
];

pub(super) enum Migrate {
    Sql(rusqlite::Error),
    Store(StoreError),
}

impl From<rusqlite::Error> for Migrate {
    fn from(e: rusqlite::Error) -> Self {
        Migrate::Sql(e)
    }
}

/// Create the schema, or check that an existing one is a version this build reads.
pub(super) fn migrate(conn: &Connection, path: &Path) -> Result<(), Migrate> {
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
