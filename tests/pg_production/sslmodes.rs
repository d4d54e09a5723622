//! libpq's `sslmode` and root file, mode by mode (issue 29), against a server of this test's
//! own whose certificate names `localhost` only and is signed by a CA made here ("ours");
//! another CA ("theirs") signed nothing the server shows.
//!
//! Every case connects from a process of its own (this test binary again, running the ignored
//! test `sslmodes::probe`), so that it can have a home folder of its own (with or without
//! `~/.postgresql/root.crt`, libpq's default root file) and its own platform roots
//! (`SSL_CERT_FILE`: ours, as if the server's certificate were publicly signed) without
//! touching the environment of the other tests. The role `effect_tool_tls_only` is refused
//! over plain TCP, so a connection made as it was made over TLS.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use effect_tool_core::store::postgres::{PgOptions, PostgresStore};
use effect_tool_core::testing::conformance::postgres_required;

use super::support;
use crate::common::own_postgres::OwnPostgres;

const PG_DIR: &str = "/tmp/et-pg-sslmodes";
const PG_PORT: &str = "25441";
/// The environment variable that hands a probe its URL.
const JOB: &str = "EFFECT_TOOL_SSLMODE_PROBE";

/// The TLS role (refused over plain TCP) and the superuser (taken either way).
const TLS_ONLY: &str = "effect_tool_tls_only";
const ANY: &str = "postgres";
/// A host name the server's certificate names, and an address it does not.
const NAMED: &str = "localhost";
const UNNAMED: &str = "127.0.0.1";

/// Whether PostgreSQL's server programs and the `openssl` CLI are here; when they are not,
/// a loud SKIPPED line, or a failure where PostgreSQL is required (CI).
pub fn tools_present(case: &str) -> bool {
    let initdb = support::pg_bin("initdb");
    let openssl = Command::new("openssl")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success());
    if initdb.is_absolute() && openssl {
        return true;
    }
    assert!(
        !postgres_required(),
        "{case}: EFFECT_TOOL_REQUIRE_PG=1 but PostgreSQL's server programs (/usr/lib/postgresql/*/bin) or the openssl CLI are missing"
    );
    eprintln!("\n*** SKIPPED POSTGRES {case}: PostgreSQL's server programs or the openssl CLI are missing ***\n");
    false
}

/// Run `openssl` in `dir`, failing with its output.
fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("running openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

const EC: [&str; 4] = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"];

/// A CA `name` (`name.crt`, `name.key`) in `dir`.
fn make_ca(dir: &Path, name: &str) -> PathBuf {
    let (crt, key, subject) = (
        format!("{name}.crt"),
        format!("{name}.key"),
        format!("/CN=effect-tool test CA {name}"),
    );
    let mut args = vec!["req", "-x509", "-nodes", "-days", "30", "-subj", &subject];
    args.extend(EC);
    args.extend(["-keyout", &key, "-out", &crt]);
    args.extend(["-addext", "basicConstraints=critical,CA:TRUE"]);
    args.extend(["-addext", "keyUsage=critical,keyCertSign,cRLSign"]);
    openssl(dir, &args);
    dir.join(crt)
}

/// A server certificate for `localhost` only (no IP address), signed by CA `ca`:
/// `server.crt` and `server.key` in `dir`.
fn make_server_cert(dir: &Path, ca: &str) {
    let mut args = vec![
        "req",
        "-nodes",
        "-subj",
        "/CN=localhost",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
    ];
    args.extend(EC);
    openssl(dir, &args);
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=DNS:localhost\nbasicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    let (ca_crt, ca_key) = (format!("{ca}.crt"), format!("{ca}.key"));
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            &ca_crt,
            "-CAkey",
            &ca_key,
            "-CAcreateserial",
            "-days",
            "30",
            "-extfile",
            "server.ext",
            "-out",
            "server.crt",
        ],
    );
}

/// Give the server `server.crt` and `server.key` from `dir` (in its data folder, owned by
/// the server's user, the key 0600) and start it again, so that it shows them.
fn install_server_cert(pg: &OwnPostgres, dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let data = Path::new(PG_DIR).join("data");
    for file in ["server.crt", "server.key"] {
        let to = data.join(file);
        std::fs::copy(dir.join(file), &to).unwrap();
        std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o600)).unwrap();
        if support::is_root() {
            let status = Command::new("chown").arg("postgres:").arg(&to).status().unwrap();
            assert!(status.success(), "chown postgres: {}", to.display());
        }
    }
    pg.kill();
    pg.revive();
}

/// A home folder in `dir` named `name`, with `root` as its `~/.postgresql/root.crt` (or none).
fn make_home(dir: &Path, name: &str, root: Option<&Path>) -> PathBuf {
    let home = dir.join(name);
    std::fs::create_dir_all(home.join(".postgresql")).unwrap();
    if let Some(root) = root {
        std::fs::copy(root, home.join(".postgresql/root.crt")).unwrap();
    }
    home
}

/// A probe's environment, its platform roots, the host, and what is expected (`None`: to
/// connect, else a part of the error).
type EnvCase<'a> = (&'a [(&'a str, &'a str)], &'a Path, &'a str, Option<&'a str>);

/// Where a probe runs: its home folder, its platform roots and more environment.
struct Probe<'a> {
    home: &'a Path,
    platform: &'a Path,
    no_dir: &'a Path,
    env: &'a [(&'a str, &'a str)],
}

impl Probe<'_> {
    /// Connect as `user` to `host` with `query` from a process of its own: `Ok`, or the
    /// store's error.
    fn connect(&self, user: &str, host: &str, query: &str) -> Result<(), String> {
        let url = format!("postgres://{user}@{host}:{PG_PORT}/effect_tool_test?{query}");
        let mut env = vec![
            ("HOME", self.home.to_str().unwrap()),
            ("SSL_CERT_FILE", self.platform.to_str().unwrap()),
            ("SSL_CERT_DIR", self.no_dir.to_str().unwrap()),
        ];
        env.extend(self.env);
        connect_in_a_process(&url, &env)
    }
}

/// Make a store of `url` in a process of its own (this test binary running [`probe`]), with
/// `env` and none of libpq's `PG*` variables but those of `env`: `Ok`, or the store's error.
pub fn connect_in_a_process(url: &str, env: &[(&str, &str)]) -> Result<(), String> {
    let mut cmd = Command::new(std::env::current_exe().expect("the test binary"));
    cmd.args([
        "--ignored",
        "--exact",
        "sslmodes::probe",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(JOB, url)
    .stdin(std::process::Stdio::null());
    for var in [
        "PGSSLMODE",
        "PGSSLROOTCERT",
        "PGSSLCERT",
        "PGSSLKEY",
        "PGHOST",
        "PGPORT",
        "PGUSER",
        "PGPASSWORD",
        "PGPASSFILE",
        "PGDATABASE",
    ] {
        cmd.env_remove(var);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("running a probe");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find_map(|l| l.split_once("PROBE ").map(|(_, said)| said))
        .unwrap_or_else(|| {
            panic!(
                "the probe of {url} said nothing: {stdout}{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    match line.strip_prefix("ERR ") {
        None if line == "OK" => Ok(()),
        None => panic!("the probe of {url} said `{line}`"),
        Some(err) => Err(err.to_owned()),
    }
}

/// The probe: connect to the URL in [`JOB`] (as a store: the journal is made or checked)
/// and say `PROBE OK` or `PROBE ERR <the error>` on stdout. Does nothing without [`JOB`].
#[test]
#[ignore = "run by each_sslmode_as_libpq in a process of its own"]
fn probe() {
    let Ok(url) = std::env::var(JOB) else { return };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let options = PgOptions {
        schema: "et_sslmodes".to_owned(),
        pool_size: 1,
        connect_timeout: Duration::from_secs(20),
        ..PgOptions::default()
    };
    match runtime.block_on(PostgresStore::connect_with(&url, options)) {
        Ok(_) => println!("PROBE OK"),
        Err(e) => println!("PROBE ERR {}", e.to_string().replace('\n', " ")),
    }
}

/// Each mode as libpq's documentation says, with no root file, with libpq's default root file
/// (`~/.postgresql/root.crt`) holding the server's CA or another, with a root file named in the
/// URL, and with `sslrootcert=system`; at a host name the certificate names and at an address
/// it does not.
#[test]
fn each_sslmode_as_libpq() {
    if !tools_present("each_sslmode_as_libpq") {
        return;
    }
    let scratch = support::ScratchDir::new("sslmodes");
    let dir = &scratch.0;
    let ours = make_ca(dir, "ours");
    let theirs = make_ca(dir, "theirs");
    make_server_cert(dir, "ours");
    let pg = OwnPostgres::start(PG_DIR, PG_PORT);
    install_server_cert(&pg, dir);

    let no_dir = dir.join("no-certs");
    std::fs::create_dir_all(&no_dir).unwrap();
    let (none, home_ours, home_theirs) = (
        make_home(dir, "home-none", None),
        make_home(dir, "home-ours", Some(&ours)),
        make_home(dir, "home-theirs", Some(&theirs)),
    );
    let at = |home: &'static str| -> &Path {
        match home {
            "none" => &none,
            "ours" => &home_ours,
            _ => &home_theirs,
        }
    };
    let (ours_s, theirs_s) = (ours.to_str().unwrap(), theirs.to_str().unwrap());
    let named = |mode: &str, root: &str| format!("sslmode={mode}&sslrootcert={root}");

    // (home's root.crt, user, host, query, what is expected: None to connect, else a part of
    // the error)
    let cases: Vec<(&str, &str, &str, String, Option<&str>)> = vec![
        // No root file: prefer and require encrypt without checking; the verifying modes
        // refuse (today's main trusted the platform's roots, which hold the server's CA here).
        ("none", ANY, UNNAMED, "sslmode=disable".into(), None),
        (
            "none",
            TLS_ONLY,
            UNNAMED,
            "sslmode=disable".into(),
            Some("refuses connections without TLS"),
        ),
        ("none", TLS_ONLY, UNNAMED, String::new(), None),
        ("none", TLS_ONLY, UNNAMED, "sslmode=prefer".into(), None),
        ("none", TLS_ONLY, UNNAMED, "sslmode=require".into(), None),
        (
            "none",
            TLS_ONLY,
            NAMED,
            "sslmode=verify-ca".into(),
            Some("root.crt` does not exist"),
        ),
        (
            "none",
            TLS_ONLY,
            NAMED,
            "sslmode=verify-full".into(),
            Some("root.crt` does not exist"),
        ),
        // ~/.postgresql/root.crt holds the server's CA: the chain checks out in every mode; only
        // verify-full checks the name.
        ("ours", TLS_ONLY, UNNAMED, String::new(), None),
        ("ours", TLS_ONLY, UNNAMED, "sslmode=require".into(), None),
        ("ours", TLS_ONLY, UNNAMED, "sslmode=verify-ca".into(), None),
        ("ours", TLS_ONLY, NAMED, "sslmode=verify-full".into(), None),
        (
            "ours",
            TLS_ONLY,
            UNNAMED,
            "sslmode=verify-full".into(),
            Some("does not name the host"),
        ),
        // ~/.postgresql/root.crt holds another CA: require and the verifying modes refuse,
        // prefer falls back to plain TCP (refused for the TLS role, taken for the other).
        ("theirs", ANY, NAMED, "sslmode=disable".into(), None),
        (
            "theirs",
            TLS_ONLY,
            NAMED,
            "sslmode=prefer".into(),
            Some("refuses connections without TLS"),
        ),
        ("theirs", ANY, NAMED, "sslmode=prefer".into(), None),
        (
            "theirs",
            TLS_ONLY,
            NAMED,
            "sslmode=require".into(),
            Some("certificate is not trusted"),
        ),
        (
            "theirs",
            TLS_ONLY,
            NAMED,
            "sslmode=verify-ca".into(),
            Some("certificate is not trusted"),
        ),
        (
            "theirs",
            TLS_ONLY,
            NAMED,
            "sslmode=verify-full".into(),
            Some("certificate is not trusted"),
        ),
        // A root file named in the URL wins over the default one.
        ("theirs", TLS_ONLY, UNNAMED, named("require", ours_s), None),
        ("theirs", TLS_ONLY, UNNAMED, named("verify-ca", ours_s), None),
        ("theirs", TLS_ONLY, NAMED, named("verify-full", ours_s), None),
        (
            "theirs",
            TLS_ONLY,
            UNNAMED,
            named("verify-full", ours_s),
            Some("does not name the host"),
        ),
        (
            "ours",
            TLS_ONLY,
            NAMED,
            named("require", theirs_s),
            Some("certificate is not trusted"),
        ),
        (
            "ours",
            TLS_ONLY,
            NAMED,
            named("verify-ca", theirs_s),
            Some("certificate is not trusted"),
        ),
        (
            "ours",
            TLS_ONLY,
            NAMED,
            named("verify-full", theirs_s),
            Some("certificate is not trusted"),
        ),
        (
            "none",
            TLS_ONLY,
            NAMED,
            named("require", "/nonexistent/ca.pem"),
            Some("cannot read the root certificate file"),
        ),
        // sslrootcert=system: the platform's roots (here the server's CA), verify-full implied,
        // no weaker mode taken; the default root file is not read.
        ("theirs", TLS_ONLY, NAMED, "sslrootcert=system".into(), None),
        (
            "theirs",
            TLS_ONLY,
            UNNAMED,
            "sslrootcert=system".into(),
            Some("does not name the host"),
        ),
        (
            "none",
            TLS_ONLY,
            NAMED,
            named("verify-ca", "system"),
            Some("cannot be used with sslrootcert=system"),
        ),
        (
            "none",
            TLS_ONLY,
            NAMED,
            named("require", "system"),
            Some("cannot be used with sslrootcert=system"),
        ),
    ];
    let mut wrong = Vec::new();
    let mut check = |probe: &Probe<'_>, what: String, user: &str, host: &str, query: &str, want: Option<&str>| {
        let got = probe.connect(user, host, query);
        let fine = match (&got, want) {
            (Ok(()), None) => true,
            (Err(err), Some(part)) => err.contains(part),
            _ => false,
        };
        eprintln!("{} {what}: {got:?}", if fine { "ok   " } else { "WRONG" });
        if !fine {
            wrong.push(format!("{what}: expected {want:?}, got {got:?}"));
        }
    };
    for (home, user, host, query, want) in &cases {
        let probe = Probe {
            home: at(home),
            platform: &ours,
            no_dir: &no_dir,
            env: &[],
        };
        let what = format!("root.crt={home} user={user} host={host} `{query}`");
        check(&probe, what, user, host, query, *want);
    }
    // The environment: PGSSLROOTCERT=system and PGSSLMODE as libpq reads them, and a platform
    // that does not trust the server's CA.
    let env_cases: [EnvCase<'_>; 4] = [
        (&[("PGSSLROOTCERT", "system")], &ours, NAMED, None),
        (
            &[("PGSSLROOTCERT", "system")],
            &ours,
            UNNAMED,
            Some("does not name the host"),
        ),
        (
            &[("PGSSLMODE", "verify-ca")],
            &ours,
            NAMED,
            Some("root.crt` does not exist"),
        ),
        (
            &[("PGSSLROOTCERT", "system")],
            &theirs,
            NAMED,
            Some("certificate is not trusted"),
        ),
    ];
    for (env, platform, host, want) in env_cases {
        let probe = Probe {
            home: &none,
            platform,
            no_dir: &no_dir,
            env,
        };
        let what = format!("env {env:?} platform={} host={host}", platform.display());
        check(&probe, what, TLS_ONLY, host, "", want);
    }
    assert!(wrong.is_empty(), "not as libpq:\n{}", wrong.join("\n"));
    drop(pg);
}
