//! The fixture the bench binaries share: an idempotent refund tool whose body is a no-op, with
//! a ~100-byte input, so that only the engine and the journal are measured.

// Each bench binary uses its own part of the fixture.
#![allow(dead_code)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use effect_tool::{CallOptions, EffectClass, EffectCtx, Engine, RunContext, Tool, ToolError};
use serde::{Deserialize, Serialize};

/// The refund's arguments.
#[derive(Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RefundArgs {
    pub order_id: String,
    pub amount_cents: u64,
    pub currency: String,
    pub reason: String,
}

/// About 100 bytes of JSON; `n` makes each input (and so each key) new.
pub fn input(n: u64) -> RefundArgs {
    RefundArgs {
        order_id: format!("ord_{n:016}"),
        amount_cents: 12_345,
        currency: "EUR".into(),
        reason: "customer returned the damaged item".into(),
    }
}

/// An idempotent no-op: its output is the amount.
pub struct Refund;

impl Tool for Refund {
    type Args = RefundArgs;
    type Output = u64;
    type Error = ToolError;
    const NAME: &'static str = "issue_refund";
    const CLASS: EffectClass = EffectClass::Idempotent;

    async fn call(&self, _ctx: &EffectCtx, args: RefundArgs) -> Result<u64, ToolError> {
        Ok(args.amount_cents)
    }
}

/// The same tool declared `one_write` (`#[tool(one_write)]`): it runs before any journal write
/// and its one write is its record.
pub struct RefundOneWrite;

impl Tool for RefundOneWrite {
    type Args = RefundArgs;
    type Output = u64;
    type Error = ToolError;
    const NAME: &'static str = "issue_refund_one_write";
    const CLASS: EffectClass = EffectClass::Idempotent;
    const ONE_WRITE: bool = true;

    async fn call(&self, _ctx: &EffectCtx, args: RefundArgs) -> Result<u64, ToolError> {
        Ok(args.amount_cents)
    }
}

/// The same tool, irreversible: its claim must be on disk before it runs.
pub struct Charge;

impl Tool for Charge {
    type Args = RefundArgs;
    type Output = u64;
    type Error = ToolError;
    const NAME: &'static str = "charge_card";
    const CLASS: EffectClass = EffectClass::Irreversible;

    async fn call(&self, _ctx: &EffectCtx, args: RefundArgs) -> Result<u64, ToolError> {
        Ok(args.amount_cents)
    }
}

/// Numbers every input a bench makes, so that each new call has a new key.
pub static NEXT: AtomicU64 = AtomicU64::new(1);

/// `n` sequential new calls of `tool` (each with a new input) through `engine`: their time.
pub fn new_calls<T: Tool<Args = RefundArgs>>(
    rt: &tokio::runtime::Runtime,
    engine: &Engine,
    tool: &T,
    run: &RunContext,
    n: u64,
) -> Duration {
    rt.block_on(async {
        let start = Instant::now();
        for _ in 0..n {
            let i = NEXT.fetch_add(1, Ordering::Relaxed);
            if engine.call(tool, run, CallOptions::default(), input(i)).await.is_err() {
                panic!("a new call of {} failed", T::NAME);
            }
        }
        start.elapsed()
    })
}

/// `n` keys of new calls, as the engine computes them (run `bench-floor`).
pub fn new_keys(n: u64) -> Vec<String> {
    let run = RunContext::new("bench-floor");
    (0..n)
        .map(|_| {
            let args = input(NEXT.fetch_add(1, Ordering::Relaxed));
            effect_tool::call::key::identify(&Refund, &run, &args).unwrap().key
        })
        .collect()
}

/// A fingerprint's size (SHA-256 in hex).
pub const FINGERPRINT: &str = "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0";

/// The SQLite journal's own SQL for a new call, with no engine: the lookup, the claim's
/// `INSERT` and the record's guarded `UPDATE` of the columns a completion changes, into the
/// store's own table on a plain connection, checkpointed as the store does it (a thread with
/// its own connection runs a `PASSIVE` checkpoint every 64 new calls, 128 writes, and the
/// writer never checkpoints inline). It shows what a new call costs the database itself.
pub struct SqliteFloor {
    conn: rusqlite::Connection,
    checkpoint: std::sync::mpsc::Sender<()>,
}

impl SqliteFloor {
    /// On the journal at `path` (its schema already made by the store), at `synchronous`
    /// (`"FULL"` or `"NORMAL"`).
    pub fn open(path: &std::path::Path, synchronous: &str) -> SqliteFloor {
        let conn = rusqlite::Connection::open(path).unwrap();
        conn.busy_timeout(Duration::from_secs(10)).unwrap();
        conn.execute_batch(&format!(
            "PRAGMA synchronous = {synchronous}; PRAGMA wal_autocheckpoint = 0;"
        ))
        .unwrap();
        let (checkpoint, asked) = std::sync::mpsc::channel::<()>();
        let checkpointer = rusqlite::Connection::open(path).unwrap();
        checkpointer
            .execute_batch(&format!("PRAGMA synchronous = {synchronous};"))
            .unwrap();
        std::thread::spawn(move || {
            while asked.recv().is_ok() {
                checkpointer
                    .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))
                    .unwrap();
            }
        });
        SqliteFloor { conn, checkpoint }
    }

    /// The plain connection, for other statements by hand.
    pub fn conn(&self) -> &rusqlite::Connection {
        &self.conn
    }

    /// `n` new calls' statements with `payload` as their input; their time. `switch`: the
    /// claim commits under `synchronous = NORMAL` and the record under `FULL`, as the store does
    /// for an idempotent tool on a `FULL` journal (two `PRAGMA`s per call).
    pub fn new_calls(&self, n: u64, payload: &str, switch: bool) -> Duration {
        let keys = new_keys(n);
        let floor = &self.conn;
        let mut lookup = floor.prepare_cached(FLOOR_LOOKUP).unwrap();
        let mut claim = floor
            .prepare_cached(&format!(
                "INSERT INTO effect_records ({RECORD_COLUMNS})
                 VALUES (?1, 1, 'issue_refund', 'idempotent', 'bench-floor', NULL, NULL, ?2, ?3, 'claimed', 1, ?4,
                   NULL, NULL, NULL, NULL, ?5, ?5, NULL)"
            ))
            .unwrap();
        let mut record = floor
            .prepare_cached(
                "UPDATE effect_records SET state = 'completed', lease_until = NULL, output = ?2, updated_at = ?3
                 WHERE key = ?1 AND state = 'claimed' AND attempt = 1 AND updated_at = ?4 AND lease_until IS ?5
                   AND version = 1",
            )
            .unwrap();
        let start = Instant::now();
        for (i, key) in keys.iter().enumerate() {
            let now = effect_tool::decide::record::now_millis();
            let found = lookup.exists([key]).unwrap();
            assert!(!found);
            if switch {
                floor.execute_batch("PRAGMA synchronous = NORMAL").unwrap();
            }
            claim
                .execute(rusqlite::params![key, FINGERPRINT, payload, now + 30_000, now])
                .unwrap();
            if switch {
                floor.execute_batch("PRAGMA synchronous = FULL").unwrap();
            }
            let n = record
                .execute(rusqlite::params![key, "12345", now + 1, now, now + 30_000])
                .unwrap();
            assert_eq!(n, 1);
            if i % 64 == 63 {
                self.checkpoint.send(()).unwrap();
            }
        }
        start.elapsed()
    }
}

impl SqliteFloor {
    /// `n` new `one_write` calls' statements with `payload` as their input; their time: the
    /// lookup that finds nothing, then the record's `INSERT` of the completed row in one
    /// transaction that reads the key again first (as the store's writer does).
    pub fn one_write_calls(&self, n: u64, payload: &str) -> Duration {
        let keys = new_keys(n);
        let floor = &self.conn;
        let mut lookup = floor.prepare_cached(FLOOR_LOOKUP).unwrap();
        let mut record = floor
            .prepare_cached(&format!(
                "INSERT INTO effect_records ({RECORD_COLUMNS})
                 VALUES (?1, 1, 'issue_refund', 'idempotent', 'bench-floor', NULL, NULL, ?2, ?3, 'completed', 1, NULL,
                   '12345', NULL, NULL, NULL, ?4, ?4, NULL)"
            ))
            .unwrap();
        let start = Instant::now();
        for (i, key) in keys.iter().enumerate() {
            let now = effect_tool::decide::record::now_millis();
            assert!(!lookup.exists([key]).unwrap());
            floor.prepare_cached("BEGIN IMMEDIATE").unwrap().execute([]).unwrap();
            assert!(!lookup.exists([key]).unwrap());
            record
                .execute(rusqlite::params![key, FINGERPRINT, payload, now])
                .unwrap();
            floor.prepare_cached("COMMIT").unwrap().execute([]).unwrap();
            if i % 128 == 127 {
                self.checkpoint.send(()).unwrap();
            }
        }
        start.elapsed()
    }
}

/// The journal's record columns, in the order the floors' `INSERT`s give them.
pub const RECORD_COLUMNS: &str = "key, version, tool, class, run_id, thread_id, call_id, fingerprint, input, state, \
     attempt, lease_until, output, reason, approval_role, decided_by, created_at, updated_at, expires_at";

/// The SQLite floors' lookup of a key (what the store's lookup reads of a record).
const FLOOR_LOOKUP: &str =
    "SELECT version, state, attempt, output, fingerprint, lease_until FROM effect_records WHERE key = ?1";

/// A measured operation: `run(n)` performs `n` operations and returns the time they took.
pub type Op<'a> = Box<dyn FnMut(u64) -> Duration + 'a>;

/// How many operations one measurement of an op runs: about `budget`'s worth, between `min`
/// and `max`.
pub struct Calibration {
    pub budget: Duration,
    pub min: u64,
    pub max: u64,
}

/// Per-operation times (seconds) of every op in every round. The ops run interleaved (round 1
/// of each, then round 2 of each, ...) so that a change in the machine's load hits them alike,
/// and ratios are taken within a round. Each op is first calibrated to `cal`.
pub fn measure_interleaved(ops: &mut [Op<'_>], rounds: usize, cal: &Calibration) -> Vec<Vec<f64>> {
    let sizes: Vec<u64> = ops
        .iter_mut()
        .map(|run| {
            let mut n = 8u64;
            loop {
                let t = run(n);
                if t >= cal.budget / 4 || n >= cal.max {
                    let per = t.as_secs_f64() / n as f64;
                    break ((cal.budget.as_secs_f64() / per) as u64).clamp(cal.min, cal.max);
                }
                n *= 4;
            }
        })
        .collect();
    (0..rounds)
        .map(|_| {
            ops.iter_mut()
                .zip(&sizes)
                .map(|(run, &n)| run(n).as_secs_f64() / n as f64)
                .collect()
        })
        .collect()
}

/// The median of `v` (the upper one of an even count).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}
