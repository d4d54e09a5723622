//! What the production cases share: the shared server's URL, free ports, commands run as the
//! `postgres` user, and availability checks.

use std::path::PathBuf;
use std::process::Command;

use effect_tool_core::testing::conformance::{PG_URL_ENV, postgres_required};

/// The shared server's URL, or `None` (after a loud SKIPPED line) when there is none and none
/// is required; panics when one is required (CI).
pub fn pg_url(case: &str) -> Option<String> {
    match std::env::var(PG_URL_ENV) {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            assert!(
                !postgres_required(),
                "{case}: EFFECT_TOOL_REQUIRE_PG=1 but {PG_URL_ENV} is not set"
            );
            eprintln!("\n*** SKIPPED POSTGRES {case}: {PG_URL_ENV} is not set ***\n");
            None
        }
    }
}

/// The folder of the shared server's TLS files (`ca.crt`, `client.crt`, `client.key`), from
/// `EFFECT_TOOL_PG_CA`.
pub fn tls_dir(case: &str) -> Option<PathBuf> {
    match std::env::var("EFFECT_TOOL_PG_CA") {
        Ok(ca) if !ca.is_empty() => Some(PathBuf::from(ca).parent().expect("the CA file's folder").to_owned()),
        _ => {
            assert!(
                !postgres_required(),
                "{case}: EFFECT_TOOL_REQUIRE_PG=1 but EFFECT_TOOL_PG_CA is not set (.ci/postgres.sh start exports it)"
            );
            eprintln!("\n*** SKIPPED POSTGRES {case}: EFFECT_TOOL_PG_CA is not set ***\n");
            None
        }
    }
}

/// The host and port of a `postgres://user@host:port/db` URL.
pub fn host_port(url: &str) -> (String, u16) {
    let rest = url.split_once("://").expect("a postgres:// URL").1;
    let authority = rest.split('/').next().unwrap();
    let hostport = authority.rsplit('@').next().unwrap();
    let (host, port) = hostport.rsplit_once(':').unwrap_or((hostport, "5432"));
    (host.to_owned(), port.parse().expect("a port"))
}

/// A TCP port nobody listens on now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// Whether this process runs as root (the servers then run as `postgres`).
pub fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// `program` run as the `postgres` user when this process is root (PostgreSQL and PgBouncer
/// refuse to run as root).
pub fn as_postgres(program: impl Into<PathBuf>) -> Command {
    let program = program.into();
    if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(program);
        c
    } else {
        Command::new(program)
    }
}

/// The PostgreSQL server programs' folder (the newest installed).
pub fn pg_bin(name: &str) -> PathBuf {
    std::fs::read_dir("/usr/lib/postgresql")
        .ok()
        .and_then(|dirs| dirs.filter_map(|d| d.ok()).map(|d| d.path().join("bin")).max())
        .map(|d| d.join(name))
        .filter(|p| p.exists())
        .unwrap_or_else(|| PathBuf::from(name))
}

/// A folder of a case's own, writable by the `postgres` user, removed when dropped.
pub struct ScratchDir(pub PathBuf);

impl ScratchDir {
    pub fn new(what: &str) -> ScratchDir {
        let dir = std::env::temp_dir().join(format!("et-{what}-{}-{:08x}", std::process::id(), fastrand_u32()));
        std::fs::create_dir_all(&dir).unwrap();
        if is_root() {
            let _ = Command::new("chown").arg("postgres:").arg(&dir).status();
        }
        ScratchDir(dir)
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn fastrand_u32() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos()
}

/// A direct connection (no TLS) to `url`, driven on the current runtime.
pub async fn raw(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("connecting to {url}: {e}"));
    tokio::spawn(conn);
    client
}

/// A schema name of its own for a case.
pub fn schema(what: &str) -> String {
    format!("et_prod_{what}_{}_{:08x}", std::process::id(), fastrand_u32())
}
