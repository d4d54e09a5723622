//! The named operations of the journal ([`StoreExt`]: claim, complete, approve, ...), each one
//! [`Store::apply`] of an [`Op`], and the check of an output recorded by hand against the
//! tool's output schema ([`check_output`]).

use async_trait::async_trait;
use serde_json::Value;

use super::Store;
use super::election::{ElectedLease, LeaseAnswer};
use crate::call::error::StoreError;
use crate::decide::record::{EffectRecord, Holder, Intent, Op, OpOutcome, Rejected, Verdict};

/// The named operations of the journal, built on [`Store::apply`].
#[async_trait]
pub trait StoreExt: Store {
    /// Claim `key` for `intent` with a lease.
    async fn claim(
        &self,
        key: &str,
        intent: Intent,
        lease_ms: u64,
        takeover_in_doubt: bool,
    ) -> Result<OpOutcome, StoreError> {
        self.apply(
            key,
            Op::Claim {
                intent,
                lease_ms,
                takeover_in_doubt,
            },
        )
        .await
    }
    /// Extend the lease held by `attempt`.
    async fn renew(&self, key: &str, attempt: u32, lease_ms: u64) -> Result<EffectRecord, StoreError> {
        done(self.apply(key, Op::Renew { attempt, lease_ms }).await?)
    }
    /// Record the output of the claim held by `attempt` (fenced).
    async fn complete(&self, key: &str, attempt: u32, output: Value) -> Result<EffectRecord, StoreError> {
        done(self.apply(key, Op::Complete { attempt, output }).await?)
    }
    /// Release the claim held by `attempt`: nothing happened.
    async fn release(&self, key: &str, attempt: u32, reason: Option<String>) -> Result<EffectRecord, StoreError> {
        done(self.apply(key, Op::Release { attempt, reason }).await?)
    }
    /// Mark the claim held by `attempt` in doubt.
    async fn mark_in_doubt(&self, key: &str, attempt: u32, reason: String) -> Result<EffectRecord, StoreError> {
        done(self.apply(key, Op::MarkInDoubt { attempt, reason }).await?)
    }
    /// A person's verdict on a record in doubt.
    ///
    /// An output given as applied is checked first against the tool's output schema in the
    /// journal ([`Store::output_schema`]): one that does not match is refused with
    /// [`Rejected::OutputMismatch`](crate::decide::record::Rejected::OutputMismatch), which shows the
    /// schema, and nothing is recorded.
    async fn resolve(&self, key: &str, by: &str, verdict: Verdict) -> Result<EffectRecord, StoreError> {
        check_verdict(self, key, &verdict).await?;
        done(
            self.apply(
                key,
                Op::Resolve {
                    by: by.to_owned(),
                    verdict,
                },
            )
            .await?,
        )
    }
    /// A person corrects their resolution of `key` (see [`Op::Amend`]): refused unless the
    /// record's current state was set by a person's resolution. An output is checked as
    /// [`StoreExt::resolve`] checks it.
    async fn amend(&self, key: &str, by: &str, verdict: Verdict) -> Result<EffectRecord, StoreError> {
        check_verdict(self, key, &verdict).await?;
        done(
            self.apply(
                key,
                Op::Amend {
                    by: by.to_owned(),
                    verdict,
                },
            )
            .await?,
        )
    }
    /// A person approves a call awaiting approval, as `role`: the input they were shown, named
    /// by its `fingerprint` ([`EffectRecord::fingerprint`] of the record they looked at).
    ///
    /// Refused with [`Rejected::InputChanged`](crate::decide::record::Rejected::InputChanged) when the
    /// input parked under `key` now is another one (the model called again with other
    /// arguments after the person looked): nothing is approved, and the error shows the new
    /// input. There is deliberately no way to approve "whatever is parked": code that approves
    /// reads the record it decides on (`get`) and passes that record's fingerprint.
    async fn approve(&self, key: &str, by: &str, role: &str, fingerprint: &str) -> Result<EffectRecord, StoreError> {
        done(
            self.apply(
                key,
                Op::Approve {
                    by: by.to_owned(),
                    role: role.to_owned(),
                    fingerprint: fingerprint.to_owned(),
                },
            )
            .await?,
        )
    }
    /// A person approves a call awaiting approval with edited arguments: `input` is the whole
    /// edited input (the parked input with some fields changed), bound, as [`StoreExt::approve`]
    /// is, to the fingerprint of the input the person was shown. The call runs once, with the
    /// edited arguments, when it comes again; the record keeps its input, the audit entry
    /// (`approve-edited`) both and who edited; the model is told which fields changed. How the
    /// key follows the edit: [`ApprovedEdit`](crate::decide::record::ApprovedEdit).
    ///
    /// Refused ([`Rejected::InvalidState`](crate::decide::record::Rejected::InvalidState), with
    /// what is wrong) when `input` is not an object, changes a sensitive field (the journal
    /// holds its digest, never its value: the person cannot see or edit it), or does not match
    /// the tool's argument schema in the journal ([`Store::input_schema`]).
    async fn approve_edited(
        &self,
        key: &str,
        by: &str,
        role: &str,
        fingerprint: &str,
        input: Value,
    ) -> Result<EffectRecord, StoreError> {
        let changed = match self.get(key).await? {
            Some(rec) if rec.fingerprint == fingerprint => {
                let schema = self.input_schema(&rec.tool).await?;
                check_edit(&rec, schema.as_ref(), &input)?
            }
            // The transition says why (no record, another input parked since).
            _ => Vec::new(),
        };
        done(
            self.apply(
                key,
                Op::ApproveEdited {
                    by: by.to_owned(),
                    role: role.to_owned(),
                    fingerprint: fingerprint.to_owned(),
                    input,
                    changed,
                },
            )
            .await?,
        )
    }
    /// A person denies a call awaiting approval.
    async fn deny(&self, key: &str, by: &str, reason: Option<String>) -> Result<EffectRecord, StoreError> {
        done(
            self.apply(
                key,
                Op::Deny {
                    by: by.to_owned(),
                    reason,
                },
            )
            .await?,
        )
    }
    /// Take the lease `name` for `holder` for `lease_ms` (see [`super::election`]): the one
    /// holder among every process on the journal, elected through it. A lease whose holder
    /// stopped renewing (a killed process) is stale after its lease and taken over; a lease of
    /// an earlier incarnation of the same worker identity at once.
    async fn acquire_lease(&self, name: &str, holder: &Holder, lease_ms: u64) -> Result<LeaseAnswer, StoreError> {
        super::election::acquire(self, name, holder, lease_ms).await
    }
    /// Extend `lease` for `lease_ms` from now. Refused ([`StoreError::Rejected`]) when another
    /// holder took it over meanwhile: the caller has lost it and must stop what it guards.
    async fn renew_lease(&self, lease: &ElectedLease, lease_ms: u64) -> Result<(), StoreError> {
        self.renew(&lease.key, lease.attempt, lease_ms).await.map(drop)
    }
    /// Give `lease` back, so that another holder may take it at once.
    async fn release_lease(&self, lease: &ElectedLease) -> Result<(), StoreError> {
        let reason = Some(format!("lease {:?} released by its holder", lease.name));
        self.release(&lease.key, lease.attempt, reason).await.map(drop)
    }
    /// Mark a completed compensable effect as undone.
    async fn mark_compensated(&self, key: &str, by: &str) -> Result<EffectRecord, StoreError> {
        done(self.apply(key, Op::MarkCompensated { by: by.to_owned() }).await?)
    }
}

impl<S: Store + ?Sized> StoreExt for S {}

/// Refuse a [`Verdict::Applied`] whose output does not match the output schema the journal
/// keeps for the record's tool. A verdict on a key with no record is left to the store to
/// refuse (`NotFound`).
async fn check_verdict<S: Store + ?Sized>(store: &S, key: &str, verdict: &Verdict) -> Result<(), StoreError> {
    let Verdict::Applied { output } = verdict else {
        return Ok(());
    };
    let Some(rec) = store.get(key).await? else {
        return Ok(());
    };
    match store.output_schema(&rec.tool).await? {
        Some(schema) => check_output(key, &rec.tool, &schema, output).map_err(StoreError::from),
        None => Ok(()),
    }
}

/// The fields an edit of `rec`'s input changes, or why it is refused: not an object, a
/// sensitive field changed (or added), or the tool's argument `schema` not met (sensitive
/// fields, whose digests stand for their values, are not checked against it).
pub fn check_edit(rec: &EffectRecord, schema: Option<&Value>, input: &Value) -> Result<Vec<String>, Rejected> {
    use crate::call::key::SENSITIVE_FIELD;
    let refuse = |why: String| Rejected::InvalidState {
        key: rec.key.clone(),
        op: "approve-edited",
        state: rec.state,
        hint: format!(
            ": the edited arguments are refused ({why}); nothing was approved. Fix the edit, or approve or deny the call as it is"
        ),
    };
    let Some(edited) = input.as_object() else {
        return Err(refuse("they are not a JSON object".to_owned()));
    };
    let empty = serde_json::Map::new();
    let original = rec.input.as_object().unwrap_or(&empty);
    let sealed = |v: Option<&Value>| {
        v.and_then(Value::as_object)
            .is_some_and(|o| o.contains_key(SENSITIVE_FIELD))
    };
    let mut sensitive = Vec::new();
    for name in original.keys().chain(edited.keys()) {
        let (was, now) = (original.get(name), edited.get(name));
        if (sealed(was) || sealed(now)) && was != now {
            return Err(refuse(format!(
                "`{name}` is sensitive: its value is never shown or stored, so it cannot be edited; keep it as it is"
            )));
        }
        if sealed(was) {
            sensitive.push(format!("/{name}"));
        }
    }
    if let Some(schema) = schema
        && let Ok(validator) = jsonschema::validator_for(schema)
    {
        let problems: Vec<String> = validator
            .iter_errors(input)
            .filter(|e| {
                let at = e.instance_path().as_str();
                !sensitive.iter().any(|s| at == s || at.starts_with(&format!("{s}/")))
            })
            .take(MAX_OUTPUT_PROBLEMS)
            .map(|e| {
                let at = e.instance_path().as_str();
                let at = if at.is_empty() { "the arguments" } else { at };
                format!("`{at}`: {e}")
            })
            .collect();
        if !problems.is_empty() {
            return Err(refuse(format!(
                "they do not match the tool's parameters: {}",
                problems.join("; ")
            )));
        }
    }
    Ok(crate::decide::record::changed_fields(&rec.input, input))
}

/// The most problems an [`Rejected::OutputMismatch`](crate::decide::record::Rejected::OutputMismatch)
/// lists.
const MAX_OUTPUT_PROBLEMS: usize = 5;

/// Whether `output` has the shape `schema` (the JSON Schema of `tool`'s output) describes:
/// `Err` lists what does not match, with the schema. A schema the validator cannot compile
/// (not written by effect-tool) checks nothing, and is logged.
pub fn check_output(
    key: &str,
    tool: &str,
    schema: &Value,
    output: &Value,
) -> Result<(), crate::decide::record::Rejected> {
    let validator = match jsonschema::validator_for(schema) {
        Ok(v) => v,
        Err(e) => {
            tracing::warn!(tool, error = %e, "the journal's output schema of this tool does not compile; the output recorded by hand is not checked");
            return Ok(());
        }
    };
    let problems: Vec<String> = validator
        .iter_errors(output)
        .take(MAX_OUTPUT_PROBLEMS)
        .map(|e| {
            let at = e.instance_path().as_str();
            let at = if at.is_empty() { "the output" } else { at };
            format!("`{at}`: {e}")
        })
        .collect();
    if problems.is_empty() {
        Ok(())
    } else {
        Err(crate::decide::record::Rejected::OutputMismatch(Box::new(
            crate::decide::record::OutputMismatch {
                key: key.to_owned(),
                tool: tool.to_owned(),
                problems,
                schema: schema.clone(),
            },
        )))
    }
}

fn done(outcome: OpOutcome) -> Result<EffectRecord, StoreError> {
    match outcome {
        OpOutcome::Done(rec) => Ok(std::sync::Arc::unwrap_or_clone(rec)),
        other => Err(StoreError::Backend(format!("unexpected outcome {other:?}"))),
    }
}
