//! The whole conformance suite (multi-process races included) through a real PgBouncer in
//! transaction pooling mode (`pool_mode = transaction`), with `pgbouncer=true` in the URL:
//! statements go unnamed, and no session state is relied on. PgBouncer has no TLS set up for
//! its clients, so it also shows `sslmode=prefer` (the default) going on in plain TCP with a
//! server that does not offer TLS.
//!
//! One PgBouncer serves the test binary: started on first use, on a free port, in front of the
//! shared server, with a pool of 4 server connections (so that consecutive transactions of one
//! client really land on different server sessions). It is stopped when this process ends,
//! however it ends: a shell that waits on a pipe from this process kills it when the pipe
//! closes.

use std::io::Write;
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use effect_tool_core::Store;
use effect_tool_core::store::postgres::{PgOptions, PostgresStore};
use effect_tool_core::testing::conformance::{Availability, Harness, PG_URL_ENV, postgres_required};

use super::support;

const PGBOUNCER: &str = "/usr/sbin/pgbouncer";

/// A running PgBouncer; the shell that guards it ends it when this process's end closes the
/// shell's stdin.
struct Bouncer {
    port: u16,
    _guard: Child,
    _dir: support::ScratchDir,
}

static BOUNCER: OnceLock<Bouncer> = OnceLock::new();

fn bouncer() -> &'static Bouncer {
    BOUNCER.get_or_init(start)
}

fn start() -> Bouncer {
    let url = std::env::var(PG_URL_ENV).expect("checked by availability");
    let (host, pg_port) = support::host_port(&url);
    let dir = support::ScratchDir::new("pgbouncer");
    let port = support::free_port();
    let d = dir.0.display();
    let conf = format!(
        "[databases]
effect_tool_test = host={host} port={pg_port} dbname=effect_tool_test user=postgres

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {d}/users.txt
pool_mode = transaction
default_pool_size = 4
max_client_conn = 1000
logfile = {d}/pgbouncer.log
pidfile = {d}/pgbouncer.pid
"
    );
    std::fs::write(dir.0.join("pgbouncer.ini"), conf).unwrap();
    std::fs::write(dir.0.join("users.txt"), "\"postgres\" \"\"\n").unwrap();
    if support::is_root() {
        let _ = std::process::Command::new("chown")
            .args(["-R", "postgres:"])
            .arg(&dir.0)
            .status();
    }
    // PgBouncer in the foreground under a shell that kills it once its stdin (a pipe from this
    // process) closes, which happens when this process ends, even by a crash or a signal.
    let runner = if support::is_root() {
        "runuser -u postgres -- "
    } else {
        ""
    };
    let script = format!(
        "{runner}{PGBOUNCER} {d}/pgbouncer.ini >{d}/stdout.log 2>&1 & pid=$!; cat >/dev/null; \
         kill $(cat {d}/pgbouncer.pid 2>/dev/null) 2>/dev/null || kill $pid; wait; rm -rf {d}"
    );
    let mut guard = std::process::Command::new("sh")
        .args(["-c", &script])
        .stdin(Stdio::piped())
        .spawn()
        .expect("starting PgBouncer");
    // Keep the pipe open for the life of this process (the child holds its end).
    let stdin = guard.stdin.take().unwrap();
    std::mem::forget(stdin);
    let until = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() > until || guard.try_wait().ok().flatten().is_some() {
            let log = std::fs::read_to_string(dir.0.join("pgbouncer.log")).unwrap_or_default();
            let out = std::fs::read_to_string(dir.0.join("stdout.log")).unwrap_or_default();
            panic!("PgBouncer did not start on port {port}:\n{log}\n{out}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = std::io::stderr().write_all(format!("PgBouncer on 127.0.0.1:{port} (transaction pooling)\n").as_bytes());
    Bouncer {
        port,
        _guard: guard,
        _dir: dir,
    }
}

/// The journal through PgBouncer: a schema of its own per case.
pub struct PgBouncerHarness {
    store: PostgresStore,
    url: String,
    schema: String,
}

impl PgBouncerHarness {
    pub(super) fn url() -> String {
        format!(
            "postgres://postgres@127.0.0.1:{}/effect_tool_test?pgbouncer=true&application_name=et-pgbouncer-test",
            bouncer().port
        )
    }

    async fn connect(url: &str, schema: &str) -> PostgresStore {
        let options = PgOptions {
            schema: schema.to_owned(),
            pool_size: 8,
            ..PgOptions::default()
        };
        PostgresStore::connect_with(url, options)
            .await
            .unwrap_or_else(|e| panic!("connecting through PgBouncer ({url}): {e}"))
    }
}

#[async_trait]
impl Harness for PgBouncerHarness {
    const NAME: &'static str = "postgres-through-pgbouncer";

    fn availability() -> Availability {
        let url = std::env::var(PG_URL_ENV).unwrap_or_default();
        let reason = if url.is_empty() {
            format!("{PG_URL_ENV} is not set; start a server with `eval \"$(.ci/postgres.sh start)\"`")
        } else if !Path::new(PGBOUNCER).exists() {
            format!("{PGBOUNCER} is missing: apt-get install pgbouncer (scripts/test.sh does)")
        } else {
            return Availability::Ready;
        };
        Availability::Unavailable {
            reason,
            required: postgres_required(),
        }
    }

    async fn fresh() -> Self {
        let url = Self::url();
        let schema = support::schema("bouncer");
        let store = Self::connect(&url, &schema).await;
        PgBouncerHarness { store, url, schema }
    }

    fn store(&self) -> Arc<dyn Store> {
        Arc::new(self.store.clone())
    }

    fn locator(&self) -> Option<String> {
        Some(format!("{} {}", self.schema, self.url))
    }

    async fn open(locator: &str) -> Arc<dyn Store> {
        let (schema, url) = locator.split_once(' ').expect("`<schema> <url>`");
        Arc::new(Self::connect(url, schema).await)
    }

    async fn plant_future_record(&self, key: &str) -> bool {
        // Behind the store's back, on the server itself.
        let server = std::env::var(PG_URL_ENV).unwrap();
        effect_tool_core::testing::conformance::plant_future_postgres_record(&server, &self.schema, key).await;
        true
    }
}

effect_tool_core::conformance_tests!(through_pgbouncer, super::PgBouncerHarness, durable);

/// Proof that the pooler really is in the path and in transaction mode: one client's two
/// statements run in two server sessions when another client holds the first session in a
/// transaction between them (in session mode they would run in one), so a named statement
/// would not be found by the second. The conformance cases above pass through it anyway.
#[test]
fn statements_of_one_client_run_in_different_server_sessions() {
    effect_tool_core::testing::conformance::run::<PgBouncerHarness, _, _>(
        "statements_of_one_client_run_in_different_server_sessions",
        || async {
            let url = format!("postgres://postgres@127.0.0.1:{}/effect_tool_test", bouncer().port);
            let a = support::raw(&url).await;
            let b = support::raw(&url).await;
            async fn pid(c: &tokio_postgres::Client) -> String {
                let messages = c.simple_query("SELECT pg_backend_pid()").await.unwrap();
                messages
                    .iter()
                    .find_map(|m| match m {
                        tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_owned),
                        _ => None,
                    })
                    .expect("a row")
            }
            let first = pid(&a).await;
            b.batch_execute("BEGIN").await.unwrap();
            let held = pid(&b).await;
            let second = pid(&a).await;
            b.batch_execute("COMMIT").await.unwrap();
            assert_ne!(
                first, second,
                "one client's statements ran in one server session ({first}; the other client held {held}): is PgBouncer in transaction mode?"
            );
        },
    );
}

/// Behind a transaction pooler no `LISTEN` is possible: a task waiting for a person's decision
/// polls, and still returns the decision another store object (another process, in production)
/// made through the pooler.
#[test]
fn waiting_for_a_decision_through_the_pooler_polls_and_finds_it() {
    effect_tool_core::testing::conformance::run::<PgBouncerHarness, _, _>(
        "waiting_for_a_decision_through_the_pooler_polls_and_finds_it",
        || async {
            use effect_tool_core::StoreExt;
            let url = PgBouncerHarness::url();
            let schema = support::schema("bouncer_wait");
            let agent = PgBouncerHarness::connect(&url, &schema).await;
            let person = PgBouncerHarness::connect(&url, &schema).await;
            let intent = effect_tool_core::decide::record::Intent {
                approval: Some("finance".to_owned()),
                ..crate::common::intent("bouncer-wait")
            };
            agent.claim("wait-me", intent, 30_000, false).await.unwrap();
            let decide = tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(100)).await;
                person
                    .approve(
                        "wait-me",
                        "fin",
                        "finance",
                        &person.get("wait-me").await.unwrap().unwrap().fingerprint,
                    )
                    .await
                    .unwrap();
            });
            let run = effect_tool_core::Engine::new(agent).run(effect_tool_core::RunContext::new("bouncer-wait"));
            let answer = run.wait_for_approval("wait-me", Duration::from_secs(30)).await.unwrap();
            decide.await.unwrap();
            assert!(
                matches!(answer, effect_tool_core::ops::notify::ApprovalAnswer::Approved { .. }),
                "{answer:?}"
            );
        },
    );
}
