//! How many `tools/call` requests run at once: per session, per principal (or client address),
//! and in all; each with a bounded queue. A call that finds a limit reached and its queue full is
//! answered "busy" at once, instead of waiting for as long as the calls ahead of it take.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The limits of an [`super::McpServer`]: concurrency, queues, argument size and (over HTTP)
/// sessions. [`McpLimits::default`] gives the documented defaults; set fields to change them,
/// then pass it to [`super::McpServer::with_limits`].
///
/// ```
/// use effect_tool_core::mcp::McpLimits;
/// let limits = McpLimits { per_principal: 2, ..McpLimits::default() };
/// assert_eq!(limits.per_session, 4);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct McpLimits {
    /// `tools/call` requests running at once in all (default 8,
    /// [`crate::toolkit::DEFAULT_CONCURRENCY`]).
    pub total: usize,
    /// `tools/call` requests running at once for one principal (the authenticated caller), or,
    /// without an authenticator, for one client address (default 4).
    pub per_principal: usize,
    /// `tools/call` requests running at once in one MCP session (default 4). Over stateless
    /// HTTP (protocol `2026-07-28`) every request is a session of its own, and the principal's
    /// limit is the one that binds.
    pub per_session: usize,
    /// How many calls may wait for each of the limits above (default 8). A call that finds the
    /// limit reached and this many already waiting is answered at once with a tool error that
    /// says the server is busy (`_meta` `effect-tool/outcome` = `busy`); nothing runs.
    pub queue: usize,
    /// The largest `tools/call` arguments accepted, in bytes of JSON (default 256 KiB). Larger
    /// ones are refused as a tool error before anything runs or is journaled.
    pub max_argument_bytes: usize,
    /// Over HTTP: MCP sessions open at once in all (default 1,000). An `initialize` beyond it
    /// is answered `503 Service Unavailable`.
    pub max_sessions: usize,
    /// Over HTTP: MCP sessions open at once for one principal, or without an authenticator for
    /// one client address (default 32). An `initialize` beyond it is answered `429 Too Many
    /// Requests`.
    pub max_sessions_per_principal: usize,
    /// Over HTTP: a session without any request for this long is closed (default 2 minutes;
    /// rmcp's own default is 5). The client starts a new one; recorded calls are not lost, they
    /// are in the journal.
    pub session_idle_timeout: std::time::Duration,
}

impl Default for McpLimits {
    fn default() -> Self {
        McpLimits {
            total: crate::toolkit::DEFAULT_CONCURRENCY,
            per_principal: 4,
            per_session: 4,
            queue: 8,
            max_argument_bytes: 256 * 1024,
            max_sessions: 1_000,
            max_sessions_per_principal: 32,
            session_idle_timeout: std::time::Duration::from_secs(120),
        }
    }
}

/// One limit: `n` calls at once, `queue` more waiting, the rest refused.
#[derive(Debug)]
pub(crate) struct Gate {
    running: Arc<Semaphore>,
    waiting: AtomicUsize,
    limit: usize,
    queue: usize,
}

/// A place in a gate (a running call's permit). Dropping it lets the next one in.
#[derive(Debug)]
pub(crate) struct Pass {
    _permit: OwnedSemaphorePermit,
    // Keeps the gate alive while the call runs (a principal's gate lives as long as a call of
    // the principal holds it).
    _gate: Arc<Gate>,
}

/// Which limit refused a call, and its numbers, for the "busy" message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Busy {
    pub(crate) scope: &'static str,
    pub(crate) limit: usize,
    pub(crate) queue: usize,
}

impl Gate {
    pub(crate) fn new(limit: usize, queue: usize) -> Arc<Self> {
        let limit = limit.max(1);
        Arc::new(Gate {
            running: Arc::new(Semaphore::new(limit)),
            waiting: AtomicUsize::new(0),
            limit,
            queue,
        })
    }

    /// Enter at once if a place is free; else wait if the queue has room; else `Busy`.
    pub(crate) async fn enter(self: &Arc<Self>, scope: &'static str) -> Result<Pass, Busy> {
        let busy = Busy {
            scope,
            limit: self.limit,
            queue: self.queue,
        };
        if let Ok(permit) = self.running.clone().try_acquire_owned() {
            return Ok(self.pass(permit));
        }
        if self.waiting.fetch_add(1, Ordering::SeqCst) >= self.queue {
            self.waiting.fetch_sub(1, Ordering::SeqCst);
            return Err(busy);
        }
        // Leaves the queue however the wait ends (a permit, or the call being dropped).
        struct Waiting<'a>(&'a AtomicUsize);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::SeqCst);
            }
        }
        let _waiting = Waiting(&self.waiting);
        // The semaphore is never closed; were it, the call is refused as busy.
        match self.running.clone().acquire_owned().await {
            Ok(permit) => Ok(self.pass(permit)),
            Err(_) => Err(busy),
        }
    }

    fn pass(self: &Arc<Self>, permit: OwnedSemaphorePermit) -> Pass {
        Pass {
            _permit: permit,
            _gate: self.clone(),
        }
    }
}

/// The gates every session of one server shares: the total one, and one per principal (made on
/// first use, forgotten when no call of the principal runs or waits).
#[derive(Debug)]
pub(crate) struct Gates {
    pub(crate) total: Arc<Gate>,
    principals: Mutex<HashMap<String, Weak<Gate>>>,
    limits: McpLimits,
}

impl Gates {
    pub(crate) fn new(limits: McpLimits) -> Self {
        Gates {
            total: Gate::new(limits.total, limits.queue),
            principals: Mutex::new(HashMap::new()),
            limits,
        }
    }

    /// The gate of one principal (or client address).
    pub(crate) fn principal(&self, who: &str) -> Arc<Gate> {
        let mut map = self.principals.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(gate) = map.get(who).and_then(Weak::upgrade) {
            return gate;
        }
        // Forget the gates nobody holds, before the map grows past twice what is in use.
        if map.len() >= 64 {
            map.retain(|_, g| g.strong_count() > 0);
        }
        let gate = Gate::new(self.limits.per_principal, self.limits.queue);
        map.insert(who.to_owned(), Arc::downgrade(&gate));
        gate
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_full_gate_with_a_full_queue_answers_busy_at_once_and_lets_the_queue_in_later() {
        let gate = Gate::new(1, 1);
        let first = gate.enter("session").await.unwrap();
        // One waits in the queue ...
        let waiter = {
            let gate = gate.clone();
            tokio::spawn(async move { gate.enter("session").await.map(|_| ()) })
        };
        while gate.waiting.load(Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        // ... so the next is refused, naming the limit.
        let busy = gate.enter("session").await.unwrap_err();
        assert_eq!(
            busy,
            Busy {
                scope: "session",
                limit: 1,
                queue: 1
            }
        );
        assert!(!waiter.is_finished());
        drop(first);
        waiter.await.unwrap().unwrap();
        assert_eq!(gate.waiting.load(Ordering::SeqCst), 0);
        // A dropped waiter leaves the queue.
        let held = gate.enter("session").await.unwrap();
        let dropped = {
            let gate = gate.clone();
            tokio::spawn(async move { gate.enter("session").await.map(|_| ()) })
        };
        while gate.waiting.load(Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        dropped.abort();
        let _ = dropped.await;
        assert_eq!(gate.waiting.load(Ordering::SeqCst), 0);
        drop(held);
    }

    #[test]
    fn principals_get_their_own_gate_which_is_forgotten_when_unused() {
        let gates = Gates::new(McpLimits::default());
        let a = gates.principal("alice");
        assert!(Arc::ptr_eq(&a, &gates.principal("alice")));
        assert!(!Arc::ptr_eq(&a, &gates.principal("bob")));
        drop(a);
        for i in 0..200 {
            drop(gates.principal(&format!("p{i}")));
        }
        let map = gates.principals.lock().unwrap();
        assert!(map.len() <= 65, "{}", map.len());
    }
}
