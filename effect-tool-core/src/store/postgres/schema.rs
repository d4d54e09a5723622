//! The PostgreSQL journal's schema and its migrations: the SQL of every version, in order, the
//! `migrations` table that records them, and the upgrade a store applies at connect (see
//! `docs/journal-format.md`).

use super::*;

/// The migrations, in order: (version, name, SQL with `{schema}` for the quoted schema name).
pub(super) const MIGRATIONS: &[(i32, &str, &str)] = &[
    (
        1,
        "records, audit trail, row versions",
        r#"
CREATE SEQUENCE {schema}.row_version_seq;
CREATE TABLE {schema}.records (
    key           text PRIMARY KEY,
    version       integer NOT NULL,
    tool          text NOT NULL,
    class         text NOT NULL,
    run_id        text NOT NULL,
    thread_id     text,
    call_id       text,
    fingerprint   text NOT NULL,
    input         json NOT NULL,
    state         text NOT NULL,
    attempt       bigint NOT NULL,
    lease_until   bigint,
    output        json,
    reason        text,
    approval_role text,
    decided_by    text,
    created_at    bigint NOT NULL,
    updated_at    bigint NOT NULL,
    expires_at    bigint,
    row_version   bigint NOT NULL DEFAULT nextval('{schema}.row_version_seq')
) WITH (fillfactor = 80);
COMMENT ON TABLE {schema}.records IS 'effect-tool journal: one row per effect key; times in ms since the Unix epoch';
-- Few indexes, on columns that rarely change, so that a lease renewal is a HOT update and
-- a completion writes as few index entries as possible; they end in created_at so that new
-- entries land on the last page. Lists sort by updated_at in memory.
CREATE INDEX records_state ON {schema}.records (state, created_at);
CREATE INDEX records_run ON {schema}.records (run_id, created_at);
CREATE INDEX records_expires ON {schema}.records (expires_at) WHERE expires_at IS NOT NULL;
CREATE TABLE {schema}.audit (
    id     bigserial PRIMARY KEY,
    key    text NOT NULL,
    at     bigint NOT NULL,
    actor  text NOT NULL,
    action text NOT NULL,
    detail json
);
COMMENT ON TABLE {schema}.audit IS 'effect-tool audit trail: append-only';
CREATE INDEX audit_key ON {schema}.audit (key, id);
CREATE FUNCTION {schema}.audit_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the effect-tool audit trail is append-only';
END
$$;
CREATE TRIGGER audit_append_only BEFORE UPDATE OR DELETE ON {schema}.audit
    FOR EACH ROW EXECUTE FUNCTION {schema}.audit_append_only();
"#,
    ),
    (
        2,
        "call ids that received a result",
        r#"
-- The other tool-call ids that received a record's result: a JSON array, NULL when none.
ALTER TABLE {schema}.records ADD COLUMN call_ids text;
"#,
    ),
    (
        3,
        "who holds a claim",
        r#"
-- Who made the latest claim: a JSON object (worker, instance, host, pid), NULL when unknown.
ALTER TABLE {schema}.records ADD COLUMN holder text;
"#,
    ),
    (
        4,
        "what runs spent of their budgets",
        r#"
-- One row per (run, budget, key) charged: a key is charged once (effect_tool_core::decide::budget).
CREATE TABLE {schema}.budget_spends (
    run_id text NOT NULL,
    budget text NOT NULL,
    key    text NOT NULL,
    tool   text NOT NULL,
    amount bigint NOT NULL,
    at     bigint NOT NULL,
    PRIMARY KEY (run_id, budget, key)
);
"#,
    ),
    (
        5,
        "standing approvals",
        r#"
-- One row per standing approval (effect_tool_core::decide::grant): its JSON in body (row format
-- `format`), a revocation written into it.
CREATE TABLE {schema}.grants (
    id         text PRIMARY KEY,
    tool       text NOT NULL,
    format     bigint NOT NULL,
    body       text NOT NULL,
    created_at bigint NOT NULL
);
CREATE INDEX grants_tool ON {schema}.grants (tool, created_at);
"#,
    ),
];

/// The newest migration this build knows.
pub const SCHEMA_VERSION: i32 = MIGRATIONS[MIGRATIONS.len() - 1].0;

/// Take the schema's lock (`name`, unquoted) until `tx` ends: migrations and the first
/// `settings` write of concurrent processes take their turns.
pub(super) async fn lock_schema(tx: &deadpool_postgres::Transaction<'_>, name: &str) -> Result<(), StoreError> {
    tx.query_typed(LOCK_SCHEMA, &[(&name, Type::TEXT)]).await.map_err(pg)?;
    Ok(())
}

pub(super) fn migrations_table(s: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {s}.migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now());"
    )
}

pub(super) async fn applied_version(
    client: &deadpool_postgres::Object,
    name: &str,
    s: &str,
) -> Result<Option<i32>, StoreError> {
    let has_table = client
        .query_typed_opt(
            "SELECT 1 FROM pg_tables WHERE schemaname = $1 AND tablename = 'migrations'",
            &[(&name, Type::TEXT)],
        )
        .await
        .map_err(pg)?
        .is_some();
    if !has_table {
        return Ok(None);
    }
    let v: i32 = client
        .query_typed_one(&format!("SELECT coalesce(max(version), 0) FROM {s}.migrations"), &[])
        .await
        .map_err(pg)?
        .get(0);
    let latest = MIGRATIONS.last().map_or(0, |m| m.0);
    if v > latest {
        return Err(newer_schema(name, v, latest));
    }
    Ok(Some(v))
}

pub(super) fn newer_schema(name: &str, found: i32, latest: i32) -> StoreError {
    StoreError::Backend(format!(
        "PostgreSQL schema `{name}` is at effect-tool migration {found}, this effect-tool knows up to {latest}: upgrade effect-tool to use it (the journal was left untouched)"
    ))
}

impl PostgresStore {
    /// The SQL that creates the journal in schema `effect_tool`, for a DBA (the same the
    /// backend applies itself).
    pub fn migration_sql() -> String {
        PostgresStore::migration_sql_for("effect_tool").expect("the default schema name is valid")
    }

    /// The SQL that creates the journal in `schema`.
    pub fn migration_sql_for(schema: &str) -> Result<String, StoreError> {
        let s = quoted_schema(schema)?;
        let mut out = format!(
            "-- effect-tool journal, schema version {SCHEMA_VERSION}\nBEGIN;\nCREATE SCHEMA IF NOT EXISTS {s};\n{}\n",
            migrations_table(&s)
        );
        for (version, name, sql) in MIGRATIONS {
            out.push_str(&format!("\n-- migration {version}: {name}\n"));
            out.push_str(sql.replace("{schema}", &s).trim());
            out.push_str(&format!(
                "\nINSERT INTO {s}.migrations (version, name) VALUES ({version}, '{name}');\n"
            ));
        }
        out.push_str("COMMIT;\n");
        Ok(out)
    }

    pub(super) async fn migrate(&self) -> Result<(), StoreError> {
        let name = &self.shared.options.schema;
        let s = quoted_schema(name)?;
        let mut client = self.client().await?;
        bounded!(self, client, self.migrate_on(&mut client, name, &s))
    }

    /// The migrations not yet applied, in one transaction under the schema's advisory lock.
    pub(super) async fn migrate_on(
        &self,
        client: &mut deadpool_postgres::Object,
        name: &str,
        s: &str,
    ) -> Result<(), StoreError> {
        let latest = MIGRATIONS.last().map_or(0, |m| m.0);
        // Read-only first: a journal already at this version needs no DDL privileges.
        if applied_version(client, name, s).await? == Some(latest) {
            return Ok(());
        }
        let tx = client.transaction().await.map_err(pg)?;
        lock_schema(&tx, name).await?;
        let exists = tx
            .query_typed_opt("SELECT 1 FROM pg_namespace WHERE nspname = $1", &[(&name, Type::TEXT)])
            .await
            .map_err(pg)?
            .is_some();
        if !exists {
            tx.batch_execute(&format!("CREATE SCHEMA {s}")).await.map_err(pg)?;
        }
        tx.batch_execute(&migrations_table(s)).await.map_err(pg)?;
        let current: i32 = tx
            .query_typed_one(&format!("SELECT coalesce(max(version), 0) FROM {s}.migrations"), &[])
            .await
            .map_err(pg)?
            .get(0);
        if current > latest {
            return Err(newer_schema(name, current, latest));
        }
        for (version, mname, sql) in MIGRATIONS.iter().filter(|m| m.0 > current) {
            tracing::info!(schema = %name, version, name = mname, "applying effect-tool migration");
            tx.batch_execute(&sql.replace("{schema}", s)).await.map_err(pg)?;
            tx.query_typed(
                &format!("INSERT INTO {s}.migrations (version, name) VALUES ($1, $2)"),
                &[(version, Type::INT4), (mname, Type::TEXT)],
            )
            .await
            .map_err(pg)?;
        }
        tx.commit().await.map_err(pg)
    }
}
