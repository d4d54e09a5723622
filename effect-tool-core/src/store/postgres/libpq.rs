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
//!   is ignored (with a warning), and the password is looked up for each host of a multi-host
//!   string (`host=a,b port=5432,5433`) with that host's name (its `hostaddr` when it has no
//!   name) and port: when the hosts' passwords differ, each host is connected to with its own
//!   ([`host_config`]). A Unix socket folder matches a line naming that folder, or `localhost`.
//! - The user, when neither the string nor `PGUSER` names one: the operating system's (`USER`).

use std::path::{Path, PathBuf};

/// The environment as the resolution reads it (the process's, or a test's).
pub(super) type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

/// The process environment.
pub(super) fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// The password file's password of each host of a connection, when they differ (when one
/// password serves every host, it is set on the configuration instead).
pub(super) type HostPasswords = Option<std::sync::Arc<[Option<String>]>>;

/// Fill in what `config` leaves out from the environment and the password file; the
/// password file's passwords per host when the hosts' differ.
pub(super) fn apply(config: &mut tokio_postgres::Config, env: Env<'_>) -> HostPasswords {
    // As libpq: `PGHOST` when the string names no host, `localhost` when it gives no address
    // either.
    let default_host = || config.get_hostaddrs().is_empty().then(|| "localhost".to_owned());
    if config.get_hosts().is_empty()
        && let Some(hosts) = env("PGHOST").or_else(default_host)
    {
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
    if config.get_password().is_some() {
        return None;
    }
    if let Some(password) = env("PGPASSWORD") {
        config.password(password);
        return None;
    }
    let passwords = from_password_file(config, env)?;
    match passwords.first() {
        Some(first) if passwords.iter().all(|p| p == first) => {
            if let Some(password) = first {
                config.password(password.as_str());
            }
            None
        }
        _ => Some(passwords.into()),
    }
}

/// The password file's path: `PGPASSFILE`, else `~/.pgpass`.
fn password_file(env: Env<'_>) -> Option<PathBuf> {
    env("PGPASSFILE")
        .map(PathBuf::from)
        .or_else(|| env("HOME").map(|h| Path::new(&h).join(".pgpass")))
}

/// The number of hosts of `config` (names, or addresses without names).
pub(super) fn host_count(config: &tokio_postgres::Config) -> usize {
    config.get_hosts().len().max(config.get_hostaddrs().len())
}

/// The port of host `i`: its own, else the one port given for all, else 5432.
fn port_of(config: &tokio_postgres::Config, i: usize) -> u16 {
    let ports = config.get_ports();
    ports.get(i).or_else(|| ports.first()).copied().unwrap_or(5432)
}

/// The password file's password of each host of `config`, in order; `None` when there is no
/// file to read.
fn from_password_file(config: &tokio_postgres::Config, env: Env<'_>) -> Option<Vec<Option<String>>> {
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
    let user = config.get_user().unwrap_or_default();
    let db = config.get_dbname().unwrap_or(user);
    let passwords = (0..host_count(config))
        .map(|i| {
            let port = port_of(config, i).to_string();
            match config.get_hosts().get(i) {
                Some(tokio_postgres::config::Host::Tcp(host)) => lookup(&text, host, &port, db, user),
                #[cfg(unix)]
                Some(tokio_postgres::config::Host::Unix(folder)) => {
                    lookup(&text, &folder.to_string_lossy(), &port, db, user)
                        .or_else(|| lookup(&text, "localhost", &port, db, user))
                }
                None => {
                    let addr = config
                        .get_hostaddrs()
                        .get(i)
                        .map(ToString::to_string)
                        .unwrap_or_default();
                    lookup(&text, &addr, &port, db, user)
                }
            }
        })
        .collect();
    Some(passwords)
}

/// `config` for its host `i` alone (with its address and port), with `password`: what libpq
/// connects to when it tries that host with the password the password file gives it.
pub(super) fn host_config(config: &tokio_postgres::Config, i: usize, password: Option<&str>) -> tokio_postgres::Config {
    let mut one = tokio_postgres::Config::new();
    match config.get_hosts().get(i) {
        Some(tokio_postgres::config::Host::Tcp(host)) => {
            one.host(host);
        }
        #[cfg(unix)]
        Some(tokio_postgres::config::Host::Unix(folder)) => {
            one.host_path(folder);
        }
        None => {}
    }
    if let Some(addr) = config.get_hostaddrs().get(i) {
        one.hostaddr(*addr);
    }
    if !config.get_ports().is_empty() {
        one.port(port_of(config, i));
    }
    if let Some(password) = password {
        one.password(password);
    }
    if let Some(user) = config.get_user() {
        one.user(user);
    }
    if let Some(db) = config.get_dbname() {
        one.dbname(db);
    }
    if let Some(options) = config.get_options() {
        one.options(options);
    }
    if let Some(app) = config.get_application_name() {
        one.application_name(app);
    }
    if let Some(timeout) = config.get_connect_timeout() {
        one.connect_timeout(*timeout);
    }
    if let Some(timeout) = config.get_tcp_user_timeout() {
        one.tcp_user_timeout(*timeout);
    }
    if let Some(interval) = config.get_keepalives_interval() {
        one.keepalives_interval(interval);
    }
    if let Some(retries) = config.get_keepalives_retries() {
        one.keepalives_retries(retries);
    }
    one.ssl_mode(config.get_ssl_mode())
        .ssl_negotiation(config.get_ssl_negotiation())
        .keepalives(config.get_keepalives())
        .keepalives_idle(config.get_keepalives_idle())
        .target_session_attrs(config.get_target_session_attrs())
        .channel_binding(config.get_channel_binding())
        .load_balance_hosts(config.get_load_balance_hosts());
    one
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

    /// A password file of a test's own (0600), removed when dropped.
    struct PassFile(PathBuf);

    impl PassFile {
        fn new(text: &str) -> PassFile {
            let dir = std::env::temp_dir().join(format!("et-pgpass-{}-{}", std::process::id(), fastrand::u64(..)));
            std::fs::create_dir_all(&dir).unwrap();
            let file = dir.join("pgpass");
            std::fs::write(&file, text).unwrap();
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
            }
            PassFile(file)
        }
    }

    impl Drop for PassFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(self.0.parent().unwrap());
        }
    }

    /// The hosts, ports and passwords `config` would be connected to with, in order.
    fn tried(config: &tokio_postgres::Config, passwords: &HostPasswords) -> Vec<(String, u16, Option<String>)> {
        super::super::connect::attempts(config, passwords)
            .iter()
            .flat_map(|c| {
                let password = c.get_password().map(|p| String::from_utf8(p.to_vec()).unwrap());
                (0..host_count(c)).map(move |i| {
                    let host = match c.get_hosts().get(i) {
                        Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
                        Some(other) => format!("{other:?}"),
                        None => c.get_hostaddrs()[i].to_string(),
                    };
                    (host, port_of(c, i), password.clone())
                })
            })
            .collect()
    }

    #[test]
    fn the_password_file_is_read_for_every_host() {
        let file = PassFile::new(
            "db-a:5432:app:alice:pass-a\ndb-b:5433:app:alice:pass-b\n10.0.0.3:5434:app:alice:pass-c\n/run/pg:5432:app:alice:pass-sock\n*:6000:*:*:everywhere\n",
        );
        let path = file.0.to_str().unwrap().to_owned();
        let env = move |k: &str| (k == "PGPASSFILE").then(|| path.clone());
        let apply_to = |s: &str| {
            let mut c: tokio_postgres::Config = s.parse().unwrap();
            let passwords = apply(&mut c, &env);
            (c, passwords)
        };
        let own = |h: &str, p: u16, pw: Option<&str>| (h.to_owned(), p, pw.map(str::to_owned));

        // Each host with its own password, in the string's order (ports per host).
        let (c, pw) = apply_to("host=db-a,db-b,nowhere port=5432,5433,5432 user=alice dbname=app");
        assert_eq!(c.get_password(), None, "no one password for all hosts");
        assert_eq!(
            tried(&c, &pw),
            vec![
                own("db-a", 5432, Some("pass-a")),
                own("db-b", 5433, Some("pass-b")),
                own("nowhere", 5432, None)
            ]
        );
        // The URL form, an address without a name, and a Unix socket folder.
        let (c, pw) = apply_to("postgres://alice@db-a:5432,db-b:5433/app");
        assert_eq!(
            tried(&c, &pw),
            vec![own("db-a", 5432, Some("pass-a")), own("db-b", 5433, Some("pass-b"))]
        );
        let (c, pw) = apply_to("hostaddr=10.0.0.9,10.0.0.3 port=5434 user=alice dbname=app");
        assert_eq!(
            tried(&c, &pw),
            vec![own("10.0.0.9", 5434, None), own("10.0.0.3", 5434, Some("pass-c"))]
        );
        let (c, pw) = apply_to("host=db-a,/run/pg port=5432 user=alice dbname=app");
        assert_eq!(tried(&c, &pw)[1].2.as_deref(), Some("pass-sock"));
        // One password for every host: set once, the hosts left to tokio-postgres.
        let (c, pw) = apply_to("host=db-x,db-y port=6000 user=bob dbname=x");
        assert!(pw.is_none());
        assert_eq!(c.get_password(), Some(&b"everywhere"[..]));
        // A password in the string or PGPASSWORD serves every host, as in libpq.
        let (c, pw) = apply_to("host=db-a,db-b port=5432,5433 user=alice dbname=app password=given");
        assert!(pw.is_none());
        assert_eq!(c.get_password(), Some(&b"given"[..]));
    }

    /// A host's own configuration is the whole one but for the other hosts (every setting
    /// tokio-postgres has is carried over: its `Debug` shows all but `ssl_negotiation`).
    #[test]
    fn a_host_config_keeps_every_setting() {
        let mut c: tokio_postgres::Config = "host=db-a hostaddr=10.0.0.1 port=5433 user=u dbname=d password=p options='-c x=1' application_name=app sslmode=require connect_timeout=3 tcp_user_timeout=4 keepalives=0 keepalives_idle=5 keepalives_interval=6 keepalives_retries=7 target_session_attrs=read-write channel_binding=disable load_balance_hosts=random"
            .parse()
            .unwrap();
        c.ssl_negotiation(tokio_postgres::config::SslNegotiation::Direct);
        let one = host_config(&c, 0, Some("p"));
        assert_eq!(format!("{one:?}"), format!("{c:?}"));
        assert_eq!(one.get_password(), Some(&b"p"[..]));
        assert_eq!(one.get_ssl_negotiation(), c.get_ssl_negotiation());
    }
}
