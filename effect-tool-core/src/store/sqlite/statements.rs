//! The SQL text of the SQLite journal's reads and writes (the schema's is in `schema.rs`).

use super::*;

pub(super) const COLUMNS: &str = "key, version, tool, class, run_id, thread_id, call_id, fingerprint, input, state, attempt, \
     lease_until, output, reason, approval_role, decided_by, created_at, updated_at, expires_at, call_ids, holder";

pub(super) static SELECT_RECORD: LazyLock<String> =
    LazyLock::new(|| format!("SELECT {COLUMNS} FROM effect_records WHERE key = ?1"));

/// The bit of an UPDATE's column mask that adds the [`Guard::Cached`] condition.
pub(super) const GUARDED: u32 = 1 << 31;

/// The columns an UPDATE may set, in the order of the bits of its column mask.
pub(super) const UPDATABLE: [&str; 20] = [
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
    pub(super) static UPDATE_SQL: std::cell::RefCell<std::collections::HashMap<u32, String>> = Default::default();
}

pub(super) fn update_sql(mask: u32) -> String {
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

pub(super) static INSERT_RECORD: LazyLock<String> = LazyLock::new(|| {
    format!(
        "INSERT INTO effect_records ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21)"
    )
});

/// The SELECT of [`Store::list`] for `filter`, and its parameters.
pub(super) fn list_sql(filter: &Filter) -> (String, Vec<rusqlite::types::Value>) {
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

/// Read a meta row (`?1` its name).
pub(super) const SELECT_META: &str = "SELECT value FROM effect_tool_meta WHERE name = ?1";

/// Write a meta row (`?1` its name, `?2` its value), replacing a different value.
pub(super) const REPLACE_META: &str = "INSERT INTO effect_tool_meta (name, value) VALUES (?1, ?2)
     ON CONFLICT (name) DO UPDATE SET value = excluded.value WHERE value <> excluded.value";

/// Create a meta row (`?1` its name, `?2` its value) unless it exists: the first writer wins.
pub(super) const CREATE_META: &str =
    "INSERT INTO effect_tool_meta (name, value) VALUES (?1, ?2) ON CONFLICT (name) DO NOTHING";

/// Delete up to `?3` records collectable at `?1` of record versions up to `?2` (the newest
/// this build reads): the SQL form of [`crate::store::collectable`]; records of a newer
/// version are left alone. The candidates
/// come from the `expires_at` index, oldest first.
pub(super) static GC_RECORDS: LazyLock<String> = LazyLock::new(|| {
    format!(
        "DELETE FROM effect_records WHERE key IN (
            SELECT key FROM effect_records
            WHERE version <= ?2 AND {}
            ORDER BY expires_at LIMIT ?3)",
        crate::store::collectable_sql("?1")
    )
});
