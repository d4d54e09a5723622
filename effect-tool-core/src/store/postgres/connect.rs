//! Opening connections: libpq's `sslmode=prefer` fallback, and reconnecting with backoff.
//!
//! - **`prefer` falls back to plain TCP** when the TLS attempt fails after the server accepted
//!   TLS (the handshake fails, or the server refuses the encrypted connection, e.g. a
//!   `hostnossl`-only `pg_hba.conf` line), as libpq does. A server that does not offer TLS is
//!   connected to in plain TCP at once (tokio-postgres's own `prefer`).
//! - **Backoff.** While the server cannot be reached (stopped, failing over, restarting), the
//!   store does not send every caller at it at once: after a failed connection attempt the
//!   next waits 25 ms, doubling to at most 1 s (with jitter), all callers sharing one schedule,
//!   and [`PgOptions::connect_timeout`](super::PgOptions::connect_timeout) bounds how long one
//!   operation keeps trying. Only once the store has connected: a store that never reached its
//!   server (a wrong address, a server that is not there) says so at once. A multi-host string (`host=a,b target_session_attrs=read-write`)
//!   is tried host by host on every attempt, so a promoted standby is found by the next one.
//!   When the password file gives the hosts different passwords, each host is tried with its
//!   own ([`attempts`]), as libpq does.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use deadpool_postgres::Connect;
use futures::future::BoxFuture;
use tokio::time::Instant;
use tokio_postgres::config::SslMode as PgSslMode;
use tokio_postgres_rustls::MakeRustlsConnect;

use super::libpq::{self, HostPasswords};

/// The store's [`Connect`]: tokio-postgres's, with libpq's `prefer` fallback, and each host with
/// its own password from the password file.
pub(super) struct Connector {
    pub tls: MakeRustlsConnect,
    /// `sslmode=prefer`: retry in plain TCP when the TLS attempt fails.
    pub prefer: bool,
    /// The password file's password of each host, when they differ.
    pub passwords: HostPasswords,
}

impl Connect for Connector {
    fn connect(
        &self,
        pg_config: &tokio_postgres::Config,
    ) -> BoxFuture<'_, Result<(tokio_postgres::Client, tokio::task::JoinHandle<()>), tokio_postgres::Error>> {
        let attempts = attempts(pg_config, &self.passwords);
        let tls = self.tls.clone();
        let prefer = self.prefer;
        Box::pin(async move {
            let mut failed = None;
            for config in attempts {
                match connect_once(config, tls.clone(), prefer).await {
                    Ok(connected) => return Ok(connected),
                    Err(e) => failed = Some(e),
                }
            }
            Err(failed.expect("attempts() gives at least one configuration"))
        })
    }
}

/// Connect with `config` (its hosts tried in order by tokio-postgres), falling back to plain
/// TCP after a failed TLS attempt when `prefer`.
async fn connect_once(
    config: tokio_postgres::Config,
    tls: MakeRustlsConnect,
    prefer: bool,
) -> Result<(tokio_postgres::Client, tokio::task::JoinHandle<()>), tokio_postgres::Error> {
    match config.connect(tls).await {
        Ok((client, connection)) => Ok((client, spawn(connection))),
        Err(e) if prefer && failed_after_tls(&e) => {
            tracing::debug!(error = %super::error_chain(&e), "PostgreSQL: the TLS attempt failed (sslmode=prefer); trying plain TCP, as libpq does");
            let mut plain = config.clone();
            plain.ssl_mode(PgSslMode::Disable);
            match plain.connect(tokio_postgres::NoTls).await {
                Ok((client, connection)) => Ok((client, spawn(connection))),
                // The plain attempt's error says why the server refused it too.
                Err(plain_error) => {
                    tracing::debug!(error = %super::error_chain(&plain_error), "PostgreSQL: the plain attempt failed too");
                    Err(plain_error)
                }
            }
        }
        Err(e) => Err(e),
    }
}

/// The configurations to connect with, in the order to try them (never none): `config`
/// itself, or, when the password file gives its hosts different passwords, one per host with
/// its own password (libpq looks the password up for each host it tries), shuffled when
/// `load_balance_hosts=random`.
pub(super) fn attempts(config: &tokio_postgres::Config, passwords: &HostPasswords) -> Vec<tokio_postgres::Config> {
    let Some(passwords) = passwords else {
        return vec![config.clone()];
    };
    let mut hosts: Vec<usize> = (0..libpq::host_count(config)).collect();
    if config.get_load_balance_hosts() == tokio_postgres::config::LoadBalanceHosts::Random {
        fastrand::shuffle(&mut hosts);
    }
    let per_host: Vec<_> = hosts
        .into_iter()
        .map(|i| libpq::host_config(config, i, passwords.get(i).and_then(Option::as_deref)))
        .collect();
    if per_host.is_empty() {
        vec![config.clone()]
    } else {
        per_host
    }
}

/// Drive a connection on its own task until it closes.
fn spawn<F>(connection: F) -> tokio::task::JoinHandle<()>
where
    F: std::future::Future<Output = Result<(), tokio_postgres::Error>> + Send + 'static,
{
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(error = %e, "PostgreSQL connection closed");
        }
    })
}

/// Whether a failed connection got as far as TLS: a handshake error (rustls), or the server's
/// own refusal (an error message from it, which in `prefer` mode came over TLS when the server
/// offers it).
pub(super) fn failed_after_tls(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(err);
    while let Some(e) = next {
        if e.downcast_ref::<rustls::Error>().is_some() || e.downcast_ref::<tokio_postgres::error::DbError>().is_some() {
            return true;
        }
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && io
                .get_ref()
                .is_some_and(|inner| inner.downcast_ref::<rustls::Error>().is_some())
        {
            return true;
        }
        next = e.source();
    }
    false
}

/// The first wait after a failed connection attempt, and the longest.
const BACKOFF: (Duration, Duration) = (Duration::from_millis(25), Duration::from_secs(1));

/// One schedule of reconnection attempts, shared by a store's callers.
#[derive(Default)]
pub(super) struct Backoff {
    state: Mutex<State>,
    /// Whether a connection was ever made: until then a failure is reported at once (a
    /// wrong address or a server that is not there should not take `connect_timeout` to say so).
    connected: AtomicBool,
}

#[derive(Default)]
struct State {
    /// Failed attempts in a row.
    failures: u32,
    /// No attempt before this.
    not_before: Option<Instant>,
}

impl Backoff {
    /// Wait until the schedule allows the next attempt.
    pub(super) async fn wait(&self) {
        let at = self.state.lock().unwrap_or_else(|e| e.into_inner()).not_before;
        if let Some(at) = at {
            tokio::time::sleep_until(at).await;
        }
    }

    /// An attempt failed: the next waits longer. How long the next waits.
    pub(super) fn failed(&self) -> Duration {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.failures = s.failures.saturating_add(1);
        let wait = BACKOFF
            .0
            .saturating_mul(1 << s.failures.min(10).saturating_sub(1))
            .min(BACKOFF.1);
        // Up to a quarter less, so that many workers do not come back in step.
        let wait = wait.mul_f64(1.0 - fastrand::f64() / 4.0);
        s.not_before = Some(Instant::now() + wait);
        wait
    }

    /// Whether the store ever connected (only then is a failure worth attempts with backoff).
    pub(super) fn reconnecting(&self) -> bool {
        self.connected.load(Ordering::Relaxed)
    }

    /// A connection was made: attempts go at once again.
    pub(super) fn succeeded(&self) {
        self.connected.store(true, Ordering::Relaxed);
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if s.failures > 0 {
            tracing::info!(failures = s.failures, "PostgreSQL reachable again");
        }
        *s = State::default();
    }
}
