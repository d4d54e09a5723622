//! The engine's own clock on a claim's lease: a tool is not started, and its future is not
//! polled further, once the lease has lapsed on this process's monotonic clock.
//!
//! The journal decides who holds a key by its own clock (`lease_until`). A process that is paused
//! (a GC pause, a stopped VM, SIGSTOP, a debugger) cannot see that another attempt took the key
//! over meanwhile. So the engine keeps its own deadline for every claim it holds: the time the
//! claim (or its last successful renewal) was *sent*, plus the lease. The journal's lease starts
//! when it processes the request, never earlier, so this deadline never ends after the
//! journal's. Once it has passed, the claim may be someone else's, and this attempt stops.

use std::future::Future;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::lifecycle::Engine;
use crate::call::context::EffectCtx;
use crate::decide::record::RecordState;
use crate::store::{Store, StoreExt};

pub(crate) use crate::call::lease::LeaseClock;

/// A claim this attempt holds (a call's, stage 4a, or a compensation's): its fencing token, the
/// unknown outcome it took over (if any), its lease on the engine's clock, and the context the
/// tool receives under it.
pub(super) struct Held {
    pub(super) attempt: u32,
    pub(super) previous: Option<RecordState>,
    pub(super) lease: Arc<LeaseClock>,
    pub(super) ctx: EffectCtx,
}

impl Engine {
    /// Drive `work` under `held`'s claim: its lease renewed meanwhile ([`renew_forever`], the
    /// one renewal every claim of the engine gets), and `work` stopped (dropped) once the
    /// shutdown deadline passes or, if `guard`, the lease lapses ([`guarded`]). A lapsed lease
    /// also stops it before it starts.
    pub(super) async fn under_claim<F: Future>(&self, held: &Held, guard: bool, work: F) -> Leased<F::Output> {
        let mut work = std::pin::pin!(work);
        if held.lease.lapsed() {
            return Leased::Lapsed;
        }
        // Most work that finishes at once needs no lease renewal (nor its timer).
        if let Poll::Ready(r) = futures::poll!(work.as_mut()) {
            return Leased::Done(r);
        }
        let renew = renew_forever(
            self.inner.store.clone(),
            held.ctx.key.clone().unwrap_or_default(),
            held.attempt,
            self.inner.config.lease,
            held.lease.clone(),
        );
        let abort = &self.inner.abort;
        if !guard {
            return tokio::select! {
                biased;
                r = work => Leased::Done(r),
                _ = abort.cancelled() => Leased::Aborted,
                _ = renew => unreachable!("lease renewal loops until the work ends"),
            };
        }
        tokio::select! {
            biased;
            r = guarded(&held.lease, abort, work) => r,
            _ = renew => unreachable!("lease renewal loops until the work ends"),
        }
    }
}

/// How leased work ended.
pub(crate) enum Leased<T> {
    /// It finished.
    Done(T),
    /// The lease lapsed first: the work's future was dropped at an await point.
    Lapsed,
    /// The engine's shutdown deadline passed first: the work's future was dropped.
    Aborted,
}

/// Renew the lease of `key` held by `attempt` every third of `lease`, forever, extending `clock`
/// on each success (from the time that renewal was sent) and marking it lost when the journal
/// refuses (another attempt holds the key). Renewals are sent on time even while an earlier one
/// is still unanswered (up to three at once), so a journal slow to answer (up to two thirds of
/// the lease) does not let the lease lapse. Store failures are logged: the lease then lapses on
/// its own unless a later renewal gets through.
pub(crate) async fn renew_forever(
    store: Arc<dyn Store>,
    key: String,
    attempt: u32,
    lease: Duration,
    clock: Arc<LeaseClock>,
) {
    use futures::StreamExt;
    let lease_ms = lease.as_millis() as u64;
    let period = lease / 3;
    let mut pending = futures::stream::FuturesUnordered::new();
    let mut next = Instant::now() + period;
    loop {
        tokio::select! {
            biased;
            _ = tokio::time::sleep_until(next) => {
                let sent = Instant::now();
                next = sent + period;
                if pending.len() < 3 {
                    let (store, key) = (store.clone(), key.clone());
                    pending.push(async move { (sent, store.renew(&key, attempt, lease_ms).await) });
                }
            }
            Some((sent, renewed)) = pending.next(), if !pending.is_empty() => match renewed {
                Ok(_) => clock.extend(sent, lease),
                Err(crate::StoreError::Rejected(e)) => {
                    tracing::warn!(error = %e, "the journal refused to renew the claim's lease: another attempt holds the key");
                    clock.lose();
                }
                Err(e) => tracing::warn!(error = %e, "could not renew the claim's lease"),
            },
        }
    }
}

/// Drive `work` while `clock`'s lease runs and `abort` has not fired: it is polled only while
/// the lease has not lapsed (checked before every poll, and woken at the deadline), and dropped
/// as soon as it has.
pub(crate) async fn guarded<F: Future>(clock: &LeaseClock, abort: &CancellationToken, work: F) -> Leased<F::Output> {
    let mut work = std::pin::pin!(work);
    loop {
        let deadline = clock.deadline();
        let checked = std::future::poll_fn(|cx| {
            if clock.lapsed() {
                return Poll::Ready(None);
            }
            work.as_mut().poll(cx).map(Some)
        });
        tokio::select! {
            biased;
            _ = abort.cancelled() => return Leased::Aborted,
            done = checked => return done.map_or(Leased::Lapsed, Leased::Done),
            // The deadline came without the work waking: look again (a renewal may have moved it).
            _ = tokio::time::sleep_until(deadline) => {
                if clock.lapsed() {
                    return Leased::Lapsed;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    #[test]
    fn a_renewal_moves_the_deadline_from_when_it_was_sent_and_never_back() {
        let start = Instant::now();
        let lease = Duration::from_millis(300);
        let clock = LeaseClock::new(start, lease);
        assert_eq!(clock.deadline(), start + lease);
        // Sent at 200 ms, whenever it is answered: the lease runs to 500 ms.
        clock.extend(start + Duration::from_millis(200), lease);
        assert_eq!(clock.deadline(), start + Duration::from_millis(500));
        // An older renewal answered late never shortens it.
        clock.extend(start, lease);
        assert_eq!(clock.deadline(), start + Duration::from_millis(500));
    }

    #[test]
    fn a_lease_sent_longer_ago_than_its_length_has_lapsed() {
        let now = Instant::now();
        let Some(long_ago) = now.checked_sub(Duration::from_secs(10)) else {
            return;
        };
        let clock = LeaseClock::new(long_ago, Duration::from_secs(1));
        assert!(clock.lapsed());
        assert_eq!(clock.remaining(), Duration::ZERO);
        let fresh = LeaseClock::new(now, Duration::from_secs(3600));
        assert!(!fresh.lapsed());
        fresh.lose();
        assert!(
            fresh.lapsed(),
            "a refused renewal loses the claim whatever the clock says"
        );
        assert_eq!(fresh.remaining(), Duration::ZERO);
    }

    #[tokio::test]
    async fn guarded_work_that_never_wakes_is_dropped_at_the_deadline() {
        let clock = LeaseClock::new(Instant::now(), Duration::from_millis(30));
        let abort = CancellationToken::new();
        let never = std::future::pending::<()>();
        assert!(matches!(guarded(&clock, &abort, never).await, Leased::Lapsed));
        assert!(clock.lapsed());
    }

    #[tokio::test]
    async fn lapsed_work_is_not_polled_at_all() {
        let clock = LeaseClock::new(Instant::now(), Duration::from_secs(3600));
        clock.lose();
        let polled = AtomicBool::new(false);
        let work = std::future::poll_fn(|_| {
            polled.store(true, Ordering::SeqCst);
            Poll::Ready(())
        });
        let abort = CancellationToken::new();
        assert!(matches!(guarded(&clock, &abort, work).await, Leased::Lapsed));
        assert!(!polled.load(Ordering::SeqCst));
    }

    #[tokio::test]
    async fn the_shutdown_deadline_stops_guarded_work() {
        let clock = LeaseClock::new(Instant::now(), Duration::from_secs(3600));
        let abort = CancellationToken::new();
        abort.cancel();
        let never = std::future::pending::<()>();
        assert!(matches!(guarded(&clock, &abort, never).await, Leased::Aborted));
    }
}
