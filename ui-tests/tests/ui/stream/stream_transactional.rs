use effect_tool::{ToolError, tool};
use futures::Stream;

// Progress from inside the journal's transaction would report writes that can still roll back.
/// Record payments, reporting each.
#[tool(effect = "irreversible", transactional, stream)]
async fn record_payments(ids: Vec<String>) -> impl Stream<Item = Result<String, ToolError>> {
    futures::stream::iter(ids.into_iter().map(Ok))
}

fn main() {}
