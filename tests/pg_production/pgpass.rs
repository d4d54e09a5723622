//! The password file for every host of a multi-host connection string (issue 29), against a
//! server of this test's own where a role logs in with a password (`scram-sha-256`): the
//! first host of the string is a port nobody listens on, with another password in the file;
//! the store must reach the second host with the second host's password, as libpq does.
//!
//! Each connection is made from a process of its own (`sslmodes::probe`), so that
//! `PGPASSFILE` is its own.

use std::path::Path;

use super::sslmodes::{connect_in_a_process, tools_present};
use super::support;
use crate::common::own_postgres::OwnPostgres;

const PG_DIR: &str = "/tmp/et-pg-pgpass";
const PG_PORT: &str = "25442";
/// A role that logs in with a password only.
const ROLE: &str = "et_pgpass";

/// Let `ROLE` in with a password only (first line of `pg_hba.conf`), and start the server
/// again so that it reads the rule.
async fn password_role(pg: &OwnPostgres) {
    let raw = support::raw(&format!("{}?sslmode=disable", pg.url)).await;
    raw.batch_execute(&format!("CREATE ROLE {ROLE} LOGIN SUPERUSER PASSWORD 'the-right-one'"))
        .await
        .unwrap();
    drop(raw);
    let hba = Path::new(PG_DIR).join("data/pg_hba.conf");
    let rules = std::fs::read_to_string(&hba).unwrap();
    std::fs::write(&hba, format!("host all {ROLE} 0.0.0.0/0 scram-sha-256\n{rules}")).unwrap();
    pg.kill();
    pg.revive();
}

/// A password file (0600) in `dir` with `lines`.
fn pass_file(dir: &Path, name: &str, lines: &[String]) -> String {
    use std::os::unix::fs::PermissionsExt;
    let file = dir.join(name);
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    file.to_str().unwrap().to_owned()
}

#[test]
fn the_password_file_is_read_for_every_host() {
    if !tools_present("the_password_file_is_read_for_every_host") {
        return;
    }
    let pg = OwnPostgres::start(PG_DIR, PG_PORT);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(password_role(&pg));
    let scratch = support::ScratchDir::new("pgpass");
    let dead = support::free_port();
    let db = "effect_tool_test";
    let home = scratch.0.to_str().unwrap();

    // The first host (nobody listens) has a line of its own, with a wrong password for the
    // second; the second host's line comes after it.
    let file = pass_file(
        &scratch.0,
        "both",
        &[
            format!("localhost:{dead}:{db}:{ROLE}:the-first-hosts"),
            format!("127.0.0.1:{PG_PORT}:{db}:{ROLE}:the-right-one"),
        ],
    );
    let env = [("PGPASSFILE", file.as_str()), ("HOME", home)];
    let key_value = format!("host=localhost,127.0.0.1 port={dead},{PG_PORT} user={ROLE} dbname={db} sslmode=disable");
    let url = format!("postgres://{ROLE}@localhost:{dead},127.0.0.1:{PG_PORT}/{db}?sslmode=disable");
    for conn in [&key_value, &url] {
        connect_in_a_process(conn, &env)
            .unwrap_or_else(|e| panic!("the second host with its own password ({conn}): {e}"));
    }

    // The first host has no line at all: the second host's is found all the same.
    let file = pass_file(
        &scratch.0,
        "second",
        &[format!("127.0.0.1:{PG_PORT}:{db}:{ROLE}:the-right-one")],
    );
    connect_in_a_process(&key_value, &[("PGPASSFILE", file.as_str()), ("HOME", home)])
        .unwrap_or_else(|e| panic!("the second host's line only: {e}"));

    // The control: the server does check the password (a wrong one for the second host is
    // refused, and the store says so).
    let file = pass_file(
        &scratch.0,
        "wrong",
        &[format!("127.0.0.1:{PG_PORT}:{db}:{ROLE}:not-it")],
    );
    let err = connect_in_a_process(&key_value, &[("PGPASSFILE", file.as_str()), ("HOME", home)])
        .expect_err("a wrong password is refused");
    assert!(err.contains("password authentication failed"), "{err}");
    drop(pg);
}
