//! Wrapping a store, written once: a [`StoreLayer`] sees every operation of the store it wraps
//! (to trace it, time it, inject faults into it), and [`Layered`] forwards every method of
//! [`Store`], the provided ones included, so that a wrapper cannot forget one and silently lose
//! a backend's fast path (`lookup_recorded`, `claim_unseen`, `claim_answers_replays`, ...) or a
//! capability (`marker_secret`, `put_output_schema`, `changed`).
//!
//! The engine's instrumentation ([`crate::engine`]'s `InstrumentedStore`) and the simulation's
//! faulty journal (`testing::sim`) are layers. A new method of [`Store`] gets its forward here,
//! once, and in the test below, which fails for a method that does not reach the inner store.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

use super::{Filter, Listing, Recorded, Store};
use crate::call::error::StoreError;
use crate::decide::budget::{Spend, SpendOutcome};
use crate::decide::grant::Grant;
use crate::decide::record::{AuditEntry, EffectRecord, Millis, Op, OpOutcome};
use crate::value::marker::MarkerSecret;

/// What an `async fn` of [`Store`] returns once `async_trait` has rewritten it.
pub(crate) type BoxFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

/// What an operation does to the journal, for a layer that treats them differently (the
/// simulation injects faults into reads and writes, not into setup).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// Reads records or the audit trail.
    Read,
    /// Writes records or the audit trail.
    Write,
    /// Reads or writes the journal's meta rows (marker secret, output schemas), once per
    /// process or tool.
    Setup,
}

/// One operation of the wrapped store, as a layer sees it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Operation<'a> {
    /// Its name, for spans, metrics and logs: an [`Op::name`] for `apply` and `claim_unseen`,
    /// else the method's (`get`, `lookup`, `list`, `gc`, `audit`, `append-audit`, ...).
    pub name: &'static str,
    /// The key it is about, if one.
    pub key: Option<&'a str>,
    /// What it does to the journal.
    #[cfg_attr(not(feature = "testing"), allow(dead_code))]
    pub access: Access,
}

/// A short description of an operation's answer, for a layer's log.
pub(crate) trait Brief {
    /// The description (`found`, `3 records`, `claimed attempt 2`, ...).
    #[cfg_attr(not(feature = "testing"), allow(dead_code))]
    fn brief(&self) -> String;
}

/// What a wrapper does around the operations of the store it wraps. Every hook but
/// [`StoreLayer::around`] has a default that changes nothing.
pub(crate) trait StoreLayer: Send + Sync + 'static {
    /// Run `fut`, the inner store's answer to `op`, and give its answer (or another).
    fn around<'a, T: Brief + Send + 'a>(
        &'a self,
        op: Operation<'a>,
        fut: BoxFuture<'a, Result<T, StoreError>>,
    ) -> BoxFuture<'a, Result<T, StoreError>>;

    /// The same for an [`Op`] applied (`apply`, `claim_unseen`): by default [`StoreLayer::around`].
    fn around_apply<'a>(
        &'a self,
        op: Operation<'a>,
        fut: BoxFuture<'a, Result<OpOutcome, StoreError>>,
    ) -> BoxFuture<'a, Result<OpOutcome, StoreError>> {
        self.around(op, fut)
    }

    /// The op passed on to the inner store in place of `op` (by default `op` itself).
    fn rewrite(&self, op: Op) -> Op {
        op
    }

    /// The audit entry appended to the inner store in place of `entry` (by default `entry`
    /// itself).
    fn rewrite_audit(&self, entry: AuditEntry) -> AuditEntry {
        entry
    }

    /// The clock the wrapper shows, given the inner store's `now` (by default the same).
    fn now(&self, inner: Millis) -> Millis {
        inner
    }
}

/// `inner` seen through `layer`: a [`Store`] that forwards every method of the trait to
/// `inner`, through the layer's hooks.
pub(crate) struct Layered<L> {
    inner: Arc<dyn Store>,
    layer: L,
}

impl<L: StoreLayer> Layered<L> {
    /// `inner` seen through `layer`.
    pub(crate) fn new(inner: Arc<dyn Store>, layer: L) -> Self {
        Layered { inner, layer }
    }
}

fn op<'a>(name: &'static str, key: Option<&'a str>, access: Access) -> Operation<'a> {
    Operation { name, key, access }
}

#[async_trait]
impl<L: StoreLayer> Store for Layered<L> {
    async fn get(&self, key: &str) -> Result<Option<EffectRecord>, StoreError> {
        let fut = self.inner.get(key);
        self.layer.around(op("get", Some(key), Access::Read), fut).await
    }
    async fn lookup(&self, key: &str) -> Result<Option<Arc<EffectRecord>>, StoreError> {
        let fut = self.inner.lookup(key);
        self.layer.around(op("lookup", Some(key), Access::Read), fut).await
    }
    // The engine's path: these three hand on the layer's future instead of boxing it in one
    // more.
    fn lookup_recorded<'life0, 'life1, 'async_trait>(
        &'life0 self,
        key: &'life1 str,
    ) -> BoxFuture<'async_trait, Result<Option<Recorded>, StoreError>>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        Self: 'async_trait,
    {
        let fut = self.inner.lookup_recorded(key);
        self.layer.around(op("lookup", Some(key), Access::Read), fut)
    }
    fn apply<'life0, 'life1, 'async_trait>(
        &'life0 self,
        key: &'life1 str,
        o: Op,
    ) -> BoxFuture<'async_trait, Result<OpOutcome, StoreError>>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        Self: 'async_trait,
    {
        let name = o.name();
        let fut = self.inner.apply(key, self.layer.rewrite(o));
        self.layer.around_apply(op(name, Some(key), Access::Write), fut)
    }
    fn claim_unseen<'life0, 'life1, 'async_trait>(
        &'life0 self,
        key: &'life1 str,
        o: Op,
    ) -> BoxFuture<'async_trait, Result<OpOutcome, StoreError>>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        Self: 'async_trait,
    {
        let name = o.name();
        let fut = self.inner.claim_unseen(key, self.layer.rewrite(o));
        self.layer.around_apply(op(name, Some(key), Access::Write), fut)
    }
    fn claim_answers_replays(&self) -> bool {
        self.inner.claim_answers_replays()
    }
    async fn list(&self, filter: &Filter) -> Result<Vec<EffectRecord>, StoreError> {
        let fut = self.inner.list(filter);
        self.layer.around(op("list", None, Access::Read), fut).await
    }
    async fn list_report(&self, filter: &Filter) -> Result<Listing, StoreError> {
        let fut = self.inner.list_report(filter);
        self.layer.around(op("list", None, Access::Read), fut).await
    }
    async fn gc(&self, now: Millis) -> Result<u64, StoreError> {
        let fut = self.inner.gc(now);
        self.layer.around(op("gc", None, Access::Write), fut).await
    }
    async fn audit(&self, key: Option<&str>) -> Result<Vec<AuditEntry>, StoreError> {
        let fut = self.inner.audit(key);
        self.layer.around(op("audit", key, Access::Read), fut).await
    }
    async fn append_audit(&self, entry: AuditEntry) -> Result<(), StoreError> {
        let key = entry.key.clone();
        let fut = self.inner.append_audit(self.layer.rewrite_audit(entry));
        self.layer
            .around(op("append-audit", Some(&key), Access::Write), fut)
            .await
    }
    fn now(&self) -> Millis {
        self.layer.now(self.inner.now())
    }
    async fn marker_secret(&self) -> Result<Option<MarkerSecret>, StoreError> {
        let fut = self.inner.marker_secret();
        self.layer.around(op("marker-secret", None, Access::Setup), fut).await
    }
    async fn put_output_schema(&self, tool: &str, schema: &Value) -> Result<(), StoreError> {
        let fut = self.inner.put_output_schema(tool, schema);
        self.layer
            .around(op("put-output-schema", None, Access::Setup), fut)
            .await
    }
    async fn output_schema(&self, tool: &str) -> Result<Option<Value>, StoreError> {
        let fut = self.inner.output_schema(tool);
        self.layer.around(op("output-schema", None, Access::Setup), fut).await
    }
    async fn changed(&self, key: &str) {
        self.inner.changed(key).await
    }
    /// Forwarded as it is: the operations inside the transaction are the transaction's own
    /// (a layer sees its opening, not each of them).
    async fn begin_transaction(&self, key: &str) -> Result<Option<Box<dyn super::JournalTransaction>>, StoreError> {
        let fut = self.inner.begin_transaction(key);
        self.layer
            .around(op("begin-transaction", Some(key), Access::Write), fut)
            .await
    }
    async fn spend(&self, spend: &Spend) -> Result<SpendOutcome, StoreError> {
        let fut = self.inner.spend(spend);
        self.layer
            .around(op("spend", Some(&spend.key), Access::Write), fut)
            .await
    }
    async fn put_grant(&self, grant: &Grant) -> Result<(), StoreError> {
        let fut = self.inner.put_grant(grant);
        self.layer.around(op("put-grant", None, Access::Write), fut).await
    }
    async fn grants(&self, tool: Option<&str>) -> Result<Vec<Grant>, StoreError> {
        let fut = self.inner.grants(tool);
        self.layer.around(op("grants", None, Access::Read), fut).await
    }
    async fn grant(&self, id: &str) -> Result<Option<Grant>, StoreError> {
        let fut = self.inner.grant(id);
        self.layer.around(op("grant", None, Access::Read), fut).await
    }
    async fn revoke_grant(&self, id: &str, by: &str) -> Result<Option<Grant>, StoreError> {
        let fut = self.inner.revoke_grant(id, by);
        self.layer.around(op("revoke-grant", None, Access::Write), fut).await
    }
    fn backend_name(&self) -> &'static str {
        self.inner.backend_name()
    }
}

impl Brief for Vec<Grant> {
    fn brief(&self) -> String {
        format!("{} grants", self.len())
    }
}

impl Brief for Option<Grant> {
    fn brief(&self) -> String {
        found(self)
    }
}

fn found<T>(found: &Option<T>) -> String {
    if found.is_some() {
        "found".to_owned()
    } else {
        "none".to_owned()
    }
}

impl Brief for Option<EffectRecord> {
    fn brief(&self) -> String {
        self.as_ref()
            .map_or("none".to_owned(), |r| format!("{:?} attempt {}", r.state, r.attempt))
    }
}

impl Brief for Option<Arc<EffectRecord>> {
    fn brief(&self) -> String {
        found(self)
    }
}

impl Brief for Option<Recorded> {
    fn brief(&self) -> String {
        self.as_ref().map_or("none".to_owned(), |r| format!("{:?}", r.state()))
    }
}

impl Brief for SpendOutcome {
    fn brief(&self) -> String {
        match self {
            SpendOutcome::Spent { charged } => format!("spent {}", charged.join(",")),
            SpendOutcome::Exceeded(o) => format!("refused: {} has {} left, asks {}", o.budget, o.left(), o.asks),
        }
    }
}

impl Brief for OpOutcome {
    fn brief(&self) -> String {
        match self {
            OpOutcome::Claimed { attempt, previous, .. } => match previous {
                Some(p) => format!("claimed attempt {attempt}, taking over {p:?}"),
                None => format!("claimed attempt {attempt}"),
            },
            OpOutcome::Recorded(r) => format!("recorded {:?}", r.output),
            OpOutcome::InFlight(r) => format!("held live by attempt {}", r.attempt),
            OpOutcome::Done(r) => format!("now {:?} (attempt {})", r.state, r.attempt),
            other => {
                let text = format!("{other:?}");
                text.split('(').next().unwrap_or_default().to_owned()
            }
        }
    }
}

impl Brief for Vec<EffectRecord> {
    fn brief(&self) -> String {
        format!("{} records", self.len())
    }
}

impl Brief for Listing {
    fn brief(&self) -> String {
        format!("{} records", self.records.len())
    }
}

impl Brief for u64 {
    fn brief(&self) -> String {
        format!("{self} dropped")
    }
}

impl Brief for Vec<AuditEntry> {
    fn brief(&self) -> String {
        format!("{} entries", self.len())
    }
}

impl Brief for () {
    fn brief(&self) -> String {
        "done".to_owned()
    }
}

impl Brief for Option<MarkerSecret> {
    fn brief(&self) -> String {
        found(self)
    }
}

impl Brief for Option<Box<dyn super::JournalTransaction>> {
    fn brief(&self) -> String {
        if self.is_some() { "open" } else { "no transactions" }.to_owned()
    }
}

impl Brief for Option<Value> {
    fn brief(&self) -> String {
        found(self)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::decide::record::RecordState;

    /// A store that overrides every method of [`Store`] and notes which were called.
    #[derive(Default)]
    struct Probe(Mutex<Vec<&'static str>>);

    impl Probe {
        fn saw(&self, name: &'static str) {
            self.0.lock().unwrap().push(name);
        }
    }

    #[async_trait]
    impl Store for Probe {
        async fn get(&self, _: &str) -> Result<Option<EffectRecord>, StoreError> {
            self.saw("get");
            Ok(None)
        }
        async fn lookup(&self, _: &str) -> Result<Option<Arc<EffectRecord>>, StoreError> {
            self.saw("lookup");
            Ok(None)
        }
        async fn lookup_recorded(&self, _: &str) -> Result<Option<Recorded>, StoreError> {
            self.saw("lookup_recorded");
            Ok(Some(Recorded::new(
                RecordState::Completed,
                String::new(),
                None,
                None,
                None,
            )))
        }
        fn claim_answers_replays(&self) -> bool {
            self.saw("claim_answers_replays");
            true
        }
        async fn apply(&self, _: &str, _: Op) -> Result<OpOutcome, StoreError> {
            self.saw("apply");
            Err(StoreError::Backend("probe".into()))
        }
        async fn claim_unseen(&self, _: &str, _: Op) -> Result<OpOutcome, StoreError> {
            self.saw("claim_unseen");
            Err(StoreError::Backend("probe".into()))
        }
        async fn list(&self, _: &Filter) -> Result<Vec<EffectRecord>, StoreError> {
            self.saw("list");
            Ok(Vec::new())
        }
        async fn list_report(&self, _: &Filter) -> Result<Listing, StoreError> {
            self.saw("list_report");
            Ok(Listing::default())
        }
        async fn gc(&self, _: Millis) -> Result<u64, StoreError> {
            self.saw("gc");
            Ok(0)
        }
        async fn audit(&self, _: Option<&str>) -> Result<Vec<AuditEntry>, StoreError> {
            self.saw("audit");
            Ok(Vec::new())
        }
        async fn append_audit(&self, _: AuditEntry) -> Result<(), StoreError> {
            self.saw("append_audit");
            Ok(())
        }
        fn now(&self) -> Millis {
            self.saw("now");
            7
        }
        async fn marker_secret(&self) -> Result<Option<MarkerSecret>, StoreError> {
            self.saw("marker_secret");
            Ok(None)
        }
        async fn put_output_schema(&self, _: &str, _: &Value) -> Result<(), StoreError> {
            self.saw("put_output_schema");
            Ok(())
        }
        async fn output_schema(&self, _: &str) -> Result<Option<Value>, StoreError> {
            self.saw("output_schema");
            Ok(None)
        }
        async fn changed(&self, _: &str) {
            self.saw("changed");
        }
        async fn begin_transaction(
            &self,
            _: &str,
        ) -> Result<Option<Box<dyn crate::store::JournalTransaction>>, StoreError> {
            self.saw("begin_transaction");
            Ok(None)
        }
        async fn spend(&self, _: &Spend) -> Result<SpendOutcome, StoreError> {
            self.saw("spend");
            Ok(SpendOutcome::Spent { charged: Vec::new() })
        }
        async fn put_grant(&self, _: &Grant) -> Result<(), StoreError> {
            self.saw("put_grant");
            Ok(())
        }
        async fn grants(&self, _: Option<&str>) -> Result<Vec<Grant>, StoreError> {
            self.saw("grants");
            Ok(Vec::new())
        }
        async fn grant(&self, _: &str) -> Result<Option<Grant>, StoreError> {
            self.saw("grant");
            Ok(None)
        }
        async fn revoke_grant(&self, _: &str, _: &str) -> Result<Option<Grant>, StoreError> {
            self.saw("revoke_grant");
            Ok(None)
        }
        fn backend_name(&self) -> &'static str {
            self.saw("backend_name");
            "probe"
        }
    }

    /// Every method of [`Store`], in the order [`call_every_method`] calls them.
    const EVERY_METHOD: &[&str] = &[
        "get",
        "lookup",
        "lookup_recorded",
        "claim_answers_replays",
        "apply",
        "claim_unseen",
        "list",
        "list_report",
        "gc",
        "audit",
        "append_audit",
        "now",
        "marker_secret",
        "put_output_schema",
        "output_schema",
        "changed",
        "begin_transaction",
        "spend",
        "put_grant",
        "grants",
        "grant",
        "revoke_grant",
        "backend_name",
    ];

    async fn call_every_method(store: &dyn Store) {
        let op = || Op::MarkCompensated { by: "probe".into() };
        let _ = store.get("k").await;
        let _ = store.lookup("k").await;
        let _ = store.lookup_recorded("k").await;
        let _ = store.claim_answers_replays();
        let _ = store.apply("k", op()).await;
        let _ = store.claim_unseen("k", op()).await;
        let _ = store.list(&Filter::all()).await;
        let _ = store.list_report(&Filter::all()).await;
        let _ = store.gc(0).await;
        let _ = store.audit(None).await;
        let _ = store
            .append_audit(AuditEntry {
                key: "k".into(),
                at: 0,
                actor: "probe".into(),
                action: "probe".into(),
                detail: None,
            })
            .await;
        let _ = store.now();
        let _ = store.marker_secret().await;
        let _ = store.put_output_schema("t", &Value::Null).await;
        let _ = store.output_schema("t").await;
        store.changed("k").await;
        let _ = store.begin_transaction("k").await;
        let _ = store
            .spend(&Spend {
                run_id: "r".into(),
                key: "k".into(),
                tool: "t".into(),
                charges: Vec::new(),
            })
            .await;
        let grant = crate::decide::grant::Grant {
            id: "g".into(),
            tool: "t".into(),
            role: "r".into(),
            granted_by: "probe".into(),
            granter_names: Vec::new(),
            when: Vec::new(),
            valid_from: 0,
            valid_until: 1,
            run_id: None,
            principal: None,
            created_at: 0,
            revoked: None,
        };
        let _ = store.put_grant(&grant).await;
        let _ = store.grants(None).await;
        let _ = store.grant("g").await;
        let _ = store.revoke_grant("g", "probe").await;
        let _ = store.backend_name();
    }

    /// A layer that changes nothing.
    struct Through;

    impl StoreLayer for Through {
        fn around<'a, T: Brief + Send + 'a>(
            &'a self,
            _: Operation<'a>,
            fut: BoxFuture<'a, Result<T, StoreError>>,
        ) -> BoxFuture<'a, Result<T, StoreError>> {
            fut
        }
    }

    #[tokio::test]
    async fn a_layered_store_forwards_every_method_of_the_trait_to_the_store_it_wraps() {
        let probe = Arc::new(Probe::default());
        let layered = Layered::new(probe.clone(), Through);
        probe.0.lock().unwrap().clear();
        call_every_method(&layered).await;
        assert_eq!(*probe.0.lock().unwrap(), EVERY_METHOD);
    }

    #[tokio::test]
    async fn an_arc_of_a_store_forwards_every_method_of_the_trait_to_the_store_in_it() {
        let probe = Arc::new(Probe::default());
        call_every_method(&probe.clone()).await;
        assert_eq!(*probe.0.lock().unwrap(), EVERY_METHOD);
    }
}
