//! Group commit on PostgreSQL: when many callers of one store write at once, their claims of
//! new keys and their holders' updates go to the server together, as one statement and one
//! commit, instead of one round trip and one commit each.
//!
//! A write goes alone (today's round trip on a pooled connection) only while the batcher is
//! idle (no runner busy, nothing queued) and fewer than [`ALONE_MAX`] others are in flight
//! alone. So a sequential caller pays one round trip and nothing more, a few concurrent
//! callers keep the lone statement (cheaper for the server than the batch statement with a few
//! items), and under load every write joins the queue. A runner task takes everything queued,
//! sends it as one statement, hands each caller its answer, and goes again while anything is
//! queued (after letting the callers it answered run once, so that their next writes join its
//! next statement instead of finding the batcher idle). The first
//! write that queues starts the first runner, which sends at once, whatever it carries. A
//! second runner, which sends the next statement while the first waits for its commit, starts
//! only when the queue holds a batch worth a commit of its own: half the items of the last
//! statement sent, and at least [`SECOND_MIN`]. A runner whose statement was answered while the
//! other is busy sends what is queued only if it holds that much too; otherwise it leaves it to
//! the other, which takes the queue when its own statement returns. So no statement of a few
//! items is sent beside a busy one, and no item waits for ever: the queue is never left
//! non-empty without a runner that will look at it again.
//!
//! The statement is that of the lone round trips, over arrays (`unnest`): the insert of a
//! claim (`ON CONFLICT (key) DO NOTHING`, with the row that was there before it when the key
//! was taken), and the compare-and-set update of a held claim (row version and attempt), with
//! its audit entry. So each item has exactly the answer it would have had alone.
//!
//! - Items are sent in key order, so two statements (of two runners, or two processes) that touch the same keys
//!   lock them in the same order.
//! - A key may appear once per statement (PostgreSQL cannot insert or update a row twice in
//!   one): a second item with the same key is answered [`Answer::Alone`] and goes alone.
//! - A statement the server refuses (a deadlock, a timeout) was rolled back as a whole: every
//!   item goes alone, and meets the error itself if it is still there. An error without the
//!   server's answer (the connection lost), or one that ends the session (`FATAL`: the server
//!   shutting down, the backend terminated while its commit waited for a synchronous standby,
//!   after which the transaction may be committed), may hide a commit, so it is every item's
//!   error: an unknown outcome, never "not written" (see [`super::rolled_back`]).
//! - Each statement's number of items is recorded in the histogram
//!   `effect_tool_store_batch_items` (label `flush`: `false` when the statement carries only
//!   claims that commit without waiting for the WAL flush), so a deployment can see how much
//!   its writes are grouped.
//! - The runner is a task of its own: a caller that stops waiting does not stop the statement
//!   its item is in, whose effects are those of a lone write whose caller stopped waiting.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;
use tokio_postgres::types::{ToSql, Type};

use super::{PgRow, PostgresStore, RecordParams, StaticStr, pg, rolled_back};
use crate::call::error::StoreError;
use crate::decide::record::{AuditEntry, EffectRecord, Millis, now_millis};
use crate::store::Store;

/// How many writes may be in flight alone while the batcher is idle; the next one joins a
/// batch (and starts its first runner).
pub(super) const ALONE_MAX: usize = 4;

/// How many statements may be in flight at once: while one waits for its commit's WAL flush,
/// the next executes (on a second connection and server process).
const RUNNERS_MAX: usize = 2;

/// The fewest items a statement sent beside a busy one carries (the second runner's start, or
/// a runner going again while the other is busy). A statement costs the server a fixed part
/// (a round trip, the statement's start, a commit and its WAL flush) and a part per item; sent
/// as soon as a write found the other runner busy, half the statements carried 1–3 items, and
/// with them and the lone writes the server did 1.4–1.8 × the work per call of the same
/// statement with 17 items (BENCHMARKS.md, issue 36 item 4). Fewer items than this wait
/// instead for the busy runner's next statement: at most the rest of its round trip longer.
const SECOND_MIN: usize = 8;

/// The most items one statement carries; the rest wait for the next.
const BATCH_MAX: usize = 256;

/// A write a batch can carry.
pub(super) enum Work {
    /// Insert this claim if its key is absent.
    Insert(Arc<EffectRecord>),
    /// Write `rec` over the row at `row_version`, if its attempt is still `attempt` and its
    /// holder still `holder`, with the op's audit entry.
    Update {
        rec: Arc<EffectRecord>,
        row_version: i64,
        attempt: u32,
        /// The holder the row had when this store read or wrote it last.
        holder: Option<String>,
        audit: Option<AuditEntry>,
    },
}

impl Work {
    fn key(&self) -> &str {
        match self {
            Work::Insert(rec) | Work::Update { rec, .. } => &rec.key,
        }
    }

    /// Whether its commit must wait for the WAL flush: every write but the claim of a class
    /// that needs none ([`crate::value::class::EffectClass::claim_needs_flush`]). An insert of
    /// a completed record (a call that ran without a claim, [`crate::decide::record::Op::Record`])
    /// is flushed: it is the call's only write.
    fn needs_flush(&self) -> bool {
        match self {
            Work::Insert(rec) => {
                rec.state != crate::decide::record::RecordState::Claimed || rec.class.claim_needs_flush()
            }
            Work::Update { .. } => true,
        }
    }
}

/// What a batch answers one item.
pub(super) enum Answer {
    /// The statement committed: the database's clock, the row version written (`None`: the
    /// key was taken, or the update's row had changed), and for an insert the row as it was
    /// before the statement (`None` if there was none, or if the taker committed after the
    /// statement began).
    Done {
        db_now: Millis,
        written: Option<i64>,
        before: Option<Box<PgRow>>,
    },
    /// Not written: do it alone.
    Alone,
}

type Reply = oneshot::Sender<Result<Answer, StoreError>>;

/// What a statement's rows say of one item: the row version written, and the row found before
/// the statement.
type Found = Result<(Option<i64>, Option<PgRow>), StoreError>;

/// The queue of one store's writes waiting for a batch.
#[derive(Default)]
pub(super) struct Batcher {
    /// Writes in flight alone (incremented only under `queue`'s lock, so that the test of
    /// idleness and the taking of a slot are one step).
    alone: AtomicUsize,
    queue: Mutex<Queue>,
}

#[derive(Default)]
struct Queue {
    items: Vec<(Work, Reply)>,
    /// Runner tasks on it.
    runners: usize,
    /// The items of the last statement a runner took.
    last: usize,
}

impl Queue {
    /// Whether the queue holds a batch worth a statement sent beside a busy one.
    fn worth_a_second(&self) -> bool {
        self.items.len() >= (self.last / 2).max(SECOND_MIN)
    }
}

/// A write in flight alone; counted until dropped.
pub(super) struct Alone<'a>(&'a AtomicUsize);

impl Drop for Alone<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Batcher {
    /// A slot to write alone while the batcher is idle (no runner busy, nothing queued) and
    /// fewer than [`ALONE_MAX`] writes are in flight alone, or `None` (then the write joins a
    /// batch).
    pub(super) fn alone(&self) -> Option<Alone<'_>> {
        let q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        let idle = q.runners == 0 && q.items.is_empty() && self.alone.load(Ordering::Relaxed) < ALONE_MAX;
        idle.then(|| {
            self.alone.fetch_add(1, Ordering::Relaxed);
            Alone(&self.alone)
        })
    }
}

impl PostgresStore {
    /// Queue `work` for the next batch and wait for its answer.
    pub(super) async fn batched(&self, work: Work) -> Result<Answer, StoreError> {
        let (tx, rx) = oneshot::channel();
        let start = {
            let mut q = self.shared.batcher.queue.lock().unwrap_or_else(|e| e.into_inner());
            q.items.push((work, tx));
            // The first runner starts at once; the second only for a batch worth its commit
            // (else the busy one takes the queue when its statement returns).
            let start = q.runners == 0 || (q.runners < RUNNERS_MAX && q.worth_a_second());
            q.runners += usize::from(start);
            start
        };
        if start {
            let store = self.clone();
            tokio::spawn(async move { store.run_batches().await });
        }
        rx.await.unwrap_or_else(|_| {
            Err(StoreError::Backend(
                "the PostgreSQL batch writer stopped before answering (its task was cancelled or panicked: is the \
                 runtime shutting down?); whether this write was applied is unknown, and calling again is safe: the \
                 journal's record decides what runs"
                    .to_owned(),
            ))
        })
    }

    /// The runner: send what is queued, answer, repeat until the queue is empty, or until it
    /// holds less than a batch worth a commit while the other runner is busy (which takes it
    /// when its statement returns).
    async fn run_batches(&self) {
        let mut runner = Runner {
            queue: &self.shared.batcher.queue,
            finished: false,
        };
        loop {
            let items = {
                let mut q = runner.queue.lock().unwrap_or_else(|e| e.into_inner());
                // Left to the other runner, busy, when it is less than a batch worth a commit:
                // that runner takes the queue when its statement returns.
                if q.items.is_empty() || (q.runners > 1 && !q.worth_a_second()) {
                    q.runners -= 1;
                    runner.finished = true;
                    return;
                }
                let rest = q.items.len().saturating_sub(BATCH_MAX);
                let mut items = std::mem::take(&mut q.items);
                q.items = items.split_off(items.len() - rest);
                q.last = items.len();
                items
            };
            self.send_batch(items).await;
            // The callers just answered run first (most write again at once: a call's record
            // after its claim, the next call's claim), so that they queue for this runner's
            // next statement instead of finding the batcher idle or a few items taken before
            // them.
            tokio::task::yield_now().await;
        }
    }

    async fn send_batch(&self, mut items: Vec<(Work, Reply)>) {
        items.sort_by(|a, b| a.0.key().cmp(b.0.key()));
        let mut sent: Vec<(Work, Reply)> = Vec::with_capacity(items.len());
        for (work, reply) in items {
            // Sorted: a key's items are next to each other.
            if sent.last().is_some_and(|(last, _)| last.key() == work.key()) {
                let _ = reply.send(Ok(Answer::Alone));
            } else {
                sent.push((work, reply));
            }
        }
        let columns = Columns::new(sent.iter().map(|(work, _)| work));
        let flush = sent.iter().any(|(work, _)| work.needs_flush());
        // Literal labels: the recorder gets a static key, built once.
        let histogram = if flush {
            metrics::histogram!("effect_tool_store_batch_items", "flush" => "true")
        } else {
            metrics::histogram!("effect_tool_store_batch_items", "flush" => "false")
        };
        histogram.record(sent.len() as f64);
        let result = async {
            let client = self.client().await?;
            let sql = if flush {
                &self.shared.sql.batch
            } else {
                &self.shared.sql.batch_unflushed
            };
            bounded!(self, client, async {
                let at = now_millis();
                let rows = super::query::rows(&client, self.shared.unnamed, sql, &columns.refs()).await;
                Ok::<_, StoreError>((at, rows))
            })
        }
        .await;
        let rows = match result {
            Ok((sent_at, Ok(rows))) => {
                if let Some(row) = rows.first() {
                    self.observe_clock(row.get(0), sent_at);
                }
                rows
            }
            Ok((_, Err(e))) if rolled_back(&e) => {
                // Refused by the server, so rolled back: each item goes alone.
                tracing::debug!(error = %e, items = sent.len(), "PostgreSQL batch refused; its writes go alone");
                for (_, reply) in sent {
                    let _ = reply.send(Ok(Answer::Alone));
                }
                return;
            }
            Ok((_, Err(e))) => return answer_all(sent, &pg(e)),
            Err(e) => return answer_all(sent, &e),
        };
        let mut found: Vec<Found> = sent.iter().map(|_| Ok((None, None))).collect();
        let db_now = rows.first().map_or_else(|| self.now(), |row| row.get(0));
        for row in &rows {
            let (ord, key, written): (Option<i64>, Option<&str>, Option<i64>) = (row.get(1), row.get(2), row.get(3));
            let at = match (ord, key) {
                (Some(ord), _) => usize::try_from(ord - 1).ok(),
                (None, Some(key)) => sent.binary_search_by(|(work, _)| work.key().cmp(key)).ok(),
                (None, None) => None,
            };
            let Some(item) = at.and_then(|i| found.get_mut(i)) else {
                continue;
            };
            match (written, &mut *item) {
                (Some(_), Ok(item)) => item.0 = written,
                (None, Ok((_, before))) => match PgRow::from_row(row, 4) {
                    Ok(row) => *before = row,
                    Err(e) => *item = Err(e),
                },
                (_, Err(_)) => {}
            }
        }
        for ((_, reply), found) in sent.into_iter().zip(found) {
            let answer = found.map(|(written, before)| Answer::Done {
                db_now,
                written,
                before: before.map(Box::new),
            });
            let _ = reply.send(answer);
        }
    }
}

/// A runner's hold on the queue. Should it end early (its task cancelled as the runtime shuts
/// down, or a panic), it no longer counts as a runner, and if no other runner is left the
/// queued items are dropped, so that their callers hear of it instead of waiting for ever; the
/// next write starts a runner again.
struct Runner<'a> {
    queue: &'a Mutex<Queue>,
    finished: bool,
}

impl Drop for Runner<'_> {
    fn drop(&mut self) {
        if !self.finished {
            let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
            q.runners -= 1;
            if q.runners == 0 {
                q.items.clear();
            }
        }
    }
}

fn answer_all(items: Vec<(Work, Reply)>, e: &StoreError) {
    for (_, reply) in items {
        let _ = reply.send(Err(StoreError::Backend(e.to_string())));
    }
}

/// The items as the statement's arrays, `$1..$26`: the record's columns in [`super::COLS`]
/// order, then the update's row version and attempt, then the audit entry.
#[derive(Default)]
struct Columns<'a> {
    key: Vec<&'a str>,
    version: Vec<i32>,
    tool: Vec<&'a str>,
    class: Vec<&'static str>,
    run_id: Vec<&'a str>,
    thread_id: Vec<Option<&'a str>>,
    call_id: Vec<Option<&'a str>>,
    fingerprint: Vec<&'a str>,
    input: Vec<String>,
    state: Vec<&'static str>,
    attempt: Vec<i64>,
    lease_until: Vec<Option<i64>>,
    output: Vec<Option<String>>,
    reason: Vec<Option<&'a str>>,
    approval_role: Vec<Option<&'a str>>,
    decided_by: Vec<Option<&'a str>>,
    created_at: Vec<i64>,
    updated_at: Vec<i64>,
    expires_at: Vec<Option<i64>>,
    call_ids: Vec<Option<String>>,
    holder: Vec<Option<String>>,
    row_version: Vec<Option<i64>>,
    old_attempt: Vec<Option<i64>>,
    old_holder: Vec<Option<&'a str>>,
    audit_at: Vec<Option<i64>>,
    actor: Vec<Option<&'a str>>,
    action: Vec<Option<&'a str>>,
    detail: Vec<Option<String>>,
}

impl<'a> Columns<'a> {
    fn new(items: impl Iterator<Item = &'a Work>) -> Self {
        let mut c = Columns::default();
        for work in items {
            let (rec, update) = match work {
                Work::Insert(rec) => (rec, None),
                Work::Update {
                    rec,
                    row_version,
                    attempt,
                    holder,
                    audit,
                } => (rec, Some((*row_version, *attempt, audit.as_ref(), holder.as_deref()))),
            };
            // The values a lone write sends, made the same way.
            let p = RecordParams::new(rec);
            c.key.push(&rec.key);
            c.version.push(p.version);
            c.tool.push(&rec.tool);
            c.class.push(*rec.class.as_str_ref());
            c.run_id.push(&rec.run_id);
            c.thread_id.push(rec.thread_id.as_deref());
            c.call_id.push(rec.call_id.as_deref());
            c.fingerprint.push(&rec.fingerprint);
            c.input.push(p.input);
            c.state.push(*rec.state.as_str_ref());
            c.attempt.push(p.attempt);
            c.lease_until.push(rec.lease_until);
            c.output.push(p.output);
            c.reason.push(rec.reason.as_deref());
            c.approval_role.push(rec.approval_role.as_deref());
            c.decided_by.push(rec.decided_by.as_deref());
            c.created_at.push(rec.created_at);
            c.updated_at.push(rec.updated_at);
            c.expires_at.push(rec.expires_at);
            c.call_ids.push(p.call_ids);
            c.holder.push(p.holder);
            c.row_version.push(update.map(|u| u.0));
            c.old_attempt.push(update.map(|u| i64::from(u.1)));
            c.old_holder.push(update.and_then(|u| u.3));
            let audit = update.and_then(|u| u.2);
            c.audit_at.push(audit.map(|a| a.at));
            c.actor.push(audit.map(|a| a.actor.as_str()));
            c.action.push(audit.map(|a| a.action.as_str()));
            c.detail
                .push(audit.and_then(|a| a.detail.as_ref()).map(|d| d.to_string()));
        }
        c
    }

    fn refs(&self) -> [&(dyn ToSql + Sync); 28] {
        [
            &self.key,
            &self.version,
            &self.tool,
            &self.class,
            &self.run_id,
            &self.thread_id,
            &self.call_id,
            &self.fingerprint,
            &self.input,
            &self.state,
            &self.attempt,
            &self.lease_until,
            &self.output,
            &self.reason,
            &self.approval_role,
            &self.decided_by,
            &self.created_at,
            &self.updated_at,
            &self.expires_at,
            &self.call_ids,
            &self.holder,
            &self.row_version,
            &self.old_attempt,
            &self.old_holder,
            &self.audit_at,
            &self.actor,
            &self.action,
            &self.detail,
        ]
    }
}

/// The array type of each parameter of the batch statement: the record's columns in
/// [`super::COLS`] order, then the update's row version, attempt and holder, then the audit
/// entry's time, actor, action and detail.
const ARRAY_TYPES: [&str; 28] = [
    "text", "int4", "text", "text", "text", "text", "text", "text", "text", "text", "int8", "int8", "text", "text",
    "text", "text", "int8", "int8", "int8", "text", "text", "int8", "int8", "text", "int8", "text", "text", "text",
];

/// The parameter types of the batch statement: [`ARRAY_TYPES`] as PostgreSQL array types.
pub(super) const ARRAY_PARAM_TYPES: [Type; 28] = [
    Type::TEXT_ARRAY,
    Type::INT4_ARRAY,
    Type::TEXT_ARRAY,
    Type::TEXT_ARRAY,
    Type::TEXT_ARRAY,
    Type::TEXT_ARRAY,
    Type::TEXT_ARRAY,
    Type::TEXT_ARRAY,
    Type::TEXT_ARRAY,
    Type::TEXT_ARRAY,
    Type::INT8_ARRAY,
    Type::INT8_ARRAY,
    Type::TEXT_ARRAY,
    Type::TEXT_ARRAY,
    Type::TEXT_ARRAY,
    Type::TEXT_ARRAY,
    Type::INT8_ARRAY,
    Type::INT8_ARRAY,
    Type::INT8_ARRAY,
    Type::TEXT_ARRAY,
    Type::TEXT_ARRAY,
    Type::INT8_ARRAY,
    Type::INT8_ARRAY,
    Type::TEXT_ARRAY,
    Type::INT8_ARRAY,
    Type::TEXT_ARRAY,
    Type::TEXT_ARRAY,
    Type::TEXT_ARRAY,
];

/// The batch statement for schema `s` (quoted); `cols` is the record's columns, `r` the same
/// as selected from alias `r` (as text for JSON), `clock` the database's clock in ms.
///
/// Its rows: `(db_now, ord, key, written, r…)`: for each insert whose key had a row before the
/// statement, that row (`ord` says which item); for each row inserted, its key and row version;
/// for each row updated, its item's `ord` and new row version. No join on the items' keys
/// (those of common table expressions have no index, and the planner, which expects ten items,
/// would compare every pair).
/// The batch statement. With `unflushed` (a setting function, see `postgres::UNFLUSHED`), it is
/// called on each item, so its transaction commits without waiting for the WAL flush.
pub(super) fn batch_sql(s: &str, cols: &str, r: &str, clock: &str, unflushed: Option<&str>) -> String {
    let names: Vec<&str> = cols.split(", ").collect();
    debug_assert_eq!(names.len() + 7, ARRAY_TYPES.len());
    let value = |c: &str| match c {
        "input" | "output" => format!("u.{c}::json"),
        _ => format!("u.{c}"),
    };
    let params: Vec<String> = ARRAY_TYPES
        .iter()
        .enumerate()
        .map(|(i, t)| format!("${}::{t}[]", i + 1))
        .collect();
    let values: Vec<String> = names.iter().map(|c| value(c)).collect();
    let set: Vec<String> = names[1..].iter().map(|c| format!("{c} = {}", value(c))).collect();
    format!(
        "WITH u AS (
           SELECT * FROM unnest({params})
           WITH ORDINALITY AS u({cols}, old_row_version, old_attempt, old_holder, audit_at, actor, action, detail, ord){filter}),
         ins AS (
           INSERT INTO {s}.records ({cols})
           SELECT {values} FROM u WHERE old_row_version IS NULL ORDER BY ord
           ON CONFLICT (key) DO NOTHING
           RETURNING key, row_version),
         upd AS (
           UPDATE {s}.records t SET {set}, row_version = nextval('{s}.row_version_seq')
           FROM u
           WHERE u.old_row_version IS NOT NULL AND t.key = u.key AND t.row_version = u.old_row_version
             AND t.attempt = u.old_attempt AND t.holder IS NOT DISTINCT FROM u.old_holder
           RETURNING t.key, t.row_version, u.ord, u.audit_at, u.actor, u.action, u.detail),
         aud AS (
           INSERT INTO {s}.audit (key, at, actor, action, detail)
           SELECT key, audit_at, actor, action, detail::json FROM upd WHERE action IS NOT NULL ORDER BY ord)
         SELECT {clock} AS db_now, u.ord, NULL::text AS key, NULL::int8 AS written, {r}
           FROM u JOIN {s}.records r ON r.key = u.key WHERE u.old_row_version IS NULL
         UNION ALL
         SELECT {clock}, NULL, ins.key, ins.row_version, {nulls} FROM ins
         UNION ALL
         SELECT {clock}, upd.ord, NULL, upd.row_version, {nulls} FROM upd",
        params = params.join(", "),
        values = values.join(", "),
        set = set.join(", "),
        nulls = vec!["NULL"; names.len() + 1].join(", "),
        filter = unflushed.map_or_else(String::new, |f| format!(" WHERE {f} IS NOT NULL")),
    )
}
