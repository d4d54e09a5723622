//! The [`Store`] implementation of [`SqliteStore`]: each operation on the writer, a read
//! connection, or the caller's thread (see the module docs of `sqlite`).

use super::*;

#[async_trait]
impl Store for SqliteStore {
    fn backend_name(&self) -> &'static str {
        "sqlite"
    }

    fn now(&self) -> Millis {
        self.shared.clock.now()
    }

    /// `BEGIN IMMEDIATE` on a connection of the journal's file (see [`SqliteTransaction`]).
    async fn begin_transaction(
        &self,
        _key: &str,
    ) -> Result<Option<Box<dyn crate::store::JournalTransaction>>, StoreError> {
        self.begin().await.map(Some)
    }

    async fn get(&self, key: &str) -> Result<Option<EffectRecord>, StoreError> {
        let key = key.to_owned();
        self.read(move |conn| read_record(conn, &key)).await
    }

    async fn lookup(&self, key: &str) -> Result<Option<Arc<EffectRecord>>, StoreError> {
        match self.read_now(key, read_record) {
            Some(found) => Ok(found?.map(Arc::new)),
            None => Ok(self.get(key).await?.map(Arc::new)),
        }
    }

    async fn lookup_recorded(&self, key: &str) -> Result<Option<Recorded>, StoreError> {
        match self.read_now(key, read_recorded) {
            Some(found) => found,
            None => {
                let key = key.to_owned();
                self.read(move |conn| read_recorded(conn, &key)).await
            }
        }
    }

    async fn apply(&self, key: &str, op: Op) -> Result<OpOutcome, StoreError> {
        if matches!(op, Op::Claim { .. })
            && let Some(answer) = self.claim_without_write(key, &op)
        {
            return answer;
        }
        self.write(key, op).await
    }

    /// The engine just looked and found no record: no read ahead of the writer's (which reads
    /// again under the write lock, so nothing is skipped but a read that would find nothing).
    async fn claim_unseen(&self, key: &str, op: Op) -> Result<OpOutcome, StoreError> {
        self.write(key, op).await
    }

    async fn list_report(&self, filter: &Filter) -> Result<crate::store::Listing, StoreError> {
        let filter = filter.clone();
        self.read(move |conn| list_records(conn, &filter)).await
    }

    async fn list(&self, filter: &Filter) -> Result<Vec<EffectRecord>, StoreError> {
        Ok(self.list_report(filter).await?.records)
    }

    /// Deletes in chunks, each its own write transaction, so that other writes (of this process
    /// and of others) wait for one chunk at most, not for the whole collection; each chunk is
    /// sized to hold the write lock for about 25 ms (`GC_PACE`). A failure stops it; the
    /// records deleted until then stay deleted.
    async fn gc(&self, now: Millis) -> Result<u64, StoreError> {
        let mut pace = GC_PACE;
        let mut dropped = 0;
        loop {
            let limit = pace.size();
            let started = std::time::Instant::now();
            let chunk = match writer::submit(&self.shared, writer::Work::Gc { now, limit }).await {
                writer::Answer::Gc(answer) => answer?,
                writer::Answer::Apply(_) | writer::Answer::PutMeta(_) | writer::Answer::Spend(_) => {
                    unreachable!("a gc is answered as one")
                }
            };
            dropped += chunk;
            if chunk < limit {
                return Ok(dropped);
            }
            pace.after(started.elapsed());
        }
    }

    /// Through the writer, in its next batch: one `IMMEDIATE` transaction holds SQLite's write
    /// lock across the read and the insert, so two processes never both spend a last unit.
    async fn spend(
        &self,
        spend: &crate::decide::budget::Spend,
    ) -> Result<crate::decide::budget::SpendOutcome, StoreError> {
        match writer::submit(&self.shared, writer::Work::Spend(spend.clone())).await {
            writer::Answer::Spend(answer) => answer,
            writer::Answer::Apply(_) | writer::Answer::Gc(_) | writer::Answer::PutMeta(_) => {
                unreachable!("a spend is answered as one")
            }
        }
    }

    /// One `IMMEDIATE` transaction on a pooled connection, its audit entry in it.
    async fn put_grant(&self, grant: &crate::decide::grant::Grant) -> Result<(), StoreError> {
        let grant = grant.clone();
        self.read(move |conn| match grants::put_grant(conn, &grant) {
            Ok(true) => Ok(()),
            Ok(false) => Err(StoreError::Backend(format!(
                "a grant `{}` exists already: nothing was granted; make it again (it gets a new id)",
                grant.id
            ))),
            Err(e) => Err(backend(e)),
        })
        .await
    }

    async fn grants(&self, tool: Option<&str>) -> Result<Vec<crate::decide::grant::Grant>, StoreError> {
        let tool = tool.map(str::to_owned);
        self.read(move |conn| grants::read_grants(conn, tool.as_deref())).await
    }

    /// One `IMMEDIATE` transaction on a pooled connection, its audit entry in it.
    async fn revoke_grant(&self, id: &str, by: &str) -> Result<Option<crate::decide::grant::Grant>, StoreError> {
        let (id, by, now) = (id.to_owned(), by.to_owned(), self.now());
        self.read(move |conn| grants::revoke_grant(conn, &id, &by, now)).await
    }

    async fn audit(&self, key: Option<&str>) -> Result<Vec<AuditEntry>, StoreError> {
        let key = key.map(str::to_owned);
        self.read(move |conn| read_audit(conn, key.as_deref())).await
    }

    /// One autocommitted `INSERT` on a pooled connection (it waits for the write lock as any
    /// writer does, bounded by `busy_timeout`).
    async fn append_audit(&self, entry: AuditEntry) -> Result<(), StoreError> {
        self.read(move |conn| append_audit(conn, &entry).map_err(backend)).await
    }

    /// The row `output_schema:<tool>` of `effect_tool_meta` (JSON text), replaced when the
    /// schema changed; written through the writer, in its next batch (never on a read
    /// connection, which would contend with the writer for SQLite's write lock).
    async fn put_output_schema(&self, tool: &str, schema: &serde_json::Value) -> Result<(), StoreError> {
        let work = writer::Work::PutMeta {
            name: format!("{OUTPUT_SCHEMA_ROW}{tool}"),
            value: schema.to_string(),
            replace: true,
        };
        match writer::submit(&self.shared, work).await {
            writer::Answer::PutMeta(answer) => answer,
            writer::Answer::Apply(_) | writer::Answer::Gc(_) | writer::Answer::Spend(_) => {
                unreachable!("a meta row is answered as one")
            }
        }
    }

    async fn output_schema(&self, tool: &str) -> Result<Option<serde_json::Value>, StoreError> {
        let name = format!("{OUTPUT_SCHEMA_ROW}{tool}");
        let path = self.shared.path.clone();
        self.read(move |conn| {
            let stored: Option<String> = conn
                .query_row(SELECT_META, [&name], |r| r.get(0))
                .optional()
                .map_err(backend)?;
            stored
                .map(|text| {
                    serde_json::from_str(&text).map_err(|e| {
                        StoreError::Backend(format!(
                            "SQLite journal {}: row `{name}` of `effect_tool_meta` is not JSON ({e}): it was not written by effect-tool; delete it (the tool's next call writes it again)",
                            path.display()
                        ))
                    })
                })
                .transpose()
        })
        .await
    }

    /// The `marker_secret` row of `effect_tool_meta`, read on a pooled connection, and created
    /// on first use through the writer (the first writer wins; every process then reads the
    /// same one).
    async fn marker_secret(&self) -> Result<Option<crate::value::marker::MarkerSecret>, StoreError> {
        let read = || {
            self.read(|conn| {
                conn.query_row(SELECT_META, ["marker_secret"], |r| r.get::<_, String>(0))
                    .optional()
                    .map_err(backend)
            })
        };
        let stored = match read().await? {
            Some(stored) => stored,
            None => {
                let fresh = crate::value::marker::MarkerSecret::random()
                    .map_err(|e| StoreError::Backend(format!("cannot create the journal's marker secret: {e}")))?;
                let work = writer::Work::PutMeta {
                    name: "marker_secret".to_owned(),
                    value: fresh.to_hex(),
                    replace: false,
                };
                match writer::submit(&self.shared, work).await {
                    writer::Answer::PutMeta(answer) => answer?,
                    writer::Answer::Apply(_) | writer::Answer::Gc(_) | writer::Answer::Spend(_) => {
                        unreachable!("a meta row is answered as one")
                    }
                }
                read().await?.unwrap_or_default()
            }
        };
        crate::value::marker::MarkerSecret::from_hex(&stored).map(Some).ok_or_else(|| {
            StoreError::Backend(format!(
                "SQLite journal {}: its marker secret (row `marker_secret` of `effect_tool_meta`) is not 64 hex digits: it was not written by effect-tool; delete the row to make a new one (markers already posted will then no longer verify)",
                self.shared.path.display()
            ))
        })
    }
}
