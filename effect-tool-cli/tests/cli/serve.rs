//! `effect-tool serve`, the real binary: the journal's gauges at `/metrics`, the operator API for
//! the holders of a tokens file, loopback by default, providers' callbacks with `--callbacks`
//! (outside the API's host check), and a clean exit on SIGTERM.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;

use common::{Journal, serve_with};

/// One HTTP/1.1 request: the status and the body.
pub(crate) fn http(addr: &str, request: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut raw = String::new();
    stream.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    (head.split(' ').nth(1).unwrap().parse().unwrap(), body.to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_answers_metrics_and_the_operator_api_then_stops_on_sigterm() {
    let j = Journal::sqlite("serve");
    let key = j.key("deploy");
    j.awaiting(&key, &j.run_id("r"), "deploy", "ops").await;
    let tokens = std::path::Path::new(&j.spec).with_file_name("operators.tokens");
    std::fs::write(&tokens, "tok-rosa-ops-00000001 rosa ops\n").unwrap();
    // Operators' credentials: only their owner may read them (or `serve` refuses the file).
    std::fs::set_permissions(&tokens, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();

    let mut server = serve_with(&j, &["--tokens", tokens.to_str().unwrap()]);
    let addr = server.addr.clone();
    assert!(addr.starts_with("127.0.0.1:"), "{addr}");

    let (status, page) = http(
        &addr,
        &format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"),
    );
    assert_eq!(status, 200);
    assert!(
        page.contains(r#"effect_tool_records_needing_person{state="awaiting-approval",tool="deploy"} 1"#),
        "{page}"
    );
    let (status, _) = http(
        &addr,
        &format!("GET /api/records HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"),
    );
    assert_eq!(status, 401);
    let fingerprint = j.get(&key).await.unwrap().fingerprint;
    let body = serde_json::json!({ "key": key, "fingerprint": fingerprint }).to_string();
    let (status, answer) = http(
        &addr,
        &format!(
            "POST /api/approve HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nAuthorization: Bearer tok-rosa-ops-00000001\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        ),
    );
    assert_eq!(status, 200, "{answer}");
    let rec = j.get(&key).await.unwrap();
    assert_eq!(
        (rec.state.as_str(), rec.decided_by.as_deref()),
        ("approved", Some("rosa"))
    );

    // SIGTERM: the server stops and the command exits 0.
    let pid = server.child.id().to_string();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let status = server.child.wait().unwrap();
    assert!(status.success(), "{status:?}");
}

#[test]
fn serve_refuses_a_tokens_file_it_cannot_use() {
    let j = Journal::sqlite("serve-bad-tokens");
    let tokens = std::path::Path::new(&j.spec).with_file_name("bad.tokens");
    std::fs::write(&tokens, "short rosa ops\n").unwrap();
    std::fs::set_permissions(&tokens, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let out = j.cli(&["serve", "--listen", "127.0.0.1:0", "--tokens", tokens.to_str().unwrap()]);
    let err = out.fails(2);
    assert!(err.contains("line 1") && err.contains("shorter than 16"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_callbacks_settles_a_pending_record_for_a_provider_under_any_host_name() {
    use effect_tool_core::EffectClass;
    use effect_tool_core::decide::record::{Op, RecordState};
    use effect_tool_core::value::callback::CallbackToken;

    let j = Journal::sqlite("serve-callbacks");
    let key = j.key("payout");
    let run = j.run_id("r");
    // A call's record, pending a provider's callback, as a tool's process leaves it: claimed,
    // then pending under the token the provider was given.
    let attempt = j
        .claim(
            &key,
            &run,
            "payout",
            EffectClass::Irreversible,
            serde_json::json!({"cents": 100}),
        )
        .await;
    let secret = j.store.marker_secret().await.unwrap().expect("SQLite keeps a secret");
    let token = CallbackToken::issue(&secret, "payout", &key, attempt);
    let pend = Op::Pend {
        attempt,
        token_digest: token.digest(),
        deadline: j.store.now() + 600_000,
    };
    j.store.apply(&key, pend).await.unwrap();
    assert_eq!(j.get(&key).await.unwrap().state, RecordState::Pending);
    let body =
        serde_json::json!({ "token": token.to_string(), "verdict": "applied", "output": {"paid": true} }).to_string();
    // The provider knows this server by its own name for it.
    let post = || {
        format!(
            "POST /callback HTTP/1.1\r\nHost: hooks.example.com\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
    };

    // Without --callbacks there is no such route, and nothing is settled.
    let mut server = serve_with(&j, &[]);
    let (status, _) = http(&server.addr, &post());
    assert_eq!(status, 404);
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    assert_eq!(j.get(&key).await.unwrap().state, RecordState::Pending);

    // With the operator API beside it: the API keeps its host check, the callback route has
    // none (providers call from elsewhere; the token is the credential).
    let tokens = std::path::Path::new(&j.spec).with_file_name("operators.tokens");
    std::fs::write(&tokens, "tok-rosa-ops-00000001 rosa ops\n").unwrap();
    std::fs::set_permissions(&tokens, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let mut server = serve_with(&j, &["--callbacks", "--tokens", tokens.to_str().unwrap()]);
    let (status, _) = http(
        &server.addr,
        "GET /api/records HTTP/1.1\r\nHost: hooks.example.com\r\nConnection: close\r\nAuthorization: Bearer tok-rosa-ops-00000001\r\n\r\n",
    );
    assert_eq!(status, 421, "the operator API answers only to its own names");
    let (status, answer) = http(&server.addr, &post());
    assert_eq!(status, 200, "{answer}");
    let rec = j.get(&key).await.unwrap();
    assert_eq!(rec.state, RecordState::Completed, "{rec:?}");
    assert_eq!(rec.output, Some(serde_json::json!({"paid": true})));
    assert_eq!(rec.decided_by.as_deref(), Some("callback"));
    // Sent again, it is refused: the record is settled already.
    let (status, answer) = http(&server.addr, &post());
    assert_eq!(status, 409, "{answer}");
    let audit = j.store.audit(Some(&key)).await.unwrap();
    let actions: Vec<&str> = audit.iter().map(|e| e.action.as_str()).collect();
    assert!(
        actions.ends_with(&["callback-settled", "callback-refused"]),
        "{actions:?}"
    );
    server.child.kill().unwrap();
    server.child.wait().unwrap();
}
