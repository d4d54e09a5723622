//! A record as PostgreSQL's statements take it ([`RecordParams`]) and give it back ([`PgRow`],
//! decoded through `store::row`).

use super::*;

/// A record's columns as parameters `$1..$21`.
pub(super) struct RecordParams<'a> {
    pub(super) rec: &'a EffectRecord,
    pub(super) version: i32,
    pub(super) attempt: i64,
    pub(super) input: String,
    pub(super) output: Option<String>,
    pub(super) call_ids: Option<String>,
    pub(super) holder: Option<String>,
}

impl<'a> RecordParams<'a> {
    pub(super) fn new(rec: &'a EffectRecord) -> Self {
        RecordParams {
            rec,
            version: rec.version as i32,
            attempt: i64::from(rec.attempt),
            input: rec.input.to_string(),
            output: rec.output.as_ref().map(|v| v.to_string()),
            call_ids: crate::store::row::call_ids_text(rec),
            holder: crate::store::row::holder_text(rec),
        }
    }

    pub(super) fn refs(&self) -> Vec<&(dyn ToSql + Sync)> {
        let r = self.rec;
        vec![
            &r.key,
            &self.version,
            &r.tool,
            r.class.as_str_ref(),
            &r.run_id,
            &r.thread_id,
            &r.call_id,
            &r.fingerprint,
            &self.input,
            r.state.as_str_ref(),
            &self.attempt,
            &r.lease_until,
            &self.output,
            &r.reason,
            &r.approval_role,
            &r.decided_by,
            &r.created_at,
            &r.updated_at,
            &r.expires_at,
            &self.call_ids,
            &self.holder,
        ]
    }
}

/// `&'static str` as a `&dyn ToSql` without a temporary.
pub(super) trait StaticStr {
    fn as_str_ref(&self) -> &'static &'static str;
}

macro_rules! static_names {
    ($ty:ty, $($v:path => $s:literal),* $(,)?) => {
        impl StaticStr for $ty {
            fn as_str_ref(&self) -> &'static &'static str {
                match self { $($v => &$s,)* }
            }
        }
    };
}

static_names!(EffectClass,
    EffectClass::Pure => "pure", EffectClass::Idempotent => "idempotent",
    EffectClass::Compensable => "compensable", EffectClass::Irreversible => "irreversible");
static_names!(RecordState,
    RecordState::Claimed => "claimed", RecordState::Completed => "completed", RecordState::InDoubt => "in-doubt",
    RecordState::AwaitingApproval => "awaiting-approval", RecordState::Approved => "approved",
    RecordState::Denied => "denied", RecordState::Released => "released", RecordState::Compensated => "compensated",
    RecordState::Pending => "pending");

/// One row as stored, before it is checked and decoded, with its row version (the
/// compare-and-set token of this backend).
pub(super) struct PgRow {
    pub(super) row: StoredRow,
    pub(super) row_version: i64,
}

impl PgRow {
    /// The record columns starting at `at`; `None` when the (outer-joined) row is absent.
    pub(super) fn from_row(row: &tokio_postgres::Row, at: usize) -> Result<Option<PgRow>, StoreError> {
        let key: Option<String> = row.try_get(at).map_err(pg)?;
        let Some(key) = key else { return Ok(None) };
        let g = |e: tokio_postgres::Error| StoreError::Corrupt {
            key: key.clone(),
            message: format!("a column has an unexpected type: {e}"),
        };
        let version: i32 = row.try_get(at + 1).map_err(g)?;
        let row_version: i64 = row.try_get(at + 21).map_err(g)?;
        Ok(Some(PgRow {
            row: StoredRow {
                version: i64::from(version),
                tool: row.try_get(at + 2).map_err(g)?,
                class: row.try_get(at + 3).map_err(g)?,
                run_id: row.try_get(at + 4).map_err(g)?,
                thread_id: row.try_get(at + 5).map_err(g)?,
                call_id: row.try_get(at + 6).map_err(g)?,
                fingerprint: row.try_get(at + 7).map_err(g)?,
                input: row.try_get(at + 8).map_err(g)?,
                state: row.try_get(at + 9).map_err(g)?,
                attempt: row.try_get(at + 10).map_err(g)?,
                lease_until: row.try_get(at + 11).map_err(g)?,
                output: row.try_get(at + 12).map_err(g)?,
                reason: row.try_get(at + 13).map_err(g)?,
                approval_role: row.try_get(at + 14).map_err(g)?,
                decided_by: row.try_get(at + 15).map_err(g)?,
                created_at: row.try_get(at + 16).map_err(g)?,
                updated_at: row.try_get(at + 17).map_err(g)?,
                expires_at: row.try_get(at + 18).map_err(g)?,
                call_ids: row.try_get(at + 19).map_err(g)?,
                holder: row.try_get(at + 20).map_err(g)?,
                key,
            },
            row_version,
        }))
    }

    /// Check the version first, then decode (see [`StoredRow::decode`]).
    pub(super) fn decode(self) -> Result<(EffectRecord, i64), StoreError> {
        Ok((self.row.decode()?, self.row_version))
    }
}
