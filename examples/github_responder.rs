//! An agent that answers new GitHub issues, against a local fake issue tracker.
//!
//! Run: `cargo run --example github_responder` (no set-up, no network).
//!
//! The comment tool is `irreversible`: a second comment is a second comment. It embeds
//! `ctx.marker()` (a hidden HTML comment carrying the effect key, signed with the journal's
//! secret so that nobody else can plant it) in what it posts, and its `recover` hook searches
//! the issue for a comment by the agent's own account that carries that marker
//! (`ctx.contains_marker`). So when the tracker's answer is lost
//! after the comment was created, or a worker dies mid-call, the next attempt finds the comment
//! instead of posting it again. The model's tool calls go through a `Toolkit`'s dispatcher, as
//! in an agent loop.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use effect_tool::store::sqlite::SqliteStore;
use effect_tool::toolkit::ToolOutcome;
use effect_tool::{EffectCtx, Engine, RunContext, ToolCall, ToolError, Toolkit, tools, value::marker};
use serde::Serialize;

/// The account the agent posts as (its token's user).
const AGENT_ACCOUNT: &str = "effect-tool-bot";

/// A local stand-in for GitHub: issues, their comments and labels.
struct Tracker {
    issues: Mutex<BTreeMap<u64, Issue>>,
    /// The next comment's response is lost after the comment was created (a 502 from a proxy).
    lose_next_reply: AtomicBool,
}

#[derive(Clone, Serialize)]
struct Issue {
    title: String,
    comments: Vec<Comment>,
    labels: Vec<String>,
}

#[derive(Clone, Serialize)]
struct Comment {
    author: String,
    body: String,
}

impl Tracker {
    fn new() -> Self {
        let mut issues = BTreeMap::new();
        for (n, title) in [(7, "Crash when the config file is empty"), (8, "Docs: typo in README")] {
            issues.insert(
                n,
                Issue {
                    title: title.to_owned(),
                    comments: Vec::new(),
                    labels: Vec::new(),
                },
            );
        }
        Tracker {
            issues: Mutex::new(issues),
            lose_next_reply: AtomicBool::new(true),
        }
    }

    fn issue<R>(&self, number: u64, f: impl FnOnce(&mut Issue) -> R) -> Result<R, ToolError> {
        let mut issues = self.issues.lock().unwrap();
        let issue = issues
            .get_mut(&number)
            .ok_or_else(|| ToolError::definitive(format!("issue #{number} does not exist")))?;
        Ok(f(issue))
    }
}

#[tools]
impl Tracker {
    /// List the open issues that have no answer yet.
    #[tool(effect = "pure")]
    async fn list_unanswered(&self) -> Result<Vec<(u64, String)>, ToolError> {
        let issues = self.issues.lock().unwrap();
        Ok(issues
            .iter()
            .filter(|(_, i)| i.comments.is_empty())
            .map(|(n, i)| (*n, i.title.clone()))
            .collect())
    }

    /// Comment on an issue. Posting twice posts twice: irreversible, found again by its marker.
    #[tool(effect = "irreversible", key(issue, body), recover = find_comment, open_world = true)]
    async fn comment_on_issue(&self, ctx: &EffectCtx, issue: u64, body: String) -> Result<String, ToolError> {
        let text = format!("{body}\n\n{}", ctx.marker());
        let count = self.issue(issue, |i| {
            i.comments.push(Comment {
                author: AGENT_ACCOUNT.to_owned(),
                body: text,
            });
            i.comments.len()
        })?;
        if self.lose_next_reply.swap(false, Ordering::SeqCst) {
            // The comment exists; the answer never reached us.
            return Err(ToolError::unknown("502 Bad Gateway after the request was sent"));
        }
        Ok(format!("comment #{count} on issue #{issue}"))
    }

    /// Look for the comment this call would post: by the agent's account, carrying this call's
    /// marker. The marker's MAC shows that the agent wrote it (nobody without the journal's
    /// secret can plant it); the author shows that the agent posted it (a marker copied into
    /// someone else's comment does not count).
    async fn find_comment(
        &self,
        ctx: &EffectCtx,
        args: &TrackerCommentOnIssueArgs,
    ) -> Result<Option<String>, ToolError> {
        self.issue(args.issue, |i| {
            i.comments
                .iter()
                .position(|c| c.author == AGENT_ACCOUNT && ctx.contains_marker(&c.body))
                .map(|pos| format!("comment #{} on issue #{}", pos + 1, args.issue))
        })
    }

    /// Label an issue (setting a label twice leaves one label).
    #[tool(effect = "idempotent", key(issue, label))]
    async fn label_issue(&self, issue: u64, label: String) -> Result<Vec<String>, ToolError> {
        self.issue(issue, |i| {
            if !i.labels.contains(&label) {
                i.labels.push(label);
            }
            i.labels.clone()
        })
    }
}

fn show(turn: &str, results: &[effect_tool::ToolResult]) {
    println!("{turn}");
    for r in results {
        let what = match &r.outcome {
            ToolOutcome::Output(_) => r.disposition.to_string(),
            _ => format!("{} (error)", r.disposition),
        };
        println!("  {:<18} {:<18} -> {}", r.name, what, r.content());
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let journal = dir.path().join("journal.db");
    let tracker = Arc::new(Tracker::new());
    let toolkit = Toolkit::new()
        .with(tracker.list_unanswered_tool())
        .with(tracker.comment_on_issue_tool())
        .with(tracker.label_issue_tool());
    let run = RunContext::new("triage-2026-11-30").with_agent("github-responder");
    let reply = r#"{"issue": 7, "body": "Thanks for the report! An empty config file should fall back to the defaults; a fix is on its way."}"#;

    {
        let worker = toolkit.dispatcher(Engine::new(SqliteStore::open(&journal)?));
        let turn = worker
            .dispatch(&run, &[ToolCall::new("call_1", "list_unanswered", "{}")])
            .await;
        show("turn 1: the model looks for unanswered issues", &turn);

        let turn = worker
            .dispatch(
                &run,
                &[
                    ToolCall::new("call_2", "comment_on_issue", reply),
                    ToolCall::new("call_3", "label_issue", r#"{"issue": 7, "label": "bug"}"#),
                ],
            )
            .await;
        show(
            "turn 2: it answers #7 and labels it (the tracker loses the comment's reply; recover finds the marker)",
            &turn,
        );

        let turn = worker
            .dispatch(
                &run,
                &[
                    ToolCall::new("call_4", "comment_on_issue", reply),
                    ToolCall::new("call_5", "label_issue", r#"{"issue": 7, "label": "bug"}"#),
                ],
            )
            .await;
        show("turn 3: the model re-plans the same step under new call ids", &turn);
    }

    // The worker is gone; another process picks the run up from the journal.
    let restarted = toolkit.dispatcher(Engine::new(SqliteStore::open(&journal)?));
    let turn = restarted
        .dispatch(&run, &[ToolCall::new("call_2", "comment_on_issue", reply)])
        .await;
    show("after a restart: the run is replayed from the journal", &turn);

    let issue = tracker.issue(7, |i| i.clone())?;
    println!(
        "\nissue #7 now has {} comment(s), labels {:?}:",
        issue.comments.len(),
        issue.labels
    );
    for c in &issue.comments {
        println!("--- {}\n{}\n---", c.author, c.body);
        if let Some(id) = marker::parse_marker(&c.body) {
            println!(
                "(the hidden marker carries the id `{id}`, not the key: `effect-tool show --marker {id}` finds the record)"
            );
        }
    }
    assert_eq!(issue.comments.len(), 1, "the comment was posted once");
    Ok(())
}
