//! A restarted worker takes over its own dead predecessor's claims at once (issue 12, fault 3).
//!
//! A worker process with the stable identity `w1` and a 30 s lease claims a key and is killed
//! with SIGKILL in the middle of its tool, after the effect (a line in a ledger file the engine
//! cannot see) and before its result is recorded. A restarted worker `w1` (a new process, so a
//! new engine instance) calls the same key. Before claims recorded their holder, it waited out
//! the dead process's 30 s lease, which looks like a hang; now it takes the claim over at once:
//! - `post_comment` (irreversible, `recover` by marker) finds its comment and records it: one
//!   comment in the ledger;
//! - `charge` (idempotent) runs again with the same idempotency key: at most two charges, all
//!   with one key.
//!
//! The time from the kill to the restarted worker's result is printed (run with
//! `--nocapture`); it must be well under the lease (a functional bound: the lease is 30 s).
//!
//! Run: `cargo test -p effect-tool --test engine engine_faults_restart:: -- --nocapture`

use crate::common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::worker::{Worker, wait_for};
use effect_tool::store::sqlite::SqliteStore;
use effect_tool::testing::conformance::{ScratchDir, ledger_append, ledger_lines};
use effect_tool::{
    CallOptions, EffectClass, EffectCtx, Engine, EngineConfig, RecordState, RunContext, Store, Tool, ToolError,
};

const WORKER_JOB: &str = "EFFECT_TOOL_ENGINE_FAULTS_RESTART";
const LEASE: Duration = Duration::from_secs(30);
const RUN: &str = "restart-test";

/// The effect (a ledger line), then, in the first incarnation, a hang until it is killed.
async fn effect(dir: &Path, first: bool, line: String) {
    ledger_append(&dir.join("ledger"), &line);
    if first {
        ledger_append(&dir.join("events"), "applied");
        std::future::pending::<()>().await;
    }
}

/// Posts a comment (irreversible, found again by its marker).
struct PostComment {
    dir: PathBuf,
    first: bool,
}

impl Tool for PostComment {
    type Args = String;
    type Output = String;
    type Error = ToolError;
    const NAME: &'static str = "post_comment";
    const CLASS: EffectClass = EffectClass::Irreversible;
    const HAS_RECOVER: bool = true;

    async fn call(&self, ctx: &EffectCtx, topic: String) -> Result<String, ToolError> {
        effect(&self.dir, self.first, format!("comment on {topic} {}", ctx.marker())).await;
        Ok(format!("posted (attempt {})", ctx.attempt()))
    }

    async fn recover(&self, ctx: &EffectCtx, _topic: &String) -> Result<Option<String>, ToolError> {
        let marker = ctx.marker();
        let found = ledger_lines(&self.dir.join("ledger"))
            .iter()
            .any(|l| l.contains(&marker));
        Ok(found.then(|| "comment found by its marker".to_owned()))
    }
}

/// Charges a card (idempotent: the provider deduplicates by the idempotency key).
struct Charge {
    dir: PathBuf,
    first: bool,
}

impl Tool for Charge {
    type Args = String;
    type Output = String;
    type Error = ToolError;
    const NAME: &'static str = "charge";
    const CLASS: EffectClass = EffectClass::Idempotent;

    async fn call(&self, ctx: &EffectCtx, order: String) -> Result<String, ToolError> {
        effect(
            &self.dir,
            self.first,
            format!("charge {order} key={}", ctx.idempotency_key()),
        )
        .await;
        Ok(format!("charged (attempt {})", ctx.attempt()))
    }
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Job {
    journal: PathBuf,
    dir: PathBuf,
    tool: String,
    arg: String,
    first: bool,
}

/// The entry point of the worker processes: one call as worker `w1`, its result written to
/// `dir/result`.
#[test]
#[ignore = "entry point of the worker processes of the restart tests"]
fn worker() {
    let Some(job) = common::worker::job::<Job>(WORKER_JOB) else {
        return;
    };
    common::worker::block_on(async move {
        let store = SqliteStore::open(&job.journal).expect("the journal");
        let config = EngineConfig {
            lease: LEASE,
            poll_interval: Duration::from_millis(10),
        };
        let engine = Engine::with_config(store, config).with_worker("w1");
        let run = RunContext::new(RUN);
        let (dir, first) = (job.dir.clone(), job.first);
        let result = match job.tool.as_str() {
            "post_comment" => {
                engine
                    .call(&PostComment { dir, first }, &run, CallOptions::default(), job.arg)
                    .await
            }
            _ => {
                engine
                    .call(&Charge { dir, first }, &run, CallOptions::default(), job.arg)
                    .await
            }
        };
        let said = match result {
            Ok(out) => format!("ok {out}"),
            Err(e) => format!("error {e}"),
        };
        let path = job.dir.join("result");
        std::fs::write(path.with_extension("tmp"), said).expect("writing the result");
        std::fs::rename(path.with_extension("tmp"), path).expect("publishing the result");
    });
}

fn spawn_worker(journal: &Path, dir: &Path, tool: &str, arg: &str, first: bool) -> Worker {
    let job = Job {
        journal: journal.to_owned(),
        dir: dir.to_owned(),
        tool: tool.to_owned(),
        arg: arg.to_owned(),
        first,
    };
    common::worker::spawn(
        module_path!(),
        WORKER_JOB,
        &serde_json::to_string(&job).expect("the job as JSON"),
    )
}

/// Run `tool(arg)` as worker `w1`, SIGKILL it after the effect, restart `w1` on the same key;
/// returns the ledger, the restarted worker's result and the time from the kill to it.
fn kill_and_restart(name: &str, tool: &str) -> (Vec<String>, String, Duration, PathBuf, ScratchDir) {
    let scratch = ScratchDir::new(name);
    let dir = scratch.path().to_owned();
    let journal = dir.join("journal.db");
    drop(SqliteStore::open(&journal).expect("creating the journal"));
    let arg = format!("{name}-{}", std::process::id());

    let mut first = spawn_worker(&journal, &dir, tool, &arg, true);
    wait_for("the first worker's effect", &mut [&mut first], || {
        ledger_lines(&dir.join("events")).iter().any(|l| l == "applied")
    });
    first.kill().expect("SIGKILL of the first worker");
    let killed = Instant::now();
    let status = first.wait().expect("reaping the first worker");
    assert!(!status.success(), "the first worker was killed: {status}");
    assert!(!dir.join("result").exists(), "the first worker's call never returned");

    let mut second = spawn_worker(&journal, &dir, tool, &arg, false);
    wait_for("the restarted worker's result", &mut [&mut second], || {
        dir.join("result").exists()
    });
    let recovered = killed.elapsed();
    let status = second.wait().expect("reaping the restarted worker");
    assert!(status.success(), "the restarted worker: {status}");
    let result = std::fs::read_to_string(dir.join("result")).expect("the result");
    println!("{tool}: time to recover after SIGKILL (kill to recorded result, incl. process start): {recovered:?}");
    (ledger_lines(&dir.join("ledger")), result, recovered, journal, scratch)
}

fn record(journal: &Path) -> effect_tool::EffectRecord {
    let rt = tokio::runtime::Runtime::new().expect("a runtime");
    rt.block_on(async {
        let store = SqliteStore::open(journal).expect("the journal");
        let mut all = store.list(&Default::default()).await.expect("listing the journal");
        assert_eq!(all.len(), 1, "one key: {all:?}");
        all.remove(0)
    })
}

#[test]
fn a_restarted_worker_recovers_an_irreversible_call_without_waiting_for_the_lease() {
    let (ledger, result, recovered, journal, _scratch) = kill_and_restart("restart-irreversible", "post_comment");
    assert_eq!(ledger.len(), 1, "exactly one comment: {ledger:?}");
    assert_eq!(result, "ok comment found by its marker", "recover reconciled it");
    assert!(
        recovered < Duration::from_secs(15),
        "the restarted worker waited {recovered:?}: it should take its own previous claim over at once, not wait out the {LEASE:?} lease"
    );
    let rec = record(&journal);
    assert_eq!((rec.state, rec.attempt), (RecordState::Completed, 2), "{rec:?}");
    let holder = rec.holder.expect("the record says who holds it");
    assert_eq!(holder.worker.as_deref(), Some("w1"));
}

#[test]
fn a_restarted_worker_reruns_an_idempotent_call_with_the_same_key_without_waiting_for_the_lease() {
    let (ledger, result, recovered, journal, _scratch) = kill_and_restart("restart-idempotent", "charge");
    assert!((1..=2).contains(&ledger.len()), "one or two charges: {ledger:?}");
    assert!(
        ledger.iter().all(|l| l == &ledger[0]),
        "every charge has the same idempotency key: {ledger:?}"
    );
    assert_eq!(result, "ok charged (attempt 2)");
    assert!(
        recovered < Duration::from_secs(15),
        "the restarted worker waited {recovered:?}: it should take its own previous claim over at once, not wait out the {LEASE:?} lease"
    );
    let rec = record(&journal);
    assert_eq!((rec.state, rec.attempt), (RecordState::Completed, 2), "{rec:?}");
}
