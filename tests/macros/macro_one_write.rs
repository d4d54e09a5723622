//! `#[tool(one_write)]` through the engine: the declared tool runs before anything is written
//! (no claim while it runs, where the same tool without the flag shows one), then its record
//! is the call's one write and replays. Runs are counted by a ledger the engine cannot see
//! (statics); each tool waits at a gate the test opens, so the journal is read while it runs.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use effect_tool::{
    CallOptions, Disposition, DynTool, Engine, Filter, MemoryStore, RecordState, RunContext, Store, Tool, ToolError,
    tool,
};

/// Documents reindexed, one line a run: the outside ledger.
static REINDEXED: Mutex<Vec<String>> = Mutex::new(Vec::new());
/// Documents whose run has started (it waits at its gate).
static STARTED: Mutex<Vec<String>> = Mutex::new(Vec::new());
/// The gate: the tools run on once it is open.
static OPEN: AtomicBool = AtomicBool::new(false);

/// One run: says it started, waits for the gate, writes the ledger.
async fn reindex_doc(doc: String) -> Result<String, ToolError> {
    STARTED.lock().unwrap().push(doc.clone());
    while !OPEN.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    REINDEXED.lock().unwrap().push(doc.clone());
    Ok(format!("reindexed {doc}"))
}

/// Reindex a document; the index applies a key once.
#[tool(effect = "idempotent", key(doc), one_write)]
async fn reindex(doc: String) -> Result<String, ToolError> {
    reindex_doc(doc).await
}

/// The same tool, claimed before it runs.
#[tool(effect = "idempotent", key(doc))]
async fn reindex_claimed(doc: String) -> Result<String, ToolError> {
    reindex_doc(doc).await
}

/// Waits until the run of `doc` has started (no deadline: the test's own timeout is the bound).
async fn started(doc: &str) {
    while !STARTED.lock().unwrap().iter().any(|d| d == doc) {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

#[tokio::test]
async fn a_one_write_tool_runs_unclaimed_and_its_record_is_its_one_write() {
    const { assert!(<Reindex as Tool>::ONE_WRITE && !<ReindexClaimed as Tool>::ONE_WRITE) };
    assert!(DynTool::one_write(&Reindex) && !DynTool::one_write(&ReindexClaimed));
    let engine = Engine::new(MemoryStore::new());
    let store = engine.store().clone();
    let run = RunContext::new("run-one-write");

    let one_write = tokio::spawn({
        let (engine, run) = (engine.clone(), run.clone());
        async move {
            engine
                .call_with_report(
                    &Reindex,
                    &run,
                    CallOptions::call_id("c1"),
                    ReindexArgs { doc: "a".into() },
                )
                .await
        }
    });
    let claimed = tokio::spawn({
        let (engine, run) = (engine.clone(), run.clone());
        async move {
            engine
                .call_with_report(
                    &ReindexClaimed,
                    &run,
                    CallOptions::call_id("c2"),
                    ReindexClaimedArgs { doc: "b".into() },
                )
                .await
        }
    });
    started("a").await;
    started("b").await;
    // Both run: only the claimed one is in the journal.
    let running = store.list(&Filter::default()).await.unwrap();
    let tools: Vec<(&str, RecordState)> = running.iter().map(|r| (r.tool.as_str(), r.state)).collect();
    assert_eq!(tools, [("reindex_claimed", RecordState::Claimed)], "{running:?}");

    OPEN.store(true, Ordering::SeqCst);
    let one_write = one_write.await.unwrap();
    assert_eq!(one_write.result.unwrap(), "reindexed a");
    assert_eq!(one_write.disposition, Disposition::Executed);
    assert_eq!(claimed.await.unwrap().result.unwrap(), "reindexed b");
    let key = one_write.key.expect("a journaled call has a key");
    let rec = store.get(&key).await.unwrap().expect("recorded");
    assert_eq!((rec.state, rec.attempt), (RecordState::Completed, 1));

    // The record replays: the tool does not run again.
    let again = engine
        .call_with_report(
            &Reindex,
            &run,
            CallOptions::call_id("c3"),
            ReindexArgs { doc: "a".into() },
        )
        .await;
    assert_eq!(again.disposition, Disposition::Replayed);
    assert_eq!(again.result.unwrap(), "reindexed a");
    let mut ledger = REINDEXED.lock().unwrap().clone();
    ledger.sort();
    assert_eq!(ledger, ["a", "b"]);
}
