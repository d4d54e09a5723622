//! What the engine tells the world besides a call's result: an event stream (the integration
//! point for notifications, consoles and alerting), metrics through the [`metrics`] facade, and
//! the attributes of its spans (OpenTelemetry's GenAI conventions for tool execution).
//!
//! # Events
//!
//! [`Engine::events`](super::Engine::events) subscribes to every decision the engine makes:
//! each call's end ([`EngineEvent::Call`], with its [`Disposition`]: executed, replayed, shared,
//! reconciled, blocked, parked, failed, rejected), a claim taken over
//! ([`EngineEvent::TakenOver`]), an attempt that lost its claim or was fenced out
//! ([`EngineEvent::ClaimLost`]), and an effect whose record could not be written
//! ([`EngineEvent::RecordFailed`]), which before only showed as a `tracing` warning. A
//! receiver that falls more than [`EVENT_BUFFER`] events behind misses the oldest ones (and is
//! told so by `tokio`'s `RecvError::Lagged`); with no receiver, nothing is built.
//!
//! # Metrics
//!
//! Recorded with the [`metrics`] crate, so any recorder the application installs gets them
//! (Prometheus, OpenTelemetry, StatsD, ...). [`METRICS`] lists them all (the store operations'
//! histogram and the journal's gauges included); [`describe_metrics`] gives their help text to
//! the recorder.
//!
//! | name | kind | labels |
//! |---|---|---|
//! | `effect_tool_calls_total` | counter | `tool`, `class`, `disposition` |
//! | `effect_tool_call_duration_seconds` | histogram | `tool`, `class`, `disposition` |
//! | `effect_tool_tool_retries_total` | counter | `tool` |
//! | `effect_tool_takeovers_total` | counter | `tool` |
//! | `effect_tool_claims_lost_total` | counter | `tool`, `finished` (`true`: a fenced completion) |
//! | `effect_tool_record_failures_total` | counter | `tool` |
//! | `effect_tool_record_retries_total` | counter | `tool` |
//! | `effect_tool_store_operation_duration_seconds` | histogram | `operation`, `store` |
//! | `effect_tool_store_batch_items` | histogram (a count) | `flush` (`false`: claims only, committed without waiting for the WAL flush) |
//! | `effect_tool_policy_decisions_total` | counter | `tool`, `decision` (`allow`, `deny`, `require-approval`), `mode` (`enforce`, `shadow`) |
//!
//! # Spans
//!
//! Each call runs in a span named `execute_tool` (`otel.name` `execute_tool {tool}`, for
//! `tracing-opentelemetry`) with the GenAI attributes `gen_ai.operation.name`
//! (`execute_tool`), `gen_ai.tool.name`, `gen_ai.tool.call.id`, `gen_ai.tool.type`
//! (`function`), `gen_ai.agent.name` (the run's agent, if set) and, when it failed, `error.type` (the [`EffectError`](crate::EffectError) variant, e.g.
//! `Blocked`), and effect-tool's own: `effect_tool.class`, `effect_tool.key`,
//! `effect_tool.attempt`, `effect_tool.disposition`, `effect_tool.store` (the store's
//! [`backend_name`](crate::Store::backend_name)). Every journal operation of the call is a child
//! span `store` (`otel.name` `effect_tool.store {operation}`, with `db.system.name`,
//! `db.operation.name` and `effect_tool.key`).

use std::time::Duration;

use super::Disposition;
use crate::value::class::EffectClass;

/// What kind of metric a [`MetricInfo`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    /// Only goes up.
    Counter,
    /// Goes up and down.
    Gauge,
    /// A distribution of values: seconds, or a count for a name not ending in `_seconds`.
    Histogram,
}

/// One metric effect-tool records: its name, kind, labels and meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetricInfo {
    /// The metric's name.
    pub name: &'static str,
    /// Counter, gauge or histogram.
    pub kind: MetricKind,
    /// Its labels.
    pub labels: &'static [&'static str],
    /// What it counts, in a sentence (the Prometheus `HELP` text).
    pub help: &'static str,
}

/// Every metric effect-tool records: the engine's (this module), the store operations'
/// ([`Engine::store`](super::Engine::store)), and the journal's gauges
/// ([`gauges`](crate::ops::gauges)). Exporters describe them from this list; dashboards and alert
/// rules may use these names only.
pub const METRICS: &[MetricInfo] = &[
    MetricInfo {
        name: "effect_tool_budget_exceeded_total",
        kind: MetricKind::Counter,
        labels: &["tool", "budget"],
        help: "Calls (and retries) a run's budget refused: nothing ran (budget: calls, calls_of:<tool>, spend:<unit>, retries).",
    },
    MetricInfo {
        name: "effect_tool_calls_total",
        kind: MetricKind::Counter,
        labels: &["tool", "class", "disposition"],
        help: "Tool calls that ended, by what the engine did (executed, replayed, shared, reconciled, blocked, parked, failed, rejected).",
    },
    MetricInfo {
        name: "effect_tool_call_duration_seconds",
        kind: MetricKind::Histogram,
        labels: &["tool", "class", "disposition"],
        help: "How long a tool call took, journal included.",
    },
    MetricInfo {
        name: "effect_tool_tool_retries_total",
        kind: MetricKind::Counter,
        labels: &["tool"],
        help: "Tool runs that failed transiently and run again after a backoff (the retry policy).",
    },
    MetricInfo {
        name: "effect_tool_takeovers_total",
        kind: MetricKind::Counter,
        labels: &["tool"],
        help: "Claims whose outcome was unknown (a stale claim, a record in doubt) taken over by a new attempt.",
    },
    MetricInfo {
        name: "effect_tool_claims_lost_total",
        kind: MetricKind::Counter,
        labels: &["tool", "finished"],
        help: "Attempts that lost their claim (lease lapsed) or whose completion the journal fenced out (finished=true).",
    },
    MetricInfo {
        name: "effect_tool_record_failures_total",
        kind: MetricKind::Counter,
        labels: &["tool"],
        help: "Effects that happened but whose record could not be written within the store-retry window.",
    },
    MetricInfo {
        name: "effect_tool_record_retries_total",
        kind: MetricKind::Counter,
        labels: &["tool"],
        help: "Journal writes of a result retried after a store failure.",
    },
    MetricInfo {
        name: "effect_tool_policy_decisions_total",
        kind: MetricKind::Counter,
        labels: &["tool", "decision", "mode"],
        help: "Decisions of the deployment's Cedar policies (feature `policy`), by decision and mode (shadow: logged, not enforced).",
    },
    MetricInfo {
        name: "effect_tool_store_operation_duration_seconds",
        kind: MetricKind::Histogram,
        labels: &["operation", "store"],
        help: "How long one journal operation took (lookup, claim, complete, ...).",
    },
    MetricInfo {
        name: "effect_tool_store_batch_items",
        kind: MetricKind::Histogram,
        labels: &["flush"],
        help: "Writes (claims and records) one PostgreSQL batch statement carried, one commit for all (flush=false: claims only, committed without waiting for the WAL flush).",
    },
    MetricInfo {
        name: "effect_tool_records_needing_person",
        kind: MetricKind::Gauge,
        labels: &["state", "tool"],
        help: "Records waiting for a person: in doubt, awaiting approval, or stale claims.",
    },
    MetricInfo {
        name: "effect_tool_records_needing_person_oldest_age_seconds",
        kind: MetricKind::Gauge,
        labels: &["state", "tool"],
        help: "How long the oldest record waiting for a person has waited in its state.",
    },
    MetricInfo {
        name: "effect_tool_webhook_failures_total",
        kind: MetricKind::Counter,
        labels: &[],
        help: "Needs-person notifications the webhook gave up delivering after its last attempt.",
    },
    MetricInfo {
        name: "effect_tool_journal_up",
        kind: MetricKind::Gauge,
        labels: &[],
        help: "1 when the journal's gauges were read at the last scrape, 0 when the read failed.",
    },
];

/// Describe every metric of [`METRICS`] to the installed recorder (its `HELP` text).
pub fn describe_metrics() {
    for m in METRICS {
        match m.kind {
            MetricKind::Counter => metrics::describe_counter!(m.name, m.help),
            MetricKind::Gauge => metrics::describe_gauge!(m.name, m.help),
            MetricKind::Histogram => {
                let unit = if m.name.ends_with("_seconds") {
                    metrics::Unit::Seconds
                } else {
                    metrics::Unit::Count
                };
                metrics::describe_histogram!(m.name, unit, m.help)
            }
        }
    }
}

/// How many events a receiver may fall behind before it misses the oldest.
pub const EVENT_BUFFER: usize = 1024;

/// One decision of the engine, as [`Engine::events`](super::Engine::events) delivers it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum EngineEvent {
    /// A call ended.
    Call(CallEvent),
    /// A claim whose outcome was unknown (a stale claim, a record in doubt) was taken over by
    /// attempt `attempt`.
    TakenOver {
        /// The tool.
        tool: &'static str,
        /// The effect key.
        key: String,
        /// The attempt that took it over.
        attempt: u32,
    },
    /// Attempt `attempt` lost its claim: its lease lapsed by the engine's clock, or the journal
    /// fenced out its completion (`finished`: the tool had returned, and its result is not
    /// recorded). Also in the audit trail (`claim-lost`).
    ClaimLost {
        /// The tool.
        tool: &'static str,
        /// The effect key.
        key: String,
        /// The attempt that lost it.
        attempt: u32,
        /// The attempt that owns the key now, when known.
        current: Option<u32>,
        /// Whether the tool had returned.
        finished: bool,
    },
    /// The deployment's policies decided a call (feature `policy`, stage 1b), before anything
    /// was claimed. Not `allow` decisions are also in the audit trail (`policy-deny`,
    /// `policy-approval`, `policy-shadow`) when the tool is journaled.
    PolicyDecided {
        /// The tool.
        tool: &'static str,
        /// The effect key (`None` for a pure tool).
        key: Option<String>,
        /// `allow`, `deny` or `require-approval`.
        decision: &'static str,
        /// The ids of the policies that decided it.
        policies: Vec<String>,
        /// Whether it was enforced (`false`: shadow mode, the call went on as declared).
        enforced: bool,
    },
    /// A budget of the run refused a call (nothing ran) or a retry (the call ended as its last
    /// attempt would).
    BudgetExceeded {
        /// The tool.
        tool: &'static str,
        /// The run.
        run_id: String,
        /// The key the spend was bound to (the effect key, `<key>#retry<n>` for a retry).
        key: String,
        /// The budget, its limit, what the run spent and what was asked.
        overdraft: crate::decide::budget::Overdraft,
    },
    /// The effect happened but its record could not be written within the store-retry window:
    /// the next attempt reconciles it, or a person resolves it.
    RecordFailed {
        /// The tool.
        tool: &'static str,
        /// The effect key.
        key: String,
        /// The store's error.
        error: String,
    },
}

/// How one call ended.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct CallEvent {
    /// The tool.
    pub tool: &'static str,
    /// Its effect class.
    pub class: EffectClass,
    /// The run.
    pub run_id: String,
    /// The model's tool-call id, if given.
    pub call_id: Option<String>,
    /// The effect key (`None` for pure tools and calls refused before keying).
    pub key: Option<String>,
    /// What the engine did.
    pub disposition: Disposition,
    /// The [`EffectError`](crate::EffectError) variant when the call failed (`Blocked`, `Tool`, ...).
    pub error: Option<&'static str>,
    /// How long the call took.
    pub elapsed: Duration,
}

/// The events' sender: only builds an event when someone listens.
pub(super) struct Events(tokio::sync::broadcast::Sender<EngineEvent>);

impl Events {
    pub(super) fn new() -> Self {
        Events(tokio::sync::broadcast::channel(EVENT_BUFFER).0)
    }

    pub(super) fn subscribe(&self) -> tokio::sync::broadcast::Receiver<EngineEvent> {
        self.0.subscribe()
    }

    /// Send the event `make` builds, if anyone listens.
    pub(super) fn emit(&self, make: impl FnOnce() -> EngineEvent) {
        if self.0.receiver_count() > 0 {
            let _ = self.0.send(make());
        }
    }
}

/// The keys of a call's two metrics (`effect_tool_calls_total`,
/// `effect_tool_call_duration_seconds`), per tool, class and disposition.
type CallKeys = std::collections::HashMap<
    (&'static str, EffectClass, Disposition),
    (metrics::Key, metrics::Key),
    foldhash::fast::RandomState,
>;

thread_local! {
    /// [`CallKeys`], made once per thread: a call's end builds no label vector and hash for
    /// its metrics, whether a recorder is installed or not.
    static CALL_KEYS: std::cell::RefCell<CallKeys> = std::cell::RefCell::default();
}

/// What `metrics::counter!` and `metrics::histogram!` in this module pass the recorder.
static METADATA: metrics::Metadata<'static> =
    metrics::Metadata::new(module_path!(), metrics::Level::INFO, Some(module_path!()));

/// A call ended: its metrics, and its event for listeners.
pub(super) fn call_ended(
    events: &Events,
    tool: &'static str,
    class: EffectClass,
    disposition: Disposition,
    error: Option<&'static str>,
    elapsed: Duration,
    event: impl FnOnce() -> (String, Option<String>, Option<String>),
) {
    let seconds = elapsed.as_secs_f64();
    CALL_KEYS.with(|keys| {
        let mut keys = keys.borrow_mut();
        let (count, time) = keys.entry((tool, class, disposition)).or_insert_with(|| {
            let labels = [
                ("tool", tool),
                ("class", class.as_str()),
                ("disposition", disposition.as_str()),
            ];
            (
                metrics::Key::from_parts("effect_tool_calls_total", &labels),
                metrics::Key::from_parts("effect_tool_call_duration_seconds", &labels),
            )
        });
        metrics::with_recorder(|r| {
            r.register_counter(count, &METADATA).increment(1);
            r.register_histogram(time, &METADATA).record(seconds);
        });
    });
    if let Some(kind) = error {
        tracing::Span::current().record("error.type", kind);
    }
    tracing::Span::current().record("effect_tool.disposition", disposition.as_str());
    events.emit(|| {
        let (run_id, call_id, key) = event();
        EngineEvent::Call(CallEvent {
            tool,
            class,
            run_id,
            call_id,
            key,
            disposition,
            error,
            elapsed,
        })
    });
}

/// A claim whose outcome was unknown was taken over.
pub(super) fn taken_over(events: &Events, tool: &'static str, key: &str, attempt: u32) {
    metrics::counter!("effect_tool_takeovers_total", "tool" => tool).increment(1);
    events.emit(|| EngineEvent::TakenOver {
        tool,
        key: key.to_owned(),
        attempt,
    });
}

/// An attempt lost its claim.
pub(super) fn claim_lost(
    events: &Events,
    tool: &'static str,
    key: &str,
    attempt: u32,
    current: Option<u32>,
    finished: bool,
) {
    let finished_label = if finished { "true" } else { "false" };
    metrics::counter!("effect_tool_claims_lost_total", "tool" => tool, "finished" => finished_label).increment(1);
    events.emit(|| EngineEvent::ClaimLost {
        tool,
        key: key.to_owned(),
        attempt,
        current,
        finished,
    });
}

/// The deployment's policies decided a call.
#[cfg(feature = "policy")]
pub(super) fn policy_decided(
    events: &Events,
    tool: &'static str,
    key: Option<&str>,
    decision: &crate::decide::cedar::PolicyDecision,
    mode: crate::decide::cedar::PolicyMode,
) {
    metrics::counter!(
        "effect_tool_policy_decisions_total",
        "tool" => tool,
        "decision" => decision.as_str(),
        "mode" => mode.as_str()
    )
    .increment(1);
    events.emit(|| EngineEvent::PolicyDecided {
        tool,
        key: key.map(str::to_owned),
        decision: decision.as_str(),
        policies: decision.policies().to_vec(),
        enforced: mode == crate::decide::cedar::PolicyMode::Enforce,
    });
}

/// A tool failed in a way its class allows to retry, and runs again after a backoff.
pub(super) fn tool_retried(tool: &'static str) {
    metrics::counter!("effect_tool_tool_retries_total", "tool" => tool).increment(1);
}

/// A budget of the run refused a call or a retry.
pub(super) fn budget_exceeded(
    events: &Events,
    tool: &'static str,
    run_id: &str,
    key: &str,
    overdraft: &crate::decide::budget::Overdraft,
) {
    metrics::counter!("effect_tool_budget_exceeded_total", "tool" => tool, "budget" => overdraft.budget.clone())
        .increment(1);
    tracing::info!(
        tool,
        run_id,
        key,
        budget = %overdraft.budget,
        limit = overdraft.limit,
        spent = overdraft.spent,
        asks = overdraft.asks,
        "a budget of the run refused the call"
    );
    events.emit(|| EngineEvent::BudgetExceeded {
        tool,
        run_id: run_id.to_owned(),
        key: key.to_owned(),
        overdraft: overdraft.clone(),
    });
}

/// A record write failed and is retried.
pub(super) fn record_retried(tool: &'static str) {
    metrics::counter!("effect_tool_record_retries_total", "tool" => tool).increment(1);
}

/// The effect happened but its record could not be written.
pub(super) fn record_failed(events: &Events, tool: &'static str, key: &str, error: &dyn std::fmt::Display) {
    metrics::counter!("effect_tool_record_failures_total", "tool" => tool).increment(1);
    events.emit(|| EngineEvent::RecordFailed {
        tool,
        key: key.to_owned(),
        error: error.to_string(),
    });
}

/// `execute_tool {tool}`, written only when a span is recorded.
pub(super) struct OtelName(pub(super) &'static str);

impl std::fmt::Display for OtelName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "execute_tool {}", self.0)
    }
}
