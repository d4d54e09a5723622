//! The write side of the SQLite journal: group commit led by the callers themselves.
//!
//! One write connection is lent to one caller at a time, the *leader*. A caller that finds no
//! leader becomes it and applies its own operation at once, on its own thread: no queue, no
//! thread to wake, no wake-up to wait for (two of those per new call cost more than the commits
//! on a virtual machine). A caller that finds a leader queues its operation and waits. When the
//! leader has applied its batch it takes everything queued meanwhile into one transaction (one
//! commit, one fsync, shared by all of them: group commit), answers each caller, and hands the
//! connection to the oldest caller still waiting, which leads the next batch; or, when nobody
//! waits, puts it back.
//!
//! A leader applies its batch on the caller's thread, inside the caller's poll. Under
//! `synchronous = FULL` on a multi-thread runtime it does so inside `block_in_place`, so that
//! the fsync does not hold up the worker's other tasks; on a current-thread runtime under FULL
//! it commits from tokio's blocking pool ([`Placement`]). A write lock held by another process
//! is not waited for on the caller's thread: the batch moves to the blocking pool, which waits
//! up to the busy timeout.
//!
//! A caller may stop waiting at any point (its future dropped: a timeout, a `select!`). Its work
//! is applied all the same: by the leader that finds it queued, or, when the connection had just
//! been handed to it, by the caller's drop, which leads in its place on the blocking pool
//! ([`Waiting`]). Either way the connection is passed on and the journal stays writable.
//! What a caller-led design does ask of callers is what every future asks: a caller handed the
//! connection leads when its task next runs, so a future that is woken but left unpolled for a
//! long time (kept aside in a `select!` loop busy elsewhere) delays the writes queued behind it.

use std::collections::VecDeque;
use std::sync::Arc;

use rusqlite::Connection;
use tokio::sync::oneshot;

use super::{Cached, Inner, Synchronous, apply_in_tx, fault_advice, gc_in_tx, is_busy, put_meta_in_tx};
use crate::call::error::StoreError;
use crate::decide::record::{Millis, Op, OpOutcome};

/// The write connection and the callers waiting for it, behind the store's writer lock.
pub(super) struct Writer {
    /// The write connection and the claims it holds; `None` while a leader holds them.
    conn: Option<WriteConn>,
    /// Whether a caller leads (holds the connection, or has been handed it).
    leading: bool,
    /// Work waiting for the leader, oldest first.
    queue: VecDeque<Queued>,
    /// Operations applied since the last background checkpoint was asked for.
    since_checkpoint: usize,
}

/// The write connection, with what it knows of the claims it wrote.
struct WriteConn {
    conn: Connection,
    held: Cached,
    /// The `synchronous` level the connection is set to now (see [`batch_level`]).
    synchronous: Synchronous,
}

impl Writer {
    /// The write side of a freshly opened journal.
    pub(super) fn new(conn: Connection, synchronous: Synchronous) -> Self {
        Writer {
            conn: Some(WriteConn {
                conn,
                held: Cached::default(),
                synchronous,
            }),
            leading: false,
            queue: VecDeque::new(),
            since_checkpoint: 0,
        }
    }
}

/// One write: an operation on a key, or a garbage collection.
// Work lives briefly in a queue; its size does not matter beside a commit.
#[allow(clippy::large_enum_variant)]
pub(super) enum Work {
    Apply {
        key: String,
        op: Op,
    },
    /// Delete up to `limit` records collectable at `now` (one chunk of [`SqliteStore::gc`]).
    ///
    /// [`SqliteStore::gc`]: super::SqliteStore
    Gc {
        now: Millis,
        limit: u64,
    },
    /// Write the row `name` of `effect_tool_meta` (an output schema, the marker secret):
    /// replace its value when `replace`, else only create it.
    PutMeta {
        name: String,
        value: String,
        replace: bool,
    },
    /// Check and spend a run's budgets ([`crate::store::Store::spend`]).
    Spend(crate::decide::budget::Spend),
}

/// What kind of work: how it is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Apply,
    Gc,
    PutMeta,
    Spend,
}

// Answers live briefly; their size does not matter beside a commit.
#[allow(clippy::large_enum_variant)]
pub(super) enum Answer {
    Apply(Result<OpOutcome, StoreError>),
    Gc(Result<u64, StoreError>),
    PutMeta(Result<(), StoreError>),
    Spend(Result<crate::decide::budget::SpendOutcome, StoreError>),
}

impl Work {
    fn kind(&self) -> Kind {
        match self {
            Work::Apply { .. } => Kind::Apply,
            Work::Gc { .. } => Kind::Gc,
            Work::PutMeta { .. } => Kind::PutMeta,
            Work::Spend(_) => Kind::Spend,
        }
    }

    fn is_gc(&self) -> bool {
        self.kind() == Kind::Gc
    }

    /// Whether its commit must be flushed before it is answered (see [`Op::needs_flush`]).
    fn needs_flush(&self) -> bool {
        match self {
            Work::Apply { op, .. } => op.needs_flush(),
            Work::Gc { .. } | Work::PutMeta { .. } | Work::Spend(_) => true,
        }
    }

    fn failed(&self, e: &rusqlite::Error, shared: &Inner) -> Answer {
        let path = shared.path.display();
        let err = if is_busy(e) {
            StoreError::Backend(format!(
                "SQLite journal {path} stayed locked by another process for more than {:?}: {e}; nothing was written, retry, or raise SqliteOptions::busy_timeout",
                shared.options.busy_timeout
            ))
        } else if let Some(advice) = fault_advice(e, Some(&shared.path)) {
            StoreError::Backend(format!("SQLite: {e}: {advice}"))
        } else {
            StoreError::Backend(format!("SQLite journal {path}: {e}; nothing was written"))
        };
        self.kind().answer(err)
    }
}

/// The answer to a caller whose work was taken but never answered.
fn lost(kind: Kind) -> Answer {
    kind.answer(StoreError::Backend(
        "the SQLite writer stopped before answering (a panic, or the runtime shutting down); \
         the operation may or may not have been applied: look the key up before retrying"
            .to_owned(),
    ))
}

impl Kind {
    /// The failure `err` as an answer to work of this kind.
    fn answer(self, err: StoreError) -> Answer {
        match self {
            Kind::Apply => Answer::Apply(Err(err)),
            Kind::Gc => Answer::Gc(Err(err)),
            Kind::PutMeta => Answer::PutMeta(Err(err)),
            Kind::Spend => Answer::Spend(Err(err)),
        }
    }
}

struct Queued {
    work: Work,
    reply: oneshot::Sender<Wake>,
}

/// What a waiting caller is woken with.
enum Wake {
    /// Its work was applied in the leader's batch.
    Answer(Answer),
    /// It leads now: the connection is its to take, and this is its work back.
    Lead(Work),
}

/// Who learns the answer to a piece of work in a batch.
enum Reply {
    /// The leader itself.
    Own,
    /// A waiting caller.
    Waiter(oneshot::Sender<Wake>),
    /// Nobody: its caller stopped waiting (it was cancelled); the work is applied all the same,
    /// as it would have been had the leader reached it first.
    Orphan,
}

/// Apply `work` through the writer: lead, or wait for the leader.
pub(super) async fn submit(shared: &Arc<Inner>, work: Work) -> Answer {
    let kind = work.kind();
    let waiting = {
        let mut w = shared.lock_writer();
        if w.leading {
            let (reply, rx) = oneshot::channel();
            w.queue.push_back(Queued { work, reply });
            Err(rx)
        } else {
            w.leading = true;
            Ok(work)
        }
    };
    let work = match waiting {
        Ok(work) => work,
        Err(rx) => {
            let waiting = Waiting {
                rx: Some(rx),
                shared: shared.clone(),
            };
            match waiting.await {
                Ok(Wake::Answer(answer)) => return answer,
                Ok(Wake::Lead(work)) => work,
                // The leader dropped this work unanswered (it panicked).
                Err(_) => return lost(kind),
            }
        }
    };
    let mut lead = Leadership::take(shared.clone(), work);
    let applied = match placement(shared) {
        Placement::Inline => lead.run(false),
        Placement::InPlace => tokio::task::block_in_place(|| lead.run(false)),
        Placement::Pool => None,
    };
    if let Some(answer) = applied {
        return answer;
    }
    // Another process holds the write lock, or the commit must not hold the runtime's one
    // thread: apply the batch on tokio's blocking pool.
    match tokio::task::spawn_blocking(move || lead.run(true)).await {
        Ok(Some(answer)) => answer,
        // Cancelled by a runtime shutdown or a panic: `Leadership`'s drop answered the others.
        _ => lost(kind),
    }
}

/// A caller waiting for the leader. If it stops waiting (its future is dropped) just after the
/// leader handed it the connection, the hand-over is already done: nobody else would lead, and
/// every later write would wait forever. Dropping it therefore closes the channel (a later
/// hand-over fails, and that leader applies the work itself) and, if the connection had already
/// been handed over, leads in its place: the work is applied all the same and the connection is
/// passed on.
struct Waiting {
    /// `None` once the answer was received.
    rx: Option<oneshot::Receiver<Wake>>,
    shared: Arc<Inner>,
}

impl std::future::Future for Waiting {
    type Output = Result<Wake, oneshot::error::RecvError>;

    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Self::Output> {
        let rx = self.rx.as_mut().expect("polled after its answer");
        let woken = std::task::ready!(std::pin::Pin::new(rx).poll(cx));
        // Received: nothing is left for the drop to take over.
        self.rx = None;
        std::task::Poll::Ready(woken)
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let Some(mut rx) = self.rx.take() else { return };
        rx.close();
        let Ok(Wake::Lead(work)) = rx.try_recv() else { return };
        let mut lead = Leadership::take(self.shared.clone(), work);
        lead.batch[0].1 = Reply::Orphan;
        lead.finish_elsewhere();
    }
}

/// Run `read` on the write connection when no leader holds it: `None` when one does. A read
/// there finds the pages it needs in the connection's cache, which SQLite keeps across this
/// connection's own commits (a read connection drops its cache whenever another connection has
/// committed, so its next read fetches every page again from the files). Writers that arrive
/// meanwhile queue as behind any leader, and are handed the connection after the read.
pub(super) fn read_if_idle<T>(shared: &Arc<Inner>, read: impl FnOnce(&Connection) -> T) -> Option<T> {
    {
        let mut w = shared.lock_writer();
        if w.leading || w.conn.is_none() {
            return None;
        }
        w.leading = true;
    }
    // Cached by a `Leadership` from here, whose drop passes the connection on even on a panic.
    let mut lead = Leadership {
        conn: shared.lock_writer().conn.take(),
        shared: shared.clone(),
        batch: Vec::new(),
        mine: None,
    };
    let conn = &lead.conn.as_ref().expect("taken under the lock").conn;
    let found = read(conn);
    if !lead.hand_on() {
        // A writer queued during the read and stopped waiting just as it was handed the
        // connection: its work is applied, then the connection handed on again.
        lead.finish_elsewhere();
    }
    Some(found)
}

/// Where a leader applies its batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Placement {
    /// In the caller's poll, on its thread: a commit without an fsync (`synchronous = NORMAL`)
    /// is tens of microseconds, shorter than the hand-off to another thread would be; and with
    /// no runtime there is nothing else to hold up.
    Inline,
    /// On the caller's thread, inside [`tokio::task::block_in_place`]: under `synchronous =
    /// FULL` on a multi-thread runtime. The fsync blocks the thread for as long as the disk
    /// takes (a quarter of a millisecond to several), and `block_in_place` first hands the
    /// worker's other tasks to another thread, so they keep running meanwhile. The leader
    /// still answers itself without waking anyone. Measured (`benches/responsiveness.rs`,
    /// BENCHMARKS.md): with the commit inline instead, a runtime of one worker stalled its
    /// timers and requests for the length of every fsync (p99 timer lateness 1.4 s under 64
    /// callers, against 6 ms), and a busy runtime of two recorded a third as many calls.
    InPlace,
    /// On tokio's blocking pool: under `synchronous = FULL` on a current-thread runtime, where
    /// a commit on the caller's thread would hold the only thread, so no other caller could
    /// queue behind it and every write would pay its own fsync; from the blocking pool, callers
    /// keep queueing while it syncs and the next batch takes them all.
    Pool,
}

fn placement(shared: &Inner) -> Placement {
    if shared.options.synchronous != super::Synchronous::Full {
        return Placement::Inline;
    }
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::CurrentThread) => Placement::Pool,
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => Placement::InPlace,
        _ => Placement::Inline,
    }
}

/// The connection held by a leader, with the batch it is applying.
struct Leadership {
    shared: Arc<Inner>,
    conn: Option<WriteConn>,
    batch: Vec<(Work, Reply)>,
    mine: Option<Answer>,
}

impl Leadership {
    /// Take the connection (the caller was granted `leading`) to apply `own` first.
    fn take(shared: Arc<Inner>, own: Work) -> Self {
        let conn = shared.lock_writer().conn.take();
        debug_assert!(conn.is_some(), "a leader finds the connection put back");
        Leadership {
            shared,
            conn,
            batch: vec![(own, Reply::Own)],
            mine: None,
        }
    }

    /// Apply the leader's work and what queues meanwhile, then hand the connection on, and
    /// return the leader's own answer. `None` when another process holds the write lock and
    /// `wait` is false: nothing was applied and the batch is kept for a call that waits.
    fn run(&mut self, wait: bool) -> Option<Answer> {
        loop {
            self.fill();
            let conn = self.conn.as_mut().expect("the leader holds the connection");
            let answers = apply_batch(conn, &self.batch, wait, &self.shared)?;
            for ((_, reply), answer) in self.batch.drain(..).zip(answers) {
                match reply {
                    Reply::Own => self.mine = Some(answer),
                    Reply::Waiter(tx) => {
                        let _ = tx.send(Wake::Answer(answer));
                    }
                    Reply::Orphan => {}
                }
            }
            if self.hand_on() {
                return self.mine.take();
            }
        }
    }

    /// Apply the batch of work nobody waits for and hand on, on tokio's blocking pool: this
    /// runs in a drop or a read, which must not wait for another process's lock. Without a
    /// runtime to lend a thread, here.
    fn finish_elsewhere(mut self) {
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => drop(rt.spawn_blocking(move || self.run(true))),
            Err(_) => drop(self.run(true)),
        }
    }

    /// Hand the connection to the oldest waiting caller, or put it back when nobody waits:
    /// `true`. `false` when that caller has stopped waiting: its work is now in the batch, and
    /// this leader applies it (with whatever queued since) before handing on again.
    fn hand_on(&mut self) -> bool {
        let mut w = self.shared.lock_writer();
        w.conn = self.conn.take();
        let Some(next) = w.queue.pop_front() else {
            w.leading = false;
            return true;
        };
        match next.reply.send(Wake::Lead(next.work)) {
            // `leading` stays set: it passed to `next`.
            Ok(()) => true,
            Err(Wake::Lead(work)) => {
                self.conn = w.conn.take();
                self.batch.push((work, Reply::Orphan));
                false
            }
            Err(Wake::Answer(_)) => unreachable!("a lead was sent"),
        }
    }

    /// Add queued work to the batch, up to the batch bound; ask for a background checkpoint
    /// every so many operations, and after every chunk of a garbage collection (which writes
    /// pages of hundreds of records: left to SQLite's checkpoint in a commit, they would be
    /// copied in the commit of whichever caller reaches the WAL's bound).
    fn fill(&mut self) {
        let max = self.shared.options.max_batch.max(1);
        let mut w = self.shared.lock_writer();
        while self.batch.len() < max {
            let Some(q) = w.queue.pop_front() else { break };
            self.batch.push((q.work, Reply::Waiter(q.reply)));
        }
        w.since_checkpoint += self
            .batch
            .iter()
            .map(|(work, _)| if work.is_gc() { super::CHECKPOINT_EVERY_OPS } else { 1 })
            .sum::<usize>();
        if w.since_checkpoint >= super::CHECKPOINT_EVERY_OPS {
            w.since_checkpoint = 0;
            // Full means a checkpoint is already asked for.
            let _ = self.shared.checkpoint.try_send(());
        }
    }
}

impl Drop for Leadership {
    /// A leader that stops without handing the connection on (a panic, a blocking task dropped
    /// at runtime shutdown) tells the callers of its batch, and passes the connection to the
    /// next caller still waiting, so that the journal stays writable.
    fn drop(&mut self) {
        let Some(conn) = self.conn.take() else { return };
        for (work, reply) in self.batch.drain(..) {
            if let Reply::Waiter(tx) = reply {
                let _ = tx.send(Wake::Answer(lost(work.kind())));
            }
        }
        let mut w = self.shared.lock_writer();
        w.conn = Some(conn);
        loop {
            match w.queue.pop_front() {
                None => {
                    w.leading = false;
                    return;
                }
                Some(next) => {
                    if next.reply.send(Wake::Lead(next.work)).is_ok() {
                        return;
                    }
                    tracing::warn!(
                        "a write queued by a cancelled caller was dropped while the SQLite writer recovered from a failure"
                    );
                }
            }
        }
    }
}

/// Apply a batch in one transaction. `None` when `wait` is false and another process holds
/// the write lock (nothing applied).
fn apply_batch(conn: &mut WriteConn, batch: &[(Work, Reply)], wait: bool, shared: &Inner) -> Option<Vec<Answer>> {
    let timeout = if wait {
        shared.options.busy_timeout
    } else {
        std::time::Duration::ZERO
    };
    if let Err(e) = conn.conn.busy_timeout(timeout) {
        return Some(batch.iter().map(|(work, _)| work.failed(&e, shared)).collect());
    }
    let works: Vec<&Work> = batch.iter().map(|(work, _)| work).collect();
    let configured = shared.options.synchronous;
    let now = shared.clock.now();
    match run_batch(conn, &works, configured, now) {
        Ok(answers) => Some(answers),
        Err(e) if is_busy(&e) && !wait => None,
        Err(e) if works.len() > 1 && !is_busy(&e) => {
            // One operation broke the shared transaction: apply each on its own so the others
            // are not failed with it.
            tracing::warn!(error = %e, "a grouped SQLite commit failed; applying its operations one by one");
            Some(
                works
                    .iter()
                    .map(
                        |work| match run_batch(conn, std::slice::from_ref(work), configured, now) {
                            Ok(mut a) => a.remove(0),
                            Err(e) => work.failed(&e, shared),
                        },
                    )
                    .collect(),
            )
        }
        Err(e) => Some(works.iter().map(|work| work.failed(&e, shared)).collect()),
    }
}

/// The `synchronous` level a batch commits with: the configured one, except that a batch made
/// only of claims that need no flush of their own (idempotent ones, [`Op::needs_flush`]) commits
/// under `NORMAL`, without an fsync. Such a claim reaches the disk with the WAL's next fsync (its
/// record's commit, or any other flushed commit after it, since an fsync of the WAL covers every
/// frame before it), and a power loss before then loses it and every commit after it, never a
/// commit before it (SQLite recovers the WAL's longest valid prefix). `NORMAL`, not `OFF`:
/// a checkpoint run inside such a commit still syncs the WAL and the database file before the
/// WAL is reused, so the records already on disk stay there.
fn batch_level(batch: &[&Work], configured: Synchronous) -> Synchronous {
    if configured == Synchronous::Full && batch.iter().all(|work| !work.needs_flush()) {
        Synchronous::Normal
    } else {
        configured
    }
}

/// Set the connection to `level` if it is not already: a `PRAGMA`, outside any transaction
/// (SQLite refuses to change it inside one), which in WAL mode applies from the next commit.
fn set_level(conn: &mut WriteConn, level: Synchronous) -> rusqlite::Result<()> {
    if conn.synchronous != level {
        conn.conn
            .execute_batch(&format!("PRAGMA synchronous = {};", level.pragma()))?;
        conn.synchronous = level;
    }
    Ok(())
}

/// `now` is the journal's clock as the batch started: every transition in it is computed at it.
fn run_batch(
    conn: &mut WriteConn,
    batch: &[&Work],
    configured: Synchronous,
    now: crate::decide::record::Millis,
) -> rusqlite::Result<Vec<Answer>> {
    set_level(conn, batch_level(batch, configured))?;
    // `BEGIN IMMEDIATE` and `COMMIT` from the connection's statement cache: compiled once per
    // connection, not parsed again for every transaction (as `Connection::transaction` does).
    conn.conn.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
    let applied = (|| {
        let tx = &conn.conn;
        let mut answers = Vec::with_capacity(batch.len());
        for work in batch {
            answers.push(match work {
                Work::Apply { key, op } => Answer::Apply(apply_in_tx(tx, key, op, &mut conn.held, now)?),
                Work::Gc { now, limit } => Answer::Gc(Ok(gc_in_tx(tx, *now, *limit)?)),
                Work::PutMeta { name, value, replace } => {
                    put_meta_in_tx(tx, name, value, *replace)?;
                    Answer::PutMeta(Ok(()))
                }
                Work::Spend(spend) => Answer::Spend(Ok(spend_in_tx(tx, spend, now)?)),
            });
        }
        tx.prepare_cached("COMMIT")?.execute([])?;
        Ok(answers)
    })();
    if applied.is_err() && !conn.conn.is_autocommit() {
        // What `rusqlite::Transaction` does when dropped uncommitted: nothing of the batch stays.
        // A failed rollback leaves the connection in its transaction: the next `BEGIN` then
        // fails, and the writer's caller sees that error.
        let _ = conn.conn.execute_batch("ROLLBACK");
    }
    applied
}

/// [`crate::store::Store::spend`] inside the writer's transaction: read what the run spent of
/// each budget and whether the key was charged, decide, insert the charges.
fn spend_in_tx(
    tx: &Connection,
    spend: &crate::decide::budget::Spend,
    now: crate::decide::record::Millis,
) -> rusqlite::Result<crate::decide::budget::SpendOutcome> {
    use crate::decide::budget::{SpendOutcome, Spent, decide};
    let mut read = tx.prepare_cached(
        "SELECT COALESCE(SUM(amount), 0), COALESCE(MAX(key = ?3), 0) FROM effect_budget_spends WHERE run_id = ?1 AND budget = ?2",
    )?;
    let mut failed = None;
    let decided = decide(spend, |budget| {
        match read.query_row(rusqlite::params![spend.run_id, budget, spend.key], |r| {
            Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?))
        }) {
            Ok((total, charged)) => Spent {
                total: u64::try_from(total).unwrap_or(0),
                charged: charged != 0,
            },
            Err(e) => {
                failed.get_or_insert(e);
                Spent::default()
            }
        }
    });
    drop(read);
    if let Some(e) = failed {
        return Err(e);
    }
    match decided {
        Err(overdraft) => Ok(SpendOutcome::Exceeded(overdraft)),
        Ok(charges) => {
            let mut insert = tx.prepare_cached(
                "INSERT INTO effect_budget_spends (run_id, budget, key, tool, amount, at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )?;
            for charge in &charges {
                let amount = i64::try_from(charge.amount).unwrap_or(i64::MAX);
                insert.execute(rusqlite::params![
                    spend.run_id,
                    charge.budget,
                    spend.key,
                    spend.tool,
                    amount,
                    now
                ])?;
            }
            Ok(SpendOutcome::Spent {
                charged: charges.into_iter().map(|c| c.budget).collect(),
            })
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use std::future::Future;
    use std::task::{Context, Waker};
    use std::time::Duration;

    use super::*;
    use crate::decide::record::Intent;
    use crate::store::sqlite::SqliteStore;
    use crate::store::{Store, StoreExt};

    /// A fresh journal in its own directory (removed by the test at its end).
    fn scratch_store(name: &str) -> (std::path::PathBuf, SqliteStore) {
        let dir = std::env::temp_dir().join(format!("effect-tool-writer-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let store = SqliteStore::open(dir.join("j.db")).unwrap();
        (dir, store)
    }

    fn claim(key: &str) -> Work {
        Work::Apply {
            key: key.to_owned(),
            op: Op::Claim {
                intent: intent(),
                lease_ms: 60_000,
                takeover_in_doubt: false,
            },
        }
    }

    /// Writers that arrive while a read holds the write connection queue behind it and are
    /// handed the connection after it: one that still waits applies its own work, and the
    /// work of one that stopped waiting is applied all the same.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn writers_queued_behind_a_read_on_the_write_connection_are_applied() {
        let (dir, store) = scratch_store("read");
        let shared = store.shared.clone();
        let mut cx = Context::from_waker(Waker::noop());

        let mut waiting = None;
        let read = read_if_idle(&shared, |_| {
            // The first in the queue stops waiting: the read's hand-over finds it gone.
            let mut dropped = Box::pin(submit(&shared, claim("dropped")));
            assert!(
                dropped.as_mut().poll(&mut cx).is_pending(),
                "a writer queues behind the read"
            );
            let mut kept = Box::pin(submit(&shared, claim("kept")));
            assert!(
                kept.as_mut().poll(&mut cx).is_pending(),
                "a writer queues behind the read"
            );
            drop(dropped);
            waiting = Some(kept);
        });
        assert!(read.is_some(), "the write connection was idle");
        let kept = tokio::time::timeout(Duration::from_secs(30), waiting.unwrap())
            .await
            .expect("the writer still waiting behind the read is answered");
        assert!(matches!(kept, Answer::Apply(Ok(OpOutcome::Claimed { attempt: 1, .. }))));
        let later = tokio::time::timeout(Duration::from_secs(30), store.claim("later", intent(), 60_000, false))
            .await
            .expect("the journal stays writable");
        assert!(matches!(later.unwrap(), OpOutcome::Claimed { attempt: 1, .. }));
        for key in ["kept", "dropped", "later"] {
            assert!(store.get(key).await.unwrap().is_some(), "{key} was applied");
        }
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The `synchronous` level the write connection commits its next batch with.
    fn write_level(store: &SqliteStore) -> i64 {
        let w = store.shared.lock_writer();
        let conn = &w.conn.as_ref().expect("no leader at rest").conn;
        conn.query_row("PRAGMA synchronous", [], |r| r.get(0)).unwrap()
    }

    /// Durability follows the class: a batch of idempotent claims commits under `NORMAL` (no
    /// fsync of its own); a record, or an irreversible claim, under the configured `FULL`.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn only_claims_that_need_no_flush_commit_without_one() {
        const NORMAL: i64 = 1;
        const FULL: i64 = 2;
        let (dir, store) = scratch_store("levels");
        assert_eq!(write_level(&store), FULL, "opened as configured");
        let idempotent = store.claim("idem", intent(), 60_000, false).await.unwrap();
        assert!(matches!(idempotent, OpOutcome::Claimed { attempt: 1, .. }));
        assert_eq!(write_level(&store), NORMAL, "an idempotent claim is not flushed");
        store.complete("idem", 1, serde_json::json!(1)).await.unwrap();
        assert_eq!(write_level(&store), FULL, "its record is");
        let irreversible = Intent {
            class: crate::EffectClass::Irreversible,
            ..intent()
        };
        store.claim("irr", irreversible.clone(), 60_000, false).await.unwrap();
        assert_eq!(write_level(&store), FULL, "an irreversible claim is flushed");

        let mixed = [
            Work::Apply {
                key: "a".into(),
                op: Op::Claim {
                    intent: intent(),
                    lease_ms: 1,
                    takeover_in_doubt: false,
                },
            },
            Work::Apply {
                key: "b".into(),
                op: Op::Claim {
                    intent: irreversible,
                    lease_ms: 1,
                    takeover_in_doubt: false,
                },
            },
            Work::Gc { now: 0, limit: 1 },
        ];
        let level = |works: &[Work], configured| batch_level(&works.iter().collect::<Vec<_>>(), configured);
        assert_eq!(level(&mixed[..1], Synchronous::Full), Synchronous::Normal);
        assert_eq!(level(&mixed[..2], Synchronous::Full), Synchronous::Full);
        assert_eq!(level(&mixed[2..], Synchronous::Full), Synchronous::Full);
        assert_eq!(level(&mixed[..1], Synchronous::Normal), Synchronous::Normal);
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Why the writer sets the level between transactions ([`set_level`]): SQLite refuses to
    /// change `synchronous` inside one (an error, not a silent no-op), and takes it between two.
    #[test]
    fn synchronous_cannot_change_inside_a_transaction() {
        let (dir, store) = scratch_store("level-in-tx");
        let conn = rusqlite::Connection::open(store.path()).unwrap();
        conn.execute_batch("BEGIN IMMEDIATE").unwrap();
        let refused = conn.execute_batch("PRAGMA synchronous = NORMAL").unwrap_err();
        assert!(
            refused.to_string().contains("may not be changed inside a transaction"),
            "{refused}"
        );
        conn.execute_batch("ROLLBACK; PRAGMA synchronous = NORMAL").unwrap();
        let level: i64 = conn.query_row("PRAGMA synchronous", [], |r| r.get(0)).unwrap();
        assert_eq!(level, 1, "NORMAL, set between transactions");
        drop((conn, store));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// An idempotent tool's intent, for the SQLite store's tests.
    pub(in crate::store::sqlite) fn intent() -> Intent {
        Intent {
            tool: "refund".into(),
            class: crate::EffectClass::Idempotent,
            run_id: "run".into(),
            thread_id: None,
            call_id: None,
            fingerprint: "f".into(),
            input: serde_json::json!({"n": 1}),
            ttl_ms: None,
            approval: None,
            approval_ttl_ms: None,
            holder: None,
        }
    }

    /// The race a cancelled caller can meet: the leader hands it the connection, and its future
    /// is dropped before it is polled again. Its work must still be applied and the connection
    /// passed on; before, nobody led again and every later write waited forever.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_caller_dropped_just_after_being_handed_the_connection_passes_it_on() {
        let (dir, store) = scratch_store("handover");
        let shared = store.shared.clone();

        // A leader is at work (this test plays it): the next caller queues.
        shared.lock_writer().leading = true;
        let mut queued = Box::pin(submit(&shared, claim("handed-over")));
        let mut cx = Context::from_waker(Waker::noop());
        assert!(
            queued.as_mut().poll(&mut cx).is_pending(),
            "the caller queues behind the leader"
        );

        // The leader is done and hands the connection to it, as `Leadership::run` does.
        let next = shared.lock_writer().queue.pop_front().expect("the caller queued");
        assert!(next.reply.send(Wake::Lead(next.work)).is_ok(), "its future still waits");
        // And the caller stops waiting before it runs again.
        drop(queued);

        let later = tokio::time::timeout(Duration::from_secs(30), store.claim("later", intent(), 60_000, false))
            .await
            .expect("the journal stays writable after the caller handed the lead was dropped");
        assert!(matches!(later.unwrap(), OpOutcome::Claimed { attempt: 1, .. }));
        // The dropped caller's work was applied all the same.
        assert!(store.get("handed-over").await.unwrap().is_some());
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
