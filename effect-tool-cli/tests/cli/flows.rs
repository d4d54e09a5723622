//! The flows a person takes part in, end to end: an application's engine calls tools against
//! a journal, the person runs the real `effect-tool` binary on the same journal, the next call
//! sees the decision. Effects are counted by ledgers the engine cannot see. On SQLite and
//! PostgreSQL.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::Journal;
use effect_tool_core::{CallOptions, EffectClass, EffectCtx, EffectError, Engine, RunContext, Tool, ToolError};

common::on_every_backend!(
    blocked_call_resolved_as_applied_replays_without_running,
    blocked_call_resolved_as_not_applied_runs_once_more,
    wrong_resolution_amended,
    approval_flow,
    denial_flow,
);

/// Sends an email. The first send times out after the request left: the outcome is unknown.
struct SendEmail {
    sent: Arc<AtomicUsize>,
}

impl Tool for SendEmail {
    type Args = String;
    type Output = String;
    type Error = ToolError;
    const NAME: &'static str = "send_email";
    const CLASS: EffectClass = EffectClass::Irreversible;

    async fn call(&self, _ctx: &EffectCtx, to: String) -> Result<String, ToolError> {
        let n = self.sent.fetch_add(1, Ordering::SeqCst) + 1;
        if n == 1 {
            Err(ToolError::unknown(
                "the mail server timed out after the message was sent",
            ))
        } else {
            Ok(format!("msg-{n} to {to}"))
        }
    }
}

/// Deploys to production, after a release manager approves.
struct Deploy {
    deployed: Arc<AtomicUsize>,
}

impl Tool for Deploy {
    type Args = String;
    type Output = String;
    type Error = ToolError;
    const NAME: &'static str = "deploy";
    const CLASS: EffectClass = EffectClass::Irreversible;
    const APPROVAL: Option<&'static str> = Some("release-manager");

    async fn call(&self, _ctx: &EffectCtx, version: String) -> Result<String, ToolError> {
        self.deployed.fetch_add(1, Ordering::SeqCst);
        Ok(format!("deployed {version}"))
    }
}

/// Call until the journal holds a key a person must decide on; return that key. Every call
/// is the agent retrying the same tool call (one call id): a new call id with identical
/// arguments would be an identical re-plan of an unkeyed irreversible tool, blocked for its
/// own reason.
async fn blocked_key(j: &Journal, engine: &Engine, tool: &SendEmail, run: &RunContext) -> String {
    // The first attempt's outcome is unknown (the engine may report it as blocked already).
    let first = engine
        .call(tool, run, CallOptions::call_id("c1"), "ann@example.com".into())
        .await
        .unwrap_err();
    assert!(
        matches!(first, EffectError::Tool { .. } | EffectError::Blocked(_)),
        "{first}"
    );
    // The agent retries the same tool call: blocked, not run.
    let blocked = engine
        .call(tool, run, CallOptions::call_id("c1"), "ann@example.com".into())
        .await
        .unwrap_err();
    let blocked = blocked
        .as_blocked()
        .unwrap_or_else(|| panic!("blocked, got {blocked}"))
        .clone();
    assert_eq!(tool.sent.load(Ordering::SeqCst), 1, "the retry was blocked, not run");

    // The person finds it with the CLI.
    let listed = j.cli(&["list", "--run", run.run_id(), "--state", "in-doubt"]);
    assert!(listed.ok().contains(&blocked.key), "{listed:?}");
    assert!(j.cli(&["show", &blocked.key]).ok().contains("effect-tool resolve"));
    blocked.key
}

async fn blocked_call_resolved_as_applied_replays_without_running(j: &Journal) {
    let sent = Arc::new(AtomicUsize::new(0));
    let tool = SendEmail { sent: sent.clone() };
    let engine = Engine::new(j.store.clone());
    let run = RunContext::new(j.run_id("r"));
    let key = blocked_key(j, &engine, &tool, &run).await;

    // The mail server's log shows the message went out as msg-1: record it.
    j.cli(&[
        "resolve",
        &key,
        "--applied",
        "--output",
        r#""msg-1 to ann@example.com""#,
    ])
    .ok();

    let out = engine
        .call(&tool, &run, CallOptions::call_id("c1"), "ann@example.com".into())
        .await
        .unwrap();
    assert_eq!(out, "msg-1 to ann@example.com");
    assert_eq!(
        sent.load(Ordering::SeqCst),
        1,
        "returned the recorded output without sending again"
    );
}

async fn blocked_call_resolved_as_not_applied_runs_once_more(j: &Journal) {
    let sent = Arc::new(AtomicUsize::new(0));
    let tool = SendEmail { sent: sent.clone() };
    let engine = Engine::new(j.store.clone());
    let run = RunContext::new(j.run_id("r"));
    let key = blocked_key(j, &engine, &tool, &run).await;

    // The mail server never got it.
    j.cli(&["resolve", &key, "--not-applied", "--by", "ops"]).ok();

    let out = engine
        .call(&tool, &run, CallOptions::call_id("c1"), "ann@example.com".into())
        .await
        .unwrap();
    assert_eq!(out, "msg-2 to ann@example.com");
    assert_eq!(sent.load(Ordering::SeqCst), 2);
    // And once only.
    engine
        .call(&tool, &run, CallOptions::call_id("c1"), "ann@example.com".into())
        .await
        .unwrap();
    assert_eq!(sent.load(Ordering::SeqCst), 2);
}

/// A person records an output of the wrong shape: every call of the key fails to decode, and
/// the error gives the command that fixes it. Amended, the call returns the output without
/// sending; amended to not applied, the next call sends once.
async fn wrong_resolution_amended(j: &Journal) {
    let sent = Arc::new(AtomicUsize::new(0));
    let tool = SendEmail { sent: sent.clone() };
    let engine = Engine::new(j.store.clone());
    let run = RunContext::new(j.run_id("r"));
    let key = blocked_key(j, &engine, &tool, &run).await;
    let call = || engine.call(&tool, &run, CallOptions::call_id("c1"), "ann@example.com".into());

    // An object where the tool returns a string.
    j.cli(&["resolve", &key, "--applied", "--output", r#"{"id": "msg-1"}"#])
        .ok();
    let err = call().await.unwrap_err();
    let fix = format!("effect-tool resolve {key} --applied --output '<json>' --amend");
    match &err {
        EffectError::Codec { message, .. } => assert!(message.contains(&fix), "{message}"),
        other => panic!("a wrong-shaped output fails to decode, got {other}"),
    }
    assert!(call().await.is_err(), "and keeps failing");
    assert_eq!(sent.load(Ordering::SeqCst), 1, "nothing was sent again");

    // The command the error gives.
    j.cli(&[
        "resolve",
        &key,
        "--applied",
        "--output",
        r#""msg-1 to ann@example.com""#,
        "--amend",
    ])
    .ok();
    assert_eq!(call().await.unwrap(), "msg-1 to ann@example.com");
    assert_eq!(sent.load(Ordering::SeqCst), 1, "replayed, not sent");

    // The log was misread: it never went out.
    j.cli(&["resolve", &key, "--not-applied", "--amend"]).ok();
    assert_eq!(call().await.unwrap(), "msg-2 to ann@example.com");
    assert_eq!(sent.load(Ordering::SeqCst), 2);
    // Now the tool's own record stands: no person can amend it, and it is not sent again.
    j.cli(&["resolve", &key, "--not-applied", "--amend"]).fails(1);
    assert_eq!(call().await.unwrap(), "msg-2 to ann@example.com");
    assert_eq!(sent.load(Ordering::SeqCst), 2);
}

async fn approval_flow(j: &Journal) {
    let deployed = Arc::new(AtomicUsize::new(0));
    let tool = Deploy {
        deployed: deployed.clone(),
    };
    let engine = Engine::new(j.store.clone());
    let run = RunContext::new(j.run_id("r"));

    let err = engine
        .call(&tool, &run, CallOptions::call_id("c1"), "v2.1".into())
        .await
        .unwrap_err();
    let pending = err
        .as_approval_pending()
        .unwrap_or_else(|| panic!("parked, got {err}"))
        .clone();
    assert_eq!(deployed.load(Ordering::SeqCst), 0);

    let listed = j.cli(&["list", "--run", run.run_id(), "--state", "awaiting-approval"]);
    assert!(listed.ok().contains(&pending.key), "{listed:?}");
    // The wrong role cannot approve; nothing runs.
    j.cli(&["approve", &pending.key, "--as", "intern"]).fails(1);
    assert!(
        engine
            .call(&tool, &run, CallOptions::call_id("c1"), "v2.1".into())
            .await
            .unwrap_err()
            .as_approval_pending()
            .is_some()
    );
    assert_eq!(deployed.load(Ordering::SeqCst), 0);

    let fingerprint = j.get(&pending.key).await.unwrap().fingerprint;
    j.cli(&[
        "approve",
        &pending.key,
        "--as",
        "release-manager",
        "--by",
        "rita",
        "--fingerprint",
        &fingerprint,
    ])
    .ok();
    let out = engine
        .call(&tool, &run, CallOptions::call_id("c1"), "v2.1".into())
        .await
        .unwrap();
    assert_eq!(out, "deployed v2.1");
    assert_eq!(deployed.load(Ordering::SeqCst), 1);
    engine
        .call(&tool, &run, CallOptions::call_id("c1"), "v2.1".into())
        .await
        .unwrap();
    assert_eq!(deployed.load(Ordering::SeqCst), 1, "an approved call runs once");

    let shown = j.cli(&["show", &pending.key]);
    assert!(
        shown.ok().contains("rita") && shown.ok().contains("approve"),
        "{shown:?}"
    );
}

async fn denial_flow(j: &Journal) {
    let deployed = Arc::new(AtomicUsize::new(0));
    let tool = Deploy {
        deployed: deployed.clone(),
    };
    let engine = Engine::new(j.store.clone());
    let run = RunContext::new(j.run_id("r"));
    let err = engine
        .call(&tool, &run, CallOptions::call_id("c1"), "v3".into())
        .await
        .unwrap_err();
    let key = err.as_approval_pending().expect("parked").key.clone();

    j.cli(&["deny", &key, "--reason", "change freeze until Monday"]).ok();
    let err = engine
        .call(&tool, &run, CallOptions::call_id("c1"), "v3".into())
        .await
        .unwrap_err();
    match &err {
        EffectError::Denied { by, reason, .. } => {
            assert_eq!(by, "operator");
            assert_eq!(reason.as_deref(), Some("change freeze until Monday"));
        }
        other => panic!("denied, got {other}"),
    }
    assert!(err.to_string().contains("change freeze until Monday"));
    assert_eq!(deployed.load(Ordering::SeqCst), 0);
}
