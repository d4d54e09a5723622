//! A provider's callback, received: the token verified under the journal's secret, the pending
//! record settled through [`Op::Settle`], a refusal audited ([`settle_callback`]).
//!
//! What the webhook of [`crate::ops::callback`] calls, and what an application that receives the
//! provider's answer in its own handler calls directly.

use serde_json::Value;

use super::Store;
use super::operations::check_output;
use crate::call::error::StoreError;
use crate::decide::record::{AuditEntry, EffectRecord, Op, OpOutcome, Rejected, Verdict};
use crate::value::callback::{CallbackToken, TokenError};
use crate::value::marker::MarkerSecret;

/// The audit action of a refused callback (forged, replayed, late, or for no record).
pub const CALLBACK_REFUSED: &str = "callback-refused";

/// Settle the pending record `token` names with the provider's `verdict`, as `by` (e.g.
/// `callback`, or the provider's name), and return the record as settled.
///
/// The token must verify under `secret` (the journal's marker secret: what
/// [`crate::Engine::marker_secret`] returns), be the one the record waits for, and come before
/// its deadline, once. An applied output is checked against the tool's output schema in the
/// journal first. Anything else is refused with [`Rejected::CallbackRefused`] (a forged or late
/// token), [`Rejected::InvalidState`] (a replay: the record is settled already) or
/// [`Rejected::OutputMismatch`], nothing is written, and the refusal is audited
/// ([`CALLBACK_REFUSED`], under the key the token names; a token that does not parse, under the
/// empty key). Whoever waits for the record (a call of the same key) is woken through
/// [`Store::changed`].
pub async fn settle_callback<S: Store + ?Sized>(
    store: &S,
    secret: &MarkerSecret,
    token: &str,
    by: &str,
    verdict: Verdict,
) -> Result<EffectRecord, StoreError> {
    let token = match CallbackToken::verify(secret, token) {
        Ok(token) => token,
        Err(e) => {
            let key = match &e {
                TokenError::Forged { key } => key.clone(),
                TokenError::Malformed => String::new(),
            };
            let why = e.to_string();
            return Err(refused(
                store,
                &key,
                None,
                by,
                Rejected::CallbackRefused { key: key.clone(), why },
            )
            .await);
        }
    };
    let key = token.key();
    if let Err(e) = check_applied(store, key, &verdict).await {
        return Err(match e {
            StoreError::Rejected(r) => refused(store, key, Some(token.attempt()), by, r).await,
            other => other,
        });
    }
    let op = Op::Settle {
        attempt: token.attempt(),
        token_digest: token.digest(),
        by: by.to_owned(),
        verdict,
    };
    match store.apply(key, op).await {
        Ok(OpOutcome::Done(rec)) => Ok(std::sync::Arc::unwrap_or_clone(rec)),
        Ok(other) => Err(StoreError::Backend(format!("a settlement answered {other:?}"))),
        Err(StoreError::Rejected(r)) => Err(refused(store, key, Some(token.attempt()), by, r).await),
        Err(e) => Err(e),
    }
}

/// An applied output must have the shape of the tool's output (its schema in the journal).
async fn check_applied<S: Store + ?Sized>(store: &S, key: &str, verdict: &Verdict) -> Result<(), StoreError> {
    let Verdict::Applied { output } = verdict else {
        return Ok(());
    };
    let Some(rec) = store.get(key).await? else {
        return Ok(());
    };
    let schema: Option<Value> = store.output_schema(&rec.tool).await?;
    match schema {
        Some(schema) => check_output(key, &rec.tool, &schema, output).map_err(StoreError::from),
        None => Ok(()),
    }
}

/// Audit the refusal `why` of a callback for `key` (best effort: a journal that cannot append
/// the entry still refuses), and return it as the error.
async fn refused<S: Store + ?Sized>(store: &S, key: &str, attempt: Option<u32>, by: &str, why: Rejected) -> StoreError {
    let entry = AuditEntry {
        key: key.to_owned(),
        at: store.now(),
        actor: by.to_owned(),
        action: CALLBACK_REFUSED.to_owned(),
        detail: Some(serde_json::json!({ "attempt": attempt, "why": why.to_string() })),
    };
    if let Err(e) = store.append_audit(entry).await {
        tracing::warn!(key, error = %e, "a refused callback could not be audited");
    }
    StoreError::Rejected(why)
}
