// `#[tool(stream)]`: an async fn returning `impl Stream<Item = Result<T, E>>`, or
// `Result<impl Stream<..>, E>` when a set-up may fail first; the output is the item's `Ok` type.
// And `recover_first` / `recover_settle` with a `recover` hook.
use effect_tool::{EffectCtx, Tool, ToolError, tool, tools};
use futures::Stream;
use futures::stream::{self, StreamExt};

/// A stage of a deploy.
#[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct Step {
    stage: String,
}

/// Deploy a service, reporting each stage.
#[tool(effect = "idempotent", key(service), stream)]
async fn deploy(ctx: &EffectCtx, service: String) -> impl Stream<Item = Result<Step, ToolError>> + Send {
    let _ = ctx;
    stream::iter(["built", "live"]).map(move |stage| Ok(Step { stage: format!("{service} {stage}") }))
}

/// Migrate a database; checks it exists first.
#[tool(effect = "idempotent", stream)]
async fn migrate(database: String) -> Result<impl Stream<Item = Result<u32, ToolError>>, ToolError> {
    if database.is_empty() {
        return Err(ToolError::definitive("name a database"));
    }
    Ok(stream::iter(1..=3).map(Ok))
}

/// A service whose tool streams.
pub struct Cluster {
    name: String,
}

#[tools]
impl Cluster {
    /// Drain the cluster's nodes, reporting each.
    #[tool(effect = "idempotent", stream)]
    pub async fn drain(&self, nodes: Vec<String>) -> impl Stream<Item = Result<String, ToolError>> + '_ {
        stream::iter(nodes).map(move |n| Ok(format!("{}: {n} drained", self.name)))
    }
}

/// Send an invoice; the billing system is asked first whether it already exists.
#[tool(effect = "irreversible", key(number), recover = find_invoice, recover_first, recover_settle = "30s")]
async fn send_invoice(number: String) -> Result<String, ToolError> {
    Ok(number)
}

async fn find_invoice(_ctx: &EffectCtx, _args: &SendInvoiceArgs) -> Result<Option<String>, ToolError> {
    Ok(None)
}

fn main() {
    assert_eq!(<Deploy as Tool>::output_type(), "Step");
    assert_eq!(<Migrate as Tool>::output_type(), "u32");
    assert_eq!(<ClusterDrain as Tool>::output_type(), "String");
    const { assert!(<SendInvoice as Tool>::RECOVER_FIRST) };
    assert_eq!(
        <SendInvoice as Tool>::RECOVER_SETTLE,
        Some(std::time::Duration::from_secs(30))
    );
    const { assert!(!<Deploy as Tool>::RECOVER_FIRST) };
}
