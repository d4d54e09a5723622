//! Opening the journal named by `--store` / `EFFECT_TOOL_STORE`.

use std::sync::Arc;

use effect_tool_core::Store;

use crate::error::CliError;

/// Which backend a `--store` value names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreSpec {
    /// A SQLite file.
    Sqlite(String),
    /// A PostgreSQL connection URL (without the `schema` parameter) and the schema the
    /// journal lives in (`None`: the backend's default, `effect_tool`).
    Postgres {
        /// The connection URL.
        url: String,
        /// The journal's schema.
        schema: Option<String>,
    },
}

impl StoreSpec {
    /// Read a `--store` value: `postgres://…` / `postgresql://…` is PostgreSQL (a
    /// `schema=NAME` parameter names the journal's schema, as `PgOptions::schema` does in the
    /// application), `sqlite:PATH` or any other text is a SQLite file path.
    pub fn parse(spec: &str) -> Result<StoreSpec, CliError> {
        let spec = spec.trim();
        if spec.is_empty() {
            return Err(CliError::Usage(
                "--store is empty: give a SQLite file path or a postgres:// URL".into(),
            ));
        }
        if spec.starts_with("postgres://") || spec.starts_with("postgresql://") {
            let (url, schema) = split_schema(spec);
            return Ok(StoreSpec::Postgres { url, schema });
        }
        let path = spec
            .strip_prefix("sqlite://")
            .or_else(|| spec.strip_prefix("sqlite:"))
            .unwrap_or(spec);
        Ok(StoreSpec::Sqlite(path.to_owned()))
    }

    /// The spec for messages, with any password in a URL hidden.
    pub fn display(&self) -> String {
        match self {
            StoreSpec::Sqlite(path) => path.clone(),
            StoreSpec::Postgres { url, .. } => redact_password(url),
        }
    }
}

/// `postgres://user:secret@host/db?password=x` → `postgres://user:***@host/db?password=***`.
pub fn redact_password(url: &str) -> String {
    let url = &redact_query_password(url);
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (authority, tail) = match rest.find(['/', '?']) {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{host}{tail}"),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

/// The URL without its `schema=NAME` parameter, and the schema.
fn split_schema(url: &str) -> (String, Option<String>) {
    let Some((base, query)) = url.split_once('?') else {
        return (url.to_owned(), None);
    };
    let mut schema = None;
    let rest: Vec<&str> = query
        .split('&')
        .filter(|p| match p.split_once('=') {
            Some(("schema", v)) => {
                schema = Some(v.to_owned());
                false
            }
            _ => true,
        })
        .collect();
    let url = if rest.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", rest.join("&"))
    };
    (url, schema)
}

fn redact_query_password(url: &str) -> String {
    let Some((base, query)) = url.split_once('?') else {
        return url.to_owned();
    };
    let params: Vec<String> = query
        .split('&')
        .map(|p| match p.split_once('=') {
            Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
            _ => p.to_owned(),
        })
        .collect();
    format!("{base}?{}", params.join("&"))
}

/// Open the journal. A SQLite file must exist (a typo must not create an empty journal that
/// shows nothing to resolve).
pub async fn open(spec: &str) -> Result<Arc<dyn Store>, CliError> {
    match StoreSpec::parse(spec)? {
        StoreSpec::Sqlite(path) => open_sqlite(&path),
        StoreSpec::Postgres { url, schema } => open_postgres(&url, schema).await,
    }
}

fn open_sqlite(path: &str) -> Result<Arc<dyn Store>, CliError> {
    let p = std::path::Path::new(path);
    if !p.is_file() {
        return Err(CliError::Store(format!(
            "no SQLite journal at `{}`: check --store / EFFECT_TOOL_STORE (the application creates the file when it first runs)",
            crate::output::clean(path)
        )));
    }
    sqlite_backend(path)
}

fn sqlite_backend(path: &str) -> Result<Arc<dyn Store>, CliError> {
    let store = effect_tool_core::store::sqlite::SqliteStore::open(path).map_err(|e| {
        CliError::Store(format!(
            "cannot open the SQLite journal `{}`: {e}",
            crate::output::clean(path)
        ))
    })?;
    Ok(Arc::new(store))
}

/// How long connecting to PostgreSQL may take before the store counts as unreachable.
#[cfg(feature = "postgres")]
const PG_CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(15);

#[cfg(feature = "postgres")]
async fn open_postgres(url: &str, schema: Option<String>) -> Result<Arc<dyn Store>, CliError> {
    use effect_tool_core::store::postgres::{PgOptions, PostgresStore};
    let shown = redact_password(url);
    let mut options = PgOptions {
        // One operator command needs one connection.
        pool_size: 2,
        ..PgOptions::default()
    };
    if let Some(schema) = schema {
        options.schema = schema;
    }
    match tokio::time::timeout(PG_CONNECT_TIMEOUT, PostgresStore::connect_with(url, options)).await {
        Ok(Ok(store)) => Ok(Arc::new(store)),
        Ok(Err(e)) => Err(CliError::Store(scrub(
            &format!("cannot open the PostgreSQL journal `{shown}`: {e}"),
            url,
        ))),
        Err(_) => Err(CliError::Store(format!(
            "cannot open the PostgreSQL journal `{shown}`: no answer within {} s; check the host, port and network",
            PG_CONNECT_TIMEOUT.as_secs()
        ))),
    }
}

#[cfg(not(feature = "postgres"))]
async fn open_postgres(url: &str, _schema: Option<String>) -> Result<Arc<dyn Store>, CliError> {
    Err(CliError::Usage(format!(
        "cannot open `{}`: this effect-tool was built without PostgreSQL support (build it with the `postgres` feature)",
        redact_password(url)
    )))
}

/// `message` with the URL's password (if any) replaced, in case an underlying error quotes it.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
fn scrub(message: &str, url: &str) -> String {
    let mut out = message.to_owned();
    for secret in passwords(url) {
        if secret.len() >= 2 {
            out = out.replace(&secret, "***");
        }
    }
    out
}

/// The passwords a URL carries (in its user info or a `password=` parameter).
fn passwords(url: &str) -> Vec<String> {
    let mut found = Vec::new();
    let authority = url
        .split_once("://")
        .map_or("", |(_, rest)| rest.split(['/', '?']).next().unwrap_or(""));
    if let Some((_, pw)) = authority
        .rsplit_once('@')
        .and_then(|(userinfo, _)| userinfo.split_once(':'))
    {
        found.push(pw.to_owned());
    }
    let query = url.split_once('?').map_or("", |(_, q)| q);
    found.extend(
        query
            .split('&')
            .filter_map(|p| p.split_once('='))
            .filter(|(k, _)| k.eq_ignore_ascii_case("password"))
            .map(|(_, v)| v.to_owned()),
    );
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs() {
        assert_eq!(StoreSpec::parse("j.db"), Ok(StoreSpec::Sqlite("j.db".into())));
        assert_eq!(
            StoreSpec::parse("sqlite:/tmp/j.db"),
            Ok(StoreSpec::Sqlite("/tmp/j.db".into()))
        );
        assert_eq!(
            StoreSpec::parse("postgresql://u@h/db"),
            Ok(StoreSpec::Postgres {
                url: "postgresql://u@h/db".into(),
                schema: None
            })
        );
        assert_eq!(
            StoreSpec::parse("postgres://u@h/db?sslmode=disable&schema=ops_journal"),
            Ok(StoreSpec::Postgres {
                url: "postgres://u@h/db?sslmode=disable".into(),
                schema: Some("ops_journal".into())
            })
        );
        assert!(StoreSpec::parse("  ").is_err());
    }

    #[test]
    fn passwords_are_scrubbed_from_messages() {
        assert_eq!(
            scrub("auth failed for hunter2 at h", "postgres://u:hunter2@h/db"),
            "auth failed for *** at h"
        );
        assert_eq!(passwords("postgres://u@h/db?password=pw&x=1"), vec!["pw".to_owned()]);
    }

    #[test]
    fn passwords_are_hidden() {
        assert_eq!(
            redact_password("postgres://u:pw@h:5432/db"),
            "postgres://u:***@h:5432/db"
        );
        assert_eq!(redact_password("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(
            redact_password("postgres://h/db?password=x"),
            "postgres://h/db?password=***"
        );
    }
}
