//! Failover: a primary and its synchronous standby (streaming replication from
//! `pg_basebackup`, `synchronous_standby_names` set), four worker processes making calls of
//! every class on shared keys against a multi-host URL (`host=…,… port=P1,P2
//! target_session_attrs=read-write`); the primary's postmaster is SIGKILLed and the standby
//! promoted, and the workers go on.
//!
//! Checked against the workers' ledgers (files the tools write as they act, which the engine
//! never reads), and against the promoted server's journal:
//! - no compensable or irreversible effect happened twice; every idempotent effect was sent
//!   with one idempotency key;
//! - no result a worker received (executed, replayed or shared) is missing from the journal or
//!   different there: what was acknowledged before the failover survived it. The one exception,
//!   counted and printed: a replay that read a commit before the synchronous standby confirmed
//!   it (PostgreSQL shows a commit to other sessions before that), when no worker was told of
//!   that commit as its writer (see "What a reader may see" in `docs/journal-format.md`);
//! - fencing held: every completed record names an attempt that ran (its ledger line has the
//!   record's attempt number), and, for compensable and irreversible tools, the output of that
//!   attempt;
//! - calls flow again: every worker records new results after the promotion. The time from the
//!   kill to the first recorded call, and until every worker records again, is printed.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use effect_tool::{CallOptions, EffectClass, EffectCtx, Engine, EngineConfig, RunContext, Tool, ToolError};
use effect_tool_core::store::postgres::{PgOptions, PostgresStore};
use effect_tool_core::testing::conformance::postgres_required;

use super::support::{self, as_postgres, pg_bin};

const JOB: &str = "EFFECT_TOOL_FAILOVER_JOB";
const WORKERS: usize = 4;
const SCHEMA: &str = "et_failover";
/// Results each worker records before the kill, and after the promotion, before it stops.
const BEFORE: usize = 40;
const AFTER: usize = 40;

fn now_ms() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis()
}

// ---------------------------------------------------------------------------------------------
// The workers' side.

/// The downstream systems of one worker: every effect is a line in its ledger file.
struct Ledger {
    worker: usize,
    file: Mutex<std::fs::File>,
}

impl Ledger {
    /// One effect of `tool` for `n`, with the attempt's fencing token and idempotency key.
    async fn act(&self, tool: &str, n: u64, ctx: &EffectCtx, output: String) -> Result<String, ToolError> {
        let line = format!(
            "{} {tool} {n} w{} a{} {}\n",
            now_ms(),
            self.worker,
            ctx.fencing_token(),
            ctx.idempotency_key()
        );
        self.file.lock().unwrap().write_all(line.as_bytes()).unwrap();
        // The effect takes a moment, so that a kill can fall between effect and record.
        tokio::time::sleep(Duration::from_millis(3)).await;
        Ok(output)
    }
}

struct Lookup;
impl Tool for Lookup {
    type Args = u64;
    type Output = String;
    type Error = ToolError;
    const NAME: &'static str = "lookup";
    const CLASS: EffectClass = EffectClass::Pure;
    async fn call(&self, _ctx: &EffectCtx, n: u64) -> Result<String, ToolError> {
        Ok(format!("lookup:{n}"))
    }
}

struct Refund(Arc<Ledger>);
impl Tool for Refund {
    type Args = u64;
    type Output = String;
    type Error = ToolError;
    const NAME: &'static str = "refund";
    const CLASS: EffectClass = EffectClass::Idempotent;
    async fn call(&self, ctx: &EffectCtx, n: u64) -> Result<String, ToolError> {
        // The same result whoever runs it: what the idempotent class promises.
        self.0.act(Self::NAME, n, ctx, format!("refund:{n}")).await
    }
}

struct Reserve(Arc<Ledger>);
impl Tool for Reserve {
    type Args = u64;
    type Output = String;
    type Error = ToolError;
    const NAME: &'static str = "reserve";
    const CLASS: EffectClass = EffectClass::Compensable;
    const HAS_COMPENSATE: bool = true;
    async fn call(&self, ctx: &EffectCtx, n: u64) -> Result<String, ToolError> {
        let out = format!("reserve:{n}:w{}:a{}", self.0.worker, ctx.fencing_token());
        self.0.act(Self::NAME, n, ctx, out).await
    }
}

struct Pay(Arc<Ledger>);
impl Tool for Pay {
    type Args = u64;
    type Output = String;
    type Error = ToolError;
    const NAME: &'static str = "pay";
    const CLASS: EffectClass = EffectClass::Irreversible;
    async fn call(&self, ctx: &EffectCtx, n: u64) -> Result<String, ToolError> {
        let out = format!("pay:{n}:w{}:a{}", self.0.worker, ctx.fencing_token());
        self.0.act(Self::NAME, n, ctx, out).await
    }
}

/// A worker's job: `url`, the folder of its files, its number.
fn job_of(url: &str, dir: &Path, worker: usize) -> String {
    format!("{worker}\n{}\n{url}", dir.display())
}

fn worker_options() -> PgOptions {
    PgOptions {
        schema: SCHEMA.to_owned(),
        pool_size: 4,
        connect_timeout: Duration::from_secs(10),
        statement_timeout: Duration::from_secs(5),
        ..PgOptions::default()
    }
}

/// The entry point of the worker processes: calls of every class on shared keys, one
/// `n` after the other, each result (or error) a line in `results-<worker>.txt`, until the file
/// `stop` exists.
#[test]
#[ignore = "entry point of the failover test's worker processes; run by it"]
fn worker() {
    let Ok(job) = std::env::var(JOB) else { return };
    let mut lines = job.lines();
    let worker: usize = lines.next().unwrap().parse().unwrap();
    let dir = PathBuf::from(lines.next().unwrap());
    let url = lines.next().unwrap().to_owned();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let ledger = Arc::new(Ledger {
            worker,
            file: Mutex::new(std::fs::File::create(dir.join(format!("ledger-{worker}.txt"))).unwrap()),
        });
        let mut results = std::fs::File::create(dir.join(format!("results-{worker}.txt"))).unwrap();
        let store = PostgresStore::connect_with(&url, worker_options()).await.unwrap();
        let engine = Engine::with_config(
            store,
            EngineConfig {
                lease: Duration::from_secs(3),
                poll_interval: Duration::from_millis(20),
            },
        )
        .with_store_retry(Duration::from_secs(30));
        let run = RunContext::new("failover");
        let (refund, reserve, pay) = (Refund(ledger.clone()), Reserve(ledger.clone()), Pay(ledger.clone()));
        let mut n = 0u64;
        while !dir.join("stop").exists() {
            macro_rules! call {
                ($tool:expr) => {{
                    let report = engine
                        .call_with_report(&$tool, &run, CallOptions::default(), n)
                        .await;
                    let line = match &report.result {
                        Ok(out) => format!(
                            "{} R {} {n} {} {out}\n",
                            now_ms(),
                            tool_name(&$tool),
                            report.disposition.as_str()
                        ),
                        Err(e) => format!(
                            "{} E {} {n} {} {}\n",
                            now_ms(),
                            tool_name(&$tool),
                            report.disposition.as_str(),
                            e.to_string().replace('\n', " ")
                        ),
                    };
                    results.write_all(line.as_bytes()).unwrap();
                }};
            }
            call!(Lookup);
            call!(refund);
            call!(reserve);
            call!(pay);
            n += 1;
        }
    });
}

fn tool_name<T: Tool>(_: &T) -> &'static str {
    T::NAME
}

// ---------------------------------------------------------------------------------------------
// The test's side: the servers, the kill, the checks.

/// A primary and a standby of the test's own; every process of theirs is stopped when dropped.
struct Cluster {
    dir: support::ScratchDir,
    primary_port: u16,
    standby_port: u16,
    /// The primary's processes as they were when it was killed (its children outlive the
    /// postmaster for a moment), SIGKILLed again on drop.
    killed: Vec<String>,
    primary_dead: bool,
    /// A shell that stops both servers when its stdin (a pipe from this process) closes, even
    /// if this process is killed before `Drop` runs.
    _guard: Child,
}

impl Cluster {
    fn data(&self, which: &str) -> PathBuf {
        self.dir.0.join(which)
    }

    fn pg_ctl(&self, which: &str, args: &[&str]) -> bool {
        as_postgres(pg_bin("pg_ctl"))
            .arg("-D")
            .arg(self.data(which))
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    fn start(&self, which: &str, port: u16, extra: &str) {
        let opts = format!(
            "-c listen_addresses=127.0.0.1 -p {port} -k {} -c max_connections=100 -c fsync=off {extra}",
            self.dir.0.display()
        );
        let log = self.dir.0.join(format!("{which}.log"));
        let ok = self.pg_ctl(
            which,
            &["-l", log.to_str().unwrap(), "-w", "-t", "60", "-o", &opts, "start"],
        );
        assert!(
            ok,
            "starting the {which}: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    }

    /// Run the client program `name` (as `postgres`) against the primary, with `args`.
    fn client(&self, name: &str, args: &[&str]) {
        let port = self.primary_port.to_string();
        let out = as_postgres(pg_bin(name))
            .args(["-h", "127.0.0.1", "-p", &port, "-U", "postgres"])
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("running {name}: {e}"));
        assert!(out.status.success(), "{name}: {}", String::from_utf8_lossy(&out.stderr));
    }

    fn url(&self, port: u16) -> String {
        format!("postgres://postgres@127.0.0.1:{port}/effect_tool_test")
    }

    /// initdb, start the primary (waiting for a synchronous standby named `standby1`),
    /// `pg_basebackup` the standby and start it; returns once replication is synchronous.
    fn new() -> Cluster {
        let dir = support::ScratchDir::new("failover");
        let pg_ctl = pg_bin("pg_ctl");
        let runner = if support::is_root() {
            "runuser -u postgres -- "
        } else {
            ""
        };
        let d = dir.0.display();
        let script = format!(
            "cat >/dev/null; for s in primary standby; do {runner}{} -D {d}/$s -m immediate -w stop >/dev/null 2>&1; done; rm -rf {d}",
            pg_ctl.display()
        );
        let mut guard = Command::new("sh")
            .args(["-c", &script])
            .stdin(Stdio::piped())
            .spawn()
            .expect("starting the servers' guard");
        std::mem::forget(guard.stdin.take());
        let mut cluster = Cluster {
            dir,
            primary_port: support::free_port(),
            standby_port: support::free_port(),
            killed: Vec::new(),
            primary_dead: false,
            _guard: guard,
        };
        while cluster.standby_port == cluster.primary_port {
            cluster.standby_port = support::free_port();
        }
        let out = as_postgres(pg_bin("initdb"))
            .arg("-D")
            .arg(cluster.data("primary"))
            .args(["-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync"])
            .output()
            .expect("running initdb");
        assert!(out.status.success(), "initdb: {}", String::from_utf8_lossy(&out.stderr));
        cluster.start("primary", cluster.primary_port, "");
        cluster.client("createdb", &["effect_tool_test"]);
        let standby = cluster.data("standby");
        cluster.client(
            "pg_basebackup",
            &[
                "-D",
                standby.to_str().unwrap(),
                "-X",
                "stream",
                "-R",
                "-c",
                "fast",
                "-N",
            ],
        );
        let auto = cluster.data("standby").join("postgresql.auto.conf");
        let mut conf = std::fs::OpenOptions::new().append(true).open(&auto).unwrap();
        writeln!(
            conf,
            "primary_conninfo = 'host=127.0.0.1 port={} user=postgres application_name=standby1'",
            cluster.primary_port
        )
        .unwrap();
        // It looks for WAL again every 100 ms rather than 5 s, so a promotion is not kept waiting
        // for the next look (what HA setups tune too).
        cluster.start(
            "standby",
            cluster.standby_port,
            "-c hot_standby=on -c wal_retrieve_retry_interval=100ms",
        );
        // Only now, and only on the primary (the standby's copy of the configuration is older):
        // commits wait for the standby's flush; once promoted, it waits for nobody.
        cluster.client(
            "psql",
            &[
                "-d",
                "postgres",
                "-c",
                "ALTER SYSTEM SET synchronous_standby_names = 'standby1'",
                "-c",
                "SELECT pg_reload_conf()",
            ],
        );
        cluster
    }

    fn postmaster(&self, which: &str) -> String {
        let pidfile = self.data(which).join("postmaster.pid");
        std::fs::read_to_string(&pidfile)
            .unwrap_or_else(|e| panic!("{}: {e}", pidfile.display()))
            .lines()
            .next()
            .unwrap()
            .trim()
            .to_owned()
    }

    /// SIGKILL the primary's postmaster (only it: its backends notice and exit, as on a
    /// crashed host's restart nothing of them is left).
    fn kill_primary(&mut self) {
        let main = self.postmaster("primary");
        let children = Command::new("pgrep").args(["-P", &main]).output().unwrap();
        self.killed = std::iter::once(main.clone())
            .chain(
                String::from_utf8_lossy(&children.stdout)
                    .split_whitespace()
                    .map(str::to_owned),
            )
            .collect();
        let status = Command::new("kill").args(["-KILL", &main]).status().unwrap();
        assert!(status.success(), "kill -KILL {main}");
        self.primary_dead = true;
    }

    fn promote_standby(&self) {
        assert!(self.pg_ctl("standby", &["-w", "-t", "60", "promote"]), "pg_ctl promote");
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if self.primary_dead {
            for pid in &self.killed {
                let _ = Command::new("kill").args(["-KILL", pid]).stderr(Stdio::null()).status();
            }
        } else {
            self.pg_ctl("primary", &["-m", "immediate", "-w", "stop"]);
        }
        self.pg_ctl("standby", &["-m", "immediate", "-w", "stop"]);
    }
}

/// The worker processes (each killed when dropped: a failing test leaves none behind).
struct Workers(Vec<crate::common::worker::Worker>);

/// One line of a results file.
#[derive(Debug, Clone)]
struct Outcome {
    at: u128,
    ok: bool,
    tool: String,
    n: u64,
    disposition: String,
    text: String,
}

fn outcomes(dir: &Path, worker: usize) -> Vec<Outcome> {
    let text = std::fs::read_to_string(dir.join(format!("results-{worker}.txt"))).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let mut f = l.splitn(6, ' ');
            Some(Outcome {
                at: f.next()?.parse().ok()?,
                ok: f.next()? == "R",
                tool: f.next()?.to_owned(),
                n: f.next()?.parse().ok()?,
                disposition: f.next()?.to_owned(),
                text: f.next().unwrap_or_default().to_owned(),
            })
        })
        .collect()
}

/// One effect in a ledger: (tool, n, worker, attempt, idempotency key).
type Effect = (String, u64, usize, u64, String);

fn effects(dir: &Path) -> Vec<Effect> {
    let mut all = Vec::new();
    for w in 0..WORKERS {
        let text = std::fs::read_to_string(dir.join(format!("ledger-{w}.txt"))).unwrap_or_default();
        for l in text.lines() {
            let f: Vec<&str> = l.split(' ').collect();
            if f.len() == 6 {
                all.push((
                    f[1].to_owned(),
                    f[2].parse().unwrap(),
                    f[3][1..].parse().unwrap(),
                    f[4][1..].parse().unwrap(),
                    f[5].to_owned(),
                ));
            }
        }
    }
    all
}

/// Wait until `done` holds, failing after `limit` or when a worker exited.
fn wait_for(what: &str, workers: &mut Workers, limit: Duration, mut done: impl FnMut() -> bool) {
    let until = Instant::now() + limit;
    while !done() {
        for w in &mut workers.0 {
            if let Ok(Some(status)) = w.try_wait() {
                panic!("a worker exited ({status}) while waiting for {what}");
            }
        }
        assert!(Instant::now() < until, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn available() -> bool {
    if pg_bin("initdb").exists() && pg_bin("pg_basebackup").exists() {
        return true;
    }
    assert!(
        !postgres_required(),
        "EFFECT_TOOL_REQUIRE_PG=1 but the PostgreSQL server programs (initdb, pg_basebackup) are missing"
    );
    eprintln!("\n*** SKIPPED POSTGRES failover: the PostgreSQL server programs are not installed ***\n");
    false
}

#[test]
fn failover_to_a_synchronous_standby_loses_nothing_and_applies_nothing_twice() {
    if !available() {
        return;
    }
    let started = Instant::now();
    let mut cluster = Cluster::new();
    let rt = tokio::runtime::Runtime::new().unwrap();
    // Replication is synchronous before anything is written.
    let primary_url = cluster.url(cluster.primary_port);
    rt.block_on(async {
        let raw = support::raw(&primary_url).await;
        let until = Instant::now() + Duration::from_secs(60);
        loop {
            let rows = raw
                .query(
                    "SELECT sync_state FROM pg_stat_replication WHERE application_name = 'standby1'",
                    &[],
                )
                .await
                .unwrap();
            if rows.first().is_some_and(|r| r.get::<_, String>(0) == "sync") {
                break;
            }
            assert!(Instant::now() < until, "the standby never became synchronous");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // The journal's schema, made once before the workers start.
        PostgresStore::connect_with(&primary_url, worker_options())
            .await
            .unwrap();
    });
    let ready = started.elapsed();

    let files = support::ScratchDir::new("failover-ledgers");
    let url = format!(
        "host=127.0.0.1,127.0.0.1 port={},{} user=postgres dbname=effect_tool_test target_session_attrs=read-write sslmode=disable",
        cluster.primary_port, cluster.standby_port
    );
    let mut workers = Workers(
        (0..WORKERS)
            .map(|w| crate::common::worker::spawn(module_path!(), JOB, &job_of(&url, &files.0, w)))
            .collect(),
    );
    let recorded = |w: usize, after: u128| {
        outcomes(&files.0, w)
            .iter()
            .filter(|o| o.ok && o.tool != "lookup" && o.at > after)
            .count()
    };
    wait_for(
        "every worker's first results",
        &mut workers,
        Duration::from_secs(60),
        || (0..WORKERS).all(|w| recorded(w, 0) >= BEFORE),
    );

    let killed_at = now_ms();
    cluster.kill_primary();
    let kill = Instant::now();
    cluster.promote_standby();
    let promoted_at = now_ms();
    let promote = kill.elapsed();
    wait_for(
        "every worker's results after the promotion",
        &mut workers,
        Duration::from_secs(60),
        || (0..WORKERS).all(|w| recorded(w, promoted_at) >= AFTER),
    );
    std::fs::write(files.0.join("stop"), "").unwrap();
    let until = Instant::now() + Duration::from_secs(30);
    for w in &mut workers.0 {
        loop {
            match w.try_wait().unwrap() {
                Some(status) => {
                    assert!(status.success(), "a worker failed: {status}");
                    break;
                }
                None => assert!(Instant::now() < until, "the workers did not stop"),
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    // Whatever the workers did is in their files; the journal is on the promoted server.
    let results: Vec<(usize, Outcome)> = (0..WORKERS)
        .flat_map(|w| outcomes(&files.0, w).into_iter().map(move |o| (w, o)))
        .collect();
    let effects = effects(&files.0);
    let journal = rt.block_on(async {
        let raw = support::raw(&cluster.url(cluster.standby_port)).await;
        let in_recovery: bool = raw.query_one("SELECT pg_is_in_recovery()", &[]).await.unwrap().get(0);
        assert!(!in_recovery, "the standby was promoted");
        raw.query(
            &format!("SELECT tool, input::text, state, attempt, output::text FROM \"{SCHEMA}\".records"),
            &[],
        )
        .await
        .unwrap()
        .into_iter()
        .map(|r| {
            let n: u64 = r.get::<_, String>(1).parse().unwrap();
            (
                (r.get::<_, String>(0), n),
                (
                    r.get::<_, String>(2),
                    r.get::<_, i64>(3) as u64,
                    r.get::<_, Option<String>>(4),
                ),
            )
        })
        .collect::<std::collections::HashMap<_, _>>()
    });
    check(&results, &effects, &journal);

    // How long calls stopped: the longest gap between two recorded calls (of any worker) from
    // the kill on (the old primary's backends may still finish a statement or two after their
    // postmaster died), and when each worker recorded again after the promotion.
    let mut times: Vec<u128> = results
        .iter()
        .filter(|(_, o)| o.ok && o.tool != "lookup")
        .map(|(_, o)| o.at)
        .collect();
    times.sort_unstable();
    let last_before = times
        .iter()
        .rev()
        .find(|t| **t <= killed_at)
        .copied()
        .unwrap_or(killed_at);
    let outage = times
        .windows(2)
        .filter(|w| w[1] > killed_at)
        .map(|w| (w[1] - w[0].max(last_before), w[0], w[1]))
        .max()
        .unwrap();
    let first_after_promotion = times.iter().find(|t| **t > promoted_at).copied().unwrap();
    let every_worker = (0..WORKERS)
        .map(|w| {
            results
                .iter()
                .filter(|(x, o)| *x == w && o.ok && o.tool != "lookup" && o.at > promoted_at)
                .map(|(_, o)| o.at)
                .min()
                .unwrap()
        })
        .max()
        .unwrap();
    let errors = results.iter().filter(|(_, o)| !o.ok).count();
    let blocked = results.iter().filter(|(_, o)| o.disposition == "blocked").count();
    let in_doubt = journal.values().filter(|(state, _, _)| state == "in-doubt").count();
    eprintln!(
        "failover: cluster ready in {ready:?}; kill -> promoted in {promote:?}; no call recorded for {} ms \
         (from {} ms to {} ms after the kill); promotion -> first recorded call {} ms, every worker {} ms; \
         {} results, {} effects, {errors} failed calls ({blocked} blocked), {in_doubt} records in doubt; total {:?}",
        outage.0,
        outage.1 as i128 - killed_at as i128,
        outage.2 - killed_at,
        first_after_promotion - promoted_at,
        every_worker - promoted_at,
        results.len(),
        effects.len(),
        started.elapsed()
    );
}

/// A record as the promoted server has it: (state, attempt, output).
type Row = (String, u64, Option<String>);

/// The properties, each failing with what it found.
fn check(results: &[(usize, Outcome)], effects: &[Effect], journal: &std::collections::HashMap<(String, u64), Row>) {
    use std::collections::{BTreeMap, BTreeSet};
    // At most once: compensable and irreversible effects; one idempotency key per idempotent one.
    let mut applied: BTreeMap<(&str, u64), Vec<&Effect>> = BTreeMap::new();
    for e in effects {
        applied.entry((e.0.as_str(), e.1)).or_default().push(e);
    }
    for ((tool, n), list) in &applied {
        match *tool {
            "reserve" | "pay" => assert!(list.len() == 1, "{tool} {n} applied {} times: {list:?}", list.len()),
            "refund" => {
                let keys: BTreeSet<&str> = list.iter().map(|e| e.4.as_str()).collect();
                assert!(
                    keys.len() == 1,
                    "refund {n} sent with several idempotency keys: {keys:?}"
                );
            }
            other => panic!("unexpected tool {other} in a ledger"),
        }
    }
    // Nothing acknowledged was lost: every result a worker received is the journal's, except a
    // replay of a commit that no worker was told of. PostgreSQL shows a commit to other sessions
    // once it is on the primary's disk, before the synchronous standby confirms it; a replay can
    // read such a record, and a failover then loses it while its writer still waits for its
    // answer (the writer retries, or the call runs again under its key). Those are counted and
    // printed, never tolerated silently: a lost result that its writer (or a call sharing its
    // run) received, or any other kind of lost result, fails the test.
    let mut vanished_replays = Vec::new();
    for (w, o) in results.iter().filter(|(_, o)| o.ok && o.tool != "lookup") {
        let key = (o.tool.clone(), o.n);
        let found = journal.get(&key).map(|(state, _, output)| {
            let recorded = output.as_deref().map(|t| serde_json::from_str::<String>(t).unwrap());
            (state.clone(), recorded)
        });
        let survived = matches!(&found, Some((state, Some(text))) if state == "completed" && *text == o.text);
        if survived {
            continue;
        }
        let writer_was_told = results
            .iter()
            .any(|(_, x)| x.ok && x.tool == o.tool && x.n == o.n && x.text == o.text && x.disposition != "replayed");
        if o.disposition == "replayed" && !writer_was_told {
            vanished_replays.push(format!("worker {w}: {} {} = {} (now {found:?})", o.tool, o.n, o.text));
            continue;
        }
        panic!(
            "worker {w} received {} {} = {} ({}); the promoted journal has {found:?}",
            o.tool, o.n, o.text, o.disposition
        );
    }
    eprintln!(
        "failover: {} replayed result(s) read from a commit the standby had not confirmed, lost with the old primary: {vanished_replays:?}",
        vanished_replays.len()
    );
    // Fencing: a completed record names an attempt that ran, and (compensable, irreversible)
    // that attempt's own output.
    for ((tool, n), (state, attempt, output)) in journal {
        if state != "completed" {
            continue;
        }
        let ran = applied.get(&(tool.as_str(), *n)).cloned().unwrap_or_default();
        assert!(
            ran.iter().any(|e| e.3 == *attempt),
            "{tool} {n} is completed by attempt {attempt}, which no ledger shows running: {ran:?}"
        );
        if tool != "refund" {
            let e = ran.iter().find(|e| e.3 == *attempt).unwrap();
            let want = format!("{tool}:{n}:w{}:a{attempt}", e.2);
            let got: String = serde_json::from_str(output.as_deref().unwrap()).unwrap();
            assert_eq!(got, want, "{tool} {n}: the record's output is not its attempt's");
        }
    }
}
