//! Replay (stage 2): a recorded result is returned instead of running the tool again, when it
//! may be given to this call.

use serde_json::Value;

use super::errors::{codec_error, key_of_another_tool, store_error};
use super::lifecycle::Engine;
use super::ongoing::Call;
use super::report::{Disposition, Settled};
use crate::call::error::{BlockReason, EffectError, StoreError};
use crate::call::tool::Tool;
use crate::decide::record::RecordState;
use crate::store::Recorded;
use crate::value::class::EffectClass;

impl Engine {
    /// Stage 2, replay: a recorded result needs no claim. A read-only lookup first, so replays
    /// never take the journal's write lock (unless the store's claim answers replays as
    /// cheaply). `Err`: the replayed result. `Ok`: whether the lookup found no record at all
    /// (the first claim may then skip the store's own read, `Store::claim_unseen`; a `one_write`
    /// tool runs without a claim, [`super::one_write`]). A tool declared `one_write` looks
    /// first on every store: it writes nothing before it runs.
    pub(super) async fn lookup<T: Tool>(
        &self,
        call: &Call<'_, T>,
        input: &Value,
    ) -> Result<bool, Settled<T::Output, T::Error>> {
        let store = &self.inner.store;
        if store.claim_answers_replays() && !(T::ONE_WRITE && T::CLASS == EffectClass::Idempotent) {
            return Ok(false);
        }
        match store.lookup_recorded(call.key).await {
            // Another tool's record: the claim would refuse it too (a backend that does not say
            // whose record it is leaves that to the claim).
            Ok(Some(rec)) if rec.tool() != Some(call.name()) => match rec.tool() {
                // An expired record counts as absent for the claim (unless it waits for a person
                // or is claimed): the claim decides.
                Some(recorded_tool) if !rec.is_expired(store.now()) => Err((
                    Err(key_of_another_tool::<T>(call.name(), call.key, recorded_tool)),
                    Disposition::Failed,
                )),
                _ => Ok(false),
            },
            Ok(Some(rec))
                if rec.state() == RecordState::Completed
                    && (rec.expires_at().is_none() || !rec.is_expired(store.now())) =>
            {
                let replayed = self.replay(call, &rec);
                if replayed.1 == Disposition::Replayed && rec.fingerprint() != call.fingerprint {
                    self.note_input_differs(call, rec.record().map(|r| &r.input), input)
                        .await;
                }
                Err(replayed)
            }
            Ok(None) => Ok(true),
            _ => Ok(false),
        }
    }

    /// Keep on `call` which fields of its (redacted) `given` input differ from the recorded
    /// call's, whose result it gets: `recorded` when the caller has the record's input at hand,
    /// else read from the journal (only a replay whose input differs pays for that read).
    pub(super) async fn note_input_differs<T: Tool>(
        &self,
        call: &Call<'_, T>,
        recorded: Option<&Value>,
        given: &Value,
    ) {
        let fetched;
        let recorded = match recorded {
            Some(input) => Some(input),
            None => {
                fetched = self.inner.store.lookup(call.key).await.ok().flatten();
                fetched.as_deref().map(|rec| &rec.input)
            }
        };
        let mut fields = Vec::new();
        if let Some(recorded) = recorded {
            differing_fields(&mut String::new(), recorded, given, &mut fields);
        }
        tracing::info!(
            ?fields,
            "returning a result recorded under the same key for another input"
        );
        let _ = call.input_differs.set(fields);
    }

    /// Replay `rec`, the record of `call`'s key, if it may be given to `call`.
    pub(super) fn replay<T: Tool>(
        &self,
        call: &Call<'_, T>,
        rec: &Recorded,
    ) -> (Result<T::Output, EffectError<T::Error>>, Disposition) {
        // Any tool call that received the recorded result replays it (not only the last one).
        let recorded_call = match call.call_id.as_deref() {
            Some(id) if rec.received_by(id) => Some(id),
            _ => rec.call_id(),
        };
        if let Some(refused) = reuse_refused(call, rec.fingerprint(), recorded_call, true) {
            return refused;
        }
        let Some(output) = rec.output() else {
            let e = StoreError::Corrupt {
                key: call.key.to_owned(),
                message: "completed without an output".to_owned(),
            };
            return (Err(store_error::<T>(call.name(), e)), Disposition::Failed);
        };
        let decoded = <T::Output as serde::Deserialize>::deserialize(output)
            .map_err(|e| codec_error::<T>(call.name(), call.key, e));
        (decoded, Disposition::Replayed)
    }
}

/// Whether a result made for another call (recorded, or being made by an identical call
/// running in this process) may not be given to `call`: an unkeyed irreversible tool under a
/// new tool-call id is blocked as an identical re-plan, and (when `check_input`) another input
/// under the same key fails with `InputMismatch` for `STRICT_INPUT` tools and keys the client
/// sent (the Stripe rule: another request under an idempotency key is an error) and is logged for
/// others. `None`: the result may be reused.
pub(super) fn reuse_refused<T: Tool, O>(
    call: &Call<'_, T>,
    fingerprint: &str,
    call_id: Option<&str>,
    check_input: bool,
) -> Option<Settled<O, T::Error>> {
    if check_input && fingerprint != call.fingerprint {
        if call.strict_input {
            let err = EffectError::InputMismatch {
                tool: call.name().to_owned(),
                key: call.key.to_owned(),
                recorded: fingerprint.to_owned(),
                given: call.fingerprint.to_owned(),
            };
            return Some((Err(err), Disposition::Failed));
        }
        tracing::warn!(
            recorded = %fingerprint,
            given = %call.fingerprint,
            "key is recorded under a different input; returning its result"
        );
    }
    let new_call = matches!((call.call_id.as_deref(), call_id), (Some(a), Some(b)) if a != b);
    if T::CLASS == EffectClass::Irreversible && !call.keyed && new_call {
        return Some(call.blocked(BlockReason::IdenticalReplan));
    }
    None
}

/// order: a field one side lacks, a value that differs, an array of another length. Never a
/// value.
fn differing_fields(path: &mut String, recorded: &Value, given: &Value, out: &mut Vec<String>) {
    match (recorded, given) {
        (Value::Object(a), Value::Object(b)) => {
            let names: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for name in names {
                let len = path.len();
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(name);
                match (a.get(name), b.get(name)) {
                    (Some(x), Some(y)) => differing_fields(path, x, y, out),
                    _ => out.push(path.clone()),
                }
                path.truncate(len);
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                differing_fields(path, x, y, out);
                path.truncate(len);
            }
        }
        _ if recorded == given => {}
        _ if path.is_empty() => out.push("arguments".to_owned()),
        _ => out.push(path.clone()),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn differing_fields_are_paths_never_values() {
        let recorded = serde_json::json!({"to": {"name": "ann", "mail": "a@x"}, "amount": 900, "lines": [1, 2], "tags": [1], "note": "x"});
        let given = serde_json::json!({"to": {"name": "ann", "mail": "b@x"}, "amount": 100, "lines": [1, 3], "tags": [1, 2], "extra": true});
        let mut out = Vec::new();
        super::differing_fields(&mut String::new(), &recorded, &given, &mut out);
        assert_eq!(out, ["amount", "extra", "lines[1]", "note", "tags", "to.mail"]);
        let mut same = Vec::new();
        super::differing_fields(&mut String::new(), &recorded, &recorded, &mut same);
        assert!(same.is_empty());
    }
}
