use effect_tool::{ToolError, tool};
use futures::Stream;

// A stream returned without `stream`: which item is the output?
/// Deploy a service.
#[tool(effect = "idempotent")]
async fn deploy(service: String) -> impl Stream<Item = Result<String, ToolError>> {
    futures::stream::once(async move { Ok(service) })
}

fn main() {}
