//! Listing the journal: which records ([`Filter`], paged with a [`Cursor`]), and what a list
//! found ([`Listing`]), the rows it could not read included ([`Skipped`]).

use crate::decide::record::{EffectRecord, Millis, RecordState};

/// Which records to list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    /// Only this run.
    pub run_id: Option<String>,
    /// Only this tool.
    pub tool: Option<String>,
    /// Only these states (empty: all).
    pub states: Vec<RecordState>,
    /// At most this many, newest first (`None`: all).
    pub limit: Option<usize>,
    /// Only records last updated at or after this time (ms since the Unix epoch, the
    /// journal's clock).
    pub updated_since: Option<Millis>,
    /// Only records last updated before this time.
    pub updated_before: Option<Millis>,
    /// Only records after this place in the listing's order (newest first, then by key): the
    /// next page after the one that ended there ([`Filter::next_page`]). A record updated while
    /// the pages are read moves to the front, before the pages already read: start again from
    /// the first page to see it.
    pub after: Option<Cursor>,
}

/// A place in a listing (records newest first by `updated_at`, then by key): the record a
/// page ended with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    /// The record's `updated_at`.
    pub updated_at: Millis,
    /// The record's key.
    pub key: String,
}

impl Cursor {
    /// The place of `rec`.
    pub fn of(rec: &EffectRecord) -> Cursor {
        Cursor {
            updated_at: rec.updated_at,
            key: rec.key.clone(),
        }
    }

    /// Whether `rec` comes after this place in a listing's order.
    pub fn precedes(&self, rec: &EffectRecord) -> bool {
        rec.updated_at < self.updated_at || (rec.updated_at == self.updated_at && rec.key > self.key)
    }
}

impl Filter {
    /// Every record.
    pub fn all() -> Self {
        Filter::default()
    }

    /// The same filter for the next page, after `last`, the last record of this one.
    ///
    /// ```
    /// # async fn demo(store: &dyn effect_tool_core::Store) -> Result<(), effect_tool_core::StoreError> {
    /// use effect_tool_core::store::Filter;
    ///
    /// let mut filter = Filter { limit: Some(100), ..Filter::all() };
    /// loop {
    ///     let page = store.list(&filter).await?;
    ///     // ... show the page ...
    ///     match page.last() {
    ///         Some(last) if page.len() == 100 => filter = filter.next_page(last),
    ///         _ => break,
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub fn next_page(self, last: &EffectRecord) -> Self {
        Filter {
            after: Some(Cursor::of(last)),
            ..self
        }
    }

    /// Whether `rec` passes the filter (used by backends that filter in memory).
    pub fn matches(&self, rec: &EffectRecord) -> bool {
        self.run_id.as_ref().is_none_or(|r| *r == rec.run_id)
            && self.tool.as_ref().is_none_or(|t| *t == rec.tool)
            && (self.states.is_empty() || self.states.contains(&rec.state))
            && self.updated_since.is_none_or(|t| rec.updated_at >= t)
            && self.updated_before.is_none_or(|t| rec.updated_at < t)
            && self.after.as_ref().is_none_or(|c| c.precedes(rec))
    }
}

/// What [`Store::list_report`](super::Store::list_report) found: the records that pass the filter, and the rows it could
/// not read (a record of a newer version, a corrupt row), which it skipped instead of failing
/// the whole list.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Listing {
    /// The records, newest first.
    pub records: Vec<EffectRecord>,
    /// The rows skipped, in the order met.
    pub skipped: Vec<Skipped>,
}

/// A row a list could not read, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Skipped {
    /// The row's key, as stored (empty if even the key could not be read).
    pub key: String,
    /// Why it could not be read (its version is newer, a column is corrupt).
    pub reason: String,
}

impl Listing {
    /// The keys of the rows skipped.
    pub fn skipped_keys(&self) -> Vec<&str> {
        self.skipped.iter().map(|s| s.key.as_str()).collect()
    }
}

/// A skipped row for `error`, under `key` when the error does not name one.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn skipped(error: &crate::call::error::StoreError, key: Option<&str>) -> Skipped {
    let key = error.key().or(key).unwrap_or_default().to_owned();
    tracing::warn!(key = %key, error = %error, "list skipped a record it cannot read");
    Skipped {
        key,
        reason: error.to_string(),
    }
}
