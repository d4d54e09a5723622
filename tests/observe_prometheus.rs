//! effect-tool's metrics as an on-call team gets them: a real Prometheus server (Debian's
//! `prometheus` package) scrapes the endpoint of `PrometheusMetrics`, loads the alert rules of
//! `deploy/prometheus/`, and is queried through its HTTP API. `promtool` checks the rules and
//! runs their unit tests; the Grafana dashboard's queries name only metrics the endpoint serves.
//!
//! Without a `prometheus` binary the tests skip, unless `EFFECT_TOOL_REQUIRE_PROMETHEUS=1` (set by
//! `scripts/test.sh`, which installs the package).
#![cfg(all(feature = "prometheus", feature = "sqlite"))]

mod common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use common::ledger::Downstream;
use effect_tool::decide::record::{AuditEntry, EffectRecord, Millis, Op, OpOutcome};
use effect_tool::engine::MetricKind;
use effect_tool::ops::prometheus::PrometheusMetrics;
use effect_tool::store::sqlite::SqliteStore;
use effect_tool::{CallOptions, EffectCtx, Engine, Filter, RunContext, Store, StoreError, ToolError, tool};
use serde_json::Value;

/// The outside world, where the engine cannot see: what each tool really did.
static BANK: LazyLock<Downstream> = LazyLock::new(Downstream::default);
static MAIL: LazyLock<Downstream> = LazyLock::new(Downstream::default);
static DEPLOYS: LazyLock<Downstream> = LazyLock::new(Downstream::default);

/// Refund part of an order.
#[tool(effect = "idempotent", key(order_id))]
async fn issue_refund(ctx: &EffectCtx, order_id: String) -> Result<String, ToolError> {
    BANK.apply(&ctx.idempotency_key());
    Ok(format!("re_{order_id}"))
}

/// Send an email. The mail server's connection drops after the message was sent: the outcome
/// is unknown.
#[tool(effect = "irreversible", key(to))]
async fn send_email(ctx: &EffectCtx, to: String) -> Result<String, ToolError> {
    MAIL.apply(&ctx.idempotency_key());
    Err(ToolError::unknown(format!(
        "the connection to the mail server dropped after sending to {to}"
    )))
}

/// Deploy a release (needs an operator's approval).
#[tool(effect = "irreversible", key(release), approval = "ops")]
async fn deploy(ctx: &EffectCtx, release: String) -> Result<String, ToolError> {
    DEPLOYS.apply(&ctx.idempotency_key());
    Ok(format!("deployed {release}"))
}

fn prometheus_binaries() -> Option<(PathBuf, PathBuf)> {
    let find = |name: &str| {
        std::env::var_os("PATH")
            .into_iter()
            .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    };
    match (find("prometheus"), find("promtool")) {
        (Some(p), Some(t)) => Some((p, t)),
        _ if std::env::var("EFFECT_TOOL_REQUIRE_PROMETHEUS").as_deref() == Ok("1") => {
            panic!(
                "EFFECT_TOOL_REQUIRE_PROMETHEUS=1 but `prometheus`/`promtool` are not on PATH: apt-get install prometheus"
            )
        }
        _ => {
            eprintln!("skipped: no `prometheus`/`promtool` on PATH (apt-get install prometheus)");
            None
        }
    }
}

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy")
}

#[test]
fn promtool_checks_the_alert_rules_and_runs_their_unit_tests() {
    let Some((_, promtool)) = prometheus_binaries() else {
        return;
    };
    let rules = deploy_dir().join("prometheus");
    let check = Command::new(&promtool)
        .args(["check", "rules", "effect-tool-alerts.yml"])
        .current_dir(&rules)
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
    assert!(String::from_utf8_lossy(&check.stdout).contains("SUCCESS: 5 rules found"));
    let test = Command::new(&promtool)
        .args(["test", "rules", "effect-tool-alerts.test.yml"])
        .current_dir(&rules)
        .output()
        .unwrap();
    assert!(
        test.status.success(),
        "{}{}",
        String::from_utf8_lossy(&test.stdout),
        String::from_utf8_lossy(&test.stderr)
    );
}

/// The journal seen ten minutes later: the gauges' ages are computed with the store's clock, so
/// through this view the record in doubt has waited past the alert's 5 minutes.
struct TenMinutesLater(Arc<SqliteStore>);

#[async_trait]
impl Store for TenMinutesLater {
    async fn get(&self, key: &str) -> Result<Option<EffectRecord>, StoreError> {
        self.0.get(key).await
    }
    async fn apply(&self, key: &str, op: Op) -> Result<OpOutcome, StoreError> {
        self.0.apply(key, op).await
    }
    async fn list(&self, filter: &Filter) -> Result<Vec<EffectRecord>, StoreError> {
        self.0.list(filter).await
    }
    async fn gc(&self, now: Millis) -> Result<u64, StoreError> {
        self.0.gc(now).await
    }
    async fn audit(&self, key: Option<&str>) -> Result<Vec<AuditEntry>, StoreError> {
        self.0.audit(key).await
    }
    fn now(&self) -> Millis {
        self.0.now() + 10 * 60 * 1000
    }
}

/// A Prometheus server of the test's own, killed on drop.
struct OwnPrometheus {
    child: Child,
    addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Drop for OwnPrometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn start_prometheus(binary: &Path, target: SocketAddr) -> OwnPrometheus {
    let dir = tempfile::tempdir().unwrap();
    let rules = deploy_dir().join("prometheus/effect-tool-alerts.yml");
    let config = format!(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - {}\nscrape_configs:\n  - job_name: effect-tool\n    static_configs:\n      - targets: ['{target}']\n",
        rules.display()
    );
    std::fs::write(dir.path().join("prometheus.yml"), config).unwrap();
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let child = Command::new(binary)
        .arg(format!("--config.file={}", dir.path().join("prometheus.yml").display()))
        .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
        .arg(format!("--web.listen-address={addr}"))
        .arg("--log.level=warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("prometheus starts");
    OwnPrometheus { child, addr, _dir: dir }
}

/// `GET path`: the status and the body.
async fn get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    common::http::get(addr, path).await.map(|a| (a.status, a.body))
}

/// Prometheus's answer to an instant query, as (labels, value) pairs.
async fn query(prometheus: SocketAddr, promql: &str) -> Vec<(Value, f64)> {
    let encoded = common::http::encode(promql);
    let Ok((200, body)) = get(prometheus, &format!("/api/v1/query?query={encoded}")).await else {
        return Vec::new();
    };
    let answer: Value = serde_json::from_str(&body).unwrap_or_default();
    answer["data"]["result"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| {
            (
                r["metric"].clone(),
                r["value"][1].as_str().and_then(|v| v.parse().ok()).unwrap_or(f64::NAN),
            )
        })
        .collect()
}

/// Poll `check` until it returns `Some`, for at most `limit`.
async fn eventually<T, F, Fut>(limit: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            start.elapsed() < limit,
            "Prometheus did not show {what} within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn value_of(results: &[(Value, f64)], label: &str, value: &str) -> Option<f64> {
    results.iter().find(|(m, _)| m[label] == value).map(|(_, v)| *v)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_prometheus_scrapes_the_calls_and_the_journal_and_fires_the_in_doubt_alert() {
    let Some((prometheus, _)) = prometheus_binaries() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteStore::open(dir.path().join("journal.db")).unwrap());
    let metrics = PrometheusMetrics::install()
        .expect("the first recorder of this test binary")
        .with_journal(Arc::new(TenMinutesLater(store.clone())));
    let endpoint = metrics.bind("127.0.0.1:0".parse().unwrap()).await.unwrap();

    // What the agent did: one refund asked three times, an email whose outcome is unknown (and
    // a retry of it, blocked), a deploy that waits for an operator.
    let engine = Engine::new(store.clone());
    let run = RunContext::new("run-1");
    for _ in 0..3 {
        engine
            .call(
                &IssueRefund,
                &run,
                CallOptions::default(),
                IssueRefundArgs { order_id: "o1".into() },
            )
            .await
            .unwrap();
    }
    let email = SendEmailArgs {
        to: "ann@example.com".into(),
    };
    assert!(
        engine
            .call(&SendEmail, &run, CallOptions::default(), email.clone())
            .await
            .is_err()
    );
    let blocked = engine
        .call(&SendEmail, &run, CallOptions::default(), email)
        .await
        .unwrap_err();
    assert!(blocked.as_blocked().is_some(), "{blocked}");
    let parked = engine
        .call(
            &Deploy,
            &run,
            CallOptions::default(),
            DeployArgs { release: "v2".into() },
        )
        .await
        .unwrap_err();
    assert!(parked.as_approval_pending().is_some(), "{parked}");
    assert_eq!((BANK.requests(), MAIL.requests(), DEPLOYS.requests()), (1, 1, 0));

    // The dashboard and the rules query only metrics effect-tool records, and the page serves
    // only those, each with its help text.
    let known: Vec<String> = effect_tool::engine::METRICS
        .iter()
        .flat_map(|m| match m.kind {
            MetricKind::Histogram => vec![
                format!("{}_bucket", m.name),
                format!("{}_count", m.name),
                format!("{}_sum", m.name),
            ],
            _ => vec![m.name.to_owned()],
        })
        .collect();
    for name in metric_names_queried() {
        assert!(
            known.contains(&name),
            "the dashboard or the rules query `{name}`, which effect-tool does not record"
        );
    }
    let (status, page) = get(endpoint.local_addr(), "/metrics").await.unwrap();
    assert_eq!(status, 200);
    for line in page.lines().filter(|l| !l.starts_with('#') && !l.is_empty()) {
        let name = line.split(['{', ' ']).next().unwrap();
        assert!(
            known.iter().any(|k| k == name),
            "the page serves `{name}`, not in METRICS:\n{page}"
        );
    }
    assert!(
        page.contains("# HELP effect_tool_calls_total Tool calls that ended"),
        "{page}"
    );

    let server = start_prometheus(&prometheus, endpoint.local_addr());
    let calls = eventually(Duration::from_secs(60), "the refund's calls", || async {
        let r = query(
            server.addr,
            r#"sum by (disposition) (effect_tool_calls_total{tool="issue_refund"})"#,
        )
        .await;
        (value_of(&r, "disposition", "replayed") == Some(2.0)).then_some(r)
    })
    .await;
    assert_eq!(value_of(&calls, "disposition", "executed"), Some(1.0), "{calls:?}");

    let email_calls = query(server.addr, r#"effect_tool_calls_total{tool="send_email"}"#).await;
    // Both email calls ended blocked (the first once its outcome was unknown); one email went out.
    assert_eq!(
        value_of(&email_calls, "disposition", "blocked"),
        Some(2.0),
        "{email_calls:?}"
    );
    let latency = query(
        server.addr,
        r#"effect_tool_call_duration_seconds_count{tool="issue_refund"}"#,
    )
    .await;
    assert_eq!(latency.iter().map(|(_, v)| v).sum::<f64>(), 3.0, "{latency:?}");
    let store_ops = query(
        server.addr,
        r#"sum by (operation) (effect_tool_store_operation_duration_seconds_count{store="sqlite"})"#,
    )
    .await;
    assert!(
        value_of(&store_ops, "operation", "claim").is_some_and(|n| n >= 3.0),
        "{store_ops:?}"
    );

    let waiting = query(server.addr, "effect_tool_records_needing_person").await;
    assert_eq!(value_of(&waiting, "state", "in-doubt"), Some(1.0), "{waiting:?}");
    assert_eq!(
        value_of(&waiting, "state", "awaiting-approval"),
        Some(1.0),
        "{waiting:?}"
    );
    let age = query(
        server.addr,
        r#"effect_tool_records_needing_person_oldest_age_seconds{state="in-doubt"}"#,
    )
    .await;
    assert!(age.first().is_some_and(|(_, v)| *v >= 600.0), "{age:?}");
    assert_eq!(
        query(server.addr, "effect_tool_journal_up")
            .await
            .first()
            .map(|(_, v)| *v),
        Some(1.0)
    );

    // The rules are loaded and healthy, and the in-doubt alert fires for the email.
    let (_, rules) = get(server.addr, "/api/v1/rules").await.unwrap();
    let rules: Value = serde_json::from_str(&rules).unwrap();
    let loaded: Vec<&Value> = rules["data"]["groups"][0]["rules"].as_array().unwrap().iter().collect();
    assert_eq!(loaded.len(), 5, "{rules}");
    let firing = eventually(Duration::from_secs(60), "the in-doubt alert firing", || async {
        let (_, alerts) = get(server.addr, "/api/v1/alerts").await.ok()?;
        let alerts: Value = serde_json::from_str(&alerts).ok()?;
        alerts["data"]["alerts"]
            .as_array()?
            .iter()
            .find(|a| a["labels"]["alertname"] == "EffectToolRecordInDoubt" && a["state"] == "firing")
            .cloned()
    })
    .await;
    assert_eq!(firing["labels"]["tool"], "send_email", "{firing}");
    assert!(loaded.iter().all(|r| r["health"] == "ok"), "{rules}");

    // A person resolves it: the gauge goes back to 0 on the next scrape.
    use effect_tool::{StoreExt, Verdict};
    let key = store
        .list(&Filter::all())
        .await
        .unwrap()
        .into_iter()
        .find(|r| r.tool == "send_email")
        .unwrap()
        .key;
    store.resolve(&key, "oncall", Verdict::NotApplied).await.unwrap();
    eventually(Duration::from_secs(60), "the in-doubt gauge back to 0", || async {
        let r = query(server.addr, r#"effect_tool_records_needing_person{state="in-doubt"}"#).await;
        (r.len() == 1 && r[0].1 == 0.0).then_some(())
    })
    .await;
    endpoint.shutdown().await;
}

/// Every metric name the dashboard's queries and the alert rules use (histograms by their
/// `_bucket`/`_count` series).
fn metric_names_queried() -> Vec<String> {
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(deploy_dir().join("grafana/effect-tool-dashboard.json")).unwrap(),
    )
    .unwrap();
    let mut exprs: Vec<String> = dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["targets"].as_array().unwrap().iter())
        .map(|t| t["expr"].as_str().unwrap().to_owned())
        .collect();
    let rules = std::fs::read_to_string(deploy_dir().join("prometheus/effect-tool-alerts.yml")).unwrap();
    exprs.extend(
        rules
            .lines()
            .filter_map(|l| l.trim().strip_prefix("expr:").map(str::to_owned)),
    );
    let mut names: Vec<String> = exprs
        .iter()
        .flat_map(|e| {
            e.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .filter(|w| w.starts_with("effect_tool_"))
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect();
    names.sort();
    names.dedup();
    assert!(names.len() >= 8, "{names:?}");
    names
}
