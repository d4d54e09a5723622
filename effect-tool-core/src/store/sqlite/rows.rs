//! Reading and writing the SQLite journal's rows on one connection: records (decoded through
//! `store::row`), the audit trail, meta rows, and the transition and gc run inside the
//! writer's transaction.

use super::*;

use crate::store::row::StoredRow as Row;

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

/// The record under `key`: `Err` when the database fails, `Ok(Err(_))` when the row is there
/// but unreadable (a column of the wrong type, JSON that does not parse, a newer version).
pub(super) fn read_row(conn: &Connection, key: &str) -> rusqlite::Result<Result<Option<EffectRecord>, StoreError>> {
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

pub(super) fn read_record(conn: &Connection, key: &str) -> Result<Option<EffectRecord>, StoreError> {
    read_row(conn, key).map_err(backend)?
}

/// Whether reading a column failed on the value it holds (its type, its range, its text's
/// UTF-8): the row is corrupt, the database is fine.
pub(super) fn is_column_type_error(e: &rusqlite::Error) -> bool {
    matches!(
        e,
        rusqlite::Error::InvalidColumnType(..)
            | rusqlite::Error::FromSqlConversionFailure(..)
            | rusqlite::Error::IntegralValueOutOfRange(..)
            | rusqlite::Error::Utf8Error(..)
    )
}

/// The row under `key` holds a value of the wrong type in a column (`e`).
pub(super) fn corrupt_column(key: &str, e: &rusqlite::Error) -> StoreError {
    StoreError::Corrupt {
        key: key.to_owned(),
        message: format!("a column has an unexpected type: {e}"),
    }
}

/// A failed column read of the row under `key`: corrupt when the value is at fault, a backend
/// failure otherwise.
pub(super) fn column_error(key: &str, e: rusqlite::Error) -> StoreError {
    if is_column_type_error(&e) {
        corrupt_column(key, &e)
    } else {
        backend(e)
    }
}

/// What a replay reads ([`Store::lookup_recorded`]): seven columns instead of nineteen, and no
/// decode of the input JSON. The version is checked first, as [`Row::decode`] does.
pub(super) fn read_recorded(conn: &Connection, key: &str) -> Result<Option<Recorded>, StoreError> {
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
    if !(1..=i64::from(RECORD_VERSION)).contains(&version) {
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
pub(super) enum Guard {
    /// The row was read in this transaction: it is `before`.
    Read,
    /// `before` is a claim this writer wrote earlier ([`Cached`]): update the row only if it is
    /// still exactly that claim (same state, attempt, lease, last change and version). Nothing
    /// but a renewal of the same attempt changes a claim without changing its state or attempt,
    /// and a renewal changes the lease and the time of the last change.
    Cached,
}

/// Write `rec` over `before` (`None` if there is no row): an INSERT of a new row, or an UPDATE
/// of only the columns that changed, so that an index is only rewritten when its column changes
/// (a completion touches only the row). Returns how many rows were written: 0 only when a
/// [`Guard::Cached`] update found the row changed by someone else.
pub(super) fn write_record(
    conn: &Connection,
    before: Option<&EffectRecord>,
    rec: &EffectRecord,
    guard: Guard,
) -> rusqlite::Result<usize> {
    use rusqlite::ToSql;
    // Parameters are borrowed from the record (no copy of its strings); only JSON is written out.
    let output = rec.output.as_ref().map(|v| v.to_string());
    let call_ids = crate::store::row::call_ids_text(rec);
    let holder = crate::store::row::holder_text(rec);
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
    let guarded = guard == Guard::Cached;
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

pub(super) fn append_audit(conn: &Connection, entry: &AuditEntry) -> rusqlite::Result<()> {
    let detail = entry.detail.as_ref().map(|v| v.to_string());
    conn.prepare_cached("INSERT INTO effect_audit (key, at, actor, action, detail) VALUES (?1, ?2, ?3, ?4, ?5)")?
        .execute(params![entry.key, entry.at, entry.actor, entry.action, detail])?;
    Ok(())
}

/// The records `filter` selects; a row that cannot be read (a column of the wrong type, JSON
/// that does not parse, a newer record version) is skipped and reported.
pub(super) fn list_records(conn: &Connection, filter: &Filter) -> Result<crate::store::Listing, StoreError> {
    let (sql, args) = list_sql(filter);
    let mut st = conn.prepare(&sql).map_err(backend)?;
    let mut rows = st.query(rusqlite::params_from_iter(args)).map_err(backend)?;
    let mut listing = crate::store::Listing::default();
    while let Some(r) = rows.next().map_err(backend)? {
        let key: Option<String> = r.get(0).ok();
        let decoded = Row::from_sql(r)
            .map_err(|e| corrupt_column(key.as_deref().unwrap_or_default(), &e))
            .and_then(Row::decode);
        match decoded {
            Ok(rec) => listing.records.push(rec),
            Err(e) => listing.skipped.push(crate::store::skipped(&e, key.as_deref())),
        }
    }
    Ok(listing)
}

pub(super) fn read_audit(conn: &Connection, key: Option<&str>) -> Result<Vec<AuditEntry>, StoreError> {
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
            let detail = crate::store::row::audit_detail(&key, detail)?;
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
/// it and writes with [`Guard::Cached`], instead of reading and decoding the row again. When the
/// row changed meanwhile (another process took the claim over, a person resolved it, gc, a
/// commit that failed after the entry was made) the guarded write matches no row and the
/// operation takes the read path: an entry can be stale, never wrong.
#[derive(Default)]
pub(super) struct Cached(std::collections::HashMap<String, Arc<EffectRecord>>);

impl Cached {
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
pub(super) fn apply_in_tx(
    conn: &Connection,
    key: &str,
    op: &Op,
    held: &mut Cached,
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
        && write_record(conn, Some(&claim), rec, Guard::Cached)? == 1
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

/// Write the row `name` of `effect_tool_meta`: replace its value when `replace` (and only if it
/// changed), else only create it (the first writer wins).
pub(super) fn put_meta_in_tx(conn: &Connection, name: &str, value: &str, replace: bool) -> rusqlite::Result<()> {
    let sql = if replace { REPLACE_META } else { CREATE_META };
    conn.execute(sql, params![name, value]).map(drop)
}

/// Delete up to `limit` collectable records; how many were deleted.
pub(super) fn gc_in_tx(conn: &Connection, now: Millis, limit: u64) -> rusqlite::Result<u64> {
    let n = conn.prepare_cached(&GC_RECORDS)?.execute(params![
        now,
        RECORD_VERSION,
        i64::try_from(limit).unwrap_or(i64::MAX)
    ])?;
    Ok(n as u64)
}
