//! The holder's own clock on a claim's lease: the deadline a tool's context checks
//! ([`EffectCtx::ensure_lease`](crate::EffectCtx::ensure_lease)) and the engine's guard stops the
//! tool at. The engine renews it (`engine/lease.rs`); the journal decides staleness by its own clock.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// A claim's lease on this process's monotonic clock ([`tokio::time::Instant`]).
#[derive(Debug)]
pub(crate) struct LeaseClock {
    /// The instant the deadline is counted from.
    base: Instant,
    /// The deadline, in nanoseconds after `base`.
    deadline_ns: AtomicU64,
    /// Set when the journal refused a renewal: another attempt holds the key.
    lost: AtomicBool,
    /// Set when the tool's own check ([`crate::EffectCtx::ensure_lease`]) found it lapsed.
    refused: AtomicBool,
}

impl LeaseClock {
    /// The lease of a claim sent at `sent`.
    pub(crate) fn new(sent: Instant, lease: Duration) -> Arc<Self> {
        let clock = LeaseClock {
            base: sent,
            deadline_ns: AtomicU64::new(0),
            lost: AtomicBool::new(false),
            refused: AtomicBool::new(false),
        };
        clock.extend(sent, lease);
        Arc::new(clock)
    }

    /// A renewal sent at `sent` succeeded: the lease runs until `sent + lease` (never shorter
    /// than it was).
    pub(crate) fn extend(&self, sent: Instant, lease: Duration) {
        let until = sent.saturating_duration_since(self.base) + lease;
        let ns = u64::try_from(until.as_nanos()).unwrap_or(u64::MAX);
        self.deadline_ns.fetch_max(ns, Ordering::SeqCst);
    }

    /// The journal refused a renewal: the claim is gone, whatever the clock says.
    pub(crate) fn lose(&self) {
        self.lost.store(true, Ordering::SeqCst);
    }

    /// The tool's own check found the lease lapsed ([`crate::EffectCtx::ensure_lease`]).
    pub(crate) fn refuse(&self) {
        self.refused.store(true, Ordering::SeqCst);
    }

    /// Whether the tool's own check found the lease lapsed.
    pub(crate) fn refused(&self) -> bool {
        self.refused.load(Ordering::SeqCst)
    }

    /// When the lease lapses.
    pub(crate) fn deadline(&self) -> Instant {
        self.base + Duration::from_nanos(self.deadline_ns.load(Ordering::SeqCst))
    }

    /// Whether the lease has lapsed (or the claim was lost): the claim may be someone else's.
    pub(crate) fn lapsed(&self) -> bool {
        self.lost.load(Ordering::SeqCst) || Instant::now() >= self.deadline()
    }

    /// How long the lease still runs (zero once lapsed).
    pub(crate) fn remaining(&self) -> Duration {
        if self.lost.load(Ordering::SeqCst) {
            return Duration::ZERO;
        }
        self.deadline().saturating_duration_since(Instant::now())
    }
}
