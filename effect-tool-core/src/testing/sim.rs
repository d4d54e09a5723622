//! Deterministic simulation of several engines over one journal. Feature `testing`.
//!
//! [`run_seed`] runs one seeded schedule: `engines` simulated processes, each an [`Engine`]
//! over its own fault-injecting view of one shared journal (memory or SQLite), calling tools of
//! every journaled class whose effects go to a ledger the engines cannot see. Everything runs on
//! one current-thread tokio runtime with the clock paused: time is simulated (a sleep of an hour
//! costs nothing), and the journal's own clock is that paused clock. Every random choice (which
//! fault, where, how long, which engine a caller uses) comes from one [`fastrand::Rng`] seeded
//! by the seed, so a seed replays the same schedule; [`SimReport::history`] is that schedule, in
//! order.
//!
//! # Faults
//!
//! Around every journal operation of an engine: a delay; a failure before the operation reaches
//! the journal; the operation committed and its answer lost; the journal unavailable for a
//! window (every operation fails). Around the tool's effect: a failure before it, a crash of the
//! engine right after it, a hang past the lease after it, an unknown-outcome error after it, the
//! request delivered only after the lease. Of whole engines: a crash (its tasks are dropped and
//! a fresh engine, with nothing in memory, takes its place), a pause past its lease (its journal
//! requests leave late and their answers arrive late, its tools stop), a skew of its clock (what
//! it reads of the journal's time). Callers send a call to two engines at once now and then; a
//! person resolves records in doubt, truthfully (from the ledger).
//!
//! # Invariants
//!
//! See [`Invariant`]: checked after every journal operation and effect, and at the end, after a
//! healthy engine has called every call once more.
//!
//! # Determinism
//!
//! Journal operations run one at a time; on SQLite each runs to its end on the runtime's thread,
//! so a read on tokio's blocking pool cannot answer at a moment real time picks. The engine's
//! `select!`s are biased, and fastrand's thread RNG (the retry jitter) is seeded with the seed.
//! TESTING.md ("Simulation") says how this is checked and what is not simulated.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::call::context::{EffectCtx, RunContext};
use crate::call::error::{EffectError, StoreError};
use crate::call::tool::Tool;
use crate::decide::record::{EffectRecord, Millis, Op, OpOutcome, RecordState, Verdict};
use crate::engine::{CallOptions, Disposition, Engine, EngineConfig, EngineEvent};
use crate::store::{Access, BoxFuture, Brief, Filter, Layered, MemoryStore, Operation, Store, StoreExt, StoreLayer};
use crate::value::class::EffectClass;
use crate::value::outcome::ToolError;

/// The journal a simulation runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SimBackend {
    /// [`MemoryStore`].
    Memory,
    /// `SqliteStore` on a file in the system's temporary directory (removed afterwards), with
    /// `synchronous = NORMAL` so that its writer commits on the runtime's thread.
    #[cfg(feature = "sqlite")]
    Sqlite,
}

/// A deliberately broken variant, to show that the invariants catch what they must.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Broken {
    /// The journal answers a claim of a key another attempt holds live as if it were free (no
    /// mutual exclusion): two engines run the same effect.
    IgnoreLiveClaims,
    /// The journal keeps a claim for a quarter of the lease the engine asked for: the journal's
    /// clock and the holder's disagree, and another process takes over a live holder.
    ShortLeases,
    /// The journal keeps a claim for hours whatever the lease asked: a crashed holder's claim is
    /// never taken over.
    EndlessLeases,
    /// The journal records every completion's output as `"corrupted"`.
    CorruptResults,
}

/// What one simulation runs.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// How many engines (simulated processes) share the journal (at least one).
    pub engines: usize,
    /// How many logical calls the callers make (each retried until it ends, on any engine).
    pub calls: usize,
    /// At most this many engine-wide faults (crash, pause, skew, journal outage, person).
    pub faults: usize,
    /// Whether journal operations and tools fail at random (the per-operation faults).
    pub op_faults: bool,
    /// The journal.
    pub backend: SimBackend,
    /// A broken variant, or `None` for the real engine and journal.
    pub broken: Option<Broken>,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            engines: 3,
            calls: 6,
            faults: 4,
            op_faults: true,
            backend: SimBackend::Memory,
            broken: None,
        }
    }
}

/// The properties a simulation checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Invariant {
    /// An irreversible or compensable tool applied its effect at most once per key (the person
    /// of the simulation resolves truthfully, so there is no exception).
    AtMostOnce,
    /// Every attempt of an idempotent tool's key passed the same idempotency key downstream, so
    /// the provider applied it once.
    OneIdempotencyKey,
    /// A recorded result never changed, except through an audited `amend`.
    ResultStable,
    /// Every `Ok` a caller saw is the recorded result, or the engine reported that it could not
    /// record it (`EngineEvent::RecordFailed`).
    OkRecorded,
    /// No key stays claimed once every engine is healthy and has called it again.
    NoClaimForever,
    /// The journal's list holds exactly the records its lookups return.
    ListsAgree,
    /// Every call returned within the simulation's time bound.
    CallsEnd,
}

/// An invariant that did not hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The history line it was found after (its index in [`SimReport::history`]).
    pub step: usize,
    /// Which invariant.
    pub invariant: Invariant,
    /// What was seen.
    pub detail: String,
}

/// What one seed did.
#[derive(Debug, Clone)]
pub struct SimReport {
    /// The seed.
    pub seed: u64,
    /// Every event of the schedule, in order, stamped with the simulated time (ms).
    pub history: Vec<String>,
    /// The invariants that did not hold, in the order found.
    pub violations: Vec<Violation>,
    /// Effects applied (the ledger's total).
    pub effects: usize,
}

impl SimReport {
    /// Whether every invariant held.
    pub fn passed(&self) -> bool {
        self.violations.is_empty()
    }
}

/// The command that replays `seed` with its history printed (the simulation test binary).
pub fn replay_command(seed: u64, config: &SimConfig) -> String {
    let backend = match config.backend {
        SimBackend::Memory => "memory",
        #[cfg(feature = "sqlite")]
        SimBackend::Sqlite => "sqlite",
    };
    format!(
        "EFFECT_TOOL_SIM_SEED={seed} EFFECT_TOOL_SIM_BACKEND={backend} EFFECT_TOOL_SIM_CALLS={} EFFECT_TOOL_SIM_FAULTS={} cargo test -p effect-tool-core --features testing,sqlite --test simulation",
        config.calls, config.faults
    )
}

/// The journal's clock at the simulation's start (ms since the Unix epoch).
const EPOCH_MS: Millis = 1_700_000_000_000;
/// Every engine's lease.
const LEASE: Duration = Duration::from_millis(1_000);
/// How long an engine retries a journal write it must not drop.
const STORE_RETRY: Duration = Duration::from_millis(3_000);
/// How often a caller tries one logical call before giving up on it.
const TRIES: usize = 6;
/// The simulated time after which a call that has not returned is a violation.
const TIME_BOUND: Duration = Duration::from_secs(3_600);
/// The simulated time after which a healthy engine's final call that has not returned is a
/// violation.
const FINAL_BOUND: Duration = Duration::from_secs(120);
/// The most history lines a schedule may make (a livelock makes steps without time passing).
const MAX_STEPS: usize = 200_000;
/// The run every call belongs to.
const RUN: &str = "sim-run";

/// Run one seed. Deterministic: the same seed and config give the same history, byte for byte.
///
/// # Panics
///
/// If the runtime or (for SQLite) the journal file cannot be made.
pub fn run_seed(seed: u64, config: &SimConfig) -> SimReport {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime");
    // The engine's own randomness (the retry policy's jitter) is fastrand's on this thread.
    fastrand::seed(seed);
    runtime.block_on(simulate(seed, config))
}

/// Stage 0: the journal, on the paused clock.
#[cfg_attr(not(feature = "sqlite"), allow(unused_variables))]
fn journal(seed: u64, backend: SimBackend) -> (Arc<dyn Store>, Option<PathBuf>) {
    let start = tokio::time::Instant::now();
    let clock = move || EPOCH_MS + start.elapsed().as_millis() as Millis;
    match backend {
        SimBackend::Memory => (Arc::new(MemoryStore::with_clock(clock)), None),
        #[cfg(feature = "sqlite")]
        SimBackend::Sqlite => {
            let path = std::env::temp_dir().join(format!("effect-tool-sim-{}-{seed}.db", std::process::id()));
            remove_journal(&path);
            let options = crate::store::sqlite::SqliteOptions {
                synchronous: crate::store::sqlite::Synchronous::Normal,
                ..Default::default()
            };
            let store = crate::store::sqlite::SqliteStore::open_with_clock(&path, options, clock)
                .expect("a SQLite journal for the simulation");
            (Arc::new(store), Some(path))
        }
    }
}

fn remove_journal(path: &std::path::Path) {
    for suffix in ["", "-wal", "-shm"] {
        let mut p = path.as_os_str().to_owned();
        p.push(suffix);
        let _ = std::fs::remove_file(PathBuf::from(p));
    }
}

async fn simulate(seed: u64, config: &SimConfig) -> SimReport {
    let (inner, file) = journal(seed, config.backend);
    let config = SimConfig {
        engines: config.engines.max(1),
        ..config.clone()
    };
    let world = Arc::new(World::new(seed, config.clone(), inner));
    for e in 0..config.engines {
        world.start_engine(e, 0, "starts");
    }
    // Stage 1: callers and the fault driver, until every call has ended.
    let callers: Vec<_> = (0..config.calls)
        .map(|call| tokio::spawn(caller(world.clone(), call)))
        .collect();
    let driver = tokio::spawn(fault_driver(world.clone()));
    let ended = tokio::select! {
        biased;
        // A livelock makes steps without letting simulated time pass: bound the steps too.
        _ = world.overflow.notified() => None,
        ended = tokio::time::timeout(TIME_BOUND, futures::future::join_all(callers)) => Some(ended),
    };
    driver.abort();
    match ended {
        Some(Ok(_)) => {}
        Some(Err(_)) => world.violate(
            Invariant::CallsEnd,
            "a call did not return within the time bound".to_owned(),
        ),
        None => {
            world.violate(Invariant::CallsEnd, format!("more than {MAX_STEPS} steps: a livelock"));
            world.stop_engines();
            let report = world.report();
            if let Some(path) = file {
                drop(world);
                remove_journal(&path);
            }
            return report;
        }
    }
    // Stage 2: heal everything, let every lease run out, and call every call once more.
    world.heal();
    tokio::time::sleep(LEASE * 3).await;
    for call in 0..config.calls {
        if tokio::time::timeout(FINAL_BOUND, final_call(&world, call))
            .await
            .is_err()
        {
            world.violate(
                Invariant::CallsEnd,
                format!("the final call of k{call} did not return on a healthy engine"),
            );
        }
    }
    // Stage 3: the end checks.
    world.check_end().await;
    world.stop_engines();
    let report = world.report();
    if let Some(path) = file {
        drop(world);
        remove_journal(&path);
    }
    report
}

/// What a person and the end checks need of a logical call.
struct CallInfo {
    key: String,
    label: String,
}

/// The tools' effects, outside the engines.
#[derive(Default)]
struct Ledger {
    /// Applications of an irreversible or compensable effect, per call.
    applied: BTreeMap<usize, u32>,
    /// Idempotency keys the provider applied, and per call the idempotency keys it was sent.
    provider: BTreeSet<String>,
    idem_keys: BTreeMap<usize, BTreeSet<String>>,
    /// Per call, the answer of its first application (what a deduplicated request, a recover and
    /// a truthful person return).
    outputs: BTreeMap<usize, String>,
    /// Per call, the highest fencing token the provider has seen (on a request or a recover's
    /// query): the compensable tool's provider refuses requests with a lower one.
    tokens: BTreeMap<usize, u64>,
}

impl Ledger {
    fn output(&self, call: usize) -> Option<String> {
        self.outputs.get(&call).cloned()
    }
    fn total(&self) -> usize {
        self.applied.values().map(|n| *n as usize).sum::<usize>() + self.provider.len()
    }
}

/// One engine-wide fault plan and the state it leaves.
#[derive(Default)]
struct Faults {
    /// The journal answers nothing before this simulated time (ms).
    down_until: u64,
    /// Per engine: paused until this simulated time (ms).
    paused_until: Vec<u64>,
    /// Per engine: what it reads of the journal's clock is off by this much (ms).
    skew: Vec<Millis>,
    /// No more random faults (the healing stage).
    healed: bool,
}

/// A simulated process: its engine, the tasks it runs, its incarnation.
struct Process {
    engine: Engine,
    tasks: Vec<tokio::task::AbortHandle>,
    incarnation: u32,
}

/// Everything the simulation shares: the seeded RNG, the history, the ledger, the faults, the
/// processes, and the checker's memory.
struct World {
    seed: u64,
    config: SimConfig,
    rng: Mutex<fastrand::Rng>,
    start: tokio::time::Instant,
    history: Mutex<Vec<String>>,
    violations: Mutex<Vec<Violation>>,
    ledger: Mutex<Ledger>,
    faults: Mutex<Faults>,
    processes: Mutex<Vec<Option<Process>>>,
    /// The tasks that listen to each engine's events (outside the processes).
    listeners: Mutex<Vec<tokio::task::AbortHandle>>,
    /// Notified when the history reaches [`MAX_STEPS`].
    overflow: tokio::sync::Notify,
    /// The journal itself (the checker and the person use it directly, fault-free).
    inner: Arc<dyn Store>,
    /// One journal operation at a time: the order of operations is the runtime's, never a
    /// thread's (SQLite's reads run on tokio's blocking pool).
    serial: tokio::sync::Mutex<()>,
    /// Whether journal operations are run to their end on this thread (SQLite).
    blocking_journal: bool,
    calls: Vec<CallInfo>,
    /// Per key: the first recorded output seen.
    recorded: Mutex<BTreeMap<String, Value>>,
    /// What callers saw: `(call, output)` of every `Ok`.
    oks: Mutex<Vec<(usize, String)>>,
    /// Keys whose result an engine reported it could not record.
    unrecorded: Mutex<BTreeSet<String>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The simulated tools' arguments: which logical call.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
struct SimArgs {
    /// The logical call's number.
    n: usize,
}

/// The class of logical call `n`.
fn class_of(n: usize) -> EffectClass {
    match n % 4 {
        0 if one_write(n) => EffectClass::Idempotent,
        0 => EffectClass::Irreversible,
        1 => EffectClass::Compensable,
        2 => EffectClass::Idempotent,
        _ => EffectClass::Irreversible,
    }
}

/// Whether call `n` is of the idempotent tool declared `one_write` (the fifth of every eight):
/// it runs before any journal write, and its one write is its record.
fn one_write(n: usize) -> bool {
    n % 8 == 4
}

/// The answer of the effect of call `n` applied by `attempt`: each application answers its own,
/// so a result recorded by the wrong attempt shows.
fn output_of(n: usize, attempt: u32) -> String {
    format!("applied-{n}-a{attempt}")
}

impl World {
    fn new(seed: u64, config: SimConfig, inner: Arc<dyn Store>) -> Self {
        let run = RunContext::new(RUN);
        let calls = (0..config.calls)
            .map(|n| {
                let class = class_of(n);
                let args = SimArgs { n };
                let id = match (class, n % 4) {
                    (EffectClass::Compensable, _) => crate::call::key::identify(&Compensable::dummy(), &run, &args),
                    (EffectClass::Idempotent, _) if one_write(n) => {
                        crate::call::key::identify(&IdempotentOneWrite::dummy(), &run, &args)
                    }
                    (EffectClass::Idempotent, _) => crate::call::key::identify(&Idempotent::dummy(), &run, &args),
                    (_, 3) => crate::call::key::identify(&IrreversibleRecover::dummy(), &run, &args),
                    _ => crate::call::key::identify(&Irreversible::dummy(), &run, &args),
                };
                let key = id.expect("the simulation's arguments key").key;
                CallInfo {
                    key,
                    label: format!("k{n}"),
                }
            })
            .collect();
        World {
            seed,
            rng: Mutex::new(fastrand::Rng::with_seed(seed)),
            start: tokio::time::Instant::now(),
            history: Mutex::new(Vec::new()),
            violations: Mutex::new(Vec::new()),
            ledger: Mutex::new(Ledger::default()),
            faults: Mutex::new(Faults {
                paused_until: vec![0; config.engines],
                skew: vec![0; config.engines],
                ..Faults::default()
            }),
            processes: Mutex::new((0..config.engines).map(|_| None).collect()),
            listeners: Mutex::new(Vec::new()),
            overflow: tokio::sync::Notify::new(),
            inner,
            serial: tokio::sync::Mutex::new(()),
            blocking_journal: config.backend != SimBackend::Memory,
            calls,
            recorded: Mutex::new(BTreeMap::new()),
            oks: Mutex::new(Vec::new()),
            unrecorded: Mutex::new(BTreeSet::new()),
            config,
        }
    }

    fn ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    fn log(&self, line: impl std::fmt::Display) {
        let at = self.ms();
        let mut history = lock(&self.history);
        if history.len() == MAX_STEPS {
            self.overflow.notify_one();
        }
        if history.len() <= MAX_STEPS {
            history.push(format!("{at:>8} {line}"));
        }
    }

    fn violate(&self, invariant: Invariant, detail: String) {
        let step = lock(&self.history).len().saturating_sub(1);
        self.log(format_args!("VIOLATION {invariant:?}: {detail}"));
        lock(&self.violations).push(Violation {
            step,
            invariant,
            detail,
        });
    }

    fn chance(&self, p: f64) -> bool {
        lock(&self.rng).f64() < p
    }

    fn below(&self, n: u64) -> u64 {
        lock(&self.rng).u64(..n.max(1))
    }

    fn healed(&self) -> bool {
        lock(&self.faults).healed
    }

    /// The label of `key` in the history (`k3`), or the key.
    fn label(&self, key: &str) -> String {
        self.calls
            .iter()
            .find(|c| c.key == key)
            .map_or_else(|| key.to_owned(), |c| c.label.clone())
    }

    fn call_of(&self, key: &str) -> Option<usize> {
        self.calls.iter().position(|c| c.key == key)
    }

    /// Run a journal operation: awaited on the memory journal; on SQLite, run to its end on
    /// this thread (`futures::executor::block_on`), so that no other task runs while its read
    /// is on tokio's blocking pool, and its answer cannot come back at a point real time picks.
    async fn sync<T>(&self, op: impl Future<Output = T>) -> T {
        if self.blocking_journal {
            futures::executor::block_on(op)
        } else {
            op.await
        }
    }

    /// A paused engine stops here until its pause ends.
    async fn gate(&self, engine: usize) {
        loop {
            let until = lock(&self.faults).paused_until.get(engine).copied().unwrap_or(0);
            let now = self.ms();
            if now >= until {
                return;
            }
            tokio::time::sleep(Duration::from_millis(until - now)).await;
        }
    }

    /// Start (or restart, with nothing remembered) engine `e`.
    fn start_engine(self: &Arc<Self>, e: usize, incarnation: u32, why: &str) {
        let store = Layered::new(
            self.inner.clone(),
            SimLayer {
                world: self.clone(),
                engine: e,
            },
        );
        let engine = Engine::with_config(
            store,
            EngineConfig {
                lease: LEASE,
                poll_interval: Duration::from_millis(25),
            },
        )
        .with_store_retry(STORE_RETRY);
        // In half the seeds each process has a stable worker identity: its restart takes its
        // previous incarnation's claims over at once.
        let engine = if self.seed % 2 == 1 {
            engine.with_worker(format!("w{e}"))
        } else {
            engine
        };
        // What the engine reports it could not record: a caller's Ok for it is allowed to differ.
        // The listener is the caller's side, outside the process: a crash right after the
        // report does not lose it.
        let mut events = engine.events();
        let world = self.clone();
        let listener = tokio::spawn(async move {
            while let Ok(event) = events.recv().await {
                if let EngineEvent::RecordFailed { key, .. } = event {
                    world.log(format_args!(
                        "e{e} reports the result of {} unrecorded",
                        world.label(&key)
                    ));
                    lock(&world.unrecorded).insert(key);
                }
            }
        });
        lock(&self.listeners).push(listener.abort_handle());
        let mut processes = lock(&self.processes);
        processes[e] = Some(Process {
            engine,
            tasks: Vec::new(),
            incarnation,
        });
        drop(processes);
        self.log(format_args!("e{e} {why} (incarnation {incarnation})"));
    }

    /// Crash engine `e`: drop every task it runs (their futures and its memory go) and start a
    /// fresh engine in its place.
    fn crash(self: &Arc<Self>, e: usize) {
        let old = lock(&self.processes)[e].take();
        let mut incarnation = 0;
        if let Some(p) = old {
            incarnation = p.incarnation + 1;
            for task in p.tasks {
                task.abort();
            }
        }
        self.start_engine(e, incarnation, "crashed and restarted");
    }

    fn stop_engines(&self) {
        let all: Vec<_> = lock(&self.processes).iter_mut().filter_map(Option::take).collect();
        for p in all {
            for task in p.tasks {
                task.abort();
            }
        }
        for listener in lock(&self.listeners).drain(..) {
            listener.abort();
        }
    }

    fn heal(&self) {
        let mut f = lock(&self.faults);
        f.healed = true;
        f.down_until = 0;
        f.paused_until.iter_mut().for_each(|p| *p = 0);
        f.skew.iter_mut().for_each(|s| *s = 0);
        drop(f);
        self.log("faults healed");
    }

    /// The tools' effect, applied at the provider (`token`: the attempt's fencing token); its
    /// answer, or `None` when the provider refused a token lower than one it has seen.
    fn effect(&self, e: usize, n: usize, ctx: &EffectCtx) -> Option<String> {
        let mut ledger = lock(&self.ledger);
        let class = class_of(n);
        let token = ctx.fencing_token();
        let highest = ledger.tokens.entry(n).or_default();
        // Only the compensable tool's provider checks fencing tokens (the irreversible ones'
        // providers know nothing of them, as most do not).
        if class == EffectClass::Compensable && token < *highest {
            let highest = *highest;
            drop(ledger);
            self.log(format_args!(
                "e{e} k{n} attempt {} request refused by the provider (fencing token {token} < {highest})",
                ctx.attempt()
            ));
            return None;
        }
        *highest = token;
        let answer = ledger
            .outputs
            .entry(n)
            .or_insert_with(|| output_of(n, ctx.attempt()))
            .clone();
        if class == EffectClass::Idempotent {
            let idem = ctx.idempotency_key();
            let keys = ledger.idem_keys.entry(n).or_default();
            keys.insert(idem.clone());
            let distinct = keys.len();
            let fresh = ledger.provider.insert(idem);
            drop(ledger);
            self.log(format_args!(
                "e{e} k{n} attempt {} request to the provider ({})",
                ctx.attempt(),
                if fresh { "applied" } else { "deduplicated" }
            ));
            if distinct > 1 {
                self.violate(
                    Invariant::OneIdempotencyKey,
                    format!("k{n} was sent {distinct} idempotency keys"),
                );
            }
            return Some(answer);
        }
        let count = ledger.applied.entry(n).or_default();
        *count += 1;
        let count = *count;
        drop(ledger);
        self.log(format_args!("e{e} k{n} attempt {} EFFECT #{count}", ctx.attempt()));
        if count > 1 {
            self.violate(Invariant::AtMostOnce, format!("k{n} ({class}) applied {count} times"));
        }
        Some(output_of(n, ctx.attempt()))
    }

    /// After a journal operation on `key`: its recorded result must be the one first seen.
    async fn check_key(&self, key: &str) {
        let Ok(Some(rec)) = self.sync(self.inner.lookup(key)).await else {
            return;
        };
        self.check_record(&rec).await;
    }

    async fn check_record(&self, rec: &EffectRecord) {
        let Some(output) = rec.output.clone().filter(|_| rec.state == RecordState::Completed) else {
            return;
        };
        let first = lock(&self.recorded)
            .entry(rec.key.clone())
            .or_insert(output.clone())
            .clone();
        if first != output {
            let amended = self
                .sync(self.inner.audit(Some(&rec.key)))
                .await
                .is_ok_and(|a| a.iter().any(|e| e.action == "amend"));
            if amended {
                lock(&self.recorded).insert(rec.key.clone(), output);
            } else {
                self.violate(
                    Invariant::ResultStable,
                    format!(
                        "{} recorded {first} then {output} without an amend",
                        self.label(&rec.key)
                    ),
                );
            }
        }
    }

    /// Lists agree with lookups, now.
    async fn check_lists(&self) {
        let listed = match self.sync(self.inner.list(&Filter::all())).await {
            Ok(l) => l,
            Err(e) => {
                self.violate(Invariant::ListsAgree, format!("the list failed: {e}"));
                return;
            }
        };
        let keys: BTreeSet<_> = listed.iter().map(|r| r.key.clone()).collect();
        for rec in &listed {
            let found = self.sync(self.inner.get(&rec.key)).await.ok().flatten();
            if found.as_ref() != Some(rec) {
                self.violate(
                    Invariant::ListsAgree,
                    format!(
                        "{} listed as {:?}, looked up as {:?}",
                        self.label(&rec.key),
                        rec.state,
                        found.map(|r| r.state)
                    ),
                );
            }
        }
        for c in &self.calls {
            let found = self.sync(self.inner.get(&c.key)).await.ok().flatten();
            if found.is_some() != keys.contains(&c.key) {
                self.violate(
                    Invariant::ListsAgree,
                    format!("{} is looked up but not listed", c.label),
                );
            }
        }
    }

    /// A person resolves a record in doubt, truthfully (from the ledger).
    async fn resolve(&self, key: &str) {
        let Some(n) = self.call_of(key) else { return };
        let applied = lock(&self.ledger).output(n);
        let verdict = match &applied {
            Some(output) => Verdict::Applied {
                output: Value::String(output.clone()),
            },
            None => Verdict::NotApplied,
        };
        let done = self.sync(self.inner.resolve(key, "sim-person", verdict)).await;
        self.log(format_args!(
            "person resolves k{n} as {}: {}",
            if applied.is_some() { "applied" } else { "not applied" },
            match &done {
                Ok(_) => "done".to_owned(),
                Err(e) => format!("refused ({e})"),
            }
        ));
    }

    /// `patient`: only the records in doubt for three leases (a request still in flight has
    /// landed by then); otherwise all (the healing stage, when nothing is in flight).
    async fn resolve_all_in_doubt(&self, patient: bool) {
        let in_doubt = Filter {
            states: vec![RecordState::InDoubt],
            ..Filter::all()
        };
        // A person looks at a record in doubt only once it has been so for a while (three
        // leases): a request still in flight then has landed.
        let now = self.inner.now();
        let mut keys: Vec<_> = self
            .sync(self.inner.list(&in_doubt))
            .await
            .unwrap_or_default()
            .into_iter()
            .filter(|r| !patient || r.updated_at + 3 * LEASE.as_millis() as Millis <= now)
            .map(|r| r.key)
            .collect();
        keys.sort();
        for key in keys {
            self.resolve(&key).await;
        }
    }

    /// The end checks: nothing claimed, lists agree with lookups, every Ok recorded.
    async fn check_end(&self) {
        self.log("end checks");
        self.check_lists().await;
        let listed = self.sync(self.inner.list(&Filter::all())).await.unwrap_or_default();
        for rec in &listed {
            self.check_record(rec).await;
            if rec.state == RecordState::Claimed {
                self.violate(
                    Invariant::NoClaimForever,
                    format!("{} is still claimed (attempt {})", self.label(&rec.key), rec.attempt),
                );
            }
        }
        let oks = lock(&self.oks).clone();
        let unrecorded = lock(&self.unrecorded).clone();
        for (n, out) in oks {
            let key = &self.calls[n].key;
            let rec = listed.iter().find(|r| &r.key == key);
            let recorded = rec.and_then(|r| r.output.clone());
            if recorded != Some(Value::String(out.clone())) && !unrecorded.contains(key) {
                self.violate(
                    Invariant::OkRecorded,
                    format!(
                        "a caller saw Ok({out}) for k{n}; the journal holds {:?} {recorded:?}",
                        rec.map(|r| r.state)
                    ),
                );
            }
        }
    }

    fn report(&self) -> SimReport {
        SimReport {
            seed: self.seed,
            history: lock(&self.history).clone(),
            violations: lock(&self.violations).clone(),
            effects: lock(&self.ledger).total(),
        }
    }

    /// Run `n` on engine `e` as one call under its tool-call id; the answer, or `None` if the
    /// engine crashed before answering.
    async fn submit(self: &Arc<Self>, e: usize, n: usize) -> Option<(Result<String, String>, Disposition)> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let world = self.clone();
        {
            let mut processes = lock(&self.processes);
            let process = processes[e].as_mut()?;
            let engine = process.engine.clone();
            let task = tokio::spawn(async move {
                let answer = world.call_on(&engine, e, n).await;
                let _ = tx.send(answer);
            });
            process.tasks.push(task.abort_handle());
        }
        rx.await.ok()
    }

    async fn call_on(self: &Arc<Self>, engine: &Engine, e: usize, n: usize) -> (Result<String, String>, Disposition) {
        let run = RunContext::new(RUN);
        let opts = CallOptions::call_id(format!("call-{n}"));
        let args = SimArgs { n };
        let tool = SimTool {
            world: self.clone(),
            engine: e,
        };
        macro_rules! call {
            ($t:ident) => {{
                let r = engine.call_with_report(&$t(Some(tool)), &run, opts, args).await;
                (r.result.map_err(|e| short(&e)), r.disposition)
            }};
        }
        match (class_of(n), n % 4) {
            (EffectClass::Compensable, _) => call!(Compensable),
            (EffectClass::Idempotent, _) if one_write(n) => call!(IdempotentOneWrite),
            (EffectClass::Idempotent, _) => call!(Idempotent),
            (_, 3) => call!(IrreversibleRecover),
            _ => call!(Irreversible),
        }
    }
}

/// An error in a word or few, for the history (no random ids).
fn short(e: &EffectError<ToolError>) -> String {
    match e {
        EffectError::Blocked(b) => format!("blocked ({:?})", b.reason),
        EffectError::Tool { error, .. } => format!("tool error ({})", error.message),
        EffectError::Store { source, .. } => format!("store error ({source})"),
        other => other.kind().to_owned(),
    }
}

/// One logical call: tried on engines the seed picks until it ends (an Ok, a block, a
/// definitive failure) or runs out of tries.
async fn caller(world: Arc<World>, n: usize) {
    tokio::time::sleep(Duration::from_millis(world.below(300))).await;
    for _ in 0..TRIES {
        let e = world.below(world.config.engines as u64) as usize;
        // A client's duplicate to another process at the same time (a retry that overtook).
        let dup = world.config.engines > 1 && world.chance(0.25);
        world.log(format_args!(
            "caller k{n} -> e{e}{}",
            if dup { " and a duplicate" } else { "" }
        ));
        let answer = if dup {
            let other = (e + 1 + world.below(world.config.engines as u64 - 1) as usize) % world.config.engines;
            let (a, b) = futures::join!(world.submit(e, n), world.submit(other, n));
            note(&world, n, other, b);
            a
        } else {
            world.submit(e, n).await
        };
        if note(&world, n, e, answer) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50 + world.below(1_500))).await;
    }
}

/// Log and keep what a caller saw; whether the call ended.
fn note(world: &World, n: usize, e: usize, answer: Option<(Result<String, String>, Disposition)>) -> bool {
    match answer {
        None => {
            world.log(format_args!("caller k{n} <- e{e}: no answer (crashed)"));
            false
        }
        Some((Ok(out), d)) => {
            world.log(format_args!("caller k{n} <- e{e}: Ok({out}) {d}"));
            lock(&world.oks).push((n, out));
            true
        }
        Some((Err(err), d)) => {
            world.log(format_args!("caller k{n} <- e{e}: Err({err}) {d}"));
            d == Disposition::Blocked
        }
    }
}

/// The healing stage's call of `n` on a healthy engine: a block is resolved by the person and
/// called again.
async fn final_call(world: &Arc<World>, n: usize) {
    for _ in 0..3 {
        world.log(format_args!("final call k{n} -> e0"));
        let answer = world.submit(0, n).await;
        let blocked = matches!(&answer, Some((Err(_), Disposition::Blocked)));
        note(world, n, 0, answer);
        if !blocked {
            return;
        }
        world.resolve_all_in_doubt(false).await;
    }
}

/// The engine-wide faults, at times the seed picks.
async fn fault_driver(world: Arc<World>) {
    if !world.config.op_faults && world.config.faults == 0 {
        return;
    }
    for _ in 0..world.config.faults {
        tokio::time::sleep(Duration::from_millis(world.below(2_500))).await;
        let e = world.below(world.config.engines as u64) as usize;
        match world.below(6) {
            0 => world.crash(e),
            1 => {
                let for_ms = LEASE.as_millis() as u64 + world.below(3 * LEASE.as_millis() as u64);
                let until = world.ms() + for_ms;
                lock(&world.faults).paused_until[e] = until;
                world.log(format_args!("e{e} paused for {for_ms} ms"));
            }
            2 => {
                let by = world.below(LEASE.as_millis() as u64) as Millis - LEASE.as_millis() as Millis / 2;
                lock(&world.faults).skew[e] = by;
                world.log(format_args!("e{e} clock skewed by {by} ms"));
            }
            3 => {
                let for_ms = 100 + world.below(2 * STORE_RETRY.as_millis() as u64);
                let until = world.ms() + for_ms;
                lock(&world.faults).down_until = until;
                world.log(format_args!("journal unavailable for {for_ms} ms"));
            }
            4 => {
                world.log("person looks at the records in doubt");
                world.resolve_all_in_doubt(true).await;
            }
            _ => {
                world.log("lists checked");
                world.check_lists().await;
            }
        }
    }
}

/// A store fault drawn for one operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StoreFault {
    None,
    Delay(u64),
    FailBefore,
    LoseAnswer,
}

/// Engine `engine`'s view of the journal: every operation goes through the faults. A layer
/// ([`StoreLayer`]): every method of the journal reaches it, the capabilities included.
struct SimLayer {
    world: Arc<World>,
    engine: usize,
}

impl SimLayer {
    fn draw(&self, write: bool) -> StoreFault {
        let w = &self.world;
        if !w.config.op_faults || w.healed() {
            return StoreFault::None;
        }
        match w.below(100) {
            0..=5 => StoreFault::FailBefore,
            6..=10 if write => StoreFault::LoseAnswer,
            11..=20 => StoreFault::Delay(w.below(LEASE.as_millis() as u64 / 2)),
            _ => StoreFault::None,
        }
    }

    /// Run `op` (named `what`, on `key`) through the faults, one journal operation at a time.
    async fn faulty<T>(
        &self,
        what: &str,
        key: Option<&str>,
        write: bool,
        op: impl Future<Output = Result<T, StoreError>>,
        say: impl Fn(&T) -> String,
    ) -> Result<T, StoreError> {
        let (w, e) = (&self.world, self.engine);
        let label = key.map(|k| w.label(k)).unwrap_or_default();
        w.gate(e).await;
        let fault = self.draw(write);
        if let StoreFault::Delay(ms) = fault {
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        if w.ms() < lock(&w.faults).down_until {
            w.log(format_args!("e{e} {what} {label}: journal unavailable"));
            return Err(StoreError::Backend("simulated: the journal is unavailable".to_owned()));
        }
        if fault == StoreFault::FailBefore {
            w.log(format_args!("e{e} {what} {label}: failed before the commit"));
            return Err(StoreError::Backend("simulated: failed before the commit".to_owned()));
        }
        let serial = w.serial.lock().await;
        let result = w.sync(op).await;
        w.log(format_args!(
            "e{e} {what} {label}: {}",
            match &result {
                Ok(t) => say(t),
                Err(err) => format!("error {}", err.to_string().chars().take(80).collect::<String>()),
            }
        ));
        if let Some(key) = key {
            w.check_key(key).await;
        }
        drop(serial);
        if fault == StoreFault::LoseAnswer {
            w.log(format_args!("e{e} {what} {label}: committed, answer lost"));
            return Err(StoreError::Backend(
                "simulated: the answer was lost after the commit".to_owned(),
            ));
        }
        // A paused process reads the answer when it resumes.
        w.gate(e).await;
        result
    }
}

impl StoreLayer for SimLayer {
    fn around<'a, T: Brief + Send + 'a>(
        &'a self,
        op: Operation<'a>,
        fut: BoxFuture<'a, Result<T, StoreError>>,
    ) -> BoxFuture<'a, Result<T, StoreError>> {
        match op.access {
            // The marker secret and output schemas: read and written once, without faults.
            Access::Setup => Box::pin(self.world.sync(fut)),
            access => Box::pin(self.faulty(op.name, op.key, access == Access::Write, fut, T::brief)),
        }
    }

    fn around_apply<'a>(
        &'a self,
        op: Operation<'a>,
        fut: BoxFuture<'a, Result<OpOutcome, StoreError>>,
    ) -> BoxFuture<'a, Result<OpOutcome, StoreError>> {
        let claim = op.name == "claim";
        let broken = self.world.config.broken;
        let fut = async move {
            match fut.await {
                // Broken: a live holder is ignored.
                Ok(OpOutcome::InFlight(rec)) if claim && broken == Some(Broken::IgnoreLiveClaims) => {
                    Ok(OpOutcome::Claimed {
                        attempt: rec.attempt,
                        previous: None,
                        before: None,
                    })
                }
                answer => answer,
            }
        };
        Box::pin(self.faulty(op.name, op.key, true, fut, OpOutcome::brief))
    }

    fn rewrite(&self, op: Op) -> Op {
        let broken = self.world.config.broken;
        // Broken: the journal keeps a claim a quarter of the lease the engine asked for.
        match op {
            Op::Claim {
                intent,
                lease_ms,
                takeover_in_doubt,
            } if broken == Some(Broken::ShortLeases) => Op::Claim {
                intent,
                lease_ms: lease_ms / 4,
                takeover_in_doubt,
            },
            Op::Renew { attempt, lease_ms } if broken == Some(Broken::ShortLeases) => Op::Renew {
                attempt,
                lease_ms: lease_ms / 4,
            },
            Op::Claim {
                intent,
                takeover_in_doubt,
                ..
            } if broken == Some(Broken::EndlessLeases) => Op::Claim {
                intent,
                lease_ms: 10_000_000,
                takeover_in_doubt,
            },
            Op::Renew { attempt, .. } if broken == Some(Broken::EndlessLeases) => Op::Renew {
                attempt,
                lease_ms: 10_000_000,
            },
            Op::Complete { attempt, .. } if broken == Some(Broken::CorruptResults) => Op::Complete {
                attempt,
                output: Value::String("corrupted".to_owned()),
            },
            op => op,
        }
    }

    fn now(&self, inner: Millis) -> Millis {
        let skew = lock(&self.world.faults).skew.get(self.engine).copied().unwrap_or(0);
        inner + skew
    }
}

/// The simulated tools' shared state: the world and the engine they run in.
#[derive(Clone)]
struct SimTool {
    world: Arc<World>,
    engine: usize,
}

/// A tool fault drawn for one execution.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ToolFault {
    None,
    FailBefore,
    /// The request leaves, and reaches the provider only after the lease (the process paused
    /// with it in its send buffer): the engine has dropped the tool by then.
    LateDelivery,
    CrashAfter,
    HangAfter,
    UnknownAfter,
}

impl SimTool {
    async fn act(&self, ctx: &EffectCtx, n: usize) -> Result<String, ToolError> {
        let (w, e) = (&self.world, self.engine);
        let fault = if w.config.op_faults && !w.healed() {
            match w.below(100) {
                0..=4 => ToolFault::FailBefore,
                5..=8 => ToolFault::CrashAfter,
                9..=12 => ToolFault::HangAfter,
                13..=16 => ToolFault::UnknownAfter,
                // Not for the irreversible tool with `recover` whose provider ignores fencing
                // tokens: its recover may ask before the late request lands, which no engine can
                // know (TESTING.md: what is not simulated).
                17..=19 if n % 4 != 3 => ToolFault::LateDelivery,
                _ => ToolFault::None,
            }
        } else {
            ToolFault::None
        };
        w.log(format_args!(
            "e{e} k{n} attempt {} tool starts ({fault:?})",
            ctx.attempt()
        ));
        // A tool takes up to 60 % of the lease (the renewals keep it).
        tokio::time::sleep(Duration::from_millis(w.below(LEASE.as_millis() as u64 * 3 / 5))).await;
        w.gate(e).await;
        if fault == ToolFault::FailBefore {
            return Err(ToolError::transient("simulated: failed before the effect"));
        }
        if fault == ToolFault::LateDelivery {
            let (world, ctx) = (w.clone(), ctx.clone());
            let late = LEASE + Duration::from_millis(w.below(LEASE.as_millis() as u64));
            w.log(format_args!(
                "e{e} k{n} attempt {} request delayed {} ms",
                ctx.attempt(),
                late.as_millis()
            ));
            // The network, not the engine: a crash or the lease's guard does not stop it.
            tokio::spawn(async move {
                tokio::time::sleep(late).await;
                world.effect(e, n, &ctx);
            });
            tokio::time::sleep(late * 2).await;
            return Err(ToolError::unknown("simulated: the request timed out"));
        }
        let Some(answer) = w.effect(e, n, ctx) else {
            return Err(ToolError::definitive(
                "simulated: the provider refused a stale fencing token",
            ));
        };
        match fault {
            ToolFault::CrashAfter => {
                w.crash(e);
                std::future::pending::<()>().await;
            }
            ToolFault::HangAfter => tokio::time::sleep(LEASE * 3).await,
            ToolFault::UnknownAfter => return Err(ToolError::unknown("simulated: the effect's answer was lost")),
            _ => {}
        }
        Ok(answer)
    }

    /// A recover's query to the provider carries the attempt's fencing token (the provider then
    /// refuses lower ones).
    fn recover(&self, ctx: &EffectCtx, n: usize) -> Option<String> {
        let mut ledger = lock(&self.world.ledger);
        let highest = ledger.tokens.entry(n).or_default();
        *highest = (*highest).max(ctx.fencing_token());
        let found = ledger.output(n);
        drop(ledger);
        self.world.log(format_args!(
            "e{} k{n} recover: {}",
            self.engine,
            found.as_deref().unwrap_or("not found")
        ));
        found
    }
}

/// One simulated tool per class (and an irreversible one with `recover`, an idempotent one
/// declared `one_write`).
macro_rules! sim_tool {
    ($name:ident, $tool:literal, $class:expr, $recover:literal) => {
        sim_tool!($name, $tool, $class, $recover, false);
    };
    ($name:ident, $tool:literal, $class:expr, $recover:literal, $one_write:literal) => {
        /// `None`: a tool for computing keys only.
        struct $name(Option<SimTool>);

        impl $name {
            fn dummy() -> Self {
                $name(None)
            }
        }

        impl Tool for $name {
            type Args = SimArgs;
            type Output = String;
            type Error = ToolError;
            const NAME: &'static str = $tool;
            const CLASS: EffectClass = $class;
            const HAS_RECOVER: bool = $recover;
            const ONE_WRITE: bool = $one_write;

            async fn call(&self, ctx: &EffectCtx, args: SimArgs) -> Result<String, ToolError> {
                match &self.0 {
                    Some(tool) => tool.act(ctx, args.n).await,
                    None => Err(ToolError::definitive("a tool for computing keys only")),
                }
            }

            async fn recover(&self, ctx: &EffectCtx, args: &SimArgs) -> Result<Option<String>, ToolError> {
                Ok(self
                    .0
                    .as_ref()
                    .filter(|_| $recover)
                    .and_then(|tool| tool.recover(ctx, args.n)))
            }
        }
    };
}

sim_tool!(Irreversible, "sim_irreversible", EffectClass::Irreversible, false);
sim_tool!(
    IrreversibleRecover,
    "sim_irreversible_recover",
    EffectClass::Irreversible,
    true
);
sim_tool!(Compensable, "sim_compensable", EffectClass::Compensable, true);
sim_tool!(Idempotent, "sim_idempotent", EffectClass::Idempotent, false);
sim_tool!(
    IdempotentOneWrite,
    "sim_idempotent_one_write",
    EffectClass::Idempotent,
    false,
    true
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decide::record::{AuditEntry, Intent};

    fn intent(key_of: &CallInfo) -> Intent {
        Intent {
            tool: "sim_irreversible".to_owned(),
            class: EffectClass::Irreversible,
            run_id: RUN.to_owned(),
            thread_id: None,
            call_id: Some("call-0".to_owned()),
            fingerprint: key_of.key.clone(),
            input: serde_json::json!({ "n": 0 }),
            ttl_ms: None,
            approval: None,
            approval_ttl_ms: None,
            holder: None,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_recorded_result_that_changes_is_a_violation_unless_amended() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let config = SimConfig {
            calls: 1,
            ..SimConfig::default()
        };
        let world = World::new(1, config, store.clone());
        let key = world.calls[0].key.clone();
        store.claim(&key, intent(&world.calls[0]), 1_000, false).await.unwrap();
        let rec = store.complete(&key, 1, Value::String("a".to_owned())).await.unwrap();
        world.check_record(&rec).await;
        assert!(
            lock(&world.violations).is_empty(),
            "the first result seen is the reference"
        );

        let mut changed = rec.clone();
        changed.output = Some(Value::String("b".to_owned()));
        world.check_record(&changed).await;
        let found: Vec<_> = lock(&world.violations).iter().map(|v| v.invariant).collect();
        assert_eq!(found, [Invariant::ResultStable], "a result changed without an amend");

        store
            .append_audit(AuditEntry {
                key: key.clone(),
                at: store.now(),
                actor: "sim-person".to_owned(),
                action: "amend".to_owned(),
                detail: None,
            })
            .await
            .unwrap();
        world.check_record(&changed).await;
        assert_eq!(lock(&world.violations).len(), 1, "an audited amend may change it");
    }

    /// The `one_write` call (k4) is simulated: each engine that leads it looks, runs the tool
    /// and writes its record, with no claim between (seed 5: two engines race it, the provider
    /// deduplicates the second request, the slower engine replays the first record).
    #[test]
    fn a_one_write_call_writes_only_its_record() {
        let report = run_seed(5, &SimConfig::default());
        assert!(report.passed(), "{:?}", report.violations);
        let k4: Vec<_> = report.history.iter().filter(|l| l.contains(" k4")).collect();
        assert!(
            k4.iter().any(|l| l.contains("record k4: now Completed")),
            "k4 recorded: {k4:#?}"
        );
        assert!(
            k4.iter().all(|l| !l.contains("claim k4")),
            "no claim of a one_write call: {k4:#?}"
        );
    }

    #[test]
    fn a_seed_replays_the_same_history() {
        let config = SimConfig::default();
        let (a, b) = (run_seed(5, &config), run_seed(5, &config));
        assert!(a.passed(), "{:?}", a.violations);
        assert!(a.history.len() > 20, "a schedule happened: {:?}", a.history);
        assert_eq!(a.history, b.history);
    }
}
