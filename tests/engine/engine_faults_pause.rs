//! A paused process must not act after its lease lapsed (issue 12, fault 1).
//!
//! Two worker processes share one SQLite journal with an 800 ms lease. Worker A claims a key
//! and starts an irreversible `post_comment` tool (with `recover` by marker), which waits at an
//! await for the test's go-ahead (SIGUSR1) before posting; the test stops A with SIGSTOP right
//! there. Worker B calls the same key: it waits out A's lease, takes the claim over, finds no
//! marker, posts and records. The test sends A its go-ahead while A is still stopped, then
//! resumes it with SIGCONT: A's tool is woken at once. The comments land in a ledger file the
//! engine cannot see; every key must have exactly one, and A's call must say that it lost its
//! claim (carrying B's recorded result), not return Ok with an output nobody recorded.
//!
//! Two things the stop must avoid, or the test tests something else:
//! - **Stopping A in the middle of a poll.** The engine checks the lease before it polls the
//!   tool; a process stopped after that check resumes inside the same poll. A go-ahead the tool
//!   could read there (an earlier version looked for a file every 5 ms) is then acted on with
//!   no await in between: the window [`EffectCtx::ensure_lease`] exists for, tested below. A
//!   signal reaches the tool only through the runtime's signal driver, which wakes it for a
//!   new poll, and that poll checks the lease first.
//! - **Stopping A inside a journal transaction** (its lease renewal runs beside the tool). A
//!   process stopped there keeps SQLite's write lock until it resumes, so B cannot write at
//!   all: its call fails with "stayed locked", nothing run (the store's documented behaviour).
//!   So the test waits until every thread of A has stopped, probes the write lock, and while
//!   A holds it resumes A for a moment and stops it again.
//!
//! Before the engine kept its own lease clock, A resumed, posted a second comment, and its
//! fenced completion still returned Ok.
//!
//! Run: `cargo test -p effect-tool --test engine engine_faults_pause::`

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

use common::worker::{Worker, wait_for};
use effect_tool::store::sqlite::SqliteStore;
use effect_tool::testing::conformance::{ScratchDir, ledger_append, ledger_lines};
use effect_tool::{
    CallOptions, EffectClass, EffectCtx, EffectError, Engine, EngineConfig, RecordState, RunContext, Store, Tool,
    ToolError,
};

const WORKER_JOB: &str = "EFFECT_TOOL_ENGINE_FAULTS_PAUSE";
const ROUNDS: usize = 5;
const RUN: &str = "pause-test";

fn config() -> EngineConfig {
    EngineConfig {
        // Long enough that a renewal on a loaded machine (a durable write) keeps it; short
        // enough that the other worker takes over within a test.
        lease: Duration::from_millis(800),
        poll_interval: Duration::from_millis(10),
    }
}

/// Posts a comment (a line in `dir/ledger`, with the call's marker); writes `started <role>
/// <topic>` to `dir/events` first. Worker A's waits for SIGUSR1 in between.
#[derive(Clone)]
struct PostComment {
    dir: PathBuf,
    role: String,
}

impl PostComment {
    /// Whether this worker's tool waits for the test's go-ahead.
    fn waits(&self) -> bool {
        self.role == "a"
    }
}

impl Tool for PostComment {
    type Args = String;
    type Output = String;
    type Error = ToolError;
    const NAME: &'static str = "post_comment";
    const CLASS: EffectClass = EffectClass::Irreversible;
    const HAS_RECOVER: bool = true;

    async fn call(&self, ctx: &EffectCtx, topic: String) -> Result<String, ToolError> {
        use tokio::signal::unix::SignalKind;
        // Listening before `started` is written: the go-ahead is sent only after it.
        let mut go_ahead = self
            .waits()
            .then(|| tokio::signal::unix::signal(SignalKind::user_defined1()).expect("listening for SIGUSR1"));
        ledger_append(&self.dir.join("events"), &format!("started {} {topic}", self.role));
        if let Some(go_ahead) = &mut go_ahead {
            go_ahead.recv().await;
        }
        let comment = format!("comment on {topic} by {} {}", self.role, ctx.marker());
        ledger_append(&self.dir.join("ledger"), &comment);
        Ok(format!("comment by {} (attempt {})", self.role, ctx.attempt()))
    }

    async fn recover(&self, ctx: &EffectCtx, _topic: &String) -> Result<Option<String>, ToolError> {
        let marker = ctx.marker();
        let found = ledger_lines(&self.dir.join("ledger"))
            .iter()
            .any(|l| l.contains(&marker));
        Ok(found.then(|| "comment found by its marker".to_owned()))
    }
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Job {
    journal: PathBuf,
    dir: PathBuf,
    role: String,
}

/// The entry point of the worker processes: for each round, wait for `go-<role>-<i>` (holding
/// the topic), call the tool, and write what the call returned to `result-<role>-<i>`.
#[test]
#[ignore = "entry point of the worker processes of `a_paused_worker_does_not_post_after_its_lease_lapsed`"]
fn worker() {
    let Some(job) = common::worker::job::<Job>(WORKER_JOB) else {
        return;
    };
    common::worker::block_on(async move {
        let store = SqliteStore::open(&job.journal).expect("the journal");
        let engine = Engine::with_config(store, config());
        let tool = PostComment {
            dir: job.dir.clone(),
            role: job.role.clone(),
        };
        let run = RunContext::new(RUN);
        for round in 0..ROUNDS {
            let go = job.dir.join(format!("go-{}-{round}", job.role));
            while !go.exists() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            let topic = std::fs::read_to_string(&go).expect("the round's topic");
            let result = engine.call(&tool, &run, CallOptions::default(), topic).await;
            let said = match result {
                Ok(out) => format!("ok {out}"),
                Err(EffectError::ClaimLost {
                    recorded: Some(recorded),
                    current: Some(current),
                    ..
                }) => format!("claim-lost owner={current} recorded={recorded}"),
                Err(e) => format!("error {e}"),
            };
            publish(&job.dir.join(format!("result-{}-{round}", job.role)), &said);
        }
    });
}

/// Writes `contents` to `path` whole or not at all (a temporary file renamed over it): the
/// other side polls for `path` and reads it as soon as it exists.
fn publish(path: &Path, contents: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, contents).expect("writing a file to publish");
    std::fs::rename(&tmp, path).expect("publishing it");
}

fn spawn_worker(journal: &Path, dir: &Path, role: &str) -> Worker {
    let job = Job {
        journal: journal.to_owned(),
        dir: dir.to_owned(),
        role: role.to_owned(),
    };
    common::worker::spawn(
        module_path!(),
        WORKER_JOB,
        &serde_json::to_string(&job).expect("the job as JSON"),
    )
}

fn signal(child: &Child, sig: &str) {
    let status = Command::new("kill")
        .args([sig, &child.id().to_string()])
        .status()
        .expect("running kill");
    assert!(status.success(), "kill {sig} {} failed", child.id());
}

/// Whether every thread of `pid` has stopped (state `T`): `kill` returns before they all have.
fn all_threads_stopped(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().all(|task| {
        std::fs::read_to_string(task.path().join("stat"))
            // The state follows the command name, which is in parentheses.
            .is_ok_and(|stat| stat.rsplit_once(") ").is_some_and(|(_, rest)| rest.starts_with('T')))
    })
}

/// Stops `child` with SIGSTOP at a moment when it holds no write lock on `journal`: once all
/// its threads have stopped, a `BEGIN IMMEDIATE` from here must not find the journal busy; if
/// it does, `child` is resumed for a moment and stopped again.
fn stop_between_transactions(child: &Child, journal: &Path) {
    let probe = rusqlite::Connection::open(journal).expect("opening the journal to probe its lock");
    probe.busy_timeout(Duration::ZERO).expect("a probe that does not wait");
    for _ in 0..1000 {
        signal(child, "-STOP");
        let until = std::time::Instant::now() + Duration::from_secs(10);
        while !all_threads_stopped(child.id()) {
            assert!(std::time::Instant::now() < until, "worker {} did not stop", child.id());
            std::thread::sleep(Duration::from_millis(1));
        }
        match probe.execute_batch("BEGIN IMMEDIATE; ROLLBACK") {
            Ok(()) => return,
            Err(rusqlite::Error::SqliteFailure(e, _)) if e.code == rusqlite::ErrorCode::DatabaseBusy => {
                signal(child, "-CONT");
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(e) => panic!("probing the journal's write lock: {e}"),
        }
    }
    panic!(
        "worker {} held the journal's write lock at each of 1000 stops",
        child.id()
    );
}

fn read_result(dir: &Path, role: &str, round: usize) -> Option<String> {
    std::fs::read_to_string(dir.join(format!("result-{role}-{round}"))).ok()
}

/// A tool with no lease check of its own: the engine stops it at its next await point.
#[test]
fn a_paused_worker_does_not_post_after_its_lease_lapsed() {
    let scratch = ScratchDir::new("engine-faults-pause");
    let dir = scratch.path().to_owned();
    let journal = dir.join("journal.db");
    drop(SqliteStore::open(&journal).expect("creating the journal"));
    let mut a = spawn_worker(&journal, &dir, "a");
    let mut b = spawn_worker(&journal, &dir, "b");
    let mut topics = Vec::new();
    for round in 0..ROUNDS {
        let topic = format!("topic-{round}-{}", std::process::id());
        topics.push(topic.clone());
        // A claims the key and starts; stop it before it posts.
        publish(&dir.join(format!("go-a-{round}")), &topic);
        let started = format!("started a {topic}");
        wait_for("A to start", &mut [&mut a, &mut b], || {
            ledger_lines(&dir.join("events")).contains(&started)
        });
        stop_between_transactions(&a, &journal);
        // B takes the key over once A's lease has lapsed, and posts.
        publish(&dir.join(format!("go-b-{round}")), &topic);
        wait_for("B's call", &mut [&mut b], || read_result(&dir, "b", round).is_some());
        // A's go-ahead, delivered when it resumes.
        signal(&a, "-USR1");
        signal(&a, "-CONT");
        wait_for("A's call", &mut [&mut a], || read_result(&dir, "a", round).is_some());
    }
    let (sa, sb) = (a.wait().unwrap(), b.wait().unwrap());
    assert!(sa.success() && sb.success(), "workers: {sa}, {sb}");

    let ledger = ledger_lines(&dir.join("ledger"));
    let rt = tokio::runtime::Runtime::new().unwrap();
    let store = SqliteStore::open(&journal).unwrap();
    let mut problems = Vec::new();
    for (round, topic) in topics.iter().enumerate() {
        let comments = ledger
            .iter()
            .filter(|l| l.starts_with(&format!("comment on {topic} ")))
            .count();
        if comments != 1 {
            problems.push(format!("{topic}: {comments} comments"));
        }
        let ra = read_result(&dir, "a", round).unwrap();
        let rb = read_result(&dir, "b", round).unwrap();
        if !rb.starts_with("ok comment by b") {
            problems.push(format!("{topic}: B's call returned {rb}"));
        }
        if !ra.starts_with("claim-lost owner=2 recorded=\"comment by b") {
            problems.push(format!("{topic}: the paused worker's call returned {ra}"));
        }
        let key = effect_tool::call::key::identify(
            &PostComment {
                dir: dir.clone(),
                role: String::new(),
            },
            &RunContext::new(RUN),
            topic,
        )
        .unwrap()
        .key;
        let rec = rt.block_on(store.get(&key)).unwrap().unwrap();
        if rec.state != RecordState::Completed {
            problems.push(format!("{topic}: the record is {}", rec.state));
        }
        // The paused attempt's lost claim is in the audit trail, with the attempt that owns
        // the key now.
        let trail = rt.block_on(store.audit(Some(&key))).unwrap();
        let lost: Vec<_> = trail
            .iter()
            .filter(|e| e.actor == effect_tool::decide::record::ENGINE_ACTOR && e.action == "claim-lost")
            .filter_map(|e| e.detail.clone())
            .collect();
        if lost != [serde_json::json!({ "attempt": 1, "current": 2, "finished": false })] {
            problems.push(format!("{topic}: the lost claims audited: {lost:?}"));
        }
    }
    assert!(problems.is_empty(), "{problems:#?}\nledger: {ledger:#?}");
}

/// A tool paused between its last await and its effect (here a blocking sleep: the engine
/// cannot stop code it does not poll) is protected by its own check right before the effect.
#[tokio::test]
async fn a_tool_that_checks_its_lease_right_before_the_effect_does_not_apply_it_late() {
    #[derive(Clone)]
    struct Charge {
        ledger: PathBuf,
        pause: bool,
    }
    impl Tool for Charge {
        type Args = String;
        type Output = String;
        type Error = ToolError;
        const NAME: &'static str = "charge";
        const CLASS: EffectClass = EffectClass::Irreversible;
        async fn call(&self, ctx: &EffectCtx, who: String) -> Result<String, ToolError> {
            tokio::task::yield_now().await;
            assert!(ctx.lease_remaining().is_some_and(|r| r > Duration::ZERO));
            if self.pause {
                // Paused after the last await: three leases pass with nothing polled.
                std::thread::sleep(Duration::from_millis(300));
            }
            ctx.ensure_lease().map_err(|e| ToolError::definitive(e.to_string()))?;
            ledger_append(&self.ledger, &format!("{who} token={}", ctx.fencing_token()));
            Ok(format!("charged {who}"))
        }
    }
    let scratch = ScratchDir::new("engine-faults-ensure-lease");
    let ledger = scratch.path().join("ledger");
    let engine = Engine::with_config(
        effect_tool::MemoryStore::new(),
        EngineConfig {
            lease: Duration::from_millis(100),
            ..config()
        },
    );
    let run = RunContext::new("ensure-lease");
    let paused = Charge {
        ledger: ledger.clone(),
        pause: true,
    };
    let err = engine
        .call(&paused, &run, CallOptions::default(), "ann".into())
        .await
        .unwrap_err();
    assert!(matches!(err, EffectError::ClaimLost { attempt: 1, .. }), "{err}");
    assert!(err.to_string().contains("lost its claim"), "{err}");
    assert!(ledger_lines(&ledger).is_empty(), "the late effect was applied");
    // Nothing happened and the claim was released: the next call runs, with a newer token.
    let fine = Charge {
        ledger: ledger.clone(),
        pause: false,
    };
    let out = engine
        .call(&fine, &run, CallOptions::default(), "ann".into())
        .await
        .unwrap();
    assert_eq!(out, "charged ann");
    assert_eq!(ledger_lines(&ledger), vec!["ann token=2"]);
}
