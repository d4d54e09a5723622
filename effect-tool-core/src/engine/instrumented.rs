//! The engine's store, instrumented: every store operation the engine makes runs in a child span
//! of the call's `execute_tool` span, and its latency goes to the histogram
//! `effect_tool_store_operation_duration_seconds` (labels `operation`, `store`).
//!
//! [`Engine::with_config`](super::Engine::with_config) wraps the application's store in an
//! [`InstrumentedStore`], so the stores themselves know nothing of spans or metrics. It is a
//! [`StoreLayer`]: [`Layered`](crate::store::Layered) forwards every method of
//! [`Store`](crate::store::Store), the provided ones included, so a store's own overrides
//! (`claim_answers_replays`, `claim_unseen`, `lookup_recorded`, ...) are kept. Setup reads and
//! writes (`marker-secret`, `put-output-schema`, `output-schema`) are traced and timed too.
//!
//! Span: `store` at level `INFO`, with `otel.name` `effect_tool.store {operation}`,
//! `db.system.name` (the store's [`Store::backend_name`]), `db.operation.name` and
//! `effect_tool.key`; `error.type` `store` when the operation failed.

use std::sync::Arc;
use std::time::Instant;

use tracing::Instrument;

use serde_json::Value;

use crate::call::error::StoreError;
use crate::call::redact::{Redactor, Site};
use crate::decide::record::{AuditEntry, Op, Verdict};
use crate::store::{BoxFuture, Brief, Layered, Operation, Store, StoreLayer};

/// A store whose operations are traced and timed (see the module docs), and whose writes go
/// through the engine's redaction hook.
pub(crate) type InstrumentedStore = Layered<Instruments>;

/// The spans and the histogram of a store's operations, and the redaction of its writes.
pub(crate) struct Instruments {
    backend: &'static str,
    redactor: RedactorSlot,
    /// The histogram's keys of the operations every journaled call makes ([`HOT`]), built
    /// once per store: recording their latency then builds no key (a vector of labels and its
    /// hash) per operation, whether a recorder is installed or not.
    hot: Vec<(&'static str, metrics::Key)>,
}

/// The histogram of a store operation's latency.
const HISTOGRAM: &str = "effect_tool_store_operation_duration_seconds";

/// The operations of a call's path (a lookup, a claim, a completion, a `one_write` call's
/// record) and of a running tool (renewals): their histogram keys are made once
/// ([`Instruments::hot`]).
const HOT: [&str; 5] = ["lookup", "claim", "complete", "renew", "record"];

/// What `metrics::histogram!` in this module passes the recorder with each key.
static METADATA: metrics::Metadata<'static> =
    metrics::Metadata::new(module_path!(), metrics::Level::INFO, Some(module_path!()));

/// `inner`, its operations traced and timed, its writes redacted by what `redactor` holds.
pub(crate) fn instrumented(inner: Arc<dyn Store>, redactor: RedactorSlot) -> InstrumentedStore {
    let backend = inner.backend_name();
    let hot = HOT
        .iter()
        .map(|&operation| {
            let labels = vec![
                metrics::Label::new("operation", operation),
                metrics::Label::new("store", backend),
            ];
            (operation, metrics::Key::from_parts(HISTOGRAM, labels))
        })
        .collect();
    Layered::new(inner, Instruments { backend, redactor, hot })
}

/// The engine's redaction hook ([`Engine::with_redactor`](super::Engine::with_redactor)), set
/// at most once, shared by the engine (for its logs) and its store's layer (for its writes).
#[derive(Clone, Default)]
pub(crate) struct RedactorSlot(Arc<std::sync::OnceLock<Arc<dyn Redactor>>>);

impl RedactorSlot {
    /// Set the hook; `Err` when one is set already.
    pub(crate) fn set(&self, redactor: Arc<dyn Redactor>) -> Result<(), ()> {
        self.0.set(redactor).map_err(drop)
    }

    /// `text` through the hook, if one is set.
    pub(crate) fn text(&self, site: Site, mut text: String) -> String {
        if let Some(r) = self.0.get() {
            r.text(site, &mut text);
        }
        text
    }

    /// `value` through the hook, if one is set.
    fn value(&self, site: Site, value: &mut Value) {
        if let Some(r) = self.0.get() {
            r.value(site, value);
        }
    }

    /// `op` with every text and value it writes through the hook.
    fn op(&self, mut op: Op) -> Op {
        if self.0.get().is_none() {
            return op;
        }
        match &mut op {
            Op::Claim { intent, .. } | Op::ClaimGranted { intent, .. } => self.value(Site::Input, &mut intent.input),
            Op::Complete { output, .. } => self.value(Site::Output, output),
            Op::Record { intent, output } => {
                self.value(Site::Input, &mut intent.input);
                self.value(Site::Output, output);
            }
            Op::Release { reason, .. } | Op::Deny { reason, .. } => {
                if let Some(r) = reason.take() {
                    *reason = Some(self.text(Site::Reason, r));
                }
            }
            Op::MarkInDoubt { reason, .. } => *reason = self.text(Site::Reason, std::mem::take(reason)),
            Op::Resolve { verdict, .. } | Op::Amend { verdict, .. } => {
                if let Verdict::Applied { output } = verdict {
                    self.value(Site::Output, output);
                }
            }
            _ => {}
        }
        op
    }
}

impl Instruments {
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
        // With no subscriber listening, the future is awaited as it is (no span to enter).
        let result = if span.is_disabled() {
            fut.await
        } else {
            fut.instrument(span.clone()).await
        };
        if result.is_err() {
            span.record("error.type", "store");
        }
        let elapsed = start.elapsed().as_secs_f64();
        match self.hot.iter().find(|(name, _)| *name == operation) {
            Some((_, key)) => metrics::with_recorder(|r| r.register_histogram(key, &METADATA).record(elapsed)),
            None => metrics::histogram!(HISTOGRAM, "operation" => operation, "store" => self.backend).record(elapsed),
        }
        result
    }
}

impl StoreLayer for Instruments {
    fn rewrite(&self, op: Op) -> Op {
        self.redactor.op(op)
    }

    fn rewrite_audit(&self, mut entry: AuditEntry) -> AuditEntry {
        if let Some(detail) = &mut entry.detail {
            self.redactor.value(Site::Audit, detail);
        }
        entry
    }

    fn around<'a, T: Brief + Send + 'a>(
        &'a self,
        op: Operation<'a>,
        fut: BoxFuture<'a, Result<T, StoreError>>,
    ) -> BoxFuture<'a, Result<T, StoreError>> {
        Box::pin(self.observed(op.name, op.key, fut))
    }
}

/// `effect_tool.store {operation}`, written only when a span is recorded.
struct StoreSpanName(&'static str);

impl std::fmt::Display for StoreSpanName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "effect_tool.store {}", self.0)
    }
}
