//! Leases elected through the journal ([`StoreExt::acquire_lease`]): one holder of a named
//! lease at a time among every process sharing the journal, such as the one reconciler of a
//! journal ([`crate::toolkit::Reconciler`]).
//!
//! A lease is a record of its own under [`lease_key`], claimed, renewed and released through
//! the one state machine ([`crate::decide::record::transition`]) like any effect's claim, so it
//! works on every backend, is fenced by the attempt number (a holder that lost its lease cannot
//! renew it), and lapses by itself when its holder dies: its claim goes stale on the journal's
//! clock and the next process takes it over. Its record's tool is [`LEASE_TOOL`]; nothing ever
//! completes it, and tools of that name cannot be declared (a `/` is not in a tool's name).

use serde_json::json;

use super::{Store, StoreExt};
use crate::call::error::StoreError;
use crate::decide::record::{Holder, Intent, Millis, OpOutcome};
use crate::value::class::EffectClass;

/// The tool name of a lease's record.
pub const LEASE_TOOL: &str = "effect-tool/lease";

/// The key of the lease named `name`.
pub fn lease_key(name: &str) -> String {
    format!("effect-tool:lease:{name}")
}

/// A lease this holder holds ([`LeaseAnswer::Held`]): renew it before it lapses
/// ([`StoreExt::renew_lease`]) and release it when done ([`StoreExt::release_lease`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElectedLease {
    /// The lease's name.
    pub name: String,
    /// Its record's key ([`lease_key`]).
    pub key: String,
    /// The fencing token of this holding: only this attempt may renew or release it.
    pub attempt: u32,
}

/// What [`StoreExt::acquire_lease`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseAnswer {
    /// This holder holds the lease now.
    Held(ElectedLease),
    /// Another holder does, until `until` (the journal's clock) unless it renews.
    HeldBy {
        /// Who holds it, as its claim says.
        holder: Option<Box<Holder>>,
        /// When its lease ends, unless renewed.
        until: Option<Millis>,
    },
}

/// [`StoreExt::acquire_lease`].
pub(super) async fn acquire<S: Store + ?Sized>(
    store: &S,
    name: &str,
    holder: &Holder,
    lease_ms: u64,
) -> Result<LeaseAnswer, StoreError> {
    let key = lease_key(name);
    let input = json!({ "lease": name });
    let fingerprint = crate::value::digest::sha256_hex(
        crate::value::canonical::to_canonical(&input)
            .unwrap_or_default()
            .as_bytes(),
    );
    let intent = Intent {
        tool: LEASE_TOOL.to_owned(),
        class: EffectClass::Idempotent,
        run_id: LEASE_TOOL.to_owned(),
        thread_id: None,
        call_id: Some(holder.instance.clone()),
        fingerprint,
        input,
        ttl_ms: None,
        approval: None,
        approval_ttl_ms: None,
        holder: Some(Box::new(holder.clone())),
    };
    match store.claim(&key, intent, lease_ms, true).await? {
        OpOutcome::Claimed { attempt, .. } => Ok(LeaseAnswer::Held(ElectedLease {
            name: name.to_owned(),
            key,
            attempt,
        })),
        OpOutcome::InFlight(rec) => Ok(LeaseAnswer::HeldBy {
            holder: rec.holder,
            until: rec.lease_until,
        }),
        other => Err(StoreError::Backend(format!(
            "the lease {name:?} (key {key}) is in a state no lease takes ({other:?}): remove its record with `effect-tool` and start again"
        ))),
    }
}
