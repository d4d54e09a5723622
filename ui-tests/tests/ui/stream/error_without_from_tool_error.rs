use effect_tool::{ClassifyError, tool};
use futures::Stream;

/// The deploy's own error, with no `From<ToolError>`: it cannot say "the stream was empty".
#[derive(Debug)]
pub struct DeployError;

impl std::fmt::Display for DeployError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("deploy failed")
    }
}

impl ClassifyError for DeployError {}

/// Deploy a service.
#[tool(effect = "idempotent", stream)]
async fn deploy(service: String) -> impl Stream<Item = Result<String, DeployError>> {
    futures::stream::once(async move { Ok(service) })
}

fn main() {}
