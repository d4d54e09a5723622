//! `Store::changed` on PostgreSQL: a person's decision made through one store object (another
//! process's, in production) wakes a waiter on another store object, through `NOTIFY` sent in
//! the decision's own transaction and a `LISTEN` connection; the waiter is woken again after its
//! listening connection is cut and opened again.
//!
//! A waiter is created and polled once (so that it listens) before the decision is made, and
//! the decision is the only thing that can complete it: `changed` does not poll the record. A
//! waiter that is never woken fails the case after 30 s.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use effect_tool_core::store::postgres::{PgOptions, PostgresStore};
use effect_tool_core::{Store, StoreExt};

use super::support;

const WAKE_WITHIN: Duration = Duration::from_secs(30);

fn options(schema: &str) -> PgOptions {
    PgOptions {
        schema: schema.to_owned(),
        pool_size: 2,
        ..PgOptions::default()
    }
}

/// A record awaiting the approval of `finance` under `key`.
async fn park(store: &PostgresStore, key: &str) {
    let intent = effect_tool_core::decide::record::Intent {
        approval: Some("finance".to_owned()),
        ..crate::common::intent("notify")
    };
    let outcome = store.claim(key, intent, 30_000, false).await.unwrap();
    assert!(
        matches!(
            outcome,
            effect_tool_core::decide::record::OpOutcome::AwaitingApproval(_)
        ),
        "{outcome:?}"
    );
}

/// A waiter on `store` for `key`, polled once: it listens from now on.
async fn waiter<'a>(store: &'a PostgresStore, key: &'a str) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>> {
    let mut w: Pin<Box<dyn Future<Output = ()> + Send + 'a>> = Box::pin(store.changed(key));
    assert!(futures::poll!(&mut w).is_pending(), "nothing was decided yet");
    w
}

/// The session of `app`'s listening connection, once it listens (`LISTEN` done, idle).
async fn listening_session(raw: &tokio_postgres::Client, app: &str) -> i32 {
    let until = std::time::Instant::now() + WAKE_WITHIN;
    loop {
        let rows = raw
            .query(
                "SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN %' AND state = 'idle'",
                &[&app],
            )
            .await
            .unwrap();
        if let Some(r) = rows.first() {
            return r.get(0);
        }
        assert!(std::time::Instant::now() < until, "{app} never listened");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[test]
fn a_decision_through_one_store_wakes_a_waiter_on_another() {
    let Some(url) = support::pg_url("a_decision_through_one_store_wakes_a_waiter_on_another") else {
        return;
    };
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let schema = support::schema("notify");
        let app = format!("et-notify-{}", std::process::id());
        let deciding = PostgresStore::connect_with(&url, options(&schema)).await.unwrap();
        let waiting = PostgresStore::connect_with(&format!("{url}?application_name={app}"), options(&schema))
            .await
            .unwrap();
        let raw = support::raw(&url).await;

        // The first waiter starts the listening connection, which wakes every waiter once it
        // listens (decisions made before were not heard).
        park(&deciding, "approve-me").await;
        let w = waiter(&waiting, "approve-me").await;
        tokio::time::timeout(WAKE_WITHIN, w)
            .await
            .expect("woken when the listening connection listens");
        let first = listening_session(&raw, &app).await;
        // Listening: only the decision can wake this one.
        let w = waiter(&waiting, "approve-me").await;
        deciding
            .approve(
                "approve-me",
                "fin",
                "finance",
                &deciding.get("approve-me").await.unwrap().unwrap().fingerprint,
            )
            .await
            .unwrap();
        tokio::time::timeout(WAKE_WITHIN, w)
            .await
            .expect("the approval through the other store woke the waiter");

        // A denial too.
        park(&deciding, "deny-me").await;
        let w = waiter(&waiting, "deny-me").await;
        deciding.deny("deny-me", "fin", Some("no".into())).await.unwrap();
        tokio::time::timeout(WAKE_WITHIN, w)
            .await
            .expect("the denial woke the waiter");

        // The listening connection is cut (a server restart, a failover): it listens again and
        // wakes every waiter, and the next decision wakes its waiter.
        park(&deciding, "after-reconnect").await;
        let w = waiter(&waiting, "after-reconnect").await;
        let killed: bool = raw
            .query_one("SELECT pg_terminate_backend($1)", &[&first])
            .await
            .unwrap()
            .get(0);
        assert!(killed);
        tokio::time::timeout(WAKE_WITHIN, w)
            .await
            .expect("woken when the listening connection listens again");
        let again = listening_session(&raw, &app).await;
        assert_ne!(again, first, "a new listening session");
        let w = waiter(&waiting, "after-reconnect").await;
        deciding
            .approve(
                "after-reconnect",
                "fin",
                "finance",
                &deciding.get("after-reconnect").await.unwrap().unwrap().fingerprint,
            )
            .await
            .unwrap();
        tokio::time::timeout(WAKE_WITHIN, w)
            .await
            .expect("the approval after the listening connection was cut woke the waiter");
    });
}
