//! Garbage collection: what [`Store::gc`](super::Store::gc) may delete ([`collectable`], defined
//! once for every backend) and how fast a chunked gc goes ([`GcPace`]).

use crate::decide::record::{EffectRecord, Millis, RecordState};

/// How many records the next chunk of a chunked [`Store::gc`](super::Store::gc) deletes (the SQLite and
/// PostgreSQL stores'). Every chunk holds locks other writes wait for until it commits, so its
/// size follows how long the last one took: over `target`, the next is half as large; under a
/// quarter of it, twice as large; always within `min..=max`. Whatever the journal's size and
/// the machine's speed, a write then waits for about `target` at a time, not for a chunk sized
/// for another machine.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
#[derive(Debug, Clone, Copy)]
pub(crate) struct GcPace {
    size: u64,
    min: u64,
    max: u64,
    target: std::time::Duration,
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
impl GcPace {
    /// Start at `size` records, and keep within `min..=max`.
    pub(crate) const fn new(size: u64, min: u64, max: u64, target: std::time::Duration) -> Self {
        GcPace { size, min, max, target }
    }

    /// The next chunk's size.
    pub(crate) fn size(&self) -> u64 {
        self.size
    }

    /// The last chunk took `took`: size the next.
    pub(crate) fn after(&mut self, took: std::time::Duration) {
        if took > self.target {
            self.size = (self.size / 2).max(self.min);
        } else if took < self.target / 4 {
            self.size = self.size.saturating_mul(2).min(self.max);
        }
    }
}

/// Whether garbage collection may drop `rec` at `now`: its ttl has passed, no person needs it,
/// and it is not a claim. A stale claim is kept too: it is the only evidence of a crash between
/// an effect and its record, and dropping it would let the next call of an irreversible tool run
/// again silently (and reuse the dead holder's fencing token) instead of reconciling.
///
/// The SQL backends delete with the same rule, their `DELETE`'s condition written from the
/// same list of states kept.
pub fn collectable(rec: &EffectRecord, now: Millis) -> bool {
    rec.is_expired(now) && !KEPT.contains(&rec.state)
}

/// The states garbage collection keeps whatever their ttl: those a person still needs
/// ([`RecordState::needs_person`]), claims, live or stale, and records pending a provider's
/// callback ([`RecordState::is_held`]).
pub(crate) const KEPT: [RecordState; 4] = [
    RecordState::InDoubt,
    RecordState::AwaitingApproval,
    RecordState::Claimed,
    RecordState::Pending,
];

/// [`collectable`] as an SQL condition on a record row (columns `expires_at` and `state`), the
/// time given as the SQL expression `now` (a parameter, `?1` or `$1`).
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn collectable_sql(now: &str) -> String {
    let kept: Vec<String> = KEPT.iter().map(|s| format!("'{}'", s.as_str())).collect();
    format!(
        "expires_at IS NOT NULL AND expires_at <= {now} AND state NOT IN ({})",
        kept.join(", ")
    )
}

#[cfg(all(test, any(feature = "sqlite", feature = "postgres")))]
mod tests {
    use super::{GcPace, KEPT, collectable_sql};
    use crate::decide::record::RecordState;
    use std::time::Duration;

    #[test]
    fn gc_keeps_what_a_person_needs_and_every_claim_and_says_so_in_sql() {
        for state in RecordState::ALL {
            let kept = state.needs_person() || state.is_held();
            assert_eq!(KEPT.contains(&state), kept, "{state}");
            assert_eq!(
                collectable_sql("?1").contains(&format!("'{}'", state.as_str())),
                kept,
                "{state}"
            );
        }
        assert_eq!(
            collectable_sql("$1"),
            "expires_at IS NOT NULL AND expires_at <= $1 AND state NOT IN ('in-doubt', 'awaiting-approval', 'claimed', 'pending')"
        );
    }

    #[test]
    fn a_gc_chunk_over_its_target_halves_the_next_and_one_well_under_doubles_it_within_bounds() {
        let ms = Duration::from_millis;
        let mut pace = GcPace::new(256, 16, 1_024, ms(100));
        pace.after(ms(101));
        assert_eq!(pace.size(), 128, "over the target: half");
        pace.after(ms(100));
        assert_eq!(pace.size(), 128, "at the target: the same");
        pace.after(ms(25));
        assert_eq!(pace.size(), 128, "a quarter of the target: the same");
        pace.after(ms(24));
        assert_eq!(pace.size(), 256, "under a quarter: twice");
        for _ in 0..10 {
            pace.after(ms(1));
        }
        assert_eq!(pace.size(), 1_024, "never over the most");
        for _ in 0..10 {
            pace.after(ms(1_000));
        }
        assert_eq!(pace.size(), 16, "never under the least");
    }
}
