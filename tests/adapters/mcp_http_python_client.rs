//! The MCP server over Streamable HTTP, tested by an external client: the support desk of
//! `examples/mcp_server.rs` is served in-process on a free port of 127.0.0.1, and the official
//! Python `mcp` SDK's Streamable HTTP client lists its tools, calls an idempotent tool, and
//! calls it again from a new HTTP session, counting effects in a ledger file the desk's tools
//! append to (see `tests/mcp_client/http_client.py`). Two clients at once, anonymous or as two
//! principals with bearer tokens, must never share a run (`tests/mcp_client/isolation.py`);
//! requests without a token, with a bad one or from a foreign `Origin` are refused at the HTTP
//! layer.
//!
//! Needs `python3 -m pip install -r tests/mcp_client/requirements.txt` (scripts/test.sh does it).

#![cfg(all(feature = "mcp-http", feature = "sqlite"))]

use crate::common;

use std::net::SocketAddr;
use std::path::Path;

use common::http::Answer;
use common::mcp;
use common::python::{client_passed, client_script, python, require_http_client};
use effect_tool::adapters::mcp::jsonwebtoken::{
    Algorithm, DecodingKey, EncodingKey, Header, encode, get_current_timestamp,
};
use effect_tool::adapters::mcp::{JwtAuthenticator, McpHttpConfig, McpHttpHandle, McpLimits, McpServeError, McpServer};
use effect_tool::store::sqlite::SqliteStore;
use effect_tool::{Engine, MemoryStore, Toolkit};

/// The example's support desk (its `main` is not used here).
#[allow(dead_code)]
#[path = "../../examples/mcp_server.rs"]
mod example;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_python_http_client_retries_a_call_from_a_new_session_with_one_effect() {
    let python = python();
    require_http_client(&python);

    let dir = tempfile::tempdir().unwrap();
    let ledger = dir.path().join("ledger.txt");
    let engine = Engine::new(SqliteStore::open(dir.path().join("journal.db")).unwrap());
    let server = McpServer::new(example::support_desk(ledger.clone()), engine)
        .with_server_info("effect-tool-support-desk", env!("CARGO_PKG_VERSION"));
    let handle = server.bind_http("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let url = handle.url();
    assert!(url.starts_with("http://127.0.0.1:") && url.ends_with("/mcp"), "{url}");

    let script = client_script("http_client.py");
    let out = tokio::process::Command::new(&python)
        .arg(&script)
        .arg(&url)
        .env("EFFECT_TOOL_LEDGER", &ledger)
        .kill_on_drop(true)
        .output()
        .await
        .expect("python3 runs");
    handle.shutdown().await.unwrap();
    let stdout = client_passed(&out);
    assert!(
        stdout.contains("issue_refund retried from a new session: recorded result, no second refund"),
        "{stdout}"
    );
    assert!(stdout.contains("bad arguments come back as isError"), "{stdout}");
    assert!(stdout.contains("ok: two connections, two MCP sessions"), "{stdout}");

    assert!(
        stdout.contains("arguments over the size limit come back as isError"),
        "{stdout}"
    );

    // Checked here too, independently of the client: four refund calls over two sessions, one
    // refund per run: the client's run from `_meta` (once), and each session's own run.
    let text = std::fs::read_to_string(&ledger).unwrap();
    let refunds: Vec<&str> = text.lines().filter(|l| l.starts_with("refund ")).collect();
    assert_eq!(refunds.len(), 3, "ledger:\n{text}");
    assert!(refunds[0].ends_with(" A-1001 1500"), "ledger:\n{text}");
    assert!(refunds[1].ends_with(" A-1002 700"), "ledger:\n{text}");
    assert!(refunds[2].ends_with(" A-1002 700"), "ledger:\n{text}");
    assert_ne!(
        refunds[1], refunds[2],
        "two sessions' runs, two refund ids; ledger:\n{text}"
    );
    assert_eq!(
        text.lines().count(),
        3,
        "only the refunds reach the world; ledger:\n{text}"
    );
}

#[tokio::test]
async fn http_server_reports_its_port_says_what_to_do_when_the_address_is_taken_and_shuts_down() {
    let server = McpServer::new(Toolkit::new(), Engine::new(MemoryStore::new()));
    let handle = server.clone().bind_http("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let addr = handle.local_addr();
    assert_ne!(addr.port(), 0);
    assert_eq!(handle.url(), format!("http://{addr}/mcp"));

    let taken = server.bind_http(addr).await.unwrap_err();
    assert!(
        matches!(&taken, McpServeError::Bind { addr: a, source } if *a == addr && source.kind() == std::io::ErrorKind::AddrInUse),
        "{taken:?}"
    );
    let message = taken.to_string();
    assert!(message.contains(&addr.to_string()), "{message}");
    assert!(
        message.contains("pick another port (port 0 picks a free one)"),
        "{message}"
    );

    handle.shutdown().await.unwrap();
    // Once shut down, the address is free again: it can be bound anew. (The kernel may take a
    // moment to release the listening socket, so a few tries are allowed; another process can
    // also take a freed port, which is why this does not check that nothing answers there.)
    let mut rebound = None;
    for _ in 0..100 {
        match std::net::TcpListener::bind(addr) {
            Ok(listener) => {
                rebound = Some(listener);
                break;
            }
            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(10)).await,
        }
    }
    assert!(rebound.is_some(), "{addr} is still taken after shutdown");
}

const ISSUER: &str = "https://auth.example.test";
const SECRET: &[u8] = b"the issuer's signing secret, for this test only";

/// A JWT access token of `ISSUER` for the server at `audience`, naming `sub`.
fn access_token(sub: &str, audience: &str) -> String {
    let claims = serde_json::json!({
        "iss": ISSUER, "aud": audience, "sub": sub, "exp": get_current_timestamp() + 3600, "scope": "mcp",
    });
    let mut header = Header::new(Algorithm::HS256);
    header.kid = Some("test-key".into());
    encode(&header, &claims, &EncodingKey::from_secret(SECRET).unwrap()).unwrap()
}

/// The support desk on a free port with this config, journaled in `dir`.
async fn desk(dir: &Path, config: McpHttpConfig) -> McpHttpHandle {
    let engine = Engine::new(SqliteStore::open(dir.join("journal.db")).unwrap());
    McpServer::new(example::support_desk(dir.join("ledger.txt")), engine)
        .bind_http_with("127.0.0.1:0".parse().unwrap(), config)
        .await
        .unwrap()
}

/// The desk behind JWT bearer tokens (audience: its own URL, which is only known once bound,
/// so the port is bound first, freed, and bound again by the server).
async fn desk_with_jwt(dir: &Path) -> (McpHttpHandle, String) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let audience = format!("http://127.0.0.1:{port}/mcp");
    let auth = JwtAuthenticator::new(ISSUER, audience.clone())
        .with_key(
            Some("test-key"),
            Algorithm::HS256,
            DecodingKey::from_secret(SECRET).unwrap(),
        )
        .with_required_scopes(["mcp"]);
    let engine = Engine::new(SqliteStore::open(dir.join("journal.db")).unwrap());
    let handle = McpServer::new(example::support_desk(dir.join("ledger.txt")), engine)
        .bind_http_with(
            format!("127.0.0.1:{port}").parse().unwrap(),
            McpHttpConfig::default().with_authenticator(auth),
        )
        .await
        .unwrap();
    assert_eq!(handle.url(), audience);
    (handle, audience)
}

async fn run_client(script: &str, args: &[&str], ledger: &Path) -> String {
    let python = python();
    require_http_client(&python);
    let out = tokio::process::Command::new(&python)
        .arg(client_script(script))
        .args(args)
        .env("EFFECT_TOOL_LEDGER", ledger)
        .kill_on_drop(true)
        .output()
        .await
        .expect("python3 runs");
    client_passed(&out)
}

fn ledger_count(ledger: &Path, prefix: &str) -> usize {
    let text = std::fs::read_to_string(ledger).unwrap_or_default();
    text.lines().filter(|l| l.starts_with(prefix)).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_anonymous_clients_sending_the_same_unkeyed_irreversible_call_at_once_both_send_it() {
    let dir = tempfile::tempdir().unwrap();
    let handle = desk(dir.path(), McpHttpConfig::default()).await;
    let ledger = dir.path().join("ledger.txt");
    let stdout = run_client("isolation.py", &["anonymous", &handle.url()], &ledger).await;
    handle.shutdown().await.unwrap();
    assert!(stdout.contains("two runs, both emails sent"), "{stdout}");
    assert_eq!(ledger_count(&ledger, "email "), 2, "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_principal_can_neither_replay_nor_pre_empt_another_principals_call_and_its_own_retry_replays() {
    let dir = tempfile::tempdir().unwrap();
    let (handle, audience) = desk_with_jwt(dir.path()).await;
    let ledger = dir.path().join("ledger.txt");
    let (alice, bob) = (access_token("alice", &audience), access_token("bob", &audience));
    let stdout = run_client("isolation.py", &["principals", &handle.url(), &alice, &bob], &ledger).await;
    handle.shutdown().await.unwrap();
    assert!(stdout.contains("A's call still ran (not pre-empted)"), "{stdout}");
    assert!(stdout.contains("B's own call, not A's recorded output"), "{stdout}");
    assert!(stdout.contains("replays its own result"), "{stdout}");
    // One refund and one email per principal, whatever the retries.
    assert_eq!(
        (ledger_count(&ledger, "refund "), ledger_count(&ledger, "email ")),
        (2, 2),
        "{stdout}"
    );
}

/// An MCP `initialize` request with `headers` (`Name: value` lines).
async fn initialize(addr: SocketAddr, headers: &[&str]) -> Answer {
    mcp::post(addr, "POST", headers, mcp::INITIALIZE).await
}

#[tokio::test]
async fn requests_without_a_valid_token_get_401_pointing_at_the_metadata_and_a_foreign_origin_gets_403() {
    let dir = tempfile::tempdir().unwrap();
    let (handle, audience) = desk_with_jwt(dir.path()).await;
    let addr = handle.local_addr();
    let metadata_url = format!(
        "http://127.0.0.1:{}/.well-known/oauth-protected-resource/mcp",
        addr.port()
    );

    let answer = initialize(addr, &[]).await;
    assert_eq!(answer.status, 401, "{}", answer.body);
    let challenge = answer.header("www-authenticate").expect("a WWW-Authenticate header");
    assert_eq!(challenge, format!("Bearer resource_metadata=\"{metadata_url}\""));

    let forged = {
        let claims = serde_json::json!({"iss": ISSUER, "aud": audience, "sub": "alice", "exp": get_current_timestamp() + 3600, "scope": "mcp"});
        let mut h = Header::new(Algorithm::HS256);
        h.kid = Some("test-key".into());
        encode(
            &h,
            &claims,
            &EncodingKey::from_secret(b"not the issuer's secret at all").unwrap(),
        )
        .unwrap()
    };
    let answer = initialize(addr, &[&format!("Authorization: Bearer {forged}")]).await;
    assert_eq!(answer.status, 401, "{}", answer.body);
    let challenge = answer.header("www-authenticate").unwrap();
    assert!(challenge.contains("error=\"invalid_token\""), "{challenge}");
    assert!(
        !challenge.contains(&forged) && !answer.body.contains(&forged),
        "the token is echoed: {challenge} {}",
        answer.body
    );

    let other_audience = access_token("alice", "http://127.0.0.1:1/mcp");
    let answer = initialize(addr, &[&format!("Authorization: Bearer {other_audience}")]).await;
    assert_eq!(answer.status, 401, "a token for another server: {}", answer.body);

    // RFC 9728 metadata, at both paths, naming the issuer as the authorization server.
    for path in [
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-protected-resource",
    ] {
        let answer = common::http::get(addr, path).await.unwrap();
        assert_eq!(answer.status, 200, "{path}: {}", answer.body);
        assert_eq!(answer.header("content-type"), Some("application/json"));
        let doc: serde_json::Value = serde_json::from_str(&answer.body).unwrap();
        assert_eq!(doc["resource"], audience.as_str(), "{doc}");
        assert_eq!(doc["authorization_servers"], serde_json::json!([ISSUER]), "{doc}");
        assert_eq!(doc["scopes_supported"], serde_json::json!(["mcp"]), "{doc}");
    }

    let token = access_token("alice", &audience);
    let auth = format!("Authorization: Bearer {token}");
    let answer = initialize(addr, &[&auth, "Origin: https://evil.example"]).await;
    assert_eq!(answer.status, 403, "a foreign Origin: {}", answer.body);
    // The same request from an allowed (loopback) origin, and from a client without one, runs.
    let local_origin = format!("Origin: http://localhost:{}", addr.port());
    let answer = initialize(addr, &[&auth, &local_origin]).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert!(answer.body.contains("serverInfo"), "{}", answer.body);
    let answer = initialize(addr, &[&auth]).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    handle.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_foreign_origin_gets_403_without_an_authenticator_too() {
    let dir = tempfile::tempdir().unwrap();
    let handle = desk(dir.path(), McpHttpConfig::default()).await;
    let addr = handle.local_addr();
    let answer = initialize(addr, &["Origin: http://attacker.example"]).await;
    assert_eq!(answer.status, 403, "{}", answer.body);
    let answer = initialize(addr, &[]).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    handle.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_non_loopback_address_without_an_authenticator_is_refused_unless_opted_in() {
    let server = McpServer::new(Toolkit::new(), Engine::new(MemoryStore::new()));
    let any: SocketAddr = "0.0.0.0:0".parse().unwrap();
    let refused = server.clone().bind_http(any).await.unwrap_err();
    assert!(
        matches!(refused, McpServeError::Unauthenticated { addr } if addr == any),
        "{refused:?}"
    );
    let message = refused.to_string();
    assert!(message.contains("with_authenticator"), "{message}");
    assert!(message.contains("allow_unauthenticated_remote"), "{message}");

    let opted_in = server
        .bind_http_with(any, McpHttpConfig::default().allow_unauthenticated_remote())
        .await
        .unwrap();
    opted_in.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_session_beyond_a_callers_cap_gets_429_not_a_server_error() {
    let dir = tempfile::tempdir().unwrap();
    let limits = McpLimits {
        max_sessions_per_principal: 2,
        ..McpLimits::default()
    };
    let engine = Engine::new(SqliteStore::open(dir.path().join("journal.db")).unwrap());
    let handle = McpServer::new(example::support_desk(dir.path().join("ledger.txt")), engine)
        .with_limits(limits)
        .bind_http("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let addr = handle.local_addr();
    // Each `initialize` of the 2025-06-18 protocol opens a session (an Mcp-Session-Id).
    for n in 0..2 {
        let answer = initialize(addr, &[]).await;
        assert_eq!(answer.status, 200, "session {n}: {}", answer.body);
        assert!(
            answer.header("mcp-session-id").is_some(),
            "session {n}: {:?}",
            answer.headers
        );
    }
    let answer = initialize(addr, &[]).await;
    assert_eq!(answer.status, 429, "{}", answer.body);
    assert!(answer.body.contains("the limit per caller"), "{}", answer.body);
    handle.shutdown().await.unwrap();
}
