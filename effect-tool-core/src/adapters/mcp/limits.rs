//! How many `tools/call` requests run at once: per session, per principal (or client address),
//! and in all; each with a bounded queue. A call that finds a limit reached and its queue full is
//! answered "busy" at once, instead of waiting for as long as the calls ahead of it take.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};

/// The limits of an [`super::McpServer`]: concurrency, queues, argument size and (over HTTP)
/// sessions. [`McpLimits::default`] gives the documented defaults; set fields to change them,
/// then pass it to [`super::McpServer::with_limits`].
///
/// ```
/// use effect_tool_core::adapters::mcp::McpLimits;
/// let limits = McpLimits { per_principal: 2, ..McpLimits::default() };
/// assert_eq!(limits.per_session, 4);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct McpLimits {
    /// `tools/call` requests running at once in all (default 8,
    /// [`crate::toolkit::DEFAULT_CONCURRENCY`]).
    ///
    /// Shared fairly: a principal that already runs a call takes another place only while
    /// [`McpLimits::reserve`] places stay free for principals that run none, so that two
    /// principals' slow calls cannot take every place; and when a place frees, the waiting
    /// principal that runs the fewest calls gets it (in turn among equals).
    pub total: usize,
    /// `tools/call` requests running at once for one principal (the authenticated caller), or,
    /// without an authenticator, for one client address (default 4).
    pub per_principal: usize,
    /// `tools/call` requests running at once in one MCP session (default 4). Over stateless
    /// HTTP (protocol `2026-07-28`) every request is a session of its own, and the principal's
    /// limit is the one that binds.
    pub per_session: usize,
    /// How many calls may wait for the session's limit, and how many of one principal's calls
    /// may wait for a place (default 8). A call that finds the
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

impl McpLimits {
    /// The places of [`McpLimits::total`] a principal that already runs a call leaves free for
    /// principals that run none: a quarter of them, at least one when there are two or more
    /// (2 of the default 8).
    pub fn reserve(&self) -> usize {
        let total = self.total.max(1);
        if total < 2 { 0 } else { (total / 4).max(1) }
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

/// The places every session of one server shares, given out fairly among principals (or client
/// addresses): at most [`McpLimits::total`] calls run, at most [`McpLimits::per_principal`] of
/// one principal, and a principal that already runs a call takes a place only while
/// [`McpLimits::reserve`] places stay free for principals that run none. Waiting calls are let
/// in principal by principal: the one running the fewest calls first, in turn among equals,
/// each principal's calls in the order they came.
#[derive(Debug)]
pub(crate) struct Gates {
    state: Mutex<Places>,
    limits: McpLimits,
}

#[derive(Debug, Default)]
struct Places {
    running: usize,
    /// The principals that run or wait (forgotten when they do neither).
    principals: HashMap<String, Principal>,
    /// The principals with waiting calls, in the order they are served among equals.
    turn: VecDeque<String>,
}

#[derive(Debug, Default)]
struct Principal {
    running: usize,
    waiting: VecDeque<oneshot::Sender<Place>>,
}

/// A running call's place among the shared ones; dropping it lets the next waiting call in.
#[derive(Debug)]
pub(crate) struct Place {
    gates: Arc<Gates>,
    who: String,
}

impl Drop for Place {
    fn drop(&mut self) {
        self.gates.leave(&self.who);
    }
}

impl Gates {
    pub(crate) fn new(limits: McpLimits) -> Self {
        Gates {
            state: Mutex::new(Places::default()),
            limits,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Places> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether a call of a principal running `running` calls may take a place now.
    fn admits(&self, places: &Places, running: usize) -> bool {
        let total = self.limits.total.max(1);
        let free = total.saturating_sub(places.running);
        free > 0 && running < self.limits.per_principal.max(1) && (running == 0 || free > self.limits.reserve())
    }

    /// A place for a call of `who` (`scope` names it in a "busy" answer): at once if the rules
    /// above allow it and none of `who`'s calls wait before it; else after waiting, if fewer than
    /// [`McpLimits::queue`] of `who`'s calls wait already; else `Busy`.
    pub(crate) async fn enter(self: &Arc<Self>, who: &str, scope: &'static str) -> Result<Place, Busy> {
        let receiver = {
            let mut places = self.lock();
            let principal = places.principals.entry(who.to_owned()).or_default();
            principal.waiting.retain(|w| !w.is_closed());
            let (running, queued) = (principal.running, principal.waiting.len());
            if queued == 0 && self.admits(&places, running) {
                return Ok(self.admit(&mut places, who));
            }
            if queued >= self.limits.queue {
                if running == 0 && queued == 0 {
                    places.principals.remove(who);
                }
                return Err(Busy {
                    scope,
                    limit: self.limits.per_principal.max(1),
                    queue: self.limits.queue,
                });
            }
            let (sender, receiver) = oneshot::channel();
            places
                .principals
                .get_mut(who)
                .expect("entered above")
                .waiting
                .push_back(sender);
            if !places.turn.iter().any(|w| w == who) {
                places.turn.push_back(who.to_owned());
            }
            receiver
        };
        // A waiting call that is dropped closes its channel: it is skipped, and a place sent to
        // it just before is dropped with the channel, which lets the next one in.
        receiver.await.map_err(|_| Busy {
            scope,
            limit: self.limits.per_principal.max(1),
            queue: self.limits.queue,
        })
    }

    fn admit(self: &Arc<Self>, places: &mut Places, who: &str) -> Place {
        places.running += 1;
        places.principals.entry(who.to_owned()).or_default().running += 1;
        Place {
            gates: self.clone(),
            who: who.to_owned(),
        }
    }

    /// A call of `who` is done: let in the waiting calls the freed place allows.
    fn leave(self: &Arc<Self>, who: &str) {
        let handed = {
            let mut places = self.lock();
            places.running = places.running.saturating_sub(1);
            if let Some(p) = places.principals.get_mut(who) {
                p.running = p.running.saturating_sub(1);
                if p.running == 0 && p.waiting.is_empty() {
                    places.principals.remove(who);
                }
            }
            self.next(&mut places)
        };
        // Sent without the lock: a place whose waiter is gone is dropped here, and lets the
        // next one in.
        for (sender, place) in handed {
            drop(sender.send(place));
        }
    }

    /// The waiting calls to let in now, with their places.
    fn next(self: &Arc<Self>, places: &mut Places) -> Vec<(oneshot::Sender<Place>, Place)> {
        let mut handed = Vec::new();
        loop {
            // The waiting principal running the fewest calls, first in turn among equals, whose
            // first live call may take a place.
            let mut best: Option<(usize, usize)> = None;
            for (i, who) in places.turn.iter().enumerate() {
                let Some(p) = places.principals.get(who) else { continue };
                if p.waiting.iter().all(|w| w.is_closed()) || !self.admits(places, p.running) {
                    continue;
                }
                if best.is_none_or(|(_, r)| p.running < r) {
                    best = Some((i, p.running));
                }
            }
            // Forget the principals whose waiting calls are all gone.
            let gone: Vec<usize> = (0..places.turn.len())
                .filter(|&i| {
                    places
                        .principals
                        .get(&places.turn[i])
                        .is_none_or(|p| p.waiting.iter().all(|w| w.is_closed()))
                })
                .collect();
            let Some((i, _)) = best else {
                self.forget(places, &gone);
                return handed;
            };
            let who = places.turn.remove(i).expect("found above");
            let sender = {
                let p = places.principals.get_mut(&who).expect("found above");
                loop {
                    let w = p.waiting.pop_front().expect("a live waiter");
                    if !w.is_closed() {
                        break w;
                    }
                }
            };
            let place = self.admit(places, &who);
            if places.principals.get(&who).is_some_and(|p| !p.waiting.is_empty()) {
                places.turn.push_back(who);
            }
            handed.push((sender, place));
        }
    }

    /// Drop the principals at these places of the turn whose waiting calls are all gone.
    fn forget(&self, places: &mut Places, gone: &[usize]) {
        for &i in gone.iter().rev() {
            let Some(who) = places.turn.remove(i) else { continue };
            if let Some(p) = places.principals.get_mut(&who) {
                p.waiting.clear();
                if p.running == 0 {
                    places.principals.remove(&who);
                }
            }
        }
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

    type Waiting<'a> = std::pin::Pin<Box<dyn std::future::Future<Output = Result<Place, Busy>> + Send + 'a>>;

    /// Calls of `who` until one has to wait (returned, queued: its first poll queued it).
    async fn fill<'a>(gates: &'a Arc<Gates>, who: &'a str, held: &mut Vec<Place>) -> Waiting<'a> {
        loop {
            let mut call: Waiting<'a> = Box::pin(gates.enter(who, "your principal"));
            match futures::poll!(call.as_mut()) {
                std::task::Poll::Ready(place) => held.push(place.unwrap()),
                std::task::Poll::Pending => return call,
            }
        }
    }

    #[tokio::test]
    async fn two_principals_slow_calls_leave_room_for_a_third_and_freed_places_go_in_turn() {
        let limits = McpLimits::default();
        assert_eq!((limits.total, limits.per_principal, limits.reserve()), (8, 4, 2));
        let gates = Arc::new(Gates::new(limits));
        let mut held = Vec::new();
        let mut a_waits = fill(&gates, "alice", &mut held).await;
        let b_waits = fill(&gates, "bob", &mut held).await;
        // Alice runs her 4, Bob 2 (his third would leave fewer than 2 places for others).
        let running = |who: &str| gates.lock().principals.get(who).map_or(0, |p| p.running);
        assert_eq!((running("alice"), running("bob")), (4, 2));
        // Carol, who runs nothing, is let in at once, and so is Dan.
        let carol = gates.enter("carol", "your principal").await.unwrap();
        let dan = gates.enter("dan", "your principal").await.unwrap();
        assert_eq!(gates.lock().running, 8);
        // Places freed by Carol and Dan stay kept for principals that run none.
        let mut b_waits = b_waits;
        drop((carol, dan));
        assert!(futures::poll!(b_waits.as_mut()).is_pending());
        assert!(futures::poll!(a_waits.as_mut()).is_pending());
        // A place freed by Alice goes to Bob (2 running), not Alice (3), though Alice waited first.
        drop(held.remove(0));
        let bobs = b_waits.await.unwrap();
        assert!(futures::poll!(a_waits.as_mut()).is_pending());
        assert_eq!((running("alice"), running("bob")), (3, 3));
        drop((bobs, held));
        let alices = a_waits.await.unwrap();
        drop(alices);
        assert_eq!(gates.lock().running, 0);
        assert!(gates.lock().principals.is_empty(), "{:?}", gates.lock().principals);
    }

    #[tokio::test]
    async fn a_principals_full_queue_is_answered_busy_and_a_dropped_waiter_gives_its_place_on() {
        let limits = McpLimits {
            total: 2,
            per_principal: 1,
            queue: 1,
            ..McpLimits::default()
        };
        let gates = Arc::new(Gates::new(limits));
        let first = gates.enter("alice", "your principal").await.unwrap();
        let waiting = {
            let gates = gates.clone();
            tokio::spawn(async move { gates.enter("alice", "your principal").await.map(drop) })
        };
        while gates.lock().principals["alice"].waiting.is_empty() {
            tokio::task::yield_now().await;
        }
        let busy = gates.enter("alice", "your principal").await.unwrap_err();
        assert_eq!((busy.scope, busy.limit, busy.queue), ("your principal", 1, 1));
        // Bob is not held up by Alice's queue.
        drop(gates.enter("bob", "your principal").await.unwrap());
        waiting.abort();
        let _ = waiting.await;
        drop(first);
        assert_eq!(gates.lock().running, 0);
        assert!(gates.enter("alice", "your principal").await.is_ok());
    }
}
