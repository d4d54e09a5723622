//! The reconciler that needs no caller ([`Reconciler`]): it finds the stale claims, records in
//! doubt and records pending a callback past their deadline of a toolkit's tools that have a
//! `recover` hook, and reconciles each
//! ([`Engine::reconcile_record`]), paced and with bounded concurrency, as the one reconciler of
//! its journal (a lease elected through the journal,
//! [`StoreExt::acquire_lease`](crate::store::StoreExt::acquire_lease)).
//!
//! It runs where the tools' code is: in the application's process (a task beside its engine,
//! [`Reconciler::run`]), or in a binary the application builds for it (its `main` opens the journal, builds the same
//! engine and toolkit, and awaits [`Reconciler::run`]).
//! The `effect-tool` CLI has no tool code: `effect-tool reconcile` only lists what waits.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::registry::Toolkit;
use crate::call::context::RunContext;
use crate::call::error::StoreError;
use crate::decide::record::{EffectRecord, RecordState};
use crate::engine::{Engine, ReconcileVerdict};
use crate::store::election::{ElectedLease, LeaseAnswer};
use crate::store::{Filter, StoreExt};

/// How a [`Reconciler`] works.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReconcilerOptions {
    /// The lease's name: one reconciler per name and journal at a time (default `reconciler`).
    pub lease_name: String,
    /// How long the lease lasts unless renewed (renewed at a third of it); a killed
    /// reconciler's lease lapses after it, and another takes over (default 15 s).
    pub lease: Duration,
    /// How long to wait between passes (default 5 s); also how often a process that does not
    /// hold the lease looks again.
    pub interval: Duration,
    /// How many records are reconciled at once (default 4).
    pub concurrency: usize,
    /// The least time between two `recover` checks started (default 50 ms): the remote systems'
    /// rate.
    pub pace: Duration,
    /// The most records one pass looks at (default 500).
    pub batch: usize,
}

impl Default for ReconcilerOptions {
    fn default() -> Self {
        ReconcilerOptions {
            lease_name: "reconciler".to_owned(),
            lease: Duration::from_secs(15),
            interval: Duration::from_secs(5),
            concurrency: 4,
            pace: Duration::from_millis(50),
            batch: 500,
        }
    }
}

/// What one pass did ([`Reconciler::pass`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReconcilePass {
    /// Whether this reconciler held the lease (else it did nothing).
    pub elected: bool,
    /// Each record looked at, with its verdict.
    pub verdicts: Vec<(String, ReconcileVerdict)>,
    /// Records that wait for a person: in doubt, stale or pending past their deadline, of a
    /// tool without `recover` or not in the toolkit.
    pub for_a_person: usize,
}

impl ReconcilePass {
    /// How many verdicts had this name ([`ReconcileVerdict::name`]).
    pub fn count(&self, name: &str) -> usize {
        self.verdicts.iter().filter(|(_, v)| v.name() == name).count()
    }
}

/// Finds records nobody calls again (stale claims, records in doubt, records whose provider's
/// callback did not come by its deadline, of tools with `recover`) and reconciles them through [`Engine::reconcile_record`], one reconciler per journal at a time.
///
/// ```no_run
/// # async fn demo(engine: effect_tool_core::Engine, toolkit: effect_tool_core::Toolkit) {
/// use effect_tool_core::toolkit::{Reconciler, ReconcilerOptions};
///
/// let shutdown = effect_tool_core::CancellationToken::new();
/// let reconciler = Reconciler::new(engine, toolkit, ReconcilerOptions::default());
/// tokio::spawn(async move { reconciler.run(shutdown).await });
/// # }
/// ```
#[derive(Clone)]
pub struct Reconciler {
    engine: Engine,
    toolkit: Arc<Toolkit>,
    options: ReconcilerOptions,
    run: RunContext,
    /// Keys not to ask again before a time (an inconclusive answer's `retry_after`, a settle
    /// delay).
    later: Arc<Mutex<HashMap<String, Instant>>>,
    lease: Arc<tokio::sync::Mutex<Option<(ElectedLease, Instant)>>>,
}

impl std::fmt::Debug for Reconciler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reconciler")
            .field("tools", &self.toolkit.names())
            .field("options", &self.options)
            .finish()
    }
}

impl Reconciler {
    /// A reconciler of `toolkit`'s tools on `engine`'s journal.
    pub fn new(engine: Engine, toolkit: impl Into<Arc<Toolkit>>, options: ReconcilerOptions) -> Self {
        Reconciler {
            engine,
            toolkit: toolkit.into(),
            options,
            run: RunContext::new("effect-tool/reconciler"),
            later: Arc::default(),
            lease: Arc::default(),
        }
    }

    /// The run the `recover` hooks see (its id is replaced by each record's run): give it the
    /// values the tools take from the run (`#[secret]` arguments), as the application's runs
    /// have them.
    pub fn with_run(mut self, run: RunContext) -> Self {
        self.run = run;
        self
    }

    /// Run passes until `shutdown`, one every [`ReconcilerOptions::interval`], while this
    /// process holds the lease; a process that does not hold it looks again at the same
    /// interval (and takes it over once its holder stops renewing). The lease is released on
    /// shutdown. A journal that fails is logged and tried again at the next interval.
    pub async fn run(&self, shutdown: CancellationToken) {
        loop {
            match self.pass().await {
                Ok(pass) if pass.elected && !pass.verdicts.is_empty() => {
                    tracing::info!(records = pass.verdicts.len(), "reconciler pass done")
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "reconciler pass failed; trying again at the next interval"),
            }
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = self.keep_lease_for(self.options.interval) => {}
            }
        }
        self.resign().await;
    }

    /// Give the lease back (if held), so that another process takes over at once.
    pub async fn resign(&self) {
        if let Some((lease, _)) = self.lease.lock().await.take()
            && let Err(e) = self.engine.store().release_lease(&lease).await
        {
            tracing::warn!(error = %e, "could not release the reconciler's lease; it lapses by itself");
        }
    }

    /// Wait `d`, renewing a held lease meanwhile.
    async fn keep_lease_for(&self, d: Duration) {
        let until = Instant::now() + d;
        while Instant::now() < until {
            let step = (self.options.lease / 3).max(Duration::from_millis(10));
            tokio::time::sleep(step.min(until - Instant::now())).await;
            let _ = self.elected().await;
        }
    }

    /// Whether this reconciler holds the lease now: renewed when a third of it has passed,
    /// taken when free or lapsed.
    async fn elected(&self) -> Result<bool, StoreError> {
        let store = self.engine.store();
        let lease_ms = self.options.lease.as_millis() as u64;
        let mut held = self.lease.lock().await;
        if let Some((lease, since)) = held.as_ref() {
            if since.elapsed() < self.options.lease / 3 {
                return Ok(true);
            }
            let sent = Instant::now();
            match store.renew_lease(lease, lease_ms).await {
                Ok(()) => {
                    let lease = lease.clone();
                    *held = Some((lease, sent));
                    return Ok(true);
                }
                Err(StoreError::Rejected(_)) => {
                    tracing::warn!("the reconciler lost its lease to another process");
                    *held = None;
                }
                Err(e) if since.elapsed() < self.options.lease => return Err(e),
                Err(e) => {
                    *held = None;
                    return Err(e);
                }
            }
        }
        let sent = Instant::now();
        match store
            .acquire_lease(&self.options.lease_name, self.engine.holder(), lease_ms)
            .await?
        {
            LeaseAnswer::Held(lease) => {
                tracing::info!(attempt = lease.attempt, "this process is the journal's reconciler");
                *held = Some((lease, sent));
                Ok(true)
            }
            LeaseAnswer::HeldBy { .. } => Ok(false),
        }
    }

    /// One pass, if this process holds (or takes) the lease: list the stale claims, records in
    /// doubt and overdue pending records ([`EffectRecord::is_overdue`]), and reconcile each of a tool with `recover`, at most
    /// [`ReconcilerOptions::concurrency`] at once, starts at least
    /// [`ReconcilerOptions::pace`] apart. Stops early if the lease is lost.
    pub async fn pass(&self) -> Result<ReconcilePass, StoreError> {
        let mut pass = ReconcilePass::default();
        if !self.elected().await? {
            return Ok(pass);
        }
        pass.elected = true;
        let (mine, for_a_person) = self.waiting().await?;
        pass.for_a_person = for_a_person;
        let pace = self.options.pace;
        let started = Arc::new(tokio::sync::Mutex::new(None::<Instant>));
        let verdicts = futures::stream::iter(mine)
            .map(|rec| {
                let started = started.clone();
                async move {
                    {
                        let mut last = started.lock().await;
                        if let Some(at) = *last {
                            tokio::time::sleep_until(at + pace).await;
                        }
                        *last = Some(Instant::now());
                    }
                    if !self.elected().await.unwrap_or(false) {
                        return None;
                    }
                    let verdict = self.reconcile(&rec).await;
                    Some((rec.key, verdict))
                }
            })
            .buffer_unordered(self.options.concurrency.max(1))
            .filter_map(|v| async move { v })
            .collect::<Vec<_>>()
            .await;
        pass.verdicts = verdicts;
        Ok(pass)
    }

    /// Reconcile one record, remembering when to ask again for an answer that says.
    async fn reconcile(&self, rec: &EffectRecord) -> ReconcileVerdict {
        let Some(tool) = self.toolkit.get(&rec.tool) else {
            return ReconcileVerdict::Skipped {
                reason: format!("{} is not in this reconciler's toolkit", rec.tool),
            };
        };
        let run = self.run.clone().with_run_id(rec.run_id.clone());
        let verdict = match tool.reconcile_json(&self.engine, rec, run).await {
            Ok(v) => v,
            Err(e) => ReconcileVerdict::Failed {
                reason: format!("the journal failed: {e}"),
            },
        };
        let wait = match &verdict {
            ReconcileVerdict::Settling { wait } => Some(*wait),
            ReconcileVerdict::Inconclusive { retry_after, .. } => *retry_after,
            _ => None,
        };
        if let Some(wait) = wait {
            self.later
                .lock()
                .expect("the reconciler's schedule")
                .insert(rec.key.clone(), Instant::now() + wait);
        }
        verdict
    }

    /// The records waiting now: those this reconciler may ask about (a tool of its toolkit
    /// with `recover`, not scheduled for later), and how many wait for a person. A record
    /// pending its callback waits once its deadline has passed: the callback will be refused as
    /// late, and nobody may call the key again, so only `recover` (or a person) can tell.
    async fn waiting(&self) -> Result<(Vec<EffectRecord>, usize), StoreError> {
        let store = self.engine.store();
        let filter = Filter {
            states: vec![RecordState::InDoubt, RecordState::Claimed, RecordState::Pending],
            limit: Some(self.options.batch),
            ..Filter::all()
        };
        let now = store.now();
        let records = store.list(&filter).await?;
        let later = {
            let mut later = self.later.lock().expect("the reconciler's schedule");
            let at = Instant::now();
            later.retain(|_, t| *t > at);
            later.clone()
        };
        let mut mine = Vec::new();
        let mut for_a_person = 0;
        for rec in records {
            if rec.tool == crate::store::election::LEASE_TOOL
                || !(rec.state == RecordState::InDoubt || rec.is_stale(now) || rec.is_overdue(now))
            {
                continue;
            }
            match self.toolkit.meta(&rec.tool) {
                Some(meta) if meta.has_recover => {
                    if !later.contains_key(&rec.key) {
                        mine.push(rec);
                    }
                }
                _ => for_a_person += 1,
            }
        }
        Ok((mine, for_a_person))
    }
}
