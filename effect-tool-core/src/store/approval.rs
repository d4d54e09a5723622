//! Waiting on the journal for a person's decision about a parked call
//! ([`RunHandle::wait_for_approval`](crate::RunHandle::wait_for_approval)).

use std::sync::Arc;
use std::time::Duration;

use crate::call::error::StoreError;
use crate::decide::record::{EffectRecord, RecordState};
use crate::store::Store;

/// What a person decided about a call that waited for approval
/// ([`RunHandle::wait_for_approval`](crate::RunHandle::wait_for_approval)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ApprovalAnswer {
    /// Approved by `by`: the next call with the same input runs it.
    Approved {
        /// Who approved.
        by: Option<String>,
    },
    /// Denied by `by`: the next call fails with the reason.
    Denied {
        /// Who denied.
        by: Option<String>,
        /// Why.
        reason: Option<String>,
    },
    /// The record left the approval queue another way (it ran, was garbage-collected, ...).
    Other(Option<RecordState>),
    /// Nobody answered within the time given.
    TimedOut,
}

/// How often [`wait_for_approval`] reads a record of another process's store at first, and at
/// most.
const WAIT_POLL: (Duration, Duration) = (Duration::from_millis(20), Duration::from_secs(1));

/// Wait until the record under `key` is no longer awaiting approval, or `timeout` passes.
pub(crate) async fn wait_for_approval(
    store: &Arc<dyn Store>,
    key: &str,
    timeout: Duration,
) -> Result<ApprovalAnswer, StoreError> {
    let Some(rec) = wait_while(store, key, &[RecordState::AwaitingApproval], timeout).await? else {
        return Ok(ApprovalAnswer::TimedOut);
    };
    Ok(match rec {
        Some(rec) if rec.state == RecordState::Approved => ApprovalAnswer::Approved { by: rec.decided_by },
        Some(rec) if rec.state == RecordState::Denied => ApprovalAnswer::Denied {
            by: rec.decided_by,
            reason: rec.reason,
        },
        other => ApprovalAnswer::Other(other.map(|r| r.state)),
    })
}

/// Wait until the record under `key` is in none of `states` (a person decided: approved,
/// denied, resolved), or `timeout` passes: `Some` of the record as it is then (`None` when it
/// is gone), `None` when the time ran out first.
pub(crate) async fn wait_while(
    store: &Arc<dyn Store>,
    key: &str,
    states: &[RecordState],
    timeout: Duration,
) -> Result<Option<Option<EffectRecord>>, StoreError> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut poll = WAIT_POLL.0;
    loop {
        let rec = store.get(key).await?;
        match rec {
            Some(rec) if states.contains(&rec.state) => {}
            other => return Ok(Some(other)),
        }
        let now = tokio::time::Instant::now();
        if now >= deadline {
            return Ok(None);
        }
        tokio::select! {
            _ = store.changed(key) => {}
            _ = tokio::time::sleep(poll.min(deadline - now)) => {}
        }
        poll = (poll * 2).min(WAIT_POLL.1);
    }
}
