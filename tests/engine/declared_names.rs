//! Tools declared at run time (`Tool::declared_name`, as the MCP gateway's upstream tools are):
//! two values of one tool type with different names are two tools to the journal. Each call is
//! recorded and keyed under its own name, and a key recorded under one name is refused to the
//! other, never replayed. Effects are counted in a ledger file the engine does not see.

use std::path::PathBuf;

use effect_tool::testing::conformance::{ScratchDir, ledger_append, ledger_lines};
use effect_tool::{
    CallOptions, EffectClass, EffectCtx, EffectError, Engine, Filter, MemoryStore, RunContext, Store, Tool, ToolError,
};

/// One type, many tools: the name is a value. With `shared_key`, every value keys a call by
/// its argument alone (a custom key that names no tool).
struct Named {
    name: &'static str,
    shared_key: bool,
    ledger: PathBuf,
}

impl Tool for Named {
    type Args = String;
    type Output = String;
    type Error = ToolError;
    const NAME: &'static str = "named";
    const CLASS: EffectClass = EffectClass::Irreversible;

    fn declared_name(&self) -> &'static str {
        self.name
    }

    fn key(&self, args: &String) -> Option<String> {
        Some(if self.shared_key {
            format!("order-{args}")
        } else {
            format!("{}:order-{args}", self.name)
        })
    }

    async fn call(&self, _ctx: &EffectCtx, args: String) -> Result<String, ToolError> {
        ledger_append(&self.ledger, &format!("{} {args}", self.name));
        Ok(format!("{} did {args}", self.name))
    }
}

fn tools(dir: &ScratchDir, shared_key: bool) -> (Named, Named) {
    let ledger = dir.path().join("ledger");
    let named = |name| Named {
        name,
        shared_key,
        ledger: ledger.clone(),
    };
    (named("ship"), named("bill"))
}

#[tokio::test]
async fn each_name_is_journaled_and_replayed_as_its_own_tool() {
    let dir = ScratchDir::new("declared-names");
    let (ship, bill) = tools(&dir, false);
    let engine = Engine::new(MemoryStore::new());
    let run = RunContext::new("run-1");
    for _ in 0..2 {
        let shipped = engine
            .call_with_report(&ship, &run, CallOptions::default(), "7".to_owned())
            .await;
        assert_eq!(shipped.result.unwrap(), "ship did 7");
        let billed = engine
            .call_with_report(&bill, &run, CallOptions::default(), "7".to_owned())
            .await;
        assert_eq!(billed.result.unwrap(), "bill did 7");
    }
    assert_eq!(ledger_lines(&dir.path().join("ledger")), ["ship 7", "bill 7"]);
    let records = engine.store().list(&Filter::default()).await.unwrap();
    let mut names: Vec<&str> = records.iter().map(|r| r.tool.as_str()).collect();
    names.sort_unstable();
    assert_eq!(names, ["bill", "ship"]);
}

#[tokio::test]
async fn a_key_recorded_under_one_name_is_refused_to_another() {
    let dir = ScratchDir::new("declared-names-shared");
    let (ship, bill) = tools(&dir, true);
    let engine = Engine::new(MemoryStore::new());
    let run = RunContext::new("run-1");
    let shipped = engine.call(&ship, &run, CallOptions::default(), "7".to_owned()).await;
    assert_eq!(shipped.unwrap(), "ship did 7");
    let billed = engine.call(&bill, &run, CallOptions::default(), "7".to_owned()).await;
    match billed {
        Err(EffectError::KeyOfAnotherTool {
            tool, recorded_tool, ..
        }) => assert_eq!((tool.as_str(), recorded_tool.as_str()), ("bill", "ship")),
        other => panic!("expected KeyOfAnotherTool, got {other:?}"),
    }
    assert_eq!(ledger_lines(&dir.path().join("ledger")), ["ship 7"], "bill never ran");
}
