//! Every command line the core's messages tell a person to run parses with this CLI, and names
//! the record it was written for, even a key that needs quoting: a renamed flag or subcommand
//! fails here, not in front of an operator.

use clap::Parser;
use effect_tool_cli::Cli;
use effect_tool_cli::cli::Command;
use effect_tool_core::call::error::{ApprovalPending, BlockReason, SideEffectRetryBlocked};
use effect_tool_core::decide::record::{EffectRecord, Intent, Op, Verdict, transition};
use effect_tool_core::value::class::EffectClass;

/// Keys as they come: plain, and with what a shell must not read as itself. (Not a backquote:
/// the messages set commands in backquotes, so one inside a key ends the command early.)
const KEYS: &[&str] = &["run-1:send:ab12", "it's a key", "run $HOME; rm -rf /*"];

/// The `effect-tool ...` commands in backquotes in `text`.
fn quoted_commands(text: &str) -> Vec<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter(|s| s.starts_with("effect-tool "))
        .map(str::to_owned)
        .collect()
}

/// `line` split into words as a POSIX shell does for what the core writes: plain words, and
/// single-quoted text with `'\''` for a quote inside.
fn words(line: &str) -> Vec<String> {
    let (mut out, mut word, mut in_word) = (Vec::new(), String::new(), false);
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                for q in chars.by_ref() {
                    if q == '\'' {
                        break;
                    }
                    word.push(q);
                }
            }
            '\\' => {
                in_word = true;
                word.extend(chars.next());
            }
            ' ' => {
                if in_word {
                    out.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            c => {
                assert!(!"\"$`;|&<>()".contains(c), "unquoted `{c}` in the command `{line}`");
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        out.push(word);
    }
    out
}

/// Parse `line` as the CLI does, and return the key it names.
fn parsed_key(line: &str) -> String {
    let cli = Cli::try_parse_from(words(line)).unwrap_or_else(|e| panic!("`{line}` does not parse: {e}"));
    match cli.command {
        Command::Resolve(args) => args.key,
        Command::Approve { key, .. } | Command::Deny { key, .. } => key,
        Command::Show { key, .. } => key.unwrap_or_else(|| panic!("`{line}` names no key")),
        other => panic!("`{line}` is not a command for one record: {other:?}"),
    }
}

fn intent() -> Intent {
    Intent {
        tool: "send".into(),
        class: EffectClass::Irreversible,
        run_id: "run-1".into(),
        thread_id: None,
        call_id: Some("call-1".into()),
        fingerprint: "f1".into(),
        input: serde_json::json!({ "to": "a@b.c" }),
        ttl_ms: None,
        approval: None,
        approval_ttl_ms: None,
        holder: None,
    }
}

fn step(key: &str, rec: Option<&EffectRecord>, op: Op) -> EffectRecord {
    let t = transition(key, rec, op, 1_000).expect("the operation applies");
    EffectRecord::clone(&t.write.expect("it writes"))
}

/// The refusal of `op` on `rec`, as a person reads it.
fn refusal(key: &str, rec: &EffectRecord, op: Op) -> String {
    transition(key, Some(rec), op, 1_000).expect_err("refused").to_string()
}

/// What the core says to a person about `key`: the decisions' refusals, a blocked call, a
/// parked call.
fn messages(key: &str) -> Vec<String> {
    let claimed = step(
        key,
        None,
        Op::Claim {
            intent: intent(),
            lease_ms: 60_000,
            takeover_in_doubt: false,
        },
    );
    let in_doubt = step(
        key,
        Some(&claimed),
        Op::MarkInDoubt {
            attempt: 1,
            reason: "timed out".into(),
        },
    );
    let resolve = |verdict| Op::Resolve {
        by: "ops".into(),
        verdict,
    };
    let resolved = step(key, Some(&in_doubt), resolve(Verdict::NotApplied));
    let mut out = vec![
        // Nothing to amend yet: resolve it.
        refusal(
            key,
            &in_doubt,
            Op::Amend {
                by: "ops".into(),
                verdict: Verdict::NotApplied,
            },
        ),
        // Resolved already: amend it.
        refusal(key, &resolved, resolve(Verdict::NotApplied)),
        ApprovalPending {
            key: key.into(),
            tool: "send".into(),
            run_id: "run-1".into(),
            role: "support lead".into(),
        }
        .to_string(),
    ];
    for reason in [
        BlockReason::RecoverFailed,
        BlockReason::UnknownOutcome,
        BlockReason::InDoubtAfterCrash,
        BlockReason::AwaitingResolution,
    ] {
        out.push(
            SideEffectRetryBlocked {
                key: key.into(),
                tool: "send".into(),
                run_id: "run-1".into(),
                reason,
            }
            .to_string(),
        );
    }
    out
}

#[test]
fn every_command_the_core_quotes_parses_and_names_its_record() {
    for key in KEYS {
        let mut seen = 0;
        for text in messages(key) {
            for line in quoted_commands(&text) {
                assert_eq!(parsed_key(&line), *key, "`{line}` (in: {text})");
                seen += 1;
            }
        }
        // resolve ×2 and amend ×2, approve and deny, show and resolve of each blocked reason.
        assert!(seen >= 10, "only {seen} commands found for `{key}`");
    }
}
