//! Finding the record a marker belongs to: the journal's side of [`marker`](crate::value::marker).

use crate::call::error::StoreError;
use crate::decide::record::EffectRecord;
use crate::store::{Filter, Store};
use crate::value::marker::{MARKER_ID_LEN, MarkerSecret, marker_id, parse_marker, plain_marker_id};

/// How many records [`find_record`] reads at a time.
const FIND_PAGE: usize = 500;

/// The record a marker belongs to, in `store`.
///
/// `marker` is a whole marker (`<!-- effect-tool:marker=... -->`, or text that holds one: the
/// first is used), its id alone (32 hex digits), or what a legacy marker carries (the key).
/// `secret` is the secret the markers were written with: the engine's
/// ([`Engine::marker_secret`](crate::Engine::marker_secret)), which is the journal's
/// ([`Store::marker_secret`]) unless the application brought its own. Plain markers (written
/// without a secret) are found with or without one.
///
/// **A scan:** the journal keeps no index of marker ids (so its format is unchanged, and
/// markers written by any process on it, before or after an upgrade, are found): every key is
/// read, a page at a time, and its id computed until one matches. That costs one HMAC per
/// record (microseconds) and reading the journal once: fine for a person's lookup, not for a
/// hot path. A record dropped by `gc`, or one whose marker was written under another secret,
/// is not found: `None`.
pub async fn find_record(
    store: &dyn Store,
    marker: &str,
    secret: Option<&MarkerSecret>,
) -> Result<Option<EffectRecord>, StoreError> {
    let wanted = parse_marker(marker).unwrap_or_else(|| marker.trim().to_owned());
    let is_id = wanted.len() == MARKER_ID_LEN && wanted.bytes().all(|b| b.is_ascii_hexdigit());
    if !is_id {
        // A legacy marker's key (or a key given as it is).
        return store.get(&wanted).await;
    }
    let wanted = wanted.to_ascii_lowercase();
    let mut filter = Filter {
        limit: Some(FIND_PAGE),
        ..Filter::all()
    };
    loop {
        let page = store.list(&filter).await?;
        for rec in &page {
            let keyed = secret.is_some_and(|s| marker_id(&rec.key, s) == wanted);
            if keyed || plain_marker_id(&rec.key) == wanted {
                return Ok(Some(rec.clone()));
            }
        }
        match page.last() {
            Some(last) if page.len() == FIND_PAGE => filter = filter.next_page(last),
            // A key that only looks like an id (32 hex digits) is still looked up as a key.
            _ => return store.get(&wanted).await,
        }
    }
}
