//! Waking waiters when a person decides: `LISTEN`/`NOTIFY`.
//!
//! A person's decision (approve, deny, resolve, amend) sends the record's key on the schema's
//! channel (`pg_notify` in the statement that writes it, so the notification is delivered if
//! and only if the decision commits, by whichever process made it). One connection per store
//! object, outside the pool, opened on the first [`Store::changed`](crate::Store::changed),
//! listens on the channel and wakes the waiters of that key.
//!
//! - **Lost, then back.** When the listening connection is lost (a server restart, a
//!   failover), it is opened again with backoff (100 ms doubling to 5 s), and once it listens
//!   again every waiter is woken: a decision made while nobody listened would otherwise go
//!   unnoticed until the waiter's next poll. Waking is a hint: a woken waiter reads the record.
//! - **A dead peer** (a server host that vanished without closing the connection) is found by
//!   TCP keepalives (30 s idle).
//! - **Behind a pooler in transaction mode** `LISTEN` cannot work (the session it was sent in
//!   is given to other clients after the statement), so no listener is started and
//!   `changed` never completes: waiters poll (see
//!   [`PgOptions::transaction_pooler`](super::PgOptions::transaction_pooler)).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::broadcast;
use tokio_postgres::AsyncMessage;
use tokio_postgres::config::SslMode as PgSslMode;
use tokio_postgres::tls::TlsStream;
use tokio_postgres_rustls::MakeRustlsConnect;

use super::libpq::HostPasswords;

/// The payload that wakes every waiter (a key is never empty).
const ALL: &str = "";

/// The first wait before listening again after a lost connection, and the longest.
const BACKOFF: (Duration, Duration) = (Duration::from_millis(100), Duration::from_secs(5));

/// The notification channel of schema `schema`: `effect_tool.<schema>`, at most 63 bytes
/// (PostgreSQL's limit on identifiers; a schema name is ASCII).
pub(super) fn channel(schema: &str) -> String {
    let mut name = format!("effect_tool.{schema}");
    name.truncate(63);
    name
}

/// The listening connection of one store object and its waiters.
pub(super) struct Listener {
    config: tokio_postgres::Config,
    tls: MakeRustlsConnect,
    prefer: bool,
    passwords: HostPasswords,
    channel: String,
    wake: broadcast::Sender<Arc<str>>,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Listener {
    /// A listener on `channel` (not yet listening: [`Listener::changed`] starts it).
    pub(super) fn new(
        mut config: tokio_postgres::Config,
        tls: MakeRustlsConnect,
        prefer: bool,
        passwords: HostPasswords,
        channel: String,
    ) -> Listener {
        config.keepalives(true).keepalives_idle(Duration::from_secs(30));
        Listener {
            config,
            tls,
            prefer,
            passwords,
            channel,
            wake: broadcast::channel(1024).0,
            task: Mutex::new(None),
        }
    }

    /// Completes when a decision on `key` is announced on the channel (or the connection
    /// listens again after a loss, or so many announcements came at once that some were
    /// dropped: a waiter then reads the record, as it would on a decision).
    pub(super) async fn changed(&self, key: &str) {
        let mut announced = self.wake.subscribe();
        self.start();
        loop {
            match announced.recv().await {
                Ok(k) if &*k == key || &*k == ALL => return,
                Ok(_) => {}
                Err(broadcast::error::RecvError::Lagged(_)) => return,
                Err(broadcast::error::RecvError::Closed) => std::future::pending().await,
            }
        }
    }

    /// Start the listening task, unless it runs.
    fn start(&self) {
        let mut task = self.task.lock().unwrap_or_else(|e| e.into_inner());
        if task.is_none() {
            let attempts = super::connect::attempts(&self.config, &self.passwords);
            let (tls, prefer, wake) = (self.tls.clone(), self.prefer, self.wake.clone());
            let channel = self.channel.clone();
            *task = Some(tokio::spawn(listen(attempts, tls, prefer, channel, wake)));
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Some(task) = self.task.lock().unwrap_or_else(|e| e.into_inner()).take() {
            task.abort();
        }
    }
}

/// Listen on `channel` for ever, connecting again with backoff whenever the connection ends;
/// each time the configurations of `attempts` ([`super::connect::attempts`]) are tried in turn.
async fn listen(
    attempts: Vec<tokio_postgres::Config>,
    tls: MakeRustlsConnect,
    prefer: bool,
    channel: String,
    wake: broadcast::Sender<Arc<str>>,
) {
    let mut wait = BACKOFF.0;
    loop {
        let mut result = Ok(());
        for config in &attempts {
            // Whether a session ran (and ended): then listen again after `wait`, else try the
            // next configuration.
            let mut connected = false;
            result = match config.connect(tls.clone()).await {
                Ok((client, connection)) => {
                    connected = true;
                    session(client, connection, &channel, &wake, &mut wait).await
                }
                Err(e) if prefer && super::connect::failed_after_tls(&e) => {
                    let mut plain = config.clone();
                    plain.ssl_mode(PgSslMode::Disable);
                    match plain.connect(tokio_postgres::NoTls).await {
                        Ok((client, connection)) => {
                            connected = true;
                            session(client, connection, &channel, &wake, &mut wait).await
                        }
                        Err(e) => Err(e),
                    }
                }
                Err(e) => Err(e),
            };
            if connected {
                break;
            }
        }
        match result {
            Ok(()) => tracing::info!(%channel, "the PostgreSQL LISTEN connection closed; listening again"),
            Err(e) => {
                tracing::info!(%channel, error = %super::error_chain(&e), ?wait, "the PostgreSQL LISTEN connection failed; listening again")
            }
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(BACKOFF.1);
    }
}

/// One listening connection: `LISTEN`, then every notification's key to the waiters, until
/// the connection ends.
async fn session<S, T>(
    client: tokio_postgres::Client,
    mut connection: tokio_postgres::Connection<S, T>,
    channel: &str,
    wake: &broadcast::Sender<Arc<str>>,
    wait: &mut Duration,
) -> Result<(), tokio_postgres::Error>
where
    S: AsyncRead + AsyncWrite + Unpin,
    T: AsyncRead + AsyncWrite + TlsStream + Unpin,
{
    let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
    // The channel is `effect_tool.` and a checked schema name: nothing to escape.
    let sql = format!("LISTEN \"{channel}\"");
    let listen = client.batch_execute(&sql);
    tokio::pin!(listen);
    let mut listening = false;
    loop {
        tokio::select! {
            done = &mut listen, if !listening => {
                done?;
                listening = true;
                *wait = BACKOFF.0;
                // Decisions made while nobody listened were not heard: every waiter looks.
                let _ = wake.send(Arc::from(ALL));
            }
            message = messages.next() => match message {
                Some(Ok(AsyncMessage::Notification(n))) if !n.payload().is_empty() => {
                    let _ = wake.send(Arc::from(n.payload()));
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(e),
                None => return Ok(()),
            },
        }
    }
}
