//! The engine's store, instrumented: every store operation the engine makes runs in a child span
//! of the call's `execute_tool` span, and its latency goes to the histogram
//! `effect_tool_store_operation_duration_seconds` (labels `operation`, `store`).
//!
//! [`Engine::with_config`](super::Engine::with_config) wraps the application's store in an
//! [`InstrumentedStore`], so the stores themselves know nothing of spans or metrics. Every
//! method of [`Store`] is forwarded, the provided ones included, so a store's own overrides
//! (`claim_answers_replays`, `claim_unseen`, `lookup_recorded`, ...) are kept.
//!
//! Span: `store` at level `INFO`, with `otel.name` `effect_tool.store {operation}`,
//! `db.system.name` (the store's [`Store::backend_name`]), `db.operation.name` and
//! `effect_tool.key`; `error.type` `store` when the operation failed.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use tracing::Instrument;

use crate::call::error::StoreError;
use crate::decide::record::{AuditEntry, EffectRecord, Millis, Op, OpOutcome};
use crate::store::{Filter, Listing, Recorded, Store};
use crate::value::marker::MarkerSecret;

/// What an `async fn` of [`Store`] returns once `async_trait` has rewritten it.
type BoxFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

/// A store whose operations are traced and timed (see the module docs).
pub(crate) struct InstrumentedStore {
    inner: Arc<dyn Store>,
    backend: &'static str,
}

impl InstrumentedStore {
    pub(crate) fn new(inner: Arc<dyn Store>) -> Self {
        let backend = inner.backend_name();
        InstrumentedStore { inner, backend }
    }

    /// Run `fut`, the store operation `operation` on `key`, in its span, and time it.
    async fn observed<T>(
        &self,
        operation: &'static str,
        key: Option<&str>,
        fut: impl std::future::Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        let span = tracing::info_span!(
            "store",
            otel.name = %StoreSpanName(operation),
            db.system.name = self.backend,
            db.operation.name = operation,
            effect_tool.key = key,
            error.type = tracing::field::Empty,
        );
        let start = Instant::now();
        let result = fut.instrument(span.clone()).await;
        if result.is_err() {
            span.record("error.type", "store");
        }
        metrics::histogram!(
            "effect_tool_store_operation_duration_seconds",
            "operation" => operation,
            "store" => self.backend,
        )
        .record(start.elapsed().as_secs_f64());
        result
    }
}

/// `effect_tool.store {operation}`, written only when a span is recorded.
struct StoreSpanName(&'static str);

impl std::fmt::Display for StoreSpanName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "effect_tool.store {}", self.0)
    }
}

#[async_trait]
impl Store for InstrumentedStore {
    async fn get(&self, key: &str) -> Result<Option<EffectRecord>, StoreError> {
        self.observed("get", Some(key), self.inner.get(key)).await
    }
    async fn lookup(&self, key: &str) -> Result<Option<Arc<EffectRecord>>, StoreError> {
        self.observed("lookup", Some(key), self.inner.lookup(key)).await
    }
    fn lookup_recorded<'life0, 'life1, 'async_trait>(
        &'life0 self,
        key: &'life1 str,
    ) -> BoxFuture<'async_trait, Result<Option<Recorded>, StoreError>>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        Self: 'async_trait,
    {
        Box::pin(self.observed("lookup", Some(key), self.inner.lookup_recorded(key)))
    }
    fn claim_answers_replays(&self) -> bool {
        self.inner.claim_answers_replays()
    }
    fn apply<'life0, 'life1, 'async_trait>(
        &'life0 self,
        key: &'life1 str,
        op: Op,
    ) -> BoxFuture<'async_trait, Result<OpOutcome, StoreError>>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        Self: 'async_trait,
    {
        let name = op.name();
        Box::pin(self.observed(name, Some(key), self.inner.apply(key, op)))
    }
    fn claim_unseen<'life0, 'life1, 'async_trait>(
        &'life0 self,
        key: &'life1 str,
        op: Op,
    ) -> BoxFuture<'async_trait, Result<OpOutcome, StoreError>>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        Self: 'async_trait,
    {
        let name = op.name();
        Box::pin(self.observed(name, Some(key), self.inner.claim_unseen(key, op)))
    }
    async fn list(&self, filter: &Filter) -> Result<Vec<EffectRecord>, StoreError> {
        self.observed("list", None, self.inner.list(filter)).await
    }
    async fn list_report(&self, filter: &Filter) -> Result<Listing, StoreError> {
        self.observed("list", None, self.inner.list_report(filter)).await
    }
    async fn gc(&self, now: Millis) -> Result<u64, StoreError> {
        self.observed("gc", None, self.inner.gc(now)).await
    }
    async fn audit(&self, key: Option<&str>) -> Result<Vec<AuditEntry>, StoreError> {
        self.observed("audit", key, self.inner.audit(key)).await
    }
    async fn append_audit(&self, entry: AuditEntry) -> Result<(), StoreError> {
        let key = entry.key.clone();
        self.observed("append-audit", Some(&key), self.inner.append_audit(entry))
            .await
    }
    fn now(&self) -> Millis {
        self.inner.now()
    }
    async fn marker_secret(&self) -> Result<Option<MarkerSecret>, StoreError> {
        self.observed("marker-secret", None, self.inner.marker_secret()).await
    }
    async fn put_output_schema(&self, tool: &str, schema: &serde_json::Value) -> Result<(), StoreError> {
        self.observed("put-output-schema", None, self.inner.put_output_schema(tool, schema))
            .await
    }
    async fn output_schema(&self, tool: &str) -> Result<Option<serde_json::Value>, StoreError> {
        self.observed("output-schema", None, self.inner.output_schema(tool))
            .await
    }
    fn backend_name(&self) -> &'static str {
        self.backend
    }
    async fn changed(&self, key: &str) {
        self.inner.changed(key).await
    }
}
