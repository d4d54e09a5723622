//! The console behind an authenticating proxy, attacked as issue 29.5 attacked it: a web page
//! whose DNS name is rebound to the console's address, a page of another origin, and a client
//! that adds its own identity header beside the proxy's. Real HTTP/1.1 requests, written byte by
//! byte (an HTTP client library would fold or refuse the repeated headers these attacks send),
//! to a real console server whose proxy is `127.0.0.1`: every test connection comes from there,
//! so every request below is one the console would believe came through the proxy.
#![cfg(all(feature = "console", feature = "sqlite"))]

use crate::common;

use std::net::SocketAddr;
use std::sync::Arc;

use common::console::parked_refund;
use common::http::exchange;
use effect_tool::Store;
use effect_tool::ops::console::{Console, Identity, StaticTokens, TrustedHeader};

/// `method path` with exactly these header lines (no `Host` unless given), over a fresh
/// connection: the status and the body as JSON (`null` when it is not JSON).
async fn raw(addr: SocketAddr, method: &str, path: &str, headers: &[&str], body: &str) -> (u16, serde_json::Value) {
    let mut text = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    for h in headers {
        text.push_str(h);
        text.push_str("\r\n");
    }
    text.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    let answer = exchange(addr, &text).await.unwrap();
    (answer.status, answer.json())
}

/// A refund of 100 parked for a manager's approval, in a fresh journal; the console over it
/// (made by `console`) served on a free loopback port.
async fn parked(
    console: impl FnOnce(Arc<dyn Store>) -> Console,
) -> (SocketAddr, Arc<dyn Store>, String, tempfile::TempDir) {
    let parked = parked_refund("desk", console).await;
    (parked.addr, parked.store, parked.key, parked.dir)
}

async fn state(store: &Arc<dyn Store>, key: &str) -> String {
    store.get(key).await.unwrap().unwrap().state.as_str().to_owned()
}

fn proxied(store: Arc<dyn Store>) -> Console {
    Console::new(store, TrustedHeader::new(["127.0.0.1".parse().unwrap()]))
}

#[tokio::test]
async fn a_rebound_page_an_other_origin_and_a_doubled_identity_header_cannot_approve() {
    let (addr, store, key, _dir) = parked(proxied).await;
    let port = addr.port();
    let approve = serde_json::json!({ "key": key }).to_string();
    let json = "Content-Type: application/json";
    let user = "X-Forwarded-User: mallory";
    let groups = "X-Forwarded-Groups: manager";

    // The page at evil.example, its name rebound to 127.0.0.1: to the browser this request is
    // same-origin, so it may set any header. Refused for its Host, pages included.
    let host = format!("Host: evil.example:{port}");
    let origin = format!("Origin: http://evil.example:{port}");
    let (status, answer) = raw(
        addr,
        "POST",
        "/api/approve",
        &[&host, &origin, json, user, groups],
        &approve,
    )
    .await;
    assert_eq!(status, 421, "{answer}");
    let error = answer["error"].as_str().unwrap();
    assert!(
        error.contains("`evil.example:") && error.contains("127.0.0.1"),
        "{error}"
    );
    assert!(answer["hint"].as_str().unwrap().contains("--allow-host"), "{answer}");
    assert_eq!(raw(addr, "GET", "/", &[&host], "").await.0, 421);
    assert_eq!(raw(addr, "GET", "/api/me", &[&host, user, groups], "").await.0, 421);
    assert_eq!(raw(addr, "GET", "/api/me", &[user, groups], "").await.0, 400, "no Host");

    // Addressed to the console's own name, but from a page of another origin.
    let host = format!("Host: 127.0.0.1:{port}");
    let (status, answer) = raw(
        addr,
        "POST",
        "/api/approve",
        &[&host, &origin, json, user, groups],
        &approve,
    )
    .await;
    assert_eq!(status, 403, "{answer}");
    assert!(answer["hint"].as_str().unwrap().contains("--allow-origin"), "{answer}");
    let same_host_origin = format!("Origin: http://localhost.evil.example:{port}");
    let rebound_host = format!("Host: localhost.evil.example:{port}");
    assert_eq!(
        raw(
            addr,
            "POST",
            "/api/approve",
            &[&rebound_host, &same_host_origin, json, user, groups],
            &approve
        )
        .await
        .0,
        421
    );

    // A client that sends its own identity header beside the proxy's (a proxy that appends).
    for doubled in [
        [user, "X-Forwarded-User: maria", groups],
        [user, groups, "X-Forwarded-Groups: manager"],
    ] {
        let mut headers = vec![host.as_str(), json];
        headers.extend(doubled);
        let (status, answer) = raw(addr, "POST", "/api/approve", &headers, &approve).await;
        assert_eq!(status, 400, "{answer}");
        assert!(answer["error"].as_str().unwrap().contains("more than once"), "{answer}");
        assert!(answer["hint"].as_str().unwrap().contains("replace"), "{answer}");
    }
    assert_eq!(state(&store, &key).await, "awaiting-approval");

    // The proxy's own requests, to the console's name and from its page, are served.
    let own = format!("Origin: http://127.0.0.1:{port}");
    let (status, me) = raw(addr, "GET", "/api/me", &[&host, &own, user, groups], "").await;
    assert_eq!((status, &me["name"]), (200, &serde_json::json!("mallory")), "{me}");
    let localhost = format!("Host: localhost:{port}");
    assert_eq!(raw(addr, "GET", "/api/me", &[&localhost, user], "").await.0, 200);
    assert_eq!(
        raw(addr, "GET", "/api/me", &[&format!("Host: [::1]:{port}"), user], "")
            .await
            .0,
        200
    );
}

#[tokio::test]
async fn the_names_and_origins_a_deployment_configures_replace_the_loopback_ones() {
    let (addr, store, key, _dir) = parked(|store| {
        let console: Console = proxied(store);
        console
            .with_allowed_hosts(["console.example.com"])
            .with_allowed_origins(["https://console.example.com"])
    })
    .await;
    let user = "X-Forwarded-User: maria";
    let host = "Host: console.example.com";
    let (status, me) = raw(addr, "GET", "/api/me", &[host, user], "").await;
    assert_eq!((status, &me["name"]), (200, &serde_json::json!("maria")), "{me}");
    // Loopback names are no longer among them.
    let loopback = format!("Host: 127.0.0.1:{}", addr.port());
    assert_eq!(raw(addr, "GET", "/api/me", &[&loopback, user], "").await.0, 421);
    // The console's origin may act (compensation is the action this console cannot do: 501
    // is past every check); an http page under the same name may not.
    let body = serde_json::json!({ "run": "desk" }).to_string();
    let json = "Content-Type: application/json";
    let origin = "Origin: https://console.example.com";
    assert_eq!(
        raw(addr, "POST", "/api/compensate", &[host, origin, json, user], &body)
            .await
            .0,
        501
    );
    let plain = "Origin: http://console.example.com";
    let (status, answer) = raw(addr, "POST", "/api/compensate", &[host, plain, json, user], &body).await;
    assert_eq!(status, 403, "{answer}");
    assert!(
        answer["error"]
            .as_str()
            .unwrap()
            .contains("https://console.example.com"),
        "{answer}"
    );
    assert_eq!(state(&store, &key).await, "awaiting-approval");
}

#[tokio::test]
async fn a_second_bearer_token_is_refused_not_chosen_from() {
    const MARIA: &str = "tok-maria-manager-0001";
    const IVY: &str = "tok-ivy-intern-000003";
    let (addr, _store, _key, _dir) = parked(|store| {
        Console::new(
            store,
            StaticTokens::new()
                .with(MARIA, Identity::new("maria", ["manager"]))
                .with(IVY, Identity::new("ivy", ["operator"])),
        )
    })
    .await;
    let host = format!("Host: {addr}");
    let (maria, ivy) = (
        format!("Authorization: Bearer {MARIA}"),
        format!("Authorization: Bearer {IVY}"),
    );
    let (status, answer) = raw(addr, "GET", "/api/me", &[&host, &ivy, &maria], "").await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(raw(addr, "GET", "/api/me", &[&host, &maria], "").await.0, 200);
}
