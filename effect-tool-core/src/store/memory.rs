//! The in-memory journal: for tests and single-process use. Nothing survives the process.
//!
//! Durability, per class: none for any class (a claim and a record are kept only in this
//! process's memory, so [`Op::needs_flush`] is not read). A process that dies loses the journal,
//! and with it the evidence a compensable or irreversible claim is kept for: use the SQLite or
//! PostgreSQL journal wherever calls must survive the process.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use super::{Filter, Recorded, Store, collectable};
use crate::call::error::StoreError;
use crate::decide::record::{AuditEntry, Current, EffectRecord, Millis, Op, OpOutcome, transition};

/// A journal held in memory, shared by every clone of an `Arc` around it.
#[derive(Debug, Default)]
pub struct MemoryStore {
    inner: Mutex<Inner>,
    /// This journal's marker secret, random, made on first use.
    marker_secret: std::sync::OnceLock<crate::value::marker::MarkerSecret>,
    /// Woken by every person's decision ([`Store::changed`]).
    decided: tokio::sync::Notify,
    /// The journal's clock (the system's, unless a simulation set one).
    clock: super::StoreClock,
}

#[derive(Debug, Default)]
struct Inner {
    records: HashMap<String, Arc<EffectRecord>, foldhash::fast::RandomState>,
    audit: Vec<AuditEntry>,
    /// Each tool's output schema ([`Store::put_output_schema`]).
    output_schemas: HashMap<String, serde_json::Value, foldhash::fast::RandomState>,
    /// The runs' budgets ([`Store::spend`]): per (run, budget), the total and the keys charged.
    budgets: HashMap<(String, String), BudgetSpent, foldhash::fast::RandomState>,
    /// The standing approvals ([`Store::put_grant`]), oldest first.
    grants: Vec<crate::decide::grant::Grant>,
}

/// What a run spent of one budget.
#[derive(Debug, Default)]
struct BudgetSpent {
    total: u64,
    keys: std::collections::HashSet<String>,
}

impl MemoryStore {
    /// An empty journal.
    pub fn new() -> Self {
        MemoryStore::default()
    }

    /// An empty journal on `clock` instead of the system's (milliseconds since the Unix
    /// epoch): every lease, expiry and audit time it writes is read from it. For simulations
    /// ([`crate::testing::sim`]), whose time is tokio's paused clock.
    #[cfg(feature = "testing")]
    pub fn with_clock(clock: impl Fn() -> Millis + Send + Sync + 'static) -> Self {
        MemoryStore {
            clock: super::StoreClock::new(clock),
            ..MemoryStore::default()
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave a half-applied transition (it takes a
        // record's parts only once nothing can panic, and the write is a single assignment or
        // insert), so a poisoned lock is safe to keep using.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Apply `op` under the lock: [`transition`] on the record, the record it writes put in
    /// its place, and the transition's audit entry appended.
    fn apply_now(&self, key: &str, op: Op) -> Result<OpOutcome, StoreError> {
        let decision = op.is_decision();
        let outcome = self.transition_now(key, op)?;
        if decision {
            self.decided.notify_waiters();
        }
        Ok(outcome)
    }

    fn transition_now(&self, key: &str, op: Op) -> Result<OpOutcome, StoreError> {
        let now = self.now();
        let mut inner = self.lock();
        let t = match inner.records.get_mut(key) {
            None => {
                let t = transition(key, Current::Absent, op, now)?;
                if let Some(rec) = &t.write {
                    inner.records.insert(key.to_owned(), Arc::clone(rec));
                }
                t
            }
            Some(slot) => {
                // A record nobody else holds (no reader kept its `Arc`) is replaced by what the
                // transition writes, so its parts move into that record instead of being copied.
                let t = match Arc::get_mut(slot) {
                    Some(rec) => transition(key, Current::Replaced(rec), op, now)?,
                    None => transition(key, Some(&**slot), op, now)?,
                };
                if let Some(rec) = &t.write {
                    *slot = Arc::clone(rec);
                }
                t
            }
        };
        if t.write.is_some()
            && let Some(entry) = t.audit
        {
            inner.audit.push(entry);
        }
        Ok(t.outcome)
    }
}

#[async_trait]
impl Store for MemoryStore {
    async fn changed(&self, _key: &str) {
        self.decided.notified().await
    }

    fn backend_name(&self) -> &'static str {
        "memory"
    }

    fn now(&self) -> Millis {
        self.clock.now()
    }

    async fn marker_secret(&self) -> Result<Option<crate::value::marker::MarkerSecret>, StoreError> {
        if let Some(secret) = self.marker_secret.get() {
            return Ok(Some(secret.clone()));
        }
        let fresh = crate::value::marker::MarkerSecret::random()
            .map_err(|e| StoreError::Backend(format!("cannot create the journal's marker secret: {e}")))?;
        Ok(Some(self.marker_secret.get_or_init(|| fresh).clone()))
    }

    async fn put_output_schema(&self, tool: &str, schema: &serde_json::Value) -> Result<(), StoreError> {
        self.lock().output_schemas.insert(tool.to_owned(), schema.clone());
        Ok(())
    }

    async fn output_schema(&self, tool: &str) -> Result<Option<serde_json::Value>, StoreError> {
        Ok(self.lock().output_schemas.get(tool).cloned())
    }

    /// Under the store's one lock.
    async fn spend(
        &self,
        spend: &crate::decide::budget::Spend,
    ) -> Result<crate::decide::budget::SpendOutcome, StoreError> {
        use crate::decide::budget::{SpendOutcome, Spent, decide};
        let mut inner = self.lock();
        let decided = decide(spend, |budget| {
            inner
                .budgets
                .get(&(spend.run_id.clone(), budget.to_owned()))
                .map_or(Spent::default(), |b| Spent {
                    total: b.total,
                    charged: b.keys.contains(&spend.key),
                })
        });
        match decided {
            Err(overdraft) => Ok(SpendOutcome::Exceeded(overdraft)),
            Ok(charges) => {
                for charge in &charges {
                    let b = inner
                        .budgets
                        .entry((spend.run_id.clone(), charge.budget.clone()))
                        .or_default();
                    b.total = b.total.saturating_add(charge.amount);
                    b.keys.insert(spend.key.clone());
                }
                Ok(SpendOutcome::Spent {
                    charged: charges.into_iter().map(|c| c.budget).collect(),
                })
            }
        }
    }

    /// Under the store's one lock, with its audit entry.
    async fn put_grant(&self, grant: &crate::decide::grant::Grant) -> Result<(), StoreError> {
        let mut inner = self.lock();
        if inner.grants.iter().any(|g| g.id == grant.id) {
            return Err(StoreError::Backend(format!(
                "a grant `{}` exists already: nothing was granted; make it again (it gets a new id)",
                grant.id
            )));
        }
        inner.grants.push(grant.clone());
        inner.audit.push(crate::decide::grant::created_entry(grant));
        Ok(())
    }

    async fn grants(&self, tool: Option<&str>) -> Result<Vec<crate::decide::grant::Grant>, StoreError> {
        Ok(self
            .lock()
            .grants
            .iter()
            .filter(|g| tool.is_none_or(|t| g.tool == t))
            .cloned()
            .collect())
    }

    /// Under the store's one lock, with its audit entry.
    async fn revoke_grant(&self, id: &str, by: &str) -> Result<Option<crate::decide::grant::Grant>, StoreError> {
        let now = self.now();
        let mut inner = self.lock();
        let Some(grant) = inner.grants.iter_mut().find(|g| g.id == id) else {
            return Ok(None);
        };
        let entry = crate::decide::grant::revoke(grant, by, now);
        let grant = grant.clone();
        inner.audit.extend(entry);
        Ok(Some(grant))
    }

    async fn get(&self, key: &str) -> Result<Option<EffectRecord>, StoreError> {
        Ok(self.lock().records.get(key).map(|r| EffectRecord::clone(r)))
    }

    async fn lookup(&self, key: &str) -> Result<Option<Arc<EffectRecord>>, StoreError> {
        Ok(self.lock().records.get(key).cloned())
    }

    async fn lookup_recorded(&self, key: &str) -> Result<Option<Recorded>, StoreError> {
        Ok(self.lock().records.get(key).cloned().map(Recorded::from))
    }

    async fn apply(&self, key: &str, op: Op) -> Result<OpOutcome, StoreError> {
        self.apply_now(key, op)
    }

    /// The same as [`Store::apply`] (a claim's read is a map lookup under the same lock), without
    /// the default's second future.
    async fn claim_unseen(&self, key: &str, op: Op) -> Result<OpOutcome, StoreError> {
        self.apply_now(key, op)
    }

    async fn list(&self, filter: &Filter) -> Result<Vec<EffectRecord>, StoreError> {
        let inner = self.lock();
        let mut out: Vec<EffectRecord> = inner
            .records
            .values()
            .filter(|r| filter.matches(r))
            .map(|r| EffectRecord::clone(r))
            .collect();
        out.sort_by(|a, b| b.updated_at.cmp(&a.updated_at).then_with(|| a.key.cmp(&b.key)));
        if let Some(limit) = filter.limit {
            out.truncate(limit);
        }
        Ok(out)
    }

    async fn gc(&self, now: Millis) -> Result<u64, StoreError> {
        let mut inner = self.lock();
        let before = inner.records.len();
        inner.records.retain(|_, r| !collectable(r, now));
        Ok((before - inner.records.len()) as u64)
    }

    async fn audit(&self, key: Option<&str>) -> Result<Vec<AuditEntry>, StoreError> {
        let inner = self.lock();
        Ok(inner
            .audit
            .iter()
            .filter(|e| key.is_none_or(|k| e.key == k))
            .cloned()
            .collect())
    }

    async fn append_audit(&self, entry: AuditEntry) -> Result<(), StoreError> {
        self.lock().audit.push(entry);
        Ok(())
    }
}
