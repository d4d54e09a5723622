//! Worker processes of the real-process tests (pauses, kills, SIGTERM): the test binary runs
//! itself again with one ignored test, `worker`, as the entry point, and hands it its job
//! through an environment variable.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Start this test binary again as a worker: its ignored test `worker` runs, with `job` in the
/// environment variable `var`.
pub fn spawn(var: &str, job: &str) -> Child {
    Command::new(std::env::current_exe().expect("the test binary"))
        .args(["--ignored", "--exact", "worker", "--nocapture", "--test-threads=1"])
        .env(var, job)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("spawning a worker")
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
