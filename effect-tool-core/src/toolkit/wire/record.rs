//! The provider's own tool calls, written to the run's journal through the public store API.

use serde_json::Value;

use super::ProviderCall;
use crate::call::context::RunContext;
use crate::decide::record::{Intent, OpOutcome};
use crate::store::{Store, StoreExt};

/// How long the claim that records a provider call is held: it is completed at once.
const RECORD_LEASE_MS: u64 = 30_000;

/// How one provider call of a turn went into the journal.
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderRecord {
    /// The provider's id of the call ([`ProviderCall::id`]).
    pub call_id: String,
    /// The record's tool name ([`ProviderCall::tool`]).
    pub tool: String,
    /// The record's key: `<run>:provider:<provider>:<call id>`.
    pub key: String,
    /// What happened.
    pub recorded: ProviderRecorded,
}

/// What became of one provider call's record.
#[derive(Debug, Clone, PartialEq)]
pub enum ProviderRecorded {
    /// Written now, completed with the call's result.
    Recorded,
    /// Already in the journal (the same response handled again, or by another worker).
    AlreadyRecorded,
    /// Not written: the call has not run yet (its result comes in a later response, which
    /// records it).
    NotRunYet,
    /// Not written: the journal failed or refused; the message says why. The run's audit lacks
    /// this call; the dispatcher logged it as an error.
    Failed(String),
}

/// The key of `call`'s record in `run`.
pub(crate) fn key_of(run: &RunContext, call: &ProviderCall) -> String {
    use crate::call::key::key_component;
    format!(
        "{}:provider:{}:{}",
        key_component(run.run_id()),
        call.provider,
        key_component(&call.id)
    )
}

/// Write `call` to the journal of `run` as a completed record of tool [`ProviderCall::tool`]
/// and class [`ProviderCall::class`], its input the call's input and its output the call's
/// result. Writing the same call again finds it recorded and changes nothing.
pub(crate) async fn record(store: &dyn Store, run: &RunContext, call: &ProviderCall) -> ProviderRecord {
    let key = key_of(run, call);
    let tool = call.tool();
    let recorded = match &call.result {
        None => ProviderRecorded::NotRunYet,
        Some(result) => match write(store, run, call, &key, &tool, result).await {
            Ok(r) => r,
            Err(e) => ProviderRecorded::Failed(e.to_string()),
        },
    };
    match &recorded {
        ProviderRecorded::Failed(error) => {
            tracing::error!(%key, %tool, %error, "a provider's tool call could not be recorded: the run's audit lacks it")
        }
        r => tracing::debug!(%key, %tool, recorded = ?r, "provider tool call"),
    }
    ProviderRecord {
        call_id: call.id.clone(),
        tool,
        key,
        recorded,
    }
}

async fn write(
    store: &dyn Store,
    run: &RunContext,
    call: &ProviderCall,
    key: &str,
    tool: &str,
    result: &Value,
) -> Result<ProviderRecorded, crate::call::error::StoreError> {
    let intent = Intent {
        tool: tool.to_owned(),
        class: call.class(),
        run_id: run.run_id().to_owned(),
        thread_id: run.thread_id().map(str::to_owned),
        call_id: Some(call.id.clone()),
        fingerprint: crate::call::key::fingerprint(&call.input),
        input: call.input.clone(),
        ttl_ms: None,
        approval: None,
        approval_ttl_ms: None,
        holder: None,
    };
    Ok(match store.claim(key, intent, RECORD_LEASE_MS, false).await? {
        OpOutcome::Claimed { attempt, .. } => {
            store.complete(key, attempt, result.clone()).await?;
            ProviderRecorded::Recorded
        }
        OpOutcome::Recorded(_) | OpOutcome::InFlight(_) => ProviderRecorded::AlreadyRecorded,
        other => ProviderRecorded::Failed(format!("the journal holds `{key}` in another state: {other:?}")),
    })
}
