//! `effect-tool serve`, the real binary, as issue 29.5 attacked the console: it answers only to
//! the names it is given (the loopback names on the port it listens on, by default), takes
//! actions only from pages of its origins, and refuses a tokens file others may read.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;

use common::{Journal, Server, serve_with};

const TOKEN: &str = "tok-rosa-ops-00000001";

/// `effect-tool --store J serve --listen 127.0.0.1:0 --tokens FILE ARGS`, once it listens.
fn serve(j: &Journal, tokens: &std::path::Path, args: &[&str]) -> Server {
    let mut all = vec!["--tokens", tokens.to_str().unwrap()];
    all.extend(args);
    serve_with(j, &all)
}

/// One HTTP/1.1 request with these header lines (and no others but the token's): the status.
fn status(server: &Server, method: &str, path: &str, headers: &[&str]) -> u16 {
    let mut stream = TcpStream::connect(&server.addr).unwrap();
    let body = r#"{"run":"r"}"#;
    let mut text = format!(
        "{method} {path} HTTP/1.1\r\nConnection: close\r\nAuthorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    for h in headers {
        text.push_str(h);
        text.push_str("\r\n");
    }
    text.push_str("\r\n");
    text.push_str(body);
    stream.write_all(text.as_bytes()).unwrap();
    let mut raw = String::new();
    stream.read_to_string(&mut raw).unwrap();
    raw.split(' ').nth(1).unwrap().parse().unwrap()
}

fn tokens_file(j: &Journal, mode: u32) -> std::path::PathBuf {
    let tokens = std::path::Path::new(&j.spec).with_file_name("operators.tokens");
    std::fs::write(&tokens, format!("{TOKEN} rosa ops\n")).unwrap();
    std::fs::set_permissions(&tokens, std::fs::Permissions::from_mode(mode)).unwrap();
    tokens
}

#[test]
fn serve_answers_to_the_loopback_names_on_its_port_unless_told_other_names() {
    let j = Journal::sqlite("serve-hosts");
    let tokens = tokens_file(&j, 0o600);

    let server = serve(&j, &tokens, &[]);
    let port = server.addr.rsplit(':').next().unwrap().to_owned();
    let host = |name: &str| format!("Host: {name}");
    assert_eq!(status(&server, "GET", "/api/me", &[&host(&server.addr)]), 200);
    assert_eq!(
        status(&server, "GET", "/api/me", &[&host(&format!("localhost:{port}"))]),
        200
    );
    // A page whose name was rebound to 127.0.0.1, and another port of this machine.
    assert_eq!(
        status(&server, "GET", "/api/me", &[&host(&format!("evil.example:{port}"))]),
        421
    );
    assert_eq!(status(&server, "GET", "/api/me", &[&host("127.0.0.1:1")]), 421);
    assert_eq!(
        status(&server, "GET", "/", &[&host(&format!("evil.example:{port}"))]),
        421
    );
    // The metrics are not the console's: they answer to any name, as before.
    assert_eq!(status(&server, "GET", "/metrics", &[&host("evil.example")]), 200);
    drop(server);

    let server = serve(
        &j,
        &tokens,
        &[
            "--allow-host",
            "console.example.com",
            "--allow-origin",
            "https://console.example.com",
        ],
    );
    let named = host("console.example.com");
    assert_eq!(status(&server, "GET", "/api/me", &[&named]), 200);
    assert_eq!(status(&server, "GET", "/api/me", &[&host(&server.addr)]), 421);
    // `serve` has no engine to compensate with: 501 is past every check.
    let origin = "Origin: https://console.example.com";
    assert_eq!(status(&server, "POST", "/api/compensate", &[&named, origin]), 501);
    let other = "Origin: http://console.example.com";
    assert_eq!(status(&server, "POST", "/api/compensate", &[&named, other]), 403);
}

#[test]
fn serve_refuses_names_and_origins_it_cannot_use() {
    let j = Journal::sqlite("serve-bad-hosts");
    let tokens = tokens_file(&j, 0o600);
    let tokens = tokens.to_str().unwrap();
    for (flag, value) in [
        ("--allow-host", "https://console.example.com"),
        ("--allow-host", "console.example.com:http"),
        ("--allow-origin", "console.example.com"),
        ("--allow-origin", "https://console.example.com/console"),
    ] {
        let out = j.cli(&["serve", "--listen", "127.0.0.1:0", "--tokens", tokens, flag, value]);
        assert_eq!(out.code, 2, "{flag} {value}: {out:#?}");
        assert!(out.stderr.contains(value), "{out:#?}");
    }
}

#[test]
fn serve_refuses_a_tokens_file_its_group_or_others_may_read() {
    let j = Journal::sqlite("serve-open-tokens");
    for mode in [0o644, 0o640, 0o604, 0o660] {
        let tokens = tokens_file(&j, mode);
        let out = j.cli(&["serve", "--listen", "127.0.0.1:0", "--tokens", tokens.to_str().unwrap()]);
        let err = out.fails(2);
        assert!(
            err.contains(&format!("mode {mode:04o}")) && err.contains("chmod 0600"),
            "{err}"
        );
        assert!(!err.contains(TOKEN), "{err}");
    }
}

#[test]
fn behind_a_proxy_with_a_secret_other_local_processes_name_nobody() {
    let j = Journal::sqlite("serve-proxy-secret");
    let secret = std::path::Path::new(&j.spec).with_file_name("proxy.secret");
    std::fs::write(&secret, "0123456789abcdef0123456789abcdef\n").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let server = serve_with(
        &j,
        &[
            "--trusted-proxy",
            "127.0.0.1",
            "--proxy-secret-file",
            secret.to_str().unwrap(),
        ],
    );
    let host = format!("Host: {}", server.addr);
    let user = "X-Forwarded-User: maria";
    // Any local process connects from 127.0.0.1; only the proxy knows the secret.
    assert_eq!(status(&server, "GET", "/api/me", &[&host, user]), 401);
    let wrong = "X-Effect-Tool-Proxy-Secret: 0123456789abcdef0123456789abcdeX";
    assert_eq!(status(&server, "GET", "/api/me", &[&host, user, wrong]), 401);
    let right = "X-Effect-Tool-Proxy-Secret: 0123456789abcdef0123456789abcdef";
    assert_eq!(status(&server, "GET", "/api/me", &[&host, user, right]), 200);
    assert_eq!(status(&server, "GET", "/api/me", &[&host, user, right, right]), 400);
    drop(server);

    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = j.cli(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--trusted-proxy",
        "127.0.0.1",
        "--proxy-secret-file",
        secret.to_str().unwrap(),
    ]);
    assert!(out.fails(2).contains("chmod 0600"), "{out:#?}");
}
