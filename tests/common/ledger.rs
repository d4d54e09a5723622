//! The downstream system the test tools act on.

use std::collections::HashSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The downstream system (a payment API with idempotency keys, say): it counts every request
/// and applies an effect once per idempotency key it sees. The engine cannot see it, so its
/// counts are the tests' evidence of how many effects happened.
#[derive(Default)]
pub struct Downstream {
    requests: AtomicUsize,
    applied: Mutex<HashSet<String>>,
}

impl Downstream {
    /// One request carrying the idempotency key `idem`: counted, and applied unless `idem` was
    /// applied before.
    pub fn apply(&self, idem: &str) {
        self.requests.fetch_add(1, Ordering::SeqCst);
        self.applied.lock().unwrap().insert(idem.to_owned());
    }

    /// How many requests arrived (repeats included).
    pub fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }

    /// How many distinct effects were applied (one per idempotency key).
    pub fn effects(&self) -> usize {
        self.applied.lock().unwrap().len()
    }

    /// Whether the effect keyed `idem` was applied (what a tool's `recover` asks).
    pub fn has(&self, idem: &str) -> bool {
        self.applied.lock().unwrap().contains(idem)
    }
}
