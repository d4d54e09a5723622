//! Stage 4, the leading call of a key in this process (numbered as in the [layer's
//! docs](super)): 4a claim, 4b take over, 4c start, 4d execute, 4e settle a failure, 4f record.
//! Each stage is one method of [`Lead`]; [`Engine::lead`] runs them in a loop (a retry, a wait
//! for another process, a recover that found nothing claim again).

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

use super::complete::Completion;
use super::errors::{cancelled, shutting_down, store_error, tool_error};
use super::execute::{Exec, Unfinished, classify, interrupted_reason, panic_message, run_tool};
use super::lease::{Held, LeaseClock, Leased};
use super::lifecycle::Engine;
use super::observe;
use super::ongoing::Call;
use super::report::{Disposition, Settled};
use crate::call::error::{ApprovalPending, BlockReason, EffectError, StoreError};
use crate::call::key;
use crate::call::tool::{Recovery, Tool};
use crate::decide::policy::Decision;
use crate::decide::record::{ApprovedEdit, Intent, Millis, Op, OpOutcome, RecordState, Rejected};
use crate::store::{Recorded, StoreExt};
use crate::value::class::EffectClass;
use crate::value::outcome::{Failure, Outcome};

/// What a stage leads to.
enum Step<G, O, E> {
    /// On to the next stage, with this.
    Go(G),
    /// Claim again (after a retry's backoff, a wait for another process, a lost claim before
    /// the tool started).
    Again,
    /// The call ends.
    Done(Settled<O, E>),
}

/// Run a stage: its value, or `continue`/`return` the lead loop.
macro_rules! stage {
    ($step:expr) => {
        match $step {
            Step::Go(value) => value,
            Step::Again => continue,
            Step::Done(settled) => return settled,
        }
    };
}

/// How a `recover` asked under the claim ended.
pub(super) enum Recovered<O, E> {
    /// It answered.
    Answer(Result<Recovery<O>, E>),
    /// It timed out or panicked.
    Unfinished(Unfinished),
    /// The lease had lapsed before it was asked: it was not.
    Lapsed,
    /// The engine's shutdown deadline passed while it ran: it was stopped.
    Aborted,
}

/// How often a claim may lapse before its tool starts (a journal slower than the lease)
/// before the call gives up.
const MAX_LAPSES_BEFORE_START: u32 = 3;

/// The state of a leading call across its stages.
struct Lead<'e, 'c, 'a, T: Tool> {
    engine: &'e Engine,
    call: &'c Call<'a, T>,
    args: T::Args,
    /// The approval the call still needs (`None` once a person approved it).
    approval: Option<std::borrow::Cow<'static, str>>,
    /// The redacted input for the first claim; a re-claim encodes it again rather than every
    /// call paying for a copy.
    first_input: Option<Value>,
    /// Whether the lookup found no record (the first claim may skip the store's own read).
    unseen: bool,
    /// Executions so far (the policy's attempt count).
    exec: u32,
    /// How long to wait before looking again at another process's live claim.
    poll: Duration,
    /// How often a claim lapsed before its tool started.
    lapses: u32,
    /// The edited arguments a person approved the call with, found by the claim, until they
    /// are put in place ([`Lead::edited`]).
    edit: Option<ApprovedEdit>,
    /// When the outcome the last claim took over became unknown (the journal's clock): what a
    /// settle delay counts from.
    unknown_since: Millis,
}

impl Engine {
    /// Claim, execute and record `call` (the key's leading call in this process).
    pub(super) async fn lead<T: Tool>(
        &self,
        call: &Call<'_, T>,
        input: Value,
        args: T::Args,
        unseen: bool,
    ) -> Settled<T::Output, T::Error> {
        // A declared approval is the floor; a policy's (stage 1b) only adds one. Arguments a
        // person already approved (edited, run under their own key) park for neither.
        let approval = if call.approved {
            None
        } else if call.tool.needs_approval(&args) {
            call.tool.declared_approval().map(std::borrow::Cow::Borrowed)
        } else {
            call.policy_approval.clone().map(std::borrow::Cow::Owned)
        };
        let mut lead = Lead {
            engine: self,
            call,
            args,
            approval,
            first_input: Some(input),
            unseen,
            exec: 0,
            poll: self.inner.config.poll_interval,
            lapses: 0,
            edit: None,
            unknown_since: 0,
        };
        loop {
            let held = stage!(lead.claim().await);
            if let Some(edit) = lead.edit.take() {
                stage!(lead.edited(&held, edit).await);
            }
            stage!(lead.take_over(&held).await);
            stage!(lead.start(&held).await);
            match stage!(lead.execute(&held).await) {}
        }
    }

    /// Ask the tool's `recover` check ([`Tool::verify`]) under the claim, within the tool's
    /// timeout; a panic is an answer nobody can trust. A tool with a settle delay
    /// ([`Tool::RECOVER_SETTLE`]) is asked no sooner than that after `since`, when the outcome
    /// became unknown (the journal's clock); the claim is renewed meanwhile. Not asked once the
    /// lease has lapsed; once asked, it is let finish (it only reads), and what comes after
    /// checks the claim again (a renewal before the tool starts, the fenced record of what it
    /// found).
    pub(super) async fn recover_held<T: Tool>(
        &self,
        tool: &T,
        held: &Held,
        args: &T::Args,
        since: Millis,
    ) -> Recovered<T::Output, T::Error> {
        use futures::FutureExt;
        let settle = settle_wait(T::RECOVER_SETTLE, since, self.inner.store.now());
        let asked = async {
            if let Some(wait) = settle {
                tracing::debug!(?wait, "waiting for the remote system to settle before asking recover");
                tokio::time::sleep(wait).await;
            }
            let asked = std::panic::AssertUnwindSafe(tool.verify(&held.ctx, args)).catch_unwind();
            let answer = match T::TIMEOUT {
                Some(limit) => match tokio::time::timeout(limit, asked).await {
                    Ok(answer) => answer,
                    Err(_) => return Err(Unfinished::TimedOut(limit)),
                },
                None => asked.await,
            };
            answer.map_err(|panic| Unfinished::Panicked(panic_message(panic.as_ref())))
        };
        match self.under_claim(held, false, asked).await {
            Leased::Done(Ok(answer)) => Recovered::Answer(answer),
            Leased::Done(Err(lost)) => Recovered::Unfinished(lost),
            Leased::Lapsed => Recovered::Lapsed,
            Leased::Aborted => Recovered::Aborted,
        }
    }
}

/// How long to wait before asking `recover`, with a settle delay of `settle`, for an outcome
/// unknown since `since`, at `now` (the journal's clock): `None` when nothing is left to wait.
pub(super) fn settle_wait(settle: Option<Duration>, since: Millis, now: Millis) -> Option<Duration> {
    let settle = settle?;
    let waited = Duration::from_millis(now.saturating_sub(since).max(0) as u64);
    Some(settle.saturating_sub(waited)).filter(|d| !d.is_zero())
}

impl<T: Tool> Lead<'_, '_, '_, T> {
    fn key(&self) -> &str {
        self.call.key
    }

    fn store(&self) -> &Arc<dyn crate::store::Store> {
        &self.engine.inner.store
    }

    fn intent(&self, input: Value) -> Intent {
        let approval = self.approval.as_deref().map(str::to_owned);
        self.call.intent(input, approval, &self.engine.inner.holder)
    }

    /// Stage 4a, claim: claim the key (a write-ahead intent with a lease), or end with what the journal
    /// holds (a recorded result, an approval to wait for, a record in doubt), or wait for
    /// another process's live claim and claim again.
    async fn claim(&mut self) -> Step<Held, T::Output, T::Error> {
        let (call, inner) = (self.call, &self.engine.inner);
        if let Some(stopped) = self.engine.stopped::<T>(call.run, call.name(), call.key) {
            return Step::Done(stopped);
        }
        let first = self.first_input.is_some();
        let input = match self.next_input() {
            Ok(input) => input,
            Err(settled) => return Step::Done(settled),
        };
        let mut claim = Op::Claim {
            intent: self.intent(input),
            lease_ms: inner.config.lease.as_millis() as u64,
            takeover_in_doubt: T::HAS_RECOVER || T::CLASS == EffectClass::Idempotent,
        };
        // A call that would park for a person: a standing approval covering it claims instead.
        let mut grant = None;
        if let (Some(role), Op::Claim { intent, .. }) = (self.approval.as_deref(), &claim)
            && let Some(g) = self.engine.covering_grant(role, intent).await
        {
            let recheck = (role.to_owned(), intent.clone());
            claim = super::grant::granted(claim, &g);
            grant = Some((g, recheck));
        }
        // The lease runs from when the claim was sent (the journal's from when it was written).
        let sent = Instant::now();
        let sent_at = self.store().now();
        let claimed = if first && self.unseen {
            self.store().claim_unseen(self.key(), claim).await
        } else {
            self.store().apply(self.key(), claim).await
        };
        let (attempt, previous) = match claimed {
            Err(StoreError::Rejected(Rejected::KeyOfAnotherTool { recorded_tool, .. })) => {
                let err = EffectError::KeyOfAnotherTool {
                    tool: self.call.name().to_owned(),
                    key: self.key().to_owned(),
                    recorded_tool,
                };
                return Step::Done((Err(err), Disposition::Failed));
            }
            Err(e) => return Step::Done(self.claim_failed(e, sent_at).await),
            Ok(OpOutcome::Claimed {
                attempt,
                previous,
                before,
            }) => {
                // A person approved this call: its retries within this call (after a
                // transient failure, or a recover that found nothing) need no new approval.
                if let Some(b) = &before {
                    if b.state == RecordState::Approved {
                        self.approval = None;
                    }
                    // The person edited the arguments: those run (`Lead::edited`).
                    self.edit = b.approved_edit();
                }
                self.unknown_since = before.as_ref().map_or(sent_at, |b| b.updated_at);
                // The grant read again before anything runs: revoked or lapsed since, the
                // claim is given back and the call claims again.
                if let Some((g, (role, intent))) = &grant
                    && !self
                        .engine
                        .grant_still_covers(self.key(), attempt, g, role, intent)
                        .await
                {
                    return Step::Again;
                }
                (attempt, previous)
            }
            // Pending its provider's callback: wait a while for it, then say so.
            Ok(OpOutcome::InFlight(rec)) if rec.state == RecordState::Pending => {
                if self.engine.wait_for_callback(self.key(), &rec, call.run).await {
                    return Step::Again;
                }
                return Step::Done(call.blocked(BlockReason::AwaitingCallback));
            }
            Ok(OpOutcome::InFlight(rec)) => {
                self.wait_for_holder(&rec).await;
                return Step::Again;
            }
            Ok(OpOutcome::Recorded(rec)) if rec.fingerprint != call.fingerprint => {
                // A result recorded for another input: say which fields differ.
                if let Ok(given) = self.redacted_input() {
                    self.engine.note_input_differs(call, Some(&rec.input), &given).await;
                }
                return Step::Done(self.unclaimed(OpOutcome::Recorded(rec)));
            }
            Ok(other) => return Step::Done(self.unclaimed(other)),
        };
        tracing::Span::current().record("effect_tool.attempt", i64::from(attempt));
        let lease = LeaseClock::new(sent, inner.config.lease);
        let secret = self.engine.inner.marker_secret.get().cloned().flatten();
        let ctx = call.context(attempt, Some(lease.clone()), secret);
        Step::Go(Held {
            attempt,
            previous,
            lease,
            ctx,
        })
    }

    /// The redacted input for the next claim: the lookup's for the first, encoded again after.
    fn next_input(&mut self) -> Result<Value, Settled<T::Output, T::Error>> {
        if let Some(input) = self.first_input.take() {
            return Ok(input);
        }
        self.redacted_input()
    }

    /// An error text of the tool or its hooks as the journal and the logs may hold it: the
    /// values of the `#[sensitive]` arguments cut out of it by value ([`key::scrub`]).
    fn error_text(&self, e: &dyn std::fmt::Display) -> String {
        super::execute::error_text::<T>(&self.args, e)
    }

    /// `text` as a log line may quote it: through the engine's redaction hook.
    fn log_text(&self, text: &str) -> String {
        self.engine.redact_text(crate::call::redact::Site::Log, text.to_owned())
    }

    /// This call's input as the journal keeps it (sensitive fields redacted).
    fn redacted_input(&self) -> Result<Value, Settled<T::Output, T::Error>> {
        match serde_json::to_value(&self.args) {
            // As `key::identify_with` journals it: sensitive values bound by their digests.
            Ok(v) => Ok(key::bind(
                v,
                T::SENSITIVE,
                self.engine.inner.marker_secret.get().and_then(Option::as_ref),
            )),
            Err(e) => {
                let err = EffectError::InvalidArguments {
                    tool: self.call.name().to_owned(),
                    message: format!("arguments do not serialize: {e}"),
                };
                Err((Err(err), Disposition::Failed))
            }
        }
    }

    /// Another process holds a live claim: wait (until its lease would end, at most the poll
    /// interval, doubling up to 500 ms), then look again. A cancelled run or a shutdown ends
    /// the wait at once.
    async fn wait_for_holder(&mut self, rec: &crate::decide::record::EffectRecord) {
        let until_expiry = rec
            .lease_until
            .map(|l| (l - self.store().now()).max(1) as u64)
            .unwrap_or(1);
        let wait = self.poll.min(Duration::from_millis(until_expiry));
        self.engine.back_off(self.call.run, wait).await;
        self.poll = (self.poll * 2).min(Duration::from_millis(500));
    }

    /// The journal answered the claim with what it holds instead of a claim: a recorded result
    /// (replayed), a record in doubt, an approval to wait for, a denial, a compensation.
    fn unclaimed(&self, outcome: OpOutcome) -> Settled<T::Output, T::Error> {
        let (call, key) = (self.call, self.key().to_owned());
        let err = match outcome {
            OpOutcome::Recorded(rec) => return self.engine.replay(call, &Recorded::from(rec)),
            OpOutcome::InDoubt(_) => return call.blocked(BlockReason::AwaitingResolution),
            OpOutcome::AwaitingApproval(rec) => {
                let pending = ApprovalPending {
                    key,
                    tool: self.call.name().to_owned(),
                    run_id: call.run.run_id().to_owned(),
                    role: rec.approval_role.unwrap_or_default(),
                };
                return (
                    Err(EffectError::ApprovalPending(pending)),
                    Disposition::AwaitingApproval,
                );
            }
            OpOutcome::Denied(rec) => EffectError::Denied {
                tool: self.call.name().to_owned(),
                key,
                by: rec.decided_by.unwrap_or_else(|| "a person".to_owned()),
                reason: rec.reason,
            },
            OpOutcome::Compensated(_) => EffectError::Compensated {
                tool: self.call.name().to_owned(),
                key,
            },
            OpOutcome::Claimed { .. } | OpOutcome::InFlight(_) | OpOutcome::Done(_) => {
                let e = StoreError::Backend("claim answered with a non-claim outcome".to_owned());
                store_error::<T>(self.call.name(), e)
            }
        };
        (Err(err), Disposition::Failed)
    }

    /// The claim's store call failed: nothing ran. A backend failure may hide a commit (the
    /// connection was lost after the claim was written): once the journal answers again, a
    /// claim of this call written since it was sent is released, so that it does not go stale
    /// and in doubt.
    async fn claim_failed(
        &self,
        error: StoreError,
        sent_at: crate::decide::record::Millis,
    ) -> Settled<T::Output, T::Error> {
        if matches!(error, StoreError::Backend(_)) {
            self.release_hidden_claim(&error, sent_at).await;
        }
        (Err(store_error::<T>(self.call.name(), error)), Disposition::Failed)
    }

    /// Look for a claim this call wrote though its answer was lost, with backoff, for at most
    /// [`Engine::with_store_retry`]; release it if found. A claim counts as this
    /// call's when it is live, was made by this engine instance (its holder), under the same
    /// run, tool-call id and input, and was written after this call's claim was sent (on the
    /// journal's clock). The holder matters: the same call sent to another process at the same
    /// time (a client's retry) matches every other test, and releasing its live claim while its
    /// tool runs would let the effect be applied again (found by the simulation: `tests/simulation.rs`, seeds 41 and 281).
    /// A claim that took over an unknown outcome is never released either: the attempt it took
    /// over may have applied the effect, and a release would erase that evidence (seeds 26 and 272); it
    /// is left to go stale, and the next attempt reconciles it.
    async fn release_hidden_claim(&self, error: &StoreError, sent_at: crate::decide::record::Millis) {
        let call = self.call;
        let window = self.engine.inner.store_retry();
        let started = Instant::now();
        let mut backoff = Duration::from_millis(20);
        loop {
            match self.store().get(self.key()).await {
                Ok(Some(rec))
                    if rec.state == RecordState::Claimed
                        && !rec.took_over()
                        && rec
                            .holder
                            .as_ref()
                            .is_some_and(|h| h.instance == self.engine.inner.holder.instance)
                        && rec.run_id == call.run.run_id()
                        && rec.call_id == call.call_id
                        && rec.fingerprint == call.fingerprint
                        && rec.updated_at >= sent_at =>
                {
                    let reason = format!(
                        "the claim's answer was lost ({error}); released before the tool ran: nothing happened"
                    );
                    match self.store().release(self.key(), rec.attempt, Some(reason)).await {
                        Ok(_) => {
                            tracing::warn!(%error, attempt = rec.attempt, "released a claim whose answer was lost; the tool did not run")
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "could not release a claim whose answer was lost; the next attempt reconciles it")
                        }
                    }
                    return;
                }
                Ok(_) => return,
                Err(e) if started.elapsed() + backoff < window => {
                    tracing::debug!(error = %e, "the journal does not answer yet; looking again for a claim whose answer was lost");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "the journal did not answer in time; a claim whose answer was lost, if any, is left for the next attempt to reconcile");
                    return;
                }
            }
        }
    }

    /// Between 4a and 4b, for a call a person approved with edited arguments: build them (the
    /// edit's fields over this call's own, sensitive values kept from this call, which the
    /// person could not see), and find their key. Under this call's key they replace its
    /// arguments and the stages go on; under another key they run there, once, as a journaled
    /// call of their own that needs no second approval, and this key records that call's result
    /// (see [`ApprovedEdit`]).
    async fn edited(&mut self, held: &Held, edit: ApprovedEdit) -> Step<(), T::Output, T::Error> {
        let call = self.call;
        let invalid = |message: String| EffectError::InvalidArguments {
            tool: self.call.name().to_owned(),
            message,
        };
        let mut args = match serde_json::to_value(&self.args) {
            Ok(v) => v,
            Err(e) => {
                return Step::Done(
                    self.release_edit(held, invalid(format!("arguments do not serialize: {e}")))
                        .await,
                );
            }
        };
        if let (Some(given), Some(edited)) = (args.as_object_mut(), edit.input.as_object()) {
            given.retain(|k, _| T::SENSITIVE.contains(&k.as_str()) || edited.contains_key(k));
            for (k, v) in edited {
                if !T::SENSITIVE.contains(&k.as_str()) {
                    given.insert(k.clone(), v.clone());
                }
            }
        }
        let args: T::Args = match serde_json::from_value(args) {
            Ok(a) => a,
            Err(e) => {
                let err = invalid(format!("the arguments {} approved do not decode: {e}", edit.by));
                return Step::Done(self.release_edit(held, err).await);
            }
        };
        let _ = call.edited.set(edit.changed.clone());
        let edited_key = match key::identify(call.tool, call.run, &args) {
            Ok(identity) => identity.key,
            Err(e) => {
                return Step::Done(
                    self.release_edit(held, invalid(format!("arguments do not serialize: {e}")))
                        .await,
                );
            }
        };
        if edited_key == self.key() {
            tracing::info!(changed = ?edit.changed, by = %edit.by, "running the arguments a person edited, under the same key");
            self.args = args;
            return Step::Go(());
        }
        tracing::info!(changed = ?edit.changed, by = %edit.by, edited_key = %edited_key, "running the arguments a person edited, under their own key");
        let opts = crate::engine::CallOptions {
            call_id: call.call_id.clone(),
        };
        let report = Box::pin(self.engine.call_journaled_as(call.tool, call.run, opts, args, true)).await;
        match report.result {
            Ok(out) => {
                let value = serde_json::to_value(&out);
                if let Ok(value) = value {
                    let again = || serde_json::to_value(&out).ok();
                    // Not written: the claim goes stale, and its takeover finds the edit again
                    // and the edited key's record (a replay).
                    let _ = self
                        .engine
                        .complete_under_claim(self.call.name(), self.key(), held, value, again)
                        .await;
                }
                Step::Done((Ok(out), report.disposition))
            }
            Err(err) => {
                let reason = format!(
                    "the edited arguments ran under their own key `{edited_key}` and did not complete ({err}); this key ran nothing"
                );
                if let Err(e) = self.store().release(self.key(), held.attempt, Some(reason)).await {
                    tracing::warn!(error = %e, "could not release the claim of an edited call; it goes stale");
                }
                Step::Done((Err(err), report.disposition))
            }
        }
    }

    /// The edited arguments cannot run: give the claim back (nothing ran) and end with `err`.
    async fn release_edit(&self, held: &Held, err: EffectError<T::Error>) -> Settled<T::Output, T::Error> {
        let reason = format!("the edited arguments could not run: {err}");
        if let Err(e) = self.store().release(self.key(), held.attempt, Some(reason)).await {
            tracing::warn!(error = %e, "could not release the claim of an edited call; it goes stale");
        }
        (Err(err), Disposition::Failed)
    }

    /// Stage 4b, take over: the claim took over an unknown outcome (a stale claim, a record in doubt):
    /// reconcile it with `recover` before anything else, or stop for a person.
    async fn take_over(&mut self, held: &Held) -> Step<(), T::Output, T::Error> {
        let Some(previous) = held.previous else {
            return self.check_first(held).await;
        };
        let (key, attempt) = (self.key(), held.attempt);
        tracing::info!(?previous, "taking over a claim whose outcome is unknown");
        observe::taken_over(&self.engine.inner.events, self.call.name(), key, attempt);
        if T::HAS_RECOVER && !self.reconfirm(held).await {
            tracing::warn!("the claim's lease lapsed before reconciling; not asking recover");
            return self.lapsed(held).await;
        }
        if !T::HAS_RECOVER {
            if T::CLASS == EffectClass::Idempotent {
                return Step::Go(());
            }
            let reason = BlockReason::InDoubtAfterCrash;
            let _ = self.store().mark_in_doubt(key, attempt, reason.to_string()).await;
            return Step::Done(self.call.blocked(reason));
        }
        let since = self.unknown_since;
        match self.engine.recover_held(self.call.tool, held, &self.args, since).await {
            Recovered::Answer(Ok(Recovery::Applied(out))) => {
                Step::Done(self.record(held, out, Disposition::Reconciled).await)
            }
            Recovered::Answer(Ok(Recovery::Inconclusive { reason, .. })) => {
                tracing::warn!(%reason, "recover was inconclusive on a record in doubt; it stays in doubt");
                let reason = format!("recover was inconclusive ({reason}); ask again later");
                let _ = self.store().mark_in_doubt(key, attempt, reason).await;
                Step::Done(self.call.blocked(BlockReason::RecoverFailed))
            }
            Recovered::Answer(Ok(Recovery::NotApplied)) => {
                // Recover ran under the lease, but a lease can still be lost (a paused process,
                // a store that could not renew): only run while the claim is ours, else look
                // again at what the newer attempt did.
                let sent = Instant::now();
                let lease = self.engine.inner.config.lease;
                match self.store().renew(key, attempt, lease.as_millis() as u64).await {
                    Ok(_) => {
                        held.lease.extend(sent, lease);
                        Step::Go(())
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "lost the claim while reconciling; not running");
                        if matches!(e, StoreError::Rejected(_)) {
                            return Step::Again;
                        }
                        Step::Done((Err(store_error::<T>(self.call.name(), e)), Disposition::Failed))
                    }
                }
            }
            // The hook's failure is not the tool's: the earlier attempt's outcome is still
            // unknown, so the call is blocked (never "failed, nothing happened", which would
            // invite a call in another form: a new key, a second effect).
            Recovered::Answer(Err(e)) => {
                let e = self.error_text(&e);
                tracing::warn!(error = %self.log_text(&e), "recover failed on a record in doubt; it stays in doubt");
                let reason = format!("recover failed: {e}");
                let _ = self.store().mark_in_doubt(key, attempt, reason).await;
                Step::Done(self.call.blocked(BlockReason::RecoverFailed))
            }
            Recovered::Unfinished(lost) => {
                tracing::warn!(reason = %lost.reason(), "recover failed on a record in doubt; it stays in doubt");
                let reason = format!("recover {}", lost.reason());
                let _ = self.store().mark_in_doubt(key, attempt, reason).await;
                Step::Done(self.call.blocked(BlockReason::RecoverFailed))
            }
            // Not asked: the claim stays as it is, and the attempt that owns the key (or the
            // next one) reconciles the unknown outcome. Look again at what that attempt did.
            Recovered::Lapsed => {
                tracing::warn!("the claim's lease lapsed before reconciling; not asking recover");
                self.lapsed(held).await
            }
            Recovered::Aborted => Step::Done(shutting_down::<T>(self.call.name(), key)),
        }
    }

    /// Stage 4b for a claim that took nothing over, for a tool that asks `recover` before every
    /// first execution ([`Tool::RECOVER_FIRST`], `#[tool(recover = ..., recover_first)]`): an
    /// effect the journal does not know of (a restored journal, a record past its ttl, another
    /// path) is recorded instead of made again. When `recover` cannot tell (inconclusive, failed), nothing runs:
    /// the claim is released and the call blocked, to be called again later.
    async fn check_first(&mut self, held: &Held) -> Step<(), T::Output, T::Error> {
        if !(T::RECOVER_FIRST && T::HAS_RECOVER) {
            return Step::Go(());
        }
        let (key, attempt) = (self.key(), held.attempt);
        // Nothing of this journal's is unknown: no settle delay to wait out.
        let why = match self
            .engine
            .recover_held(self.call.tool, held, &self.args, Millis::MIN)
            .await
        {
            Recovered::Answer(Ok(Recovery::NotApplied)) => return Step::Go(()),
            Recovered::Answer(Ok(Recovery::Applied(out))) => {
                tracing::info!("recover found the effect before the first run; recording it, not running");
                return Step::Done(self.record(held, out, Disposition::Reconciled).await);
            }
            Recovered::Answer(Ok(Recovery::Inconclusive { reason, .. })) => format!("was inconclusive ({reason})"),
            Recovered::Answer(Err(e)) => format!("failed: {e}"),
            Recovered::Unfinished(lost) => lost.reason(),
            Recovered::Lapsed => return self.lapsed(held).await,
            Recovered::Aborted => return Step::Done(shutting_down::<T>(self.call.name(), key)),
        };
        tracing::warn!(%why, "recover before the first run could not tell whether the effect exists; not running");
        let reason = format!("recover before the first run {why}; nothing ran, call again later");
        let _ = self.store().release(key, attempt, Some(reason)).await;
        Step::Done(self.call.blocked(BlockReason::RecoverFailed))
    }

    /// Stage 4c, start: the last look before the tool starts. A cancelled run, a shutting-down engine
    /// or a lapsed lease stop it here: the claim is released (nothing happened), or, if it took
    /// over an unknown outcome nothing checked, marked in doubt.
    async fn start(&mut self, held: &Held) -> Step<(), T::Output, T::Error> {
        let stop = if self.call.run.cancellation().is_cancelled() {
            Some((
                "the run was cancelled before the tool started",
                cancelled::<T>(self.call.name(), self.key()),
            ))
        } else if self.engine.inner.shutting_down() {
            Some((
                "the engine shut down before the tool started",
                shutting_down::<T>(self.call.name(), self.key()),
            ))
        } else {
            None
        };
        if stop.is_none() && self.reconfirm(held).await {
            return Step::Go(());
        }
        let reason = stop
            .as_ref()
            .map_or("the claim's lease lapsed before the tool started", |s| s.0);
        let (key, attempt) = (self.key(), held.attempt);
        let _ = if held.previous.is_some() && !T::HAS_RECOVER {
            // Taken over from an unknown outcome that nothing checked: still unknown (a write
            // the journal fences if another attempt took the key over meanwhile).
            self.store().mark_in_doubt(key, attempt, reason.to_owned()).await
        } else {
            self.store().release(key, attempt, Some(reason.to_owned())).await
        };
        if let Some((_, settled)) = stop {
            return Step::Done(settled);
        }
        tracing::warn!("the claim's lease lapsed before the tool started; not running");
        self.lapsed(held).await
    }

    /// Whether the claim is still this attempt's by the engine's clock. A lease that lapsed
    /// before anything ran under it (a claim slower to answer than the lease) is renewed once:
    /// the journal renews only the attempt that still holds the key, and the lease then runs
    /// from when the renewal was sent.
    async fn reconfirm(&self, held: &Held) -> bool {
        if !held.lease.lapsed() {
            return true;
        }
        let sent = Instant::now();
        let lease = self.engine.inner.config.lease;
        match self
            .store()
            .renew(self.key(), held.attempt, lease.as_millis() as u64)
            .await
        {
            Ok(_) => held.lease.extend(sent, lease),
            Err(StoreError::Rejected(_)) => held.lease.lose(),
            Err(e) => tracing::warn!(error = %e, "could not renew a lapsed lease"),
        }
        !held.lease.lapsed()
    }

    /// The claim's lease lapsed before the tool started: claim again (the journal says what the
    /// attempt that owns the key did), unless that keeps happening.
    async fn lapsed<G>(&mut self, held: &Held) -> Step<G, T::Output, T::Error> {
        self.lapses += 1;
        if self.lapses >= MAX_LAPSES_BEFORE_START {
            return Step::Done(self.claim_lost(held, false).await);
        }
        Step::Again
    }

    /// Stage 4d, execute: run the tool under the claim, then record its output or settle its failure.
    async fn execute(&mut self, held: &Held) -> Step<std::convert::Infallible, T::Output, T::Error> {
        self.exec += 1;
        let engine = self.engine;
        let run = run_tool(self.call.tool, &held.ctx, self.args.clone(), &engine.inner.abort);
        let result = match engine.under_claim(held, true, run).await {
            Leased::Done(exec) => exec,
            Leased::Lapsed => Exec::Lapsed,
            Leased::Aborted => Exec::Cancelled,
        };
        let (key, attempt) = (self.key(), held.attempt);
        let (outcome, failure) = match result {
            Exec::Done(Ok(out)) => return Step::Done(self.record(held, out, Disposition::Executed).await),
            Exec::Done(Err(e)) if held.lease.refused() => {
                // It stopped at `EffectCtx::ensure_lease`: release the claim only if the tool
                // says nothing happened (the journal fences it if the key was taken over); else
                // leave it for whoever owns the key to reconcile. (Other failures after a lapse
                // are settled as usual: every write is fenced.)
                if matches!(
                    classify(&e),
                    Outcome::Failed(Failure::Definitive | Failure::Transient { .. })
                ) {
                    let reason = format!("failed after its lease lapsed: {}", self.error_text(&e));
                    let _ = self.store().release(key, attempt, Some(reason)).await;
                }
                return Step::Done(self.claim_lost(held, false).await);
            }
            Exec::Done(Err(e)) => (classify(&e), Err(e)),
            Exec::Unfinished(lost) => (Outcome::Failed(Failure::Unknown), Ok(lost)),
            Exec::Lapsed => {
                // Stopped mid-way: the outcome of this attempt is unknown, but the key is no
                // longer this attempt's to mark. The claim stays as a crash leaves it.
                tracing::warn!("the claim's lease lapsed while the tool ran; it was stopped and nothing is written");
                return Step::Done(self.claim_lost(held, false).await);
            }
            Exec::Cancelled => {
                let reason = interrupted_reason(&engine.inner.abort);
                let _ = self.store().mark_in_doubt(key, attempt, reason.to_owned()).await;
                let err = EffectError::Interrupted {
                    tool: self.call.name().to_owned(),
                    key: key.to_owned(),
                };
                return Step::Done((Err(err), Disposition::Failed));
            }
        };
        self.settle_failure(held, outcome, failure).await
    }

    /// Stage 4e, settle a failure: the tool failed; the policy says what that leads to (retry, reconcile, block,
    /// fail), and the claim is released or marked in doubt accordingly.
    async fn settle_failure(
        &mut self,
        held: &Held,
        outcome: Outcome,
        failure: Result<Unfinished, T::Error>,
    ) -> Step<std::convert::Infallible, T::Output, T::Error> {
        let (key, attempt) = (self.key(), held.attempt);
        let reason = match &failure {
            Err(e) => self.error_text(e),
            Ok(lost) => self.error_text(&lost.reason()),
        };
        let as_error = |failure: Result<Unfinished, T::Error>| match failure {
            Err(e) => tool_error::<T>(self.call.name(), Some(key), outcome, e),
            Ok(lost) => lost.into_error(self.call.name(), Some(key)),
        };
        let failed = |failure| Step::Done((Err(as_error(failure)), Disposition::Failed));
        let decision = self.engine.decide_failure(self.call, outcome, self.exec, attempt).await;
        tracing::debug!(?decision, reason = %self.log_text(&reason), "tool failed");
        match decision {
            Decision::Retry { after } => {
                observe::tool_retried(self.call.name());
                if let Err(e) = self.store().release(key, attempt, Some(reason)).await {
                    tracing::warn!(error = %e, "could not release the claim before retrying");
                }
                // A cancelled run or a shutdown does not wait out the backoff (the next claim
                // then stops).
                self.engine.back_off(self.call.run, after).await;
                Step::Again
            }
            Decision::Reconcile => {
                let since = self.store().now();
                match self.engine.recover_held(self.call.tool, held, &self.args, since).await {
                    Recovered::Answer(Ok(Recovery::Applied(out))) => {
                        return Step::Done(self.record(held, out, Disposition::Reconciled).await);
                    }
                    Recovered::Answer(Ok(Recovery::Inconclusive { reason: why, .. })) => {
                        tracing::warn!(%why, "recover was inconclusive after an unknown outcome");
                        let reason = format!("{reason}; then recover was inconclusive ({why}); ask again later");
                        let _ = self.store().mark_in_doubt(key, attempt, reason).await;
                    }
                    Recovered::Answer(Ok(Recovery::NotApplied)) => {
                        // The effect did not land: safe to try again (or to fail as nothing).
                        let _ = self.store().release(key, attempt, Some(reason)).await;
                        if self.exec < self.call.tool.declared_retry().max_attempts {
                            return Step::Again;
                        }
                        return failed(failure);
                    }
                    Recovered::Answer(Err(e)) => {
                        let e = self.error_text(&e);
                        tracing::warn!(error = %self.log_text(&e), "recover failed after an unknown outcome");
                        let reason = format!("{reason}; then recover failed: {e}");
                        let _ = self.store().mark_in_doubt(key, attempt, reason).await;
                    }
                    Recovered::Unfinished(lost) => {
                        tracing::warn!(reason = %lost.reason(), "recover failed after an unknown outcome");
                        let reason = format!("{reason}; then recover {}", lost.reason());
                        let _ = self.store().mark_in_doubt(key, attempt, reason).await;
                    }
                    // Stopped: the unknown outcome stays on the claim for the next attempt.
                    Recovered::Lapsed | Recovered::Aborted => return failed(failure),
                }
                Step::Done(self.call.blocked(BlockReason::RecoverFailed))
            }
            Decision::Block => {
                let _ = self.store().mark_in_doubt(key, attempt, reason).await;
                Step::Done(self.call.blocked(BlockReason::UnknownOutcome))
            }
            Decision::FailInDoubt => {
                let _ = self.store().mark_in_doubt(key, attempt, reason).await;
                failed(failure)
            }
            Decision::Fail | Decision::Complete | Decision::Compensate => {
                let _ = self.store().release(key, attempt, Some(reason)).await;
                failed(failure)
            }
        }
    }

    /// Stage 4f, record: the output under the claim ([`Engine::complete_under_claim`]: a write
    /// the journal fails is retried with backoff, the lease renewed meanwhile, for at most
    /// [`Engine::with_store_retry`]; then the call still succeeds: the effect happened, and the
    /// claim left behind makes the next attempt reconcile). A write the journal refuses because
    /// another attempt owns the key ends the call with [`EffectError::ClaimLost`].
    async fn record(&self, held: &Held, out: T::Output, disposition: Disposition) -> Settled<T::Output, T::Error> {
        let (key, attempt) = (self.key(), held.attempt);
        // The tool asked for a provider's callback: the record waits for it; the tool's own
        // output (its receipt) answers this call only.
        if let Some(pending) = held.ctx.pending_callback() {
            return match self.engine.pend_under_claim(key, held, pending).await {
                Completion::Written | Completion::Failed => (Ok(out), disposition),
                Completion::Fenced => self.claim_lost(held, true).await,
            };
        }
        let output = match serde_json::to_value(&out) {
            Ok(value) => value,
            Err(e) => {
                tracing::warn!(error = %e, key, "effect applied but its output does not serialize; marking it in doubt");
                let reason = format!("output does not serialize: {e}");
                let _ = self.store().mark_in_doubt(key, attempt, reason).await;
                return (Ok(out), disposition);
            }
        };
        let again = || serde_json::to_value(&out).ok();
        match self
            .engine
            .complete_under_claim(self.call.name(), key, held, output, again)
            .await
        {
            Completion::Written | Completion::Failed => (Ok(out), disposition),
            Completion::Fenced => self.fenced_completion(held, out, disposition).await,
        }
    }

    /// The journal refused this attempt's completion: either an earlier try of the same write
    /// did commit (its answer lost), or another attempt owns the key.
    async fn fenced_completion(
        &self,
        held: &Held,
        out: T::Output,
        disposition: Disposition,
    ) -> Settled<T::Output, T::Error> {
        if let Ok(Some(rec)) = self.store().get(self.key()).await
            && rec.state == RecordState::Completed
            && rec.attempt == held.attempt
            && rec.output.is_some()
            && rec.output == serde_json::to_value(&out).ok()
        {
            return (Ok(out), disposition);
        }
        self.claim_lost(held, true).await
    }

    /// This attempt lost its claim: say so, with the attempt that owns the key and its recorded
    /// result if the journal has one. Never this attempt's own output as if it were recorded.
    async fn claim_lost(&self, held: &Held, finished: bool) -> Settled<T::Output, T::Error> {
        let (current, recorded) = match self.store().get(self.key()).await {
            Ok(Some(rec)) => {
                let recorded = rec.output.filter(|_| rec.state == RecordState::Completed).map(Box::new);
                (Some(rec.attempt).filter(|&c| c != held.attempt), recorded)
            }
            _ => (None, None),
        };
        tracing::warn!(
            attempt = held.attempt,
            current,
            finished,
            recorded = recorded.is_some(),
            "this attempt lost its claim: another attempt owns the key"
        );
        observe::claim_lost(
            &self.engine.inner.events,
            self.call.name(),
            self.key(),
            held.attempt,
            current,
            finished,
        );
        let entry =
            crate::decide::record::claim_lost_entry(self.key(), held.attempt, current, finished, self.store().now());
        if let Err(e) = self.store().append_audit(entry).await {
            tracing::warn!(error = %e, "could not audit the lost claim");
        }
        let err = EffectError::ClaimLost {
            tool: self.call.name().to_owned(),
            key: self.key().to_owned(),
            attempt: held.attempt,
            finished,
            current,
            recorded,
        };
        (Err(err), Disposition::Failed)
    }
}
