//! The [`Store`] implementation of [`PostgresStore`] (see the module docs of `postgres`).

use super::*;

#[async_trait]
impl Store for PostgresStore {
    fn backend_name(&self) -> &'static str {
        "postgresql"
    }

    async fn get(&self, key: &str) -> Result<Option<EffectRecord>, StoreError> {
        let client = self.client().await?;
        let row = bounded!(self, client, async {
            self.row(&client, &self.shared.sql.read, &[&key]).await
        })?;
        Ok(PgRow::from_row(&row, 1)?
            .map(PgRow::decode)
            .transpose()?
            .map(|(rec, _)| rec))
    }

    async fn apply(&self, key: &str, op: Op) -> Result<OpOutcome, StoreError> {
        let mut held = None;
        // A claim, or the record of a call that ran without one: insert if new.
        if matches!(op, Op::Claim { .. } | Op::Record { .. }) {
            if let Some(outcome) = self.claim_fast(key, &op).await? {
                return Ok(outcome);
            }
        } else if !matches!(op, Op::ClaimGranted { .. }) {
            // A granted claim takes the general path (its first write is audited), leaving
            // this store's own claims' fast path as it was.
            match self.apply_held(key, &op).await? {
                HeldWrite::Written(outcome) => return Ok(outcome),
                HeldWrite::NotHeld => {}
                HeldWrite::Changed {
                    row_version,
                    held: mine,
                } => held = Some((row_version, mine)),
            }
        }
        let client = self.client().await?;
        bounded!(self, client, self.apply_read(&client, key, &op, held))
    }

    async fn list(&self, filter: &Filter) -> Result<Vec<EffectRecord>, StoreError> {
        Ok(self.list_report(filter).await?.records)
    }

    async fn list_report(&self, filter: &Filter) -> Result<crate::store::Listing, StoreError> {
        let client = self.client().await?;
        let mut sql = self.shared.sql.list_prefix.clone();
        let mut params: Vec<Box<dyn ToSql + Sync + Send>> = Vec::new();
        let mut types = Vec::new();
        if let Some(run) = &filter.run_id {
            params.push(Box::new(run.clone()));
            types.push(Type::TEXT);
            sql.push_str(&format!(" AND run_id = ${}", params.len()));
        }
        if let Some(tool) = &filter.tool {
            params.push(Box::new(tool.clone()));
            types.push(Type::TEXT);
            sql.push_str(&format!(" AND tool = ${}", params.len()));
        }
        if !filter.states.is_empty() {
            let states: Vec<String> = filter.states.iter().map(|s| s.as_str().to_owned()).collect();
            params.push(Box::new(states));
            types.push(Type::TEXT_ARRAY);
            sql.push_str(&format!(" AND state = ANY(${})", params.len()));
        }
        if let Some(since) = filter.updated_since {
            params.push(Box::new(since));
            types.push(Type::INT8);
            sql.push_str(&format!(" AND updated_at >= ${}", params.len()));
        }
        if let Some(before) = filter.updated_before {
            params.push(Box::new(before));
            types.push(Type::INT8);
            sql.push_str(&format!(" AND updated_at < ${}", params.len()));
        }
        if let Some(after) = &filter.after {
            params.push(Box::new(after.updated_at));
            types.push(Type::INT8);
            params.push(Box::new(after.key.clone()));
            types.push(Type::TEXT);
            let (at, key) = (params.len() - 1, params.len());
            sql.push_str(&format!(
                " AND (updated_at < ${at} OR (updated_at = ${at} AND key > ${key}))"
            ));
        }
        sql.push_str(" ORDER BY updated_at DESC, key ASC");
        if let Some(limit) = filter.limit {
            params.push(Box::new(i64::try_from(limit).unwrap_or(i64::MAX)));
            types.push(Type::INT8);
            sql.push_str(&format!(" LIMIT ${}", params.len()));
        }
        let refs: Vec<&(dyn ToSql + Sync)> = params.iter().map(|p| p.as_ref() as &(dyn ToSql + Sync)).collect();
        // Sent unnamed whatever the mode: its text changes with the filter, so a prepared
        // statement would be parsed for one use anyway.
        let typed: Vec<(&(dyn ToSql + Sync), Type)> = refs.iter().copied().zip(types).collect();
        let rows = bounded!(self, client, async {
            client.query_typed(&sql, &typed).await.map_err(pg)
        })?;
        let mut listing = crate::store::Listing {
            records: Vec::with_capacity(rows.len()),
            skipped: Vec::new(),
        };
        // A row that cannot be read (a newer record version, a corrupt column) is skipped and
        // reported, never a failure of the whole list.
        for row in &rows {
            match PgRow::from_row(row, 0).and_then(|r| r.map(PgRow::decode).transpose()) {
                Ok(Some((rec, _))) => listing.records.push(rec),
                Ok(None) => {}
                Err(e) => {
                    let key: Option<String> = row.try_get(0).ok();
                    listing.skipped.push(crate::store::skipped(&e, key.as_deref()));
                }
            }
        }
        Ok(listing)
    }

    async fn gc(&self, now: Millis) -> Result<u64, StoreError> {
        let version = RECORD_VERSION as i32;
        let mut pace = GC_PACE;
        let mut dropped = 0;
        // Where the next chunk's scan starts: the latest `expires_at` deleted so far.
        let mut from = i64::MIN;
        loop {
            let client = self.client().await?;
            let started = tokio::time::Instant::now();
            let size = i64::try_from(pace.size()).unwrap_or(i64::MAX);
            let (chunk, last) = bounded!(self, client, async {
                let row = self
                    .row(&client, &self.shared.sql.gc, &[&now, &version, &size, &from])
                    .await?;
                let gone: i64 = row.get(0);
                let last: Option<i64> = row.get(1);
                Ok::<_, StoreError>((u64::try_from(gone).unwrap_or_default(), last))
            })?;
            from = last.unwrap_or(from);
            dropped += chunk;
            if chunk < pace.size() {
                return Ok(dropped);
            }
            pace.after(started.elapsed());
        }
    }

    async fn audit(&self, key: Option<&str>) -> Result<Vec<AuditEntry>, StoreError> {
        let client = self.client().await?;
        let rows = bounded!(self, client, async {
            self.rows(&client, &self.shared.sql.audit, &[&key]).await
        })?;
        rows.iter()
            .map(|r| {
                let key: String = r.get(0);
                let detail = crate::store::row::audit_detail(&key, r.get(4))?;
                Ok(AuditEntry {
                    key,
                    at: r.get(1),
                    actor: r.get(2),
                    action: r.get(3),
                    detail,
                })
            })
            .collect()
    }

    /// One transaction that first takes a transaction-scoped advisory lock on the run (so the
    /// spends of one run, from any process, follow one another; behind a pooler in transaction
    /// mode too), then reads, decides and inserts.
    async fn spend(
        &self,
        spend: &crate::decide::budget::Spend,
    ) -> Result<crate::decide::budget::SpendOutcome, StoreError> {
        let s = quoted_schema(&self.shared.options.schema)?;
        let lock = format!("effect_tool_budget:{}:{}", self.shared.options.schema, spend.run_id);
        let now = self.now();
        let mut client = self.client().await?;
        bounded!(self, client, async {
            let tx = client.transaction().await.map_err(pg)?;
            tx.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", &[&lock])
                .await
                .map_err(pg)?;
            let read = format!(
                "SELECT COALESCE(SUM(amount), 0)::bigint, COALESCE(bool_or(key = $3), false) FROM {s}.budget_spends WHERE run_id = $1 AND budget = $2"
            );
            let mut spent = std::collections::HashMap::new();
            for charge in &spend.charges {
                let row = tx
                    .query_one(&read, &[&spend.run_id, &charge.budget, &spend.key])
                    .await
                    .map_err(pg)?;
                let total: i64 = row.get(0);
                let charged: bool = row.get(1);
                spent.insert(
                    charge.budget.clone(),
                    crate::decide::budget::Spent {
                        total: u64::try_from(total).unwrap_or(0),
                        charged,
                    },
                );
            }
            let decided = crate::decide::budget::decide(spend, |budget| spent.get(budget).copied().unwrap_or_default());
            let charges = match decided {
                Err(overdraft) => {
                    tx.rollback().await.map_err(pg)?;
                    return Ok(crate::decide::budget::SpendOutcome::Exceeded(overdraft));
                }
                Ok(charges) => charges,
            };
            let insert = format!(
                "INSERT INTO {s}.budget_spends (run_id, budget, key, tool, amount, at) VALUES ($1, $2, $3, $4, $5, $6)"
            );
            for charge in &charges {
                let amount = i64::try_from(charge.amount).unwrap_or(i64::MAX);
                tx.execute(
                    &insert,
                    &[&spend.run_id, &charge.budget, &spend.key, &spend.tool, &amount, &now],
                )
                .await
                .map_err(pg)?;
            }
            tx.commit().await.map_err(pg)?;
            Ok(crate::decide::budget::SpendOutcome::Spent {
                charged: charges.into_iter().map(|c| c.budget).collect(),
            })
        })
    }

    /// One transaction, its audit entry in it.
    async fn put_grant(&self, grant: &crate::decide::grant::Grant) -> Result<(), StoreError> {
        if self.insert_grant(grant).await? {
            return Ok(());
        }
        Err(StoreError::Backend(format!(
            "a grant `{}` exists already: nothing was granted; make it again (it gets a new id)",
            grant.id
        )))
    }

    async fn grants(&self, tool: Option<&str>) -> Result<Vec<crate::decide::grant::Grant>, StoreError> {
        self.read_grants(tool).await
    }

    /// One transaction, the grant's row locked, its audit entry in it.
    async fn revoke_grant(&self, id: &str, by: &str) -> Result<Option<crate::decide::grant::Grant>, StoreError> {
        self.revoke_grant_pg(id, by).await
    }

    async fn append_audit(&self, entry: AuditEntry) -> Result<(), StoreError> {
        let client = self.client().await?;
        let detail = entry.detail.as_ref().map(|d| d.to_string());
        bounded!(self, client, async {
            self.rows(
                &client,
                &self.shared.sql.append_audit,
                &[&entry.key, &entry.at, &entry.actor, &entry.action, &detail],
            )
            .await
        })?;
        Ok(())
    }

    /// A claim is one `INSERT … ON CONFLICT DO NOTHING` round trip that returns a recorded
    /// result too: a separate lookup first would only add a round trip to every new call.
    fn claim_answers_replays(&self) -> bool {
        true
    }

    fn now(&self) -> Millis {
        now_millis() + self.shared.clock_offset.load(Ordering::Relaxed)
    }

    /// `BEGIN` on a pooled connection (see [`PgTransaction`]).
    async fn begin_transaction(
        &self,
        _key: &str,
    ) -> Result<Option<Box<dyn crate::store::JournalTransaction>>, StoreError> {
        self.begin().await.map(Some)
    }

    /// Woken by `NOTIFY`: a person's decision, made through any store on this journal (any
    /// process), wakes the waiters of its key. Never completes behind a transaction pooler
    /// ([`PgOptions::transaction_pooler`]): waiters poll. See [Waiting for a person](crate::store::postgres#waiting-for-a-person).
    async fn changed(&self, key: &str) {
        match &self.shared.listener {
            Some(listener) => listener.changed(key).await,
            None => std::future::pending().await,
        }
    }

    /// The row `output_schema:<tool>` of the schema's `settings` table (JSON text), the table
    /// created on first use as for the marker secret; replaced when the schema changed.
    async fn put_output_schema(&self, tool: &str, schema: &serde_json::Value) -> Result<(), StoreError> {
        let name = &self.shared.options.schema;
        let s = quoted_schema(name)?;
        let row = format!("{}{tool}", crate::store::OUTPUT_SCHEMA_ROW);
        let value = schema.to_string();
        let mut client = self.client().await?;
        bounded!(
            self,
            client,
            self.put_output_schema_on(&mut client, name, &s, &row, &value)
        )
    }

    async fn output_schema(&self, tool: &str) -> Result<Option<serde_json::Value>, StoreError> {
        let name = &self.shared.options.schema;
        let s = quoted_schema(name)?;
        let row = format!("{}{tool}", crate::store::OUTPUT_SCHEMA_ROW);
        let client = self.client().await?;
        let stored = bounded!(self, client, self.output_schema_on(&client, name, &s, &row))?;
        stored
            .map(|text| {
                serde_json::from_str(&text).map_err(|e| {
                    StoreError::Backend(format!(
                        "PostgreSQL schema `{name}`: row `{row}` of `settings` is not JSON ({e}): it was not written by effect-tool; delete it (the tool's next call writes it again)"
                    ))
                })
            })
            .transpose()
    }

    /// The `marker_secret` row of the schema's `settings` table, both created on first use
    /// under the schema's migration lock (the first process wins; every process then reads the
    /// same one).
    async fn marker_secret(&self) -> Result<Option<crate::value::marker::MarkerSecret>, StoreError> {
        let name = &self.shared.options.schema;
        let s = quoted_schema(name)?;
        let mut client = self.client().await?;
        let stored = bounded!(self, client, self.marker_secret_on(&mut client, name, &s))?;
        crate::value::marker::MarkerSecret::from_hex(stored.as_deref().unwrap_or_default())
            .map(Some)
            .ok_or_else(|| {
                StoreError::Backend(format!(
                    "PostgreSQL schema `{name}`: its marker secret (row `marker_secret` of `settings`) is not 64 hex digits: it was not written by effect-tool; delete the row to make a new one (markers already posted will then no longer verify)"
                ))
            })
    }
}
