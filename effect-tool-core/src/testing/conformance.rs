//! The conformance suite every journal backend passes (feature `testing`).
//!
//! A backend provides a [`Harness`] (a fresh, empty journal per case, and a way for another
//! process to open the same journal); [`conformance_tests!`](crate::conformance_tests)
//! generates one `#[test]` per case in a module named after the backend, so test names say
//! the backend (`sqlite::claim_complete`, `postgres::fencing`, ...):
//!
//! ```ignore
//! use effect_tool_core::testing::conformance::SqliteHarness;
//! effect_tool_core::conformance_tests!(sqlite, SqliteHarness, durable);
//! ```
//!
//! `durable` adds the cases only a journal shared by several processes can pass: a record of a
//! future version planted behind the store's back, and N operating-system processes racing the
//! same keys (exactly one execution per key, counted in a ledger file the store cannot see).
//! [`crash_tests!`](crate::crash_tests) generates the crash cases: a child process is
//! SIGKILLed between the effect (written to a ledger file) and its record, and the restarted
//! call must reconcile, re-run with the same idempotency key, or stop with
//! [`SideEffectRetryBlocked`](crate::SideEffectRetryBlocked), never run a silent second effect.
//! The idempotent tool's claim is committed without a flush of its own
//! ([`Op::needs_flush`](crate::decide::record::Op::needs_flush)): the idempotent case shows that it
//! survives the SIGKILL all the same (the restarted call takes it over as attempt 2).
//!
//! Child processes are the test binary itself, re-run with `--ignored --exact
//! <module>::child_process` and the job in environment variables.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::call::context::{EffectCtx, RunContext};
use crate::call::error::{BlockReason, EffectError, StoreError};
use crate::call::tool::{KeyRule, Tool};
use crate::decide::record::{Intent, Op, OpOutcome, RecordState, Rejected, Verdict};
use crate::engine::{CallOptions, Disposition, Engine, EngineConfig};
use crate::store::{Filter, MemoryStore, Store, StoreExt, collectable};
use crate::value::class::{EffectClass, Window};
use crate::value::outcome::ToolError;

/// Whether a backend can run its cases here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Availability {
    /// Run the cases.
    Ready,
    /// Skip them, for this reason (e.g. no database URL). If `required` the cases fail instead.
    Unavailable {
        /// Why, and what to set to run them.
        reason: String,
        /// Whether skipping is an error here (CI).
        required: bool,
    },
}

/// What the suite needs from a backend.
#[async_trait]
pub trait Harness: Send + Sync + Sized + 'static {
    /// The backend's name, for messages.
    const NAME: &'static str;

    /// Whether the backend can run here (default: always).
    fn availability() -> Availability {
        Availability::Ready
    }

    /// A fresh, empty journal of its own (nothing from other cases is visible).
    async fn fresh() -> Self;

    /// The journal.
    fn store(&self) -> Arc<dyn Store>;

    /// How another process opens this same journal (`None`: it lives in this process only).
    fn locator(&self) -> Option<String> {
        None
    }

    /// Open the journal named by [`Harness::locator`] (in a child process).
    async fn open(locator: &str) -> Arc<dyn Store> {
        panic!(
            "{} journals cannot be opened from another process (locator `{locator}`)",
            Self::NAME
        )
    }

    /// Write, behind the store's back, a record under `key` as a future version of effect-tool
    /// would (record version [`crate::decide::record::RECORD_VERSION`] + 1, expired ttl). `false` when
    /// the backend cannot hold such a record.
    async fn plant_future_record(&self, key: &str) -> bool {
        let _ = key;
        false
    }
}

/// Run one case on a multi-threaded runtime, after checking that the backend is available
/// (a loud `SKIPPED` line when it is not and that is allowed; a failure when it is required).
pub fn run<H: Harness, F, Fut>(case: &str, f: F)
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    if let Availability::Unavailable { reason, required } = H::availability() {
        if required {
            panic!("{} case `{case}` cannot run and is required here: {reason}", H::NAME);
        }
        eprintln!(
            "\n*** SKIPPED {} conformance case `{case}`: {reason} ***\n",
            H::NAME.to_uppercase()
        );
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("a tokio runtime for the conformance case");
    rt.block_on(f());
}

/// Generate the conformance cases for a backend: `conformance_tests!(name, Harness)` or
/// `conformance_tests!(name, Harness, durable)` for journals shared across processes.
#[macro_export]
macro_rules! conformance_tests {
    ($prefix:ident, $harness:ty) => {
        mod $prefix {
            #[allow(unused_imports)]
            use super::*;
            $crate::__conformance_cases!($harness;
                claim_complete, release_and_reclaim, in_doubt_and_takeover, resolve_verdicts,
                amend_corrects_a_resolution, resolve_checks_the_output, approve_and_deny, approve_edited_binds_and_carries, approval_binds_its_input, shared_results_keep_their_call_ids, engine_decisions_are_audited, fencing_rejects_late_writers, lease_renew_and_expiry, ttl_and_gc,
                audit_trail_kept, list_filters, concurrent_claims, engine_replays_and_shares, secrets_never_stored, worker_takes_over_its_previous_incarnation,
                budgets_spent_atomically, grants_kept_listed_revoked, granted_claim_is_audited, engine_uses_grants,
                callbacks_settle_records, record_without_a_claim, engine_one_write);
        }
    };
    ($prefix:ident, $harness:ty, durable) => {
        mod $prefix {
            #[allow(unused_imports)]
            use super::*;
            $crate::__conformance_cases!($harness;
                claim_complete, release_and_reclaim, in_doubt_and_takeover, resolve_verdicts,
                amend_corrects_a_resolution, resolve_checks_the_output, approve_and_deny, approve_edited_binds_and_carries, approval_binds_its_input, shared_results_keep_their_call_ids, engine_decisions_are_audited, fencing_rejects_late_writers, lease_renew_and_expiry, ttl_and_gc,
                audit_trail_kept, list_filters, concurrent_claims, engine_replays_and_shares, secrets_never_stored, worker_takes_over_its_previous_incarnation,
                budgets_spent_atomically, future_version_refused, fencing_across_handles, budgets_across_handles,
                grants_kept_listed_revoked, granted_claim_is_audited, engine_uses_grants, grants_across_handles,
                callbacks_settle_records, record_without_a_claim, engine_one_write);
            #[test]
            fn processes_race_same_keys() {
                $crate::testing::conformance::run::<$harness, _, _>("processes_race_same_keys", || {
                    $crate::testing::conformance::cases::processes_race_same_keys::<$harness>(module_path!())
                });
            }
            $crate::__conformance_child!($harness);
        }
    };
}

/// Generate the crash cases for a durable backend: `crash_tests!(name, Harness)`.
#[macro_export]
macro_rules! crash_tests {
    ($prefix:ident, $harness:ty) => {
        mod $prefix {
            #[allow(unused_imports)]
            use super::*;
            #[test]
            fn crash_then_recover_reconciles() {
                $crate::testing::conformance::run::<$harness, _, _>("crash_then_recover_reconciles", || {
                    $crate::testing::conformance::crash::crash_case::<$harness>(
                        module_path!(),
                        $crate::testing::conformance::crash::Variant::Recover,
                    )
                });
            }
            #[test]
            fn crash_then_idempotent_reruns_same_key() {
                $crate::testing::conformance::run::<$harness, _, _>("crash_then_idempotent_reruns_same_key", || {
                    $crate::testing::conformance::crash::crash_case::<$harness>(
                        module_path!(),
                        $crate::testing::conformance::crash::Variant::Idempotent,
                    )
                });
            }
            #[test]
            fn crash_then_one_write_reruns_same_key() {
                $crate::testing::conformance::run::<$harness, _, _>("crash_then_one_write_reruns_same_key", || {
                    $crate::testing::conformance::crash::crash_case::<$harness>(
                        module_path!(),
                        $crate::testing::conformance::crash::Variant::OneWrite,
                    )
                });
            }
            #[test]
            fn crash_then_irreversible_is_blocked() {
                $crate::testing::conformance::run::<$harness, _, _>("crash_then_irreversible_is_blocked", || {
                    $crate::testing::conformance::crash::crash_case::<$harness>(
                        module_path!(),
                        $crate::testing::conformance::crash::Variant::Irreversible,
                    )
                });
            }
            $crate::__conformance_child!($harness);
        }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_cases {
    ($harness:ty; $($case:ident),* $(,)?) => {
        $(
            #[test]
            fn $case() {
                $crate::testing::conformance::run::<$harness, _, _>(stringify!($case), $crate::testing::conformance::cases::$case::<$harness>);
            }
        )*
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_child {
    ($harness:ty) => {
        #[test]
        #[ignore = "entry point of the child processes of the multi-process cases; run by them"]
        fn child_process() {
            $crate::testing::conformance::child_main::<$harness>();
        }
    };
}

const CHILD_JOB: &str = "EFFECT_TOOL_CONFORMANCE_JOB";

/// What a child process is asked to do (passed as JSON in an environment variable).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "job", rename_all = "kebab-case")]
enum ChildJob {
    Race {
        locator: String,
        ledger: PathBuf,
        go: PathBuf,
        keys: Vec<String>,
    },
    Crash {
        locator: String,
        ledger: PathBuf,
        exec_log: PathBuf,
        variant: crash::Variant,
        key: String,
    },
}

/// The body of the generated `child_process` test: do the job the parent passed, if any.
pub fn child_main<H: Harness>() {
    let Ok(job) = std::env::var(CHILD_JOB) else {
        eprintln!("child_process is the entry point of child processes of the multi-process cases; nothing to do");
        return;
    };
    let job: ChildJob = serde_json::from_str(&job).expect("the child's job");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime for the child");
    rt.block_on(async move {
        match job {
            ChildJob::Race {
                locator,
                ledger,
                go,
                keys,
            } => {
                let store = H::open(&locator).await;
                let engine = Engine::new(store);
                while !go.exists() {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                let tool = LedgerTool { ledger };
                let run = RunContext::new(format!("race-{}", std::process::id()));
                let calls = keys.iter().map(|k| {
                    let args = LedgerArgs { key: k.clone() };
                    engine.call(&tool, &run, CallOptions::default(), args)
                });
                let results = futures::future::join_all(calls).await;
                for (key, result) in keys.iter().zip(results) {
                    match result {
                        Ok(out) => assert_eq!(out, format!("applied:{key}"), "the output of {key}"),
                        Err(e) => panic!("child {}: call for {key} failed: {e}", std::process::id()),
                    }
                }
            }
            ChildJob::Crash {
                locator,
                ledger,
                exec_log,
                variant,
                key,
            } => {
                let store = H::open(&locator).await;
                let engine = Engine::with_config(store, crash::engine_config());
                let files = crash::Files {
                    ledger,
                    exec_log,
                    hang_after_effect: true,
                };
                let result = crash::call(&engine, &files, variant, &key).await;
                panic!("the child should have been killed inside the effect, but the call returned {result:?}");
            }
        }
    });
}

/// Spawn this test binary as a child running `job`.
fn spawn_child(module_path: &str, job: &ChildJob) -> std::process::Child {
    // `module_path!()` starts with the crate name; test names do not.
    let module = module_path.split_once("::").map_or(module_path, |(_, rest)| rest);
    let exe = std::env::current_exe().expect("the test binary's path");
    std::process::Command::new(exe)
        .args([
            "--ignored",
            "--exact",
            &format!("{module}::child_process"),
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_JOB, serde_json::to_string(job).expect("job as JSON"))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("spawning a child process")
}

/// A directory for a case's files (ledgers), removed when dropped.
#[derive(Debug)]
pub struct ScratchDir(PathBuf);

impl ScratchDir {
    /// A new empty directory under the system temp dir.
    pub fn new(what: &str) -> Self {
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "effect-tool-{what}-{}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed),
            fastrand::u64(..)
        ));
        std::fs::create_dir_all(&dir).expect("creating a scratch directory");
        ScratchDir(dir)
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Append one line to a ledger file (one `write` with `O_APPEND`: lines from several processes
/// never interleave).
pub fn ledger_append(path: &Path, line: &str) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .expect("opening the ledger");
    f.write_all(format!("{line}\n").as_bytes()).expect("writing the ledger");
}

/// The lines of a ledger file (none if it does not exist).
pub fn ledger_lines(path: &Path) -> Vec<String> {
    match std::fs::read_to_string(path) {
        Ok(text) => text.lines().map(str::to_owned).collect(),
        Err(_) => Vec::new(),
    }
}

/// The arguments of [`LedgerTool`].
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LedgerArgs {
    /// The effect key.
    pub key: String,
}

/// An idempotent tool whose effect is a line in a ledger file, keyed by its argument.
#[derive(Debug, Clone)]
pub struct LedgerTool {
    /// The ledger.
    pub ledger: PathBuf,
}

impl Tool for LedgerTool {
    type Args = LedgerArgs;
    type Output = String;
    type Error = ToolError;
    const NAME: &'static str = "ledger_append";
    const CLASS: EffectClass = EffectClass::Idempotent;
    const KEY_RULE: KeyRule = KeyRule::Custom("|a| a.key.clone()");
    const WINDOW: Window = Window::CrossRun;

    fn key(&self, args: &LedgerArgs) -> Option<String> {
        Some(args.key.clone())
    }

    async fn call(&self, _ctx: &EffectCtx, args: LedgerArgs) -> Result<String, ToolError> {
        ledger_append(&self.ledger, &format!("{} {}", args.key, std::process::id()));
        // Widen the window in which another process could run it too.
        tokio::time::sleep(Duration::from_millis(2)).await;
        Ok(format!("applied:{}", args.key))
    }
}

/// A tool that counts its executions in memory the engine cannot see.
#[derive(Debug, Clone, Default)]
struct CountingTool {
    runs: Arc<AtomicUsize>,
}

impl Tool for CountingTool {
    type Args = LedgerArgs;
    type Output = String;
    type Error = ToolError;
    const NAME: &'static str = "counted";
    const CLASS: EffectClass = EffectClass::Idempotent;

    async fn call(&self, _ctx: &EffectCtx, args: LedgerArgs) -> Result<String, ToolError> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(20)).await;
        Ok(format!("counted:{}", args.key))
    }
}

/// What [`SendReceipt`] returns: an object, so a bare string recorded by a person does not
/// decode as it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
struct Receipt {
    id: String,
}

/// An irreversible tool whose first execution times out after sending (an unknown outcome);
/// it counts its executions in memory the engine cannot see.
#[derive(Debug, Clone, Default)]
struct SendReceipt {
    runs: Arc<AtomicUsize>,
}

impl Tool for SendReceipt {
    type Args = LedgerArgs;
    type Output = Receipt;
    type Error = ToolError;
    const NAME: &'static str = "send_receipt";
    const CLASS: EffectClass = EffectClass::Irreversible;

    async fn call(&self, _ctx: &EffectCtx, args: LedgerArgs) -> Result<Receipt, ToolError> {
        match self.runs.fetch_add(1, Ordering::SeqCst) {
            0 => Err(ToolError::unknown("the mail API timed out after sending")),
            n => Ok(Receipt {
                id: format!("{}-{n}", args.key),
            }),
        }
    }
}

/// [`SendReceipt`] declaring its output's JSON Schema ([`Tool::output_schema`]), as `#[tool]`
/// does for an output type that implements `JsonSchema`.
#[derive(Debug, Clone, Default)]
struct TypedReceipt(SendReceipt);

impl Tool for TypedReceipt {
    type Args = LedgerArgs;
    type Output = Receipt;
    type Error = ToolError;
    const NAME: &'static str = "send_typed_receipt";
    const CLASS: EffectClass = EffectClass::Irreversible;

    fn output_schema() -> Option<Value> {
        Some(crate::value::schema::output_schema::<Receipt>())
    }

    async fn call(&self, ctx: &EffectCtx, args: LedgerArgs) -> Result<Receipt, ToolError> {
        self.0.call(ctx, args).await
    }
}

/// A card number no journal may contain (see `secrets_never_stored`).
pub const SECRET: &str = "4111-1111-SECRET-1111";

/// The arguments of [`ChargeCard`].
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ChargeArgs {
    /// The order.
    pub order_id: String,
    /// A secret argument: never stored, logged or hashed into the key.
    pub card_number: String,
}

/// An idempotent tool with a secret argument; it remembers the card numbers it was given.
#[derive(Debug, Clone, Default)]
pub struct ChargeCard {
    /// The card numbers the tool received.
    pub seen: Arc<std::sync::Mutex<Vec<String>>>,
}

impl Tool for ChargeCard {
    type Args = ChargeArgs;
    type Output = String;
    type Error = ToolError;
    const NAME: &'static str = "charge_card";
    const CLASS: EffectClass = EffectClass::Idempotent;
    const SENSITIVE: &'static [&'static str] = &["card_number"];

    async fn call(&self, _ctx: &EffectCtx, args: ChargeArgs) -> Result<String, ToolError> {
        self.seen.lock().unwrap().push(args.card_number);
        Ok(format!("charged {}", args.order_id))
    }
}

/// The crash cases: real process death between the effect and its record.
pub mod crash {
    use super::*;

    /// How the tool in the crash case handles an unknown earlier attempt.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
    #[serde(rename_all = "kebab-case")]
    pub enum Variant {
        /// Irreversible with a `recover` hook that finds the effect in the ledger.
        Recover,
        /// Idempotent: runs again with the same idempotency key; the ledger dedupes by key.
        Idempotent,
        /// Irreversible without `recover`: must stop with `SideEffectRetryBlocked`.
        Irreversible,
        /// Idempotent, declared `one_write`: nothing is in the journal while it runs, so the
        /// restarted call runs it again with the same idempotency key; the ledger dedupes.
        OneWrite,
    }

    /// The engine settings of the crash cases: a short lease, so the restarted call takes
    /// over the dead process's claim quickly.
    pub fn engine_config() -> EngineConfig {
        EngineConfig {
            lease: Duration::from_millis(400),
            poll_interval: Duration::from_millis(20),
        }
    }

    /// The files a crash tool writes.
    #[derive(Debug, Clone)]
    pub struct Files {
        /// One line per effect that happened in the "remote system" (its idempotency key).
        pub ledger: PathBuf,
        /// One line per execution of the tool (its idempotency key), effect or not.
        pub exec_log: PathBuf,
        /// Block forever right after the effect (the parent kills the process there).
        pub hang_after_effect: bool,
    }

    impl Files {
        async fn effect(&self, ctx: &EffectCtx, dedupe: bool) -> String {
            let idem = ctx.idempotency_key();
            ledger_append(&self.exec_log, &idem);
            let output = format!("effect:{idem}");
            if dedupe && ledger_lines(&self.ledger).contains(&idem) {
                // The remote system already has this idempotency key: same result, no effect.
                return output;
            }
            ledger_append(&self.ledger, &idem);
            if self.hang_after_effect {
                std::future::pending::<()>().await;
            }
            output
        }

        fn find(&self, ctx: &EffectCtx) -> Option<String> {
            let idem = ctx.idempotency_key();
            ledger_lines(&self.ledger)
                .contains(&idem)
                .then(|| format!("effect:{idem}"))
        }
    }

    macro_rules! crash_tool {
        ($name:ident, $tool:literal, $class:expr, $recover:expr, $dedupe:expr) => {
            crash_tool!($name, $tool, $class, $recover, $dedupe, false);
        };
        ($name:ident, $tool:literal, $class:expr, $recover:expr, $dedupe:expr, $one_write:expr) => {
            struct $name(Files);
            impl Tool for $name {
                type Args = LedgerArgs;
                type Output = String;
                type Error = ToolError;
                const NAME: &'static str = $tool;
                const CLASS: EffectClass = $class;
                const HAS_RECOVER: bool = $recover;
                const ONE_WRITE: bool = $one_write;
                const KEY_RULE: KeyRule = KeyRule::Custom("|a| a.key.clone()");
                const WINDOW: Window = Window::CrossRun;

                fn key(&self, args: &LedgerArgs) -> Option<String> {
                    Some(args.key.clone())
                }

                async fn call(&self, ctx: &EffectCtx, _args: LedgerArgs) -> Result<String, ToolError> {
                    Ok(self.0.effect(ctx, $dedupe).await)
                }

                async fn recover(&self, ctx: &EffectCtx, _args: &LedgerArgs) -> Result<Option<String>, ToolError> {
                    assert!($recover, "recover called on a tool that declares none");
                    Ok(self.0.find(ctx))
                }
            }
        };
    }

    crash_tool!(
        SendWithRecover,
        "send_with_recover",
        EffectClass::Irreversible,
        true,
        false
    );
    crash_tool!(
        UpsertIdempotent,
        "upsert_idempotent",
        EffectClass::Idempotent,
        false,
        true
    );
    crash_tool!(
        UpsertOneWrite,
        "upsert_one_write",
        EffectClass::Idempotent,
        false,
        true,
        true
    );
    crash_tool!(
        SendIrreversible,
        "send_irreversible",
        EffectClass::Irreversible,
        false,
        false
    );

    /// Call the variant's tool once under `key`; what happened and the result.
    pub async fn call(
        engine: &Engine,
        files: &Files,
        variant: Variant,
        key: &str,
    ) -> (Disposition, Result<String, EffectError<ToolError>>) {
        let run = RunContext::new(format!("crash-{}", std::process::id()));
        let args = LedgerArgs { key: key.to_owned() };
        let opts = CallOptions::default();
        let report = match variant {
            Variant::Recover => {
                let tool = SendWithRecover(files.clone());
                engine.call_with_report(&tool, &run, opts, args).await
            }
            Variant::Idempotent => {
                let tool = UpsertIdempotent(files.clone());
                engine.call_with_report(&tool, &run, opts, args).await
            }
            Variant::Irreversible => {
                let tool = SendIrreversible(files.clone());
                engine.call_with_report(&tool, &run, opts, args).await
            }
            Variant::OneWrite => {
                let tool = UpsertOneWrite(files.clone());
                engine.call_with_report(&tool, &run, opts, args).await
            }
        };
        (report.disposition, report.result)
    }

    /// One crash case: a child process claims `key` (or, for [`Variant::OneWrite`], writes nothing), applies the effect (a ledger line) and
    /// is SIGKILLed before it can record it; then this process calls again.
    pub async fn crash_case<H: Harness>(module_path: &str, variant: Variant) {
        let h = H::fresh().await;
        let store = h.store();
        let locator = h
            .locator()
            .expect("crash cases need a journal other processes can open");
        let dir = ScratchDir::new("crash");
        let files = Files {
            ledger: dir.path().join("ledger"),
            exec_log: dir.path().join("exec-log"),
            hang_after_effect: false,
        };
        let key = format!("crash:{variant:?}:{}", fastrand::u64(..));

        let mut child = spawn_child(
            module_path,
            &ChildJob::Crash {
                locator,
                ledger: files.ledger.clone(),
                exec_log: files.exec_log.clone(),
                variant,
                key: key.clone(),
            },
        );
        // Wait until the effect has happened in the child, then kill it (SIGKILL).
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while !ledger_lines(&files.ledger).contains(&key) {
            if let Ok(Some(status)) = child.try_wait() {
                panic!("the child exited ({status}) before applying the effect");
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the child never applied the effect"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        child.kill().expect("killing the child");
        let status = child.wait().expect("reaping the child");
        assert!(!status.success(), "the child was killed, not finished: {status}");

        // The effect happened; its record did not.
        let rec = store.get(&key).await.unwrap();
        if variant == Variant::OneWrite {
            assert_eq!(rec, None, "a one_write call writes nothing before its record");
        } else {
            let rec = rec.expect("the child's claim is in the journal");
            assert_eq!(
                rec.state,
                RecordState::Claimed,
                "the child died before recording: {rec:?}"
            );
            assert_eq!(rec.attempt, 1);
        }
        assert_eq!(ledger_lines(&files.ledger), vec![key.clone()]);

        let engine = Engine::with_config(store.clone(), engine_config());
        let (disposition, result) = call(&engine, &files, variant, &key).await;
        let effect = format!("effect:{key}");
        match variant {
            Variant::Recover => {
                assert_eq!(result.as_ref().ok(), Some(&effect), "{result:?}");
                assert_eq!(disposition, Disposition::Reconciled);
                assert_eq!(
                    ledger_lines(&files.exec_log).len(),
                    1,
                    "recover found it; nothing re-ran"
                );
            }
            Variant::Idempotent => {
                assert_eq!(result.as_ref().ok(), Some(&effect), "{result:?}");
                assert_eq!(disposition, Disposition::Executed);
                // It ran again, with the same idempotency key, and the remote system deduped.
                assert_eq!(ledger_lines(&files.exec_log), vec![key.clone(), key.clone()]);
                // Over the dead process's claim, committed without a flush of its own
                // (`Op::needs_flush`): it survived the SIGKILL, so the re-run took it over.
                let rec = store.get(&key).await.unwrap().unwrap();
                assert_eq!(rec.attempt, 2, "the re-run took the surviving claim over: {rec:?}");
            }
            Variant::OneWrite => {
                assert_eq!(result.as_ref().ok(), Some(&effect), "{result:?}");
                assert_eq!(disposition, Disposition::Executed);
                // It ran again, with the same idempotency key, and the remote system deduped.
                assert_eq!(ledger_lines(&files.exec_log), vec![key.clone(), key.clone()]);
                let rec = store.get(&key).await.unwrap().unwrap();
                assert_eq!(rec.attempt, 1, "the re-run's record is the key's first write: {rec:?}");
            }
            Variant::Irreversible => {
                let blocked = result.as_ref().err().and_then(|e| e.as_blocked()).cloned();
                let blocked = blocked.unwrap_or_else(|| panic!("expected SideEffectRetryBlocked, got {result:?}"));
                assert_eq!(blocked.reason, BlockReason::InDoubtAfterCrash);
                assert_eq!(blocked.key, key);
                assert_eq!(disposition, Disposition::Blocked);
                assert_eq!(ledger_lines(&files.exec_log).len(), 1, "nothing re-ran");
                let rec = store.get(&key).await.unwrap().unwrap();
                assert_eq!(rec.state, RecordState::InDoubt);
                // Still blocked until a person decides.
                let (_, again) = call(&engine, &files, variant, &key).await;
                let reason = again
                    .as_ref()
                    .err()
                    .and_then(|e| e.as_blocked())
                    .map(|b| b.reason.clone());
                assert_eq!(reason, Some(BlockReason::AwaitingResolution), "{again:?}");
                store
                    .resolve(&key, "oncall@example.com", Verdict::Applied { output: json!(effect) })
                    .await
                    .unwrap();
                let (disposition, after) = call(&engine, &files, variant, &key).await;
                assert_eq!(after.as_ref().ok(), Some(&effect), "{after:?}");
                assert_eq!(disposition, Disposition::Replayed);
                assert_eq!(ledger_lines(&files.exec_log).len(), 1, "nothing re-ran");
            }
        }
        // One effect, whatever happened.
        assert_eq!(ledger_lines(&files.ledger), vec![key.clone()], "exactly one effect");
        let rec = store.get(&key).await.unwrap().unwrap();
        assert_eq!(rec.state, RecordState::Completed);
        assert_eq!(rec.output, Some(json!(effect)));
        // A later call replays it.
        let (disposition, replay) = call(&engine, &files, variant, &key).await;
        assert_eq!(replay.ok(), Some(effect));
        assert_eq!(disposition, Disposition::Replayed);
        assert_eq!(ledger_lines(&files.ledger).len(), 1);
    }
}

/// The cases, each a function over a [`Harness`].
pub mod cases {
    use super::*;
    mod grants;
    mod one_write;
    pub use grants::{engine_uses_grants, granted_claim_is_audited, grants_across_handles, grants_kept_listed_revoked};
    pub use one_write::{engine_one_write, record_without_a_claim};

    fn intent(run: &str) -> Intent {
        Intent {
            tool: "issue_refund".to_owned(),
            class: EffectClass::Idempotent,
            run_id: run.to_owned(),
            thread_id: Some("thread-7".to_owned()),
            call_id: Some("call_1".to_owned()),
            fingerprint: crate::call::key::fingerprint(&input()),
            input: input(),
            ttl_ms: None,
            approval: None,
            approval_ttl_ms: None,
            holder: None,
        }
    }

    fn input() -> Value {
        json!({
            "order_id": "ord_1",
            "amount_cents": 12_345u64,
            "big": u64::MAX,
            "ratio": 0.1,
            "note": "Grüße 😀 \"quoted\" \\ back\nslash \u{0000} nul",
            "nested": { "z": [1, 2, { "a": null }], "a": true }
        })
    }

    fn claimed(outcome: OpOutcome) -> (u32, Option<RecordState>) {
        match outcome {
            OpOutcome::Claimed { attempt, previous, .. } => (attempt, previous),
            other => panic!("expected a claim, got {other:?}"),
        }
    }

    fn key(name: &str) -> String {
        format!("{name}:{}", fastrand::u64(..))
    }

    /// Claim a new key, see it in flight, complete it, replay it; every field round-trips.
    pub async fn claim_complete<H: Harness>() {
        let h = H::fresh().await;
        let s = h.store();
        let k = key("claim-complete");
        assert_eq!(s.get(&k).await.unwrap(), None);
        let (attempt, previous) = claimed(s.claim(&k, intent("run-1"), 30_000, false).await.unwrap());
        assert_eq!((attempt, previous), (1, None));
        let rec = s.get(&k).await.unwrap().expect("claimed record");
        assert_eq!(rec.state, RecordState::Claimed);
        assert_eq!(
            rec.version, 1,
            "a claim is written at record version 1, which every build reads"
        );
        assert_eq!(rec.key, k);
        assert_eq!(rec.tool, "issue_refund");
        assert_eq!(rec.class, EffectClass::Idempotent);
        assert_eq!(rec.run_id, "run-1");
        assert_eq!(rec.thread_id.as_deref(), Some("thread-7"));
        assert_eq!(rec.call_id.as_deref(), Some("call_1"));
        assert_eq!(rec.fingerprint, crate::call::key::fingerprint(&input()));
        assert_eq!(rec.input, input(), "the input round-trips exactly");
        assert!(rec.lease_until.is_some_and(|l| l > s.now()), "a live lease: {rec:?}");
        assert_eq!(rec.expires_at, None);

        match s.claim(&k, intent("run-2"), 30_000, true).await.unwrap() {
            OpOutcome::InFlight(r) => assert_eq!(r.attempt, 1),
            other => panic!("a live claim is in flight, got {other:?}"),
        }
        let output = json!({"refund_id": "re_1", "amount": 12_345, "text": "ok ✓", "list": [1.5, -2]});
        let done = s.complete(&k, 1, output.clone()).await.unwrap();
        assert_eq!(done.state, RecordState::Completed);
        match s.claim(&k, intent("run-3"), 30_000, true).await.unwrap() {
            OpOutcome::Recorded(r) => {
                assert_eq!(r.output, Some(output.clone()));
                assert_eq!(r.run_id, "run-1", "a replay changes nothing");
            }
            other => panic!("expected the recorded result, got {other:?}"),
        }
        let rec = s.get(&k).await.unwrap().unwrap();
        assert_eq!(rec.state, RecordState::Completed);
        assert_eq!(rec.output, Some(output.clone()));
        assert_eq!(rec.lease_until, None);
        // What a replay reads agrees with the record.
        let seen = s.lookup_recorded(&k).await.unwrap().expect("a recorded key");
        assert_eq!(seen.state(), RecordState::Completed);
        assert_eq!(seen.fingerprint(), rec.fingerprint);
        assert_eq!(seen.call_id(), Some("call_1"));
        assert_eq!(seen.output(), Some(&output));
        assert_eq!(seen.expires_at(), None);
        assert_eq!(s.lookup_recorded(&key("missing")).await.unwrap(), None);
        assert_eq!(rec.attempt, 1);
        // Completing twice is refused (fenced: the claim is gone).
        assert!(matches!(
            s.complete(&k, 1, json!(1)).await,
            Err(StoreError::Rejected(Rejected::Fenced { .. }))
        ));
        // Operations on a missing key are refused.
        assert!(matches!(
            s.complete(&key("missing"), 1, json!(1)).await,
            Err(StoreError::Rejected(Rejected::NotFound { .. }))
        ));
    }

    /// Who holds a claim is stored with it; a live claim of the same worker by another engine
    /// instance (its previous incarnation) is taken over at once, as a stale claim; the same
    /// instance, another worker or no worker identity finds it in flight until the lease ends.
    pub async fn worker_takes_over_its_previous_incarnation<H: Harness>() {
        use crate::decide::record::Holder;
        let h = H::fresh().await;
        let s = h.store();
        let holder = |worker: Option<&str>, instance: &str| Holder {
            worker: worker.map(str::to_owned),
            instance: instance.to_owned(),
            host: "host-1".to_owned(),
            pid: 4242,
        };
        let by = |run: &str, holder: Option<Holder>| Intent {
            holder: holder.map(Box::new),
            ..intent(run)
        };
        let k = key("worker-takeover");
        let first = holder(Some("w1"), "aaaa");
        assert_eq!(
            claimed(s.claim(&k, by("r1", Some(first.clone())), 30_000, false).await.unwrap()),
            (1, None)
        );
        let rec = s.get(&k).await.unwrap().expect("claimed record");
        assert_eq!(rec.holder.as_deref(), Some(&first), "the holder round-trips");
        // The same instance, another worker, a holder without a worker, or no holder: the
        // live lease is waited out.
        for (what, other) in [
            ("the same instance", Some(holder(Some("w1"), "aaaa"))),
            ("another worker", Some(holder(Some("w2"), "bbbb"))),
            ("no worker identity", Some(holder(None, "cccc"))),
            ("no holder", None),
        ] {
            match s.claim(&k, by("r2", other), 30_000, true).await.unwrap() {
                OpOutcome::InFlight(r) => assert_eq!((r.attempt, r.holder.as_deref()), (1, Some(&first)), "{what}"),
                other => panic!("{what}: a live claim is in flight, got {other:?}"),
            }
        }
        // The same worker, another instance: its previous incarnation's claim is taken over
        // now, as a stale claim (its outcome unknown), long before the lease ends.
        let next = holder(Some("w1"), "dddd");
        match s.claim(&k, by("r3", Some(next.clone())), 30_000, false).await.unwrap() {
            OpOutcome::Claimed {
                attempt,
                previous,
                before,
            } => {
                assert_eq!((attempt, previous), (2, Some(RecordState::Claimed)));
                assert_eq!(before.and_then(|b| b.holder).map(|h| *h), Some(first.clone()));
            }
            other => panic!("the same worker takes its previous claim over, got {other:?}"),
        }
        let rec = s.get(&k).await.unwrap().unwrap();
        assert_eq!((rec.state, rec.attempt), (RecordState::Claimed, 2));
        assert_eq!(rec.holder.as_deref(), Some(&next), "the new holder is recorded");
        assert!(
            rec.lease_until.is_some_and(|l| l > s.now() + 20_000),
            "a fresh lease: {rec:?}"
        );
        // The takeover is audited with the holder it replaced.
        let audit = s.audit(Some(&k)).await.unwrap();
        let takeover = audit
            .iter()
            .find(|e| e.action == "takeover")
            .expect("the takeover is audited");
        assert_eq!(
            takeover
                .detail
                .as_ref()
                .and_then(|d| d.get("took_over_holder"))
                .cloned(),
            Some(serde_json::to_value(&first).unwrap())
        );
        // The old instance is fenced.
        assert!(matches!(
            s.complete(&k, 1, json!(1)).await,
            Err(StoreError::Rejected(Rejected::Fenced { .. }))
        ));
        s.complete(&k, 2, json!({"ok": true})).await.unwrap();
        // A completed record is replayed, whoever asks.
        assert!(matches!(
            s.claim(&k, by("r4", Some(holder(Some("w1"), "eeee"))), 30_000, false)
                .await
                .unwrap(),
            OpOutcome::Recorded(_)
        ));
    }

    /// A definitive failure releases the claim; the next claim gets a higher attempt.
    pub async fn release_and_reclaim<H: Harness>() {
        let h = H::fresh().await;
        let s = h.store();
        let k = key("release");
        claimed(s.claim(&k, intent("r"), 30_000, false).await.unwrap());
        let rec = s.release(&k, 1, Some("card declined".to_owned())).await.unwrap();
        assert_eq!(rec.state, RecordState::Released);
        assert_eq!(rec.reason.as_deref(), Some("card declined"));
        let stored = s.get(&k).await.unwrap().unwrap();
        assert_eq!(stored.state, RecordState::Released);
        assert_eq!(stored.lease_until, None);
        assert_eq!(
            claimed(s.claim(&k, intent("r"), 30_000, false).await.unwrap()),
            (2, None)
        );
        s.complete(&k, 2, json!("second")).await.unwrap();
        assert_eq!(s.get(&k).await.unwrap().unwrap().output, Some(json!("second")));
    }

    /// An unknown outcome marks the record in doubt; only a caller that may take it over does.
    pub async fn in_doubt_and_takeover<H: Harness>() {
        let h = H::fresh().await;
        let s = h.store();
        let k = key("in-doubt");
        claimed(s.claim(&k, intent("r"), 30_000, false).await.unwrap());
        let rec = s
            .mark_in_doubt(&k, 1, "timed out after sending".to_owned())
            .await
            .unwrap();
        assert_eq!(rec.state, RecordState::InDoubt);
        let stored = s.get(&k).await.unwrap().unwrap();
        assert_eq!(stored.state, RecordState::InDoubt);
        assert_eq!(stored.reason.as_deref(), Some("timed out after sending"));
        match s.claim(&k, intent("r"), 30_000, false).await.unwrap() {
            OpOutcome::InDoubt(r) => assert_eq!(r.attempt, 1),
            other => panic!("a record in doubt stays in doubt, got {other:?}"),
        }
        assert_eq!(
            s.get(&k).await.unwrap().unwrap().state,
            RecordState::InDoubt,
            "untouched"
        );
        match s.claim(&k, intent("r"), 30_000, true).await.unwrap() {
            OpOutcome::Claimed {
                attempt,
                previous,
                before,
            } => {
                assert_eq!((attempt, previous), (2, Some(RecordState::InDoubt)));
                assert_eq!(before.map(|b| b.state), Some(RecordState::InDoubt));
            }
            other => panic!("takeover expected, got {other:?}"),
        }
        assert_eq!(s.get(&k).await.unwrap().unwrap().attempt, 2);
    }

    /// A person's verdicts: applied (with output) and not applied; live claims cannot be
    /// resolved.
    pub async fn resolve_verdicts<H: Harness>() {
        let h = H::fresh().await;
        let s = h.store();
        let applied = key("resolve-applied");
        let not_applied = key("resolve-not-applied");
        for k in [&applied, &not_applied] {
            claimed(s.claim(k, intent("r"), 30_000, false).await.unwrap());
        }
        // A live claim cannot be resolved.
        assert!(matches!(
            s.resolve(&applied, "ann", Verdict::NotApplied).await,
            Err(StoreError::Rejected(Rejected::InvalidState { .. }))
        ));
        for k in [&applied, &not_applied] {
            s.mark_in_doubt(k, 1, "unknown".to_owned()).await.unwrap();
        }
        let out = json!({"sent": true});
        let rec = s
            .resolve(&applied, "ann", Verdict::Applied { output: out.clone() })
            .await
            .unwrap();
        assert_eq!(rec.state, RecordState::Completed);
        let stored = s.get(&applied).await.unwrap().unwrap();
        assert_eq!(stored.output, Some(out.clone()));
        assert_eq!(stored.decided_by.as_deref(), Some("ann"));
        match s.claim(&applied, intent("r"), 30_000, true).await.unwrap() {
            OpOutcome::Recorded(r) => assert_eq!(r.output, Some(out)),
            other => panic!("resolved as applied replays, got {other:?}"),
        }
        let rec = s.resolve(&not_applied, "bob", Verdict::NotApplied).await.unwrap();
        assert_eq!(rec.state, RecordState::Released);
        assert_eq!(s.get(&not_applied).await.unwrap().unwrap().state, RecordState::Released);
        assert_eq!(
            claimed(s.claim(&not_applied, intent("r"), 30_000, false).await.unwrap()),
            (2, None)
        );
        // Resolving a completed record is refused.
        assert!(matches!(
            s.resolve(&applied, "ann", Verdict::NotApplied).await,
            Err(StoreError::Rejected(Rejected::InvalidState { .. }))
        ));
    }

    /// The engine keeps a tool's output schema in the journal; a person's output that does not
    /// match it is refused (resolve and amend alike) with the expected shape, and nothing is
    /// recorded; one that matches is replayed.
    pub async fn resolve_checks_the_output<H: Harness>() {
        let h = H::fresh().await;
        let s = h.store();
        let engine = Engine::new(h.store());
        let tool = TypedReceipt::default();
        let run = RunContext::new(format!("typed-{}", fastrand::u64(..)));
        let args = LedgerArgs { key: "t".to_owned() };
        let call = || engine.call_with_report(&tool, &run, CallOptions::default(), args.clone());

        let first = call().await;
        assert!(
            matches!(&first.result, Err(EffectError::Blocked(_))),
            "{:?}",
            first.result
        );
        let k = first.key.expect("a journaled call has a key");
        let schema = s.output_schema("send_typed_receipt").await.unwrap();
        assert_eq!(
            schema,
            Some(crate::value::schema::output_schema::<Receipt>()),
            "the engine wrote the tool's output schema before its first call"
        );

        for wrong in [json!("r-0"), json!({"ids": "r-0"}), json!({"id": 7})] {
            for refused in [
                s.resolve(&k, "ann", Verdict::Applied { output: wrong.clone() }).await,
                s.amend(&k, "ann", Verdict::Applied { output: wrong.clone() }).await,
            ] {
                match refused {
                    Err(StoreError::Rejected(r @ Rejected::OutputMismatch(_))) => {
                        let text = r.to_string();
                        assert!(
                            text.contains("send_typed_receipt")
                                && text.contains("\"required\":[\"id\"]")
                                && text.contains("Nothing was recorded"),
                            "the refusal names the tool and shows the expected shape: {text}"
                        );
                    }
                    other => panic!("{wrong} is not a Receipt and must be refused, got {other:?}"),
                }
            }
        }
        let rec = s.get(&k).await.unwrap().unwrap();
        assert_eq!(rec.state, RecordState::InDoubt, "nothing was recorded");
        assert_eq!(rec.output, None);

        // Unknown fields pass as serde reads them; the right shape is recorded and replayed.
        s.resolve(
            &k,
            "ann",
            Verdict::Applied {
                output: json!({"id": "r-0", "note": "checked by hand"}),
            },
        )
        .await
        .unwrap();
        let replayed = call().await;
        assert_eq!(replayed.result.unwrap(), Receipt { id: "r-0".to_owned() });
        assert_eq!(replayed.disposition, Disposition::Replayed);
        // Not applied needs no output, so nothing is checked.
        s.amend(&k, "ann", Verdict::NotApplied).await.unwrap();
        assert_eq!(tool.0.runs.load(Ordering::SeqCst), 1);
    }

    /// A person's resolution with an output of the wrong shape makes every call of the key fail
    /// to decode; amending it fixes the key without running the tool, amending to not applied
    /// lets the next call run it, and what the tool recorded itself cannot be amended.
    pub async fn amend_corrects_a_resolution<H: Harness>() {
        let h = H::fresh().await;
        let s = h.store();
        let engine = Engine::new(h.store());
        let tool = SendReceipt::default();
        let runs = tool.runs.clone();
        let run = RunContext::new(format!("amend-{}", fastrand::u64(..)));
        let args = LedgerArgs { key: "r".to_owned() };
        let call = || engine.call_with_report(&tool, &run, CallOptions::default(), args.clone());

        let first = call().await;
        assert!(
            matches!(&first.result, Err(EffectError::Blocked(b)) if matches!(b.reason, BlockReason::UnknownOutcome)),
            "the send timed out: {:?}",
            first.result
        );
        let k = first.key.expect("a journaled call has a key");
        assert_eq!(s.get(&k).await.unwrap().unwrap().state, RecordState::InDoubt);
        assert!(matches!(call().await.result, Err(EffectError::Blocked(_))));
        assert_eq!(runs.load(Ordering::SeqCst), 1);

        // A typo: valid JSON, but not a `Receipt`. Every call fails, and nothing runs.
        s.resolve(&k, "ann", Verdict::Applied { output: json!("r-0") })
            .await
            .unwrap();
        for _ in 0..2 {
            match call().await.result {
                Err(EffectError::Codec { key, message, .. }) => {
                    assert_eq!(key, k);
                    // The error is for people: it says how a person corrects the record. (The
                    // model reads the dispatcher's own text, which names no command.)
                    assert!(
                        message.contains("--amend") && message.contains("does not decode"),
                        "the error says how to correct the record: {message}"
                    );
                }
                other => panic!("a wrong-shaped output fails to decode, got {other:?}"),
            }
        }
        // A plain resolve is refused and names the way out; an amendment is taken.
        match s
            .resolve(
                &k,
                "ann",
                Verdict::Applied {
                    output: json!({"id": "r-0"}),
                },
            )
            .await
        {
            Err(StoreError::Rejected(r @ Rejected::InvalidState { .. })) => {
                assert!(r.to_string().contains("--amend"), "{r}")
            }
            other => panic!("resolving a resolution again is refused, got {other:?}"),
        }
        let rec = s
            .amend(
                &k,
                "bob",
                Verdict::Applied {
                    output: json!({"id": "r-0"}),
                },
            )
            .await
            .unwrap();
        assert_eq!(
            (rec.state, rec.decided_by.as_deref()),
            (RecordState::Completed, Some("bob"))
        );
        let fixed = call().await;
        assert_eq!(fixed.result.unwrap(), Receipt { id: "r-0".to_owned() });
        assert_eq!(fixed.disposition, Disposition::Replayed);
        assert_eq!(
            runs.load(Ordering::SeqCst),
            1,
            "the corrected output is replayed, nothing runs"
        );

        // "Applied" was a mistake after all: the next call sends it.
        let rec = s.amend(&k, "bob", Verdict::NotApplied).await.unwrap();
        assert_eq!(rec.state, RecordState::Released);
        let sent = call().await;
        assert_eq!(sent.result.unwrap(), Receipt { id: "r-1".to_owned() });
        assert_eq!(sent.disposition, Disposition::Executed);
        assert_eq!(runs.load(Ordering::SeqCst), 2);

        // What the tool recorded itself is never overwritten by a person.
        for refused in [
            s.amend(
                &k,
                "bob",
                Verdict::Applied {
                    output: json!({"id": "x"}),
                },
            )
            .await,
            s.amend(&k, "bob", Verdict::NotApplied).await,
            s.resolve(&k, "bob", Verdict::NotApplied).await,
        ] {
            assert!(
                matches!(refused, Err(StoreError::Rejected(Rejected::InvalidState { .. }))),
                "{refused:?}"
            );
        }
        let stored = s.get(&k).await.unwrap().unwrap();
        assert_eq!(stored.output, Some(json!({"id": "r-1"})));
        let again = call().await;
        assert_eq!(again.result.unwrap(), Receipt { id: "r-1".to_owned() });
        assert_eq!(runs.load(Ordering::SeqCst), 2);

        // Every person's action is in the audit trail, in order, with its actor.
        let trail: Vec<(String, String)> = s
            .audit(Some(&k))
            .await
            .unwrap()
            .into_iter()
            .map(|e| (e.actor, e.action))
            .collect();
        let expected = [
            (crate::decide::record::ENGINE_ACTOR, "in-doubt"),
            ("ann", "resolve"),
            ("bob", "amend"),
            ("bob", "amend"),
        ];
        assert_eq!(trail, expected.map(|(a, b)| (a.to_owned(), b.to_owned())));
    }

    /// An approval with edited arguments: bound to the input shown and the role, like an
    /// approval; sensitive fields and the tool's argument schema (from the journal) checked;
    /// the record keeps its input and fingerprint, the edit goes with the claim that runs it
    /// (and its takeover), the audit entry holds the edited input and the fields changed, and
    /// the completion replaces it with the output.
    pub async fn approve_edited_binds_and_carries<H: Harness>() {
        let h = H::fresh().await;
        let s = h.store();
        let mut needs = intent("r");
        needs.approval = Some("finance".to_owned());
        needs.tool = format!("edit_tool_{}", fastrand::u64(..));
        let mut original = input();
        original["card"] = json!({ crate::call::key::SENSITIVE_FIELD: format!("hmac-sha256:{}", "ab".repeat(32)) });
        needs.input = original.clone();
        needs.fingerprint = crate::call::key::fingerprint(&original);
        let k = key("edit");
        assert!(matches!(
            s.claim(&k, needs.clone(), 30_000, false).await.unwrap(),
            OpOutcome::AwaitingApproval(_)
        ));
        let mut edited = original.clone();
        edited["amount_cents"] = json!(500);
        // Bound to what was shown, and to the role.
        let other = "0".repeat(64);
        assert!(matches!(
            s.approve_edited(&k, "carol", "finance", &other, edited.clone()).await,
            Err(StoreError::Rejected(Rejected::InputChanged { .. }))
        ));
        assert!(matches!(
            s.approve_edited(&k, "mallory", "intern", &needs.fingerprint, edited.clone())
                .await,
            Err(StoreError::Rejected(Rejected::WrongRole { .. }))
        ));
        // A sensitive field is neither changed nor dropped.
        let mut sealed = edited.clone();
        sealed["card"] = json!("4111 1111 1111 1111");
        let refused = s
            .approve_edited(&k, "carol", "finance", &needs.fingerprint, sealed)
            .await
            .unwrap_err();
        assert!(refused.to_string().contains("`card` is sensitive"), "{refused}");
        let mut dropped = edited.clone();
        dropped.as_object_mut().unwrap().remove("card");
        assert!(
            s.approve_edited(&k, "carol", "finance", &needs.fingerprint, dropped)
                .await
                .is_err()
        );
        // The tool's argument schema, as the engine keeps it in the journal.
        s.put_input_schema(
            &needs.tool,
            &json!({"type": "object", "properties": {"amount_cents": {"type": "integer", "minimum": 1}, "card": {"type": "string"}}}),
        )
        .await
        .unwrap();
        let mut wrong = edited.clone();
        wrong["amount_cents"] = json!("five hundred");
        let refused = s
            .approve_edited(&k, "carol", "finance", &needs.fingerprint, wrong)
            .await
            .unwrap_err();
        assert!(refused.to_string().contains("/amount_cents"), "{refused}");
        assert_eq!(s.get(&k).await.unwrap().unwrap().state, RecordState::AwaitingApproval);
        assert!(
            s.audit(Some(&k)).await.unwrap().is_empty(),
            "refused edits leave no entry"
        );

        let rec = s
            .approve_edited(&k, "carol", "finance", &needs.fingerprint, edited.clone())
            .await
            .unwrap();
        assert_eq!(rec.state, RecordState::Approved);
        let stored = s.get(&k).await.unwrap().unwrap();
        assert_eq!(
            (stored.input.clone(), stored.fingerprint.clone()),
            (original.clone(), needs.fingerprint.clone())
        );
        let edit = stored.approved_edit().expect("the edit is kept with the approval");
        assert_eq!(
            (edit.input, edit.changed, edit.by.as_str()),
            (edited.clone(), vec!["amount_cents".to_owned()], "carol")
        );
        let trail = s.audit(Some(&k)).await.unwrap();
        assert_eq!(trail.len(), 1);
        assert_eq!(
            (trail[0].actor.as_str(), trail[0].action.as_str()),
            ("carol", "approve-edited")
        );
        let detail = trail[0].detail.clone().unwrap();
        assert_eq!(detail["fingerprint"], json!(needs.fingerprint));
        assert_eq!(detail["edited_input"], edited);
        assert_eq!(detail["changed"], json!(["amount_cents"]));

        // The claim that runs it carries the edit, and so does a takeover of that claim.
        let outcome = s.claim(&k, needs.clone(), 1, false).await.unwrap();
        let OpOutcome::Claimed { before, .. } = &outcome else {
            panic!("expected a claim, got {outcome:?}")
        };
        assert!(before.as_ref().and_then(|b| b.approved_edit()).is_some());
        let held = s.get(&k).await.unwrap().unwrap();
        assert_eq!(held.state, RecordState::Claimed);
        assert_eq!(held.decided_by.as_deref(), Some("carol"));
        assert!(held.approved_edit().is_some(), "{held:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
        let (attempt, previous) = claimed(s.claim(&k, needs.clone(), 30_000, false).await.unwrap());
        assert_eq!(previous, Some(RecordState::Claimed));
        assert!(
            s.get(&k).await.unwrap().unwrap().approved_edit().is_some(),
            "a takeover keeps the edit"
        );
        let done = s.complete(&k, attempt, json!("paid 500")).await.unwrap();
        assert_eq!(
            (done.state, done.output.clone()),
            (RecordState::Completed, Some(json!("paid 500")))
        );
        assert!(done.approved_edit().is_none());
        assert_eq!(done.input, original, "the record keeps the input the person was shown");
    }

    /// Calls that need approval park; approval (by the right role) lets the next claim run;
    /// denial sticks.
    pub async fn approve_and_deny<H: Harness>() {
        let h = H::fresh().await;
        let s = h.store();
        let mut needs = intent("r");
        needs.approval = Some("finance".to_owned());
        let ok = key("approve");
        let no = key("deny");
        for k in [&ok, &no] {
            match s.claim(k, needs.clone(), 30_000, false).await.unwrap() {
                OpOutcome::AwaitingApproval(r) => assert_eq!(r.approval_role.as_deref(), Some("finance")),
                other => panic!("expected to park, got {other:?}"),
            }
            assert_eq!(s.get(k).await.unwrap().unwrap().state, RecordState::AwaitingApproval);
            assert!(matches!(
                s.claim(k, needs.clone(), 30_000, false).await.unwrap(),
                OpOutcome::AwaitingApproval(_)
            ));
        }
        assert!(matches!(
            s.approve(&ok, "mallory", "intern", &needs.fingerprint).await,
            Err(StoreError::Rejected(Rejected::WrongRole { .. }))
        ));
        let rec = s.approve(&ok, "carol", "finance", &needs.fingerprint).await.unwrap();
        assert_eq!(rec.state, RecordState::Approved);
        assert_eq!(s.get(&ok).await.unwrap().unwrap().state, RecordState::Approved);
        let (attempt, _) = claimed(s.claim(&ok, needs.clone(), 30_000, false).await.unwrap());
        let rec = s.get(&ok).await.unwrap().unwrap();
        assert_eq!(rec.state, RecordState::Claimed);
        assert_eq!(rec.decided_by.as_deref(), Some("carol"));
        assert_eq!(rec.approval_role.as_deref(), Some("finance"));
        s.complete(&ok, attempt, json!("paid")).await.unwrap();

        let rec = s.deny(&no, "dave", Some("over budget".to_owned())).await.unwrap();
        assert_eq!(rec.state, RecordState::Denied);
        match s.claim(&no, needs.clone(), 30_000, false).await.unwrap() {
            OpOutcome::Denied(r) => {
                assert_eq!(r.decided_by.as_deref(), Some("dave"));
                assert_eq!(r.reason.as_deref(), Some("over budget"));
            }
            other => panic!("denial sticks, got {other:?}"),
        }
        assert!(matches!(
            s.approve(&no, "carol", "finance", &needs.fingerprint).await,
            Err(StoreError::Rejected(Rejected::InvalidState { .. }))
        ));
        let trail = s.audit(Some(&ok)).await.unwrap();
        assert_eq!(trail.len(), 1, "the refused approval left no entry: {trail:?}");
        assert_eq!(
            (trail[0].actor.as_str(), trail[0].action.as_str()),
            ("carol", "approve")
        );
        assert_eq!(
            trail[0].detail,
            Some(json!({"role": "finance", "fingerprint": needs.fingerprint}))
        );
        let trail = s.audit(Some(&no)).await.unwrap();
        assert_eq!(trail.len(), 1);
        assert_eq!((trail[0].actor.as_str(), trail[0].action.as_str()), ("dave", "deny"));
    }

    /// An approval is for the exact input it was shown, for a limited time, and used once: a
    /// claim of another input under the key parks again (the approval voided and audited, the
    /// approver not on the new record), so does a claim after the approval's ttl; a takeover of
    /// an unknown outcome by another input that needs approval waits for a person.
    pub async fn approval_binds_its_input<H: Harness>() {
        let h = H::fresh().await;
        let s = h.store();
        let k = key("approval-binds");
        let shown = Intent {
            approval: Some("finance".to_owned()),
            ..intent("r")
        };
        let other_input = json!({ "order_id": "ord_1", "amount_cents": 9_999_999u64 });
        let other = Intent {
            fingerprint: crate::call::key::fingerprint(&other_input),
            input: other_input.clone(),
            ..shown.clone()
        };
        assert!(matches!(
            s.claim(&k, shown.clone(), 30_000, false).await.unwrap(),
            OpOutcome::AwaitingApproval(_)
        ));
        s.approve(&k, "dana", "finance", &shown.fingerprint).await.unwrap();
        // Another input: parked again, for itself, with nobody's approval on it.
        match s.claim(&k, other.clone(), 30_000, false).await.unwrap() {
            OpOutcome::AwaitingApproval(r) => {
                assert_eq!((r.input.clone(), r.decided_by.clone()), (other_input.clone(), None));
            }
            other => panic!("another input must park again, got {other:?}"),
        }
        let rec = s.get(&k).await.unwrap().unwrap();
        assert_eq!(rec.state, RecordState::AwaitingApproval);
        assert_eq!(
            (rec.fingerprint.as_str(), rec.decided_by.as_deref()),
            (other.fingerprint.as_str(), None)
        );
        assert!(
            rec.reason
                .as_deref()
                .is_some_and(|r| r.contains("approval by dana was voided")),
            "{rec:?}"
        );
        let trail = s.audit(Some(&k)).await.unwrap();
        let actions: Vec<(&str, &str)> = trail.iter().map(|e| (e.actor.as_str(), e.action.as_str())).collect();
        assert_eq!(
            actions,
            [
                ("dana", "approve"),
                (crate::decide::record::ENGINE_ACTOR, "approval-voided")
            ]
        );
        assert_eq!(
            trail[0].detail.as_ref().unwrap()["fingerprint"],
            json!(shown.fingerprint)
        );
        let voided = trail[1].detail.as_ref().unwrap();
        assert_eq!(voided["approved_by"], json!("dana"));
        assert_eq!(voided["approved_fingerprint"], json!(shown.fingerprint));
        assert_eq!(voided["fingerprint"], json!(other.fingerprint));

        // A person still looking at the first input approves it (a stale page): refused, the
        // new input shown, nothing approved or audited.
        match s.approve(&k, "dana", "finance", &shown.fingerprint).await {
            Err(StoreError::Rejected(e @ Rejected::InputChanged { .. })) => {
                let text = e.to_string();
                assert!(text.contains("input changed") && text.contains("9999999"), "{text}");
                assert!(text.contains(&other.fingerprint), "{text}");
            }
            other => panic!("an approval of the input shown before must be refused, got {other:?}"),
        }
        assert_eq!(s.get(&k).await.unwrap().unwrap().state, RecordState::AwaitingApproval);
        assert_eq!(s.audit(Some(&k)).await.unwrap().len(), 2, "the refusal left no entry");

        // Approved for that input, but older than the claim's approval ttl: parked again.
        s.approve(&k, "erin", "finance", &other.fingerprint).await.unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
        let stale = Intent {
            approval_ttl_ms: Some(1),
            holder: None,
            ..other.clone()
        };
        assert!(matches!(
            s.claim(&k, stale, 30_000, false).await.unwrap(),
            OpOutcome::AwaitingApproval(_)
        ));
        let trail = s.audit(Some(&k)).await.unwrap();
        let last = trail.last().unwrap();
        assert_eq!(last.action, "approval-voided");
        assert!(
            last.detail.as_ref().unwrap()["reason"]
                .as_str()
                .unwrap()
                .contains("ms old"),
            "{last:?}"
        );

        // Approved within the ttl: the claim runs with the approver on it, once.
        s.approve(&k, "erin", "finance", &other.fingerprint).await.unwrap();
        let (attempt, _) = claimed(s.claim(&k, other.clone(), 30_000, false).await.unwrap());
        let rec = s.get(&k).await.unwrap().unwrap();
        assert_eq!(
            (rec.state, rec.decided_by.as_deref()),
            (RecordState::Claimed, Some("erin"))
        );
        // Released (nothing happened): the approval is used up, the next call parks.
        s.release(&k, attempt, Some("declined".to_owned())).await.unwrap();
        assert!(matches!(
            s.claim(&k, other.clone(), 30_000, false).await.unwrap(),
            OpOutcome::AwaitingApproval(_)
        ));

        // A stale approved claim taken over: the same input continues (the approver stays on
        // it), another input that needs approval waits for a person.
        s.approve(&k, "erin", "finance", &other.fingerprint).await.unwrap();
        let (attempt, _) = claimed(s.claim(&k, other.clone(), 1, false).await.unwrap());
        tokio::time::sleep(Duration::from_millis(5)).await;
        match s.claim(&k, shown.clone(), 30_000, true).await.unwrap() {
            OpOutcome::InDoubt(r) => assert_eq!((r.state, r.attempt), (RecordState::Claimed, attempt)),
            other => panic!("another input may not take over an approved claim, got {other:?}"),
        }
        let (_, previous) = claimed(s.claim(&k, other.clone(), 30_000, true).await.unwrap());
        assert_eq!(previous, Some(RecordState::Claimed));
        assert_eq!(s.get(&k).await.unwrap().unwrap().decided_by.as_deref(), Some("erin"));
    }

    /// The tool calls that received a result are kept with it: those that shared it
    /// ([`Op::Share`], each once), and those of attempts a claim took
    /// over; only a recorded result can be shared.
    pub async fn shared_results_keep_their_call_ids<H: Harness>() {
        let h = H::fresh().await;
        let s = h.store();
        let k = key("shared");
        let share = |ids: &[&str]| crate::decide::record::Op::Share {
            call_ids: ids.iter().map(|c| (*c).to_owned()).collect(),
        };
        let (attempt, _) = claimed(s.claim(&k, intent("r"), 30_000, false).await.unwrap());
        assert!(matches!(
            s.apply(&k, share(&["call_2"])).await,
            Err(StoreError::Rejected(Rejected::InvalidState { .. }))
        ));
        s.complete(&k, attempt, json!("sent")).await.unwrap();
        s.apply(&k, share(&["call_2", "call_3", "call_2", "call_1"]))
            .await
            .unwrap();
        s.apply(&k, share(&["call_3"])).await.unwrap();
        let rec = s.get(&k).await.unwrap().unwrap();
        assert_eq!(rec.call_id.as_deref(), Some("call_1"));
        assert_eq!(rec.call_ids, ["call_2", "call_3"]);
        assert!(rec.received_by("call_3") && !rec.received_by("call_4"));
        let found = s.lookup_recorded(&k).await.unwrap().unwrap();
        assert!(found.received_by("call_1") && found.received_by("call_2") && !found.received_by("call_9"));
        assert_eq!(s.list(&Filter::all()).await.unwrap()[0].call_ids, rec.call_ids);

        // A takeover keeps the call ids of what it took over.
        let k = key("taken-over");
        claimed(s.claim(&k, intent("r"), 1, false).await.unwrap());
        tokio::time::sleep(Duration::from_millis(5)).await;
        let next = Intent {
            call_id: Some("call_9".to_owned()),
            ..intent("r")
        };
        let (attempt, previous) = claimed(s.claim(&k, next, 30_000, false).await.unwrap());
        assert_eq!(previous, Some(RecordState::Claimed));
        s.complete(&k, attempt, json!("sent")).await.unwrap();
        let rec = s.get(&k).await.unwrap().unwrap();
        assert_eq!(
            (rec.call_id.as_deref(), rec.call_ids.clone()),
            (Some("call_9"), vec!["call_1".to_owned()])
        );
    }

    /// The engine's decisions leave an audit trail with their attempts, in the same atomic
    /// section as the write: each takeover (of a stale claim, of a record in doubt) names the
    /// attempt it took over, its state, call and last write; a record going in doubt says why;
    /// a result recorded by the attempt that took over is marked reconciled.
    pub async fn engine_decisions_are_audited<H: Harness>() {
        let h = H::fresh().await;
        let s = h.store();
        let k = key("history");
        let (first, _) = claimed(s.claim(&k, intent("r"), 1, false).await.unwrap());
        tokio::time::sleep(Duration::from_millis(5)).await;
        let second_call = Intent {
            call_id: Some("call_2".to_owned()),
            ..intent("r")
        };
        let (second, previous) = claimed(s.claim(&k, second_call, 30_000, false).await.unwrap());
        assert_eq!((first, second, previous), (1, 2, Some(RecordState::Claimed)));
        s.mark_in_doubt(&k, second, "timed out after sending".to_owned())
            .await
            .unwrap();
        let (third, previous) = claimed(s.claim(&k, intent("r"), 30_000, true).await.unwrap());
        assert_eq!((third, previous), (3, Some(RecordState::InDoubt)));
        s.complete(&k, third, json!("found by recover")).await.unwrap();

        let trail = s.audit(Some(&k)).await.unwrap();
        let actions: Vec<(&str, &str)> = trail.iter().map(|e| (e.actor.as_str(), e.action.as_str())).collect();
        let engine = crate::decide::record::ENGINE_ACTOR;
        assert_eq!(
            actions,
            [
                (engine, "takeover"),
                (engine, "in-doubt"),
                (engine, "takeover"),
                (engine, "reconciled")
            ]
        );
        let d = |i: usize| trail[i].detail.clone().unwrap();
        assert_eq!(
            (
                d(0)["attempt"].clone(),
                d(0)["took_over_attempt"].clone(),
                d(0)["took_over_state"].clone()
            ),
            (json!(2), json!(1), json!("claimed"))
        );
        assert_eq!(d(0)["took_over_call_id"], json!("call_1"));
        assert_eq!(d(0)["call_id"], json!("call_2"));
        assert_eq!(
            (d(1)["attempt"].clone(), d(1)["reason"].clone()),
            (json!(2), json!("timed out after sending"))
        );
        assert_eq!(
            (
                d(2)["attempt"].clone(),
                d(2)["took_over_attempt"].clone(),
                d(2)["took_over_state"].clone()
            ),
            (json!(3), json!(2), json!("in-doubt"))
        );
        assert_eq!(d(2)["took_over_reason"], json!("timed out after sending"));
        assert_eq!(d(3)["attempt"], json!(3));
        // The recorded result carries no takeover note; an ordinary call leaves no entry.
        let rec = s.get(&k).await.unwrap().unwrap();
        assert_eq!((rec.state, rec.reason), (RecordState::Completed, None));
        let plain = key("no-history");
        let (attempt, _) = claimed(s.claim(&plain, intent("r"), 30_000, false).await.unwrap());
        s.complete(&plain, attempt, json!(1)).await.unwrap();
        assert!(s.audit(Some(&plain)).await.unwrap().is_empty());
        // A decision that changes no record (an attempt that lost its claim) is appended on
        // its own, after the key's other entries, and leaves the record as it was.
        let lost = crate::decide::record::claim_lost_entry(&k, 2, Some(3), true, s.now());
        s.append_audit(lost.clone()).await.unwrap();
        let trail = s.audit(Some(&k)).await.unwrap();
        assert_eq!((trail.len(), trail.last()), (5, Some(&lost)));
        assert_eq!(
            lost.detail,
            Some(json!({ "attempt": 2, "current": 3, "finished": true }))
        );
        assert_eq!(s.get(&k).await.unwrap().unwrap().state, RecordState::Completed);
    }

    /// Only the attempt holding the claim may complete, release, renew or mark it in doubt.
    pub async fn fencing_rejects_late_writers<H: Harness>() {
        let h = H::fresh().await;
        let s = h.store();
        let k = key("fencing");
        claimed(s.claim(&k, intent("old"), 1, false).await.unwrap());
        tokio::time::sleep(Duration::from_millis(30)).await;
        let (attempt, previous) = claimed(s.claim(&k, intent("new"), 30_000, false).await.unwrap());
        assert_eq!((attempt, previous), (2, Some(RecordState::Claimed)));
        let fenced = |r: Result<crate::decide::record::EffectRecord, StoreError>| match r {
            Err(StoreError::Rejected(Rejected::Fenced { attempt, current, .. })) => {
                assert_eq!((attempt, current), (1, 2));
            }
            other => panic!("the late writer must be fenced out, got {other:?}"),
        };
        fenced(s.complete(&k, 1, json!("late")).await);
        fenced(s.release(&k, 1, None).await);
        fenced(s.mark_in_doubt(&k, 1, "late".to_owned()).await);
        fenced(s.renew(&k, 1, 30_000).await);
        let rec = s.get(&k).await.unwrap().unwrap();
        assert_eq!(
            (rec.state, rec.attempt, rec.run_id.as_str()),
            (RecordState::Claimed, 2, "new")
        );
        s.complete(&k, 2, json!("current")).await.unwrap();
        // After completion the old attempt is still fenced out, and nothing is overwritten.
        fenced(s.complete(&k, 1, json!("late")).await);
        assert_eq!(s.get(&k).await.unwrap().unwrap().output, Some(json!("current")));
    }

    /// A renewed lease keeps the claim; an expired one is taken over and reported.
    pub async fn lease_renew_and_expiry<H: Harness>() {
        let h = H::fresh().await;
        let s = h.store();
        let k = key("lease");
        claimed(s.claim(&k, intent("r"), 200, false).await.unwrap());
        let renewed = s.renew(&k, 1, 60_000).await.unwrap();
        assert!(renewed.lease_until.is_some_and(|l| l > s.now() + 30_000));
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            matches!(
                s.claim(&k, intent("r"), 30_000, false).await.unwrap(),
                OpOutcome::InFlight(_)
            ),
            "a renewed lease is still live"
        );
        let stale = key("stale");
        let mut first = intent("r");
        first.call_id = Some("call_old".to_owned());
        claimed(s.claim(&stale, first, 1, false).await.unwrap());
        tokio::time::sleep(Duration::from_millis(30)).await;
        assert!(s.get(&stale).await.unwrap().unwrap().is_stale(s.now()));
        match s.claim(&stale, intent("r"), 30_000, false).await.unwrap() {
            OpOutcome::Claimed {
                attempt,
                previous,
                before,
            } => {
                assert_eq!((attempt, previous), (2, Some(RecordState::Claimed)));
                assert_eq!(before.and_then(|b| b.call_id), Some("call_old".to_owned()));
            }
            other => panic!("an expired lease is taken over, got {other:?}"),
        }
    }

    /// Expired records are dropped by `gc`, except those a person needs and claims (a stale
    /// claim is the evidence of a crash); an expired record counts as absent for a new claim.
    pub async fn ttl_and_gc<H: Harness>() {
        let h = H::fresh().await;
        let s = h.store();
        let short = |ttl: u64| {
            let mut i = intent("gc");
            i.ttl_ms = Some(ttl);
            i
        };
        let completed = key("gc-completed");
        let released = key("gc-released");
        let in_doubt = key("gc-in-doubt");
        let stale = key("gc-stale-claim");
        let live = key("gc-live-claim");
        let forever = key("gc-no-ttl");
        let later = key("gc-long-ttl");
        let mut approval = short(1);
        approval.approval = Some("ops".to_owned());
        let awaiting = key("gc-awaiting");

        claimed(s.claim(&completed, short(1), 30_000, false).await.unwrap());
        s.complete(&completed, 1, json!(1)).await.unwrap();
        claimed(s.claim(&released, short(1), 30_000, false).await.unwrap());
        s.release(&released, 1, None).await.unwrap();
        claimed(s.claim(&in_doubt, short(1), 30_000, false).await.unwrap());
        s.mark_in_doubt(&in_doubt, 1, "unknown".to_owned()).await.unwrap();
        claimed(s.claim(&stale, short(1), 1, false).await.unwrap());
        claimed(s.claim(&live, short(1), 600_000, false).await.unwrap());
        claimed(s.claim(&forever, intent("gc"), 30_000, false).await.unwrap());
        s.complete(&forever, 1, json!(1)).await.unwrap();
        claimed(s.claim(&later, short(3_600_000), 30_000, false).await.unwrap());
        s.complete(&later, 1, json!(1)).await.unwrap();
        let later_rec = s.get(&later).await.unwrap().unwrap();
        let seen = s.lookup_recorded(&later).await.unwrap().unwrap();
        assert!(later_rec.expires_at.is_some());
        assert_eq!(seen.expires_at(), later_rec.expires_at, "a replay sees the ttl");
        assert!(!seen.is_expired(s.now()));
        assert!(matches!(
            s.claim(&awaiting, approval, 30_000, false).await.unwrap(),
            OpOutcome::AwaitingApproval(_)
        ));
        tokio::time::sleep(Duration::from_millis(30)).await;

        let now = s.now();
        let all = s.list(&Filter::all()).await.unwrap();
        let expected: usize = all.iter().filter(|r| collectable(r, now)).count();
        assert_eq!(expected, 2, "completed and released are collectable");
        assert_eq!(s.gc(now).await.unwrap(), 2);
        for gone in [&completed, &released] {
            assert_eq!(s.get(gone).await.unwrap(), None, "{gone} was collected");
        }
        for kept in [&in_doubt, &stale, &live, &forever, &later, &awaiting] {
            assert!(s.get(kept).await.unwrap().is_some(), "{kept} must be kept");
        }
        assert_eq!(s.gc(now).await.unwrap(), 0, "gc is idempotent");
        // The kept stale claim still tells the next caller that an attempt may have applied it.
        let (attempt, previous) = claimed(s.claim(&stale, short(60_000), 30_000, false).await.unwrap());
        assert_eq!((attempt, previous), (2, Some(RecordState::Claimed)));

        // An expired record that gc has not dropped yet counts as absent for a new claim.
        let expired = key("gc-expired-claim");
        claimed(s.claim(&expired, short(1), 30_000, false).await.unwrap());
        s.complete(&expired, 1, json!("old")).await.unwrap();
        tokio::time::sleep(Duration::from_millis(30)).await;
        let (attempt, previous) = claimed(s.claim(&expired, short(60_000), 30_000, false).await.unwrap());
        // A new effect, as if the key were new, but the fencing token never goes back: a
        // stalled writer of attempt 1 must not find its number reused.
        assert_eq!(
            (attempt, previous),
            (2, None),
            "a new effect with a fresh fencing token"
        );
        let rec = s.get(&expired).await.unwrap().unwrap();
        assert_eq!((rec.state, rec.output), (RecordState::Claimed, None));
    }

    /// A provider's callback (issue 34): a claim made pending keeps its token digest and
    /// deadline, is listed by its state and kept by gc past its ttl; the callback settles it
    /// once; a forged, replayed or late one is refused, audited and writes nothing; past its
    /// deadline the record is in doubt for a claim and a person.
    pub async fn callbacks_settle_records<H: Harness>() {
        use crate::store::callback::{CALLBACK_REFUSED, settle_callback};
        use crate::value::callback::CallbackToken;
        use crate::value::marker::MarkerSecret;
        let h = H::fresh().await;
        let s = h.store();
        let secret = MarkerSecret::from_bytes([9; 32]);
        let mut short = intent("callbacks");
        short.ttl_ms = Some(1);
        let k = key("callback");
        claimed(s.claim(&k, short.clone(), 30_000, false).await.unwrap());
        let token = CallbackToken::issue(&secret, "issue_refund", &k, 1);
        let deadline = s.now() + 600_000;
        let pend = Op::Pend {
            attempt: 1,
            token_digest: token.digest(),
            deadline,
        };
        assert!(matches!(s.apply(&k, pend).await.unwrap(), OpOutcome::Done(_)));
        let rec = s.get(&k).await.unwrap().unwrap();
        assert_eq!((rec.state, rec.lease_until), (RecordState::Pending, Some(deadline)));
        assert_eq!(rec.callback_digest(), Some(token.digest().as_str()));
        assert_eq!(
            rec.version, 2,
            "a pending record is written at record version 2, which builds from before callbacks refuse"
        );
        let listed = s
            .list(&Filter {
                states: vec![RecordState::Pending],
                ..Filter::all()
            })
            .await
            .unwrap();
        assert_eq!(listed.iter().map(|r| r.key.as_str()).collect::<Vec<_>>(), [k.as_str()]);
        // Past its ttl, gc keeps it and a claim still waits for it.
        tokio::time::sleep(Duration::from_millis(30)).await;
        s.gc(s.now()).await.unwrap();
        assert!(matches!(
            s.claim(&k, intent("callbacks-2"), 30_000, true).await.unwrap(),
            OpOutcome::InFlight(r) if r.state == RecordState::Pending
        ));

        // Forged: another journal's secret; and a token of another attempt.
        let refusals = |e: StoreError| match e {
            StoreError::Rejected(r) => r,
            other => panic!("{other:?}"),
        };
        let forged = CallbackToken::issue(&MarkerSecret::from_bytes([8; 32]), "issue_refund", &k, 1).to_string();
        let paid = || Verdict::Applied {
            output: json!({"refund": "re_1"}),
        };
        let e = refusals(
            settle_callback(s.as_ref(), &secret, &forged, "bank", paid())
                .await
                .unwrap_err(),
        );
        assert!(matches!(e, Rejected::CallbackRefused { .. }), "{e:?}");
        let other = CallbackToken::issue(&secret, "issue_refund", &k, 2).to_string();
        let e = refusals(
            settle_callback(s.as_ref(), &secret, &other, "bank", paid())
                .await
                .unwrap_err(),
        );
        assert!(matches!(e, Rejected::CallbackRefused { .. }), "{e:?}");
        assert_eq!(
            s.get(&k).await.unwrap().unwrap().state,
            RecordState::Pending,
            "nothing written"
        );

        // The callback settles it; sent again, it is refused.
        let rec = settle_callback(s.as_ref(), &secret, &token.to_string(), "bank", paid())
            .await
            .unwrap();
        assert_eq!(
            (rec.state, rec.output.clone()),
            (RecordState::Completed, Some(json!({"refund": "re_1"})))
        );
        assert_eq!(s.get(&k).await.unwrap().unwrap(), rec);
        assert_eq!(rec.version, 1, "settled, it is written at version 1 again");
        let e = refusals(
            settle_callback(s.as_ref(), &secret, &token.to_string(), "bank", paid())
                .await
                .unwrap_err(),
        );
        // Its ttl has passed, so the settled record counts as absent (within it: not pending).
        assert!(matches!(e, Rejected::NotFound { .. }), "{e:?}");
        let actions: Vec<String> = s.audit(Some(&k)).await.unwrap().into_iter().map(|a| a.action).collect();
        assert_eq!(
            actions,
            [
                "pending",
                CALLBACK_REFUSED,
                CALLBACK_REFUSED,
                "callback-settled",
                CALLBACK_REFUSED
            ],
            "every refusal audited, in order"
        );

        // Late: past its deadline the callback is refused and the record is in doubt.
        let late = key("callback-late");
        claimed(s.claim(&late, intent("callbacks"), 30_000, false).await.unwrap());
        let token = CallbackToken::issue(&secret, "issue_refund", &late, 1);
        let pend = Op::Pend {
            attempt: 1,
            token_digest: token.digest(),
            deadline: s.now() + 1,
        };
        s.apply(&late, pend).await.unwrap();
        tokio::time::sleep(Duration::from_millis(30)).await;
        let e = refusals(
            settle_callback(s.as_ref(), &secret, &token.to_string(), "bank", paid())
                .await
                .unwrap_err(),
        );
        assert!(matches!(e, Rejected::CallbackRefused { .. }), "{e:?}");
        assert!(s.get(&late).await.unwrap().unwrap().is_overdue(s.now()));
        assert!(matches!(
            s.claim(&late, intent("callbacks"), 30_000, false).await.unwrap(),
            OpOutcome::InDoubt(_)
        ));
        let rec = s.resolve(&late, "dana", Verdict::NotApplied).await.unwrap();
        assert_eq!(rec.state, RecordState::Released);
        assert_eq!(
            s.get(&late).await.unwrap().unwrap().version,
            1,
            "resolved, the row is version 1 again"
        );
    }

    /// The audit trail keeps every person's decision, oldest first, across keys and after gc.
    pub async fn audit_trail_kept<H: Harness>() {
        let h = H::fresh().await;
        let s = h.store();
        let a = key("audit-a");
        let b = key("audit-b");
        let mut i = intent("audit");
        // Long enough for the four operations below to run before it expires, even on a
        // loaded machine (an expired record counts as absent for them).
        i.ttl_ms = Some(1_500);
        for k in [&a, &b] {
            claimed(s.claim(k, i.clone(), 30_000, false).await.unwrap());
            s.mark_in_doubt(k, 1, "unknown".to_owned()).await.unwrap();
        }
        s.resolve(&a, "ann", Verdict::Applied { output: json!("x") })
            .await
            .unwrap();
        s.resolve(&b, "bob", Verdict::NotApplied).await.unwrap();
        s.mark_compensated(&a, "compensator").await.unwrap();
        let trail = s.audit(Some(&a)).await.unwrap();
        let actions: Vec<(&str, &str)> = trail.iter().map(|e| (e.actor.as_str(), e.action.as_str())).collect();
        assert_eq!(
            actions,
            vec![
                (crate::decide::record::ENGINE_ACTOR, "in-doubt"),
                ("ann", "resolve"),
                ("compensator", "compensate")
            ]
        );
        assert_eq!(trail[1].detail, Some(json!({"verdict": "applied", "output": "x"})));
        assert!(trail[0].at <= trail[1].at && trail[1].at <= trail[2].at);
        tokio::time::sleep(Duration::from_millis(1_600)).await;
        assert_eq!(s.gc(s.now()).await.unwrap(), 2, "both records expired");
        let all = s.audit(None).await.unwrap();
        let ours: Vec<&str> = all
            .iter()
            .filter(|e| e.key == a || e.key == b)
            .map(|e| e.action.as_str())
            .collect();
        assert_eq!(
            ours,
            vec!["in-doubt", "in-doubt", "resolve", "resolve", "compensate"],
            "kept after gc, in order"
        );
        // Claims and completions are not people's decisions: no entries for them.
        let c = key("audit-c");
        claimed(s.claim(&c, intent("audit"), 30_000, false).await.unwrap());
        s.complete(&c, 1, json!(1)).await.unwrap();
        assert!(s.audit(Some(&c)).await.unwrap().is_empty());
    }

    /// Filters by run, tool, state and limit; newest first.
    pub async fn list_filters<H: Harness>() {
        let h = H::fresh().await;
        let s = h.store();
        let mut made = Vec::new();
        for (n, (run, tool)) in [("r1", "a"), ("r1", "b"), ("r2", "a"), ("r2", "b"), ("r1", "a")]
            .into_iter()
            .enumerate()
        {
            let mut i = intent(run);
            i.tool = tool.to_owned();
            let k = format!("list-{n}-{}", fastrand::u32(..));
            claimed(s.claim(&k, i, 30_000, false).await.unwrap());
            if n % 2 == 0 {
                s.complete(&k, 1, json!(n)).await.unwrap();
            }
            made.push(k);
            tokio::time::sleep(Duration::from_millis(3)).await;
        }
        let keys = |v: Vec<crate::decide::record::EffectRecord>| v.into_iter().map(|r| r.key).collect::<Vec<_>>();
        let all = keys(s.list(&Filter::all()).await.unwrap());
        let newest_first: Vec<String> = made.iter().rev().cloned().collect();
        assert_eq!(all, newest_first);
        let r1 = keys(
            s.list(&Filter {
                run_id: Some("r1".to_owned()),
                ..Filter::default()
            })
            .await
            .unwrap(),
        );
        assert_eq!(r1, vec![made[4].clone(), made[1].clone(), made[0].clone()]);
        let a_completed = keys(
            s.list(&Filter {
                tool: Some("a".to_owned()),
                states: vec![RecordState::Completed],
                ..Filter::default()
            })
            .await
            .unwrap(),
        );
        assert_eq!(a_completed, vec![made[4].clone(), made[2].clone(), made[0].clone()]);
        let claimed_or_doubt = keys(
            s.list(&Filter {
                states: vec![RecordState::Claimed, RecordState::InDoubt],
                ..Filter::default()
            })
            .await
            .unwrap(),
        );
        assert_eq!(claimed_or_doubt, vec![made[3].clone(), made[1].clone()]);
        let limited = keys(
            s.list(&Filter {
                limit: Some(2),
                ..Filter::default()
            })
            .await
            .unwrap(),
        );
        assert_eq!(limited, vec![made[4].clone(), made[3].clone()]);
        let none = s
            .list(&Filter {
                run_id: Some("r3".to_owned()),
                ..Filter::default()
            })
            .await
            .unwrap();
        assert!(none.is_empty());

        // Pages of two, each after the last record of the one before: every record once, in
        // the listing's order.
        let mut filter = Filter {
            limit: Some(2),
            ..Filter::default()
        };
        let mut paged = Vec::new();
        loop {
            let page = s.list(&filter).await.unwrap();
            assert!(page.len() <= 2, "a page holds at most its limit");
            let last = page.last().cloned();
            let full = page.len() == 2;
            paged.extend(keys(page));
            match last {
                Some(last) if full => filter = filter.next_page(&last),
                _ => break,
            }
        }
        assert_eq!(
            paged, newest_first,
            "the pages, one after the other, are the whole listing"
        );
        // A page keeps the other conditions.
        let newest = s.get(&made[4]).await.unwrap().unwrap();
        let r1_after = keys(
            s.list(
                &Filter {
                    run_id: Some("r1".to_owned()),
                    ..Filter::default()
                }
                .next_page(&newest),
            )
            .await
            .unwrap(),
        );
        assert_eq!(r1_after, vec![made[1].clone(), made[0].clone()]);
        // A time range of `updated_at`: from the second record's (included) to the fourth's
        // (excluded).
        let mut at = Vec::new();
        for k in &made {
            at.push(s.get(k).await.unwrap().unwrap().updated_at);
        }
        let ranged = keys(
            s.list(&Filter {
                updated_since: Some(at[1]),
                updated_before: Some(at[3]),
                ..Filter::default()
            })
            .await
            .unwrap(),
        );
        let expected: Vec<String> = newest_first
            .iter()
            .filter(|k| {
                let t = at[made.iter().position(|m| m == *k).unwrap()];
                t >= at[1] && t < at[3]
            })
            .cloned()
            .collect();
        assert!(expected.contains(&made[1]) && !expected.contains(&made[3]), "{at:?}");
        assert_eq!(ranged, expected);
    }

    /// Many tasks claim the same keys at once: exactly one claim per key wins.
    pub async fn concurrent_claims<H: Harness>() {
        let h = H::fresh().await;
        let s = h.store();
        let keys: Vec<String> = (0..8).map(|n| key(&format!("race-{n}"))).collect();
        let mut tasks = Vec::new();
        for _ in 0..16 {
            for k in &keys {
                let (s, k) = (s.clone(), k.clone());
                tasks.push(tokio::spawn(async move {
                    let outcome = s.claim(&k, intent("race"), 30_000, false).await.unwrap();
                    (k, outcome)
                }));
            }
        }
        let mut wins = std::collections::HashMap::<String, usize>::new();
        for t in tasks {
            let (k, outcome) = t.await.unwrap();
            match outcome {
                OpOutcome::Claimed { attempt, .. } => {
                    assert_eq!(attempt, 1);
                    *wins.entry(k).or_default() += 1;
                }
                OpOutcome::InFlight(_) => {}
                other => panic!("a racing claim is either the winner or in flight, got {other:?}"),
            }
        }
        for k in &keys {
            assert_eq!(wins.get(k), Some(&1), "exactly one claim of {k} wins");
        }
    }

    /// A run's budgets ([`Store::spend`]): 24 spends of different keys racing for 5 units, one
    /// wins each unit; a key is charged once; a spend is all or nothing; runs and budgets are
    /// counted apart; the refusal says what is left and what was asked.
    pub async fn budgets_spent_atomically<H: Harness>() {
        use crate::decide::budget::{Charge, Spend, SpendOutcome};
        let h = H::fresh().await;
        let s = h.store();
        let spend = |run: &str, key: &str, charges: &[(&str, u64, u64)]| Spend {
            run_id: run.to_owned(),
            key: key.to_owned(),
            tool: "refund".to_owned(),
            charges: charges
                .iter()
                .map(|&(budget, amount, limit)| Charge {
                    budget: budget.to_owned(),
                    amount,
                    limit,
                })
                .collect(),
        };
        let mut tasks = Vec::new();
        for n in 0..24 {
            let (s, one) = (s.clone(), spend("budget-run", &format!("k{n}"), &[("calls", 1, 5)]));
            tasks.push(tokio::spawn(async move { s.spend(&one).await.unwrap() }));
        }
        let mut spent = 0;
        for t in tasks {
            match t.await.unwrap() {
                SpendOutcome::Spent { charged } => {
                    assert_eq!(charged, ["calls"]);
                    spent += 1;
                }
                SpendOutcome::Exceeded(o) => {
                    assert_eq!((o.budget.as_str(), o.limit, o.spent, o.asks), ("calls", 5, 5, 1))
                }
            }
        }
        assert_eq!(spent, 5, "exactly the limit is spent by racing spends");

        // A key already charged spends nothing, even with the budget spent.
        let first = s
            .spend(&spend("budget-run", "k-first", &[("calls", 1, 5)]))
            .await
            .unwrap();
        assert!(matches!(first, SpendOutcome::Exceeded(_)), "{first:?}");
        let mut charged_keys = 0;
        for n in 0..24 {
            if let SpendOutcome::Spent { charged } = s
                .spend(&spend("budget-run", &format!("k{n}"), &[("calls", 1, 5)]))
                .await
                .unwrap()
            {
                assert!(charged.is_empty(), "a key charged before is not charged again");
                charged_keys += 1;
            }
        }
        assert_eq!(charged_keys, 5);

        // All or nothing: a spend that overdraws its second budget charges neither.
        let cents = |key: &str, amount| spend("cents-run", key, &[("calls", 1, 10), ("spend:cents", amount, 25_000)]);
        assert!(matches!(
            s.spend(&cents("a", 20_000)).await.unwrap(),
            SpendOutcome::Spent { .. }
        ));
        match s.spend(&cents("b", 30_000)).await.unwrap() {
            SpendOutcome::Exceeded(o) => {
                assert_eq!((o.budget.as_str(), o.left(), o.asks), ("spend:cents", 5_000, 30_000));
            }
            other => panic!("30,000 cents with 5,000 left is refused, got {other:?}"),
        }
        assert!(matches!(
            s.spend(&cents("c", 5_000)).await.unwrap(),
            SpendOutcome::Spent { .. }
        ));
        // "b" charged no call: 2 calls of 10 spent, so 8 more fit (and no cents).
        for n in 0..8 {
            let one = spend("cents-run", &format!("call-{n}"), &[("calls", 1, 10)]);
            assert!(
                matches!(s.spend(&one).await.unwrap(), SpendOutcome::Spent { .. }),
                "call {n}"
            );
        }
        // Another run has budgets of its own.
        let other_run = spend("other-run", "a", &[("spend:cents", 25_000, 25_000)]);
        assert!(matches!(s.spend(&other_run).await.unwrap(), SpendOutcome::Spent { .. }));
    }

    /// Two handles on one journal (as two processes have) spend the last unit once.
    pub async fn budgets_across_handles<H: Harness>() {
        use crate::decide::budget::{Charge, Spend, SpendOutcome};
        let h = H::fresh().await;
        let first = h.store();
        let second = H::open(&h.locator().expect("a durable harness has a locator")).await;
        let spend = |key: String| Spend {
            run_id: "handles-run".to_owned(),
            key,
            tool: "refund".to_owned(),
            charges: vec![Charge {
                budget: "spend:cents".to_owned(),
                amount: 100,
                limit: 1_000,
            }],
        };
        let mut tasks = Vec::new();
        for n in 0..20 {
            let store = if n % 2 == 0 { first.clone() } else { second.clone() };
            let one = spend(format!("k{n}"));
            tasks.push(tokio::spawn(async move { store.spend(&one).await.unwrap() }));
        }
        let mut spent = 0;
        for t in tasks {
            if let SpendOutcome::Spent { .. } = t.await.unwrap() {
                spent += 1;
            }
        }
        assert_eq!(spent, 10, "1,000 cents at 100 a call: ten calls, across both handles");
    }

    /// Through the engine: a recorded result is replayed; identical calls through two engines
    /// (two in-process sharing maps) over the same journal run the tool once.
    pub async fn engine_replays_and_shares<H: Harness>() {
        let h = H::fresh().await;
        let tool = CountingTool::default();
        let config = EngineConfig {
            lease: Duration::from_secs(30),
            poll_interval: Duration::from_millis(5),
        };
        let e1 = Engine::with_config(h.store(), config);
        let e2 = Engine::with_config(h.store(), config);
        let run = RunContext::new(format!("engine-{}", fastrand::u64(..)));
        let args = LedgerArgs { key: "k".to_owned() };
        let first = e1
            .call_with_report(&tool, &run, CallOptions::default(), args.clone())
            .await;
        assert_eq!(first.result.unwrap(), "counted:k");
        assert_eq!(first.disposition, Disposition::Executed);
        let again = e2
            .call_with_report(&tool, &run, CallOptions::call_id("call_2"), args.clone())
            .await;
        assert_eq!(again.result.unwrap(), "counted:k");
        assert_eq!(again.disposition, Disposition::Replayed);
        assert_eq!(tool.runs.load(Ordering::SeqCst), 1);

        let args = LedgerArgs {
            key: "shared".to_owned(),
        };
        let calls = (0..16).map(|n| {
            let engine = if n % 2 == 0 { e1.clone() } else { e2.clone() };
            let (tool, run, args) = (tool.clone(), run.clone(), args.clone());
            tokio::spawn(async move { engine.call(&tool, &run, CallOptions::default(), args).await })
        });
        for r in futures::future::join_all(calls).await {
            assert_eq!(r.unwrap().unwrap(), "counted:shared");
        }
        assert_eq!(tool.runs.load(Ordering::SeqCst), 2, "16 identical calls, one execution");
    }

    /// A secret argument reaches the tool but never the journal: not in the record, not in any
    /// listed record, and the default key does not depend on it.
    pub async fn secrets_never_stored<H: Harness>() {
        let h = H::fresh().await;
        let engine = Engine::new(h.store());
        let run = RunContext::new(format!("secret-{}", fastrand::u64(..)));
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let tool = ChargeCard { seen: seen.clone() };
        let args = |card: &str| ChargeArgs {
            order_id: "ord_9".to_owned(),
            card_number: card.to_owned(),
        };
        let report = engine
            .call_with_report(&tool, &run, CallOptions::default(), args(SECRET))
            .await;
        assert_eq!(report.result.unwrap(), "charged ord_9");
        assert_eq!(
            seen.lock().unwrap().as_slice(),
            [SECRET.to_owned()],
            "the tool got the secret"
        );
        let key = report.key.expect("a journaled call has a key");
        assert!(!key.contains(SECRET));
        let rec = h.store().get(&key).await.unwrap().expect("recorded");
        assert_eq!(rec.input["order_id"], json!("ord_9"));
        assert_eq!(
            crate::call::key::bound_fields(&rec.input),
            ["card_number"],
            "the secret field's value is left out, bound by its keyed digest: {}",
            rec.input
        );
        for rec in h.store().list(&Filter::all()).await.unwrap() {
            let text = serde_json::to_string(&(rec.input, rec.output, rec.reason)).unwrap();
            assert!(!text.contains(SECRET), "{text}");
        }
        // Another card number is the same effect (the default key leaves secrets out).
        let again = engine
            .call_with_report(&tool, &run, CallOptions::default(), args("5500-0000-0000-0004"))
            .await;
        assert_eq!(again.disposition, Disposition::Replayed);
        assert_eq!(again.key.as_deref(), Some(key.as_str()));
    }

    /// Two handles on one journal (as two processes have): a late writer through one handle is
    /// fenced out by a takeover through the other, whatever either handle remembers (a handle
    /// that writes its holder's operations against the claim it wrote, without reading the row
    /// again, must notice the row changed under it).
    pub async fn fencing_across_handles<H: Harness>() {
        let h = H::fresh().await;
        let first = h.store();
        let second = H::open(&h.locator().expect("a durable harness has a locator")).await;
        let k = key("fencing-handles");
        claimed(first.claim(&k, intent("first"), 1, false).await.unwrap());
        tokio::time::sleep(Duration::from_millis(30)).await;
        let (attempt, previous) = claimed(second.claim(&k, intent("second"), 30_000, false).await.unwrap());
        assert_eq!((attempt, previous), (2, Some(RecordState::Claimed)));
        for late in [
            first.renew(&k, 1, 30_000).await,
            first.complete(&k, 1, json!("late")).await,
            first.mark_in_doubt(&k, 1, "late".to_owned()).await,
            first.release(&k, 1, None).await,
        ] {
            assert!(
                matches!(
                    late,
                    Err(StoreError::Rejected(Rejected::Fenced {
                        attempt: 1,
                        current: 2,
                        ..
                    }))
                ),
                "{late:?}"
            );
        }
        second.complete(&k, 2, json!("second")).await.unwrap();
        let rec = first.get(&k).await.unwrap().unwrap();
        assert_eq!(
            (rec.state, rec.attempt, rec.output),
            (RecordState::Completed, 2, Some(json!("second")))
        );
        match first.claim(&k, intent("first"), 30_000, false).await.unwrap() {
            OpOutcome::Recorded(r) => assert_eq!(r.output, Some(json!("second"))),
            other => panic!("the other handle's result is replayed, got {other:?}"),
        }
    }

    /// A record written by a newer effect-tool is refused with `UnsupportedVersion` by every
    /// operation, and left untouched (gc too).
    pub async fn future_version_refused<H: Harness>() {
        let h = H::fresh().await;
        let s = h.store();
        let k = key("future");
        assert!(
            h.plant_future_record(&k).await,
            "{} must be able to hold a future record",
            H::NAME
        );
        let unsupported = |r: Result<_, StoreError>, what: &str| match r {
            Err(StoreError::UnsupportedVersion { key, found, supported }) => {
                assert_eq!(key, k, "{what}");
                assert_eq!(found, crate::decide::record::RECORD_VERSION + 1, "{what}");
                assert_eq!(supported, crate::decide::record::RECORD_VERSION, "{what}");
            }
            Err(other) => panic!("{what}: expected UnsupportedVersion, got {other}"),
            Ok(_) => panic!("{what}: a future record must not be read"),
        };
        unsupported(s.get(&k).await.map(|_| ()), "get");
        unsupported(s.lookup(&k).await.map(|_| ()), "lookup");
        unsupported(s.lookup_recorded(&k).await.map(|_| ()), "lookup_recorded");
        unsupported(s.claim(&k, intent("r"), 30_000, true).await.map(|_| ()), "claim");
        unsupported(s.complete(&k, 1, json!(1)).await.map(|_| ()), "complete");
        unsupported(s.resolve(&k, "ann", Verdict::NotApplied).await.map(|_| ()), "resolve");
        // A list skips it and says so: one unreadable row never fails a whole list.
        let listing = s.list_report(&Filter::all()).await.expect("a list never fails whole");
        assert!(
            listing.records.iter().all(|r| r.key != k),
            "list: a future record must not be read"
        );
        assert_eq!(listing.skipped_keys(), [k.as_str()]);
        assert!(
            listing.skipped[0].reason.contains("upgrade effect-tool"),
            "{:?}",
            listing.skipped
        );
        assert!(s.list(&Filter::all()).await.unwrap().iter().all(|r| r.key != k));
        assert_eq!(s.gc(s.now() + 10_000_000).await.unwrap(), 0, "gc leaves it alone");
        unsupported(s.get(&k).await.map(|_| ()), "get after the refusals");
        let message = s.get(&k).await.unwrap_err().to_string();
        assert!(message.contains("upgrade effect-tool"), "{message}");
    }

    /// N operating-system processes race the same keys through the engine: exactly one
    /// execution per key, counted in a ledger file the journal cannot see.
    pub async fn processes_race_same_keys<H: Harness>(module_path: &str) {
        const PROCESSES: usize = 4;
        const KEYS: usize = 24;
        let h = H::fresh().await;
        let locator = h.locator().expect("a durable harness has a locator");
        let dir = ScratchDir::new("race");
        let ledger = dir.path().join("ledger");
        let go = dir.path().join("go");
        let keys: Vec<String> = (0..KEYS).map(|n| key(&format!("proc-race-{n}"))).collect();
        let children: Vec<_> = (0..PROCESSES)
            .map(|p| {
                let mut mine = keys.clone();
                mine.rotate_left(p * KEYS / PROCESSES);
                spawn_child(
                    module_path,
                    &ChildJob::Race {
                        locator: locator.clone(),
                        ledger: ledger.clone(),
                        go: go.clone(),
                        keys: mine,
                    },
                )
            })
            .collect();
        // Let every child open the journal, then start them together.
        tokio::time::sleep(Duration::from_millis(300)).await;
        std::fs::write(&go, b"go").unwrap();
        for mut child in children {
            let status = tokio::task::spawn_blocking(move || child.wait())
                .await
                .unwrap()
                .unwrap();
            assert!(status.success(), "a racing child failed: {status}");
        }
        let lines = ledger_lines(&ledger);
        for k in &keys {
            let runs = lines.iter().filter(|l| l.split(' ').next() == Some(k.as_str())).count();
            assert_eq!(runs, 1, "{k} ran {runs} times across {PROCESSES} processes: {lines:?}");
        }
        assert_eq!(lines.len(), KEYS);
        let s = h.store();
        for k in &keys {
            let rec = s.get(k).await.unwrap().unwrap();
            assert_eq!(rec.state, RecordState::Completed);
            assert_eq!(rec.output, Some(json!(format!("applied:{k}"))));
        }
    }
}

/// The in-memory journal (no other process can open it).
#[derive(Debug, Clone, Default)]
pub struct MemoryHarness(Arc<MemoryStore>);

#[async_trait]
impl Harness for MemoryHarness {
    const NAME: &'static str = "memory";
    async fn fresh() -> Self {
        MemoryHarness::default()
    }
    fn store(&self) -> Arc<dyn Store> {
        self.0.clone()
    }
}

/// A SQLite journal in a fresh temporary file per case.
#[cfg(feature = "sqlite")]
#[derive(Debug, Clone)]
pub struct SqliteHarness {
    store: crate::store::sqlite::SqliteStore,
    _dir: Arc<ScratchDir>,
}

#[cfg(feature = "sqlite")]
#[async_trait]
impl Harness for SqliteHarness {
    const NAME: &'static str = "sqlite";
    async fn fresh() -> Self {
        let dir = ScratchDir::new("sqlite");
        let store = crate::store::sqlite::SqliteStore::open(dir.path().join("journal.db")).expect("open SQLite");
        SqliteHarness {
            store,
            _dir: Arc::new(dir),
        }
    }
    fn store(&self) -> Arc<dyn Store> {
        Arc::new(self.store.clone())
    }
    fn locator(&self) -> Option<String> {
        Some(self.store.path().display().to_string())
    }
    async fn open(locator: &str) -> Arc<dyn Store> {
        Arc::new(crate::store::sqlite::SqliteStore::open(locator).expect("open SQLite"))
    }
    async fn plant_future_record(&self, key: &str) -> bool {
        let conn = rusqlite::Connection::open(self.store.path()).expect("open SQLite directly");
        conn.busy_timeout(Duration::from_secs(10)).unwrap();
        conn.execute(
            "INSERT INTO effect_records (key, version, tool, class, run_id, fingerprint, input, state, attempt,
               created_at, updated_at, expires_at, output)
             VALUES (?1, ?2, 'future_tool', 'teleport', 'r', 'f', '{\"v2\":\"shape\"}', 'quantum', 7, 0, 0, 1, 'x')",
            rusqlite::params![key, crate::decide::record::RECORD_VERSION + 1],
        )
        .expect("plant a future record");
        true
    }
}

/// The environment variable holding the PostgreSQL URL of the tests.
pub const PG_URL_ENV: &str = "EFFECT_TOOL_PG_URL";
/// Set to `1` (CI does) to make the PostgreSQL cases fail instead of skip without a URL.
pub const PG_REQUIRE_ENV: &str = "EFFECT_TOOL_REQUIRE_PG";

/// Whether PostgreSQL cases must run here (`EFFECT_TOOL_REQUIRE_PG=1`).
pub fn postgres_required() -> bool {
    std::env::var(PG_REQUIRE_ENV).is_ok_and(|v| v == "1")
}

/// A PostgreSQL journal in a fresh schema per case, in the database at `EFFECT_TOOL_PG_URL`.
#[cfg(feature = "postgres")]
#[derive(Debug, Clone)]
pub struct PostgresHarness {
    store: crate::store::postgres::PostgresStore,
    url: String,
    schema: String,
}

#[cfg(feature = "postgres")]
impl PostgresHarness {
    async fn connect(url: &str, schema: &str) -> crate::store::postgres::PostgresStore {
        let options = crate::store::postgres::PgOptions {
            schema: schema.to_owned(),
            pool_size: 8,
            ..Default::default()
        };
        crate::store::postgres::PostgresStore::connect_with(url, options)
            .await
            .unwrap_or_else(|e| panic!("connecting to {PG_URL_ENV}={url}: {e}"))
    }
}

#[cfg(feature = "postgres")]
#[async_trait]
impl Harness for PostgresHarness {
    const NAME: &'static str = "postgres";
    fn availability() -> Availability {
        match std::env::var(PG_URL_ENV) {
            Ok(url) if !url.is_empty() => Availability::Ready,
            _ => Availability::Unavailable {
                reason: format!(
                    "{PG_URL_ENV} is not set; start a server with `eval \"$(.ci/postgres.sh start)\"` (CI sets {PG_REQUIRE_ENV}=1 and fails here)"
                ),
                required: postgres_required(),
            },
        }
    }
    async fn fresh() -> Self {
        let url = std::env::var(PG_URL_ENV).expect("checked by availability");
        let schema = format!("et_test_{}_{:016x}", std::process::id(), fastrand::u64(..));
        let store = PostgresHarness::connect(&url, &schema).await;
        PostgresHarness { store, url, schema }
    }
    fn store(&self) -> Arc<dyn Store> {
        Arc::new(self.store.clone())
    }
    fn locator(&self) -> Option<String> {
        Some(format!("{} {}", self.schema, self.url))
    }
    async fn open(locator: &str) -> Arc<dyn Store> {
        let (schema, url) = locator.split_once(' ').expect("`<schema> <url>`");
        Arc::new(PostgresHarness::connect(url, schema).await)
    }
    async fn plant_future_record(&self, key: &str) -> bool {
        plant_future_postgres_record(&self.url, &self.schema, key).await;
        true
    }
}

/// Write, behind the store's back (a direct connection to `url`, no TLS), a record under `key`
/// in the PostgreSQL journal of schema `schema` as a future version of effect-tool would
/// ([`Harness::plant_future_record`]), for harnesses of PostgreSQL journals reached another way
/// (through a pooler, say).
#[cfg(feature = "postgres")]
pub async fn plant_future_postgres_record(url: &str, schema: &str, key: &str) {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect to PostgreSQL directly");
    tokio::spawn(conn);
    let version = (crate::decide::record::RECORD_VERSION + 1) as i32;
    client
            .execute(
                &format!(
                    "INSERT INTO \"{}\".records (key, version, tool, class, run_id, fingerprint, input, state, attempt,
                       created_at, updated_at, expires_at, output)
                     VALUES ($1, $2, 'future_tool', 'teleport', 'r', 'f', '{{\"v2\":\"shape\"}}', 'quantum', 7, 0, 0, 1, '\"x\"')",
                    schema
                ),
                &[&key, &version],
            )
            .await
            .expect("plant a future record");
}
