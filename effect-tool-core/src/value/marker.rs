//! Markers: a hidden HTML comment carrying an opaque identifier of an effect key, embedded in
//! what a tool creates (a comment body, a PR description, an email) so that its `recover` hook
//! can find it later, and an operator who meets it can find the record.
//!
//! ```text
//! <!-- effect-tool:marker=<32 hex digits> -->
//! ```
//!
//! # The identifier, not the key
//!
//! What a tool creates is often read by customers: a marker must not show the key (a run id,
//! a recipient, a subject). So it carries the **marker id**: the first 16 bytes (32 hex digits)
//! of HMAC-SHA256 of the key under the journal's [`MarkerSecret`]
//! ([`Store::marker_secret`](crate::Store::marker_secret): 32 random bytes every built-in store
//! creates once and keeps, so every process on the journal shares it and it survives restarts;
//! or the application's own, [`Engine::with_marker_secret`](crate::Engine::with_marker_secret)).
//! A reader learns nothing of the key from it, and cannot confirm a guess of the key.
//!
//! - **`recover`** computes the same id from its context's key and looks for it:
//!   [`EffectCtx::marker`](crate::EffectCtx::marker) writes it,
//!   [`EffectCtx::contains_marker`](crate::EffectCtx::contains_marker) finds it.
//! - **An operator** who finds a marker (in an email, a ticket) gives it, or just its id, to
//!   `effect-tool show --marker <id>`, or [`find_record`](crate::store::markers::find_record) in code: the journal computes the id
//!   of each of its keys under its secret until one matches (a scan, see [`find_record`](crate::store::markers::find_record)).
//!
//! # Forgery
//!
//! A key can be computed from public data (a run id, the tool name, the hash of the
//! arguments), so anyone who can post where `recover` looks could try to plant a marker first,
//! and the agent's own effect would then be suppressed. Without the secret nobody can compute
//! the id of a key, so [`contains_marker`] accepts only a marker written by someone holding
//! the secret (this application, normally through `ctx.marker()`), for exactly this key.
//! **What it does not prove:** who posted the text (the marker can be copied from the agent's
//! own post into another one: a `recover` hook should also check the author, e.g. that the
//! comment was made by the agent's account), nor that the effect completed (only that text
//! carrying the marker exists). 128 bits of a MAC leave a forger nothing to guess.
//!
//! # Without a secret
//!
//! A detached context, or a store that keeps no secret (the [`Store::marker_secret`](crate::Store::marker_secret)
//! default) and an engine given none, writes a *plain* marker ([`marker`]): the id is the first
//! 16 bytes of SHA-256 of the key, in the same form. It still shows no key to a casual reader,
//! but whoever can guess the key can confirm the guess, and anyone can write it:
//! [`contains_marker`] never accepts it, [`contains_plain_marker`] does. [`find_record`](crate::store::markers::find_record)
//! finds its record without a secret.
//!
//! # Markers written before the identifier
//!
//! Earlier releases wrote the key itself, percent-encoded, with a MAC:
//! `<!-- effect-tool:effect=<encoded key> mac=<64 hex> -->` ([`legacy_marker`]). They are still
//! read, so that a call in doubt across the upgrade still reconciles: [`contains_marker`]
//! accepts such a marker when its MAC verifies, [`parse_markers`] returns the key it spells,
//! and [`find_record`](crate::store::markers::find_record) looks that key up. Nothing writes them any more.

use crate::value::digest::{hex, unhex};
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

/// The text every marker starts with.
pub const MARKER_PREFIX: &str = "<!-- effect-tool:marker=";
/// The text every marker ends with.
pub const MARKER_SUFFIX: &str = " -->";
/// How many hex digits a marker id has (16 bytes).
pub const MARKER_ID_LEN: usize = 32;
/// What markers written before the identifier start with (see the module docs).
const LEGACY_PREFIX: &str = "<!-- effect-tool:effect=";
/// What separates the encoded key from the MAC in a legacy signed marker.
const MAC_SEPARATOR: &str = " mac=";
/// What a legacy marker's MAC covers before the key, so that it means "a marker" and nothing else.
const MAC_CONTEXT: &[u8] = b"effect-tool marker v1\n";
/// What a marker id covers before the key: another context than the legacy MAC's, so that no
/// id is a prefix of a MAC ever written beside its key.
const ID_CONTEXT: &[u8] = b"effect-tool marker id v2\n";

/// The secret marker ids are computed with: 32 bytes, random unless the application brings its own.
///
/// Its `Debug` shows nothing of it.
#[derive(Clone, PartialEq, Eq)]
pub struct MarkerSecret([u8; 32]);

impl std::fmt::Debug for MarkerSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MarkerSecret(..)")
    }
}

impl MarkerSecret {
    /// A secret from the operating system's random source.
    pub fn random() -> Result<Self, std::io::Error> {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes)
            .map_err(|e| std::io::Error::other(format!("the operating system's random source failed: {e}")))?;
        Ok(MarkerSecret(bytes))
    }

    /// A secret from 32 bytes the application keeps (e.g. from its secret manager).
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        MarkerSecret(bytes)
    }

    /// The 32 bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// The secret as 64 lowercase hex digits (how the built-in stores keep it).
    pub fn to_hex(&self) -> String {
        hex(&self.0)
    }

    /// A secret from 64 hex digits ([`MarkerSecret::to_hex`]); `None` for anything else.
    pub fn from_hex(text: &str) -> Option<Self> {
        let text = text.trim();
        if text.len() != 64 || !text.is_ascii() {
            return None;
        }
        let mut bytes = [0u8; 32];
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok()?;
        }
        Some(MarkerSecret(bytes))
    }

    /// The legacy MAC of `key` (markers written before the identifier).
    fn mac(&self, key: &str) -> Hmac<Sha256> {
        self.hmac(MAC_CONTEXT, key)
    }

    /// HMAC-SHA256 under the secret of `context` followed by `key`.
    fn hmac(&self, context: &[u8], key: &str) -> Hmac<Sha256> {
        // HMAC takes a key of any length: this cannot fail.
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.0).unwrap_or_else(|_| unreachable!());
        mac.update(context);
        mac.update(key.as_bytes());
        mac
    }
}

/// The marker id of `key` under `secret`: 32 hex digits, the first 16 bytes of HMAC-SHA256
/// (see the module docs).
pub fn marker_id(key: &str, secret: &MarkerSecret) -> String {
    hex(&secret.hmac(ID_CONTEXT, key).finalize().into_bytes()[..MARKER_ID_LEN / 2])
}

/// The plain marker id of `key`, for a journal without a secret: the first 16 bytes of
/// SHA-256 (see the module docs: anyone can compute it).
pub fn plain_marker_id(key: &str) -> String {
    let mut digest = Sha256::new();
    digest.update(ID_CONTEXT);
    digest.update(key.as_bytes());
    hex(&digest.finalize()[..MARKER_ID_LEN / 2])
}

/// The marker of an id: `<!-- effect-tool:marker=<id> -->`.
fn marker_of(id: &str) -> String {
    format!("{MARKER_PREFIX}{id}{MARKER_SUFFIX}")
}

/// The plain marker of `key`, for a journal without a secret: its id is [`plain_marker_id`].
///
/// Anyone can write it: [`contains_marker`] does not accept it. Use
/// [`EffectCtx::marker`](crate::EffectCtx::marker) (or [`signed_marker`]) in what a tool
/// creates; this form is what a journal without a secret gets.
///
/// ```
/// use effect_tool_core::value::marker::{marker, parse_marker, plain_marker_id};
/// let m = marker("run-1:post_comment:ab12");
/// assert!(m.starts_with("<!-- effect-tool:marker=") && !m.contains("run"));
/// assert_eq!(parse_marker(&format!("Thanks!\n\n{m}")), Some(plain_marker_id("run-1:post_comment:ab12")));
/// ```
pub fn marker(key: &str) -> String {
    marker_of(&plain_marker_id(key))
}

/// The marker of `key` under `secret`: `<!-- effect-tool:marker=<id> -->`, the id being
/// [`marker_id`] (see the module docs). It shows nothing of the key.
///
/// ```
/// use effect_tool_core::value::marker::{MarkerSecret, contains_marker, marker, marker_id, parse_marker, signed_marker};
/// let secret = MarkerSecret::from_bytes([7; 32]);
/// let key = "conv-1:email:T-77:ann@example.com:Your refund";
/// let m = signed_marker(key, &secret);
/// assert_eq!(m, format!("<!-- effect-tool:marker={} -->", marker_id(key, &secret)));
/// assert!(!m.contains("ann") && !m.contains("conv"));
/// assert_eq!(parse_marker(&m), Some(marker_id(key, &secret)));
/// assert!(contains_marker(&m, key, &secret));
/// // The plain marker of the same key, planted by someone without the secret, does not count.
/// assert!(!contains_marker(&marker(key), key, &secret));
/// ```
pub fn signed_marker(key: &str, secret: &MarkerSecret) -> String {
    marker_of(&marker_id(key, secret))
}

/// A marker as earlier releases wrote it, key in clear text: signed with `secret`, or plain
/// without one. Still read ([`contains_marker`], [`find_record`](crate::store::markers::find_record)); never embed it in new
/// content: it shows the key. For tests of journals and content written before the upgrade.
pub fn legacy_marker(key: &str, secret: Option<&MarkerSecret>) -> String {
    let mut out = String::with_capacity(LEGACY_PREFIX.len() + key.len() + MARKER_SUFFIX.len() + 80);
    out.push_str(LEGACY_PREFIX);
    encode_into(&mut out, key);
    if let Some(secret) = secret {
        out.push_str(MAC_SEPARATOR);
        out.push_str(&hex(&secret.mac(key).finalize().into_bytes()));
    }
    out.push_str(MARKER_SUFFIX);
    out
}

/// What the first well-formed marker in `text` carries, if any: see [`parse_markers`].
/// Verifies nothing: see [`contains_marker`].
pub fn parse_marker(text: &str) -> Option<String> {
    parse_markers(text).into_iter().next()
}

/// What every well-formed marker in `text` carries, in order: its id (32 hex digits), or for a
/// marker written before the identifier, the key it spells. Each is what [`find_record`](crate::store::markers::find_record) and
/// `effect-tool show --marker` take. Verifies nothing: see [`contains_marker`].
pub fn parse_markers(text: &str) -> Vec<String> {
    let mut found: Vec<(usize, String)> = ids(text).collect();
    found.extend(legacy_markers(text).map(|(at, key, _)| (at, key)));
    found.sort_by_key(|(at, _)| *at);
    found.into_iter().map(|(_, item)| item).collect()
}

/// Every well-formed current marker in `text`: where it starts, and its id.
fn ids(text: &str) -> impl Iterator<Item = (usize, String)> + '_ {
    text.match_indices(MARKER_PREFIX).filter_map(move |(at, _)| {
        let rest = &text[at + MARKER_PREFIX.len()..];
        let id = rest.get(..MARKER_ID_LEN)?;
        (id.bytes().all(|b| b.is_ascii_hexdigit()) && rest[MARKER_ID_LEN..].starts_with(MARKER_SUFFIX))
            .then(|| (at, id.to_ascii_lowercase()))
    })
}

/// Every well-formed legacy marker in `text`: where its key starts, its key, and its MAC's hex
/// digits if it is signed.
fn legacy_markers(text: &str) -> impl Iterator<Item = (usize, String, Option<&str>)> {
    let mut rest = text;
    std::iter::from_fn(move || {
        loop {
            let start = rest.find(LEGACY_PREFIX)?;
            let after = &rest[start + LEGACY_PREFIX.len()..];
            let end = after.find(MARKER_SUFFIX)?;
            rest = &after[end + MARKER_SUFFIX.len()..];
            // An encoded key holds no `<`: of the prefixes before this suffix, only the last can
            // start a marker. Reading from the first would let an unclosed prefix written before
            // a marker (quoted text, say) hide it.
            let inner = &after[..end];
            let inner = inner
                .rfind(LEGACY_PREFIX)
                .map_or(inner, |i| &inner[i + LEGACY_PREFIX.len()..]);
            let (encoded, mac) = match inner.split_once(MAC_SEPARATOR) {
                Some((encoded, mac)) => (encoded, Some(mac)),
                None => (inner, None),
            };
            if mac.is_some_and(|m| m.len() != 64 || !m.bytes().all(|b| b.is_ascii_hexdigit())) {
                continue;
            }
            if let Some(key) = decode(encoded) {
                let at = inner.as_ptr() as usize - text.as_ptr() as usize;
                return Some((at, key, mac));
            }
        }
    })
}

/// Whether `text` contains a marker of `key` written with `secret` (see the module docs for
/// what that proves): its id is [`marker_id`], or it is a legacy marker of `key` whose MAC
/// verifies. Plain markers, and markers of other keys or secrets, do not count.
pub fn contains_marker(text: &str, key: &str, secret: &MarkerSecret) -> bool {
    let id = marker_id(key, secret);
    ids(text).any(|(_, found)| found == id)
        || legacy_markers(text).any(|(_, found, mac)| {
            found == key
                && mac
                    .and_then(unhex)
                    .is_some_and(|tag| secret.mac(key).verify_slice(&tag).is_ok())
        })
}

/// Whether `text` contains the plain marker of `key` (or a legacy plain one): what a journal
/// without a secret can check. Anyone can write one; prefer [`contains_marker`].
pub fn contains_plain_marker(text: &str, key: &str) -> bool {
    let id = plain_marker_id(key);
    ids(text).any(|(_, found)| found == id) || text.contains(&legacy_marker(key, None))
}

fn is_plain(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b':' | b'_' | b'.' | b'/' | b'@' | b'+' | b'=' | b',')
}

fn encode_into(out: &mut String, key: &str) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for b in key.bytes() {
        if is_plain(b) {
            out.push(b as char);
        } else {
            out.push('%');
            out.push(HEX[(b >> 4) as usize] as char);
            out.push(HEX[(b & 0xf) as usize] as char);
        }
    }
}

fn decode(encoded: &str) -> Option<String> {
    let bytes = encoded.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                // Two hex digits: `from_str_radix` alone would also take a sign (`%+D`).
                let hex = encoded
                    .get(i + 1..i + 3)
                    .filter(|h| h.bytes().all(|b| b.is_ascii_hexdigit()))?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b if is_plain(b) => {
                out.push(b);
                i += 1;
            }
            _ => return None,
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret() -> MarkerSecret {
        MarkerSecret::from_bytes([42; 32])
    }

    #[test]
    fn a_marker_shows_nothing_of_its_key() {
        let key = "conv-1:email:T-77:ann@example.com:Your refund";
        for m in [marker(key), signed_marker(key, &secret())] {
            let inner = &m[MARKER_PREFIX.len()..m.len() - MARKER_SUFFIX.len()];
            assert_eq!(inner.len(), MARKER_ID_LEN, "{m}");
            assert!(inner.bytes().all(|b| b.is_ascii_hexdigit()), "{m}");
            for part in ["conv", "ann", "example", "refund", "T%2D77", "email"] {
                assert!(!m.contains(part), "{m} shows {part}");
            }
        }
        // Hostile keys change nothing: the marker is the id.
        for key in ["-->", "--!>", "<!-- x -->", "", " mac=00", "ünï 😀"] {
            let m = signed_marker(key, &secret());
            assert!(!m[4..m.len() - 3].contains("--") && !m.contains("<!-- x"), "{m}");
            assert!(contains_marker(&m, key, &secret()));
            assert_eq!(parse_marker(&m), Some(marker_id(key, &secret())));
        }
    }

    #[test]
    fn finds_all_in_order_and_skips_malformed() {
        let s = secret();
        let text = format!(
            "{} junk <!-- effect-tool:marker=zz --> {} {MARKER_PREFIX}{} -->x {} {}",
            marker("a"),
            signed_marker("b", &s),
            "0".repeat(31),
            legacy_marker("c", Some(&s)),
            legacy_marker("d", None),
        );
        assert_eq!(
            parse_markers(&text),
            vec![plain_marker_id("a"), marker_id("b", &s), "c".to_owned(), "d".to_owned()]
        );
        assert!(contains_marker(&text, "b", &s));
        assert!(contains_marker(&text, "c", &s), "a verified legacy marker still counts");
        assert!(!contains_marker(&text, "a", &s));
        assert!(!contains_marker(&text, "d", &s));
        assert!(contains_plain_marker(&text, "a"));
        assert!(contains_plain_marker(&text, "d"));
        assert!(!contains_plain_marker(&text, "b"));
        // An id in upper case is the same id.
        let upper = signed_marker("b", &s)
            .to_ascii_uppercase()
            .replace("EFFECT-TOOL:MARKER=", "effect-tool:marker=");
        assert!(contains_marker(&upper, "b", &s), "{upper}");
    }

    #[test]
    fn the_legacy_decode_guard_refuses_every_byte_that_is_not_plain_or_an_escape() {
        for raw in [
            "a-b", "a b", "a<b", "ü", "a\u{0}b", "a%", "a%4", "a%G1", "-", "a>b", "a\"b", "%C3",
        ] {
            let text = format!("{LEGACY_PREFIX}{raw}{MARKER_SUFFIX}");
            assert_eq!(parse_marker(&text), None, "{raw:?}");
        }
        let text = format!("{LEGACY_PREFIX}a%2db%2Dc:_./@+=,Z9{MARKER_SUFFIX}");
        assert_eq!(parse_marker(&text).as_deref(), Some("a-b-c:_./@+=,Z9"));
        for key in ["-->", "--!>", "a -->b", "%41", "ünï 😀", "", " mac=00"] {
            let m = legacy_marker(key, Some(&secret()));
            assert_eq!(parse_marker(&m).as_deref(), Some(key));
            assert!(contains_marker(&m, key, &secret()));
        }
    }

    #[test]
    fn a_planted_or_altered_marker_does_not_verify() {
        let s = secret();
        let key = "run-1:post_comment:ab12";
        let good = signed_marker(key, &s);
        assert!(contains_marker(&good, key, &s));
        // Plain: anyone can write it.
        assert!(!contains_marker(&marker(key), key, &s));
        assert!(!contains_marker(&legacy_marker(key, None), key, &s));
        // Another secret's id, or a legacy MAC under another secret.
        let other_secret = MarkerSecret::from_bytes([1; 32]);
        assert!(!contains_marker(&signed_marker(key, &other_secret), key, &s));
        assert!(!contains_marker(&legacy_marker(key, Some(&other_secret)), key, &s));
        // The legacy MAC of the key is not its id, nor is any part of it.
        let legacy = legacy_marker(key, Some(&s));
        let mac = &legacy[legacy.find(" mac=").unwrap() + 5..legacy.len() - MARKER_SUFFIX.len()];
        for at in [0, 32] {
            assert!(!contains_marker(&marker_of(&mac[at..at + 32]), key, &s));
        }
        // One digit changed, or cut short.
        let flip = |c: char| if c == '0' { '1' } else { '0' };
        let at = good.len() - MARKER_SUFFIX.len() - 1;
        let mut bad = good.clone();
        bad.replace_range(at..=at, &flip(good.as_bytes()[at] as char).to_string());
        assert!(!contains_marker(&bad, key, &s));
        let short = format!("{}{MARKER_SUFFIX}", &good[..at]);
        assert!(!contains_marker(&short, key, &s));
        assert_eq!(parse_marker(&short), None);
        // The right marker for another key does not count for this one.
        assert!(!contains_marker(&signed_marker("run-1:post_comment:ab13", &s), key, &s));
        // Beside planted ones, the real one is still found.
        assert!(contains_marker(&format!("{}\n{bad}\n{good}", marker(key)), key, &s));
    }

    #[test]
    fn secrets_round_trip_as_hex_and_never_print() {
        let s = MarkerSecret::random().unwrap();
        assert_ne!(s, MarkerSecret::random().unwrap());
        assert_eq!(MarkerSecret::from_hex(&s.to_hex()), Some(s.clone()));
        assert_eq!(MarkerSecret::from_hex(&format!(" {}\n", s.to_hex())), Some(s.clone()));
        assert_eq!(s.to_hex().len(), 64);
        assert_eq!(MarkerSecret::from_bytes(*s.as_bytes()), s);
        assert_eq!(format!("{s:?}"), "MarkerSecret(..)");
        for bad in [
            "",
            "00",
            &"0".repeat(63),
            &"0".repeat(65),
            &"g".repeat(64),
            &"é".repeat(32),
        ] {
            assert_eq!(MarkerSecret::from_hex(bad), None, "{bad:?}");
        }
        assert_eq!(
            MarkerSecret::from_hex(&"0f".repeat(32)).map(|s| *s.as_bytes()),
            Some([0x0f; 32])
        );
    }

    const ID_K: &str = "81318288d62b1bd38d6e5d4f532f5662";
    const PLAIN_ID_K: &str = "9d964b324d58120123eb4cf686e6a519";

    #[test]
    fn ids_and_macs_are_hmac_sha256_of_their_context_and_key() {
        // The digits were computed independently (Python: `hmac.new(bytes(32),
        // b"effect-tool marker id v2\nk", hashlib.sha256).hexdigest()[:32]`, and
        // `hashlib.sha256(b"effect-tool marker id v2\nk").hexdigest()[:32]`), so that other
        // implementations can write and check the same markers.
        let zero = MarkerSecret::from_bytes([0; 32]);
        assert_eq!(signed_marker("k", &zero), format!("<!-- effect-tool:marker={ID_K} -->"));
        assert_eq!(marker("k"), format!("<!-- effect-tool:marker={PLAIN_ID_K} -->"));
        assert_eq!(
            legacy_marker("k", Some(&zero)),
            "<!-- effect-tool:effect=k mac=8a889800e6ad7743d30d75f3d36307a4e468450592f8fea26454319c1f775809 -->"
        );
    }
}
