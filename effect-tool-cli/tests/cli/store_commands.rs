//! The subcommands that read and write the journal (list, show, resolve, approve, deny,
//! abandon, gc), run as the real binary against a journal that this test process fills through
//! the core store API. Each scenario runs on SQLite and on PostgreSQL.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{Journal, intent, run};
use effect_tool_core::decide::record::OpOutcome;
use effect_tool_core::{
    DynTool, EffectClass, EffectCtx, Engine, RecordState, RunContext, StoreExt, Tool, ToolError, Verdict,
};
use serde_json::{Value, json};

common::on_every_backend!(
    list,
    show,
    resolve,
    amend,
    output_checked,
    approve_and_deny,
    approve_edited,
    abandon,
    gc,
    store_errors
);

async fn list(j: &Journal) {
    let run = j.run_id("r");
    let other = j.run_id("other");
    let doubt = j.key("send_email:aa");
    let parked = j.key("deploy:bb");
    let elsewhere = j.key("reserve:cc");
    j.in_doubt(&doubt, &run, "send_email", json!({"to": "a@b.c"})).await;
    j.awaiting(&parked, &run, "deploy", "release-manager").await;
    j.completed(
        &elsewhere,
        &other,
        "reserve",
        EffectClass::Compensable,
        json!({"id": 1}),
    )
    .await;

    let out = j.cli(&["list", "--run", &run]);
    let text = out.ok();
    let mut lines = text.lines();
    let header = lines.next().unwrap();
    assert!(header.starts_with("STATE"), "{text}");
    for col in ["TOOL", "CLASS", "RUN", "UPDATED", "KEY"] {
        assert!(header.contains(col), "{text}");
    }
    assert!(
        text.contains(&doubt) && text.contains(&parked) && !text.contains(&elsewhere),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("in-doubt") && l.contains("send_email") && l.contains("irreversible"))
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("awaiting-approval") && l.contains("deploy"))
    );
    assert!(text.ends_with("2 records\n"), "{text}");

    // One state, several states (comma-separated or repeated), a tool.
    let only_doubt = j.cli(&["list", "--run", &run, "--state", "in-doubt"]);
    assert!(only_doubt.ok().contains(&doubt) && !only_doubt.ok().contains(&parked));
    let both = j.cli(&["list", "--run", &run, "--state", "in-doubt,awaiting-approval"]);
    assert!(both.ok().contains(&doubt) && both.ok().contains(&parked));
    let repeated = j.cli(&["list", "--run", &run, "--state", "in-doubt", "--state", "completed"]);
    assert!(repeated.ok().contains(&doubt) && !repeated.ok().contains(&parked));
    let by_tool = j.cli(&["list", "--run", &run, "--tool", "deploy"]);
    assert!(by_tool.ok().contains(&parked) && !by_tool.ok().contains(&doubt));
    let none = j.cli(&["list", "--run", &run, "--state", "denied"]);
    assert_eq!(none.ok(), "no records match\n");
    // Pages: a full page says how to read the next one; the next one has the other record.
    let limited = j.cli(&["list", "--run", &run, "--limit", "1"]);
    let first = limited.ok();
    let next = first
        .lines()
        .last()
        .and_then(|l| l.strip_prefix("next page: the same command with --after "))
        .unwrap_or_else(|| panic!("no next page: {first}"));
    assert!(first.contains("1 record\n"), "{first}");
    let cursor = next.trim_matches('\'');
    let second = j.cli(&["list", "--run", &run, "--limit", "1", "--after", cursor]);
    let second = second.ok();
    let shown = |text: &str| [&doubt, &parked].iter().filter(|k| text.contains(k.as_str())).count();
    assert_eq!((shown(first), shown(second)), (1, 1), "{first}{second}");
    assert_ne!(first.contains(&doubt), second.contains(&doubt), "{first}{second}");
    let last = j.cli(&["list", "--run", &run, "--limit", "2", "--after", cursor]);
    assert!(
        last.ok().ends_with("1 record\n"),
        "a page not full is the last: {last:?}"
    );
    // A time range: updated within the hour; before 1970-01-02 nothing.
    assert!(
        j.cli(&["list", "--run", &run, "--since", "1h"])
            .ok()
            .ends_with("2 records\n")
    );
    let old = j.cli(&["list", "--run", &run, "--before", "1970-01-02T00:00:00Z"]);
    assert_eq!(old.ok(), "no records match\n");
    let future = j.cli(&["list", "--run", &run, "--since", "2999-01-01T00:00:00Z"]);
    assert_eq!(future.ok(), "no records match\n");

    // JSON for scripts: the records in the stored schema.
    let json = j.cli(&["list", "--run", &run, "--json"]).json();
    let records = json.as_array().unwrap();
    assert_eq!(records.len(), 2);
    let states: Vec<&str> = records.iter().map(|r| r["state"].as_str().unwrap()).collect();
    assert!(states.contains(&"in-doubt") && states.contains(&"awaiting-approval"));
    assert!(records.iter().all(|r| r["run_id"] == run.as_str() && r["version"] == 1));

    // A claim whose lease expired (its worker died) shows as stale and is found by `stale`.
    let crashed = j.key("charge:dd");
    match j
        .store
        .claim(
            &crashed,
            intent(&run, "charge", EffectClass::Irreversible, json!({}), None),
            0,
            false,
        )
        .await
        .unwrap()
    {
        OpOutcome::Claimed { .. } => {}
        other => panic!("{other:?}"),
    }
    let stale = j.cli(&["list", "--run", &run, "--state", "stale"]);
    assert!(
        stale.ok().contains(&crashed) && stale.ok().contains("claimed (stale)"),
        "{stale:?}"
    );
    assert!(!stale.ok().contains(&doubt));

    // Bad input: one line, exit 2.
    let bad = j.cli(&["list", "--state", "doubtful"]);
    assert_eq!(bad.code, 2, "{bad:?}");
    assert!(bad.stderr.contains("awaiting-approval") && !bad.stderr.contains("panicked"));
}

async fn show(j: &Journal) {
    let run = j.run_id("r");
    let key = j.key("send_email:aa");
    j.in_doubt(&key, &run, "send_email", json!({"to": "a@b.c", "subject": "Invoice"}))
        .await;
    // An attempt of another process that lost its claim (audited on its own).
    j.store
        .append_audit(effect_tool_core::decide::record::claim_lost_entry(
            &key,
            1,
            Some(2),
            true,
            0,
        ))
        .await
        .unwrap();

    let out = j.cli(&["show", &key]);
    let text = out.ok();
    for expected in [
        format!("key:         {key}"),
        "tool:        send_email (irreversible)".to_owned(),
        "state:       in-doubt".to_owned(),
        "reason:      timed out after sending the request".to_owned(),
        format!("run:         {run}"),
        // Who held the claim.
        "claimed by:  worker w1, instance 0123abcd on host-1 (pid 42)".to_owned(),
        "input (secrets removed):".to_owned(),
        r#""to": "a@b.c""#.to_owned(),
        // The engine's decision, with its attempt and cause.
        "effect-tool in-doubt    attempt 1 ended with an unknown outcome: timed out after sending the request"
            .to_owned(),
        "effect-tool claim-lost  attempt 1 lost its claim to attempt 2: its tool had returned, and its result was not recorded"
            .to_owned(),
        format!("effect-tool resolve {key} --applied --output '<json>'"),
        format!("effect-tool resolve {key} --not-applied"),
    ] {
        assert!(text.contains(&expected), "missing `{expected}` in:\n{text}");
    }

    let json = j.cli(&["show", &key, "--json"]).json();
    assert_eq!(json["record"]["key"], key.as_str());
    assert_eq!(json["record"]["state"], "in-doubt");
    assert_eq!(json["audit"][0]["action"], "in-doubt");
    assert_eq!(json["audit"][0]["detail"]["attempt"], 1);

    // After a resolution the audit trail shows who did what.
    j.store
        .resolve(
            &key,
            "alice",
            Verdict::Applied {
                output: json!({"id": "msg-9"}),
            },
        )
        .await
        .unwrap();
    let after = j.cli(&["show", &key]);
    let text = after.ok();
    assert!(text.contains("state:       completed"), "{text}");
    assert!(text.contains("output:\n  {\n    \"id\": \"msg-9\"\n  }"), "{text}");
    let audit_line = text
        .lines()
        .find(|l| l.starts_with("  ") && l.contains("alice"))
        .expect(text);
    assert!(audit_line.contains("resolve") && audit_line.contains(r#"as applied, output {"id":"msg-9"}"#));
    assert!(!text.contains("next:"), "nothing left to do: {text}");
    let json = j.cli(&["show", &key, "--json"]).json();
    assert_eq!(json["audit"][2]["actor"], "alice");

    // A parked call says how to approve or deny it.
    let parked = j.key("deploy:bb");
    j.awaiting(&parked, &run, "deploy", "release-manager").await;
    let text = j.cli(&["show", &parked]).ok().to_owned();
    assert!(
        text.contains(&format!(
            "effect-tool approve {parked} --as release-manager --fingerprint "
        )),
        "{text}"
    );
    assert!(text.contains("approval:    by role `release-manager`"), "{text}");

    // Unknown key: exit 1, one line naming the key.
    let missing = j.cli(&["show", &j.key("nope")]);
    let msg = missing.fails(1);
    assert!(
        msg.contains("no record under key") && msg.contains(&j.key("nope")),
        "{msg}"
    );

    // Text written by a tool cannot act on the operator's terminal.
    let hostile = j.key("evil\u{1b}[2J\nline");
    j.in_doubt(&hostile, &run, "t\u{7}", json!({"x": "\u{1b}]0;pwned\u{7}"}))
        .await;
    let out = j.cli(&["show", &hostile]);
    assert!(!out.ok().contains('\u{1b}') && !out.ok().contains('\u{7}'), "{out:?}");
    let listed = j.cli(&["list", "--run", &run]);
    assert!(!listed.ok().contains('\u{1b}'), "{listed:?}");
    assert!(listed.ok().contains("evil\\u{1b}[2J\\nline"), "{listed:?}");
}

async fn resolve(j: &Journal) {
    let run = j.run_id("r");
    let applied = j.key("send_email:aa");
    let not_applied = j.key("send_email:bb");
    let from_stdin = j.key("send_email:cc");
    for k in [&applied, &not_applied, &from_stdin] {
        j.in_doubt(k, &run, "send_email", json!({"to": k})).await;
    }

    // Invalid JSON output: exit 2, one line, and the record is untouched.
    let bad = j.cli(&["resolve", &applied, "--applied", "--output", "{id: 1"]);
    assert!(bad.fails(2).contains("--output is not valid JSON"), "{bad:?}");
    let dup = j.cli(&["resolve", &applied, "--applied", "--output", r#"{"a":1,"a":2}"#]);
    assert!(dup.fails(2).contains("duplicate member name"), "{dup:?}");
    assert_eq!(j.get(&applied).await.unwrap().state, RecordState::InDoubt);

    // --applied without the output is refused: a forgotten output cannot be fixed later.
    let no_output = j.cli(&["resolve", &applied, "--applied"]);
    assert!(no_output.fails(2).contains("--applied needs --output"), "{no_output:?}");
    assert_eq!(j.get(&applied).await.unwrap().state, RecordState::InDoubt);

    // A verdict is required, and only one.
    assert_eq!(j.cli(&["resolve", &applied]).code, 2);
    assert_eq!(j.cli(&["resolve", &applied, "--applied", "--not-applied"]).code, 2);
    assert_eq!(j.cli(&["resolve", &applied, "--not-applied", "--output", "1"]).code, 2);

    // Applied, with its output; `--by` defaults to $USER.
    let out = j.cli(&["resolve", &applied, "--applied", "--output", r#"{"id": "msg-1"}"#]);
    assert_eq!(
        out.ok(),
        format!(
            "resolved {applied} as applied (by operator): the next call of send_email returns the recorded output without running\n"
        )
    );
    let rec = j.get(&applied).await.unwrap();
    assert_eq!(rec.state, RecordState::Completed);
    assert_eq!(rec.output, Some(json!({"id": "msg-1"})));
    assert_eq!(rec.decided_by.as_deref(), Some("operator"));
    let audit = j.store.audit(Some(&applied)).await.unwrap();
    let trail: Vec<(&str, &str)> = audit.iter().map(|a| (a.actor.as_str(), a.action.as_str())).collect();
    assert_eq!(trail, [("effect-tool", "in-doubt"), ("operator", "resolve")]);

    // Resolving again is refused (exit 1), names the flag that corrects it, and changes nothing.
    let again = j.cli(&["resolve", &applied, "--not-applied"]);
    assert!(again.fails(1).contains("cannot resolve"), "{again:?}");
    assert!(
        again
            .fails(1)
            .contains(&format!("effect-tool resolve {applied} --not-applied --amend")),
        "{again:?}"
    );
    assert_eq!(j.get(&applied).await.unwrap().state, RecordState::Completed);
    assert_eq!(j.store.audit(Some(&applied)).await.unwrap().len(), 2, "nothing added");

    // Not applied, by someone named.
    let json = j
        .cli(&["resolve", &not_applied, "--not-applied", "--by", "alice", "--json"])
        .json();
    assert_eq!(json["state"], "released");
    assert_eq!(json["decided_by"], "alice");
    assert_eq!(j.get(&not_applied).await.unwrap().state, RecordState::Released);

    // The output from stdin.
    let out = j.cli_with(
        &["resolve", &from_stdin, "--applied", "--output", "-"],
        Some(b"[1, 2.50]"),
    );
    out.ok();
    assert_eq!(j.get(&from_stdin).await.unwrap().output, Some(json!([1, 2.5])));

    // Unknown key: exit 1.
    assert!(
        j.cli(&["resolve", &j.key("nope"), "--not-applied"])
            .fails(1)
            .contains("no record under key")
    );

    // Nobody to put in the audit trail: exit 2.
    let other = j.key("send_email:dd");
    j.in_doubt(&other, &run, "send_email", json!({})).await;
    let mut args = vec!["--store", j.spec.as_str(), "resolve", other.as_str(), "--not-applied"];
    let anonymous = run_without_user(&args);
    assert!(anonymous.fails(2).contains("--by"), "{anonymous:?}");
    args.push("--by");
    args.push("bob");
    assert_eq!(run_without_user(&args).code, 0);
}

/// A person corrects their own resolution with `--amend`; a plain resolve says so; the tool's
/// own output and a record nobody resolved cannot be amended.
async fn amend(j: &Journal) {
    let run = j.run_id("r");
    let typo = j.key("send_email:aa");
    let unresolved = j.key("send_email:bb");
    let by_tool = j.key("send_email:cc");
    for k in [&typo, &unresolved] {
        j.in_doubt(k, &run, "send_email", json!({"to": k})).await;
    }
    j.completed(
        &by_tool,
        &run,
        "send_email",
        EffectClass::Irreversible,
        json!({"id": "msg-3"}),
    )
    .await;

    let help = common::run(&["resolve", "--help"], None, &[]);
    assert!(help.ok().contains("--amend"), "{help:?}");
    assert!(help.ok().contains("Correct a person's earlier resolution"), "{help:?}");

    // The output has the wrong shape (a string, where the tool returns an object).
    j.cli(&["resolve", &typo, "--applied", "--output", r#""msg-1""#]).ok();
    let again = j.cli(&["resolve", &typo, "--applied", "--output", r#"{"id": "msg-1"}"#]);
    let msg = again.fails(1);
    assert!(msg.contains("operator resolved it as applied"), "{msg}");
    assert!(
        msg.contains(&format!(
            "effect-tool resolve {typo} --applied --output '<json>' --amend"
        )),
        "{msg}"
    );
    assert!(
        msg.contains(&format!("effect-tool resolve {typo} --not-applied --amend")),
        "{msg}"
    );
    assert_eq!(j.get(&typo).await.unwrap().output, Some(json!("msg-1")));
    let shown = j.cli(&["show", &typo]);
    assert!(
        shown.ok().contains(&format!(
            "if the resolution by operator was wrong, correct it (until the next call runs it):\n  effect-tool resolve {typo} --applied --output '<json>' --amend\n"
        )),
        "{shown:?}"
    );

    let out = j.cli(&[
        "resolve",
        &typo,
        "--applied",
        "--output",
        r#"{"id": "msg-1"}"#,
        "--amend",
        "--by",
        "alice",
    ]);
    assert_eq!(
        out.ok(),
        format!(
            "amended the resolution of {typo} as applied (by alice): the next call of send_email returns the recorded output without running\n"
        )
    );
    let rec = j.get(&typo).await.unwrap();
    assert_eq!(
        (rec.state, rec.output, rec.decided_by.as_deref()),
        (RecordState::Completed, Some(json!({"id": "msg-1"})), Some("alice"))
    );

    // It was not sent after all: --not-applied --amend, as JSON.
    let json = j.cli(&["resolve", &typo, "--not-applied", "--amend", "--json"]).json();
    assert_eq!(
        (&json["state"], &json["decided_by"]),
        (&json!("released"), &json!("operator"))
    );
    let trail: Vec<(String, String)> = j
        .store
        .audit(Some(&typo))
        .await
        .unwrap()
        .into_iter()
        .map(|a| (a.actor, a.action))
        .collect();
    let expected = [
        ("effect-tool", "in-doubt"),
        ("operator", "resolve"),
        ("alice", "amend"),
        ("operator", "amend"),
    ];
    assert_eq!(trail, expected.map(|(a, b)| (a.to_owned(), b.to_owned())));
    let shown = j.cli(&["show", &typo]);
    let amended = shown
        .ok()
        .lines()
        .find(|l| l.contains("alice") && l.contains("amend"))
        .unwrap_or_else(|| panic!("{shown:?}"));
    assert!(amended.contains(r#"as applied, output {"id":"msg-1"}"#), "{amended}");

    // Nobody resolved it yet: resolve it, do not amend.
    let msg = j.cli(&["resolve", &unresolved, "--not-applied", "--amend"]);
    assert!(msg.fails(1).contains("nothing to amend"), "{msg:?}");
    assert!(
        msg.fails(1)
            .contains(&format!("effect-tool resolve {unresolved} --not-applied`")),
        "{msg:?}"
    );
    assert_eq!(j.get(&unresolved).await.unwrap().state, RecordState::InDoubt);

    // What the tool recorded is never overwritten by a person, and the refusal offers no amend.
    for args in [
        vec!["resolve", by_tool.as_str(), "--not-applied", "--amend"],
        vec!["resolve", by_tool.as_str(), "--applied", "--output", "1", "--amend"],
        vec!["resolve", by_tool.as_str(), "--not-applied"],
    ] {
        let out = j.cli(&args);
        let msg = out.fails(1);
        assert!(msg.contains("the tool recorded its output itself"), "{msg}");
        assert!(!msg.contains("--amend"), "{msg}");
    }
    assert_eq!(j.get(&by_tool).await.unwrap().output, Some(json!({"id": "msg-3"})));
    assert!(j.store.audit(Some(&by_tool)).await.unwrap().is_empty());

    // --amend still needs exactly one verdict, and --applied its output.
    assert_eq!(j.cli(&["resolve", &typo, "--amend"]).code, 2);
    assert!(
        j.cli(&["resolve", &typo, "--applied", "--amend"])
            .fails(2)
            .contains("--applied needs --output")
    );
}

/// A fresh call parked for a release manager.
async fn stale_free(j: &Journal, run: &str) -> String {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let key = j.key(&format!("deploy:asked-{}", N.fetch_add(1, Ordering::SeqCst)));
    j.awaiting(&key, run, "deploy", "release-manager").await;
    key
}

/// Run `effect-tool --store <journal> ARGS` with a terminal as stdin (through `script`), typing
/// `answer`; what the terminal showed. `None` (skipped, said) where `script` is missing.
fn on_a_terminal(j: &Journal, args: &[&str], answer: &str) -> Option<String> {
    use std::io::Write;
    let mut line = vec![
        env!("CARGO_BIN_EXE_effect-tool").to_owned(),
        "--store".into(),
        j.spec.clone(),
    ];
    line.extend(args.iter().map(|a| (*a).to_owned()));
    let quoted: Vec<String> = line.iter().map(|a| format!("'{}'", a.replace('\'', r"'\''"))).collect();
    let child = std::process::Command::new("script")
        .args(["-qec", &quoted.join(" "), "/dev/null"])
        .env("USER", "operator")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn();
    let Ok(mut child) = child else {
        eprintln!("SKIPPED: the terminal case needs `script` (util-linux)");
        return None;
    };
    child.stdin.take().unwrap().write_all(answer.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn run_without_user(args: &[&str]) -> common::Output {
    run(args, None, &[("USER", "")])
}

/// `approve --edit`: the fields to change over the parked input, shown before and checked
/// against the tool's parameters; the journal keeps the edit (run by the next call) and the
/// trail names who edited.
async fn approve_edited(j: &Journal) {
    let run = j.run_id("r");
    let deploy = j.key("deploy:ed");
    j.awaiting(&deploy, &run, "deploy", "release-manager").await;
    j.store
        .put_input_schema(
            "deploy",
            &json!({"type": "object", "properties": {"env": {"enum": ["prod", "staging"]}}, "required": ["env"]}),
        )
        .await
        .unwrap();
    let parked = j.get(&deploy).await.unwrap();
    let fp = &parked.fingerprint[..16];
    let approve = |edit: &str| {
        j.cli(&[
            "approve",
            &deploy,
            "--as",
            "release-manager",
            "--by",
            "carol",
            "--fingerprint",
            fp,
            "--edit",
            edit,
        ])
    };
    // Not JSON, not an object, not the tool's parameters: refused, nothing approved.
    assert!(approve("{env: staging").fails(2).contains("--edit is not JSON"));
    assert!(approve("[1]").fails(2).contains("not a JSON object"));
    let wrong = approve(r#"{"env": "moon"}"#);
    assert!(
        wrong.fails(1).contains("do not match the tool's parameters"),
        "{wrong:?}"
    );
    assert_eq!(j.get(&deploy).await.unwrap().state, RecordState::AwaitingApproval);

    let out = approve(r#"{"env": "staging"}"#);
    let text = out.ok();
    assert!(
        text.contains(r#"env: "prod" -> "staging""#),
        "the edit is shown: {text}"
    );
    assert!(
        text.contains("with edited arguments (changed: env): the next call of deploy runs the edited call, once"),
        "{text}"
    );
    let rec = j.get(&deploy).await.unwrap();
    assert_eq!(rec.state, RecordState::Approved);
    assert_eq!(rec.input, json!({"env": "prod"}), "the record keeps the input shown");
    let edit = rec.approved_edit().unwrap();
    assert_eq!(
        (edit.input, edit.changed, edit.by),
        (json!({"env": "staging"}), vec!["env".to_owned()], "carol".to_owned())
    );
    let trail = j.store.audit(Some(&deploy)).await.unwrap();
    assert_eq!(
        (trail[0].actor.as_str(), trail[0].action.as_str()),
        ("carol", "approve-edited")
    );
}

async fn approve_and_deny(j: &Journal) {
    let run = j.run_id("r");
    let deploy = j.key("deploy:aa");
    let wire = j.key("wire:bb");
    j.awaiting(&deploy, &run, "deploy", "release-manager").await;
    j.awaiting(&wire, &run, "wire", "finance").await;

    // The wrong role is refused.
    let wrong = j.cli(&["approve", &deploy, "--as", "intern"]);
    assert!(
        wrong.fails(1).contains("needs approval by `release-manager`"),
        "{wrong:?}"
    );
    assert_eq!(j.get(&deploy).await.unwrap().state, RecordState::AwaitingApproval);
    // `--as` is required.
    assert_eq!(j.cli(&["approve", &deploy]).code, 2);

    // An approval names the input it is for: without --fingerprint and with no terminal to
    // ask on, the input is shown and nothing is approved.
    let parked = j.get(&deploy).await.unwrap();
    let blind = j.cli(&["approve", &deploy, "--as", "release-manager", "--by", "carol"]);
    let msg = blind.fails(2);
    assert!(
        msg.contains("not approved") && msg.contains(&format!("--fingerprint {}", &parked.fingerprint[..16])),
        "{msg}"
    );
    assert!(
        blind.stdout.contains(r#""env": "prod""#) && blind.stdout.contains(&parked.fingerprint),
        "the input is shown: {blind:?}"
    );
    // A prefix too short to name one input (a model could match it), or not hex: refused.
    let short = j.cli(&[
        "approve",
        &deploy,
        "--as",
        "release-manager",
        "--fingerprint",
        &parked.fingerprint[..8],
    ]);
    assert!(short.fails(2).contains("too short"), "{short:?}");
    assert!(
        j.cli(&[
            "approve",
            &deploy,
            "--as",
            "release-manager",
            "--fingerprint",
            "not-hex-at-all-xyz"
        ])
        .fails(2)
        .contains("not hex")
    );
    assert_eq!(j.get(&deploy).await.unwrap().state, RecordState::AwaitingApproval);

    let out = j.cli(&[
        "approve",
        &deploy,
        "--as",
        "release-manager",
        "--by",
        "carol",
        "--fingerprint",
        &parked.fingerprint[..16],
    ]);
    let text = out.ok();
    assert!(text.contains(r#""env": "prod""#), "the input approved is shown: {text}");
    assert!(
        text.ends_with(&format!(
            "approved {deploy} as release-manager (by carol): the next call of deploy runs it\n"
        )),
        "{text}"
    );
    let rec = j.get(&deploy).await.unwrap();
    assert_eq!(rec.state, RecordState::Approved);
    assert_eq!(rec.decided_by.as_deref(), Some("carol"));
    let audit = j.store.audit(Some(&deploy)).await.unwrap();
    assert_eq!(audit.len(), 1);
    // The approval names the input it was given for.
    assert_eq!(
        audit[0].detail,
        Some(json!({"role": "release-manager", "fingerprint": rec.fingerprint}))
    );
    // Twice is refused.
    assert!(
        j.cli(&["approve", &deploy, "--as", "release-manager"])
            .fails(1)
            .contains("cannot approve")
    );

    // Four eyes, as in the console: a call of principal carol's run (as the MCP server
    // scopes it) is not approved or denied by carol.
    let own = j.key("deploy:own");
    let mine = j.awaiting(&own, "carol/r1", "deploy", "release-manager").await;
    let refused = j.cli(&[
        "approve",
        &own,
        "--as",
        "release-manager",
        "--by",
        "carol",
        "--fingerprint",
        &mine.fingerprint,
    ]);
    assert!(refused.fails(1).contains("four eyes"), "{refused:?}");
    let refused = j.cli(&["deny", &own, "--by", "carol"]);
    assert!(refused.fails(1).contains("four eyes"), "{refused:?}");
    assert_eq!(j.get(&own).await.unwrap().state, RecordState::AwaitingApproval);
    j.cli(&[
        "approve",
        &own,
        "--as",
        "release-manager",
        "--by",
        "rita",
        "--fingerprint",
        &mine.fingerprint,
    ])
    .ok();

    // On a terminal, without --fingerprint, it shows the input and asks; only yes approves.
    if let Some(asked) = on_a_terminal(
        j,
        &[
            "approve",
            &stale_free(j, &run).await,
            "--as",
            "release-manager",
            "--by",
            "ann",
        ],
        "n\n",
    ) {
        assert!(
            asked.contains("approve this input as `release-manager`? [y/N]"),
            "{asked}"
        );
        assert!(asked.contains("not approved"), "{asked}");
    }
    let key = stale_free(j, &run).await;
    if let Some(asked) = on_a_terminal(j, &["approve", &key, "--as", "release-manager", "--by", "ann"], "y\n") {
        assert!(
            asked.contains(r#""env": "prod""#) && asked.contains("approved "),
            "{asked}"
        );
        assert_eq!(j.get(&key).await.unwrap().state, RecordState::Approved);
    }

    // Someone approved a call; the model called its key again with another input (the
    // approval voided, the new input parked). A person approving the input they saw is
    // refused, and shown the new input.
    let stale = j.key("deploy:stale");
    let seen = j.awaiting(&stale, &run, "deploy", "release-manager").await;
    j.store
        .approve(&stale, "rita", "release-manager", &seen.fingerprint)
        .await
        .unwrap();
    let other = common::intent(
        &run,
        "deploy",
        EffectClass::Irreversible,
        json!({"env": "everywhere"}),
        Some("release-manager"),
    );
    assert!(matches!(
        j.store.claim(&stale, other, 60_000, false).await.unwrap(),
        OpOutcome::AwaitingApproval(_)
    ));
    let refused = j.cli(&[
        "approve",
        &stale,
        "--as",
        "release-manager",
        "--fingerprint",
        &seen.fingerprint,
    ]);
    let msg = refused.fails(1);
    assert!(msg.contains("input changed") && msg.contains("everywhere"), "{msg}");
    assert_eq!(j.get(&stale).await.unwrap().state, RecordState::AwaitingApproval);

    // Deny with a reason, as JSON.
    let json = j
        .cli(&["deny", &wire, "--reason", "amount above the monthly limit", "--json"])
        .json();
    assert_eq!(json["state"], "denied");
    assert_eq!(json["reason"], "amount above the monthly limit");
    assert_eq!(json["decided_by"], "operator");
    // Denying what is not awaiting approval is refused.
    assert!(j.cli(&["deny", &deploy]).fails(1).contains("cannot deny"));
    assert!(
        j.cli(&["deny", &j.key("nope")])
            .fails(1)
            .contains("no record under key")
    );
    assert!(
        j.cli(&["approve", &j.key("nope"), "--as", "x"])
            .fails(1)
            .contains("no record under key")
    );

    // Human output of deny.
    let third = j.key("wire:cc");
    j.awaiting(&third, &run, "wire", "finance").await;
    assert_eq!(
        j.cli(&["deny", &third]).ok(),
        format!("denied {third} (by operator): the next call of wire fails with the reason, and nothing runs\n")
    );
}

/// A compensable tool that counts its compensations in a ledger the engine cannot see.
struct Reserve {
    undone: Arc<AtomicUsize>,
}

impl Tool for Reserve {
    type Args = String;
    type Output = String;
    type Error = ToolError;
    const NAME: &'static str = "reserve";
    const CLASS: EffectClass = EffectClass::Compensable;
    const HAS_COMPENSATE: bool = true;

    async fn call(&self, _ctx: &EffectCtx, args: String) -> Result<String, ToolError> {
        Ok(args)
    }

    async fn compensate(&self, _ctx: &EffectCtx, _args: &String, _output: &String) -> Result<(), ToolError> {
        self.undone.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

async fn abandon(j: &Journal) {
    let run = j.run_id("r");
    let keys: Vec<String> = (1..=3).map(|i| j.key(&format!("reserve:{i}"))).collect();
    for k in &keys {
        j.completed(k, &run, "reserve", EffectClass::Compensable, json!(k))
            .await;
        // Distinct update times, so "newest first" has one answer.
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let sent = j.key("send_email:x");
    j.completed(&sent, &run, "send_email", EffectClass::Irreversible, json!("sent"))
        .await;

    // What must be undone, newest first; nothing is changed.
    let out = j.cli(&["abandon", &run]);
    let text = out.ok();
    assert!(text.starts_with(&format!(
        "run {run}: 3 completed compensable effects to undo, newest first:\n"
    )));
    let pos: Vec<usize> = keys.iter().map(|k| text.find(k.as_str()).expect(text)).collect();
    assert!(pos[2] < pos[1] && pos[1] < pos[0], "newest first:\n{text}");
    assert!(
        !text.contains(&sent),
        "irreversible effects are not compensated:\n{text}"
    );
    assert!(text.contains("not started"), "{text}");
    assert!(
        text.contains("engine.abandon_run") && text.contains("--mark-compensated"),
        "{text}"
    );
    for k in &keys {
        assert_eq!(j.get(k).await.unwrap().state, RecordState::Completed);
    }
    let json = j.cli(&["abandon", &run, "--json"]).json();
    let listed: Vec<&str> = json["to_compensate"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["key"].as_str().unwrap())
        .collect();
    assert_eq!(listed, vec![keys[2].as_str(), keys[1].as_str(), keys[0].as_str()]);

    // Undone by hand: journal it, so the application never runs the compensation again.
    let out = j.cli(&["abandon", &run, "--mark-compensated", "--by", "dave"]);
    assert_eq!(out.ok().lines().count(), 3, "{out:?}");
    for k in &keys {
        let rec = j.get(k).await.unwrap();
        assert_eq!(rec.state, RecordState::Compensated);
        assert_eq!(rec.decided_by.as_deref(), Some("dave"));
        let comp = j.get(&effect_tool_core::__cli::compensation_key(k)).await.unwrap();
        assert_eq!(comp.state, RecordState::Completed);
        let audit = j.store.audit(Some(k)).await.unwrap();
        assert_eq!(
            (audit[0].actor.as_str(), audit[0].action.as_str()),
            ("dave", "compensate")
        );
    }
    // The application abandoning the run afterwards runs no compensation (external count).
    let undone = Arc::new(AtomicUsize::new(0));
    let tools: Vec<Arc<dyn DynTool>> = vec![Arc::new(Reserve { undone: undone.clone() })];
    let engine = Engine::new(j.store.clone());
    let report = engine.abandon_run(&RunContext::new(run.clone()), &tools).await.unwrap();
    assert_eq!(undone.load(Ordering::SeqCst), 0, "{report:?}");
    assert!(report.compensated.is_empty() && report.failed.is_empty(), "{report:?}");

    let again = j.cli(&["abandon", &run]);
    assert!(
        again.ok().starts_with(&format!("run {run}: nothing to compensate")) && again.ok().contains("3 already"),
        "{again:?}"
    );
    let unknown = j.cli(&["abandon", &j.run_id("never")]);
    assert!(unknown.fails(1).contains("no records for run"), "{unknown:?}");
}

async fn gc(j: &Journal) {
    let run = j.run_id("r");
    let expired = j.key("lookup:expired");
    let expired_in_doubt = j.key("charge:expired-in-doubt");
    let kept = j.key("lookup:kept");
    let with_ttl = |tool: &str, class| {
        let mut i = intent(&run, tool, class, json!({}), None);
        i.ttl_ms = Some(1);
        i
    };
    for (k, class) in [
        (&expired, EffectClass::Idempotent),
        (&expired_in_doubt, EffectClass::Irreversible),
    ] {
        let attempt = match j.store.claim(k, with_ttl("t", class), 60_000, false).await.unwrap() {
            OpOutcome::Claimed { attempt, .. } => attempt,
            other => panic!("{other:?}"),
        };
        if class == EffectClass::Irreversible {
            j.store.mark_in_doubt(k, attempt, "unknown".into()).await.unwrap();
        } else {
            j.store.complete(k, attempt, json!(1)).await.unwrap();
        }
    }
    j.completed(&kept, &run, "lookup", EffectClass::Idempotent, json!(2))
        .await;
    // Let the 1 ms ttl pass.
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;

    let dry = j.cli(&["gc", "--dry-run"]);
    assert!(dry.ok().starts_with("would drop "), "{dry:?}");
    assert!(dry.ok().contains(&expired), "{dry:?}");
    assert!(
        !dry.ok().contains(&expired_in_doubt) && !dry.ok().contains(&kept),
        "{dry:?}"
    );
    assert!(j.get(&expired).await.is_some(), "a dry run drops nothing");
    let dry_json = j.cli(&["gc", "--dry-run", "--json"]).json();
    assert!(dry_json["would_drop"].as_array().unwrap().contains(&json!(expired)));

    let json = j.cli(&["gc", "--json"]).json();
    assert!(json["dropped"].as_u64().unwrap() >= 1, "{json}");
    assert!(j.get(&expired).await.is_none());
    assert!(j.get(&expired_in_doubt).await.is_some(), "a person still needs it");
    assert!(j.get(&kept).await.is_some());
    let text = j.cli(&["gc"]);
    assert!(text.ok().starts_with("dropped "), "{text:?}");
}

async fn store_errors(j: &Journal) {
    // The store from the environment.
    let run_id = j.run_id("r");
    let k = j.key("t:1");
    j.in_doubt(&k, &run_id, "t", json!({})).await;
    let out = run(&["list", "--run", &run_id], None, &[("EFFECT_TOOL_STORE", &j.spec)]);
    assert!(out.ok().contains(&k), "{out:?}");

    // No store at all: usage, exit 2.
    let none = run(&["list"], None, &[]);
    assert!(none.fails(2).contains("EFFECT_TOOL_STORE"), "{none:?}");

    // A SQLite file that does not exist is not created: exit 3.
    let dir = common::TempDir::new("missing");
    let missing = dir.path.join("typo.db");
    let out = run(&["--store", missing.to_str().unwrap(), "list"], None, &[]);
    assert!(out.fails(3).contains("no SQLite journal at"), "{out:?}");
    assert!(!missing.exists(), "a typo must not create a journal");

    // A file that is not a journal: exit 3, one line.
    let junk = dir.path.join("junk.db");
    std::fs::write(
        &junk,
        b"this is not a database, just some text that is long enough to look like a header",
    )
    .unwrap();
    let out = run(&["--store", junk.to_str().unwrap(), "show", "k"], None, &[]);
    out.fails(3);

    // An unreachable PostgreSQL server: exit 3, one line, the password never printed.
    let out = run(
        &[
            "--store",
            "postgres://admin:hunter2@127.0.0.1:1/journal?connect_timeout=2",
            "list",
        ],
        None,
        &[],
    );
    let msg = out.fails(3);
    assert!(!msg.contains("hunter2") && !out.stdout.contains("hunter2"), "{out:?}");
}

/// A row the CLI cannot read (corrupt JSON, as a bad disk or a hand edit leaves it) is skipped
/// by `list` and `gc --dry-run`, which name it, instead of failing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_name_the_rows_they_skip() {
    let j = Journal::sqlite("lists_skip");
    let run = j.run_id("r");
    let good = j.key("good");
    j.completed(&good, &run, "lookup", EffectClass::Idempotent, json!(1))
        .await;
    let conn = rusqlite::Connection::open(&j.spec).unwrap();
    conn.busy_timeout(std::time::Duration::from_secs(10)).unwrap();
    conn.execute(
        "INSERT INTO effect_records (key, version, tool, class, run_id, fingerprint, input, state, attempt, created_at, updated_at)
           VALUES ('broken-row', 1, 't', 'idempotent', ?1, 'f', '{not json', 'completed', 1, 0, 0)",
        [&run],
    )
    .unwrap();

    let list = j.cli(&["list"]);
    let text = list.ok();
    assert!(text.contains(&good), "{text}");
    assert!(text.contains("skipped 1 record this effect-tool cannot read"), "{text}");
    assert!(text.contains("  broken-row: "), "{text}");
    let listed = j.cli(&["list", "--json"]);
    let records: Value = serde_json::from_str(&listed.stdout).expect("stdout is the JSON list");
    assert_eq!(records.as_array().map(Vec::len), Some(1), "{listed:?}");
    assert!(listed.stderr.contains("broken-row"), "{listed:?}");
    let dry = j.cli(&["gc", "--dry-run"]);
    assert!(dry.ok().contains("  broken-row: "), "{dry:?}");
    let dry_json = j.cli(&["gc", "--dry-run", "--json"]).json();
    assert_eq!(dry_json["skipped"], json!(["broken-row"]));
}

/// What [`Mail`] returns: an object.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
struct Sent {
    id: String,
}

/// An irreversible tool whose call times out after sending: the record goes in doubt. It
/// declares its output's schema, as `#[tool]` does for an output that implements `JsonSchema`.
struct Mail;

impl Tool for Mail {
    type Args = String;
    type Output = Sent;
    type Error = ToolError;
    const NAME: &'static str = "mail_checked";
    const CLASS: EffectClass = EffectClass::Irreversible;

    fn output_schema() -> Option<Value> {
        Some(effect_tool_core::value::schema::output_schema::<Sent>())
    }

    async fn call(&self, _ctx: &EffectCtx, _to: String) -> Result<Sent, ToolError> {
        Err(ToolError::unknown("the mail API timed out after sending"))
    }
}

/// `resolve --applied --output` is checked against the output schema the engine wrote to the
/// journal: a plain string for a tool that returns an object is refused with the expected
/// shape, `--amend` too, and `show` says what shape to give.
async fn output_checked(j: &Journal) {
    let engine = Engine::new(j.store.clone());
    let run = RunContext::new(j.run_id("r"));
    let report = engine
        .call_with_report(&Mail, &run, Default::default(), "ann@example.com".to_owned())
        .await;
    let key = report.key.expect("journaled");
    assert_eq!(j.get(&key).await.unwrap().state, RecordState::InDoubt);

    let shown = j.cli(&["show", &key]);
    let text = shown.ok();
    assert!(
        text.contains("an output given with --applied must have the shape mail_checked returns (its JSON Schema):\n")
            && text.contains("\"required\": [\n      \"id\"\n    ]"),
        "{text}"
    );
    let shown = j.cli(&["show", &key, "--json"]).json();
    assert_eq!(shown["output_schema"]["required"], json!(["id"]), "{shown}");

    for amend in [false, true] {
        let mut args = vec!["resolve", key.as_str(), "--applied", "--output", r#""msg-1""#];
        if amend {
            args.push("--amend");
        }
        let out = j.cli(&args);
        let msg = out.fails(1);
        assert!(
            msg.contains("does not have the shape tool `mail_checked` returns")
                && msg.contains("Nothing was recorded")
                && msg.contains(r#""required":["id"]"#),
            "{msg}"
        );
    }
    let rec = j.get(&key).await.unwrap();
    assert_eq!(
        (rec.state, rec.output),
        (RecordState::InDoubt, None),
        "nothing recorded"
    );

    j.cli(&["resolve", &key, "--applied", "--output", r#"{"id": "msg-1"}"#])
        .ok();
    let replayed = engine
        .call(&Mail, &run, Default::default(), "ann@example.com".to_owned())
        .await
        .unwrap();
    assert_eq!(replayed, Sent { id: "msg-1".to_owned() });
}
