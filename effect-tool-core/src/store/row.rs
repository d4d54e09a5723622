//! A record as the SQL backends store it: plain columns and JSON text, checked and decoded in
//! one place so that every backend reads the versioned schema the same way. The columns and the
//! JSON inside them: [`docs/journal-format.md`](https://github.com/effect-tool/effect-tool/blob/main/docs/journal-format.md#a-record).

use std::str::FromStr;

use crate::call::error::StoreError;
use crate::decide::record::{EffectRecord, RECORD_VERSION, RecordState};
use crate::value::class::EffectClass;

/// The prefix of the meta rows (SQLite's `effect_tool_meta`, PostgreSQL's `settings`) that keep
/// each tool's output schema ([`Store::put_output_schema`](super::Store::put_output_schema)), followed by the tool's name.
pub(crate) const OUTPUT_SCHEMA_ROW: &str = "output_schema:";

/// One stored row, before it is checked and decoded.
pub(crate) struct StoredRow {
    pub key: String,
    pub version: i64,
    pub tool: String,
    pub class: String,
    pub run_id: String,
    pub thread_id: Option<String>,
    pub call_id: Option<String>,
    /// The other call ids, as a JSON array (`None`: none; a journal from before schema 3).
    pub call_ids: Option<String>,
    pub fingerprint: String,
    pub input: String,
    pub state: String,
    pub attempt: i64,
    pub lease_until: Option<i64>,
    pub output: Option<String>,
    pub reason: Option<String>,
    pub approval_role: Option<String>,
    pub decided_by: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
    pub expires_at: Option<i64>,
    /// Who made the latest claim, as JSON (`None`: not recorded; a journal from before SQLite
    /// schema 4 / PostgreSQL migration 3).
    pub holder: Option<String>,
}

impl StoredRow {
    /// Check the version first, then decode: a newer record is never misread.
    pub fn decode(self) -> Result<EffectRecord, StoreError> {
        let key = self.key;
        if !(1..=i64::from(RECORD_VERSION)).contains(&self.version) {
            return Err(StoreError::UnsupportedVersion {
                key,
                found: u32::try_from(self.version).unwrap_or(u32::MAX),
                supported: RECORD_VERSION,
            });
        }
        let corrupt = |message: String| StoreError::Corrupt {
            key: key.clone(),
            message,
        };
        let json = |what: &str, text: &str| {
            serde_json::from_str(text).map_err(|e| corrupt(format!("its {what} is not valid JSON: {e}")))
        };
        let class = EffectClass::from_str(&self.class).map_err(|e| corrupt(e.to_string()))?;
        let state = RecordState::from_str(&self.state).map_err(corrupt)?;
        let attempt =
            u32::try_from(self.attempt).map_err(|_| corrupt(format!("attempt {} is out of range", self.attempt)))?;
        let input = json("input", &self.input)?;
        let call_ids = match &self.call_ids {
            Some(text) => serde_json::from_str::<Vec<String>>(text)
                .map_err(|e| corrupt(format!("its call ids are not a JSON list of strings: {e}")))?,
            None => Vec::new(),
        };
        let holder = match &self.holder {
            Some(text) => Some(
                serde_json::from_str(text)
                    .map_err(|e| corrupt(format!("its holder is not a valid holder JSON object: {e}")))?,
            ),
            None => None,
        };
        let output = match &self.output {
            Some(text) => Some(json("output", text)?),
            None => None,
        };
        Ok(EffectRecord {
            version: u32::try_from(self.version).expect("checked above: 1 to RECORD_VERSION"),
            key,
            tool: self.tool,
            class,
            run_id: self.run_id,
            thread_id: self.thread_id,
            call_id: self.call_id,
            call_ids,
            fingerprint: self.fingerprint,
            input,
            state,
            attempt,
            lease_until: self.lease_until,
            output,
            reason: self.reason,
            approval_role: self.approval_role,
            decided_by: self.decided_by,
            created_at: self.created_at,
            updated_at: self.updated_at,
            expires_at: self.expires_at,
            holder,
        })
    }
}

/// The stored form of [`EffectRecord::call_ids`]: `None` when there are none.
pub(crate) fn call_ids_text(rec: &EffectRecord) -> Option<String> {
    (!rec.call_ids.is_empty()).then(|| serde_json::Value::from(rec.call_ids.clone()).to_string())
}

/// The stored form of [`EffectRecord::holder`]: JSON, `None` when there is none.
pub(crate) fn holder_text(rec: &EffectRecord) -> Option<String> {
    rec.holder.as_ref().and_then(|h| serde_json::to_string(h).ok())
}

/// An audit entry's `detail` column as stored (JSON text, or NULL), decoded for the record under
/// `key`: a detail that is not JSON is a corrupt row, never dropped.
pub(crate) fn audit_detail(key: &str, text: Option<String>) -> Result<Option<serde_json::Value>, StoreError> {
    text.map(|text| {
        serde_json::from_str(&text).map_err(|e| StoreError::Corrupt {
            key: key.to_owned(),
            message: format!("an audit entry's detail is not valid JSON: {e}"),
        })
    })
    .transpose()
}
