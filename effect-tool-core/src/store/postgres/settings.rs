//! The schema's `settings` table, made on first use: the marker secret and each tool's output
//! schema.

use super::*;

/// Make the schema's `settings` table (`s`, the quoted schema `name`) inside `tx`, under the
/// schema's lock, unless it exists: it is made on first use (the marker secret, an output
/// schema), not by a migration, so that a journal migrated by a DBA needs no new DDL for it.
pub(super) async fn create_settings(
    tx: &deadpool_postgres::Transaction<'_>,
    name: &str,
    s: &str,
) -> Result<(), StoreError> {
    lock_schema(tx, name).await?;
    tx.batch_execute(&format!(
        "CREATE TABLE IF NOT EXISTS {s}.settings (name text PRIMARY KEY, value text NOT NULL)"
    ))
    .await
    .map_err(pg)
}

impl PostgresStore {
    /// The stored marker secret (hex), made and stored first if there is none.
    pub(super) async fn marker_secret_on(
        &self,
        client: &mut deadpool_postgres::Object,
        name: &str,
        s: &str,
    ) -> Result<Option<String>, StoreError> {
        let select = format!("SELECT value FROM {s}.settings WHERE name = 'marker_secret'");
        // Read-only first: once it exists, no DDL or write privileges are needed.
        let mut stored: Option<String> = None;
        if self.has_settings(client, name).await? {
            stored = client
                .query_typed_opt(&select, &[])
                .await
                .map_err(pg)?
                .map(|r| r.get(0));
        }
        if stored.is_none() {
            let fresh = crate::value::marker::MarkerSecret::random()
                .map_err(|e| StoreError::Backend(format!("cannot create the journal's marker secret: {e}")))?;
            let tx = client.transaction().await.map_err(pg)?;
            create_settings(&tx, name, s).await?;
            tx.query_typed(
                &format!(
                    "INSERT INTO {s}.settings (name, value) VALUES ('marker_secret', $1) ON CONFLICT (name) DO NOTHING"
                ),
                &[(&fresh.to_hex(), Type::TEXT)],
            )
            .await
            .map_err(pg)?;
            stored = tx.query_typed_opt(&select, &[]).await.map_err(pg)?.map(|r| r.get(0));
            tx.commit().await.map_err(pg)?;
        }
        Ok(stored)
    }

    /// Whether the schema's `settings` table exists (it is made on first use).
    pub(super) async fn has_settings(
        &self,
        client: &deadpool_postgres::Object,
        name: &str,
    ) -> Result<bool, StoreError> {
        Ok(client
            .query_typed_opt(HAS_SETTINGS, &[(&name, Type::TEXT)])
            .await
            .map_err(pg)?
            .is_some())
    }

    /// Write the row `output_schema:<tool>` of `settings` (the table made first, under the
    /// schema's lock, if there is none), unless it already holds `value`.
    pub(super) async fn put_output_schema_on(
        &self,
        client: &mut deadpool_postgres::Object,
        name: &str,
        s: &str,
        row: &str,
        value: &str,
    ) -> Result<(), StoreError> {
        let upsert = format!(
            "INSERT INTO {s}.settings (name, value) VALUES ($1, $2) ON CONFLICT (name) DO UPDATE SET value = excluded.value WHERE {s}.settings.value <> excluded.value"
        );
        if self.has_settings(client, name).await? {
            client
                .query_typed(&upsert, &[(&row, Type::TEXT), (&value, Type::TEXT)])
                .await
                .map_err(pg)?;
            return Ok(());
        }
        let tx = client.transaction().await.map_err(pg)?;
        create_settings(&tx, name, s).await?;
        tx.query_typed(&upsert, &[(&row, Type::TEXT), (&value, Type::TEXT)])
            .await
            .map_err(pg)?;
        tx.commit().await.map_err(pg)
    }

    /// The row `output_schema:<tool>` of `settings`, if the table and the row exist.
    pub(super) async fn output_schema_on(
        &self,
        client: &deadpool_postgres::Object,
        name: &str,
        s: &str,
        row: &str,
    ) -> Result<Option<String>, StoreError> {
        if !self.has_settings(client, name).await? {
            return Ok(None);
        }
        Ok(client
            .query_typed_opt(
                &format!("SELECT value FROM {s}.settings WHERE name = $1"),
                &[(&row, Type::TEXT)],
            )
            .await
            .map_err(pg)?
            .map(|r| r.get(0)))
    }
}
