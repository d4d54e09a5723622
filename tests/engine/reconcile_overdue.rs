//! The reconciler (`toolkit::Reconciler`, `Engine::reconcile_record`) and records pending a
//! provider's callback: before the deadline it leaves them alone (the callback may still
//! come); past it, nobody may call the key again and the callback would be refused as late, so
//! it takes the record over and asks the tool's `recover`, as for a record in doubt. A SQLite
//! journal; the provider's own state is an outside ledger file the engine never reads, and
//! every run of the tool is counted in another.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use effect_tool::engine::ReconcileVerdict;
use effect_tool::store::sqlite::SqliteStore;
use effect_tool::testing::conformance::{ScratchDir, ledger_append, ledger_lines};
use effect_tool::toolkit::{Reconciler, ReconcilerOptions};
use effect_tool::{
    CallOptions, CallReport, Disposition, EffectClass, EffectCtx, Engine, RecordState, RunContext, Store, Tool,
    ToolError, Toolkit,
};

const RUN: &str = "reconcile-overdue";
/// How long the provider has to call back: short, so that the tests see the deadline pass.
const WITHIN: Duration = Duration::from_millis(300);

/// A payout the provider finishes later. `call` counts itself in `<dir>/calls` and hands the
/// provider a callback token (which it never uses here); the provider's own record of what it
/// paid is `<dir>/provider`, which `recover` reads.
struct Payout {
    dir: PathBuf,
}

impl Tool for Payout {
    type Args = String;
    type Output = String;
    type Error = ToolError;
    const NAME: &'static str = "payout";
    const CLASS: EffectClass = EffectClass::Irreversible;
    const HAS_RECOVER: bool = true;

    async fn call(&self, ctx: &EffectCtx, order: String) -> Result<String, ToolError> {
        let token = ctx.pending(WITHIN).map_err(|e| ToolError::definitive(e.to_string()))?;
        assert!(!token.to_string().is_empty());
        ledger_append(&self.dir.join("calls"), &format!("payout {order}"));
        Ok(format!("payout of {order} started"))
    }

    async fn recover(&self, _ctx: &EffectCtx, order: &String) -> Result<Option<String>, ToolError> {
        ledger_append(&self.dir.join("recovers"), order);
        let paid = ledger_lines(&self.dir.join("provider"))
            .iter()
            .any(|l| l == &format!("paid {order}"));
        Ok(paid.then(|| format!("paid {order}")))
    }
}

fn lines(dir: &Path, ledger: &str, line: &str) -> usize {
    ledger_lines(&dir.join(ledger)).iter().filter(|l| *l == line).count()
}

/// A call of `order` in the tests' run.
async fn call<T: Tool<Args = String>>(engine: &Engine, tool: &T, order: &str) -> CallReport<T::Output, T::Error> {
    let run = RunContext::new(RUN);
    engine
        .call_with_report(tool, &run, CallOptions::default(), order.to_owned())
        .await
}

/// A call of `order` that leaves its record pending (a payout, or a tool that makes one);
/// returns its key.
async fn pend<T: Tool<Args = String, Output = String>>(engine: &Engine, tool: &T, order: &str) -> String {
    let report = call(engine, tool, order).await;
    assert_eq!(report.disposition, Disposition::Executed, "{report:?}");
    assert_eq!(report.result.unwrap(), format!("payout of {order} started"));
    let key = report.key.unwrap();
    let rec = engine.store().get(&key).await.unwrap().unwrap();
    assert_eq!(rec.state, RecordState::Pending, "{rec:?}");
    key
}

/// Wait (at most a minute) until the pending record of `key` is past its deadline.
async fn until_overdue(store: &dyn Store, key: &str) {
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let rec = store.get(key).await.unwrap().unwrap();
        assert_eq!(rec.state, RecordState::Pending, "{rec:?}");
        if rec.is_overdue(store.now()) {
            return;
        }
        assert!(Instant::now() < until, "the deadline never passed: {rec:?}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

fn reconciler<T: Tool>(engine: &Engine, tool: T) -> Reconciler {
    let options = ReconcilerOptions {
        pace: Duration::from_millis(1),
        ..ReconcilerOptions::default()
    };
    Reconciler::new(engine.clone(), Toolkit::new().with(tool), options)
}

/// The last `reconcile` audit entry of `key`.
async fn last_verdict(store: &dyn Store, key: &str) -> serde_json::Value {
    let audit = store.audit(Some(key)).await.unwrap();
    let entry = audit
        .iter()
        .rfind(|e| e.action == "reconcile")
        .expect("the verdict is audited");
    entry.detail.clone().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overdue_pending_record_the_provider_applied_is_recorded_by_the_reconciler() {
    let dir = ScratchDir::new("reconcile-overdue-applied");
    let engine = Engine::new(SqliteStore::open(dir.path().join("journal.db")).unwrap());
    let store = engine.store().clone();
    let tool = || Payout {
        dir: dir.path().to_owned(),
    };
    let key = pend(&engine, &tool(), "order-1").await;
    // The provider paid, but its callback never comes.
    ledger_append(&dir.path().join("provider"), "paid order-1");
    let reconciler = reconciler(&engine, tool());

    // Before the deadline the callback may still come: the reconciler leaves the record alone.
    let rec = store.get(&key).await.unwrap().unwrap();
    if !rec.is_overdue(store.now()) {
        let verdict = engine
            .reconcile_record(&tool(), &rec, RunContext::new(RUN))
            .await
            .unwrap();
        assert!(matches!(verdict, ReconcileVerdict::Skipped { .. }), "{verdict:?}");
        assert_eq!(store.get(&key).await.unwrap().unwrap().state, RecordState::Pending);
    }
    assert_eq!(
        lines(dir.path(), "recovers", "order-1"),
        0,
        "recover asked before the deadline"
    );

    until_overdue(&*store, &key).await;
    let pass = reconciler.pass().await.unwrap();
    assert!(pass.elected);
    assert_eq!(
        pass.verdicts,
        vec![(key.clone(), ReconcileVerdict::Applied)],
        "{pass:?}"
    );
    assert_eq!(pass.for_a_person, 0);
    assert_eq!(lines(dir.path(), "recovers", "order-1"), 1, "recover asked once");

    let rec = store.get(&key).await.unwrap().unwrap();
    assert_eq!(rec.state, RecordState::Completed, "{rec:?}");
    assert_eq!(rec.output, Some(serde_json::json!("paid order-1")));
    let verdict = last_verdict(&*store, &key).await;
    assert_eq!(verdict["verdict"], "applied");
    assert_eq!(verdict["was"], "pending");

    // The next call replays what recover found; the payout was started once.
    let report = call(&engine, &tool(), "order-1").await;
    assert_eq!(report.disposition, Disposition::Replayed, "{report:?}");
    assert_eq!(report.result.unwrap(), "paid order-1");
    assert_eq!(lines(dir.path(), "calls", "payout order-1"), 1);
    // A second pass finds nothing left.
    assert!(reconciler.pass().await.unwrap().verdicts.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overdue_pending_record_the_provider_never_applied_is_released_and_runs_again() {
    let dir = ScratchDir::new("reconcile-overdue-released");
    let engine = Engine::new(SqliteStore::open(dir.path().join("journal.db")).unwrap());
    let store = engine.store().clone();
    let tool = || Payout {
        dir: dir.path().to_owned(),
    };
    let key = pend(&engine, &tool(), "order-2").await;
    until_overdue(&*store, &key).await;

    let pass = reconciler(&engine, tool()).pass().await.unwrap();
    assert_eq!(
        pass.verdicts,
        vec![(key.clone(), ReconcileVerdict::NotApplied)],
        "{pass:?}"
    );
    assert_eq!(lines(dir.path(), "recovers", "order-2"), 1);
    let rec = store.get(&key).await.unwrap().unwrap();
    assert_eq!(rec.state, RecordState::Released, "{rec:?}");
    let verdict = last_verdict(&*store, &key).await;
    assert_eq!(verdict["verdict"], "not-applied");
    assert_eq!(verdict["was"], "pending");
    assert_eq!(lines(dir.path(), "calls", "payout order-2"), 1);

    // Nothing happened at the provider: the next call runs the tool again.
    let report = call(&engine, &tool(), "order-2").await;
    assert_eq!(report.disposition, Disposition::Executed, "{report:?}");
    assert_eq!(lines(dir.path(), "calls", "payout order-2"), 2);
    assert_eq!(store.get(&key).await.unwrap().unwrap().state, RecordState::Pending);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overdue_pending_record_of_a_tool_without_recover_waits_for_a_person() {
    /// The same payout, without `recover`.
    struct Blind(Payout);
    impl Tool for Blind {
        type Args = String;
        type Output = String;
        type Error = ToolError;
        const NAME: &'static str = "payout";
        const CLASS: EffectClass = EffectClass::Irreversible;

        async fn call(&self, ctx: &EffectCtx, order: String) -> Result<String, ToolError> {
            self.0.call(ctx, order).await
        }
    }
    let dir = ScratchDir::new("reconcile-overdue-person");
    let engine = Engine::new(SqliteStore::open(dir.path().join("journal.db")).unwrap());
    let store = engine.store().clone();
    let tool = || {
        Blind(Payout {
            dir: dir.path().to_owned(),
        })
    };
    let key = pend(&engine, &tool(), "order-3").await;
    until_overdue(&*store, &key).await;
    let pass = reconciler(&engine, tool()).pass().await.unwrap();
    assert!(pass.verdicts.is_empty(), "{pass:?}");
    assert_eq!(pass.for_a_person, 1, "{pass:?}");
    assert_eq!(store.get(&key).await.unwrap().unwrap().state, RecordState::Pending);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_settle_delay_of_an_overdue_pending_record_counts_from_its_deadline() {
    /// The same payout, whose provider needs an hour to show a payout once it is due.
    struct Slow(Payout);
    impl Tool for Slow {
        type Args = String;
        type Output = String;
        type Error = ToolError;
        const NAME: &'static str = "payout";
        const CLASS: EffectClass = EffectClass::Irreversible;
        const HAS_RECOVER: bool = true;
        const RECOVER_SETTLE: Option<Duration> = Some(Duration::from_secs(3600));

        async fn call(&self, ctx: &EffectCtx, order: String) -> Result<String, ToolError> {
            self.0.call(ctx, order).await
        }

        async fn recover(&self, _ctx: &EffectCtx, _order: &String) -> Result<Option<String>, ToolError> {
            panic!("not asked before the settle delay")
        }
    }
    let dir = ScratchDir::new("reconcile-overdue-settle");
    let engine = Engine::new(SqliteStore::open(dir.path().join("journal.db")).unwrap());
    let store = engine.store().clone();
    let tool = Slow(Payout {
        dir: dir.path().to_owned(),
    });
    let key = pend(&engine, &tool, "order-4").await;
    until_overdue(&*store, &key).await;
    let rec = store.get(&key).await.unwrap().unwrap();
    let verdict = engine
        .reconcile_record(&tool, &rec, RunContext::new(RUN))
        .await
        .unwrap();
    let ReconcileVerdict::Settling { wait } = verdict else {
        panic!("{verdict:?}")
    };
    // Counted from the deadline (the provider could still answer until then), not from when
    // the record became pending: at least what is left of an hour after the deadline now.
    let deadline = rec.lease_until.unwrap();
    let since_deadline = Duration::from_millis((store.now() - deadline).max(0) as u64);
    assert!(
        wait >= Duration::from_secs(3600) - since_deadline,
        "{wait:?} < an hour less {since_deadline:?}"
    );
    assert_eq!(store.get(&key).await.unwrap().unwrap().state, RecordState::Pending);
}
