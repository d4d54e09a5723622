//! The decisions of a provider's callback ([`Op::Pend`], [`Op::Settle`]): a claim that waits
//! for the provider, and the provider's answer that settles it.
//!
//! A pending record keeps the digest of the callback token it waits for in its `output`, under
//! [`CALLBACK_FIELD`] (a pending record has no output of its own), and its deadline in
//! `lease_until`. Past the deadline the record counts as in doubt
//! ([`EffectRecord::is_overdue`]): a claim takes it over as one, a person may resolve it, and
//! a callback is refused as late.

use super::{
    Current, EffectRecord, Millis, Op, OpAt, RecordState, Rejected, Transition, Verdict, done, engine_entry, with_audit,
};

/// Where a pending record keeps the digest of the callback token it waits for: the one field of
/// its `output` object.
pub const CALLBACK_FIELD: &str = "$callback";

impl EffectRecord {
    /// The SHA-256 hex digest of the callback token a pending record waits for.
    pub fn callback_digest(&self) -> Option<&str> {
        if self.state != RecordState::Pending {
            return None;
        }
        self.output.as_ref()?.get(CALLBACK_FIELD)?.get("token_digest")?.as_str()
    }
}

/// [`Op::Pend`]: the holder's claim waits for the provider's callback until `deadline`.
pub(super) fn pend(
    at: OpAt<'_>,
    current: Current<'_>,
    attempt: u32,
    token_digest: &str,
    deadline: Millis,
) -> Result<Transition, Rejected> {
    at.held_by(&current, attempt)?;
    let audit = engine_entry(
        at.key,
        "pending",
        at.now,
        serde_json::json!({ "attempt": attempt, "deadline": deadline }),
    );
    let mut next = current.take(at.key)?;
    next.state = RecordState::Pending;
    next.lease_until = Some(deadline);
    next.output = Some(serde_json::json!({ CALLBACK_FIELD: { "token_digest": token_digest } }));
    next.reason = Some(format!(
        "waiting for the provider's callback until {deadline} (ms since the epoch)"
    ));
    next.updated_at = at.now;
    with_audit(done(next), Some(audit))
}

/// [`Op::Settle`]: the provider's answer settles the pending record it was issued for, once,
/// before the deadline.
pub(super) fn settle(at: OpAt<'_>, current: Current<'_>, op: std::borrow::Cow<'_, Op>) -> Result<Transition, Rejected> {
    let &Op::Settle {
        attempt,
        ref token_digest,
        ..
    } = &*op
    else {
        unreachable!("called for a settlement")
    };
    let rec = at.existing(&current)?;
    if rec.state != RecordState::Pending {
        return at.invalid(
            rec,
            ": only a record waiting for its callback can be settled, and only once (a callback sent again is refused)",
        );
    }
    if rec.attempt != attempt || !same_digest(rec.callback_digest(), token_digest) {
        return Err(refused(
            at,
            "the token is not the one this record waits for (forged, or issued to another attempt)",
        ));
    }
    if rec.is_overdue(at.now) {
        return Err(refused(
            at,
            "its deadline has passed, so the record is in doubt: a person resolves it with the provider's answer",
        ));
    }
    let Op::Settle { by, verdict, .. } = op.into_owned() else {
        unreachable!("matched as a settlement")
    };
    let audit = super::AuditEntry {
        key: at.key.to_owned(),
        at: at.now,
        actor: by.clone(),
        action: "callback-settled".to_owned(),
        detail: Some(serde_json::json!({ "attempt": attempt, "verdict": verdict })),
    };
    let (state, output, reason) = match verdict {
        Verdict::Applied { output } => (RecordState::Completed, Some(output), None),
        Verdict::NotApplied => (
            RecordState::Released,
            None,
            Some(format!("the provider's callback said it was not applied ({by})")),
        ),
    };
    let mut next = current.take(at.key)?;
    next.state = state;
    next.output = output;
    next.reason = reason;
    next.lease_until = None;
    next.decided_by = Some(by);
    next.updated_at = at.now;
    with_audit(done(next), Some(audit))
}

/// Whether the stored digest is the token's, compared in constant time.
fn same_digest(stored: Option<&str>, given: &str) -> bool {
    use subtle::ConstantTimeEq;
    stored.is_some_and(|s| s.as_bytes().ct_eq(given.as_bytes()).into())
}

/// A refused callback.
fn refused(at: OpAt<'_>, why: &str) -> Rejected {
    Rejected::CallbackRefused {
        key: at.key.to_owned(),
        why: why.to_owned(),
    }
}
