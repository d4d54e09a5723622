//! The conformance case of the record of a call that ran without a claim ([`Op::Record`], an
//! idempotent tool declared `one_write`): written by every store only where the key has no
//! record, and through the engine, a call whose only write is its record. Every run of the
//! tool is a line in a ledger file the engine cannot see.

use super::*;
use crate::decide::record::Op;

/// The arguments of [`Reindex`].
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ReindexArgs {
    /// The document reindexed.
    pub doc: String,
    /// Fail with a definitive error (nothing happened).
    pub fail: bool,
    /// Fail with an unknown outcome (it may have happened).
    pub unknown: bool,
}

/// An idempotent `one_write` tool: each run appends `<doc> <label>` to the ledger after its
/// gate lets it through, and answers with its label.
#[derive(Debug, Clone)]
struct Reindex {
    ledger: PathBuf,
    label: &'static str,
    gate: Arc<tokio::sync::Semaphore>,
}

impl Reindex {
    fn new(ledger: &Path, label: &'static str, open: bool) -> Self {
        let gate = Arc::new(tokio::sync::Semaphore::new(if open {
            tokio::sync::Semaphore::MAX_PERMITS
        } else {
            0
        }));
        Reindex {
            ledger: ledger.to_owned(),
            label,
            gate,
        }
    }
}

impl Tool for Reindex {
    type Args = ReindexArgs;
    type Output = String;
    type Error = ToolError;
    const NAME: &'static str = "reindex";
    const CLASS: EffectClass = EffectClass::Idempotent;
    const ONE_WRITE: bool = true;

    async fn call(&self, _ctx: &EffectCtx, args: ReindexArgs) -> Result<String, ToolError> {
        let _pass = self.gate.acquire().await.expect("the gate stays open");
        ledger_append(&self.ledger, &format!("{} {}", args.doc, self.label));
        if args.fail {
            return Err(ToolError::definitive("the index refused the document"));
        }
        if args.unknown {
            return Err(ToolError::unknown("the index timed out after the request was sent"));
        }
        Ok(format!("reindexed {} by {}", args.doc, self.label))
    }
}

/// [`Op::Record`] on the store: written completed where the key has no record; over a record
/// it leaves it and says what it is (the first result recorded is kept); never over another
/// tool's record.
pub async fn record_without_a_claim<H: Harness>() {
    let h = H::fresh().await;
    let store = h.store();
    let k = key("one-write");
    let record = |output: &str| Op::Record {
        intent: intent("run-one-write"),
        output: json!(output),
    };
    match store.apply(&k, record("first")).await.unwrap() {
        OpOutcome::Done(rec) => assert_eq!((rec.state, rec.attempt), (RecordState::Completed, 1)),
        other => panic!("a record where none was, got {other:?}"),
    }
    let rec = store.get(&k).await.unwrap().expect("the record is kept");
    assert_eq!(
        (rec.state, rec.attempt, rec.output.clone(), rec.lease_until),
        (RecordState::Completed, 1, Some(json!("first")), None)
    );
    assert_eq!((rec.input.clone(), rec.run_id.as_str()), (input(), "run-one-write"));
    match store.apply(&k, record("second")).await.unwrap() {
        OpOutcome::Recorded(r) => assert_eq!(r.output, Some(json!("first"))),
        other => panic!("the first record is kept and answered, got {other:?}"),
    }
    assert_eq!(store.get(&k).await.unwrap().unwrap().output, Some(json!("first")));

    let held = key("one-write-held");
    claimed(store.claim(&held, intent("other"), 30_000, false).await.unwrap());
    assert!(matches!(
        store.apply(&held, record("late")).await.unwrap(),
        OpOutcome::InFlight(_)
    ));
    let rec = store.get(&held).await.unwrap().unwrap();
    assert_eq!(
        (rec.state, rec.output),
        (RecordState::Claimed, None),
        "a claim is left alone"
    );

    let mut other_tool = intent("other");
    other_tool.tool = "send_email".to_owned();
    let theirs = key("one-write-theirs");
    claimed(store.claim(&theirs, other_tool, 30_000, false).await.unwrap());
    assert!(matches!(
        store.apply(&theirs, record("mine")).await,
        Err(StoreError::Rejected(Rejected::KeyOfAnotherTool { .. }))
    ));
}

/// Through the engine: nothing is in the journal while a `one_write` tool runs; its record is
/// the call's write. A second engine (another process, as the journal sees it) finds no claim
/// and runs too; the first record written is kept and the slower call answers with it.
/// Identical calls of one engine still share one run; a definitive failure writes nothing.
pub async fn engine_one_write<H: Harness>() {
    let h = H::fresh().await;
    let dir = ScratchDir::new("one-write");
    let ledger = dir.path().join("ledger");
    let config = EngineConfig {
        lease: Duration::from_secs(30),
        poll_interval: Duration::from_millis(5),
    };
    let (e1, e2) = (
        Engine::with_config(h.store(), config),
        Engine::with_config(h.store(), config),
    );
    let run = RunContext::new(format!("one-write-{}", fastrand::u64(..)));
    let doc = format!("doc-{}", fastrand::u64(..));
    let args = ReindexArgs {
        doc: doc.clone(),
        fail: false,
        unknown: false,
    };

    let slow = Reindex::new(&ledger, "e1", false);
    let first = tokio::spawn({
        let (engine, tool, run, args) = (e1.clone(), slow.clone(), run.clone(), args.clone());
        async move { engine.call_with_report(&tool, &run, CallOptions::default(), args).await }
    });
    // Until the first call's tool is let through, nothing of it is in the journal.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(ledger_lines(&ledger).len(), 0, "the first call waits at its gate");
    let listed = h.store().list(&Filter::default()).await.unwrap();
    assert!(
        listed.iter().all(|r| r.run_id != run.run_id()),
        "no claim is written before a one_write tool runs: {listed:?}"
    );

    let fast = Reindex::new(&ledger, "e2", true);
    let second = e2
        .call_with_report(&fast, &run, CallOptions::default(), args.clone())
        .await;
    assert_eq!(second.result.unwrap(), format!("reindexed {doc} by e2"));
    assert_eq!(second.disposition, Disposition::Executed);
    let k = second.key.clone().expect("a journaled call has a key");
    let rec = h.store().get(&k).await.unwrap().expect("recorded");
    assert_eq!((rec.state, rec.attempt), (RecordState::Completed, 1));

    slow.gate.add_permits(tokio::sync::Semaphore::MAX_PERMITS / 2);
    let first = first.await.unwrap();
    assert_eq!(
        first.result.unwrap(),
        format!("reindexed {doc} by e2"),
        "the slower call answers with the record the journal kept"
    );
    assert_eq!(first.disposition, Disposition::Replayed);
    let mut runs = ledger_lines(&ledger);
    runs.sort();
    assert_eq!(
        runs,
        vec![format!("{doc} e1"), format!("{doc} e2")],
        "both ran, as the class allows"
    );
    let rec = h.store().get(&k).await.unwrap().unwrap();
    assert_eq!(rec.output, Some(json!(format!("reindexed {doc} by e2"))));

    // A later call replays; nothing runs.
    let again = e1.call_with_report(&slow, &run, CallOptions::default(), args).await;
    assert_eq!(again.disposition, Disposition::Replayed);
    assert_eq!(ledger_lines(&ledger).len(), 2);

    // Identical calls of one engine share one run.
    let shared = ReindexArgs {
        doc: format!("{doc}-shared"),
        fail: false,
        unknown: false,
    };
    let calls = (0..8).map(|_| {
        let (engine, tool, run, args) = (e1.clone(), fast.clone(), run.clone(), shared.clone());
        tokio::spawn(async move { engine.call(&tool, &run, CallOptions::default(), args).await })
    });
    for r in futures::future::join_all(calls).await {
        assert_eq!(r.unwrap().unwrap(), format!("reindexed {doc}-shared by e2"));
    }
    let shared_runs = ledger_lines(&ledger)
        .into_iter()
        .filter(|l| l.starts_with(&format!("{doc}-shared ")))
        .count();
    assert_eq!(shared_runs, 1, "8 identical calls in one engine, one run");

    // A definitive failure: nothing happened, nothing is written.
    let failing = ReindexArgs {
        doc: format!("{doc}-refused"),
        fail: true,
        unknown: false,
    };
    let refused = e1.call_with_report(&fast, &run, CallOptions::default(), failing).await;
    assert!(refused.result.is_err());
    let k = refused.key.expect("a journaled call has a key");
    assert_eq!(
        h.store().get(&k).await.unwrap(),
        None,
        "a definitive failure leaves no record"
    );
}
