//! The standing approvals of a PostgreSQL journal (`grants`, migration 5): each write one
//! transaction, its audit entry in it; a revocation locks the grant's row (`FOR UPDATE`), so two
//! revocations follow one another and the first one's entry is the only one.

use super::*;
use crate::decide::grant::{Grant, created_entry, revoke};
use crate::store::grant::{GRANT_FORMAT, decode, encode};

impl PostgresStore {
    /// Insert `grant` and its audit entry in one transaction; `false`: a grant of its id exists.
    pub(super) async fn insert_grant(&self, grant: &Grant) -> Result<bool, StoreError> {
        let s = quoted_schema(&self.shared.options.schema)?;
        let mut client = self.client().await?;
        let entry = created_entry(grant);
        bounded!(self, client, async {
            let tx = client.transaction().await.map_err(pg)?;
            let inserted = tx
                .execute(
                    &format!(
                        "INSERT INTO {s}.grants (id, tool, format, body, created_at) VALUES ($1, $2, $3, $4, $5) ON CONFLICT (id) DO NOTHING"
                    ),
                    &[&grant.id, &grant.tool, &GRANT_FORMAT, &encode(grant), &grant.created_at],
                )
                .await
                .map_err(pg)?;
            if inserted == 0 {
                tx.rollback().await.map_err(pg)?;
                return Ok(false);
            }
            append_audit_in(&tx, &s, &entry).await?;
            tx.commit().await.map_err(pg)?;
            Ok(true)
        })
    }

    /// The grants (of `tool` if given), oldest first.
    pub(super) async fn read_grants(&self, tool: Option<&str>) -> Result<Vec<Grant>, StoreError> {
        let s = quoted_schema(&self.shared.options.schema)?;
        let client = self.client().await?;
        // Unnamed (`query_typed`: parse, bind and execute in one round trip): outside a
        // transaction, a statement prepared first could be run on another server connection
        // behind a pooler in transaction mode, which does not know it.
        let rows = bounded!(self, client, async {
            client
                .query_typed(
                    &format!(
                        "SELECT id, format, body FROM {s}.grants WHERE $1::text IS NULL OR tool = $1 ORDER BY created_at, id"
                    ),
                    &[(&tool, tokio_postgres::types::Type::TEXT)],
                )
                .await
                .map_err(pg)
        })?;
        rows.iter().map(|r| decode(r.get(0), r.get(1), r.get(2))).collect()
    }

    /// Revoke the grant `id` in one transaction, its row locked, with its audit entry.
    pub(super) async fn revoke_grant_pg(&self, id: &str, by: &str) -> Result<Option<Grant>, StoreError> {
        let s = quoted_schema(&self.shared.options.schema)?;
        let now = self.now();
        let mut client = self.client().await?;
        bounded!(self, client, async {
            let tx = client.transaction().await.map_err(pg)?;
            let row = tx
                .query_opt(
                    &format!("SELECT format, body FROM {s}.grants WHERE id = $1 FOR UPDATE"),
                    &[&id],
                )
                .await
                .map_err(pg)?;
            let Some(row) = row else {
                tx.rollback().await.map_err(pg)?;
                return Ok(None);
            };
            let mut grant = decode(id, row.get(0), row.get(1))?;
            match revoke(&mut grant, by, now) {
                Some(entry) => {
                    tx.execute(
                        &format!("UPDATE {s}.grants SET format = $2, body = $3 WHERE id = $1"),
                        &[&id, &GRANT_FORMAT, &encode(&grant)],
                    )
                    .await
                    .map_err(pg)?;
                    append_audit_in(&tx, &s, &entry).await?;
                    tx.commit().await.map_err(pg)?;
                }
                None => tx.rollback().await.map_err(pg)?,
            }
            Ok(Some(grant))
        })
    }
}

/// Append `entry` to the audit trail inside `tx`.
async fn append_audit_in(
    tx: &deadpool_postgres::Transaction<'_>,
    s: &str,
    entry: &AuditEntry,
) -> Result<(), StoreError> {
    let detail = entry.detail.as_ref().map(|d| d.to_string());
    tx.execute(
        &format!("INSERT INTO {s}.audit (key, at, actor, action, detail) VALUES ($1, $2, $3, $4, $5::text::json)"),
        &[&entry.key, &entry.at, &entry.actor, &entry.action, &detail],
    )
    .await
    .map_err(pg)?;
    Ok(())
}
