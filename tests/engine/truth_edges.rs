//! What code is told at the edges (issue 30 items 1 and 2, issue 29 item 3): a record in doubt
//! whose `recover` fails is `Blocked`, never `Failed` as if the hook's failure were the tool's;
//! a replay under a custom key whose input differs says which fields differ
//! ([`CallReport::input_differs`]); a key holding another tool's record is refused, never
//! replayed, joined or taken over. Effects are counted by a ledger the engine cannot see; the
//! journals are real (memory and SQLite).

use crate::common;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use common::ledger::Downstream;
use common::mail::{SendEmail, email};
use effect_tool::store::sqlite::SqliteStore;
use effect_tool::{
    BlockReason, CallOptions, Disposition, EffectClass, EffectCtx, EffectError, Engine, MemoryStore, RecordState,
    RunContext, Store, Tool, ToolError,
};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
struct OrderArgs {
    id: String,
}

/// Two tools whose custom keys are both `order:{id}`: the key rules collide.
struct OrderTool<const CANCEL: bool> {
    ledger: Arc<Downstream>,
    gate: Option<Arc<tokio::sync::Semaphore>>,
}

impl<const CANCEL: bool> Tool for OrderTool<CANCEL> {
    type Args = OrderArgs;
    type Output = String;
    type Error = ToolError;
    const NAME: &'static str = if CANCEL { "cancel_order" } else { "refund_order" };
    const CLASS: EffectClass = EffectClass::Irreversible;

    fn key(&self, a: &OrderArgs) -> Option<String> {
        Some(format!("order:{}", a.id))
    }

    async fn call(&self, _ctx: &EffectCtx, a: OrderArgs) -> Result<String, ToolError> {
        if let Some(gate) = &self.gate {
            let _permit = gate.acquire().await.unwrap();
        }
        self.ledger.apply(&format!("{}:{}", Self::NAME, a.id));
        Ok(format!("{} {}", Self::NAME, a.id))
    }
}

/// The journals each test runs on: memory, SQLite, and a memory journal the engine claims on
/// without a lookup first.
fn journals() -> Vec<(&'static str, Arc<dyn Store>, Option<tempfile::TempDir>)> {
    let dir = tempfile::tempdir().unwrap();
    let sqlite: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("journal.db")).unwrap());
    vec![
        ("memory", Arc::new(MemoryStore::new()), None),
        ("sqlite", sqlite, Some(dir)),
        // No lookup first: the state machine's claim answers (as PostgreSQL's store does).
        (
            "claims-first",
            Arc::new(ClaimsAnswer(Arc::new(MemoryStore::new()))),
            None,
        ),
    ]
}

/// Issue 30 item 1: the email went out but its send timed out; `recover` then fails (the mail
/// log is down, then its client panics). Every answer while the record is in doubt is
/// `Blocked` with `RecoverFailed`: never `Failed`, which tells code and model nothing happened.
/// Once the mail log answers, the effect is reconciled: one email in all.
#[tokio::test]
async fn a_failing_recover_on_a_record_in_doubt_blocks_every_call() {
    for (name, store, _dir) in journals() {
        let engine = Engine::new(store);
        let tool = SendEmail::default();
        let run = RunContext::new("conv-1");
        tool.time_out.store(true, Ordering::SeqCst);
        tool.log_down.store(true, Ordering::SeqCst);

        // The first call: an unknown outcome, and recover cannot say.
        let first = engine
            .call_with_report(&tool, &run, CallOptions::call_id("c1"), email("T-90", 900))
            .await;
        assert_eq!(first.disposition, Disposition::Blocked, "{name}: {:?}", first.result);
        let blocked = first.result.unwrap_err();
        assert_eq!(
            blocked.as_blocked().unwrap().reason,
            BlockReason::RecoverFailed,
            "{name}"
        );
        let key = first.key.unwrap();
        let rec = engine.store().get(&key).await.unwrap().unwrap();
        assert_eq!(rec.state, RecordState::InDoubt, "{name}");
        assert!(
            rec.reason.as_deref().unwrap().contains("the mail log is down"),
            "{name}: {rec:?}"
        );

        // The next calls take the record in doubt over and ask recover again: it fails with a
        // transient error, then panics. Both are blocked.
        tool.time_out.store(false, Ordering::SeqCst);
        for panics in [false, true] {
            tool.log_panics.store(panics, Ordering::SeqCst);
            let again = engine
                .call_with_report(&tool, &run, CallOptions::call_id("c2"), email("T-90", 900))
                .await;
            assert_eq!(
                again.disposition,
                Disposition::Blocked,
                "{name} panics={panics}: {:?}",
                again.result
            );
            match again.result {
                Err(EffectError::Blocked(b)) => assert_eq!(b.reason, BlockReason::RecoverFailed, "{name}"),
                other => panic!("{name} panics={panics}: expected Blocked, got {other:?}"),
            }
            let rec = engine.store().get(&key).await.unwrap().unwrap();
            assert_eq!(rec.state, RecordState::InDoubt, "{name}: it stays in doubt");
        }
        assert_eq!(
            tool.ledger.requests(),
            1,
            "{name}: the email was sent once, never again"
        );

        // The mail log answers: the email is found, and the call is reconciled.
        tool.log_panics.store(false, Ordering::SeqCst);
        tool.log_down.store(false, Ordering::SeqCst);
        let last = engine
            .call_with_report(&tool, &run, CallOptions::call_id("c3"), email("T-90", 900))
            .await;
        assert_eq!(last.disposition, Disposition::Reconciled, "{name}: {:?}", last.result);
        assert_eq!(last.result.unwrap(), "found the email to ann@example.com");
        assert_eq!(tool.ledger.requests(), 1, "{name}");
        assert_eq!(tool.ledger.effects(), 1, "{name}");
    }
}

/// Issue 30 item 2: under a custom key, a call with other arguments gets the recorded call's
/// result (the tool is not `STRICT_INPUT`), and the report says which fields differ. An
/// identical call says nothing. Nothing runs twice.
#[tokio::test]
async fn a_replay_whose_input_differs_names_the_fields() {
    for (name, store, _dir) in journals() {
        let engine = Engine::new(store);
        let tool = SendEmail::default();
        let run = RunContext::new("conv-1");
        let first = engine
            .call_with_report(&tool, &run, CallOptions::call_id("c1"), email("T-90", 900))
            .await;
        assert_eq!(first.disposition, Disposition::Executed, "{name}");
        assert_eq!(first.input_differs, None, "{name}");

        let other = engine
            .call_with_report(&tool, &run, CallOptions::call_id("c2"), email("T-90", 100))
            .await;
        assert_eq!(other.disposition, Disposition::Replayed, "{name}");
        assert_eq!(other.result.unwrap(), "sent 900 EUR to ann@example.com", "{name}");
        assert_eq!(other.input_differs, Some(vec!["amount_eur".to_owned()]), "{name}");

        let same = engine
            .call_with_report(&tool, &run, CallOptions::call_id("c3"), email("T-90", 900))
            .await;
        assert_eq!(same.disposition, Disposition::Replayed, "{name}");
        assert_eq!(
            same.input_differs, None,
            "{name}: the same input replays without a note"
        );
        assert_eq!(tool.ledger.requests(), 1, "{name}");
    }
}

/// The same through a claim that answers with the record (no lookup first: the record is
/// claimed by a call whose lookup found nothing, as a race between two processes leaves it).
#[tokio::test]
async fn a_replay_found_by_the_claim_names_the_fields_too() {
    let store = Arc::new(MemoryStore::new());
    let engine = Engine::new(store.clone());
    let tool = SendEmail::default();
    let run = RunContext::new("conv-1");
    engine
        .call(&tool, &run, CallOptions::call_id("c1"), email("T-91", 900))
        .await
        .unwrap();
    // A journal whose claim answers replays (as PostgreSQL's does): the engine claims at
    // once, and the claim answers with the recorded result.
    let engine = Engine::new(ClaimsAnswer(store.clone()));
    let other = engine
        .call_with_report(&tool, &run, CallOptions::call_id("c2"), email("T-91", 100))
        .await;
    assert_eq!(other.disposition, Disposition::Replayed);
    assert_eq!(other.input_differs, Some(vec!["amount_eur".to_owned()]));
    assert_eq!(tool.ledger.requests(), 1);
}

/// A journal whose claim answers replays: no lookup before the claim.
struct ClaimsAnswer(Arc<dyn Store>);

#[async_trait::async_trait]
impl Store for ClaimsAnswer {
    async fn get(&self, key: &str) -> Result<Option<effect_tool::EffectRecord>, effect_tool::StoreError> {
        self.0.get(key).await
    }
    fn claim_answers_replays(&self) -> bool {
        true
    }
    async fn apply(
        &self,
        key: &str,
        op: effect_tool::decide::record::Op,
    ) -> Result<effect_tool::decide::record::OpOutcome, effect_tool::StoreError> {
        self.0.apply(key, op).await
    }
    async fn list(
        &self,
        filter: &effect_tool::Filter,
    ) -> Result<Vec<effect_tool::EffectRecord>, effect_tool::StoreError> {
        self.0.list(filter).await
    }
    async fn gc(&self, now: effect_tool::decide::record::Millis) -> Result<u64, effect_tool::StoreError> {
        self.0.gc(now).await
    }
    async fn audit(
        &self,
        key: Option<&str>,
    ) -> Result<Vec<effect_tool::decide::record::AuditEntry>, effect_tool::StoreError> {
        self.0.audit(key).await
    }
}

/// Issue 29 item 3: `cancel_order` and `refund_order` both key `order:{id}`. A cancel after the
/// refund is refused with an error that names both tools: never the refund's recorded output,
/// never run. The same for a refund while a cancel is in doubt (the claim's check), and for a
/// cancel while the refund runs in this process (never joined).
#[tokio::test]
async fn a_key_holding_another_tools_record_is_refused() {
    for (name, store, _dir) in journals() {
        let ledger = Arc::new(Downstream::default());
        let engine = Engine::new(store);
        let run = RunContext::new("conv-1");
        let refund = OrderTool::<false> {
            ledger: ledger.clone(),
            gate: None,
        };
        let cancel = OrderTool::<true> {
            ledger: ledger.clone(),
            gate: None,
        };
        let o1 = OrderArgs { id: "o-1".into() };
        engine
            .call(&refund, &run, CallOptions::call_id("c1"), o1.clone())
            .await
            .unwrap();
        let refused = engine
            .call_with_report(&cancel, &run, CallOptions::call_id("c2"), o1.clone())
            .await;
        let text = refused.result.as_ref().unwrap_err().to_string();
        assert_eq!(refused.disposition, Disposition::Failed, "{name}");
        match &refused.result {
            Err(EffectError::KeyOfAnotherTool {
                tool, recorded_tool, ..
            }) => {
                assert_eq!(
                    (tool.as_str(), recorded_tool.as_str()),
                    ("cancel_order", "refund_order")
                );
            }
            other => panic!("{name}: expected KeyOfAnotherTool, got {other:?}"),
        }
        assert!(
            text.contains("`cancel_order`") && text.contains("`refund_order`"),
            "{text}"
        );
        assert!(text.contains("give each tool keys of its own"), "{text}");
        assert_eq!(ledger.requests(), 1, "{name}: the cancel never ran");
        let key = refused.key.clone().unwrap();
        assert_eq!(key, common::key_of(&refund, &run, &o1), "{name}");
        let rec = engine.store().get(&key).await.unwrap();
        let rec = rec.unwrap_or_else(|| panic!("{name}: the refund's record is kept"));
        assert_eq!((rec.tool.as_str(), rec.state), ("refund_order", RecordState::Completed));
    }
}

/// The claim refuses another tool's record in any state (here in doubt, which the lookup does
/// not answer): never a takeover.
#[tokio::test]
async fn a_claim_never_takes_over_another_tools_record_in_doubt() {
    for (name, store, _dir) in journals() {
        let ledger = Arc::new(Downstream::default());
        let engine = Engine::new(store);
        let run = RunContext::new("conv-1");
        let email_tool = SendEmail {
            ledger: ledger.clone(),
            ..SendEmail::default()
        };
        email_tool.time_out.store(true, Ordering::SeqCst);
        // Recover finds nothing and says so: with the effect timed out and applied, the ledger
        // has it, so recover would find it; make it fail instead to leave the record in doubt.
        email_tool.log_down.store(true, Ordering::SeqCst);
        let first = engine
            .call_with_report(&email_tool, &run, CallOptions::call_id("c1"), email("o-2", 1))
            .await;
        assert!(first.result.is_err(), "{name}");
        let key = first.key.unwrap();
        assert_eq!(
            engine.store().get(&key).await.unwrap().unwrap().state,
            RecordState::InDoubt
        );

        /// A tool whose key is the email's: `email:{id}`.
        struct Clash(Arc<Downstream>);
        impl Tool for Clash {
            type Args = OrderArgs;
            type Output = String;
            type Error = ToolError;
            const NAME: &'static str = "clash";
            const CLASS: EffectClass = EffectClass::Idempotent;
            const HAS_RECOVER: bool = true;
            fn key(&self, a: &OrderArgs) -> Option<String> {
                Some(format!("email:{}", a.id))
            }
            async fn call(&self, _ctx: &EffectCtx, a: OrderArgs) -> Result<String, ToolError> {
                self.0.apply(&format!("clash:{}", a.id));
                Ok("clash".into())
            }
        }
        let clash = Clash(ledger.clone());
        let refused = engine
            .call_with_report(&clash, &run, CallOptions::call_id("c2"), OrderArgs { id: "o-2".into() })
            .await;
        assert!(
            matches!(&refused.result, Err(EffectError::KeyOfAnotherTool { recorded_tool, .. }) if recorded_tool == "send_email"),
            "{name}: {:?}",
            refused.result
        );
        assert_eq!(refused.key.as_deref(), Some(key.as_str()), "{name}");
        let rec = engine.store().get(&key).await.unwrap().unwrap();
        assert_eq!(
            (rec.tool.as_str(), rec.state),
            ("send_email", RecordState::InDoubt),
            "{name}"
        );
        assert_eq!(ledger.requests(), 1, "{name}: the clashing tool never ran");
    }
}

/// A call of another tool under the key of a call running in this process does not join it.
#[tokio::test]
async fn a_call_of_another_tool_never_joins_a_running_call() {
    let ledger = Arc::new(Downstream::default());
    let engine = Engine::new(MemoryStore::new());
    let run = RunContext::new("conv-1");
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let refund = OrderTool::<false> {
        ledger: ledger.clone(),
        gate: Some(gate.clone()),
    };
    let cancel = OrderTool::<true> {
        ledger: ledger.clone(),
        gate: None,
    };
    let o = OrderArgs { id: "o-3".into() };
    let key = common::key_of(&refund, &run, &o);
    let running = engine.call(&refund, &run, CallOptions::call_id("c1"), o.clone());
    let mut running = std::pin::pin!(running);
    // Drive the refund until it waits inside its tool (it holds the in-process slot).
    tokio::select! {
        biased;
        _ = &mut running => panic!("the refund waits for its gate"),
        _ = async {
            while engine.store().get(&key).await.unwrap().map(|r| r.state) != Some(RecordState::Claimed) {
                tokio::task::yield_now().await;
            }
        } => {}
    }
    let refused = engine
        .call_with_report(&cancel, &run, CallOptions::call_id("c2"), o)
        .await;
    assert!(
        matches!(&refused.result, Err(EffectError::KeyOfAnotherTool { recorded_tool, .. }) if recorded_tool == "refund_order"),
        "{:?}",
        refused.result
    );
    gate.add_permits(1);
    assert_eq!(running.await.unwrap(), "refund_order o-3");
    assert_eq!(ledger.requests(), 1);
}
