//! Sending a statement: prepared once per connection and cached (the default), or unnamed,
//! for a pooler in transaction mode.
//!
//! A prepared statement has a name and lives in the server session that parsed it. Behind
//! PgBouncer in transaction pooling mode (1.18 and earlier keep no prepared statements
//! across transactions) the next transaction may run in another server session, where the
//! name is unknown (`26000 prepared statement "s3" does not exist`) or names another
//! statement (`42P05 ... already exists`). With [`PgOptions::transaction_pooler`] every
//! statement is sent unnamed, with its parameter types, in one message sequence ending in
//! one `Sync` (tokio-postgres's `query_typed`): parse, bind, execute in one round trip and one
//! transaction, which any pooler mode carries to a single server session. The server then
//! plans every statement afresh (a few tens of microseconds each).
//!
//! [`PgOptions::transaction_pooler`]: super::PgOptions::transaction_pooler

use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Error, Row};

/// A statement and the types of its parameters (`$1` first).
pub(super) struct Stmt {
    pub sql: String,
    pub types: Vec<Type>,
}

impl Stmt {
    pub(super) fn new(sql: String, types: &[Type]) -> Stmt {
        Stmt {
            sql,
            types: types.to_vec(),
        }
    }
}

/// The parameter types of a record's columns ([`super::COLS`] order), as
/// [`super::RecordParams::refs`] gives them.
pub(super) const RECORD_TYPES: [Type; 21] = [
    Type::TEXT,
    Type::INT4,
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
    Type::INT8,
    Type::INT8,
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
    Type::INT8,
    Type::INT8,
    Type::INT8,
    Type::TEXT,
    Type::TEXT,
];

/// Run `stmt` with `params` on `client`: prepared and cached, or (`unnamed`) sent unnamed.
pub(super) async fn rows(
    client: &deadpool_postgres::Object,
    unnamed: bool,
    stmt: &Stmt,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Vec<Row>, Error> {
    debug_assert_eq!(params.len(), stmt.types.len(), "{}", stmt.sql);
    if unnamed {
        let typed: Vec<(&(dyn ToSql + Sync), Type)> = params.iter().copied().zip(stmt.types.iter().cloned()).collect();
        client.query_typed(&stmt.sql, &typed).await
    } else {
        let st = client.prepare_cached(&stmt.sql).await?;
        client.query(&st, params).await
    }
}
