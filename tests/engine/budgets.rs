//! Budgets of a run (issue 31, item 4), through the dispatcher with a scripted model and
//! across real processes on one journal. The payment provider and the workers' ledger files
//! count the refunds; the engine never sees them.

use std::io::Write as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use effect_tool::engine::EngineEvent;
use effect_tool::testing::ScriptedModel;
use effect_tool::{
    Budgets, CallOptions, Disposition, EffectCtx, EffectError, Engine, MemoryStore, RunContext, ToolError, Toolkit,
    tools,
};
use serde_json::json;

use crate::common;

/// A payment provider: every refund it applies, by idempotency key and amount.
#[derive(Default)]
struct Payments {
    applied: Mutex<Vec<(String, u64)>>,
    lookups: AtomicUsize,
    flaky_runs: AtomicUsize,
}

impl Payments {
    fn refunds(&self) -> usize {
        self.applied.lock().unwrap().len()
    }

    fn cents(&self) -> u64 {
        self.applied.lock().unwrap().iter().map(|(_, c)| c).sum()
    }
}

#[tools]
impl Payments {
    /// Refund part of an order.
    #[tool(
        effect = "idempotent",
        key = |a| format!("refund:{}:{}", a.order_id, a.amount_cents),
        cost(refund_cents = |a| a.amount_cents)
    )]
    async fn issue_refund(&self, ctx: &EffectCtx, order_id: String, amount_cents: u64) -> Result<String, ToolError> {
        let mut applied = self.applied.lock().unwrap();
        let idem = ctx.idempotency_key();
        if !applied.iter().any(|(k, _)| *k == idem) {
            applied.push((idem, amount_cents));
        }
        Ok(format!("refunded {amount_cents} cents on {order_id}"))
    }

    /// Look an order up.
    #[tool(effect = "pure")]
    async fn lookup_order(&self, order_id: String) -> Result<String, ToolError> {
        self.lookups.fetch_add(1, Ordering::SeqCst);
        Ok(format!("order {order_id}"))
    }

    /// A downstream that always fails transiently (each run counted).
    #[tool(
        effect = "idempotent",
        key(order_id),
        retry(max_attempts = 5, base_delay = "1ms", max_delay = "2ms")
    )]
    async fn flaky_sync(&self, order_id: String) -> Result<String, ToolError> {
        let _ = order_id;
        self.flaky_runs.fetch_add(1, Ordering::SeqCst);
        Err(ToolError::transient("the downstream is busy"))
    }
}

#[tokio::test]
async fn budgets_a_spend_budget_refuses_what_it_cannot_cover_and_replays_spend_nothing() {
    let payments = Arc::new(Payments::default());
    let toolkit = Toolkit::new()
        .with(payments.issue_refund_tool())
        .with(payments.lookup_order_tool());
    let engine = Engine::new(MemoryStore::new())
        .with_budgets(Budgets::new().calls_of("issue_refund", 3).spend("refund_cents", 25_000));
    let mut events = engine.events();
    let dispatcher = toolkit.dispatcher(engine);
    let refund = |order: &str, cents: u64| json!({"order_id": order, "amount_cents": cents});
    let transcript = ScriptedModel::new()
        .call("issue_refund", refund("o-1", 10_000)) // call_1: 10,000 of 25,000
        .call("issue_refund", refund("o-2", 10_000)) // call_2: 20,000
        .replan() // call_3: the same refund again: a replay, no spend
        .call("issue_refund", refund("o-3", 30_000)) // call_4: refused, 5,000 left
        .call("issue_refund", refund("o-4", 5_000)) // call_5: 25,000, the third refund
        .call("issue_refund", refund("o-5", 0)) // call_6: a fourth refund: refused
        .call("lookup_order", json!({"order_id": "o-1"})) // call_7: not limited
        .play(&dispatcher, &RunContext::new("budget-run-1"))
        .await;

    assert_eq!(payments.refunds(), 3, "three refunds applied");
    assert_eq!(payments.cents(), 25_000, "exactly the budget");
    assert_eq!(transcript.result("call_3").unwrap().disposition, Disposition::Replayed);

    let over = transcript.result("call_4").unwrap();
    assert!(over.is_error());
    assert_eq!(over.disposition, Disposition::Rejected);
    assert_eq!(
        over.content(),
        "Error: `issue_refund` was not run: refund_cents budget of this run: 5,000 left, this call asks 30,000. Nothing happened. Call it again only for at most 5,000, or tell the user the budget does not cover the request."
    );
    assert!(!transcript.result("call_5").unwrap().is_error());
    let fourth = transcript.result("call_6").unwrap();
    assert!(fourth.is_error());
    assert!(
        fourth
            .content()
            .contains("this run may call `issue_refund` at most 3 times, and it has. Nothing happened."),
        "{}",
        fourth.content()
    );
    assert_eq!(transcript.result("call_7").unwrap().content(), "order o-1");

    // An event for each refusal, naming the budget.
    let mut refused = Vec::new();
    while let Ok(event) = events.try_recv() {
        if let EngineEvent::BudgetExceeded { tool, overdraft, .. } = event {
            refused.push((tool, overdraft.budget.clone(), overdraft.left(), overdraft.asks));
        }
    }
    assert_eq!(
        refused,
        [
            ("issue_refund", "spend:refund_cents".to_owned(), 5_000, 30_000),
            ("issue_refund", "calls_of:issue_refund".to_owned(), 0, 1),
        ]
    );

    // Another run has budgets of its own.
    let transcript = ScriptedModel::new()
        .call("issue_refund", refund("o-1", 20_000))
        .play(&dispatcher, &RunContext::new("budget-run-2"))
        .await;
    assert!(!transcript.result("call_1").unwrap().is_error());
    assert_eq!(payments.cents(), 45_000);
}

#[tokio::test]
async fn budgets_calls_count_every_tool_and_a_run_may_bring_its_own() {
    let payments = Arc::new(Payments::default());
    let toolkit = Toolkit::new()
        .with(payments.issue_refund_tool())
        .with(payments.lookup_order_tool());
    let dispatcher = toolkit.dispatcher(Engine::new(MemoryStore::new()).with_budgets(Budgets::new().calls(100)));
    let run = RunContext::new("calls-run").with_budgets(Budgets::new().calls(2));
    let transcript = ScriptedModel::new()
        .call("lookup_order", json!({"order_id": "o-1"}))
        .call("issue_refund", json!({"order_id": "o-1", "amount_cents": 100}))
        .call("lookup_order", json!({"order_id": "o-2"}))
        .play(&dispatcher, &run)
        .await;
    assert_eq!(payments.lookups.load(Ordering::SeqCst), 1);
    assert_eq!(payments.refunds(), 1);
    let third = transcript.result("call_3").unwrap();
    assert_eq!(
        third.content(),
        "Error: `lookup_order` was not run: this run may make at most 2 tool calls, and it has. Nothing happened. Do not call tools again in this run; answer with what you have, or tell the user."
    );
}

#[tokio::test]
async fn budgets_the_retry_budget_bounds_retries_across_the_run() {
    let payments = Arc::new(Payments::default());
    let tool = payments.flaky_sync_tool();
    let engine = Engine::new(MemoryStore::new()).with_budgets(Budgets::new().retries(3));
    let run = RunContext::new("retry-run");
    let first = engine
        .call(
            &tool,
            &run,
            CallOptions::call_id("c1"),
            PaymentsFlakySyncArgs { order_id: "o-1".into() },
        )
        .await;
    assert!(matches!(first, Err(EffectError::Tool { .. })), "{first:?}");
    assert_eq!(
        payments.flaky_runs.load(Ordering::SeqCst),
        4,
        "one run and three retries"
    );
    let second = engine
        .call(
            &tool,
            &run,
            CallOptions::call_id("c2"),
            PaymentsFlakySyncArgs { order_id: "o-2".into() },
        )
        .await;
    assert!(matches!(second, Err(EffectError::Tool { .. })), "{second:?}");
    assert_eq!(payments.flaky_runs.load(Ordering::SeqCst), 5, "no retry left: one run");
    // Without a retry budget, the tool's own limit (5 attempts) applies.
    let unbudgeted = Engine::new(MemoryStore::new());
    let _ = unbudgeted
        .call(
            &tool,
            &run,
            CallOptions::call_id("c3"),
            PaymentsFlakySyncArgs { order_id: "o-3".into() },
        )
        .await;
    assert_eq!(payments.flaky_runs.load(Ordering::SeqCst), 10);
}

#[tokio::test]
async fn budgets_a_refused_call_is_an_error_that_says_what_is_left() {
    let payments = Arc::new(Payments::default());
    let tool = payments.issue_refund_tool();
    let engine = Engine::new(MemoryStore::new()).with_budgets(Budgets::new().spend("refund_cents", 25_000));
    let run = RunContext::new("error-run");
    let args = |cents| PaymentsIssueRefundArgs {
        order_id: "o-1".into(),
        amount_cents: cents,
    };
    let report = engine
        .call_with_report(&tool, &run, CallOptions::default(), args(30_000))
        .await;
    assert_eq!(report.disposition, Disposition::Rejected);
    let err = report.result.unwrap_err();
    assert_eq!(err.kind(), "BudgetExceeded");
    assert!(
        err.to_string()
            .contains("the refund_cents budget of this run has 25,000 left, this call asks 30,000"),
        "{err}"
    );
    assert_eq!(payments.refunds(), 0);
    // Nothing was journaled for the refused call.
    let key = report.key.clone();
    assert!(key.is_some());
    assert!(engine.store().get(key.as_deref().unwrap()).await.unwrap().is_none());
}

/// What a racing worker does: open the journal, wait for the start, make `calls` refunds of
/// 100 cents each (orders of its own), append each refund the provider applied to the ledger.
#[derive(serde::Serialize, serde::Deserialize)]
struct Job {
    journal: String,
    ledger: String,
    go: String,
    worker: usize,
    calls: usize,
}

const WORKER_JOB: &str = "EFFECT_TOOL_BUDGET_RACE_JOB";

/// Ledger lines a worker writes: `<worker> <order> <cents>`, one per refund applied.
struct Ledger(std::path::PathBuf);

impl Ledger {
    fn record(&self, line: &str) {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.0)
            .unwrap();
        writeln!(f, "{line}").unwrap();
        f.sync_all().unwrap();
    }
}

async fn open_journal(journal: &str) -> Arc<dyn effect_tool::Store> {
    if let Some(path) = journal.strip_prefix("sqlite:") {
        return Arc::new(effect_tool::store::sqlite::SqliteStore::open(path).unwrap());
    }
    #[cfg(feature = "postgres")]
    if let Some(rest) = journal.strip_prefix("pg:") {
        use effect_tool::store::postgres::{PgOptions, PostgresStore};
        let (schema, url) = rest.split_once('|').unwrap();
        let options = PgOptions {
            schema: schema.to_owned(),
            pool_size: 2,
            ..PgOptions::default()
        };
        return Arc::new(PostgresStore::connect_with(url, options).await.unwrap());
    }
    panic!("unknown journal {journal}")
}

#[test]
#[ignore = "entry point of the racing workers of `budgets_two_processes_*`; run by them"]
fn worker() {
    let Some(job) = common::worker::job::<Job>(WORKER_JOB) else {
        return;
    };
    common::worker::block_on(async move {
        let store = open_journal(&job.journal).await;
        let engine = Engine::new(store).with_budgets(Budgets::new().spend("refund_cents", 1_000));
        let payments = Arc::new(Payments::default());
        let tool = payments.issue_refund_tool();
        let run = RunContext::new("race-run");
        let ledger = Ledger(job.ledger.clone().into());
        while !std::path::Path::new(&job.go).exists() {
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
        for n in 0..job.calls {
            let order = format!("w{}-o{n}", job.worker);
            let before = payments.refunds();
            let result = engine
                .call(
                    &tool,
                    &run,
                    CallOptions::default(),
                    PaymentsIssueRefundArgs {
                        order_id: order.clone(),
                        amount_cents: 100,
                    },
                )
                .await;
            match result {
                Ok(_) => assert_eq!(payments.refunds(), before + 1),
                Err(EffectError::BudgetExceeded { .. }) => assert_eq!(payments.refunds(), before),
                Err(other) => panic!("worker {}: {other}", job.worker),
            }
            if payments.refunds() > before {
                ledger.record(&format!("{} {order} 100", job.worker));
            }
        }
        ledger.record(&format!("done {}", job.worker));
    });
}

/// Two processes, one run, one journal: 2 x 10 refunds of 100 cents against 1,000 cents.
fn race(journal: String) {
    let dir = tempfile::tempdir().unwrap();
    let ledger = dir.path().join("ledger.txt");
    let go = dir.path().join("go");
    let mut workers: Vec<_> = (0..2)
        .map(|worker| {
            let job = Job {
                journal: journal.clone(),
                ledger: ledger.to_string_lossy().into_owned(),
                go: go.to_string_lossy().into_owned(),
                worker,
                calls: 10,
            };
            common::worker::spawn(module_path!(), WORKER_JOB, &serde_json::to_string(&job).unwrap())
        })
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(300));
    std::fs::write(&go, "go").unwrap();
    for w in &mut workers {
        let status = w.wait().unwrap();
        assert!(status.success(), "a worker failed: {status}");
    }
    let text = std::fs::read_to_string(&ledger).unwrap();
    let refunds: Vec<&str> = text.lines().filter(|l| !l.starts_with("done")).collect();
    assert_eq!(text.lines().filter(|l| l.starts_with("done")).count(), 2, "{text}");
    let cents: u64 = refunds
        .iter()
        .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(
        cents, 1_000,
        "exactly the budget was spent, across both processes:\n{text}"
    );
    assert_eq!(refunds.len(), 10);
}

#[test]
fn budgets_two_processes_on_one_sqlite_journal_spend_the_last_unit_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.db");
    // Created (and migrated) once before the workers start.
    drop(effect_tool::store::sqlite::SqliteStore::open(&path).unwrap());
    race(format!("sqlite:{}", path.display()));
}

#[cfg(feature = "postgres")]
#[test]
fn budgets_two_processes_on_one_postgres_journal_spend_the_last_unit_once() {
    let Ok(url) = std::env::var("EFFECT_TOOL_PG_URL") else {
        assert!(
            std::env::var("EFFECT_TOOL_REQUIRE_PG").is_err(),
            "EFFECT_TOOL_PG_URL is not set but PostgreSQL is required"
        );
        eprintln!(
            "SKIPPED: budgets_two_processes_on_one_postgres_journal_spend_the_last_unit_once (no EFFECT_TOOL_PG_URL)"
        );
        return;
    };
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let schema = format!("et_budget_{}_{nanos:08x}", std::process::id());
    // Created (and migrated) once before the workers start.
    common::worker::block_on(async {
        drop(open_journal(&format!("pg:{schema}|{url}")).await);
    });
    race(format!("pg:{schema}|{url}"));
}
