//! Worker processes of the real-process tests (pauses, kills, SIGTERM): the test binary runs
//! itself again with one ignored test, `<module>::worker`, as the entry point, and hands it its
//! job through an environment variable. A worker is killed when its handle is dropped, so a
//! failing test leaves none behind (a stopped one included: SIGKILL ends it too).

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Start this test binary again as a worker: the ignored test `worker` of the module at
/// `module_path` (the caller's `module_path!()`) runs, with `job` in the environment variable
/// `var`.
pub fn spawn(module_path: &str, var: &str, job: &str) -> Worker {
    // `module_path!()` starts with the crate (the test binary's) name; test names do not.
    let module = module_path.split_once("::").map_or("", |(_, rest)| rest);
    let test = if module.is_empty() {
        "worker".to_owned()
    } else {
        format!("{module}::worker")
    };
    Command::new(std::env::current_exe().expect("the test binary"))
        .args(["--ignored", "--exact", &test, "--nocapture", "--test-threads=1"])
        .env(var, job)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .map(Worker)
        .expect("spawning a worker")
}

/// In a worker's entry point: the job [`spawn`] handed it in `var`, or `None` when the entry
/// point runs as a test of its own (`--ignored` without a job), which then does nothing.
pub fn job<J: serde::de::DeserializeOwned>(var: &str) -> Option<J> {
    let job = std::env::var(var).ok()?;
    Some(serde_json::from_str(&job).expect("the worker's job"))
}

/// Run a worker's `work` to its end on a runtime of two threads, as an application's would.
pub fn block_on<F: std::future::Future>(work: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime")
        .block_on(work)
}

/// A worker process, killed and reaped when dropped unless it has already exited.
pub struct Worker(Child);

impl std::ops::Deref for Worker {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Worker {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Wait (up to two minutes: machines are noisy) until `done` holds, failing if one of
/// `workers` exited before it did.
pub fn wait_for(what: &str, workers: &mut [&mut Child], mut done: impl FnMut() -> bool) {
    let until = Instant::now() + Duration::from_secs(120);
    while !done() {
        for w in workers.iter_mut() {
            if let Ok(Some(status)) = w.try_wait() {
                assert!(done(), "a worker exited ({status}) while waiting for {what}");
                return;
            }
        }
        assert!(Instant::now() < until, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}
