//! Gauges of the journal: the records that need a person, by state and tool, and how long the
//! oldest of them has waited. The engine's counters and histograms
//! ([`engine`](crate::engine)'s metrics) say what calls did; these say what is waiting now, which
//! is what an on-call person is paged for.
//!
//! [`JournalGauges::refresh`] reads the journal once (one list of the records in doubt,
//! awaiting approval, or claimed) and sets, through the [`metrics`] facade:
//!
//! | name | labels | value |
//! |---|---|---|
//! | `effect_tool_records_needing_person` | `state`, `tool` | how many |
//! | `effect_tool_records_needing_person_oldest_age_seconds` | `state`, `tool` | since the oldest went into that state |
//! | `effect_tool_journal_up` | | 1 when the journal was read, 0 when it failed |
//!
//! `state` is `in-doubt` (since the record went in doubt), `awaiting-approval` (since the call
//! parked) or `stale` (a claim whose lease ended without a result: since the lease ended). A
//! (state, tool) pair that no longer has records is set back to 0, so a resolved record does
//! not stay on a dashboard.
//!
//! The values are the journal's, not one process's: call `refresh` where the metrics are
//! scraped (the Prometheus endpoint of feature `prometheus` does it on every scrape), and, when
//! several instances report the same journal, aggregate them with `max` (as the alert rules in
//! `deploy/prometheus/` do).
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use effect_tool_core::ops::gauges::JournalGauges;
//! use effect_tool_core::{MemoryStore, RecordState};
//!
//! let store = MemoryStore::new();
//! let gauges = JournalGauges::new();
//! let snapshot = gauges.refresh(&store).await.expect("the journal is readable");
//! assert_eq!(snapshot.count(RecordState::InDoubt), 0);
//! # });
//! ```

use std::collections::BTreeMap;
use std::sync::Mutex;

use crate::call::error::StoreError;
use crate::decide::record::{EffectRecord, Millis, RecordState};
use crate::store::{Filter, Store};

/// What waits for a person in one state, for one tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Waiting {
    /// How many records.
    pub count: u64,
    /// How long the oldest has waited, in milliseconds.
    pub oldest_ms: u64,
}

/// What [`JournalGauges::refresh`] found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct JournalSnapshot {
    /// By (state label, tool): `in-doubt`, `awaiting-approval` or `stale`.
    pub waiting: BTreeMap<(&'static str, String), Waiting>,
    /// The store's clock when it was read.
    pub at: Millis,
}

impl JournalSnapshot {
    /// How many records wait in `state` (`Claimed` counts the stale claims), over all tools.
    pub fn count(&self, state: RecordState) -> u64 {
        let label = state_label(state);
        self.waiting
            .iter()
            .filter(|((s, _), _)| Some(*s) == label)
            .map(|(_, w)| w.count)
            .sum()
    }
}

/// The gauge label of a state that needs a person (`Claimed` for the stale claims).
fn state_label(state: RecordState) -> Option<&'static str> {
    match state {
        RecordState::InDoubt => Some("in-doubt"),
        RecordState::AwaitingApproval => Some("awaiting-approval"),
        RecordState::Claimed => Some("stale"),
        _ => None,
    }
}

/// Sets the journal's gauges (see the module docs). Keeps the (state, tool) pairs it reported,
/// to set them back to 0 once they have no records.
#[derive(Debug, Default)]
pub struct JournalGauges {
    reported: Mutex<Vec<(&'static str, String)>>,
}

impl JournalGauges {
    /// Gauges that have reported nothing yet.
    pub fn new() -> Self {
        JournalGauges::default()
    }

    /// Read `store` and set the gauges. On a store error, `effect_tool_journal_up` is set to 0,
    /// the other gauges keep their last values, and the error is returned.
    pub async fn refresh(&self, store: &dyn Store) -> Result<JournalSnapshot, StoreError> {
        let filter = Filter {
            states: vec![
                RecordState::InDoubt,
                RecordState::AwaitingApproval,
                RecordState::Claimed,
            ],
            ..Filter::default()
        };
        let records = match store.list(&filter).await {
            Ok(records) => records,
            Err(e) => {
                metrics::gauge!("effect_tool_journal_up").set(0.0);
                return Err(e);
            }
        };
        let snapshot = snapshot(&records, store.now());
        self.publish(&snapshot);
        Ok(snapshot)
    }

    fn publish(&self, snapshot: &JournalSnapshot) {
        metrics::gauge!("effect_tool_journal_up").set(1.0);
        let mut reported = self.reported.lock().unwrap_or_else(|e| e.into_inner());
        for (state, tool) in reported.iter() {
            if !snapshot.waiting.contains_key(&(*state, tool.clone())) {
                set(state, tool, Waiting::default());
            }
        }
        for ((state, tool), waiting) in &snapshot.waiting {
            set(state, tool, *waiting);
        }
        *reported = snapshot.waiting.keys().cloned().collect();
    }
}

fn set(state: &'static str, tool: &str, waiting: Waiting) {
    let labels = [("state", state.to_owned()), ("tool", tool.to_owned())];
    metrics::gauge!("effect_tool_records_needing_person", &labels).set(waiting.count as f64);
    metrics::gauge!("effect_tool_records_needing_person_oldest_age_seconds", &labels)
        .set(waiting.oldest_ms as f64 / 1000.0);
}

/// Count the records that need a person, and the age of the oldest, at `now`.
fn snapshot(records: &[EffectRecord], now: Millis) -> JournalSnapshot {
    let mut waiting: BTreeMap<(&'static str, String), Waiting> = BTreeMap::new();
    for rec in records {
        let since = match rec.state {
            RecordState::InDoubt | RecordState::AwaitingApproval => rec.updated_at,
            RecordState::Claimed if rec.is_stale(now) => rec.lease_until.unwrap_or(rec.updated_at),
            _ => continue,
        };
        let Some(label) = state_label(rec.state) else { continue };
        let entry = waiting.entry((label, rec.tool.clone())).or_default();
        entry.count += 1;
        entry.oldest_ms = entry.oldest_ms.max(now.saturating_sub(since).max(0) as u64);
    }
    JournalSnapshot { waiting, at: now }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::class::EffectClass;

    fn record(tool: &str, state: RecordState, updated_at: Millis, lease_until: Option<Millis>) -> EffectRecord {
        let mut rec: EffectRecord = serde_json::from_value(serde_json::json!({
            "version": crate::decide::record::RECORD_VERSION, "key": format!("{tool}:{updated_at}"), "tool": tool,
            "class": EffectClass::Irreversible, "run_id": "r", "thread_id": null, "call_id": null,
            "fingerprint": "f", "input": {}, "state": state, "attempt": 1, "lease_until": lease_until,
            "output": null, "reason": null, "approval_role": null, "decided_by": null,
            "created_at": 0, "updated_at": updated_at, "expires_at": null
        }))
        .expect("a record");
        rec.state = state;
        rec
    }

    #[test]
    fn counts_and_ages_by_state_and_tool_and_leaves_live_claims_out() {
        let now = 1_000_000;
        let records = [
            record("send_email", RecordState::InDoubt, now - 400_000, None),
            record("send_email", RecordState::InDoubt, now - 10_000, None),
            record("refund", RecordState::AwaitingApproval, now - 5_000, None),
            // A stale claim: its lease ended 70 s ago (it was claimed 100 s ago).
            record("deploy", RecordState::Claimed, now - 100_000, Some(now - 70_000)),
            // A live claim: not waiting for anyone.
            record("deploy", RecordState::Claimed, now - 1_000, Some(now + 30_000)),
        ];
        let snap = snapshot(&records, now);
        assert_eq!(
            snap.waiting[&("in-doubt", "send_email".to_owned())],
            Waiting {
                count: 2,
                oldest_ms: 400_000
            }
        );
        assert_eq!(
            snap.waiting[&("awaiting-approval", "refund".to_owned())],
            Waiting {
                count: 1,
                oldest_ms: 5_000
            }
        );
        assert_eq!(
            snap.waiting[&("stale", "deploy".to_owned())],
            Waiting {
                count: 1,
                oldest_ms: 70_000
            }
        );
        assert_eq!(snap.waiting.len(), 3);
        assert_eq!(snap.count(RecordState::Claimed), 1);
        assert_eq!(snap.count(RecordState::Completed), 0);
    }
}
