use effect_tool::{tool, EffectCtx, ToolError};
use futures::Stream;
use futures::stream::{self, StreamExt};

// `recover` is asked about a claimed call whose outcome is unknown.
/// Refund part of an order.
#[tool(effect = "idempotent", key(order_id), recover = find_refund, one_write)]
async fn issue_refund(order_id: String) -> Result<String, ToolError> {
    Ok(order_id)
}

async fn find_refund(_ctx: &EffectCtx, _args: &IssueRefundArgs) -> Result<Option<String>, ToolError> {
    Ok(None)
}

// The transaction already makes the claim and the record one commit.
/// Record a payment in the application's table.
#[tool(effect = "idempotent", key(order_id), transactional, one_write)]
async fn pay(order_id: String) -> Result<String, ToolError> {
    Ok(order_id)
}

// A stream's progress is shown while the call runs: it needs a claim to show in flight.
/// Deploy a service, reporting each stage.
#[tool(effect = "idempotent", key(service), stream, one_write)]
async fn deploy(service: String) -> impl Stream<Item = Result<String, ToolError>> + Send {
    stream::iter(["built", "live"]).map(move |stage| Ok(format!("{service} {stage}")))
}

fn main() {}
