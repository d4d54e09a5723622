//! What libpq reads besides the connection string, so that a journal connects where `psql` with
//! the same settings would: the `PG*` environment variables and the password file.
//!
//! - For every setting the connection string leaves out: `PGHOST` (a comma-separated list, a
//!   path for a Unix socket directory; `localhost` when unset), `PGPORT`, `PGUSER`,
//!   `PGDATABASE`, `PGAPPNAME`. `PGSSLMODE`, `PGSSLROOTCERT`, `PGSSLCERT` and `PGSSLKEY` apply
//!   when neither the URL nor [`PgOptions`](super::PgOptions) sets them (read in `connect_with`,
//!   beside the TLS settings). `PGCONNECT_TIMEOUT` is not read: the timeout is
//!   `PgOptions::connect_timeout`.
//! - The password, when the string has none: `PGPASSWORD`, else the first matching line of the
//!   password file (`PGPASSFILE`, default `~/.pgpass`): `host:port:database:user:password`, `*`
//!   matching anything, `\:` and `\\` escaped. As libpq, a file that the group or others may read
//!   is ignored (with a warning).
//! - The user, when neither the string nor `PGUSER` names one: the operating system's (`USER`).

use std::path::{Path, PathBuf};

/// The environment as the resolution reads it (the process's, or a test's).
pub(super) type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

/// The process environment.
pub(super) fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// Fill in what `config` leaves out from the environment and the password file.
pub(super) fn apply(config: &mut tokio_postgres::Config, env: Env<'_>) {
    if config.get_hosts().is_empty() {
        let hosts = env("PGHOST").unwrap_or_else(|| "localhost".into());
        for host in hosts.split(',').map(str::trim).filter(|h| !h.is_empty()) {
            if host.starts_with('/') {
                config.host_path(host);
            } else {
                config.host(host);
            }
        }
    }
    if config.get_ports().is_empty()
        && let Some(port) = env("PGPORT").and_then(|p| p.trim().parse::<u16>().ok())
    {
        config.port(port);
    }
    if config.get_user().is_none()
        && let Some(user) = env("PGUSER").or_else(|| env("USER"))
    {
        config.user(user);
    }
    if config.get_dbname().is_none()
        && let Some(db) = env("PGDATABASE")
    {
        config.dbname(db);
    }
    if config.get_application_name().is_none()
        && let Some(app) = env("PGAPPNAME")
    {
        config.application_name(app);
    }
    if config.get_password().is_none() {
        if let Some(password) = env("PGPASSWORD") {
            config.password(password);
        } else if let Some(password) = from_password_file(config, env) {
            config.password(password);
        }
    }
}

/// The password file's path: `PGPASSFILE`, else `~/.pgpass`.
fn password_file(env: Env<'_>) -> Option<PathBuf> {
    env("PGPASSFILE")
        .map(PathBuf::from)
        .or_else(|| env("HOME").map(|h| Path::new(&h).join(".pgpass")))
}

fn from_password_file(config: &tokio_postgres::Config, env: Env<'_>) -> Option<String> {
    let path = password_file(env)?;
    let text = std::fs::read_to_string(&path).ok()?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        if let Ok(meta) = std::fs::metadata(&path)
            && meta.permissions().mode() & 0o077 != 0
        {
            tracing::warn!(
                path = %path.display(),
                "the password file may be read by the group or others and is ignored (as libpq does): chmod 0600 it"
            );
            return None;
        }
    }
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
        // libpq matches a Unix socket as `localhost`.
        _ => "localhost".to_owned(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432).to_string();
    let user = config.get_user().unwrap_or_default();
    let db = config.get_dbname().unwrap_or(user);
    lookup(&text, &host, &port, db, user)
}

/// The password of the first line of a password file that matches.
pub(super) fn lookup(text: &str, host: &str, port: &str, db: &str, user: &str) -> Option<String> {
    text.lines()
        .filter(|l| !l.trim_start().starts_with('#') && !l.trim().is_empty())
        .filter_map(fields)
        .find(|f| {
            [host, port, db, user]
                .iter()
                .zip(f.iter())
                .all(|(want, have)| have == "*" || have == want)
        })
        .map(|mut f| f.swap_remove(4))
}

/// A line's five fields, unescaped; `None` for a line of another shape.
fn fields(line: &str) -> Option<Vec<String>> {
    let mut out = vec![String::new()];
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.last_mut()?.push(chars.next().unwrap_or('\\')),
            ':' if out.len() < 5 => out.push(String::new()),
            c => out.last_mut()?.push(c),
        }
    }
    (out.len() == 5).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn a_password_file_matches_like_libpq() {
        let file =
            "# comment\ndb.example.com:5432:app:alice:s3cr\\:et\n*:*:*:bob:bobs\nlocalhost:6432:*:alice:pooled\n";
        assert_eq!(
            lookup(file, "db.example.com", "5432", "app", "alice").as_deref(),
            Some("s3cr:et")
        );
        assert_eq!(lookup(file, "other", "1", "x", "bob").as_deref(), Some("bobs"));
        assert_eq!(
            lookup(file, "localhost", "6432", "any", "alice").as_deref(),
            Some("pooled")
        );
        assert_eq!(lookup(file, "db.example.com", "5433", "app", "alice"), None);
        assert_eq!(lookup("a:b:c", "a", "b", "c", "d"), None, "too few fields");
        assert_eq!(
            lookup("h:1:d:u:pa\\\\ss", "h", "1", "d", "u").as_deref(),
            Some("pa\\ss")
        );
    }

    #[test]
    fn the_environment_fills_only_what_the_string_leaves_out() {
        let env: HashMap<&str, &str> = [
            ("PGHOST", "db-a,/var/run/postgresql"),
            ("PGPORT", "6543"),
            ("PGUSER", "app"),
            ("PGDATABASE", "journal"),
            ("PGPASSWORD", "from-env"),
            ("PGAPPNAME", "billing-worker"),
        ]
        .into();
        let lookup = |k: &str| env.get(k).map(|v| (*v).to_owned());
        let mut empty: tokio_postgres::Config = "postgres://".parse().unwrap();
        apply(&mut empty, &lookup);
        assert_eq!(empty.get_hosts().len(), 2);
        assert_eq!(empty.get_ports(), &[6543]);
        assert_eq!((empty.get_user(), empty.get_dbname()), (Some("app"), Some("journal")));
        assert_eq!(empty.get_password(), Some(&b"from-env"[..]));
        assert_eq!(empty.get_application_name(), Some("billing-worker"));

        let mut given: tokio_postgres::Config = "host=db-b port=5432 user=ops dbname=x password=pw".parse().unwrap();
        apply(&mut given, &lookup);
        assert_eq!(
            given.get_hosts(),
            &[tokio_postgres::config::Host::Tcp("db-b".into())],
            "the string's host wins"
        );
        assert_eq!(
            (given.get_user(), given.get_password()),
            (Some("ops"), Some(&b"pw"[..]))
        );
    }

    #[test]
    fn the_password_file_is_read_when_no_password_is_given_and_ignored_when_others_can_read_it() {
        let dir = std::env::temp_dir().join(format!("effect-tool-pgpass-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("pgpass");
        std::fs::write(&file, "127.0.0.1:5432:app:alice:from-file\n").unwrap();
        let path = file.to_str().unwrap().to_owned();
        let env = move |k: &str| (k == "PGPASSFILE").then(|| path.clone());
        let config = || -> tokio_postgres::Config { "postgres://alice@127.0.0.1:5432/app".parse().unwrap() };
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
            let mut c = config();
            apply(&mut c, &env);
            assert_eq!(c.get_password(), Some(&b"from-file"[..]));
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
            let mut c = config();
            apply(&mut c, &env);
            assert_eq!(c.get_password(), None, "a file others can read is ignored");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
