//! `effect-tool policy check` and `effect-tool policy schema` as a CI step runs them: the real
//! binary on the Cedar files of `testdata/policy/` and the tools a binary printed with
//! `toolkit.policy_tools()` (here, tools declared with `#[tool]`). A policy naming an argument
//! a tool does not have fails with exit 1 and names the policy and the field.

use crate::common;

use common::{TempDir, run};
use effect_tool::toolkit::Toolkit;
use effect_tool::{ToolError, tool};

/// Refund part of an order.
#[tool(effect = "idempotent", key(order_id, amount_cents))]
async fn issue_refund(order_id: String, amount_cents: u64) -> Result<String, ToolError> {
    Ok(format!("{order_id} {amount_cents}"))
}

/// Send the receipt of an order.
#[tool(effect = "irreversible", key(order_id), approval = "ops")]
async fn send_receipt(order_id: String) -> Result<String, ToolError> {
    Ok(order_id)
}

/// Delete an order's draft.
#[tool(effect = "irreversible", key(order_id))]
async fn delete_draft(order_id: String) -> Result<String, ToolError> {
    Ok(order_id)
}

fn testdata(file: &str) -> String {
    format!("{}/../testdata/policy/{file}", env!("CARGO_MANIFEST_DIR"))
}

/// The tools file, as an application prints it.
fn tools_file(dir: &TempDir) -> String {
    let toolkit = Toolkit::new().with(IssueRefund).with(SendReceipt).with(DeleteDraft);
    let path = dir.path.join("tools.json");
    std::fs::write(&path, serde_json::to_string_pretty(&toolkit.policy_tools()).unwrap()).unwrap();
    path.to_string_lossy().into_owned()
}

#[test]
fn good_policies_pass() {
    let dir = TempDir::new("policy_good");
    let tools = tools_file(&dir);
    for file in ["shop.cedar", "permit_all.cedar"] {
        let out = run(&["policy", "check", &testdata(file), "--tools", &tools], None, &[]);
        let text = out.ok();
        assert!(text.contains("fit the 3 tools"), "{text}");
    }
    let out = run(
        &["--json", "policy", "check", &testdata("shop.cedar"), "--tools", &tools],
        None,
        &[],
    );
    let json = out.json();
    assert_eq!(json["valid"], true);
    assert_eq!(json["policies"], 4);
}

#[test]
fn a_field_the_tool_does_not_have_fails() {
    let dir = TempDir::new("policy_wrong");
    let tools = tools_file(&dir);
    let out = run(
        &["policy", "check", &testdata("wrong_field.cedar"), "--tools", &tools],
        None,
        &[],
    );
    let err = out.fails(1);
    assert!(err.contains("does not fit the tools' schema (1 problem"), "{err}");
    assert!(
        out.stdout.contains("refund-limit") && out.stdout.contains("amount"),
        "the problem names the policy and the field: {}",
        out.stdout
    );
    let out = run(
        &[
            "--json",
            "policy",
            "check",
            &testdata("wrong_field.cedar"),
            "--tools",
            &tools,
        ],
        None,
        &[],
    );
    out.fails(1);
    let json: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(json["valid"], false);
    assert_eq!(json["problems"].as_array().unwrap().len(), 1);
}

#[test]
fn unparsable_policies_and_tools_are_bad_input() {
    let dir = TempDir::new("policy_bad");
    let tools = tools_file(&dir);
    let bad = dir.path.join("bad.cedar");
    std::fs::write(&bad, "permit(principal, action, resource) when { ;").unwrap();
    let out = run(
        &["policy", "check", bad.to_str().unwrap(), "--tools", &tools],
        None,
        &[],
    );
    assert!(out.fails(2).contains("do not parse"), "{out:?}");
    let out = run(
        &[
            "policy",
            "check",
            &testdata("shop.cedar"),
            "--tools",
            &testdata("shop.cedar"),
        ],
        None,
        &[],
    );
    assert!(out.fails(2).contains("toolkit.policy_tools()"), "{out:?}");
}

#[test]
fn schema_prints_the_tools() {
    let dir = TempDir::new("policy_schema");
    let tools = tools_file(&dir);
    let out = run(&["policy", "schema", "--tools", &tools], None, &[]);
    let text = out.ok();
    for part in [
        "issue_refund",
        "amount_cents",
        "call_without_approval",
        "Principal",
        "namespace Tool",
    ] {
        assert!(text.contains(part), "`{part}` in:\n{text}");
    }
    let out = run(&["--json", "policy", "schema", "--tools", &tools], None, &[]);
    let json = out.json();
    assert_eq!(
        json["Tool"]["entityTypes"]["issue_refund"]["shape"]["attributes"]["args"]["attributes"]["amount_cents"]["type"],
        "Long"
    );
}
