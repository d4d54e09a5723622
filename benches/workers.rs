//! Many workers, one PostgreSQL (issue 16): `WORKERS_PROCS` processes (default 8) × `WORKERS_TASKS`
//! tasks (default 64) make new idempotent calls through the real `Engine` on one
//! `PostgresStore` each (pool of `WORKERS_POOL` connections, default 16, the store's default),
//! all on one server and one journal, for `WORKERS_SECS` seconds (default 10): total calls per
//! second. Beside it, in the same minutes, alternated round by round: `pgbench` running the
//! journal's two statements of an idempotent new call, as the store sends them alone (the
//! claim's `INSERT … ON CONFLICT DO NOTHING` with `synchronous_commit = off` set inside it, then
//! the record's compare-and-set `UPDATE` with its audit entry), prepared, with
//! `PGBENCH_CLIENTS` clients (default 512 = 8 × 64) on `PGBENCH_JOBS` threads (default 8):
//! transactions per second, one transaction being one call's two statements. Target: the
//! workers ≥ 0.8 × pgbench.
//!
//! The bench spawns itself as the worker processes (`WORKERS_CHILD` set), which start together
//! at a time the parent gives them, after connecting and a few warm-up calls.
//!
//! Run: `eval "$(.ci/postgres.sh start)"`, raise the server's `max_connections` above
//! `PGBENCH_CLIENTS` (see BENCHMARKS.md), then `cargo bench --features postgres --bench workers`.
//! `WORKERS_ROUNDS` (default 3) rounds of each. `WORKERS_PRINT_SCRIPT=1` prints the pgbench
//! script and stops.

mod common;

#[cfg(feature = "postgres")]
mod pg {
    use std::process::{Command, Stdio};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Duration;

    use effect_tool::store::postgres::{PgOptions, PostgresStore, SslMode};
    use effect_tool::{CallOptions, Engine, RunContext};

    use crate::common::{Refund, input};

    const SCHEMA: &str = "effect_tool_workers";

    fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
        std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
    }

    fn now_ms() -> i64 {
        effect_tool::decide::record::now_millis()
    }

    fn options() -> PgOptions {
        PgOptions {
            schema: SCHEMA.to_owned(),
            pool_size: env_or("WORKERS_POOL", 16),
            ssl_mode: Some(SslMode::Disable),
            ..PgOptions::default()
        }
    }

    /// One worker process: connect, warm up, wait for the start, make new calls with
    /// `WORKERS_TASKS` tasks until the end; print how many completed in the window.
    pub fn child(url: &str, me: u64) {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .unwrap();
        let start_at: i64 = env_or("WORKERS_START_AT", 0);
        let secs: u64 = env_or("WORKERS_SECS", 10);
        let tasks: u64 = env_or("WORKERS_TASKS", 64);
        let round: u64 = env_or("WORKERS_ROUND", 0);
        let done = rt.block_on(async {
            let store = PostgresStore::connect_with(url, options()).await.unwrap();
            let engine = Engine::new(store);
            let run = RunContext::new(format!("workers-{round}-{me}"));
            // Inputs unique across processes and rounds.
            let next = Arc::new(AtomicU64::new((round << 48) | (me << 40)));
            for _ in 0..tasks {
                let i = next.fetch_add(1, Ordering::Relaxed);
                engine
                    .call(&Refund, &run, CallOptions::default(), input(i))
                    .await
                    .unwrap();
            }
            let wait = start_at - now_ms();
            if wait > 0 {
                tokio::time::sleep(Duration::from_millis(wait as u64)).await;
            }
            let end = tokio::time::Instant::now() + Duration::from_secs(secs);
            let done = Arc::new(AtomicU64::new(0));
            let handles: Vec<_> = (0..tasks)
                .map(|_| {
                    let (engine, run, next, done) = (engine.clone(), run.clone(), next.clone(), done.clone());
                    tokio::spawn(async move {
                        while tokio::time::Instant::now() < end {
                            let i = next.fetch_add(1, Ordering::Relaxed);
                            engine
                                .call(&Refund, &run, CallOptions::default(), input(i))
                                .await
                                .expect("a new call failed");
                            if tokio::time::Instant::now() <= end {
                                done.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    })
                })
                .collect();
            for h in handles {
                h.await.unwrap();
            }
            done.load(Ordering::Relaxed)
        });
        println!("calls {done}");
    }

    /// The pgbench script: the two statements of an idempotent new call, as the store sends each
    /// alone (`claim_fast_unflushed` and `update` in `store/postgres.rs`, copied from the
    /// server's log of a real call with `log_statement = all`), with a key unique per client and
    /// transaction; the values the store sends as parameters are constants here, but the key,
    /// the times and the claim's row version (`\gset` from the claim's answer).
    fn pgbench_script() -> String {
        let s = SCHEMA;
        let cols = "key, version, tool, class, run_id, thread_id, call_id, fingerprint, input, state, attempt, \
                    lease_until, output, reason, approval_role, decided_by, created_at, updated_at, expires_at, call_ids, holder";
        let r = "r.key, r.version, r.tool, r.class, r.run_id, r.thread_id, r.call_id, r.fingerprint, r.input::text, \
                 r.state, r.attempt, r.lease_until, r.output::text, r.reason, r.approval_role, r.decided_by, \
                 r.created_at, r.updated_at, r.expires_at, r.call_ids, r.holder, r.row_version";
        let clock = "(extract(epoch from clock_timestamp()) * 1000)::bigint";
        // A key as long as the engine's (run, tool, 64 hex digits); no `:name` inside a literal, which
        // pgbench would take for a variable.
        let key = "'pgbench-' || :client_id::text || ':' || 'issue_refund:' || lpad(:n::text, 64, '0')";
        let input = r#"'{"amount_cents":12345,"currency":"EUR","order_id":"ord_0000000000000001","reason":"customer returned the damaged item"}'"#;
        let holder = r#"'{"instance":"d9e8d1031c7768950546bfdca43fa5ab","host":"vm","pid":12496}'"#;
        format!(
            "\\set n random(1, 1000000000000)
\\set now 1800000000000
WITH ins AS (INSERT INTO {s}.records ({cols}) VALUES ({key}, 1, 'issue_refund', 'idempotent', 'pgbench', NULL, NULL, '0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0', {input}::text::json, 'claimed', 1, :now::int8 + 30000, NULL::text::json, NULL, NULL, NULL, :now, :now, NULL, NULL, {holder}) ON CONFLICT (key) DO NOTHING RETURNING row_version) SELECT {clock} AS db_now, (SELECT row_version FROM ins) AS inserted, {r} FROM (SELECT set_config('synchronous_commit', 'off', true)) AS one LEFT JOIN {s}.records r ON r.key = {key} \\gset
WITH upd AS (UPDATE {s}.records SET version = 1, tool = 'issue_refund', class = 'idempotent', run_id = 'pgbench', thread_id = NULL, call_id = NULL, fingerprint = '0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0', input = {input}::text::json, state = 'completed', attempt = 1, lease_until = NULL, output = '12345'::text::json, reason = NULL, approval_role = NULL, decided_by = NULL, created_at = :now, updated_at = :now::int8 + 1, expires_at = NULL, call_ids = NULL, holder = {holder}, row_version = nextval('{s}.row_version_seq') WHERE key = {key} AND row_version = :inserted AND attempt = 1 RETURNING key, row_version), aud AS (INSERT INTO {s}.audit (key, at, actor, action, detail) SELECT key, NULL::int8, NULL::text, NULL::text, NULL::text::json FROM upd WHERE NULL::text IS NOT NULL) SELECT row_version FROM upd;
"
        )
    }

    /// One round of the workers: their total calls per second.
    fn workers_round(url: &str, round: u64) -> f64 {
        let procs: u64 = env_or("WORKERS_PROCS", 8);
        let secs: u64 = env_or("WORKERS_SECS", 10);
        let start_at = now_ms() + 4_000;
        let exe = std::env::current_exe().unwrap();
        let children: Vec<_> = (0..procs)
            .map(|me| {
                Command::new(&exe)
                    .env("WORKERS_CHILD", me.to_string())
                    .env("WORKERS_START_AT", start_at.to_string())
                    .env("WORKERS_ROUND", round.to_string())
                    .env("EFFECT_TOOL_PG_URL", url)
                    .stdout(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        let mut total = 0u64;
        for c in children {
            let out = c.wait_with_output().unwrap();
            assert!(out.status.success(), "a worker failed");
            let text = String::from_utf8_lossy(&out.stdout);
            let n: u64 = text
                .lines()
                .find_map(|l| l.strip_prefix("calls "))
                .and_then(|n| n.trim().parse().ok())
                .expect("a worker's count");
            total += n;
        }
        total as f64 / secs as f64
    }

    /// One round of pgbench: its transactions (calls) per second.
    fn pgbench_round(url: &str, script: &std::path::Path) -> f64 {
        let bin = std::env::var("PGBENCH").unwrap_or_else(|_| "/usr/lib/postgresql/15/bin/pgbench".to_owned());
        let clients: u64 = env_or("PGBENCH_CLIENTS", 512);
        let jobs: u64 = env_or("PGBENCH_JOBS", 8);
        let secs: u64 = env_or("WORKERS_SECS", 10);
        let out = Command::new(bin)
            .args([
                "-n",
                "-M",
                "prepared",
                "-c",
                &clients.to_string(),
                "-j",
                &jobs.to_string(),
            ])
            .args(["-T", &secs.to_string(), "-f"])
            .arg(script)
            .arg(url)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "pgbench failed: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let tps = text
            .lines()
            .find_map(|l| l.strip_prefix("tps = "))
            .and_then(|l| l.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| {
                panic!(
                    "no tps in pgbench's output: {text}{}",
                    String::from_utf8_lossy(&out.stderr)
                )
            });
        let failed = text.lines().find(|l| l.contains("failed")).unwrap_or("").to_owned();
        eprintln!("workers: pgbench {tps:.0} tps {failed}");
        tps
    }

    pub fn parent(url: &str) {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .unwrap();
        let settings = rt.block_on(async {
            let (raw, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.unwrap();
            tokio::spawn(conn);
            raw.batch_execute(&format!("DROP SCHEMA IF EXISTS {SCHEMA} CASCADE"))
                .await
                .unwrap();
            // The schema made once, before the workers race for it.
            drop(PostgresStore::connect_with(url, options()).await.unwrap());
            let mut settings = Vec::new();
            for name in [
                "max_connections",
                "shared_buffers",
                "synchronous_commit",
                "wal_sync_method",
            ] {
                let v: String = raw.query_one(&format!("SHOW {name}"), &[]).await.unwrap().get(0);
                settings.push(format!("{name} = {v}"));
            }
            settings.join(", ")
        });
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("journal.sql");
        std::fs::write(&script, pgbench_script()).unwrap();
        if std::env::var("WORKERS_PRINT_SCRIPT").is_ok() {
            println!("{}", pgbench_script());
            return;
        }
        let rounds: u64 = env_or("WORKERS_ROUNDS", 3);
        let mut rows = Vec::new();
        for round in 0..rounds {
            // Alternate which goes first.
            let (w, p) = if round % 2 == 0 {
                let w = workers_round(url, round);
                (w, pgbench_round(url, &script))
            } else {
                let p = pgbench_round(url, &script);
                (workers_round(url, round), p)
            };
            let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
            eprintln!(
                "workers: round {round}: workers {w:.0} calls/s, pgbench {p:.0} tps, load {}",
                load.trim()
            );
            rows.push((w, p, load.split_whitespace().next().unwrap_or("?").to_owned()));
        }
        println!(
            "\n{} processes × {} tasks (pool {} each), {} s per round; pgbench {} clients, {} threads; server: {settings}\n",
            env_or("WORKERS_PROCS", 8u64),
            env_or("WORKERS_TASKS", 64u64),
            env_or("WORKERS_POOL", 16u64),
            env_or("WORKERS_SECS", 10u64),
            env_or("PGBENCH_CLIENTS", 512u64),
            env_or("PGBENCH_JOBS", 8u64),
        );
        println!("| round | load (1 min) | workers, calls/s | pgbench, the two statements, tps | ÷ (target ≥ 0.8) |");
        println!("|---|---|---|---|---|");
        for (i, (w, p, load)) in rows.iter().enumerate() {
            let mark = if w / p >= 0.8 { "✓" } else { "✗" };
            println!("| {i} | {load} | {w:.0} | {p:.0} | {:.2} {mark} |", w / p);
        }
        let mut ratios: Vec<f64> = rows.iter().map(|(w, p, _)| w / p).collect();
        ratios.sort_by(|a, b| a.partial_cmp(b).unwrap());
        println!("\nmedian ratio {:.2}", ratios[ratios.len() / 2]);
        if std::env::var("WORKERS_KEEP").is_err() {
            rt.block_on(async {
                let (raw, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.unwrap();
                tokio::spawn(conn);
                raw.batch_execute(&format!("DROP SCHEMA {SCHEMA} CASCADE"))
                    .await
                    .unwrap();
            });
        }
    }
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else is read from the arguments.
    #[cfg(feature = "postgres")]
    {
        let Ok(url) = std::env::var("EFFECT_TOOL_PG_URL") else {
            eprintln!("*** SKIPPED: EFFECT_TOOL_PG_URL is not set (eval \"$(.ci/postgres.sh start)\") ***");
            return;
        };
        match std::env::var("WORKERS_CHILD").ok().and_then(|v| v.parse().ok()) {
            Some(me) => pg::child(&url, me),
            None => pg::parent(&url),
        }
    }
    #[cfg(not(feature = "postgres"))]
    eprintln!("*** SKIPPED: built without `--features postgres` ***");
}
