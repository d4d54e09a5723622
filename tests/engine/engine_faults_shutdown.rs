//! A graceful shutdown (issue 12, fault 4): `Engine::shutdown` refuses new calls, lets running
//! tools finish within its deadline, releases the claims of calls whose tool has not started,
//! and cancels (in doubt) only what still runs at the deadline.
//!
//! One case runs in a worker process that gets a real SIGTERM (as a Kubernetes rollout sends
//! it) and shuts down as the README shows.
//!
//! Run: `cargo test -p effect-tool --test engine engine_faults_shutdown::`

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::journal::crashed_claim;
use common::ledger::Downstream;
use common::worker::wait_for;
use effect_tool::store::sqlite::SqliteStore;
use effect_tool::testing::conformance::{ScratchDir, ledger_append, ledger_lines};
use effect_tool::{
    CallOptions, EffectClass, EffectCtx, EffectError, Engine, EngineConfig, MemoryStore, RecordState, RunContext,
    Store, Tool, ToolError,
};
use tokio::sync::{Notify, Semaphore};

/// An irreversible tool with `recover`. Called with `finish`, it waits for a `go` permit, then
/// applies its effect; with `hang`, it never ends. Its `recover` waits for a `recover_go` permit
/// and finds nothing.
#[derive(Clone)]
struct Gated {
    down: Arc<Downstream>,
    started: Arc<Notify>,
    go: Arc<Semaphore>,
    recovering: Arc<Notify>,
    recover_go: Arc<Semaphore>,
    runs: Arc<AtomicUsize>,
}

impl Default for Gated {
    fn default() -> Self {
        Gated {
            down: Arc::default(),
            started: Arc::default(),
            go: Arc::new(Semaphore::new(0)),
            recovering: Arc::default(),
            recover_go: Arc::new(Semaphore::new(0)),
            runs: Arc::default(),
        }
    }
}

impl Tool for Gated {
    type Args = String;
    type Output = String;
    type Error = ToolError;
    const NAME: &'static str = "gated";
    const CLASS: EffectClass = EffectClass::Irreversible;
    const HAS_RECOVER: bool = true;

    async fn call(&self, ctx: &EffectCtx, what: String) -> Result<String, ToolError> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        self.started.notify_one();
        if what == "hang" {
            std::future::pending::<()>().await;
        }
        self.go
            .acquire()
            .await
            .map_err(|e| ToolError::definitive(e.to_string()))?
            .forget();
        self.down.apply(&ctx.idempotency_key());
        Ok(format!("done: {what}"))
    }

    async fn recover(&self, _ctx: &EffectCtx, _what: &String) -> Result<Option<String>, ToolError> {
        self.recovering.notify_one();
        self.recover_go
            .acquire()
            .await
            .map_err(|e| ToolError::definitive(e.to_string()))?
            .forget();
        Ok(None)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn shutdown_drains_finishes_in_time_releases_unstarted_and_cancels_the_rest() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let engine = Engine::with_config(
        store.clone(),
        EngineConfig {
            lease: Duration::from_secs(5),
            poll_interval: Duration::from_millis(5),
        },
    );
    let tool = Gated::default();
    let run = RunContext::new("drain");
    let call = |what: &str| {
        let (engine, tool, run, what) = (engine.clone(), tool.clone(), run.clone(), what.to_owned());
        tokio::spawn(async move { engine.call_with_report(&tool, &run, CallOptions::default(), what).await })
    };
    let key_of = |what: &str| {
        effect_tool::call::key::identify(&tool, &run, &what.to_owned())
            .unwrap()
            .key
    };

    // Running: one that will finish in time, one that never ends.
    let finishing = call("finish");
    tool.started.notified().await;
    let hanging = call("hang");
    tool.started.notified().await;
    // Claimed but not started: a takeover whose `recover` is still looking.
    let unstarted_key = crashed_claim(&engine, &tool, &run, &"unstarted".to_owned()).await;
    let unstarted = call("unstarted");
    tool.recovering.notified().await;

    let shutdown = {
        let engine = engine.clone();
        tokio::spawn(async move { engine.shutdown(Duration::from_secs(3)).await })
    };
    while !engine.is_shutting_down() {
        tokio::task::yield_now().await;
    }
    // A new call is refused, and says why.
    let refused = engine
        .call_with_report(&tool, &run, CallOptions::default(), "new".into())
        .await;
    assert!(
        matches!(refused.result, Err(EffectError::ShuttingDown { .. })),
        "{:?}",
        refused.result
    );
    assert!(refused.result.unwrap_err().to_string().contains("shutting down"));
    assert_eq!(store.get(&key_of("new")).await.unwrap(), None, "nothing was claimed");

    // The unstarted call's recover finds nothing: it does not start the tool, and releases.
    tool.recover_go.add_permits(1);
    let unstarted = unstarted.await.unwrap();
    assert!(
        matches!(unstarted.result, Err(EffectError::ShuttingDown { .. })),
        "{:?}",
        unstarted.result
    );
    let rec = store.get(&unstarted_key).await.unwrap().unwrap();
    assert_eq!(rec.state, RecordState::Released, "{rec:?}");

    // The running one finishes within the deadline and is recorded.
    tool.go.add_permits(1);
    let finished = finishing.await.unwrap();
    assert_eq!(finished.result.as_deref().ok(), Some("done: finish"), "{finished:?}");
    let rec = store.get(&key_of("finish")).await.unwrap().unwrap();
    assert_eq!(rec.state, RecordState::Completed);

    // The one still running at the deadline is cancelled: its outcome is unknown.
    let report = shutdown.await.unwrap();
    assert!(!report.drained);
    assert_eq!(report.left, 0);
    let hung = hanging.await.unwrap();
    assert!(
        matches!(hung.result, Err(EffectError::Interrupted { .. })),
        "{:?}",
        hung.result
    );
    let rec = store.get(&key_of("hang")).await.unwrap().unwrap();
    assert_eq!(rec.state, RecordState::InDoubt);
    assert!(rec.reason.unwrap_or_default().contains("shutdown"));

    assert_eq!(tool.runs.load(Ordering::SeqCst), 2, "only the two running tools ran");
    assert_eq!(tool.down.requests(), 1);
}

/// On tokio's paused clock: the shutdown's hour-long deadline would pass at once (the clock
/// jumps to the next timer when every task waits), so a shutdown that waited for it instead of
/// for the last call shows as an hour on the clock.
#[tokio::test(start_paused = true)]
async fn a_shutdown_returns_as_soon_as_the_last_call_in_flight_ends_not_at_its_deadline() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let engine = Engine::new(store.clone());
    let tool = Gated::default();
    let run = RunContext::new("prompt");
    let running = {
        let (engine, tool, run) = (engine.clone(), tool.clone(), run.clone());
        tokio::spawn(async move {
            engine
                .call(&tool, &run, CallOptions::default(), "finish".to_owned())
                .await
        })
    };
    tool.started.notified().await;
    let begun = tokio::time::Instant::now();
    let shutdown = {
        let engine = engine.clone();
        tokio::spawn(async move { engine.shutdown(Duration::from_secs(3_600)).await })
    };
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(!shutdown.is_finished(), "the shutdown waits for the running call");
    tool.go.add_permits(1);
    assert_eq!(running.await.unwrap().unwrap(), "done: finish");
    let report = shutdown.await.unwrap();
    assert!(report.drained, "{report:?}");
    assert!(
        begun.elapsed() < Duration::from_secs(60),
        "the shutdown returned {:?} after it began: at its deadline, not when the last call ended",
        begun.elapsed()
    );
    assert_eq!(tool.down.requests(), 1);
}

#[tokio::test]
async fn a_shutdown_with_nothing_in_flight_returns_at_once_and_refuses_pure_tools_too() {
    struct Echo;
    impl Tool for Echo {
        type Args = String;
        type Output = String;
        type Error = ToolError;
        const NAME: &'static str = "echo";
        const CLASS: EffectClass = EffectClass::Pure;
        async fn call(&self, _ctx: &EffectCtx, s: String) -> Result<String, ToolError> {
            Ok(s)
        }
    }
    let engine = Engine::new(MemoryStore::new());
    let run = RunContext::new("r");
    assert_eq!(
        engine
            .call(&Echo, &run, CallOptions::default(), "a".into())
            .await
            .unwrap(),
        "a"
    );
    let report = engine.shutdown(Duration::from_secs(3600)).await;
    assert!(report.drained);
    let err = engine
        .call(&Echo, &run, CallOptions::default(), "b".into())
        .await
        .unwrap_err();
    assert!(matches!(err, EffectError::ShuttingDown { key: None, .. }), "{err}");
}

// ---------------------------------------------------------------------------------------------
// A worker process that gets SIGTERM
// ---------------------------------------------------------------------------------------------

const WORKER_JOB: &str = "EFFECT_TOOL_ENGINE_FAULTS_SHUTDOWN";

/// Appends `started` to `dir/events`, waits for `dir/go`, then appends its effect to
/// `dir/ledger`.
#[derive(Clone)]
struct Post {
    dir: PathBuf,
}

impl Tool for Post {
    type Args = String;
    type Output = String;
    type Error = ToolError;
    const NAME: &'static str = "post";
    const CLASS: EffectClass = EffectClass::Irreversible;

    async fn call(&self, ctx: &EffectCtx, topic: String) -> Result<String, ToolError> {
        ledger_append(&self.dir.join("events"), "started");
        while !self.dir.join("go").exists() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        ledger_append(
            &self.dir.join("ledger"),
            &format!("{topic} {}", ctx.effect_key().unwrap_or("-")),
        );
        Ok(format!("posted {topic}"))
    }
}

/// The worker: one call running; on SIGTERM, drain (as the README shows), then try one more
/// call, and write what both returned to `dir/results`.
#[test]
#[ignore = "entry point of the worker process of `sigterm_lets_the_running_call_finish_and_record`"]
fn worker() {
    let Ok(dir) = std::env::var(WORKER_JOB) else {
        return;
    };
    let dir = PathBuf::from(dir);
    let rt = tokio::runtime::Runtime::new().expect("a runtime");
    rt.block_on(async move {
        use tokio::signal::unix::{SignalKind, signal};
        let mut sigterm = signal(SignalKind::terminate()).expect("a SIGTERM handler");
        let engine = Engine::new(SqliteStore::open(dir.join("journal.db")).expect("the journal"));
        let tool = Post { dir: dir.clone() };
        let run = RunContext::new("sigterm");
        let running = {
            let (engine, tool, run) = (engine.clone(), tool.clone(), run.clone());
            tokio::spawn(async move { engine.call(&tool, &run, CallOptions::default(), "a".into()).await })
        };
        sigterm.recv().await;
        let draining = {
            let engine = engine.clone();
            tokio::spawn(async move { engine.shutdown(Duration::from_secs(30)).await })
        };
        while !engine.is_shutting_down() {
            tokio::task::yield_now().await;
        }
        ledger_append(&dir.join("events"), "draining");
        let late = engine.call(&tool, &run, CallOptions::default(), "b".into()).await;
        let report = draining.await.expect("the shutdown");
        let first = running.await.expect("the running call");
        let said = |r: Result<String, EffectError>| match r {
            Ok(out) => format!("ok {out}"),
            Err(EffectError::ShuttingDown { .. }) => "shutting-down".to_owned(),
            Err(e) => format!("error {e}"),
        };
        ledger_append(&dir.join("results"), &said(first));
        ledger_append(&dir.join("results"), &said(late));
        ledger_append(&dir.join("results"), &format!("drained {}", report.drained));
    });
}

fn events(dir: &Path) -> Vec<String> {
    ledger_lines(&dir.join("events"))
}

#[test]
fn sigterm_lets_the_running_call_finish_and_record() {
    let scratch = ScratchDir::new("engine-faults-shutdown");
    let dir = scratch.path().to_owned();
    let mut child = common::worker::spawn(module_path!(), WORKER_JOB, &dir.to_string_lossy());
    wait_for("the tool to start", &mut [&mut child], || {
        events(&dir).contains(&"started".to_owned())
    });
    let status = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    wait_for("the worker to drain", &mut [&mut child], || {
        events(&dir).contains(&"draining".to_owned())
    });
    std::fs::write(dir.join("go"), "").unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "the worker: {status}");

    assert_eq!(
        ledger_lines(&dir.join("results")),
        vec!["ok posted a", "shutting-down", "drained true"]
    );
    let ledger = ledger_lines(&dir.join("ledger"));
    assert_eq!(ledger.len(), 1, "{ledger:?}");
    let key = ledger[0].split_once(' ').unwrap().1.to_owned();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let store = SqliteStore::open(dir.join("journal.db")).unwrap();
    let rec = rt.block_on(store.get(&key)).unwrap().unwrap();
    assert_eq!(rec.state, RecordState::Completed, "{rec:?}");
    assert_eq!(events(&dir), vec!["started", "draining"], "the late call never started");
}
