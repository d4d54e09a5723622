//! The standing approvals of a SQLite journal (`effect_grants`, schema version 6): each write
//! one `IMMEDIATE` transaction on a pooled connection (SQLite's write lock, which the writer's
//! claims wait for as well), its audit entry in it.

use rusqlite::TransactionBehavior;

use super::*;
use crate::decide::grant::{Grant, created_entry, revoke};
use crate::store::grant::{GRANT_FORMAT, decode, encode};

/// Insert `grant` and its audit entry in one transaction; `false`: a grant of its id exists.
pub(super) fn put_grant(conn: &Connection, grant: &Grant) -> rusqlite::Result<bool> {
    let tx = rusqlite::Transaction::new_unchecked(conn, TransactionBehavior::Immediate)?;
    let inserted = tx.execute(
        "INSERT INTO effect_grants (id, tool, format, body, created_at) VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (id) DO NOTHING",
        params![grant.id, grant.tool, GRANT_FORMAT, encode(grant), grant.created_at],
    )?;
    if inserted == 0 {
        return Ok(false);
    }
    append_audit(&tx, &created_entry(grant))?;
    tx.commit()?;
    Ok(true)
}

/// The grants (of `tool` if given), oldest first.
pub(super) fn read_grants(conn: &Connection, tool: Option<&str>) -> Result<Vec<Grant>, StoreError> {
    let mut st = conn
        .prepare_cached(
            "SELECT id, format, body FROM effect_grants WHERE ?1 IS NULL OR tool = ?1 ORDER BY created_at, id",
        )
        .map_err(backend)?;
    let rows = st
        .query_map(params![tool], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?, r.get::<_, String>(2)?))
        })
        .map_err(backend)?;
    let mut out = Vec::new();
    for row in rows {
        let (id, format, body) = row.map_err(backend)?;
        out.push(decode(&id, format, &body)?);
    }
    Ok(out)
}

/// Revoke the grant `id` in one transaction with its audit entry; `None`: no such grant.
pub(super) fn revoke_grant(conn: &Connection, id: &str, by: &str, now: Millis) -> Result<Option<Grant>, StoreError> {
    let tx = rusqlite::Transaction::new_unchecked(conn, TransactionBehavior::Immediate).map_err(backend)?;
    let row = tx
        .query_row(
            "SELECT format, body FROM effect_grants WHERE id = ?1",
            params![id],
            |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)),
        )
        .optional()
        .map_err(backend)?;
    let Some((format, body)) = row else {
        return Ok(None);
    };
    let mut grant = decode(id, format, &body)?;
    if let Some(entry) = revoke(&mut grant, by, now) {
        tx.execute(
            "UPDATE effect_grants SET format = ?2, body = ?3 WHERE id = ?1",
            params![id, GRANT_FORMAT, encode(&grant)],
        )
        .map_err(backend)?;
        append_audit(&tx, &entry).map_err(backend)?;
        tx.commit().map_err(backend)?;
    }
    Ok(Some(grant))
}
