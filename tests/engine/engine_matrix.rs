//! The reliability matrix: every effect class (with and without `recover`) × every way the
//! first execution can end (success, definitive, transient, unknown with and without the effect
//! landing, an unclassified error, a panic) and every crash point (before the effect, after the
//! effect and before its record, the record write failing). Each row says, as a reviewer reads
//! it, what the first call returns, what the second call (the model's retry, or the next process
//! after the crash) returns, the final record state, and the exact number of requests the
//! downstream system received and of distinct effects it applied.
//!
//! The tools are declared with `#[tools]` on a struct that plays the downstream system; the
//! engine cannot see its counters. Crash rows run on the in-memory journal and on SQLite (the
//! second call is made through a new journal handle on the same file, as a new process would).

use crate::common;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::journal::{FailWhen, Fault, Faulty, Then};
use common::ledger::Downstream;
use effect_tool::decide::record::Op;
use effect_tool::store::sqlite::SqliteStore;
use effect_tool::{
    BlockReason, CallOptions, Disposition, DynTool, EffectCtx, EffectError, Engine, EngineConfig, MemoryStore,
    RecordState, RunContext, Store, ToolError, tools,
};
use tokio::sync::Notify;

/// What one execution of a tool does.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Act {
    Ok,
    Definitive,
    Transient,
    /// Apply the effect, then fail with an unknown outcome (a reset after sending).
    UnknownApplied,
    /// Fail with an unknown outcome; the effect did not land.
    UnknownNotApplied,
    /// Apply the effect, then fail with an error that does not say what happened.
    Unclassified,
    /// Apply the effect, then panic.
    Panic,
    /// The process dies before the effect (the tool never gets further).
    CrashBefore,
    /// The process dies after the effect, before the engine records it.
    CrashAfter,
}

/// The downstream system and the scripted behaviour of the tools declared on it.
struct Bank {
    down: Downstream,
    plan: Mutex<VecDeque<Act>>,
    started: Notify,
}

impl Bank {
    fn new(first: Act) -> Arc<Self> {
        Arc::new(Bank {
            down: Downstream::default(),
            plan: Mutex::new(VecDeque::from([first])),
            started: Notify::new(),
        })
    }

    fn apply(&self, ctx: &EffectCtx) {
        self.down.apply(&ctx.idempotency_key());
    }

    fn counts(&self) -> (usize, usize) {
        (self.down.requests(), self.down.effects())
    }

    async fn act(&self, ctx: &EffectCtx, to: &str) -> Result<String, ToolError> {
        let act = self.plan.lock().unwrap().pop_front().unwrap_or(Act::Ok);
        match act {
            Act::Ok => self.apply(ctx),
            Act::Definitive => return Err(ToolError::definitive("account closed")),
            Act::Transient => return Err(ToolError::transient("rate limited")),
            Act::UnknownApplied => {
                self.apply(ctx);
                return Err(ToolError::unknown("connection reset after sending"));
            }
            Act::UnknownNotApplied => return Err(ToolError::unknown("connection reset")),
            Act::Unclassified => {
                self.apply(ctx);
                return Err(ToolError::unclassified("something went wrong"));
            }
            Act::Panic => {
                self.apply(ctx);
                panic!("bug after sending");
            }
            Act::CrashBefore => {
                self.started.notify_one();
                std::future::pending::<()>().await;
            }
            Act::CrashAfter => {
                self.apply(ctx);
                self.started.notify_one();
                std::future::pending::<()>().await;
            }
        }
        Ok(format!("{} for {to} (attempt {})", ctx.tool(), ctx.attempt()))
    }

    fn find(&self, ctx: &EffectCtx, to: &str) -> Option<String> {
        let found = self.down.has(&ctx.idempotency_key());
        found.then(|| format!("{} found for {to}", ctx.tool()))
    }
}

#[tools]
impl Bank {
    /// Idempotent: the bank dedupes by idempotency key.
    #[tool(
        effect = "idempotent",
        retry(max_attempts = 3, base_delay = "1ms", max_delay = "2ms")
    )]
    async fn sync(&self, ctx: &EffectCtx, to: String) -> Result<String, ToolError> {
        self.act(ctx, &to).await
    }

    /// Idempotent, with a check whether it already happened.
    #[tool(effect = "idempotent", recover = find_sync, retry(max_attempts = 3, base_delay = "1ms", max_delay = "2ms"))]
    async fn sync_checked(&self, ctx: &EffectCtx, to: String) -> Result<String, ToolError> {
        self.act(ctx, &to).await
    }

    async fn find_sync(&self, ctx: &EffectCtx, args: &BankSyncCheckedArgs) -> Result<Option<String>, ToolError> {
        Ok(self.find(ctx, &args.to))
    }

    /// Compensable, without a check.
    #[tool(effect = "compensable", compensate = undo, retry(max_attempts = 3, base_delay = "1ms", max_delay = "2ms"))]
    async fn hold(&self, ctx: &EffectCtx, to: String) -> Result<String, ToolError> {
        self.act(ctx, &to).await
    }

    async fn undo(&self, _ctx: &EffectCtx, _args: &BankHoldArgs, _out: &String) -> Result<(), ToolError> {
        Ok(())
    }

    /// Irreversible, without a check.
    #[tool(
        effect = "irreversible",
        retry(max_attempts = 3, base_delay = "1ms", max_delay = "2ms")
    )]
    async fn charge(&self, ctx: &EffectCtx, to: String) -> Result<String, ToolError> {
        self.act(ctx, &to).await
    }

    /// Irreversible, with a check whether it already happened.
    #[tool(effect = "irreversible", recover = find_post, retry(max_attempts = 3, base_delay = "1ms", max_delay = "2ms"))]
    async fn post(&self, ctx: &EffectCtx, to: String) -> Result<String, ToolError> {
        self.act(ctx, &to).await
    }

    async fn find_post(&self, ctx: &EffectCtx, args: &BankPostArgs) -> Result<Option<String>, ToolError> {
        Ok(self.find(ctx, &args.to))
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Class {
    Idempotent,
    IdempotentRecover,
    Compensable,
    Irreversible,
    IrreversibleRecover,
}

fn tool_of(class: Class, bank: &Arc<Bank>) -> Arc<dyn DynTool> {
    match class {
        Class::Idempotent => Arc::new(bank.sync_tool()),
        Class::IdempotentRecover => Arc::new(bank.sync_checked_tool()),
        Class::Compensable => Arc::new(bank.hold_tool()),
        Class::Irreversible => Arc::new(bank.charge_tool()),
        Class::IrreversibleRecover => Arc::new(bank.post_tool()),
    }
}

/// Where the first call is cut short, if anywhere.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Crash {
    /// No crash: the first execution does `Act`.
    None,
    /// The process dies before the effect.
    BeforeEffect,
    /// The process dies after the effect, before its record.
    AfterEffect,
    /// The effect happens and the call returns, but writing the record fails.
    RecordFails,
}

/// What a call came to, in one word a table can hold.
fn outcome(report: &effect_tool::CallReport<serde_json::Value, String>) -> String {
    match (&report.result, report.disposition) {
        (Ok(v), d) => format!("ok:{d}:{}", attempt_of(v)),
        (Err(EffectError::Blocked(b)), _) => format!(
            "blocked:{}",
            match b.reason {
                BlockReason::InDoubtAfterCrash => "crash",
                BlockReason::UnknownOutcome => "unknown",
                BlockReason::AwaitingResolution => "awaiting",
                BlockReason::IdenticalReplan => "replan",
                BlockReason::RecoverFailed => "recover-failed",
                BlockReason::AwaitingCallback => "awaiting-callback",
            }
        ),
        (Err(EffectError::Tool { failure, .. }), _) => format!("err:{}", failure.as_str()),
        (Err(EffectError::Panicked { .. }), _) => "err:panicked".into(),
        (Err(other), _) => format!("err:{other}"),
    }
}

/// `1`, `2`, ... from an output `"... (attempt N)"`, `found` for a recovered output.
fn attempt_of(v: &serde_json::Value) -> String {
    let s = v.as_str().unwrap_or_default();
    if s.contains(" found for ") {
        return "found".into();
    }
    s.rsplit("attempt ")
        .next()
        .unwrap_or("?")
        .trim_end_matches(')')
        .to_owned()
}

/// One row of the matrix.
struct Row {
    class: Class,
    first: Act,
    crash: Crash,
    /// What the first call returns (`-` when its process crashed).
    call1: &'static str,
    /// What the second call returns.
    call2: &'static str,
    /// The record after the second call.
    state: RecordState,
    /// Requests the downstream system received, and distinct effects it applied.
    requests: usize,
    effects: usize,
}

#[allow(clippy::too_many_arguments)] // one argument per column of the table
const fn row(
    class: Class,
    first: Act,
    crash: Crash,
    call1: &'static str,
    call2: &'static str,
    state: RecordState,
    requests: usize,
    effects: usize,
) -> Row {
    Row {
        class,
        first,
        crash,
        call1,
        call2,
        state,
        requests,
        effects,
    }
}

use Act as A;
use Class as C;
use Crash as X;
use RecordState as S;

#[rustfmt::skip]
const MATRIX: &[Row] = &[
    // --- success: recorded once, replayed after ---------------------------------------------
    row(C::Idempotent,          A::Ok, X::None, "ok:executed:1", "ok:replayed:1", S::Completed, 1, 1),
    row(C::IdempotentRecover,   A::Ok, X::None, "ok:executed:1", "ok:replayed:1", S::Completed, 1, 1),
    row(C::Compensable,         A::Ok, X::None, "ok:executed:1", "ok:replayed:1", S::Completed, 1, 1),
    row(C::Irreversible,        A::Ok, X::None, "ok:executed:1", "ok:replayed:1", S::Completed, 1, 1),
    row(C::IrreversibleRecover, A::Ok, X::None, "ok:executed:1", "ok:replayed:1", S::Completed, 1, 1),
    // --- definitive: nothing happened, nothing recorded; the retry applies it -----------------
    row(C::Idempotent,          A::Definitive, X::None, "err:definitive", "ok:executed:2", S::Completed, 1, 1),
    row(C::IdempotentRecover,   A::Definitive, X::None, "err:definitive", "ok:executed:2", S::Completed, 1, 1),
    row(C::Compensable,         A::Definitive, X::None, "err:definitive", "ok:executed:2", S::Completed, 1, 1),
    row(C::Irreversible,        A::Definitive, X::None, "err:definitive", "ok:executed:2", S::Completed, 1, 1),
    row(C::IrreversibleRecover, A::Definitive, X::None, "err:definitive", "ok:executed:2", S::Completed, 1, 1),
    // --- transient: retried within the call -------------------------------------------------
    row(C::Idempotent,          A::Transient, X::None, "ok:executed:2", "ok:replayed:2", S::Completed, 1, 1),
    row(C::IdempotentRecover,   A::Transient, X::None, "ok:executed:2", "ok:replayed:2", S::Completed, 1, 1),
    row(C::Compensable,         A::Transient, X::None, "ok:executed:2", "ok:replayed:2", S::Completed, 1, 1),
    row(C::Irreversible,        A::Transient, X::None, "ok:executed:2", "ok:replayed:2", S::Completed, 1, 1),
    row(C::IrreversibleRecover, A::Transient, X::None, "ok:executed:2", "ok:replayed:2", S::Completed, 1, 1),
    // --- unknown, the effect landed: idempotent re-sends the same key; the others reconcile or
    //     block, never send again ----------------------------------------------------------
    row(C::Idempotent,          A::UnknownApplied, X::None, "ok:executed:2", "ok:replayed:2", S::Completed, 2, 1),
    row(C::IdempotentRecover,   A::UnknownApplied, X::None, "ok:executed:2", "ok:replayed:2", S::Completed, 2, 1),
    row(C::Compensable,         A::UnknownApplied, X::None, "blocked:unknown", "blocked:awaiting", S::InDoubt, 1, 1),
    row(C::Irreversible,        A::UnknownApplied, X::None, "blocked:unknown", "blocked:awaiting", S::InDoubt, 1, 1),
    row(C::IrreversibleRecover, A::UnknownApplied, X::None, "ok:reconciled:found", "ok:replayed:found", S::Completed, 1, 1),
    // --- unknown, the effect did not land ---------------------------------------------------
    row(C::Idempotent,          A::UnknownNotApplied, X::None, "ok:executed:2", "ok:replayed:2", S::Completed, 1, 1),
    row(C::IdempotentRecover,   A::UnknownNotApplied, X::None, "ok:executed:2", "ok:replayed:2", S::Completed, 1, 1),
    row(C::Compensable,         A::UnknownNotApplied, X::None, "blocked:unknown", "blocked:awaiting", S::InDoubt, 0, 0),
    row(C::Irreversible,        A::UnknownNotApplied, X::None, "blocked:unknown", "blocked:awaiting", S::InDoubt, 0, 0),
    row(C::IrreversibleRecover, A::UnknownNotApplied, X::None, "ok:executed:2", "ok:replayed:2", S::Completed, 1, 1),
    // --- an error that does not say: unknown, the safe direction ------------------------------
    row(C::Idempotent,          A::Unclassified, X::None, "ok:executed:2", "ok:replayed:2", S::Completed, 2, 1),
    row(C::IdempotentRecover,   A::Unclassified, X::None, "ok:executed:2", "ok:replayed:2", S::Completed, 2, 1),
    row(C::Compensable,         A::Unclassified, X::None, "blocked:unknown", "blocked:awaiting", S::InDoubt, 1, 1),
    row(C::Irreversible,        A::Unclassified, X::None, "blocked:unknown", "blocked:awaiting", S::InDoubt, 1, 1),
    row(C::IrreversibleRecover, A::Unclassified, X::None, "ok:reconciled:found", "ok:replayed:found", S::Completed, 1, 1),
    // --- a panic after sending: unknown --------------------------------------------------------
    row(C::Idempotent,          A::Panic, X::None, "ok:executed:2", "ok:replayed:2", S::Completed, 2, 1),
    row(C::IdempotentRecover,   A::Panic, X::None, "ok:executed:2", "ok:replayed:2", S::Completed, 2, 1),
    row(C::Compensable,         A::Panic, X::None, "blocked:unknown", "blocked:awaiting", S::InDoubt, 1, 1),
    row(C::Irreversible,        A::Panic, X::None, "blocked:unknown", "blocked:awaiting", S::InDoubt, 1, 1),
    row(C::IrreversibleRecover, A::Panic, X::None, "ok:reconciled:found", "ok:replayed:found", S::Completed, 1, 1),
    // --- crash before the effect: the next process finds a stale claim ------------------------
    row(C::Idempotent,          A::CrashBefore, X::BeforeEffect, "-", "ok:executed:2", S::Completed, 1, 1),
    row(C::IdempotentRecover,   A::CrashBefore, X::BeforeEffect, "-", "ok:executed:2", S::Completed, 1, 1),
    row(C::Compensable,         A::CrashBefore, X::BeforeEffect, "-", "blocked:crash", S::InDoubt, 0, 0),
    row(C::Irreversible,        A::CrashBefore, X::BeforeEffect, "-", "blocked:crash", S::InDoubt, 0, 0),
    row(C::IrreversibleRecover, A::CrashBefore, X::BeforeEffect, "-", "ok:executed:2", S::Completed, 1, 1),
    // --- crash after the effect, before its record ----------------------------------------------
    row(C::Idempotent,          A::CrashAfter, X::AfterEffect, "-", "ok:executed:2", S::Completed, 2, 1),
    row(C::IdempotentRecover,   A::CrashAfter, X::AfterEffect, "-", "ok:reconciled:found", S::Completed, 1, 1),
    row(C::Compensable,         A::CrashAfter, X::AfterEffect, "-", "blocked:crash", S::InDoubt, 1, 1),
    row(C::Irreversible,        A::CrashAfter, X::AfterEffect, "-", "blocked:crash", S::InDoubt, 1, 1),
    row(C::IrreversibleRecover, A::CrashAfter, X::AfterEffect, "-", "ok:reconciled:found", S::Completed, 1, 1),
    // --- the record write fails after the effect: the call succeeds; the next one reconciles ----
    row(C::Idempotent,          A::Ok, X::RecordFails, "ok:executed:1", "ok:executed:2", S::Completed, 2, 1),
    row(C::IdempotentRecover,   A::Ok, X::RecordFails, "ok:executed:1", "ok:reconciled:found", S::Completed, 1, 1),
    row(C::Compensable,         A::Ok, X::RecordFails, "ok:executed:1", "blocked:crash", S::InDoubt, 1, 1),
    row(C::Irreversible,        A::Ok, X::RecordFails, "ok:executed:1", "blocked:crash", S::InDoubt, 1, 1),
    row(C::IrreversibleRecover, A::Ok, X::RecordFails, "ok:executed:1", "ok:reconciled:found", S::Completed, 1, 1),
];

/// An engine on `store` with the matrix's lease; the rows whose record write fails keep failing:
/// retried briefly, then as before.
fn engine(store: impl Store + 'static) -> Engine {
    Engine::with_config(store, config()).with_store_retry(Duration::from_millis(50))
}

/// A lease short enough that a crashed row's claim goes stale at once, long enough that a live
/// call renews it in time on a loaded machine (at 40 ms a SQLite row under load once lapsed
/// its own claim and counted an attempt more).
fn config() -> EngineConfig {
    EngineConfig {
        lease: Duration::from_millis(150),
        poll_interval: Duration::from_millis(2),
    }
}

/// Run one row: `journal()` opens a handle on the row's journal (each call a new "process").
async fn run_row(row: &Row, journal: &(dyn Fn() -> Arc<dyn Store> + Send + Sync)) -> Result<(), String> {
    let bank = Bank::new(row.first);
    let tool = tool_of(row.class, &bank);
    let run = RunContext::new("r1");
    let args = serde_json::json!({ "to": "ann" });
    // Its `complete` fails in the rows where the record write fails (a full disk).
    let records = |op: &Op| matches!(op, Op::Complete { .. });
    let first_store = Faulty::new(
        journal(),
        FailWhen::new(records, "disk full", row.crash == Crash::RecordFails),
    );
    let first = engine(first_store);
    let call1 = match row.crash {
        Crash::None | Crash::RecordFails => {
            let report = tool
                .call_json(&first, &run, CallOptions::call_id("c1"), args.clone())
                .await;
            outcome(&report)
        }
        Crash::BeforeEffect | Crash::AfterEffect => {
            let task = {
                let (tool, first, run, args) = (tool.clone(), first.clone(), run.clone(), args.clone());
                tokio::spawn(async move {
                    tool.call_json(&first, &run, CallOptions::call_id("c1"), args).await;
                })
            };
            bank.started.notified().await;
            task.abort(); // the process dies here
            let _ = task.await;
            "-".to_owned()
        }
    };
    drop(first);
    // The same tool call again (the model's retry, or the next process after a crash).
    let second = engine(journal());
    let report = tool
        .call_json(&second, &run, CallOptions::call_id("c1"), args.clone())
        .await;
    let call2 = outcome(&report);
    let key = report.key.clone().ok_or("no key")?;
    let rec = second
        .store()
        .get(&key)
        .await
        .map_err(|e| e.to_string())?
        .ok_or("no record")?;
    // A third call changes nothing downstream.
    let before = bank.counts();
    let third = tool.call_json(&second, &run, CallOptions::call_id("c1"), args).await;
    let (requests, effects) = bank.counts();
    let mut problems = Vec::new();
    if call1 != row.call1 {
        problems.push(format!("call 1: {call1}, expected {}", row.call1));
    }
    if call2 != row.call2 {
        problems.push(format!("call 2: {call2}, expected {}", row.call2));
    }
    if rec.state != row.state {
        problems.push(format!("state: {}, expected {}", rec.state, row.state));
    }
    if (requests, effects) != (row.requests, row.effects) {
        problems.push(format!(
            "downstream: {requests} requests / {effects} effects, expected {} / {}",
            row.requests, row.effects
        ));
    }
    // Whatever the table says: a tool that cannot be applied twice and has no `recover` to ask
    // never reaches downstream twice (observed, not read from the row).
    if matches!(row.class, Class::Irreversible | Class::Compensable) && requests > 1 {
        problems.push(format!(
            "an effect that must not repeat reached downstream {requests} times"
        ));
    }
    if effects > 1 {
        problems.push(format!("{effects} distinct effects were applied for one call"));
    }
    if before != (requests, effects) {
        problems.push(format!("a third call reached downstream: {:?}", third.result));
    }
    if rec.state == RecordState::Completed && third.disposition != Disposition::Replayed {
        problems.push(format!("third call: {}, expected a replay", outcome(&third)));
    }
    // Blocked and in-doubt errors name the key and the tool and say what to do.
    if let Err(e) = &report.result
        && let Some(b) = e.as_blocked()
    {
        let text = e.to_string();
        if !(text.contains(&b.key) && text.contains(&b.tool) && text.contains("effect-tool resolve")) {
            problems.push(format!("unhelpful error: {text}"));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

async fn run_matrix(rows: &[Row], journal: &(dyn Fn() -> Arc<dyn Store> + Send + Sync)) {
    let mut failures = Vec::new();
    for row in rows {
        if let Err(problem) = run_row(row, journal).await {
            failures.push(format!(
                "{:?} × {:?} × {:?}: {problem}",
                row.class, row.first, row.crash
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} rows failed:\n{}",
        failures.len(),
        rows.len(),
        failures.join("\n")
    );
}

#[test]
fn the_matrix_covers_every_class_and_every_ending() {
    let classes = [
        C::Idempotent,
        C::IdempotentRecover,
        C::Compensable,
        C::Irreversible,
        C::IrreversibleRecover,
    ];
    let endings = [
        (A::Ok, X::None),
        (A::Definitive, X::None),
        (A::Transient, X::None),
        (A::UnknownApplied, X::None),
        (A::UnknownNotApplied, X::None),
        (A::Unclassified, X::None),
        (A::Panic, X::None),
        (A::CrashBefore, X::BeforeEffect),
        (A::CrashAfter, X::AfterEffect),
        (A::Ok, X::RecordFails),
    ];
    for class in classes {
        for (act, crash) in endings {
            let n = MATRIX
                .iter()
                .filter(|r| r.class == class && r.first == act && r.crash == crash)
                .count();
            assert_eq!(n, 1, "{class:?} × {act:?} × {crash:?}");
        }
    }
    assert_eq!(MATRIX.len(), classes.len() * endings.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reliability_matrix_memory() {
    // One journal per row: every handle of a row is the same in-memory store.
    let mut failures = Vec::new();
    for row in MATRIX {
        let mem: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let journal = move || mem.clone();
        if let Err(problem) = run_row(row, &journal).await {
            failures.push(format!(
                "{:?} × {:?} × {:?}: {problem}",
                row.class, row.first, row.crash
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} rows failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reliability_matrix_sqlite() {
    // One file for the whole matrix (rows use distinct tools or keys per bank); each call of a
    // row opens its own handle on it, as a new process would.
    let dir = tempfile::tempdir().unwrap();
    for (i, chunk) in MATRIX.chunks(5).enumerate() {
        let path = dir.path().join(format!("journal-{i}.db"));
        let journal = move || -> Arc<dyn Store> { Arc::new(SqliteStore::open(&path).unwrap()) };
        run_matrix(chunk, &journal).await;
    }
}

/// `tool` called for ann in run `r1`, as the tool call `call_id`.
async fn call_ann(
    tool: &Arc<dyn DynTool>,
    engine: &Engine,
    call_id: &str,
) -> effect_tool::CallReport<serde_json::Value, String> {
    let args = serde_json::json!({ "to": "ann" });
    tool.call_json(engine, &RunContext::new("r1"), CallOptions::call_id(call_id), args)
        .await
}

/// Beyond the table: an irreversible tool with `recover` whose every execution ends in an
/// unknown outcome that `recover` then finds did not land. Each time, nothing happened, so the
/// call is tried again, up to the tool's `max_attempts` (3) and not once more; then the call
/// fails with the last outcome and nobody needs to look (the effect is known not to be there).
#[tokio::test]
async fn unknown_outcomes_that_recover_finds_absent_are_tried_max_attempts_times_exactly() {
    let bank = Bank::new(Act::UnknownNotApplied);
    bank.plan.lock().unwrap().extend([Act::UnknownNotApplied; 4]);
    let tool = tool_of(Class::IrreversibleRecover, &bank);
    let engine = engine(Arc::new(MemoryStore::new()));
    let report = call_ann(&tool, &engine, "c1").await;
    let executions = 5 - bank.plan.lock().unwrap().len();
    assert_eq!(executions, 3, "executions of the 5 planned, with max_attempts = 3");
    assert!(report.result.is_err(), "{}", outcome(&report));
    assert_eq!(bank.counts(), (0, 0), "no effect ever landed");
}

/// The first record write of a call commits, but its answer is lost (a connection cut between
/// the commit and its reply). The engine writes the record again, the journal refuses the
/// repeat (the record is already there), and the engine finds the record it wrote itself: the
/// call succeeds with its output, once, instead of reporting its claim lost.
#[tokio::test]
async fn a_record_written_whose_answer_was_lost_is_found_and_the_call_succeeds() {
    struct LoseFirstCompletion(std::sync::atomic::AtomicBool);
    impl Fault for LoseFirstCompletion {
        fn on(&self, op: &Op) -> Then {
            if matches!(op, Op::Complete { .. }) && !self.0.swap(true, std::sync::atomic::Ordering::SeqCst) {
                Then::ForwardThenFail("connection lost after the commit")
            } else {
                Then::Forward
            }
        }
    }
    for class in [Class::Irreversible, Class::Idempotent] {
        let bank = Bank::new(Act::Ok);
        let tool = tool_of(class, &bank);
        let store = Faulty::new(
            Arc::new(MemoryStore::new()),
            LoseFirstCompletion(std::sync::atomic::AtomicBool::new(false)),
        );
        let report = call_ann(&tool, &engine(store), "c1").await;
        assert_eq!(outcome(&report), "ok:executed:1", "{class:?}");
        assert_eq!(bank.counts(), (1, 1), "{class:?}: one request, one effect");
    }
}

/// Fails the first `.0` record writes (the journal unreachable for a while) and counts every
/// record write in `.1`.
struct FailRecords(usize, std::sync::atomic::AtomicUsize);

impl Fault for FailRecords {
    fn on(&self, op: &Op) -> Then {
        if matches!(op, Op::Complete { .. }) && self.1.fetch_add(1, std::sync::atomic::Ordering::SeqCst) < self.0 {
            Then::Fail("journal unreachable")
        } else {
            Then::Forward
        }
    }
}

/// The irreversible tool called once on a journal whose first `failing` record writes fail,
/// the engine retrying them for `window`: the call's outcome, how many record writes the
/// journal saw, and the state the record was left in. The tool's effect happened once.
async fn record_through_failures(failing: usize, window: Duration) -> (String, usize, effect_tool::RecordState) {
    let bank = Bank::new(Act::Ok);
    let tool = tool_of(Class::Irreversible, &bank);
    let store = Faulty::new(Arc::new(MemoryStore::new()), FailRecords(failing, Default::default()));
    let engine = Engine::with_config(store.clone(), config()).with_store_retry(window);
    let report = call_ann(&tool, &engine, "c1").await;
    assert_eq!(bank.counts(), (1, 1));
    let recs = store.list(&effect_tool::Filter::default()).await.unwrap();
    let writes = store.1.load(std::sync::atomic::Ordering::SeqCst);
    (outcome(&report), writes, recs[0].state)
}

/// The record write fails twice (the journal briefly unreachable), then succeeds: the engine
/// retries it with backoff within its store-retry window, the call succeeds once, and the
/// journal holds the completed record (no claim left behind for the next call to reconcile).
#[tokio::test]
async fn a_record_write_that_fails_for_a_moment_is_retried_until_written() {
    let (outcome, writes, state) = record_through_failures(2, Duration::from_secs(5)).await;
    assert_eq!(outcome, "ok:executed:1");
    assert_eq!(writes, 3, "two failed writes, then one");
    assert_eq!(state, effect_tool::RecordState::Completed);
}

/// A record write that keeps failing is retried with backoff doubling from 20 ms (20, 40, 80,
/// 160, 320 ms) while the next wait still ends within the store-retry window (1 s): six writes
/// in all, then the call succeeds (its effect happened) and leaves the claim for the next
/// attempt to reconcile. On tokio's paused clock, so the count is exact. (The first 100 writes
/// fail: a retry loop that does not back off would spin for ever on the paused clock, and ends
/// there instead, the count showing it.)
#[tokio::test(start_paused = true)]
async fn a_record_write_that_keeps_failing_is_retried_with_doubling_backoff_within_the_window() {
    let (outcome, writes, state) = record_through_failures(100, Duration::from_secs(1)).await;
    assert_eq!(outcome, "ok:executed:1");
    assert_eq!(writes, 6, "the write, then 5 retries");
    assert_eq!(state, effect_tool::RecordState::Claimed, "left to reconcile");
}

/// A record write is retried only if the wait before it ends before the store-retry window
/// does: with a window of 300 ms the writes at 0, 20, 60 and 140 ms fail, and the next wait
/// (160 ms) would end at 300 ms, the window's end, so the engine stops there: four writes.
#[tokio::test(start_paused = true)]
async fn a_record_write_is_not_retried_after_a_wait_that_reaches_the_end_of_the_window() {
    let (outcome, writes, state) = record_through_failures(100, Duration::from_millis(300)).await;
    assert_eq!(outcome, "ok:executed:1");
    assert_eq!(writes, 4, "the write, then 3 retries");
    assert_eq!(state, effect_tool::RecordState::Claimed, "left to reconcile");
}

/// The events at `DEBUG` and above that the engine logs on this thread, as (level, message).
#[derive(Clone, Default)]
struct Logged(Arc<Mutex<Vec<(tracing::Level, String)>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Logged {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        struct Message(String);
        impl tracing::field::Visit for Message {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                if field.name() == "message" {
                    self.0 = format!("{value:?}");
                }
            }
        }
        let mut message = Message(String::new());
        event.record(&mut message);
        self.0.lock().unwrap().push((*event.metadata().level(), message.0));
    }
}

/// An operator sees a record write that keeps failing once at `WARN`, on its first retry; the
/// retries after it (backing off, the same failure) are at `DEBUG`, so a journal outage of a
/// few seconds is one warning per call, not one per attempt. When the window ends, the call's
/// give-up (the effect applied, its record not written) is a warning of its own.
#[tokio::test(start_paused = true)]
async fn a_record_write_that_keeps_failing_warns_on_its_first_retry_and_logs_the_rest_at_debug() {
    use tracing_subscriber::layer::SubscriberExt;
    let logged = Logged::default();
    let subscriber = tracing_subscriber::registry()
        .with(logged.clone())
        .with(tracing_subscriber::filter::LevelFilter::DEBUG);
    // The test's runtime is current-thread: every poll of the call is on this thread.
    let _guard = tracing::subscriber::set_default(subscriber);
    let (outcome, writes, _) = record_through_failures(100, Duration::from_secs(1)).await;
    assert_eq!((outcome.as_str(), writes), ("ok:executed:1", 6));
    let retries: Vec<tracing::Level> = logged
        .0
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, m)| m.contains("could not record the effect's result; retrying"))
        .map(|(level, _)| *level)
        .collect();
    assert_eq!(
        retries,
        [
            tracing::Level::WARN,
            tracing::Level::DEBUG,
            tracing::Level::DEBUG,
            tracing::Level::DEBUG,
            tracing::Level::DEBUG
        ],
        "one line per retry: the first a warning, the rest at debug"
    );
    let gave_up = logged
        .0
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, m)| m.contains("effect applied but its record failed"))
        .map(|(level, _)| *level)
        .collect::<Vec<_>>();
    assert_eq!(gave_up, [tracing::Level::WARN]);
}

/// An attempt that loses its claim while its tool runs (here: its claim is released under it,
/// as an operator's `effect-tool resolve` or a takeover would leave it) and another attempt
/// then records the call. The first attempt's error names the attempt that owns the key now and
/// carries that attempt's recorded result, never the first attempt's own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_that_lost_its_claim_names_the_attempt_that_owns_the_key_and_its_result() {
    // The first execution hangs (until its lease is found lost); the second records.
    let bank = Bank::new(Act::CrashBefore);
    let tool = tool_of(Class::Idempotent, &bank);
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    // A lease long enough that the second attempt records long before the first attempt's
    // next renewal (a third of the lease) is refused.
    let long = || {
        Engine::with_config(
            store.clone(),
            EngineConfig {
                lease: Duration::from_secs(3),
                poll_interval: Duration::from_millis(2),
            },
        )
    };
    let first = {
        let (tool, engine) = (tool.clone(), long());
        tokio::spawn(async move { call_ann(&tool, &engine, "c1").await })
    };
    bank.started.notified().await;
    let key = store.list(&effect_tool::Filter::default()).await.unwrap()[0]
        .key
        .clone();
    store
        .apply(
            &key,
            Op::Release {
                attempt: 1,
                reason: Some("released under it".into()),
            },
        )
        .await
        .unwrap();
    let second = call_ann(&tool, &long(), "c2").await;
    assert_eq!(outcome(&second), "ok:executed:2");
    let recorded = second.result.unwrap();

    let first = first.await.unwrap();
    match first.result {
        Err(EffectError::ClaimLost {
            attempt,
            current,
            recorded: theirs,
            ..
        }) => {
            assert_eq!((attempt, current), (1, Some(2)), "the attempt that owns the key now");
            assert_eq!(theirs.as_deref(), Some(&recorded), "the owner's recorded result");
        }
        other => panic!("expected ClaimLost, got {other:?}"),
    }
    assert_eq!(bank.counts(), (1, 1), "one effect, the second attempt's");
}
