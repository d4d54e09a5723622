//! `effect-tool manifest FILE --check COMMITTED` as a CI step runs it: the real binary on two
//! manifest files rendered by the core, printing what each changed declaration does at run
//! time, riskiest first, as terminal text, Markdown for a pull-request comment, and JSON.

use crate::common;

use common::{TempDir, run};
use effect_tool_core::toolkit::manifest;
use effect_tool_core::{EffectClass, KeyRule, RetryPolicy, ToolMeta, Window};
use serde_json::json;
use std::time::Duration;

fn refund(class: EffectClass) -> ToolMeta {
    ToolMeta {
        name: "issue_refund",
        description: "Refund part of an order.",
        class,
        key_rule: KeyRule::Fields(&["order_id", "amount_cents"]),
        window: Window::CrossRun,
        shared_keys: false,
        ttl: Some(Duration::from_secs(24 * 3600)),
        timeout: Some(Duration::from_secs(30)),
        sensitive: &[],
        injected: &[],
        has_recover: true,
        has_compensate: false,
        approval: None,
        approval_when: None,
        open_world: None,
        retry: RetryPolicy::DEFAULT,
        costs: &[],
    }
}

fn email(approval: Option<&'static str>) -> ToolMeta {
    ToolMeta {
        name: "send_email",
        description: "Send an email.",
        class: EffectClass::Irreversible,
        key_rule: KeyRule::Fields(&["to", "subject"]),
        window: Window::Run,
        timeout: Some(Duration::from_secs(30)),
        approval,
        ..refund(EffectClass::Irreversible)
    }
}

/// The committed manifest and one printed after three changes: `issue_refund` irreversible →
/// idempotent, `send_email`'s approval removed and its timeout shortened.
struct Files {
    _dir: TempDir,
    committed: String,
    printed: String,
}

fn files() -> Files {
    let dir = TempDir::new("manifest_review");
    let committed = dir.path.join("tools.manifest");
    let printed = dir.path.join("printed.manifest");
    std::fs::write(
        &committed,
        manifest::render(&[refund(EffectClass::Irreversible), email(Some("comms"))]),
    )
    .unwrap();
    let shorter = ToolMeta {
        timeout: Some(Duration::from_secs(10)),
        ..email(None)
    };
    std::fs::write(&printed, manifest::render(&[refund(EffectClass::Idempotent), shorter])).unwrap();
    Files {
        committed: committed.to_str().unwrap().to_owned(),
        printed: printed.to_str().unwrap().to_owned(),
        _dir: dir,
    }
}

const HIGH_REFUND: &str = "`issue_refund`: irreversible → idempotent: the runtime will now retry it and re-run an \
                           unknown outcome with the same key; confirm the provider honours `Idempotency-Key`";
const HIGH_EMAIL: &str = "`send_email`: approval removed: calls now run without waiting for `comms` to approve them";
const MEDIUM_EMAIL: &str = "`send_email`: timeout shortened: 30s → 10s: a call still running after 10s is stopped and \
                            its outcome is unknown: `recover` is asked whether it landed; if it did not, it runs again; if `recover` fails, it waits for a person";

#[test]
fn check_says_what_each_change_does_riskiest_first() {
    let f = files();
    let out = run(&["manifest", &f.printed, "--check", &f.committed], None, &[]);
    let msg = out.fails(1);
    assert_eq!(
        msg,
        format!(
            "error: the manifest differs from {} in 4 lines (3 declaration changes: 2 high, 1 medium, 0 low risk): \
             review what each change does, then commit the new manifest",
            f.committed
        )
    );
    let review = format!(
        "3 declaration changes to review, riskiest first:\nhigh    {HIGH_REFUND}\nhigh    {HIGH_EMAIL}\nmedium  {MEDIUM_EMAIL}\n\n"
    );
    assert!(out.stdout.starts_with(&review), "{}", out.stdout);
    // Then the lines themselves, for the reviewer who wants them.
    let lines = &out.stdout[review.len()..];
    assert!(
        lines.starts_with(&format!(
            "--- {} (committed)\n+++ {}\n-issue_refund class=irreversible ",
            f.committed, f.printed
        )),
        "{lines}"
    );
    assert_eq!(lines.lines().count(), 6, "{lines}");
}

#[test]
fn markdown_is_a_pull_request_comment() {
    let f = files();
    let out = run(
        &["manifest", &f.printed, "--check", &f.committed, "--markdown"],
        None,
        &[],
    );
    out.fails(1);
    let table = "### effect-tool: 3 declaration changes to review (2 high, 1 medium, 0 low)\n\n\
         | risk | tool | change | at run time |\n|---|---|---|---|\n\
         | **high** | `issue_refund` | irreversible → idempotent | the runtime will now retry it and re-run an unknown \
         outcome with the same key; confirm the provider honours `Idempotency-Key` |\n\
         | **high** | `send_email` | approval removed | calls now run without waiting for `comms` to approve them |\n\
         | medium | `send_email` | timeout shortened: 30s → 10s | a call still running after 10s is stopped and its \
         outcome is unknown: `recover` is asked whether it landed; if it did not, it runs again; if `recover` fails, it waits for a person |\n\n\
         <details><summary>The manifest lines that differ</summary>\n\n```diff\n-issue_refund class=irreversible ";
    assert!(out.stdout.starts_with(table), "{}", out.stdout);
    assert!(out.stdout.ends_with("```\n\n</details>\n"), "{}", out.stdout);

    // Nothing changed: exit 0 and a comment that says so.
    let same = run(
        &["manifest", &f.committed, "--check", &f.committed, "--markdown"],
        None,
        &[],
    );
    assert_eq!(same.ok(), "### effect-tool: no declaration changed\n");
}

#[test]
fn json_has_stable_field_names() {
    let f = files();
    let out = run(&["manifest", &f.printed, "--check", &f.committed, "--json"], None, &[]);
    assert_eq!(out.code, 1, "{out:?}");
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["matches"], false);
    assert_eq!(v["diff"].as_array().unwrap().len(), 4);
    assert_eq!(v["counts"], json!({ "high": 2, "medium": 1, "low": 0 }));
    assert_eq!(
        v["changes"][0],
        json!({
            "tool": "issue_refund",
            "field": "class",
            "risk": "high",
            "before": "irreversible",
            "after": "idempotent",
            "summary": "irreversible → idempotent",
            "effect": "the runtime will now retry it and re-run an unknown outcome with the same key; \
                       confirm the provider honours `Idempotency-Key`",
        })
    );
    let fields: Vec<(&str, &str)> = v["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["tool"].as_str().unwrap(), c["field"].as_str().unwrap()))
        .collect();
    assert_eq!(
        fields,
        [
            ("issue_refund", "class"),
            ("send_email", "approval"),
            ("send_email", "timeout")
        ]
    );
    let same = run(
        &["manifest", &f.committed, "--check", &f.committed, "--json"],
        None,
        &[],
    )
    .json();
    assert_eq!(
        same,
        json!({ "matches": true, "diff": [], "changes": [], "counts": { "high": 0, "medium": 0, "low": 0 } })
    );
}

#[test]
fn exit_codes_and_bad_input() {
    let f = files();
    assert_eq!(
        run(&["manifest", &f.committed, "--check", &f.committed], None, &[]).ok(),
        format!("manifest matches {}\n", f.committed)
    );
    // --markdown needs --check, and is not --json: usage, exit 2.
    assert_eq!(run(&["manifest", &f.printed, "--markdown"], None, &[]).code, 2);
    assert!(
        run(
            &["manifest", &f.printed, "--check", &f.committed, "--markdown", "--json"],
            None,
            &[]
        )
        .fails(2)
        .contains("give --json or --markdown, not both")
    );
    // A tool line the review cannot read: usage, exit 2, naming the file and the line.
    std::fs::write(
        &f.printed,
        format!(
            "{}\nsend_email class=irreversibel key=default window=run\n",
            manifest::HEADER
        ),
    )
    .unwrap();
    assert_eq!(
        run(&["manifest", &f.printed, "--check", &f.committed], None, &[]).fails(2),
        format!(
            "error: cannot read the manifest `{}`: line 2: `send_email`: unknown effect class `irreversibel`: expected one \
             of pure, idempotent, compensable, irreversible (print it from your binary with \
             `effect_tool::toolkit::manifest::render(&toolkit.metas())`)",
            f.printed
        )
    );
    // Only a comment differs: exit 1, and the review says no declaration changed.
    let committed = std::fs::read_to_string(&f.committed).unwrap();
    std::fs::write(&f.printed, format!("{committed}# reviewed by ops\n")).unwrap();
    let out = run(&["manifest", &f.printed, "--check", &f.committed], None, &[]);
    assert!(out.fails(1).contains("(no declaration changed)"), "{out:?}");
    assert!(
        out.stdout
            .starts_with("no declaration changed; the manifest's text differs:\n--- "),
        "{out:?}"
    );
}
