//! Shared helpers of the CLI integration tests: run the real binary, make records through the
//! core store API in this process, against the same journal.

#![allow(dead_code)]

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use effect_tool_core::decide::record::{Intent, OpOutcome};
use effect_tool_core::{EffectClass, EffectRecord, Store, StoreExt};
use serde_json::{Value, json};

/// What one run of the binary printed.
#[derive(Debug)]
pub struct Output {
    /// The exit code.
    pub code: i32,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl Output {
    /// Assert success and return stdout.
    #[track_caller]
    pub fn ok(&self) -> &str {
        assert_eq!(self.code, 0, "expected success, got {self:#?}");
        assert!(self.stderr.is_empty(), "unexpected stderr: {self:#?}");
        &self.stdout
    }

    /// Assert a failure with `code` and a one-line `error:` message; return the message.
    #[track_caller]
    pub fn fails(&self, code: i32) -> &str {
        assert_eq!(self.code, code, "expected exit {code}, got {self:#?}");
        assert!(!self.stderr.contains("panicked"), "the command panicked: {self:#?}");
        assert!(
            self.stderr.starts_with("error: "),
            "error must start with `error:`: {self:#?}"
        );
        assert_eq!(
            self.stderr.trim_end().lines().count(),
            1,
            "error must be one line: {self:#?}"
        );
        self.stderr.trim_end()
    }

    /// Stdout parsed as JSON.
    #[track_caller]
    pub fn json(&self) -> Value {
        serde_json::from_str(self.ok()).unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {self:#?}"))
    }
}

/// Run `effect-tool ARGS` with `stdin`, `USER=operator` and no `EFFECT_TOOL_STORE` unless given.
pub fn run(args: &[&str], stdin: Option<&[u8]>, env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_effect-tool"));
    cmd.args(args)
        .env_remove("EFFECT_TOOL_STORE")
        .env("USER", "operator")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("the effect-tool binary runs");
    let mut pipe = child.stdin.take().unwrap();
    let input = stdin.map(<[u8]>::to_vec).unwrap_or_default();
    // Fed from a thread so a large input cannot deadlock against the output; a command that
    // exits without reading (a usage error) closes the pipe, which is fine.
    let feeder = std::thread::spawn(move || match pipe.write_all(&input) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => panic!("writing stdin: {e}"),
        _ => {}
    });
    let out = child.wait_with_output().unwrap();
    feeder.join().unwrap();
    Output {
        code: out.status.code().expect("exited, not killed by a signal"),
        stdout: String::from_utf8(out.stdout).expect("stdout is UTF-8"),
        stderr: String::from_utf8(out.stderr).expect("stderr is UTF-8"),
    }
}

/// A journal the test writes through the core API and the binary reads through `--store`.
pub struct Journal {
    /// What `--store` gets.
    pub spec: String,
    /// The same journal, opened in this process.
    pub store: Arc<dyn Store>,
    /// A prefix unique to this test, for run ids and keys (PostgreSQL journals are shared).
    pub ns: String,
    _dir: Option<TempDir>,
}

impl Journal {
    /// A fresh SQLite journal in a temporary directory.
    pub fn sqlite(test: &str) -> Journal {
        let dir = TempDir::new(test);
        let path = dir.path.join("journal.db");
        let store = effect_tool_core::store::sqlite::SqliteStore::open(&path).expect("open SQLite journal");
        Journal {
            spec: path.to_str().unwrap().to_owned(),
            store: Arc::new(store),
            ns: unique(test),
            _dir: Some(dir),
        }
    }

    /// Run `effect-tool --store <this journal> ARGS`.
    pub fn cli(&self, args: &[&str]) -> Output {
        self.cli_with(args, None)
    }

    /// Run with stdin.
    pub fn cli_with(&self, args: &[&str], stdin: Option<&[u8]>) -> Output {
        let mut full = vec!["--store", self.spec.as_str()];
        full.extend_from_slice(args);
        run(&full, stdin, &[])
    }

    /// A run id unique to this test.
    pub fn run_id(&self, name: &str) -> String {
        format!("{}-{name}", self.ns)
    }

    /// A key unique to this test.
    pub fn key(&self, name: &str) -> String {
        format!("{}:{name}", self.ns)
    }

    /// Claim `key` for `tool` in `run` and return the attempt.
    pub async fn claim(&self, key: &str, run: &str, tool: &str, class: EffectClass, input: Value) -> u32 {
        match self
            .store
            .claim(key, intent(run, tool, class, input, None), 60_000, false)
            .await
            .unwrap()
        {
            OpOutcome::Claimed { attempt, .. } => attempt,
            other => panic!("expected a claim, got {other:?}"),
        }
    }

    /// A record in doubt (its outcome unknown).
    pub async fn in_doubt(&self, key: &str, run: &str, tool: &str, input: Value) -> EffectRecord {
        let attempt = self.claim(key, run, tool, EffectClass::Irreversible, input).await;
        self.store
            .mark_in_doubt(key, attempt, "timed out after sending the request".into())
            .await
            .unwrap()
    }

    /// A completed record.
    pub async fn completed(&self, key: &str, run: &str, tool: &str, class: EffectClass, output: Value) -> EffectRecord {
        let attempt = self.claim(key, run, tool, class, json!({ "n": key })).await;
        self.store.complete(key, attempt, output).await.unwrap()
    }

    /// A call parked for approval by `role`.
    pub async fn awaiting(&self, key: &str, run: &str, tool: &str, role: &str) -> EffectRecord {
        match self
            .store
            .claim(
                key,
                intent(run, tool, EffectClass::Irreversible, json!({"env": "prod"}), Some(role)),
                60_000,
                false,
            )
            .await
            .unwrap()
        {
            OpOutcome::AwaitingApproval(rec) => rec,
            other => panic!("expected a parked call, got {other:?}"),
        }
    }

    /// The record under `key`.
    pub async fn get(&self, key: &str) -> Option<EffectRecord> {
        self.store.get(key).await.unwrap()
    }
}

/// A claim intent.
pub fn intent(run: &str, tool: &str, class: EffectClass, input: Value, approval: Option<&str>) -> Intent {
    Intent {
        tool: tool.to_owned(),
        class,
        run_id: run.to_owned(),
        thread_id: None,
        call_id: Some("call-1".to_owned()),
        fingerprint: effect_tool_core::call::key::fingerprint(&input),
        input,
        ttl_ms: None,
        approval: approval.map(str::to_owned),
        approval_ttl_ms: None,
        holder: Some(Box::new(effect_tool_core::decide::record::Holder {
            worker: Some("w1".to_owned()),
            instance: "0123abcd".to_owned(),
            host: "host-1".to_owned(),
            pid: 42,
        })),
    }
}

/// A name unique to this process and test.
pub fn unique(test: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!(
        "{test}-{}-{nanos:x}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// A directory removed when dropped.
pub struct TempDir {
    /// Its path.
    pub path: PathBuf,
}

impl TempDir {
    /// A new empty directory.
    pub fn new(test: &str) -> TempDir {
        let path = std::env::temp_dir().join(format!("effect-tool-cli-{}", unique(test)));
        std::fs::create_dir_all(&path).unwrap();
        TempDir { path }
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// The RFC 8785 test data directory.
pub fn jcs_dir() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/jcs"))
}

/// The PostgreSQL journal named by `EFFECT_TOOL_PG_URL`, or `None` (with a loud SKIPPED line)
/// when it is unset. With `EFFECT_TOOL_REQUIRE_PG=1` an unset URL fails the test instead.
pub async fn pg_journal(test: &str) -> Option<Journal> {
    let Some(url) = std::env::var("EFFECT_TOOL_PG_URL").ok().filter(|u| !u.is_empty()) else {
        if std::env::var("EFFECT_TOOL_REQUIRE_PG").is_ok_and(|v| v == "1") {
            panic!(
                "EFFECT_TOOL_REQUIRE_PG=1 but EFFECT_TOOL_PG_URL is unset: start one with `eval \"$(.ci/postgres.sh start)\"`"
            );
        }
        // Written to the process's stderr directly, past the test harness's capture, so the skip
        // shows in every `cargo test` run.
        let _ = writeln!(
            std::io::stderr(),
            "\n*** SKIPPED {test} on PostgreSQL: EFFECT_TOOL_PG_URL is unset (start a server with `eval \"$(.ci/postgres.sh start)\"`; EFFECT_TOOL_REQUIRE_PG=1 makes this a failure) ***"
        );
        return None;
    };
    // A schema of its own, so `gc` and listings never touch other tests' records.
    let ns = unique(test);
    let schema = format!(
        "cli_{}",
        ns.to_ascii_lowercase()
            .replace(|c: char| !c.is_ascii_alphanumeric(), "_")
    );
    let schema: String = schema.chars().take(63).collect();
    let options = effect_tool_core::store::postgres::PgOptions {
        schema: schema.clone(),
        ..Default::default()
    };
    let store = effect_tool_core::store::postgres::PostgresStore::connect_with(&url, options)
        .await
        .unwrap_or_else(|e| panic!("EFFECT_TOOL_PG_URL is set but the server cannot be used: {e}"));
    let sep = if url.contains('?') { '&' } else { '?' };
    Some(Journal {
        spec: format!("{url}{sep}schema={schema}"),
        store: Arc::new(store),
        ns,
        _dir: None,
    })
}

/// A running `effect-tool serve`, stopped when dropped (also when the test fails).
pub struct Server {
    /// The process.
    pub child: std::process::Child,
    /// Where it listens (`127.0.0.1:PORT`), from the first line it prints.
    pub addr: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `effect-tool --store J serve --listen 127.0.0.1:0 ARGS`, once it listens.
pub fn serve_with(j: &Journal, args: &[&str]) -> Server {
    use std::io::BufRead;
    let mut child = Command::new(env!("CARGO_BIN_EXE_effect-tool"))
        .args(["--store", &j.spec, "serve", "--listen", "127.0.0.1:0"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut first = String::new();
    std::io::BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut first)
        .unwrap();
    let addr = first
        .split("http://")
        .nth(1)
        .and_then(|s| s.split('/').next())
        .unwrap_or_else(|| panic!("no address in {first:?}"))
        .to_owned();
    Server { child, addr }
}

/// Tests `sqlite::<name>` and `postgres::<name>` running the scenario `<name>(&Journal)` of the
/// calling module on a SQLite journal and on the test PostgreSQL (which skips, or fails where
/// PostgreSQL is required, without a server). The calling module imports `crate::common`.
macro_rules! on_every_backend {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let j = super::common::Journal::sqlite(stringify!($name));
                    super::$name(&j).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    if let Some(j) = super::common::pg_journal(stringify!($name)).await {
                        super::$name(&j).await;
                    }
                }
            )*
        }
    };
}
pub(crate) use on_every_backend;
