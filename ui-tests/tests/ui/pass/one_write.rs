// `#[tool(one_write)]` on an idempotent tool compiles and declares `ONE_WRITE`; a tool without
// it keeps the default. The manifest says so on the declared tool's line only.
use effect_tool::{DynTool, Tool, ToolError, tool, toolkit};

/// Refund part of an order; the payment system applies a key once.
#[tool(effect = "idempotent", key(order_id, amount_cents), one_write)]
async fn issue_refund(order_id: String, amount_cents: u64) -> Result<String, ToolError> {
    Ok(format!("re_{order_id}_{amount_cents}"))
}

/// Tag an order.
#[tool(effect = "idempotent", key(order_id))]
async fn tag_order(order_id: String) -> Result<String, ToolError> {
    Ok(order_id)
}

fn main() {
    const { assert!(<IssueRefund as Tool>::ONE_WRITE) };
    const { assert!(!<TagOrder as Tool>::ONE_WRITE) };
    assert!(DynTool::one_write(&IssueRefund));
    assert!(!DynTool::one_write(&TagOrder));
    let manifest = toolkit![IssueRefund, TagOrder].manifest();
    let line = |name: &str| manifest.lines().find(|l| l.starts_with(name)).unwrap().to_owned();
    assert!(
        line("issue_refund ").starts_with("issue_refund class=idempotent one_write=yes key=fields(order_id, amount_cents) "),
        "{manifest}"
    );
    assert!(line("tag_order ").starts_with("tag_order class=idempotent key="), "{manifest}");
}
