//! The operator console over real HTTP, as a script or the web console's pages use it: a console
//! served on a free loopback port, requests signed in with a bearer token, and a journal with a
//! refund parked for a manager's approval.

use std::net::SocketAddr;
use std::sync::Arc;

use effect_tool::ops::console::Console;
use effect_tool::store::sqlite::SqliteStore;
use effect_tool::{CallOptions, Engine, RunContext, Store};

use super::desk::ApprovedRefund;
use super::http::{Answer, encode, request};
use super::ledger::Downstream;

/// Serve `console` on a free loopback port (with the peer's address, as `TrustedHeader` needs).
pub async fn serve(console: Console) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = console.router().into_make_service_with_connect_info::<SocketAddr>();
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

/// `method path` with a JSON `body` (may be empty), signed in with `token`.
pub async fn call(addr: SocketAddr, token: &str, method: &str, path: &str, body: &str) -> Answer {
    let auth = format!("Authorization: Bearer {token}");
    request(addr, method, path, &[&auth, "Content-Type: application/json"], body)
        .await
        .unwrap()
}

/// `GET path`, signed in with `token`.
pub async fn get(addr: SocketAddr, token: &str, path: &str) -> Answer {
    let auth = format!("Authorization: Bearer {token}");
    request(addr, "GET", path, &[&auth], "").await.unwrap()
}

/// `POST path` with `body`, signed in with `token`.
pub async fn post(addr: SocketAddr, token: &str, path: &str, body: serde_json::Value) -> Answer {
    call(addr, token, "POST", path, &body.to_string()).await
}

/// The record page's data for `key`, as the page reads it with `token`.
pub async fn record(addr: SocketAddr, token: &str, key: &str) -> serde_json::Value {
    get(addr, token, &format!("/api/record?key={}", encode(key)))
        .await
        .json()
}

/// A journal with a refund of 100 parked for a manager's approval, and a console over it.
pub struct Parked {
    /// Where the console listens.
    pub addr: SocketAddr,
    /// The journal (SQLite, in `dir`).
    pub store: Arc<dyn Store>,
    /// The parked refund's key.
    pub key: String,
    /// The journal's folder, removed when dropped.
    pub dir: tempfile::TempDir,
}

/// A refund of 100 parked in `run` for a manager's approval, in a fresh SQLite journal; the
/// console over it (made by `console`) served on a free loopback port.
pub async fn parked_refund(run: &str, console: impl FnOnce(Arc<dyn Store>) -> Console) -> Parked {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("journal.db")).unwrap());
    let refund = ApprovedRefund(Arc::new(Downstream::default()));
    let key = Engine::new(store.clone())
        .call(&refund, &RunContext::new(run), CallOptions::default(), 100)
        .await
        .unwrap_err()
        .as_approval_pending()
        .unwrap()
        .key
        .clone();
    let addr = serve(console(store.clone())).await;
    Parked { addr, store, key, dir }
}
