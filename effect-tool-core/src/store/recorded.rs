//! What a replay reads of a record ([`Recorded`]): the whole record, shared, or only the few
//! columns a backend decoded for it.

use serde_json::Value;

use crate::decide::record::{EffectRecord, Millis, RecordState};

/// The part of a record a replay reads: its state and expiry (is there a live result?), its
/// tool, the input fingerprint and tool-call id it was recorded under (is this the same call?),
/// and its output. Either a whole record, shared, or just these fields, as a backend read them.
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded(RecordedRepr);

#[derive(Debug, Clone, PartialEq)]
enum RecordedRepr {
    Whole(std::sync::Arc<EffectRecord>),
    // Boxed: `Recorded` stays two words, so the engine's replay path moves no more than an `Arc`.
    Parts(Box<Parts>),
}

#[derive(Debug, Clone, PartialEq)]
struct Parts {
    state: RecordState,
    tool: Option<String>,
    fingerprint: String,
    call_id: Option<String>,
    call_ids: Vec<String>,
    output: Option<Value>,
    expires_at: Option<Millis>,
}

impl Recorded {
    /// The fields a replay reads, from a backend that read only those (its record version
    /// already checked).
    pub fn new(
        state: RecordState,
        fingerprint: String,
        call_id: Option<String>,
        output: Option<Value>,
        expires_at: Option<Millis>,
    ) -> Self {
        Recorded(RecordedRepr::Parts(Box::new(Parts {
            state,
            tool: None,
            fingerprint,
            call_id,
            call_ids: Vec::new(),
            output,
            expires_at,
        })))
    }

    /// The same, with the other tool-call ids that received the result
    /// ([`EffectRecord::call_ids`]).
    pub fn with_call_ids(mut self, call_ids: Vec<String>) -> Self {
        match &mut self.0 {
            RecordedRepr::Parts(p) => p.call_ids = call_ids,
            RecordedRepr::Whole(rec) => std::sync::Arc::make_mut(rec).call_ids = call_ids,
        }
        self
    }

    /// The same, with the tool whose record it is ([`EffectRecord::tool`]). A backend should
    /// give it: without it, the engine cannot tell a record of another tool under the same key
    /// from its own, and claims instead of replaying (the claim then tells them apart).
    pub fn with_tool(mut self, tool: String) -> Self {
        match &mut self.0 {
            RecordedRepr::Parts(p) => p.tool = Some(tool),
            RecordedRepr::Whole(rec) => std::sync::Arc::make_mut(rec).tool = tool,
        }
        self
    }

    /// The tool whose record it is, if the backend read it ([`Recorded::with_tool`]).
    pub fn tool(&self) -> Option<&str> {
        match &self.0 {
            RecordedRepr::Whole(rec) => Some(&rec.tool),
            RecordedRepr::Parts(p) => p.tool.as_deref(),
        }
    }

    /// The whole record, when the backend answered with it (not only a replay's fields).
    pub(crate) fn record(&self) -> Option<&EffectRecord> {
        match &self.0 {
            RecordedRepr::Whole(rec) => Some(rec),
            RecordedRepr::Parts(_) => None,
        }
    }

    /// Whether the tool call `call_id` received the recorded result: the call that recorded it,
    /// or one that shared it or was taken over ([`EffectRecord::received_by`]).
    pub fn received_by(&self, call_id: &str) -> bool {
        match &self.0 {
            RecordedRepr::Whole(rec) => rec.received_by(call_id),
            RecordedRepr::Parts(p) => p.call_id.as_deref() == Some(call_id) || p.call_ids.iter().any(|c| c == call_id),
        }
    }

    /// The record's state.
    pub fn state(&self) -> RecordState {
        match &self.0 {
            RecordedRepr::Whole(rec) => rec.state,
            RecordedRepr::Parts(p) => p.state,
        }
    }

    /// The fingerprint of the input it was recorded under.
    pub fn fingerprint(&self) -> &str {
        match &self.0 {
            RecordedRepr::Whole(rec) => &rec.fingerprint,
            RecordedRepr::Parts(p) => &p.fingerprint,
        }
    }

    /// The tool-call id of the call that recorded it, if it had one.
    pub fn call_id(&self) -> Option<&str> {
        match &self.0 {
            RecordedRepr::Whole(rec) => rec.call_id.as_deref(),
            RecordedRepr::Parts(p) => p.call_id.as_deref(),
        }
    }

    /// The recorded output (JSON), if any.
    pub fn output(&self) -> Option<&Value> {
        match &self.0 {
            RecordedRepr::Whole(rec) => rec.output.as_ref(),
            RecordedRepr::Parts(p) => p.output.as_ref(),
        }
    }

    /// When the key expires (ms since the Unix epoch), if it has a ttl.
    pub fn expires_at(&self) -> Option<Millis> {
        match &self.0 {
            RecordedRepr::Whole(rec) => rec.expires_at,
            RecordedRepr::Parts(p) => p.expires_at,
        }
    }

    /// Whether its ttl has passed at `now`.
    pub fn is_expired(&self, now: Millis) -> bool {
        self.expires_at().is_some_and(|e| e <= now)
    }
}

impl From<std::sync::Arc<EffectRecord>> for Recorded {
    fn from(rec: std::sync::Arc<EffectRecord>) -> Self {
        Recorded(RecordedRepr::Whole(rec))
    }
}

impl From<EffectRecord> for Recorded {
    fn from(rec: EffectRecord) -> Self {
        Recorded::new(rec.state, rec.fingerprint, rec.call_id, rec.output, rec.expires_at)
            .with_call_ids(rec.call_ids)
            .with_tool(rec.tool)
    }
}
