//! Many workers, one PostgreSQL (issue 16): `WORKERS_PROCS` processes (default 8) × `WORKERS_TASKS`
//! tasks (default 64) make new idempotent calls through the real `Engine` on one
//! `PostgresStore` each (pool of `WORKERS_POOL` connections, default 16, the store's default),
//! all on one server and one journal, for `WORKERS_SECS` seconds (default 10): total calls per
//! second. Beside it, in the same minutes, alternated round by round: `pgbench` running the
//! journal's two statements of an idempotent new call, as the store sends them alone (the
//! claim's `INSERT … ON CONFLICT DO NOTHING` with `synchronous_commit = off` set inside it, then
//! the record's compare-and-set `UPDATE` with its audit entry), prepared, with
//! `PGBENCH_CLIENTS` clients (default 512 = 8 × 64) on `PGBENCH_JOBS` threads (default 8):
//! transactions per second, one transaction being one call's two statements (issue 16's
//! baseline).
//!
//! Issue 36's fairer ceilings, in the same rounds:
//! - Each worker records the batches its store forms (the histogram
//!   `effect_tool_store_batch_items`, through a recorder of its own that keeps only that one):
//!   items per statement, their quantiles, and how many of the calls' writes went in a batch.
//! - `pgbench` sending the store's own batch statement (`batch_sql` in
//!   `store/postgres/batch.rs`, copied from the server's log: `pg::BATCH_SQL`) with `N` items:
//!   one transaction is the statement with `N` new claims, then the statement with the `N`
//!   records over them (each its own commit, waiting for the WAL flush, as a batch with any
//!   record does), so `N` calls in two commits, as `N` items in each of two store batches are.
//!   `N` is the mean items per batch of the last workers round (`PGBENCH_BATCH_ITEMS` sets it),
//!   the arrays made inside the statement (`generate_series`, keys SHA-256 hex as the engine's).
//!   `PGBENCH_BATCH_CLIENTS` clients (default 2 × `WORKERS_PROCS`: each store's 2 batch
//!   runners). Calls per second = transactions per second × `N`. Target: the workers ≥ 0.8 × it.
//!   `PGBENCH_BATCH_UNFLUSHED=1` sends the claims' statement as `batch_unflushed` (committed
//!   without waiting for the flush, as a store's batch of claims only is). With
//!   `WORKERS_ONE_WRITE=1` the workers call the refund declared `one_write` (one write per call:
//!   its record) and a pgbench transaction is one statement of `N` completed records.
//! - The server's plain one-row `INSERT` (autocommitted: `INSERT …; COMMIT`) into a scratch
//!   table, with `PGBENCH_INSERT_CLIENTS` clients (default: as the batch statement's): commits
//!   per second.
//!
//! `PGBENCH_PER_CALL=0` skips issue 16's baseline (then `max_connections` need not exceed
//! 512).
//!
//! The bench spawns itself as the worker processes (`WORKERS_CHILD` set), which start together
//! at a time the parent gives them, after connecting and a few warm-up calls.
//!
//! Run: `eval "$(.ci/postgres.sh start)"`, raise the server's `max_connections` above
//! `PGBENCH_CLIENTS` (see BENCHMARKS.md), then `cargo bench --features postgres --bench workers`.
//! `WORKERS_ROUNDS` (default 3) rounds of each. `WORKERS_PRINT_SCRIPT=1` prints the pgbench
//! scripts (the batch statement's with `PGBENCH_BATCH_ITEMS`, default 32) and stops.

mod common;

#[cfg(feature = "postgres")]
mod pg {
    use std::collections::BTreeMap;
    use std::process::{Command, Stdio};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Duration;

    use effect_tool::store::postgres::{PgOptions, PostgresStore, SslMode};
    use effect_tool::{CallOptions, Engine, RunContext};

    use crate::common::{Refund, RefundOneWrite, input};

    const SCHEMA: &str = "effect_tool_workers";

    fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
        std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
    }

    fn now_ms() -> i64 {
        effect_tool::decide::record::now_millis()
    }

    /// The fields of `/proc/<pid>/stat` from the third (state) on, as numbers (0 where not one).
    fn stat(pid: &str) -> Option<Vec<f64>> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let (_, rest) = text.rsplit_once(')')?;
        Some(rest.split_whitespace().map(|x| x.parse().unwrap_or(0.0)).collect())
    }

    /// CPU seconds (user + system, at Linux's 100 ticks a second) of the server and of this
    /// process's waited-for children (the workers, pgbench), so far.
    #[derive(Clone, Copy, Default)]
    struct Cpu {
        server: f64,
        clients: f64,
    }

    impl Cpu {
        /// Now: the postmaster's processes (its own time, its live children's, and its reaped
        /// children's) and this process's reaped children's.
        fn now(postmaster: u32) -> Cpu {
            let mut server = 0.0;
            for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
                let name = entry.file_name();
                let Some(pid) = name.to_str().filter(|n| n.bytes().all(|b| b.is_ascii_digit())) else {
                    continue;
                };
                let Some(f) = stat(pid) else { continue };
                // From the state: ppid 1, utime 11, stime 12, cutime 13, cstime 14.
                if pid.parse() == Ok(postmaster) {
                    server += f[11] + f[12] + f[13] + f[14];
                } else if f[1] as u32 == postmaster {
                    server += f[11] + f[12];
                }
            }
            let me = stat("self").unwrap_or_default();
            Cpu {
                server: server / 100.0,
                clients: me.get(13).zip(me.get(14)).map_or(0.0, |(u, s)| (u + s) / 100.0),
            }
        }

        /// The CPU seconds `f` took, and its result.
        fn of<T>(postmaster: u32, f: impl FnOnce() -> T) -> (T, Cpu) {
            let before = Cpu::now(postmaster);
            let out = f();
            let after = Cpu::now(postmaster);
            (
                out,
                Cpu {
                    server: after.server - before.server,
                    clients: after.clients - before.clients,
                },
            )
        }

        /// Microseconds of server and client CPU per call, in a table cell.
        fn per_call(&self, calls: f64) -> String {
            format!(
                "{:.0} + {:.0}",
                1e6 * self.server / calls.max(1.0),
                1e6 * self.clients / calls.max(1.0)
            )
        }
    }

    fn options() -> PgOptions {
        PgOptions {
            schema: SCHEMA.to_owned(),
            pool_size: env_or("WORKERS_POOL", 16),
            ssl_mode: Some(SslMode::Disable),
            ..PgOptions::default()
        }
    }

    /// The most items a store's batch statement carries (`BATCH_MAX` in `batch.rs`).
    const BATCH_MAX: usize = 256;

    /// Counts of the store's batch statements by items, `[flush][items]`: the one metric a
    /// worker keeps.
    struct BatchItems([[AtomicU64; BATCH_MAX + 1]; 2]);

    impl BatchItems {
        fn counts(&self) -> Vec<[u64; BATCH_MAX + 1]> {
            self.0
                .iter()
                .map(|row| std::array::from_fn(|i| row[i].load(Ordering::Relaxed)))
                .collect()
        }
    }

    /// One label value of `effect_tool_store_batch_items`.
    struct Flush(Arc<BatchItems>, usize);

    impl metrics::HistogramFn for Flush {
        fn record(&self, value: f64) {
            self.0.0[self.1][(value as usize).min(BATCH_MAX)].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A recorder that keeps `effect_tool_store_batch_items` and drops every other metric (so
    /// the engine's per-call histograms cost what they cost with no recorder at all, or near).
    struct BatchRecorder(Arc<BatchItems>);

    impl metrics::Recorder for BatchRecorder {
        fn describe_counter(&self, _: metrics::KeyName, _: Option<metrics::Unit>, _: metrics::SharedString) {}
        fn describe_gauge(&self, _: metrics::KeyName, _: Option<metrics::Unit>, _: metrics::SharedString) {}
        fn describe_histogram(&self, _: metrics::KeyName, _: Option<metrics::Unit>, _: metrics::SharedString) {}
        fn register_counter(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Counter {
            metrics::Counter::noop()
        }
        fn register_gauge(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Gauge {
            metrics::Gauge::noop()
        }
        fn register_histogram(&self, key: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Histogram {
            if key.name() != "effect_tool_store_batch_items" {
                return metrics::Histogram::noop();
            }
            let flush = key.labels().any(|l| l.key() == "flush" && l.value() == "true");
            metrics::Histogram::from_arc(Arc::new(Flush(self.0.clone(), usize::from(flush))))
        }
    }

    /// Whether the workers call the refund declared `one_write` (`WORKERS_ONE_WRITE=1`): one
    /// write per call, its record, instead of a claim and a record.
    fn one_write() -> bool {
        std::env::var("WORKERS_ONE_WRITE").is_ok_and(|v| v == "1")
    }

    /// One new call of the refund (or of its `one_write` twin).
    async fn call(engine: &Engine, run: &RunContext, i: u64) {
        let done = if one_write() {
            engine
                .call(&RefundOneWrite, run, CallOptions::default(), input(i))
                .await
        } else {
            engine.call(&Refund, run, CallOptions::default(), input(i)).await
        };
        done.expect("a new call failed");
    }

    /// One worker process: connect, warm up, wait for the start, make new calls with
    /// `WORKERS_TASKS` tasks until the end; print how many completed in the window
    /// (`calls`), how many ended in all (`all`: the window's and the last ones that ended
    /// after it), and the batch statements its store sent meanwhile (`batch <flush> <items>
    /// <count>`).
    pub fn child(url: &str, me: u64) {
        let batches = Arc::new(BatchItems(std::array::from_fn(|_| {
            std::array::from_fn(|_| AtomicU64::new(0))
        })));
        metrics::set_global_recorder(BatchRecorder(batches.clone())).expect("the worker's only recorder");
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .unwrap();
        let start_at: i64 = env_or("WORKERS_START_AT", 0);
        let secs: u64 = env_or("WORKERS_SECS", 10);
        let tasks: u64 = env_or("WORKERS_TASKS", 64);
        let round: u64 = env_or("WORKERS_ROUND", 0);
        let (done, all, before) = rt.block_on(async {
            let store = PostgresStore::connect_with(url, options()).await.unwrap();
            let engine = Engine::new(store);
            let run = RunContext::new(format!("workers-{round}-{me}"));
            // Inputs unique across processes and rounds.
            let next = Arc::new(AtomicU64::new((round << 48) | (me << 40)));
            for _ in 0..tasks {
                call(&engine, &run, next.fetch_add(1, Ordering::Relaxed)).await;
            }
            let wait = start_at - now_ms();
            if wait > 0 {
                tokio::time::sleep(Duration::from_millis(wait as u64)).await;
            }
            let before = batches.counts();
            let end = tokio::time::Instant::now() + Duration::from_secs(secs);
            let done = Arc::new(AtomicU64::new(0));
            let all = Arc::new(AtomicU64::new(0));
            let handles: Vec<_> = (0..tasks)
                .map(|_| {
                    let (engine, run, next, done, all) =
                        (engine.clone(), run.clone(), next.clone(), done.clone(), all.clone());
                    tokio::spawn(async move {
                        while tokio::time::Instant::now() < end {
                            call(&engine, &run, next.fetch_add(1, Ordering::Relaxed)).await;
                            all.fetch_add(1, Ordering::Relaxed);
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
            (done.load(Ordering::Relaxed), all.load(Ordering::Relaxed), before)
        });
        println!("calls {done}");
        println!("all {all}");
        for (flush, (after, before)) in batches.counts().iter().zip(&before).enumerate() {
            for (items, (a, b)) in after.iter().zip(before).enumerate() {
                if a > b {
                    println!("batch {flush} {items} {}", a - b);
                }
            }
        }
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

    /// The store's batch statement for schema `effect_tool_workers` (`Sql::batch`, made by
    /// `batch_sql` in `store/postgres/batch.rs`), as the server's log shows it (`log_statement =
    /// all`) during a workers round; copy it again if `batch_sql` changes. `$1..$28` are the
    /// items' columns as arrays.
    pub const BATCH_SQL: &str = r#"WITH u AS (
           SELECT * FROM unnest($1::text[], $2::int4[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[], $10::text[], $11::int8[], $12::int8[], $13::text[], $14::text[], $15::text[], $16::text[], $17::int8[], $18::int8[], $19::int8[], $20::text[], $21::text[], $22::int8[], $23::int8[], $24::text[], $25::int8[], $26::text[], $27::text[], $28::text[])
           WITH ORDINALITY AS u(key, version, tool, class, run_id, thread_id, call_id, fingerprint, input, state, attempt, lease_until, output, reason, approval_role, decided_by, created_at, updated_at, expires_at, call_ids, holder, old_row_version, old_attempt, old_holder, audit_at, actor, action, detail, ord)),
         ins AS (
           INSERT INTO "effect_tool_workers".records (key, version, tool, class, run_id, thread_id, call_id, fingerprint, input, state, attempt, lease_until, output, reason, approval_role, decided_by, created_at, updated_at, expires_at, call_ids, holder)
           SELECT u.key, u.version, u.tool, u.class, u.run_id, u.thread_id, u.call_id, u.fingerprint, u.input::json, u.state, u.attempt, u.lease_until, u.output::json, u.reason, u.approval_role, u.decided_by, u.created_at, u.updated_at, u.expires_at, u.call_ids, u.holder FROM u WHERE old_row_version IS NULL ORDER BY ord
           ON CONFLICT (key) DO NOTHING
           RETURNING key, row_version),
         upd AS (
           UPDATE "effect_tool_workers".records t SET version = u.version, tool = u.tool, class = u.class, run_id = u.run_id, thread_id = u.thread_id, call_id = u.call_id, fingerprint = u.fingerprint, input = u.input::json, state = u.state, attempt = u.attempt, lease_until = u.lease_until, output = u.output::json, reason = u.reason, approval_role = u.approval_role, decided_by = u.decided_by, created_at = u.created_at, updated_at = u.updated_at, expires_at = u.expires_at, call_ids = u.call_ids, holder = u.holder, row_version = nextval('"effect_tool_workers".row_version_seq')
           FROM u
           WHERE u.old_row_version IS NOT NULL AND t.key = u.key AND t.row_version = u.old_row_version
             AND t.attempt = u.old_attempt AND t.holder IS NOT DISTINCT FROM u.old_holder
           RETURNING t.key, t.row_version, u.ord, u.audit_at, u.actor, u.action, u.detail),
         aud AS (
           INSERT INTO "effect_tool_workers".audit (key, at, actor, action, detail)
           SELECT key, audit_at, actor, action, detail::json FROM upd WHERE action IS NOT NULL ORDER BY ord)
         SELECT (extract(epoch from clock_timestamp()) * 1000)::bigint AS db_now, u.ord, NULL::text AS key, NULL::int8 AS written, r.key, r.version, r.tool, r.class, r.run_id, r.thread_id, r.call_id, r.fingerprint, r.input::text, r.state, r.attempt, r.lease_until, r.output::text, r.reason, r.approval_role, r.decided_by, r.created_at, r.updated_at, r.expires_at, r.call_ids, r.holder, r.row_version
           FROM u JOIN "effect_tool_workers".records r ON r.key = u.key WHERE u.old_row_version IS NULL
         UNION ALL
         SELECT (extract(epoch from clock_timestamp()) * 1000)::bigint, NULL, ins.key, ins.row_version, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL FROM ins
         UNION ALL
         SELECT (extract(epoch from clock_timestamp()) * 1000)::bigint, upd.ord, NULL, upd.row_version, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL FROM upd"#;

    /// The setting function `batch_unflushed` adds (`UNFLUSHED` in `store/postgres/statements.rs`).
    const UNFLUSHED: &str = "set_config('synchronous_commit', 'off', true)";

    /// The array types of [`BATCH_SQL`]'s parameters (`ARRAY_TYPES` in `batch.rs`).
    const ARRAY_TYPES: [&str; 28] = [
        "text", "int4", "text", "text", "text", "text", "text", "text", "text", "text", "int8", "int8", "text", "text",
        "text", "text", "int8", "int8", "int8", "text", "text", "int8", "int8", "text", "int8", "text", "text", "text",
    ];

    /// [`BATCH_SQL`] with each parameter `$k` made by the expression `args[k - 1]`.
    fn batch_statement(args: &[String; 28], unflushed: bool) -> String {
        let mut sql = BATCH_SQL.to_owned();
        if unflushed {
            sql = sql.replace(
                "detail, ord)),",
                &format!("detail, ord) WHERE {UNFLUSHED} IS NOT NULL),"),
            );
        }
        for (k, (arg, t)) in args.iter().zip(ARRAY_TYPES).enumerate() {
            let param = format!("${}::{t}[]", k + 1);
            assert!(sql.contains(&param), "{param} is not in BATCH_SQL");
            sql = sql.replace(&param, &format!("({arg})::{t}[]"));
        }
        sql
    }

    /// The pgbench script of the store's batch statement with `n` items: the statement with `n`
    /// new claims, then the statement with the `n` records over them (the claims' row versions
    /// read back inside it: the store knows them from the claim's answer), each committed on
    /// its own. The values are those of [`pgbench_script`]; the keys are new per client and
    /// transaction, SHA-256 hex as the engine's, sorted as the store sorts a batch's items.
    ///
    /// With `one_write` (the `one_write` refund's): one statement of `n` completed records
    /// inserted, one commit for `n` calls.
    fn batch_script(n: usize, unflushed: bool, one_write: bool) -> String {
        let keys = format!(
            "ARRAY(SELECT 'pgbatch-' || :client_id::text || ':' || 'issue_refund:' || \
             encode(sha256((:n::int8 + i)::text::bytea), 'hex') FROM generate_series(1, {n}) i ORDER BY 1)"
        );
        let fill = |v: &str| format!("array_fill({v}, ARRAY[{n}])");
        let input = r#"'{"amount_cents":12345,"currency":"EUR","order_id":"ord_0000000000000001","reason":"customer returned the damaged item"}'::text"#;
        let holder = r#"'{"instance":"d9e8d1031c7768950546bfdca43fa5ab","host":"vm","pid":12496}'::text"#;
        let fingerprint = "'0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0'::text";
        let tool = if one_write {
            "'issue_refund_one_write'::text"
        } else {
            "'issue_refund'::text"
        };
        // `completed`: the record; `update`: written over the claim.
        let record = |completed: bool, update: bool| -> [String; 28] {
            let (null_text, null_int) = (fill("NULL::text"), fill("NULL::int8"));
            let versions = format!(
                "SELECT array_agg(r.row_version ORDER BY r.key) FROM \"{SCHEMA}\".records r WHERE r.key = ANY({keys})"
            );
            [
                keys.clone(),
                fill("1::int4"),
                fill(tool),
                fill("'idempotent'::text"),
                fill("'pgbench'::text"),
                null_text.clone(),
                null_text.clone(),
                fill(fingerprint),
                fill(input),
                fill(if completed {
                    "'completed'::text"
                } else {
                    "'claimed'::text"
                }),
                fill("1::int8"),
                if completed {
                    null_int.clone()
                } else {
                    fill(":now::int8 + 30000")
                },
                if completed {
                    fill("'12345'::text")
                } else {
                    null_text.clone()
                },
                null_text.clone(),
                null_text.clone(),
                null_text.clone(),
                fill(":now::int8"),
                fill(if completed { ":now::int8 + 1" } else { ":now::int8" }),
                null_int.clone(),
                null_text.clone(),
                fill(holder),
                if update { versions } else { null_int.clone() },
                if update { fill("1::int8") } else { null_int.clone() },
                if update { fill(holder) } else { null_text.clone() },
                null_int,
                null_text.clone(),
                null_text.clone(),
                null_text,
            ]
        };
        let head = "\\set n random(1, 1000000000000000)\n\\set now 1800000000000\n";
        if one_write {
            format!("{head}{};\n", batch_statement(&record(true, false), false))
        } else {
            format!(
                "{head}{};\n{};\n",
                batch_statement(&record(false, false), unflushed),
                batch_statement(&record(true, true), false),
            )
        }
    }

    /// The scratch table of the plain `INSERT`'s baseline (as `benches/store.rs`'s raw commit).
    const RAW: &str = "effect_tool_workers_raw";

    /// The pgbench script of one autocommitted one-row `INSERT` of the refund's input.
    fn insert_script() -> String {
        format!(
            r#"INSERT INTO {RAW} (v) VALUES ('{{"amount_cents":12345,"currency":"EUR","order_id":"ord_0000000000000001","reason":"customer returned the damaged item"}}');
"#
        )
    }

    /// What one round of the workers measured.
    struct Workers {
        /// Calls per second in the window.
        calls: f64,
        /// Calls that ended in all (the window's and the last ones after it).
        all: u64,
        /// Batch statements sent in the window, by (flush, items).
        batches: BTreeMap<(usize, usize), u64>,
    }

    impl Workers {
        /// Batch statements sent.
        fn statements(&self) -> u64 {
            self.batches.values().sum()
        }

        /// Writes those statements carried.
        fn items(&self) -> u64 {
            self.batches.iter().map(|(&(_, n), c)| n as u64 * c).sum()
        }

        /// Mean items per batch statement.
        fn mean(&self) -> f64 {
            self.items() as f64 / self.statements().max(1) as f64
        }

        /// The `q` quantile of items per statement (by statement, or by item with `by_item`: the
        /// size of the batch a write went in).
        fn quantile(&self, q: f64, by_item: bool) -> usize {
            let mut sizes = BTreeMap::new();
            for (&(_, n), &c) in &self.batches {
                *sizes.entry(n).or_insert(0u64) += if by_item { c * n as u64 } else { c };
            }
            let total: u64 = sizes.values().sum();
            let mut seen = 0;
            for (n, c) in sizes {
                seen += c;
                if seen as f64 >= q * total as f64 {
                    return n;
                }
            }
            0
        }

        /// The share of the batch statements that carried claims only (committed unflushed).
        fn unflushed(&self) -> f64 {
            let unflushed: u64 = self.batches.iter().filter(|((f, _), _)| *f == 0).map(|(_, c)| c).sum();
            unflushed as f64 / self.statements().max(1) as f64
        }

        /// The share of the calls' writes (a claim and a record each, or the record alone with
        /// `one_write`) that went in a batch.
        fn batched(&self) -> f64 {
            let writes = if one_write() { 1 } else { 2 };
            self.items() as f64 / (writes * self.all.max(1)) as f64
        }

        /// Items per statement, in a table cell: mean, then p10/p50/p90/p99 by statement.
        fn cell(&self) -> String {
            format!(
                "{:.1}; {}/{}/{}/{}",
                self.mean(),
                self.quantile(0.1, false),
                self.quantile(0.5, false),
                self.quantile(0.9, false),
                self.quantile(0.99, false)
            )
        }
    }

    /// One round of the workers: their total calls per second and their stores' batches.
    fn workers_round(url: &str, round: u64) -> Workers {
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
        let mut all = 0u64;
        let mut batches = BTreeMap::new();
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
            all += text
                .lines()
                .find_map(|l| l.strip_prefix("all "))
                .and_then(|n| n.trim().parse::<u64>().ok())
                .expect("a worker's count of all its calls");
            for line in text.lines().filter_map(|l| l.strip_prefix("batch ")) {
                let v: Vec<usize> = line.split(' ').map(|x| x.parse().expect("a batch line")).collect();
                *batches.entry((v[0], v[1])).or_insert(0) += v[2] as u64;
            }
        }
        let w = Workers {
            calls: total as f64 / secs as f64,
            all,
            batches,
        };
        eprintln!(
            "workers: workers {:.0} calls/s; {} batch statements, items mean; p10/p50/p90/p99 {}, \
             p50 by item {}, claims-only {:.0}%, writes batched {:.0}%",
            w.calls,
            w.statements(),
            w.cell(),
            w.quantile(0.5, true),
            100.0 * w.unflushed(),
            100.0 * w.batched()
        );
        w
    }

    /// One round of pgbench running `script` with `clients` clients: its transactions per second.
    fn pgbench_round(url: &str, script: &std::path::Path, clients: u64, what: &str) -> f64 {
        let bin = std::env::var("PGBENCH").unwrap_or_else(|_| "/usr/lib/postgresql/15/bin/pgbench".to_owned());
        let jobs: u64 = env_or("PGBENCH_JOBS", 8u64).min(clients);
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
        eprintln!("workers: pgbench {what}, {clients} clients: {tps:.0} tps {failed}");
        tps
    }

    /// One round's figures.
    struct Row {
        load: String,
        workers: Workers,
        /// Issue 16's baseline: the two statements per call, tps (= calls/s).
        per_call: Option<f64>,
        /// Items per statement in the batch statement's pgbench.
        n: usize,
        /// The batch statement's pgbench, calls per second (tps × n).
        batch: f64,
        /// Calls the batch statement's pgbench completed, per second, counted in the journal.
        batch_rows: f64,
        /// Plain one-row `INSERT`s, commits per second.
        insert: f64,
        /// CPU of the workers' round (the worker processes' start and warm-up included) and of the
        /// batch statement's pgbench.
        cpu: (Cpu, Cpu),
    }

    pub fn parent(url: &str) {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .unwrap();
        let (raw, settings, postmaster) = rt.block_on(async {
            let (raw, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.unwrap();
            tokio::spawn(conn);
            raw.batch_execute(&format!(
                "DROP SCHEMA IF EXISTS {SCHEMA} CASCADE; DROP TABLE IF EXISTS {RAW};
                 CREATE TABLE {RAW} (id bigserial PRIMARY KEY, v text NOT NULL);"
            ))
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
                "commit_delay",
                "server_version",
            ] {
                let v: String = raw.query_one(&format!("SHOW {name}"), &[]).await.unwrap().get(0);
                settings.push(format!("{name} = {v}"));
            }
            // The server's postmaster: the parent of this connection's backend.
            let backend: i32 = raw.query_one("SELECT pg_backend_pid()", &[]).await.unwrap().get(0);
            let postmaster = stat(&backend.to_string()).map_or(0, |f| f[1] as u32);
            (raw, settings.join(", "), postmaster)
        });
        let completed = || -> i64 {
            rt.block_on(raw.query_one(
                &format!(
                    "SELECT count(*) FROM \"{SCHEMA}\".records WHERE key LIKE 'pgbatch-%' AND state = 'completed'"
                ),
                &[],
            ))
            .unwrap()
            .get(0)
        };
        let procs: u64 = env_or("WORKERS_PROCS", 8);
        let batch_clients: u64 = env_or("PGBENCH_BATCH_CLIENTS", 2 * procs);
        let insert_clients: u64 = env_or("PGBENCH_INSERT_CLIENTS", batch_clients);
        let per_call_clients: u64 = env_or("PGBENCH_CLIENTS", 512);
        let per_call_on = env_or("PGBENCH_PER_CALL", 1u8) != 0;
        let unflushed = std::env::var("PGBENCH_BATCH_UNFLUSHED").is_ok_and(|v| v == "1");
        let fixed_n: Option<usize> = std::env::var("PGBENCH_BATCH_ITEMS").ok().and_then(|v| v.parse().ok());
        let secs: u64 = env_or("WORKERS_SECS", 10);
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("journal.sql");
        std::fs::write(&script, pgbench_script()).unwrap();
        let inserts = dir.path().join("insert.sql");
        std::fs::write(&inserts, insert_script()).unwrap();
        if std::env::var("WORKERS_PRINT_SCRIPT").is_ok() {
            println!("{}", pgbench_script());
            println!("{}", batch_script(fixed_n.unwrap_or(32), unflushed, one_write()));
            println!("{}", insert_script());
            return;
        }
        let batch_round = |n: usize| -> (f64, f64, Cpu) {
            let path = dir.path().join(format!("batch-{n}.sql"));
            std::fs::write(&path, batch_script(n, unflushed, one_write())).unwrap();
            let before = completed();
            let (tps, cpu) = Cpu::of(postmaster, || {
                pgbench_round(url, &path, batch_clients, &format!("batch statement × {n}"))
            });
            let rows = (completed() - before) as f64 / secs as f64;
            (tps * n as f64, rows, cpu)
        };
        let rounds: u64 = env_or("WORKERS_ROUNDS", 3);
        let mut rows: Vec<Row> = Vec::new();
        // The batch size of the last workers round (or 32 before any).
        let mut last_n = fixed_n.unwrap_or(32);
        for round in 0..rounds {
            // Alternate which goes first; the batch statement's pgbench next to the workers.
            let ((workers, wcpu), per_call, n, (batch, batch_rows, bcpu), insert) = if round % 2 == 0 {
                let w = Cpu::of(postmaster, || workers_round(url, round));
                let n = fixed_n.unwrap_or(w.0.mean().round().max(1.0) as usize);
                let b = batch_round(n);
                let i = pgbench_round(url, &inserts, insert_clients, "INSERT; COMMIT");
                let p = per_call_on.then(|| pgbench_round(url, &script, per_call_clients, "per call"));
                (w, p, n, b, i)
            } else {
                let p = per_call_on.then(|| pgbench_round(url, &script, per_call_clients, "per call"));
                let i = pgbench_round(url, &inserts, insert_clients, "INSERT; COMMIT");
                let n = last_n;
                let b = batch_round(n);
                (Cpu::of(postmaster, || workers_round(url, round)), p, n, b, i)
            };
            last_n = fixed_n.unwrap_or(workers.mean().round().max(1.0) as usize);
            let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
            eprintln!(
                "workers: round {round}: workers {:.0} calls/s, batch statement × {n} {batch:.0} calls/s \
                 ({batch_rows:.0} completed rows/s), INSERT {insert:.0} tps, per call {per_call:?} tps, load {}",
                workers.calls,
                load.trim()
            );
            rows.push(Row {
                load: load.split_whitespace().take(3).collect::<Vec<_>>().join(" "),
                workers,
                per_call,
                n,
                batch,
                batch_rows,
                insert,
                cpu: (wcpu, bcpu),
            });
        }
        println!(
            "\n{procs} processes × {} tasks (pool {} each), {secs} s per round; pgbench threads ≤ {}: batch \
             statement {batch_clients} clients{}, INSERT {insert_clients} clients, per call {}; server: {settings}\n",
            env_or("WORKERS_TASKS", 64u64),
            env_or("WORKERS_POOL", 16u64),
            env_or("PGBENCH_JOBS", 8u64),
            match (one_write(), unflushed) {
                (true, _) => " (one_write: one statement of completed records)",
                (false, true) => " (claims unflushed)",
                (false, false) => "",
            },
            if per_call_on {
                format!("{per_call_clients} clients")
            } else {
                "not run".to_owned()
            },
        );
        println!(
            "| round | load (1/5/15 min) | workers, calls/s | items per batch: mean; p10/p50/p90/p99 | p50 by item | \
             claims-only batches | writes batched | N | pgbench batch statement × N, calls/s | workers ÷ it (≥ 0.8) | \
             plain INSERT; COMMIT, tps | pgbench per call, tps | CPU µs per call, server + clients: workers; batch statement |"
        );
        println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
        for (i, r) in rows.iter().enumerate() {
            let ratio = r.workers.calls / r.batch;
            let mark = if ratio >= 0.8 { "✓" } else { "✗" };
            println!(
                "| {i} | {} | {:.0} | {} | {} | {:.0}% | {:.0}% | {} | {:.0} ({:.0} rows/s) | {ratio:.2} {mark} | {:.0} | {} | {}; {} |",
                r.load,
                r.workers.calls,
                r.workers.cell(),
                r.workers.quantile(0.5, true),
                100.0 * r.workers.unflushed(),
                100.0 * r.workers.batched(),
                r.n,
                r.batch,
                r.batch_rows,
                r.insert,
                r.per_call.map_or("—".to_owned(), |p| format!("{p:.0}")),
                r.cpu
                    .0
                    .per_call((r.workers.all + procs * env_or("WORKERS_TASKS", 64u64)) as f64),
                r.cpu.1.per_call(r.batch_rows * secs as f64),
            );
        }
        let mut ratios: Vec<f64> = rows.iter().map(|r| r.workers.calls / r.batch).collect();
        ratios.sort_by(|a, b| a.partial_cmp(b).unwrap());
        println!("\nmedian workers ÷ batch statement {:.2}", ratios[ratios.len() / 2]);
        if std::env::var("WORKERS_KEEP").is_err() {
            rt.block_on(raw.batch_execute(&format!("DROP SCHEMA {SCHEMA} CASCADE; DROP TABLE {RAW}")))
                .unwrap();
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
