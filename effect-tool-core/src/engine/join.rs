//! The in-process join (stage 3): identical calls of one key in this process share one leading
//! call's result instead of each claiming the key.
//!
//! The first call of a key becomes its [`Leader`]; a call of the key while it leads becomes a
//! follower of its [`Slot`] and gets its result, converted by [`from_leader`]. The leader's
//! tool error cannot be cloned: followers get it as [`EffectError::SharedFailure`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::sync::Notify;

use super::report::{Disposition, Settled};
use crate::call::context::RunContext;
use crate::call::error::{ApprovalPending, EffectError, SideEffectRetryBlocked};
use crate::call::tool::Tool;

/// The leader's result as its followers get it: the output as JSON, tool errors as text.
pub(super) type LeaderResult = (Result<Value, EffectError<String>>, Disposition);

/// The keys led by a call in this process, each with the slot its followers wait on.
pub(super) struct Inflight {
    slots: Mutex<HashMap<String, Arc<Slot>, foldhash::fast::RandomState>>,
    /// How many leading calls ended, counted per bucket of keys ([`Inflight::ended`]).
    ended: [AtomicU32; ENDED_BUCKETS],
}

impl Default for Inflight {
    fn default() -> Self {
        Inflight {
            slots: Mutex::default(),
            ended: std::array::from_fn(|_| AtomicU32::new(0)),
        }
    }
}

/// How many counters [`Inflight::ended`] spreads the keys over.
const ENDED_BUCKETS: usize = 256;

/// What a call of a key becomes when it joins.
pub(super) enum Role<'a> {
    /// No call leads the key here: this one does.
    Leader(Leader<'a>),
    /// A call leads the key: wait for its result.
    Follower(Arc<Slot>),
}

impl Inflight {
    /// A count that changes whenever a leading call of `key` in this process ends (and, now and
    /// then, of another key in its bucket), for the keys of tools whose leaders are counted
    /// ([`Inflight::join`]'s `counted`). Read before stage 2's lookup and again once a call
    /// leads: equal, no identical call ended in between, so the lookup's "no record" still
    /// holds for everything this process did. A call that writes nothing before it runs
    /// ([`super::one_write`]) looks again otherwise.
    pub(super) fn ended(&self, key: &str) -> u32 {
        self.ended[bucket(key)].load(Ordering::Acquire)
    }

    /// Stage 3: lead `key` in this process, or follow the call that leads it. `counted`: the
    /// leader's end is counted in [`Inflight::ended`] (a `one_write` tool's, whose calls read
    /// the count: a key's calls are all of one tool; other calls skip its hash and write).
    pub(super) fn join<'a>(
        &'a self,
        key: &'a str,
        fingerprint: &str,
        call_id: Option<&str>,
        tool: &'static str,
        counted: bool,
    ) -> Role<'a> {
        let mut map = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(slot) = map.get(key) {
            return Role::Follower(slot.clone());
        }
        let slot = Arc::new(Slot {
            state: Mutex::new(SlotState::Running),
            notify: Notify::new(),
            fingerprint: fingerprint.to_owned(),
            call_id: call_id.map(str::to_owned),
            tool,
        });
        map.insert(key.to_owned(), slot.clone());
        Role::Leader(Leader {
            inflight: self,
            key,
            slot,
            finished: false,
            counted,
        })
    }
}

/// Where the leading call of a key publishes its result for the identical calls waiting on it
/// in this process.
pub(super) struct Slot {
    state: Mutex<SlotState>,
    notify: Notify,
    /// The leader's input fingerprint: a custom key can join calls with different inputs.
    pub(super) fingerprint: String,
    /// The leader's tool-call id: an unkeyed irreversible call under another id is not the
    /// same work, as far as anyone can tell.
    pub(super) call_id: Option<String>,
    /// The leader's tool: a call of another tool under the same key never joins it.
    pub(super) tool: &'static str,
}

enum SlotState {
    Running,
    Done(LeaderResult),
    /// The leader ended without a result (cancelled or panicked): a follower takes its place.
    Abandoned,
}

impl Slot {
    fn set(&self, state: SlotState) {
        *self.state.lock().unwrap_or_else(|e| e.into_inner()) = state;
        self.notify.notify_waiters();
    }

    /// Wait for the leader: `Some` with its result, `None` if it ended without one.
    pub(super) async fn wait(&self) -> Option<LeaderResult> {
        loop {
            let notified = self.notify.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            match &*self.state.lock().unwrap_or_else(|e| e.into_inner()) {
                SlotState::Done(shared) => return Some(shared.clone()),
                SlotState::Abandoned => return None,
                SlotState::Running => {}
            }
            notified.await;
        }
    }
}

/// The leading call of a key in this process. Removes the key from [`Inflight`] when the call
/// ends, however it ends (dropped without a result, its followers take its place).
pub(super) struct Leader<'a> {
    inflight: &'a Inflight,
    key: &'a str,
    slot: Arc<Slot>,
    finished: bool,
    /// Whether its end is counted in [`Inflight::ended`].
    counted: bool,
}

impl Leader<'_> {
    /// Leave the in-process map; `true` if identical calls are waiting for the result.
    fn leave(&mut self) -> bool {
        if !self.finished {
            self.finished = true;
            let mut map = self.inflight.slots.lock().unwrap_or_else(|e| e.into_inner());
            // Counted before the key leaves the map (under its lock): a call that leads the key
            // after this one sees the count changed.
            if self.counted {
                self.inflight.ended[bucket(self.key)].fetch_add(1, Ordering::Release);
            }
            map.remove(self.key);
        }
        // After leaving the map nobody new can join; whoever holds the slot waits on it.
        Arc::strong_count(&self.slot) > 1
    }

    /// Give the followers `T`'s `settled` call (converted only if someone waits for it).
    pub(super) fn publish<T: Tool>(mut self, tool: &str, settled: &Settled<T::Output, T::Error>) {
        if !self.leave() {
            return;
        }
        let (result, disposition) = settled;
        let shared = match result {
            Ok(out) => serde_json::to_value(out).map_err(|e| EffectError::Codec {
                tool: tool.to_owned(),
                key: self.key.to_owned(),
                message: format!("output does not serialize: {e}"),
            }),
            Err(e) => Err(e.map_tool_error_ref(ToString::to_string)),
        };
        self.slot.set(SlotState::Done((shared, *disposition)));
    }
}

impl Drop for Leader<'_> {
    fn drop(&mut self) {
        if !self.finished && self.leave() {
            self.slot.set(SlotState::Abandoned);
        }
    }
}

/// The counter of [`Inflight::ended`] that `key` is counted in.
fn bucket(key: &str) -> usize {
    use std::hash::BuildHasher;
    (foldhash::fast::FixedState::with_seed(0).hash_one(key) as usize) % ENDED_BUCKETS
}

/// The leader's error as this follower's: tool errors become [`EffectError::SharedFailure`]
/// (the tool's own error type cannot be cloned), and the run named is the follower's own.
pub(super) fn from_leader<T: Tool>(e: EffectError<String>, run: &RunContext) -> EffectError<T::Error> {
    let e = match e {
        EffectError::Blocked(b) => EffectError::Blocked(SideEffectRetryBlocked {
            run_id: run.run_id().to_owned(),
            ..b
        }),
        EffectError::ApprovalPending(a) => EffectError::ApprovalPending(ApprovalPending {
            run_id: run.run_id().to_owned(),
            ..a
        }),
        other => other,
    };
    match e {
        EffectError::Tool {
            tool,
            key,
            failure,
            error,
        } => EffectError::SharedFailure {
            tool,
            key: key.unwrap_or_default(),
            failure,
            message: error,
        },
        other => other.map_tool_error(|_| unreachable!("tool errors are mapped above")),
    }
}
