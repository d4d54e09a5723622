//! The entry points of a call ([`Engine::call`], [`Engine::call_with_report`]) and the two
//! paths a call takes from there: a pure tool runs at once (with the policy's retries), any other
//! goes through the journal, stage by stage (numbered as in the [layer's docs](super)).

use std::sync::Arc;

use serde_json::Value;
use tracing::Instrument;

use super::errors::{decode_output, key_of_another_tool, store_error, tool_error};
use super::execute::{Exec, classify, policy_input, run_tool};
use super::join::{Role, Slot, from_leader};
use super::lifecycle::{Engine, Inner};
use super::observe;
use super::ongoing::Call;
use super::replay::reuse_refused;
use super::report::{CallOptions, CallReport, Disposition, Settled, disposition_of};
use crate::call::context::{EffectCtx, RunContext};
use crate::call::error::EffectError;
use crate::call::key;
use crate::call::tool::Tool;
use crate::decide::policy::{Decision, decide};
use crate::value::class::EffectClass;
use crate::value::outcome::{Failure, Outcome};

/// Stage 1's answer: what the journal knows the call by.
struct Identified {
    key: String,
    fingerprint: String,
    /// The input as the journal keeps it (sensitive fields redacted).
    input: Value,
    keyed: bool,
}

impl Engine {
    /// Call `tool` with `args` in `run`.
    pub async fn call<T: Tool>(
        &self,
        tool: &T,
        run: &RunContext,
        opts: CallOptions,
        args: T::Args,
    ) -> Result<T::Output, EffectError<T::Error>> {
        self.call_with_report(tool, run, opts, args).await.result
    }

    /// Call `tool` and report what happened (executed, replayed, shared, ...).
    pub async fn call_with_report<T: Tool>(
        &self,
        tool: &T,
        run: &RunContext,
        opts: CallOptions,
        args: T::Args,
    ) -> CallReport<T::Output, T::Error> {
        let span = tracing::info_span!(
            "execute_tool",
            otel.name = %observe::OtelName(tool.declared_name()),
            gen_ai.operation.name = "execute_tool",
            gen_ai.tool.name = tool.declared_name(),
            gen_ai.tool.call.id = opts.call_id.as_deref(),
            gen_ai.tool.type = "function",
            gen_ai.agent.name = run.agent(),
            error.type = tracing::field::Empty,
            effect_tool.class = T::CLASS.as_str(),
            effect_tool.key = tracing::field::Empty,
            effect_tool.attempt = tracing::field::Empty,
            effect_tool.disposition = tracing::field::Empty,
            effect_tool.store = self.inner.store.backend_name(),
        );
        let started = std::time::Instant::now();
        let call_id = opts.call_id.clone();
        let work = async move {
            let Some(_active) = self.inner.enter() else {
                let err = EffectError::ShuttingDown {
                    tool: tool.declared_name().to_owned(),
                    key: None,
                };
                return CallReport {
                    result: Err(err),
                    disposition: Disposition::Failed,
                    key: None,
                    input_differs: None,
                    edited: None,
                };
            };
            // A value the tool takes from the run is missing: nothing runs, nothing is claimed.
            if let Err(err) = crate::call::tool::check_values::<T>(run) {
                return CallReport {
                    result: Err(err),
                    disposition: Disposition::Failed,
                    key: None,
                    input_differs: None,
                    edited: None,
                };
            }
            let report = if T::CLASS == EffectClass::Pure {
                self.call_pure(tool, run, opts, args).await
            } else {
                self.call_journaled(tool, run, opts, args).await
            };
            observe::call_ended(
                &self.inner.events,
                tool.declared_name(),
                T::CLASS,
                report.disposition,
                report.result.as_ref().err().map(EffectError::kind),
                started.elapsed(),
                || (run.run_id().to_owned(), call_id, report.key.clone()),
            );
            report
        };
        if span.is_disabled() {
            work.await
        } else {
            work.instrument(span).await
        }
    }

    /// A call of a pure tool: no journal, the policy's retries.
    async fn call_pure<T: Tool>(
        &self,
        tool: &T,
        run: &RunContext,
        opts: CallOptions,
        args: T::Args,
    ) -> CallReport<T::Output, T::Error> {
        let report = |result, disposition| CallReport {
            result,
            disposition,
            key: None,
            input_differs: None,
            edited: None,
        };
        // Stage 1b: a pure call is asked too (not audited: nothing of it is journaled).
        #[cfg(feature = "policy")]
        if let super::policies::Gate::Denied { by, reason } = self.ask_policies(tool, run, None, &args, None).await {
            return super::policies::denied::<T>(tool.declared_name(), by, reason, None);
        }
        // Budgets: a pure call has no effect key; its spend is bound to the model's call id
        // (a turn delivered twice is charged once), else to this call alone.
        let budget_key = self
            .budgets_of(run)
            .map(|_| pure_budget_key(run.run_id(), tool.declared_name(), opts.call_id.as_deref()));
        if let Some(key) = &budget_key
            && let Err(err) = self.spend_call(tool, run, key, false, &args).await
        {
            let disposition = refused(&err);
            return report(Err(err), disposition);
        }
        let mut ctx = EffectCtx::new(run.clone(), tool.declared_name(), T::CLASS, opts.call_id, None, 1, None);
        for exec in 1.. {
            if run.cancellation().is_cancelled() {
                return report(
                    Err(EffectError::Cancelled {
                        tool: tool.declared_name().to_owned(),
                        key: None,
                    }),
                    Disposition::Failed,
                );
            }
            ctx.attempt = exec;
            tracing::Span::current().record("effect_tool.attempt", i64::from(exec));
            let (outcome, result) = match run_tool(tool, &ctx, args.clone(), &self.inner.abort).await {
                Exec::Done(Ok(out)) => return report(Ok(out), Disposition::Executed),
                Exec::Done(Err(e)) => (classify(&e), Err(e)),
                Exec::Unfinished(lost) => (Outcome::Failed(Failure::Unknown), Ok(lost)),
                Exec::Cancelled | Exec::Lapsed => {
                    return report(
                        Err(EffectError::Cancelled {
                            tool: tool.declared_name().to_owned(),
                            key: None,
                        }),
                        Disposition::Failed,
                    );
                }
            };
            let mut decision = decide(policy_input::<T>(outcome, exec, tool.declared_retry()));
            if matches!(decision, Decision::Retry { .. })
                && let Some(key) = &budget_key
                && !self.spend_retry(tool.declared_name(), run, key, exec).await
            {
                decision = Decision::Fail;
            }
            match decision {
                Decision::Retry { after } => {
                    observe::tool_retried(tool.declared_name());
                    tracing::debug!(after_ms = after.as_millis() as u64, "retrying pure tool");
                    tokio::select! {
                        biased;
                        _ = tokio::time::sleep(after) => {}
                        _ = run.cancellation().cancelled() => {}
                    }
                }
                _ => {
                    let err = match result {
                        Err(e) => tool_error::<T>(tool.declared_name(), None, outcome, e),
                        Ok(lost) => lost.into_error(tool.declared_name(), None),
                    };
                    return report(Err(err), Disposition::Failed);
                }
            }
        }
        unreachable!("the retry loop only ends by returning")
    }

    /// Stage 1, identify: the key, the fingerprint and the journaled input (sensitive values
    /// bound by their digests under the marker secret, loaded here before anything is claimed:
    /// the tool's context carries it too, for its markers). `Err`: the call ends, nothing
    /// journaled.
    async fn identify<T: Tool>(
        &self,
        tool: &T,
        run: &RunContext,
        args: &T::Args,
    ) -> Result<Identified, CallReport<T::Output, T::Error>> {
        let failed = |result, key| CallReport {
            result,
            disposition: Disposition::Failed,
            key,
            input_differs: None,
            edited: None,
        };
        let key::CallIdentity {
            key,
            fingerprint,
            input,
            keyed,
        } = match key::identify(tool, run, args) {
            Ok(identity) => identity,
            Err(e) => {
                let err = EffectError::InvalidArguments {
                    tool: tool.declared_name().to_owned(),
                    message: format!("arguments do not serialize: {e}"),
                };
                return Err(failed(Err(err), None));
            }
        };
        tracing::Span::current().record("effect_tool.key", key.as_str());
        let (fingerprint, input) = match self.marker_secret().await {
            Err(e) => return Err(failed(Err(store_error::<T>(tool.declared_name(), e)), Some(key))),
            Ok(secret) if !T::SENSITIVE.is_empty() => match key::identify_with(tool, run, args, secret.as_ref()) {
                Ok(bound) => (bound.fingerprint, bound.input),
                Err(_) => (fingerprint, input),
            },
            Ok(_) => (fingerprint, input),
        };
        self.write_output_schema(tool).await;
        Ok(Identified {
            key,
            fingerprint,
            input,
            keyed,
        })
    }

    /// A call of a journaled tool, stages 1 to 4.
    async fn call_journaled<T: Tool>(
        &self,
        tool: &T,
        run: &RunContext,
        opts: CallOptions,
        args: T::Args,
    ) -> CallReport<T::Output, T::Error> {
        self.call_journaled_as(tool, run, opts, args, false).await
    }

    /// [`Engine::call_journaled`]; `approved`: a person approved these arguments already (the
    /// edited arguments of an approval, run under their own key), so the call does not park.
    pub(super) async fn call_journaled_as<T: Tool>(
        &self,
        tool: &T,
        run: &RunContext,
        opts: CallOptions,
        args: T::Args,
        approved: bool,
    ) -> CallReport<T::Output, T::Error> {
        let Identified {
            key,
            fingerprint,
            input,
            keyed,
        } = match self.identify(tool, run, &args).await {
            Ok(identified) => identified,
            Err(report) => return report,
        };
        // Stage 1b.
        #[cfg(feature = "policy")]
        let policy_approval = {
            let declared = if tool.needs_approval(&args) {
                tool.declared_approval()
            } else {
                None
            };
            match self.ask_policies(tool, run, Some(&key), &args, declared).await {
                super::policies::Gate::Go(role) => role,
                super::policies::Gate::Denied { by, reason } => {
                    return super::policies::denied::<T>(tool.declared_name(), by, reason, Some(&key));
                }
            }
        };
        #[cfg(not(feature = "policy"))]
        let policy_approval = None;
        let call = Call {
            tool,
            run,
            call_id: opts.call_id.clone(),
            key: &key,
            fingerprint: &fingerprint,
            keyed,
            strict_input: T::STRICT_INPUT || run.client_key().is_some(),
            input_differs: std::sync::OnceLock::new(),
            policy_approval,
            approved,
            edited: std::sync::OnceLock::new(),
        };

        let report = |(result, disposition): Settled<T::Output, T::Error>| CallReport {
            input_differs: call
                .input_differs
                .get()
                .filter(|_| result.is_ok() && matches!(disposition, Disposition::Replayed | Disposition::Shared))
                .cloned(),
            edited: call.edited.get().cloned(),
            result,
            disposition,
            key: Some(key.clone()),
        };
        // Stage 2. A `one_write` call notes first whether identical calls of this process end
        // between its lookup and its lead (its lookup is the only look before it runs).
        let ended = T::ONE_WRITE.then(|| self.inner.inflight.ended(&key));
        let mut unseen = match self.lookup(&call, &input).await {
            Ok(unseen) => unseen,
            Err(replayed) => return report(replayed),
        };
        // The run's budgets, charged before the claim and bound to the key: a replay (above)
        // spends nothing, a second call of the key nothing more.
        if let Err(err) = self.spend_call(tool, run, &key, true, &args).await {
            let disposition = refused(&err);
            return report((Err(err), disposition));
        }
        loop {
            // Stage 3.
            match self.inner.inflight.join(
                &key,
                &fingerprint,
                opts.call_id.as_deref(),
                tool.declared_name(),
                T::ONE_WRITE,
            ) {
                Role::Follower(slot) => {
                    if slot.tool != tool.declared_name() {
                        let err = key_of_another_tool::<T>(tool.declared_name(), &key, slot.tool);
                        return report((Err(err), Disposition::Failed));
                    }
                    // Whatever the leader did, the key has been seen since the lookup.
                    unseen = false;
                    if let Some(shared) = self.follow(&call, slot, &input).await {
                        return report(shared);
                    }
                }
                Role::Leader(leader) => {
                    // Stage 4. Boxed: the claim-execute-record path is large; keeping it out of
                    // this future keeps replays (the common case) cheap to poll and move.
                    let settled = if T::TRANSACTIONAL {
                        Box::pin(self.lead_in_transaction(&call, input, args)).await
                    } else if unseen && super::one_write::qualifies(&call, &args) {
                        let looked = ended == Some(self.inner.inflight.ended(&key));
                        Box::pin(self.lead_one_write(&call, input, args, looked)).await
                    } else {
                        Box::pin(self.lead(&call, input, args, unseen)).await
                    };
                    leader.publish::<T>(call.name(), &settled);
                    return report(settled);
                }
            }
        }
    }

    /// Stage 3, a follower: wait for the identical call leading `call`'s key and share its
    /// result. `None`: take the leader's place instead (it ended without a result, its run was
    /// cancelled, or it lost its claim: the journal says what is left to do).
    async fn follow<T: Tool>(
        &self,
        call: &Call<'_, T>,
        slot: Arc<Slot>,
        input: &Value,
    ) -> Option<Settled<T::Output, T::Error>> {
        let shared = slot.wait().await;
        let leader_input = slot.fingerprint.clone();
        let leader_call = slot.call_id.clone();
        drop(slot);
        let (result, _) = shared?;
        if matches!(
            result,
            Err(EffectError::Cancelled { .. } | EffectError::Interrupted { .. } | EffectError::ClaimLost { .. })
        ) && !call.run.cancellation().is_cancelled()
        {
            return None;
        }
        // What a replay of the leader's record would check: a new tool-call id of an unkeyed
        // irreversible tool, another input under a custom key.
        if let Some(refused) = reuse_refused(call, &leader_input, leader_call.as_deref(), result.is_ok()) {
            return Some(refused);
        }
        let result = match result {
            Ok(v) => decode_output::<T>(call.name(), call.key, v),
            Err(e) => Err(from_leader::<T>(e, call.run)),
        };
        if result.is_ok() && leader_input != call.fingerprint {
            // The leader has recorded its result by now: the journal holds its input.
            self.note_input_differs(call, None, input).await;
        }
        let disposition = if result.is_ok() {
            Disposition::Shared
        } else {
            disposition_of(&result)
        };
        Some((result, disposition))
    }

    /// Write `tool`'s output schema ([`Tool::declared_output_schema`]) to the journal, once per tool and
    /// engine, so that a person recording an output by hand is checked against it. A failed
    /// write is logged and tried again on the next call: the call itself goes on (its claim
    /// meets the same journal, and says so if it is down).
    async fn write_output_schema<T: Tool>(&self, tool: &T) {
        let written = |inner: &Inner| {
            inner
                .output_schemas
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(tool.declared_name())
        };
        if self
            .inner
            .output_schemas
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(tool.declared_name())
        {
            return;
        }
        // A tool that waits for approval: its arguments' schema too, so that a person's edit
        // of them is checked ([`crate::StoreExt::approve_edited`]).
        let input = match tool.declared_approval() {
            Some(_) => {
                self.inner
                    .store
                    .put_input_schema(tool.declared_name(), &tool.declared_input_schema())
                    .await
            }
            None => Ok(()),
        };
        let output = match tool.declared_output_schema() {
            Some(schema) => self.inner.store.put_output_schema(tool.declared_name(), &schema).await,
            None => Ok(()),
        };
        match input.and(output) {
            Ok(()) => {
                written(&self.inner);
            }
            Err(e) => {
                tracing::warn!(tool = tool.declared_name(), error = %e, "could not write the tool's output schema to the journal; an output a person records by hand is not checked until it is")
            }
        }
    }
}

/// A call stopped at its budgets: `Rejected` when a budget refused it, `Failed` when the
/// journal could not be asked.
fn refused<E>(err: &EffectError<E>) -> Disposition {
    match err {
        EffectError::BudgetExceeded { .. } => Disposition::Rejected,
        _ => Disposition::Failed,
    }
}

/// What the budgets of a pure call are bound to: the model's call id, else a key of its own.
fn pure_budget_key(run_id: &str, tool: &str, call_id: Option<&str>) -> String {
    match call_id {
        Some(id) => format!("{run_id}:{tool}:call:{id}"),
        None => format!("{run_id}:{tool}:once:{:032x}", fastrand::u128(..)),
    }
}
