//! One model turn's identical calls (issue 11 item 6): identical calls (same tool, same
//! arguments) in one `Dispatcher::dispatch` share one application whatever the class, and each
//! gets the result; every call id that received it replays it later; only a call of another
//! turn of an unkeyed irreversible tool is blocked, and its message sends nobody to a person.
//! Effects are counted by a ledger the engine cannot see.

use crate::common;

use std::sync::Arc;

use common::ledger::Downstream;
use effect_tool::decide::record::{Intent, OpOutcome};
use effect_tool::{
    BlockReason, Disposition, EffectClass, EffectCtx, Engine, Filter, MemoryStore, RecordState, RunContext, Store,
    StoreExt, Tool, ToolCall, ToolError, Toolkit,
};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
struct ReplyArgs {
    thread: String,
    text: String,
}

/// A tool of class `CLASS` whose every run is one request to the downstream ledger (which
/// counts requests whatever the key). `recover` finds a reply the ledger holds.
struct Reply<const CLASS: u8> {
    ledger: Arc<Downstream>,
}

const fn class_of(n: u8) -> EffectClass {
    match n {
        0 => EffectClass::Pure,
        1 => EffectClass::Idempotent,
        2 => EffectClass::Compensable,
        _ => EffectClass::Irreversible,
    }
}

const NAMES: [&str; 4] = ["read_thread", "upsert_reply", "hold_reply", "send_reply"];

impl<const CLASS: u8> Tool for Reply<CLASS> {
    type Args = ReplyArgs;
    type Output = String;
    type Error = ToolError;
    const NAME: &'static str = NAMES[CLASS as usize];
    const CLASS: EffectClass = class_of(CLASS);
    const HAS_RECOVER: bool = true;

    async fn call(&self, _ctx: &EffectCtx, a: ReplyArgs) -> Result<String, ToolError> {
        // Yield, so that identical calls of one turn would overlap if they each ran.
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        self.ledger.apply(&format!("{}:{}", a.thread, a.text));
        Ok(format!("{} #{} on {}", Self::NAME, self.ledger.requests(), a.thread))
    }

    async fn recover(&self, _ctx: &EffectCtx, a: &ReplyArgs) -> Result<Option<String>, ToolError> {
        let found = self.ledger.has(&format!("{}:{}", a.thread, a.text));
        Ok(found.then(|| format!("{} recovered on {}", Self::NAME, a.thread)))
    }
}

fn call(id: &str, name: &str) -> ToolCall {
    ToolCall::new(id, name, r#"{"thread": "t-1", "text": "thanks, on it"}"#)
}

/// Records a person must act on (what `effect-tool list --state in-doubt,awaiting-approval,stale`
/// shows).
async fn needing_a_person(store: &dyn Store) -> Vec<String> {
    let filter = Filter {
        states: vec![RecordState::InDoubt, RecordState::AwaitingApproval],
        ..Filter::all()
    };
    let mut keys: Vec<String> = store.list(&filter).await.unwrap().into_iter().map(|r| r.key).collect();
    let all = store.list(&Filter::all()).await.unwrap();
    keys.extend(all.into_iter().filter(|r| r.is_stale(store.now())).map(|r| r.key));
    keys
}

#[tokio::test]
async fn three_identical_unkeyed_irreversible_calls_of_one_turn_share_one_send() {
    let ledger = Arc::new(Downstream::default());
    let engine = Engine::new(MemoryStore::new());
    let toolkit = Toolkit::new().with(Reply::<3> { ledger: ledger.clone() });
    let dispatcher = toolkit.dispatcher(engine.clone());
    let run = RunContext::new("run-reply");
    let turn = [
        call("call_1", "send_reply"),
        call("call_2", "send_reply"),
        call("call_3", "send_reply"),
    ];

    let results = dispatcher.dispatch(&run, &turn).await;
    assert_eq!(ledger.requests(), 1, "one reply for three identical calls of one turn");
    let ids: Vec<&str> = results.iter().map(|r| r.call_id.as_str()).collect();
    assert_eq!(ids, ["call_1", "call_2", "call_3"]);
    for r in &results {
        assert_eq!(
            r.output(),
            Some(&serde_json::json!("send_reply #1 on t-1")),
            "{}",
            r.content()
        );
    }
    let dispositions: Vec<Disposition> = results.iter().map(|r| r.disposition).collect();
    assert_eq!(
        dispositions,
        [Disposition::Executed, Disposition::Shared, Disposition::Shared]
    );
    let key = results[0].key.clone().expect("journaled");
    let rec = engine.store().get(&key).await.unwrap().unwrap();
    assert_eq!(rec.state, RecordState::Completed);
    assert!(
        ["call_1", "call_2", "call_3"].iter().all(|c| rec.received_by(c)),
        "every call id that got the result is kept: {:?} {:?}",
        rec.call_id,
        rec.call_ids
    );
    assert_eq!(needing_a_person(&**engine.store()).await, Vec::<String>::new());

    // A later turn: each of those call ids replays it.
    for id in ["call_3", "call_1", "call_2"] {
        let again = dispatcher.dispatch(&run, &[call(id, "send_reply")]).await;
        assert_eq!(
            again[0].disposition,
            Disposition::Replayed,
            "{id}: {}",
            again[0].content()
        );
        assert_eq!(again[0].output(), Some(&serde_json::json!("send_reply #1 on t-1")));
    }
    // A new call id with identical arguments in another turn is blocked, and its message sends
    // nobody to a person: no record waits for one.
    let replan = dispatcher.dispatch(&run, &[call("call_4", "send_reply")]).await;
    let blocked = replan[0]
        .blocked()
        .expect("a re-plan of an unkeyed irreversible tool is blocked");
    assert_eq!(blocked.reason, BlockReason::IdenticalReplan);
    let text = replan[0].content();
    assert!(!text.contains("a person has to check"), "{text}");
    assert!(!text.contains("tell the user it waits"), "{text}");
    assert!(text.contains("Nothing waits for a person"), "{text}");
    assert!(
        text.contains("identical arguments already ran in an earlier turn"),
        "{text}"
    );
    let message = blocked.to_string();
    assert!(!message.contains("effect-tool resolve"), "{message}");
    assert!(message.contains("nothing waits for a person"), "{message}");
    assert_eq!(needing_a_person(&**engine.store()).await, Vec::<String>::new());
    assert_eq!(ledger.requests(), 1);
}

/// Identical calls of one turn share one application for every class.
#[tokio::test]
async fn identical_calls_of_one_turn_share_one_application_whatever_the_class() {
    async fn one<const C: u8>() {
        let ledger = Arc::new(Downstream::default());
        let engine = Engine::new(MemoryStore::new());
        let toolkit = Toolkit::new().with(Reply::<C> { ledger: ledger.clone() });
        let dispatcher = toolkit.dispatcher(engine.clone());
        let run = RunContext::new(format!("run-class-{C}"));
        let name = NAMES[C as usize];
        // Different argument text, the same JSON value: identical calls.
        let turn = [
            call("a", name),
            ToolCall::new("b", name, r#"{"text": "thanks, on it", "thread": "t-1"}"#),
            call("c", name),
            ToolCall::new("d", name, r#"{"thread": "t-2", "text": "thanks, on it"}"#),
        ];
        let results = dispatcher.dispatch(&run, &turn).await;
        assert_eq!(ledger.requests(), 2, "{name}: one application for a, b, c; one for d");
        let out = results[0].output().cloned();
        assert!(out.is_some(), "{name}: {}", results[0].content());
        for r in &results[1..3] {
            assert_eq!(r.output().cloned(), out, "{name} {}", r.call_id);
            assert_eq!(r.disposition, Disposition::Shared);
        }
        assert_ne!(
            results[3].output().cloned(),
            out,
            "{name}: another input is its own call"
        );
        // Later turns: the call ids that got the result replay it (journaled classes).
        if C > 0 {
            for id in ["a", "b", "c"] {
                let again = dispatcher.dispatch(&run, &[call(id, name)]).await;
                assert_eq!(again[0].disposition, Disposition::Replayed, "{name} {id}");
                assert_eq!(again[0].output().cloned(), out);
            }
        }
        assert_eq!(ledger.requests(), 2);
    }
    one::<0>().await;
    one::<1>().await;
    one::<2>().await;
    one::<3>().await;
}

/// A takeover keeps the call id of the attempt it took over: after `recover` reconciled the
/// effect `call_1` applied before its process died, `call_1` replays it instead of being blocked.
#[tokio::test]
async fn the_call_id_that_applied_the_effect_replays_after_a_takeover() {
    let ledger = Arc::new(Downstream::default());
    let engine = Engine::new(MemoryStore::new());
    let tool = Reply::<3> { ledger: ledger.clone() };
    let run = RunContext::new("run-takeover");
    let args = ReplyArgs {
        thread: "t-1".into(),
        text: "thanks, on it".into(),
    };
    // call_1 claimed, sent, and died before recording (its lease is over).
    let id = effect_tool::call::key::identify(&tool, &run, &args).unwrap();
    let intent = Intent {
        tool: "send_reply".into(),
        class: EffectClass::Irreversible,
        run_id: run.run_id().into(),
        thread_id: None,
        call_id: Some("call_1".into()),
        fingerprint: id.fingerprint,
        input: id.input,
        ttl_ms: None,
        approval: None,
        approval_ttl_ms: None,
        holder: None,
    };
    let claimed = engine.store().claim(&id.key, intent, 0, false).await.unwrap();
    assert!(matches!(claimed, OpOutcome::Claimed { .. }), "{claimed:?}");
    ledger.apply("t-1:thanks, on it");

    // call_2 takes over and reconciles through recover: nothing sent again.
    let toolkit = Toolkit::new().with(Reply::<3> { ledger: ledger.clone() });
    let dispatcher = toolkit.dispatcher(engine.clone());
    let took_over = dispatcher.dispatch(&run, &[call("call_2", "send_reply")]).await;
    assert_eq!(
        took_over[0].disposition,
        Disposition::Reconciled,
        "{}",
        took_over[0].content()
    );
    // call_1 (the model retrying the call that did it) replays the result.
    let retried = dispatcher.dispatch(&run, &[call("call_1", "send_reply")]).await;
    assert_eq!(
        retried[0].disposition,
        Disposition::Replayed,
        "{}",
        retried[0].content()
    );
    assert_eq!(retried[0].output(), took_over[0].output());
    assert_eq!(ledger.requests(), 1, "one reply");
}
