//! A PostgreSQL server that stops answering mid-call gives an unknown-outcome store error within
//! `PgOptions::statement_timeout`, never a hang (issue 12, fault 5).
//!
//! The test's own server (its own data folder and port) is frozen with SIGSTOP to every one of
//! its processes: connections stay open and nothing answers, as with a hung host or a network
//! partition that sends no resets. The server's own `statement_timeout` cannot fire then, so
//! only the client's bound ends the wait.
//!
//! Run: `cargo test -p effect-tool --features postgres --test engine engine_faults_hang::`
//! (PostgreSQL server binaries are needed; `.ci/postgres.sh` installs them if missing).

use crate::common;

#[cfg(feature = "postgres")]
mod frozen {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::{Duration, Instant};

    use effect_tool::store::postgres::{PgOptions, PostgresStore};
    use effect_tool::{
        CallOptions, EffectClass, EffectCtx, EffectError, Engine, EngineConfig, RunContext, Store, StoreError, Tool,
        ToolError,
    };

    use super::common::ledger::Downstream;
    use super::common::own_postgres::OwnPostgres;

    const PG_DIR: &str = "/tmp/engine-pg-frozen";
    const PG_PORT: &str = "25433";

    /// The bound under test: short, so the test is quick; the check is that calls end near it.
    const STATEMENT_TIMEOUT: Duration = Duration::from_secs(1);

    /// Far past every bound of the calls below (statement timeout, connect timeout, the
    /// engine's store-retry window): reaching it means a call hung.
    const HANG: Duration = Duration::from_secs(30);

    /// An idempotent tool that applies its effect downstream, keyed by the engine's key.
    #[derive(Clone)]
    struct Notify {
        down: Arc<Downstream>,
        runs: Arc<AtomicUsize>,
    }

    impl Tool for Notify {
        type Args = String;
        type Output = String;
        type Error = ToolError;
        const NAME: &'static str = "notify";
        const CLASS: EffectClass = EffectClass::Idempotent;

        async fn call(&self, ctx: &EffectCtx, to: String) -> Result<String, ToolError> {
            self.runs.fetch_add(1, Ordering::SeqCst);
            self.down.apply(&ctx.idempotency_key());
            Ok(format!("notified {to}"))
        }
    }

    async fn connect(pg: &OwnPostgres) -> PostgresStore {
        let options = PgOptions {
            statement_timeout: STATEMENT_TIMEOUT,
            connect_timeout: STATEMENT_TIMEOUT,
            wait_timeout: STATEMENT_TIMEOUT,
            ..PgOptions::default()
        };
        // The bounds are short (the freeze is what they are for), and a busy machine can take
        // longer than one of them to open the first connection to a server that just started:
        // try again a few times before the freeze (nothing is frozen yet).
        let mut tries = 0;
        loop {
            match PostgresStore::connect_with(&pg.url, options.clone()).await {
                Ok(store) => return store,
                Err(e) if tries < 10 => {
                    tries += 1;
                    eprintln!("connecting to the test's server, try {tries}: {e}");
                }
                Err(e) => panic!("connecting to the test's server: {e}"),
            }
        }
    }

    fn is_timeout(e: &StoreError) -> bool {
        matches!(e, StoreError::Backend(m) if m.contains("did not answer within") && m.contains("unknown"))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_frozen_server_gives_an_unknown_outcome_error_not_a_hang() {
        let pg = OwnPostgres::start(PG_DIR, PG_PORT);
        let store = connect(&pg).await;
        let engine = Engine::with_config(
            store.clone(),
            EngineConfig {
                lease: Duration::from_secs(1),
                poll_interval: Duration::from_millis(10),
            },
        )
        .with_store_retry(Duration::from_secs(2));
        let down = Arc::new(Downstream::default());
        let tool = Notify {
            down: down.clone(),
            runs: Arc::new(AtomicUsize::new(0)),
        };
        let run = RunContext::new(format!("frozen-{}", std::process::id()));

        // Warm: one call recorded, so the pool holds a live connection to the server.
        let first = engine
            .call(&tool, &run, CallOptions::default(), "ann".to_owned())
            .await
            .expect("a call before the freeze");
        assert_eq!(first, "notified ann");

        tokio::task::block_in_place(|| pg.pause());

        // A read on the pooled connection: the client's bound ends it.
        let started = Instant::now();
        let read = tokio::time::timeout(HANG, store.get("any-key")).await;
        let waited = started.elapsed();
        let err = read
            .expect("a read of a frozen server hung")
            .expect_err("a frozen server answered");
        assert!(is_timeout(&err), "{err}");
        assert!(
            waited >= STATEMENT_TIMEOUT,
            "gave up after {waited:?}, before the bound"
        );

        // A new call: its claim cannot be known to have committed, so it fails as a store
        // error, and its tool does not run.
        let call = tokio::time::timeout(HANG, engine.call(&tool, &run, CallOptions::default(), "bob".to_owned())).await;
        let err = call
            .expect("a call on a frozen server hung")
            .expect_err("a call on a frozen server succeeded");
        assert!(matches!(err, EffectError::Store { .. }), "{err}");
        assert_eq!(
            tool.runs.load(Ordering::SeqCst),
            1,
            "the tool ran though its claim was not known"
        );

        tokio::task::block_in_place(|| pg.resume());

        // Once the server answers, the same call goes through: the claim the frozen server may
        // have committed meanwhile is this call's own stale claim, taken over after its lease
        // (idempotent: run again under the same key). The effect happens once.
        let again = tokio::time::timeout(HANG, engine.call(&tool, &run, CallOptions::default(), "bob".to_owned()))
            .await
            .expect("a call after the server resumed hung")
            .expect("a call after the server resumed failed");
        assert_eq!(again, "notified bob");
        let replay = engine
            .call(&tool, &run, CallOptions::default(), "bob".to_owned())
            .await
            .expect("a replay");
        assert_eq!(replay, "notified bob");
        assert_eq!((down.requests(), down.effects()), (2, 2), "each effect once downstream");
        drop(pg);
    }
}

#[cfg(not(feature = "postgres"))]
#[test]
fn a_frozen_server_gives_an_unknown_outcome_error_not_a_hang() {
    common::postgres_feature_disabled("engine_faults_hang (a frozen PostgreSQL server)");
}
