//! Opening the journal named by `--store` / `EFFECT_TOOL_STORE`.

use std::sync::Arc;

use effect_tool_core::Store;

use crate::error::CliError;

/// Which backend a `--store` value names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreSpec {
    /// A SQLite file.
    Sqlite(String),
    /// A PostgreSQL connection URL.
    Postgres(String),
}

impl StoreSpec {
    /// Read a `--store` value: `postgres://…` / `postgresql://…` is PostgreSQL, `sqlite:PATH`
    /// or any other text is a SQLite file path.
    pub fn parse(spec: &str) -> Result<StoreSpec, CliError> {
        let spec = spec.trim();
        if spec.is_empty() {
            return Err(CliError::Usage(
                "--store is empty: give a SQLite file path or a postgres:// URL".into(),
            ));
        }
        if spec.starts_with("postgres://") || spec.starts_with("postgresql://") {
            return Ok(StoreSpec::Postgres(spec.to_owned()));
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
            StoreSpec::Postgres(url) => redact_password(url),
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
        StoreSpec::Postgres(url) => open_postgres(&url).await,
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

async fn open_postgres(url: &str) -> Result<Arc<dyn Store>, CliError> {
    Err(CliError::Store(format!(
        "cannot open `{}`: this build of effect-tool has no PostgreSQL backend yet",
        redact_password(url)
    )))
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
            Ok(StoreSpec::Postgres("postgresql://u@h/db".into()))
        );
        assert!(StoreSpec::parse("  ").is_err());
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
