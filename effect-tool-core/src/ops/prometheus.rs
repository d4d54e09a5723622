//! A Prometheus endpoint for effect-tool's metrics (feature `prometheus`).
//!
//! The engine records its counters and histograms through the [`metrics`] facade (see
//! [`engine`](crate::engine)); the journal's gauges (records needing a person) come from
//! [`JournalGauges`]. This module installs the `metrics` crate's Prometheus recorder
//! ([`metrics_exporter_prometheus`]) with histogram buckets fit for effect-tool's latencies, and
//! serves the text exposition format at `GET /metrics` as an axum [`Router`](axum::Router), to
//! mount in the application's own HTTP server (beside the MCP server's router, or the operator
//! console's), or to serve on its own ([`PrometheusMetrics::bind`]). `effect-tool serve` serves
//! it for a journal alone (the gauges only: the counters live in the processes that call tools).
//!
//! ```no_run
//! # async fn example(store: std::sync::Arc<dyn effect_tool_core::Store>) -> Result<(), Box<dyn std::error::Error>> {
//! use effect_tool_core::ops::prometheus::PrometheusMetrics;
//!
//! // Once, at start-up: the process's global recorder.
//! let metrics = PrometheusMetrics::install()?.with_journal(store);
//! let app = axum::Router::new().merge(metrics.router());
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:9464").await?;
//! axum::serve(listener, app).await?;
//! # Ok(()) }
//! ```
//!
//! Each scrape reads the journal once (one list of the records in doubt, awaiting approval or
//! claimed) to set the gauges; if that read fails, `effect_tool_journal_up` is 0 and the rest of
//! the page is still served.

use std::net::SocketAddr;
use std::sync::Arc;

use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder, PrometheusHandle};

use crate::ops::gauges::JournalGauges;
use crate::store::Store;

/// The buckets of `effect_tool_call_duration_seconds` and
/// `effect_tool_store_operation_duration_seconds`, in seconds: from a replay served from memory
/// (tens of microseconds) to a tool that runs for minutes.
pub const LATENCY_BUCKETS: &[f64] = &[
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
    10.0, 30.0, 60.0, 300.0,
];

/// The buckets of `effect_tool_store_batch_items`, in writes per statement: from a lone item to
/// the most a PostgreSQL batch carries (256).
pub const BATCH_ITEMS_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0];

/// Why the Prometheus recorder could not be built or installed (another global recorder is
/// already installed, say).
#[derive(Debug, thiserror::Error)]
#[error(
    "cannot install the Prometheus recorder: {0} (a process has one global `metrics` recorder: build one with `PrometheusMetrics::builder()` and combine it with yours)"
)]
pub struct PrometheusError(#[from] BuildError);

/// effect-tool's metrics in the Prometheus format, and the endpoint that serves them.
#[derive(Clone)]
pub struct PrometheusMetrics {
    handle: PrometheusHandle,
    journal: Option<(Arc<dyn Store>, Arc<JournalGauges>)>,
}

impl std::fmt::Debug for PrometheusMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrometheusMetrics")
            .field("journal", &self.journal.as_ref().map(|(s, _)| s.backend_name()))
            .finish_non_exhaustive()
    }
}

impl PrometheusMetrics {
    /// A Prometheus recorder builder with effect-tool's histogram buckets
    /// ([`LATENCY_BUCKETS`], [`BATCH_ITEMS_BUCKETS`]), for applications that configure or combine it further.
    pub fn builder() -> Result<PrometheusBuilder, PrometheusError> {
        let mut builder = PrometheusBuilder::new();
        for name in [
            "effect_tool_call_duration_seconds",
            "effect_tool_store_operation_duration_seconds",
        ] {
            builder = builder.set_buckets_for_metric(Matcher::Full(name.to_owned()), LATENCY_BUCKETS)?;
        }
        builder = builder.set_buckets_for_metric(
            Matcher::Full("effect_tool_store_batch_items".to_owned()),
            BATCH_ITEMS_BUCKETS,
        )?;
        Ok(builder)
    }

    /// Install a Prometheus recorder (from [`PrometheusMetrics::builder`]) as the process's
    /// global `metrics` recorder, and describe effect-tool's metrics to it
    /// ([`describe_metrics`](crate::engine::describe_metrics)).
    pub fn install() -> Result<Self, PrometheusError> {
        let handle = PrometheusMetrics::builder()?.install_recorder()?;
        crate::engine::describe_metrics();
        Ok(PrometheusMetrics::from_handle(handle))
    }

    /// Serve the metrics of a recorder the application installed itself.
    pub fn from_handle(handle: PrometheusHandle) -> Self {
        PrometheusMetrics { handle, journal: None }
    }

    /// Also report the journal's gauges ([`JournalGauges`]), read from `store` on every scrape.
    pub fn with_journal(mut self, store: Arc<dyn Store>) -> Self {
        self.journal = Some((store, Arc::new(JournalGauges::new())));
        self
    }

    /// The page a scrape gets: the journal's gauges refreshed, then every metric in the
    /// Prometheus text format.
    pub async fn render(&self) -> String {
        if let Some((store, gauges)) = &self.journal
            && let Err(e) = gauges.refresh(store.as_ref()).await
        {
            tracing::warn!(error = %e, "the metrics endpoint could not read the journal");
        }
        self.handle.run_upkeep();
        self.handle.render()
    }

    /// `GET /metrics`, as an axum router to merge into the application's.
    pub fn router(self) -> axum::Router {
        let this = Arc::new(self);
        axum::Router::new().route(
            "/metrics",
            axum::routing::get(move || {
                let this = this.clone();
                async move {
                    (
                        [(
                            axum::http::header::CONTENT_TYPE,
                            "text/plain; version=0.0.4; charset=utf-8",
                        )],
                        this.render().await,
                    )
                }
            }),
        )
    }

    /// Serve [`PrometheusMetrics::router`] on `addr` (use a loopback address unless the network
    /// in between is trusted: the page names tools and their counts) until the handle is shut
    /// down or dropped.
    pub async fn bind(self, addr: SocketAddr) -> std::io::Result<MetricsServer> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let local_addr = listener.local_addr()?;
        let stop = tokio_util::sync::CancellationToken::new();
        let shutdown = stop.clone().cancelled_owned();
        let task = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, self.router())
                .with_graceful_shutdown(shutdown)
                .await
            {
                tracing::warn!(error = %e, "the metrics endpoint stopped");
            }
        });
        Ok(MetricsServer {
            local_addr,
            stop: stop.drop_guard(),
            task,
        })
    }
}

/// A running metrics endpoint ([`PrometheusMetrics::bind`]); dropping it stops the server.
#[derive(Debug)]
pub struct MetricsServer {
    local_addr: SocketAddr,
    stop: tokio_util::sync::DropGuard,
    task: tokio::task::JoinHandle<()>,
}

impl MetricsServer {
    /// The address it listens on (the port the system chose, for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Stop accepting connections and wait for the open ones to finish.
    pub async fn shutdown(self) {
        drop(self.stop);
        let _ = self.task.await;
    }

    /// Serve until the server fails (it does not stop by itself).
    pub async fn wait(self) {
        let MetricsServer { stop, task, .. } = self;
        let _ = task.await;
        drop(stop);
    }
}
