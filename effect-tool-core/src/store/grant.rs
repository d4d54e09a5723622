//! Standing approvals in the journal ([`crate::decide::grant`]): [`GrantsExt`], making one
//! (checked against the tool's argument schema the journal keeps), listing and revoking them,
//! for every store at once; the one encoding of a grant as a row of the SQL backends.

use async_trait::async_trait;

use super::Store;
use crate::call::error::StoreError;
use crate::decide::grant::{BadGrant, Condition, Grant, check_condition, check_new};
use crate::decide::record::Millis;

/// The version of a grant's row format: a row of a newer one is refused, never misread.
pub const GRANT_FORMAT: i64 = 1;

/// What a person asks for when granting a standing approval; the id and the time of making
/// are the journal's ([`GrantsExt::add_grant`]).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct NewGrant {
    /// The tool whose calls it approves.
    pub tool: String,
    /// The role it approves in (the role the tool's calls need).
    pub role: String,
    /// Who grants it: a person holding `role`. Their own calls are never covered (four eyes).
    pub granted_by: String,
    /// The granter's other names (from the identities file, [`Grant::granter_names`]): runs
    /// scoped to any of them are the granter's own too. Empty without an identities file.
    #[serde(default)]
    pub granter_names: Vec<String>,
    /// The tests the arguments must all meet (none: every call of the tool).
    #[serde(default)]
    pub when: Vec<Condition>,
    /// From when (`None`: from now), milliseconds since the Unix epoch.
    #[serde(default)]
    pub valid_from: Option<Millis>,
    /// Until when (exclusive).
    pub valid_until: Millis,
    /// Only the calls of this run, if set.
    #[serde(default)]
    pub run_id: Option<String>,
    /// Only the calls of this principal's runs, if set.
    #[serde(default)]
    pub principal: Option<String>,
}

/// Why a grant was not made.
#[derive(Debug, thiserror::Error)]
pub enum GrantError {
    /// The grant itself is refused (an empty period, a condition on an argument the tool does
    /// not have); nothing was written.
    #[error("the grant was refused: {0}")]
    Bad(#[from] BadGrant),
    /// The journal failed or refused.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Making, listing and revoking standing approvals, on every [`Store`].
#[async_trait]
pub trait GrantsExt: Store {
    /// Make a standing approval: checked ([`check_new`]; its condition against the argument
    /// schema of the tool the journal keeps, [`check_condition`]), given a new id, kept with
    /// its audit entry. The grant as kept.
    async fn add_grant(&self, new: NewGrant) -> Result<Grant, GrantError> {
        let now = self.now();
        let grant = Grant {
            id: new_id()?,
            tool: new.tool,
            role: new.role,
            granted_by: new.granted_by,
            granter_names: new.granter_names,
            when: new.when,
            valid_from: new.valid_from.unwrap_or(now),
            valid_until: new.valid_until,
            run_id: new.run_id,
            principal: new.principal,
            created_at: now,
            revoked: None,
        };
        check_new(&grant)?;
        let schema = self
            .input_schema(&grant.tool)
            .await?
            .ok_or_else(|| BadGrant::NoSchema(grant.tool.clone()))?;
        check_condition(&grant.tool, &grant.when, &schema)?;
        self.put_grant(&grant).await?;
        Ok(grant)
    }

    /// The grants live at the journal's time (neither revoked nor expired nor not yet valid),
    /// of `tool` only if given.
    async fn live_grants(&self, tool: Option<&str>) -> Result<Vec<Grant>, StoreError> {
        let now = self.now();
        Ok(self
            .grants(tool)
            .await?
            .into_iter()
            .filter(|g| g.state(now) == "live")
            .collect())
    }
}

impl<S: Store + ?Sized> GrantsExt for S {}

/// A new grant id: `g-` and 16 random hex digits.
fn new_id() -> Result<String, StoreError> {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes)
        .map_err(|e| StoreError::Backend(format!("cannot draw a grant id from the system's randomness: {e}")))?;
    Ok(format!(
        "g-{}",
        bytes.iter().map(|b| format!("{b:02x}")).collect::<String>()
    ))
}

/// A grant as the SQL backends keep it: its JSON, under [`GRANT_FORMAT`].
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(super) fn encode(grant: &Grant) -> String {
    serde_json::to_string(grant).unwrap_or_default()
}

/// A grant row read back: its format checked, its JSON decoded.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(super) fn decode(id: &str, format: i64, body: &str) -> Result<Grant, StoreError> {
    if format > GRANT_FORMAT {
        return Err(StoreError::Backend(format!(
            "grant `{id}` has row format {format}, this effect-tool reads format {GRANT_FORMAT}: upgrade effect-tool to read it (the grant was left untouched)"
        )));
    }
    serde_json::from_str(body).map_err(|e| StoreError::Corrupt {
        key: crate::decide::grant::audit_key(id),
        message: e.to_string(),
    })
}
