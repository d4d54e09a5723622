//! Markers: a hidden HTML comment carrying an effect key, embedded in what a tool creates (a
//! comment body, a PR description) so that its `recover` hook can find it later.
//!
//! The key is percent-encoded so that no key can end the comment early (`-->`, `--!>`) or
//! break the surrounding markup: every byte outside `A-Z a-z 0-9 : _ . / @ + = ,` is written as
//! `%XX`, `-` included.
//!
//! # Signed markers
//!
//! A key can be computed from public data (the run id that any posted marker shows, the tool
//! name, the hash of the arguments), so anyone who can post where `recover` looks could plant
//! a plain marker first, and the agent's own effect would then be suppressed. So a marker
//! written by [`EffectCtx::marker`](crate::EffectCtx::marker) carries a MAC:
//!
//! ```text
//! <!-- effect-tool:effect=<encoded key> mac=<64 hex digits> -->
//! ```
//!
//! The MAC is HMAC-SHA256 of the key under the journal's [`MarkerSecret`]
//! ([`Store::marker_secret`](crate::Store::marker_secret): 32 random bytes every built-in store
//! creates once and keeps, so every process on the journal shares it and it survives restarts;
//! or the application's own, [`Engine::with_marker_secret`](crate::Engine::with_marker_secret)).
//! [`EffectCtx::contains_marker`](crate::EffectCtx::contains_marker) and [`contains_marker`]
//! accept only a marker whose MAC verifies: a planted plain marker, or one with a wrong MAC,
//! does not count.
//!
//! **What a verified marker proves:** the text was written by someone holding the journal's
//! secret (this application, normally through `ctx.marker()`), for exactly this key. **What it
//! does not prove:** who posted the text (the marker can be copied from the agent's own post
//! into another one: a `recover` hook should also check the author, e.g. that the comment was
//! made by the agent's account), nor that the effect completed (only that text carrying the
//! marker exists).
//!
//! [`parse_marker`] and [`parse_markers`] read both forms and return the key; they verify
//! nothing.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The text every marker starts with.
pub const MARKER_PREFIX: &str = "<!-- effect-tool:effect=";
/// The text every marker ends with.
pub const MARKER_SUFFIX: &str = " -->";
/// What separates the encoded key from the MAC in a signed marker.
const MAC_SEPARATOR: &str = " mac=";
/// What the MAC covers before the key, so that it means "a marker" and nothing else.
const MAC_CONTEXT: &[u8] = b"effect-tool marker v1\n";

/// The secret markers are signed with: 32 bytes, random unless the application brings its own.
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

    fn mac(&self, key: &str) -> Hmac<Sha256> {
        // HMAC takes a key of any length: this cannot fail.
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.0).unwrap_or_else(|_| unreachable!());
        mac.update(MAC_CONTEXT);
        mac.update(key.as_bytes());
        mac
    }
}

fn hex(bytes: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(HEX[(b >> 4) as usize] as char);
        out.push(HEX[(b & 0xf) as usize] as char);
    }
    out
}

/// The plain (unsigned) marker for `key`: `<!-- effect-tool:effect=<encoded key> -->`.
///
/// Anyone can write it: [`contains_marker`] does not accept it. Use
/// [`EffectCtx::marker`](crate::EffectCtx::marker) (or [`signed_marker`]) in what a tool
/// creates; this form is what a journal without a secret gets.
///
/// ```
/// use effect_tool_core::marker::{marker, parse_marker};
/// let m = marker("run-1:post_comment:ab12");
/// assert_eq!(m, "<!-- effect-tool:effect=run%2D1:post_comment:ab12 -->");
/// assert_eq!(parse_marker(&format!("Thanks!\n\n{m}")).as_deref(), Some("run-1:post_comment:ab12"));
/// ```
pub fn marker(key: &str) -> String {
    let mut out = String::with_capacity(MARKER_PREFIX.len() + key.len() + MARKER_SUFFIX.len() + 8);
    out.push_str(MARKER_PREFIX);
    encode_into(&mut out, key);
    out.push_str(MARKER_SUFFIX);
    out
}

/// The signed marker for `key`: `<!-- effect-tool:effect=<encoded key> mac=<hex> -->`, the MAC
/// being HMAC-SHA256 of the key under `secret` (see the module docs).
///
/// ```
/// use effect_tool_core::marker::{MarkerSecret, contains_marker, marker, parse_marker, signed_marker};
/// let secret = MarkerSecret::from_bytes([7; 32]);
/// let m = signed_marker("run-1:post_comment:ab12", &secret);
/// assert!(m.starts_with("<!-- effect-tool:effect=run%2D1:post_comment:ab12 mac="));
/// assert_eq!(parse_marker(&m).as_deref(), Some("run-1:post_comment:ab12"));
/// assert!(contains_marker(&m, "run-1:post_comment:ab12", &secret));
/// // A plain marker of the same key, planted by someone without the secret, does not count.
/// assert!(!contains_marker(&marker("run-1:post_comment:ab12"), "run-1:post_comment:ab12", &secret));
/// ```
pub fn signed_marker(key: &str, secret: &MarkerSecret) -> String {
    let tag = secret.mac(key).finalize().into_bytes();
    let mut out = String::with_capacity(MARKER_PREFIX.len() + key.len() + MARKER_SUFFIX.len() + 80);
    out.push_str(MARKER_PREFIX);
    encode_into(&mut out, key);
    out.push_str(MAC_SEPARATOR);
    out.push_str(&hex(&tag));
    out.push_str(MARKER_SUFFIX);
    out
}

/// The key of the first well-formed marker in `text` (plain or signed), if any. Verifies
/// nothing: see [`contains_marker`].
pub fn parse_marker(text: &str) -> Option<String> {
    parse_markers(text).into_iter().next()
}

/// The keys of every well-formed marker in `text` (plain or signed), in order. Verifies
/// nothing: see [`contains_marker`].
pub fn parse_markers(text: &str) -> Vec<String> {
    markers(text).map(|(key, _)| key).collect()
}

/// Every well-formed marker in `text`: its key, and its MAC's hex digits if it is signed.
fn markers(text: &str) -> impl Iterator<Item = (String, Option<&str>)> {
    let mut rest = text;
    std::iter::from_fn(move || {
        loop {
            let start = rest.find(MARKER_PREFIX)?;
            let after = &rest[start + MARKER_PREFIX.len()..];
            let end = after.find(MARKER_SUFFIX)?;
            rest = &after[end + MARKER_SUFFIX.len()..];
            // An encoded key holds no `<`: of the prefixes before this suffix, only the last can
            // start a marker. Reading from the first would let an unclosed prefix written before
            // a marker (quoted text, say) hide it.
            let inner = &after[..end];
            let inner = inner
                .rfind(MARKER_PREFIX)
                .map_or(inner, |i| &inner[i + MARKER_PREFIX.len()..]);
            let (encoded, mac) = match inner.split_once(MAC_SEPARATOR) {
                Some((encoded, mac)) => (encoded, Some(mac)),
                None => (inner, None),
            };
            if mac.is_some_and(|m| m.len() != 64 || !m.bytes().all(|b| b.is_ascii_hexdigit())) {
                continue;
            }
            if let Some(key) = decode(encoded) {
                return Some((key, mac));
            }
        }
    })
}

/// Whether `text` contains a marker of `key` signed with `secret` (see the module docs for
/// what that proves). Plain markers and markers with a wrong MAC do not count.
pub fn contains_marker(text: &str, key: &str, secret: &MarkerSecret) -> bool {
    markers(text).any(|(found, mac)| {
        found == key
            && mac
                .and_then(unhex)
                .is_some_and(|tag| secret.mac(key).verify_slice(&tag).is_ok())
    })
}

/// Whether `text` contains the plain marker of `key`: what a journal without a secret can
/// check. Anyone can write one; prefer [`contains_marker`].
pub fn contains_plain_marker(text: &str, key: &str) -> bool {
    text.contains(&marker(key))
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
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
    fn hostile_keys_cannot_end_the_comment() {
        for key in [
            "-->",
            "--!>",
            "a -->b",
            "<!-- x -->",
            "%41",
            "ünï 😀",
            "",
            " -- ",
            " mac=00",
        ] {
            for m in [marker(key), signed_marker(key, &secret())] {
                let inner = &m[MARKER_PREFIX.len()..m.len() - MARKER_SUFFIX.len()];
                assert!(
                    !inner.contains("--") && !inner.contains('>') && !inner.contains('<'),
                    "{m}"
                );
                assert_eq!(parse_marker(&m).as_deref(), Some(key));
            }
            assert!(contains_marker(&signed_marker(key, &secret()), key, &secret()));
        }
    }

    #[test]
    fn finds_all_and_skips_malformed() {
        let s = secret();
        let text = format!(
            "{} junk <!-- effect-tool:effect=%ZZ --> {} <!-- effect-tool:effect=c mac=zz -->",
            marker("a"),
            signed_marker("b", &s)
        );
        assert_eq!(parse_markers(&text), vec!["a".to_owned(), "b".to_owned()]);
        assert!(contains_marker(&text, "b", &s));
        assert!(!contains_marker(&text, "c", &s));
        assert!(contains_plain_marker(&text, "a"));
        assert!(!contains_plain_marker(&text, "b"));
    }

    #[test]
    fn the_decode_guard_refuses_every_byte_that_is_not_plain_or_an_escape() {
        // Raw bytes the encoder would have escaped: a marker carrying them was not written by
        // `marker`, and is not read as one.
        for raw in [
            "a-b", "a b", "a<b", "ü", "a\u{0}b", "a%", "a%4", "a%G1", "-", "a>b", "a\"b", "%C3",
        ] {
            let text = format!("{MARKER_PREFIX}{raw}{MARKER_SUFFIX}");
            assert_eq!(parse_marker(&text), None, "{raw:?}");
        }
        // Escapes decode, upper or lower case; plain bytes pass as they are.
        let text = format!("{MARKER_PREFIX}a%2db%2Dc:_./@+=,Z9{MARKER_SUFFIX}");
        assert_eq!(parse_marker(&text).as_deref(), Some("a-b-c:_./@+=,Z9"));
        // A marker that is not the first one still counts.
        let text = format!("{MARKER_PREFIX}a b{MARKER_SUFFIX}{MARKER_PREFIX}ok{MARKER_SUFFIX}");
        assert_eq!(parse_markers(&text), vec!["ok".to_owned()]);
        // No suffix: nothing.
        assert_eq!(parse_marker(&format!("{MARKER_PREFIX}ok")), None);
    }

    #[test]
    fn a_planted_or_altered_marker_does_not_verify() {
        let s = secret();
        let key = "run-1:post_comment:ab12";
        let good = signed_marker(key, &s);
        assert!(contains_marker(&good, key, &s));
        // Plain: anyone can write it.
        assert!(!contains_marker(&marker(key), key, &s));
        // Another secret's MAC.
        assert!(!contains_marker(
            &signed_marker(key, &MarkerSecret::from_bytes([1; 32])),
            key,
            &s
        ));
        // Another key's MAC moved onto this key.
        let other = signed_marker("run-1:post_comment:ab13", &s);
        let mac = &other[other.find(" mac=").unwrap()..];
        let moved = format!(
            "{MARKER_PREFIX}{}{mac}",
            &good[MARKER_PREFIX.len()..good.find(" mac=").unwrap()]
        );
        assert!(parse_marker(&moved).is_some());
        assert!(!contains_marker(&moved, key, &s));
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
        assert!(!contains_marker(&other, key, &s));
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

    #[test]
    fn the_mac_is_hmac_sha256_of_the_context_and_key() {
        // HMAC-SHA256 under the secret of "effect-tool marker v1\n" followed by the key. The
        // digits were computed independently (Python: `hmac.new(bytes(32),
        // b"effect-tool marker v1\nk", hashlib.sha256).hexdigest()`), so that other
        // implementations can write and check the same markers.
        let m = signed_marker("k", &MarkerSecret::from_bytes([0; 32]));
        assert_eq!(
            m,
            "<!-- effect-tool:effect=k mac=8a889800e6ad7743d30d75f3d36307a4e468450592f8fea26454319c1f775809 -->"
        );
    }
}
