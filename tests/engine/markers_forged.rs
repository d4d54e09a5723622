//! Markers cannot be forged (issue 19, item 5).
//!
//! A default key is computable from public data (run id, tool name, hash of the arguments), so
//! a stranger who can comment where the agent's `recover` hook looks could plant the marker
//! first: the agent's comment would never be posted, and the stranger's comment would be
//! recorded as the tool's output. Markers are signed with the journal's secret: a planted plain
//! marker, or one with a wrong MAC, does not reconcile; the agent's own marker does, in this
//! process and in another one on the same journal. Comments are counted at a tracker the
//! engine cannot see.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use effect_tool::store::sqlite::SqliteStore;
use effect_tool::value::marker::{self, MarkerSecret};
use effect_tool::{CallOptions, Disposition, EffectCtx, Engine, MemoryStore, RunContext, Store, ToolError, tools};

/// The issue tracker: every comment, with its author.
#[derive(Default)]
struct Tracker {
    comments: Mutex<Vec<(String, String)>>,
    /// How the next posts by the agent go, in order (then `Answered`).
    script: Mutex<Vec<Post>>,
    posts_by_agent: AtomicUsize,
}

#[derive(Clone, Copy)]
enum Post {
    Answered,
    /// The comment is created, the answer is lost.
    LostReply,
    /// Nothing is created, and the agent cannot tell (a timeout before the request left).
    LostRequest,
}

impl Tracker {
    fn plant(&self, author: &str, body: String) {
        self.comments.lock().unwrap().push((author.to_owned(), body));
    }
    fn agent_comments(&self) -> Vec<String> {
        let comments = self.comments.lock().unwrap();
        comments
            .iter()
            .filter(|(a, _)| a == "agent")
            .map(|(_, b)| b.clone())
            .collect()
    }
}

#[tools]
impl Tracker {
    /// Comment on the issue.
    #[tool(effect = "irreversible", recover = find_comment)]
    async fn comment(&self, ctx: &EffectCtx, body: String) -> Result<String, ToolError> {
        let next = {
            let mut script = self.script.lock().unwrap();
            if script.is_empty() {
                Post::Answered
            } else {
                script.remove(0)
            }
        };
        if matches!(next, Post::LostRequest) {
            return Err(ToolError::unknown("timed out"));
        }
        let n = {
            let mut comments = self.comments.lock().unwrap();
            comments.push(("agent".to_owned(), format!("{body}\n{}", ctx.marker())));
            comments.len()
        };
        self.posts_by_agent.fetch_add(1, Ordering::SeqCst);
        match next {
            Post::LostReply => Err(ToolError::unknown("502 after the comment was created")),
            _ => Ok(format!("comment #{n} by agent")),
        }
    }

    /// The comment that carries this call's marker (any author: the MAC is what is tested).
    async fn find_comment(&self, ctx: &EffectCtx, _args: &TrackerCommentArgs) -> Result<Option<String>, ToolError> {
        let comments = self.comments.lock().unwrap();
        Ok(comments
            .iter()
            .position(|(_, body)| ctx.contains_marker(body))
            .map(|i| format!("comment #{} by {}", i + 1, comments[i].0)))
    }
}

fn args(body: &str) -> TrackerCommentArgs {
    TrackerCommentArgs { body: body.to_owned() }
}

#[tokio::test]
async fn planted_plain_and_wrong_mac_markers_do_not_reconcile() {
    let tracker = Arc::new(Tracker::default());
    let engine = Engine::new(MemoryStore::new());
    let run = RunContext::new("run-7");
    let tool = tracker.comment_tool();
    // The stranger computes the key from public data and plants markers for it.
    let key = effect_tool::call::key::identify(&tool, &run, &args("Thanks!"))
        .unwrap()
        .key;
    tracker.plant("mallory", format!("gotcha {}", marker::marker(&key)));
    let wrong = MarkerSecret::from_bytes([0; 32]);
    tracker.plant("mallory", format!("gotcha {}", marker::signed_marker(&key, &wrong)));
    // The form earlier releases wrote (key in clear text), plain and with a wrong MAC.
    tracker.plant("mallory", format!("gotcha {}", marker::legacy_marker(&key, None)));
    tracker.plant(
        "mallory",
        format!("gotcha {}", marker::legacy_marker(&key, Some(&wrong))),
    );
    // Each parses as a marker: an id that is not the journal's for that key, or the key itself.
    let comments = tracker.comments.lock().unwrap().clone();
    assert_eq!(
        marker::parse_markers(&comments[1].1),
        vec![marker::marker_id(&key, &wrong)]
    );
    assert_eq!(marker::parse_markers(&comments[3].1), vec![key.clone()]);

    // The agent's first post is lost before it left: recover runs, must find nothing.
    tracker.script.lock().unwrap().push(Post::LostRequest);
    let report = engine
        .call_with_report(&tool, &run, CallOptions::call_id("c1"), args("Thanks!"))
        .await;
    assert_eq!(
        tracker.posts_by_agent.load(Ordering::SeqCst),
        1,
        "the agent's comment was posted"
    );
    assert_eq!(
        report.result.as_deref().ok(),
        Some("comment #5 by agent"),
        "{:?}",
        report.result
    );
    assert_eq!(tracker.agent_comments().len(), 1);
    // Replayed from then on: the agent's own output, never the stranger's comment.
    let again = engine
        .call_with_report(&tool, &run, CallOptions::call_id("c1"), args("Thanks!"))
        .await;
    assert_eq!(again.disposition, Disposition::Replayed);
    assert_eq!(again.result.as_deref().ok(), Some("comment #5 by agent"));
    assert_eq!(tracker.posts_by_agent.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn the_agents_own_marker_reconciles() {
    let tracker = Arc::new(Tracker::default());
    let engine = Engine::new(MemoryStore::new());
    let run = RunContext::new("run-8");
    let tool = tracker.comment_tool();
    tracker.script.lock().unwrap().push(Post::LostReply);
    let report = engine
        .call_with_report(&tool, &run, CallOptions::call_id("c1"), args("Fixed in 1.2"))
        .await;
    assert_eq!(report.disposition, Disposition::Reconciled, "{:?}", report.result);
    assert_eq!(report.result.as_deref().ok(), Some("comment #1 by agent"));
    assert_eq!(tracker.posts_by_agent.load(Ordering::SeqCst), 1, "posted once");
    // What it posted is signed: a MAC under the journal's secret, for this call's key.
    let body = &tracker.agent_comments()[0];
    let secret = engine
        .marker_secret()
        .await
        .unwrap()
        .expect("the memory store keeps a secret");
    assert_eq!(secret, engine.store().marker_secret().await.unwrap().unwrap());
    assert!(marker::contains_marker(body, report.key.as_deref().unwrap(), &secret));
    assert!(!marker::contains_plain_marker(body, report.key.as_deref().unwrap()));
}

#[tokio::test]
async fn the_sqlite_journal_keeps_its_secret_for_every_process_and_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.db");
    let tracker = Arc::new(Tracker::default());
    let run = RunContext::new("run-9");
    let tool = tracker.comment_tool();

    // The first process creates the secret, then exits.
    let first = SqliteStore::open(&path).unwrap();
    let secret = first.marker_secret().await.unwrap().expect("SQLite keeps a secret");
    assert_eq!(
        first.marker_secret().await.unwrap(),
        Some(secret.clone()),
        "created once"
    );
    drop(first);

    // Another process opens the same journal: the same secret.
    let reopened = SqliteStore::open(&path).unwrap();
    assert_eq!(reopened.marker_secret().await.unwrap(), Some(secret.clone()));
    let other = SqliteStore::open(&path).unwrap();
    assert_eq!(other.marker_secret().await.unwrap(), Some(secret.clone()));

    // What an engine on one connection signs, an engine on the other verifies.
    tracker.script.lock().unwrap().push(Post::LostReply);
    let writer = Engine::new(reopened);
    let report = writer
        .call_with_report(&tool, &run, CallOptions::call_id("c1"), args("hello"))
        .await;
    assert_eq!(report.disposition, Disposition::Reconciled);
    let key = report.key.unwrap();
    let reader = Engine::new(other);
    let seen = reader.marker_secret().await.unwrap().unwrap();
    assert!(marker::contains_marker(&tracker.agent_comments()[0], &key, &seen));
    assert_eq!(tracker.posts_by_agent.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn an_application_secret_replaces_the_journals() {
    let tracker = Arc::new(Tracker::default());
    let mine = MarkerSecret::from_bytes([9; 32]);
    let store = Arc::new(MemoryStore::new());
    let engine = Engine::new(store.clone()).with_marker_secret(mine.clone());
    let run = RunContext::new("run-10");
    let tool = tracker.comment_tool();
    let report = engine
        .call_with_report(&tool, &run, CallOptions::call_id("c1"), args("hi"))
        .await;
    let key = report.key.unwrap();
    let body = &tracker.agent_comments()[0];
    assert!(marker::contains_marker(body, &key, &mine));
    let journals = store.marker_secret().await.unwrap().unwrap();
    assert_ne!(journals, mine);
    assert!(!marker::contains_marker(body, &key, &journals));
    assert_eq!(engine.marker_secret().await.unwrap(), Some(mine));
}

/// PostgreSQL: several processes' stores asking at once get one secret, created once, kept
/// for every later connection.
#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_postgres_journal_keeps_one_secret_for_every_process() {
    use effect_tool::store::postgres::{PgOptions, PostgresStore};
    let Ok(url) = std::env::var("EFFECT_TOOL_PG_URL") else {
        assert!(
            std::env::var("EFFECT_TOOL_REQUIRE_PG").is_err(),
            "EFFECT_TOOL_PG_URL is not set but PostgreSQL is required"
        );
        eprintln!("SKIPPED: the_postgres_journal_keeps_one_secret_for_every_process (no EFFECT_TOOL_PG_URL)");
        return;
    };
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let options = PgOptions {
        schema: format!("et_marker_{}_{nanos:08x}", std::process::id()),
        pool_size: 2,
        ..PgOptions::default()
    };
    let racing = (0..4).map(|_| {
        let (url, options) = (url.clone(), options.clone());
        tokio::spawn(async move {
            let store = PostgresStore::connect_with(&url, options).await.unwrap();
            store.marker_secret().await.unwrap().expect("PostgreSQL keeps a secret")
        })
    });
    let mut secrets = Vec::new();
    for task in racing.collect::<Vec<_>>() {
        secrets.push(task.await.unwrap());
    }
    assert!(secrets.windows(2).all(|w| w[0] == w[1]), "one secret for all");
    let later = PostgresStore::connect_with(&url, options).await.unwrap();
    assert_eq!(later.marker_secret().await.unwrap(), Some(secrets[0].clone()));
}
