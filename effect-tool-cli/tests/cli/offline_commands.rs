//! The subcommands that need no store (key, canon, manifest) and the command line itself, run
//! as the real binary. `canon` and `key` are checked against the RFC 8785 vectors the core
//! tests use.

use crate::common;

use common::{TempDir, jcs_dir, run};
use effect_tool_core::__cli::{redact, sha256_hex};
use effect_tool_core::call::key::call_key;
use effect_tool_core::{EffectClass, KeyRule, RetryPolicy, RunContext, ToolMeta, Window, toolkit::manifest};
use serde_json::json;
use std::time::Duration;

fn vectors() -> Vec<(String, Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(jcs_dir().join("input")).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let input = std::fs::read(&path).unwrap();
        let expected = std::fs::read(jcs_dir().join("output").join(&name)).unwrap();
        out.push((name, input, expected));
    }
    out.sort();
    assert_eq!(out.len(), 6, "the six reference vectors");
    out
}

#[test]
fn canon_matches_the_rfc8785_vectors_byte_for_byte() {
    for (name, input, expected) in vectors() {
        let out = run(&["canon"], Some(&input), &[]);
        // Piped stdout: exactly the canonical bytes, no trailing newline.
        assert_eq!(out.ok().as_bytes(), expected.as_slice(), "{name}");
        let hash = run(&["canon", "--hash"], Some(&input), &[]);
        assert_eq!(hash.ok(), format!("{}\n", sha256_hex(&expected)), "{name}");
        let json = run(&["canon", "--json"], Some(&input), &[]).json();
        assert_eq!(
            json["canonical"].as_str().unwrap().as_bytes(),
            expected.as_slice(),
            "{name}"
        );
    }
}

#[test]
fn canon_formats_the_100k_es6_numbers() {
    let text = std::fs::read_to_string(jcs_dir().join("es6numbers-100k.txt")).unwrap();
    let expected: Vec<&str> = text
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| l.split_once(',').unwrap().1)
        .collect();
    assert_eq!(expected.len(), 100_000);
    // Each number written as its hex-decoded double in plain (non-shortest) decimal, so
    // both the parser and the formatter are exercised.
    let input: Vec<String> = text
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| {
            let bits = u64::from_str_radix(l.split_once(',').unwrap().0, 16).unwrap();
            format!("{:e}", f64::from_bits(bits))
        })
        .collect();
    let stdin = format!("[{}]", input.join(",\n"));
    let out = run(&["canon"], Some(stdin.as_bytes()), &[]);
    let got = out.ok();
    let got_numbers: Vec<&str> = got.trim_start_matches('[').trim_end_matches(']').split(',').collect();
    assert_eq!(got_numbers.len(), expected.len());
    let wrong: Vec<String> = got_numbers
        .iter()
        .zip(&expected)
        .enumerate()
        .filter(|(_, (g, e))| g != e)
        .take(10)
        .map(|(i, (g, e))| format!("line {}: expected {e}, got {g}", i + 1))
        .collect();
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn key_agrees_with_the_vectors_and_the_core() {
    for (name, input, expected) in vectors() {
        let hash = sha256_hex(&expected);
        let out = run(&["key", "--run", "run-1", "--tool", "t"], Some(&input), &[]);
        assert_eq!(out.ok(), format!("run-1:t:{hash}\n"), "{name}");
        let cross = run(
            &["key", "--run", "run-1", "--tool", "t", "--window", "cross-run"],
            Some(&input),
            &[],
        );
        assert_eq!(cross.ok(), format!("t:{hash}\n"), "{name}");
        let thread = run(
            &[
                "key", "--run", "run-1", "--tool", "t", "--window", "thread", "--thread", "th-9",
            ],
            Some(&input),
            &[],
        );
        assert_eq!(thread.ok(), format!("thread:th-9:t:{hash}\n"), "{name}");
        let json = run(&["key", "--run", "run-1", "--tool", "t", "--json"], Some(&input), &[]).json();
        assert_eq!(json["fingerprint"], hash.as_str());
        assert_eq!(json["canonical"].as_str().unwrap().as_bytes(), expected.as_slice());
    }
    // A thread window without a thread falls back to the run, as in the runtime.
    let out = run(
        &["key", "--run", "r", "--tool", "t", "--window", "thread"],
        Some(b"{}"),
        &[],
    );
    assert!(out.ok().starts_with("r:t:"), "{out:?}");
}

#[test]
fn key_leaves_secrets_out_and_follows_field_rules_like_the_runtime() {
    let args = json!({"to": "a@b.c", "amount": 12.50, "token": "s3cr3t"});
    let stdin = serde_json::to_vec(&args).unwrap();
    let run_ctx = RunContext::new("run-7").with_thread("th");
    let redacted = redact(args.clone(), &["token"]);

    let expected = call_key(KeyRule::Default, Window::Run, &run_ctx, "pay", &redacted, None);
    let out = run(
        &["key", "--run", "run-7", "--tool", "pay", "--secret", "token"],
        Some(&stdin),
        &[],
    );
    assert_eq!(out.ok(), format!("{}\n", expected.key));
    // The secret changes nothing in the key.
    let other = serde_json::to_vec(&json!({"to": "a@b.c", "amount": 12.5, "token": "other"})).unwrap();
    let again = run(
        &["key", "--run", "run-7", "--tool", "pay", "--secret", "token"],
        Some(&other),
        &[],
    );
    assert_eq!(again.ok(), out.ok());
    // Without --secret it is hashed in (and the key differs).
    let with_secret = run(&["key", "--run", "run-7", "--tool", "pay"], Some(&stdin), &[]);
    assert_ne!(with_secret.ok(), out.ok());

    let fields = call_key(
        KeyRule::Fields(&["to", "amount"]),
        Window::Thread,
        &run_ctx,
        "pay",
        &redacted,
        None,
    );
    let out = run(
        &[
            "key",
            "--run",
            "run-7",
            "--thread",
            "th",
            "--window",
            "thread",
            "--tool",
            "pay",
            "--secret",
            "token",
            "--fields",
            "to,amount",
        ],
        Some(&stdin),
        &[],
    );
    assert_eq!(out.ok(), format!("{}\n", fields.key));
}

#[test]
fn bad_json_on_stdin_is_one_line_and_exit_2() {
    for (args, stdin, needle) in [
        (vec!["canon"], &b"{\"a\": }"[..], "not valid JSON"),
        (vec!["canon"], b"", "stdin is empty"),
        (vec!["canon"], b"{\"a\":1,\"a\":2}", "duplicate member name `a`"),
        (vec!["canon"], b"1e400", "not valid JSON"),
        (vec!["canon"], b"\"\\ud800\"", "not valid JSON"),
        (vec!["canon"], b"\xff\xfe", "cannot read"),
        (vec!["key", "--run", "r", "--tool", "t"], b"[1,", "not valid JSON"),
    ] {
        let out = run(&args, Some(stdin), &[]);
        let msg = out.fails(2);
        assert!(msg.contains(needle), "{args:?} {stdin:?}: {msg}");
    }
    // Missing required options are usage errors too.
    assert_eq!(run(&["key", "--tool", "t"], Some(b"{}"), &[]).code, 2);
    assert_eq!(
        run(
            &["key", "--run", "r", "--tool", "t", "--window", "forever"],
            Some(b"{}"),
            &[]
        )
        .code,
        2
    );
}

#[test]
fn offline_commands_need_no_store() {
    // Even with a store that does not exist.
    let out = run(&["--store", "/nonexistent/j.db", "canon"], Some(b"[ 1.0 ]"), &[]);
    assert_eq!(out.ok(), "[1]");
}

/// A real manifest, rendered by the core from two declarations.
fn manifest_text(email_class: EffectClass) -> String {
    let refund = ToolMeta {
        name: "issue_refund",
        description: "Refund part of an order.",
        class: EffectClass::Idempotent,
        key_rule: KeyRule::Custom("|a| format!(\"refund:{}\", a.order_id)"),
        window: Window::CrossRun,
        shared_keys: false,
        ttl: Some(Duration::from_secs(24 * 3600)),
        timeout: None,
        sensitive: &[],
        injected: &[],
        has_recover: false,
        has_compensate: false,
        approval: None,
        approval_when: None,
        open_world: None,
        retry: RetryPolicy::DEFAULT,
        costs: &[],
    };
    let email = ToolMeta {
        name: "send_email",
        description: "Send an email.",
        class: email_class,
        key_rule: KeyRule::Fields(&["to", "subject"]),
        window: Window::Run,
        shared_keys: false,
        ttl: None,
        timeout: Some(Duration::from_secs(30)),
        sensitive: &["api_token"],
        injected: &[],
        has_recover: true,
        has_compensate: false,
        approval: Some("comms"),
        approval_when: None,
        open_world: Some(true),
        retry: RetryPolicy::DEFAULT,
        costs: &[],
    };
    manifest::render(&[email, refund])
}

#[test]
fn manifest_prints_and_checks_a_manifest_file() {
    let dir = TempDir::new("manifest");
    let printed = dir.path.join("printed.manifest");
    let committed = dir.path.join("committed.manifest");
    let text = manifest_text(EffectClass::Irreversible);
    assert!(text.starts_with(manifest::HEADER));
    // Saved on another platform: CRLF, trailing spaces and blank lines at the end do not count.
    std::fs::write(&printed, format!("{}\r\n\r\n", text.replace('\n', "  \r\n"))).unwrap();
    std::fs::write(&committed, &text).unwrap();
    let (p, c) = (printed.to_str().unwrap(), committed.to_str().unwrap());

    assert_eq!(run(&["manifest", p], None, &[]).ok(), text);
    assert_eq!(run(&["manifest", "-"], Some(text.as_bytes()), &[]).ok(), text);
    let json = run(&["manifest", p, "--json"], None, &[]).json();
    assert_eq!(json["tools"], json!(["issue_refund", "send_email"]));
    let same = run(&["manifest", p, "--check", c], None, &[]);
    assert!(same.ok().starts_with("manifest matches"), "{same:?}");
    assert_eq!(
        run(&["manifest", p, "--check", c, "--json"], None, &[]).json()["matches"],
        true
    );

    // A tool's contract changed: exit 1 with the differing lines.
    let changed_text = manifest_text(EffectClass::Idempotent);
    std::fs::write(&printed, &changed_text).unwrap();
    let old_line = text.lines().find(|l| l.starts_with("send_email ")).unwrap();
    let new_line = changed_text.lines().find(|l| l.starts_with("send_email ")).unwrap();
    assert!(new_line.contains("class=idempotent"), "{new_line}");
    let changed = run(&["manifest", p, "--check", c], None, &[]);
    let msg = changed.fails(1);
    assert!(msg.contains("differs") && msg.contains("2 lines"), "{msg}");
    assert!(
        changed.stdout.contains(&format!("-{old_line}\n+{new_line}\n")),
        "{changed:?}"
    );
    let json = run(&["manifest", p, "--check", c, "--json"], None, &[]);
    assert_eq!(json.code, 1);
    let v: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(v["diff"], json!([format!("-{old_line}"), format!("+{new_line}")]));

    // Not a manifest, missing, empty: usage, exit 2.
    std::fs::write(&printed, "tool send_email\n").unwrap();
    assert!(
        run(&["manifest", p], None, &[])
            .fails(2)
            .contains("is not an effect-tool manifest")
    );
    assert!(
        run(&["manifest", p, "--check", c], None, &[])
            .fails(2)
            .contains("is not an effect-tool manifest")
    );
    assert!(
        run(&["manifest", "/nonexistent/m"], None, &[])
            .fails(2)
            .contains("cannot read manifest")
    );
    std::fs::write(&printed, "\n\n").unwrap();
    assert!(run(&["manifest", p], None, &[]).fails(2).contains("is empty"));
}

#[test]
fn help_documents_the_store_and_exit_codes() {
    let out = run(&["--help"], None, &[]);
    let help = out.ok();
    for needle in [
        "EFFECT_TOOL_STORE",
        "Exit codes:",
        "0  success",
        "1  not found or refused",
        "2  usage",
        "3  the store",
    ] {
        assert!(help.contains(needle), "missing `{needle}` in --help:\n{help}");
    }
    for sub in [
        "list", "show", "resolve", "approve", "deny", "abandon", "gc", "key", "canon", "manifest",
    ] {
        assert!(help.contains(&format!("  {sub} ")), "missing subcommand {sub}:\n{help}");
        let sub_help = run(&[sub, "--help"], None, &[]);
        assert_eq!(sub_help.code, 0, "{sub}: {sub_help:?}");
    }
    assert!(run(&["--version"], None, &[]).ok().starts_with("effect-tool "));
    // Unknown subcommand or option: exit 2, no panic.
    let unknown = run(&["frobnicate"], None, &[]);
    assert_eq!(unknown.code, 2);
    assert!(!unknown.stderr.contains("panicked"));
}
