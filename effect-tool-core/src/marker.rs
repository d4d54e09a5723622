//! Markers: a hidden HTML comment carrying an effect key, embedded in what a tool creates (a
//! comment body, a PR description) so that its `recover` hook can find it later.
//!
//! The key is percent-encoded so that no key can end the comment early (`-->`, `--!>`) or
//! break the surrounding markup: every byte outside `A-Z a-z 0-9 : _ . / @ + = ,` is written as
//! `%XX`, `-` included.

/// The text every marker starts with.
pub const MARKER_PREFIX: &str = "<!-- effect-tool:effect=";
/// The text every marker ends with.
pub const MARKER_SUFFIX: &str = " -->";

/// The marker for `key`: `<!-- effect-tool:effect=<encoded key> -->`.
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

/// The key of the first well-formed marker in `text`, if any.
pub fn parse_marker(text: &str) -> Option<String> {
    parse_markers(text).into_iter().next()
}

/// The keys of every well-formed marker in `text`, in order.
pub fn parse_markers(text: &str) -> Vec<String> {
    let mut keys = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find(MARKER_PREFIX) {
        let after = &rest[start + MARKER_PREFIX.len()..];
        match after.find(MARKER_SUFFIX) {
            Some(end) => {
                if let Some(key) = decode(&after[..end]) {
                    keys.push(key);
                }
                rest = &after[end + MARKER_SUFFIX.len()..];
            }
            None => break,
        }
    }
    keys
}

/// Whether `text` contains the marker of `key`.
pub fn contains_marker(text: &str, key: &str) -> bool {
    text.contains(&marker(key))
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
                let hex = encoded.get(i + 1..i + 3)?;
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

    #[test]
    fn hostile_keys_cannot_end_the_comment() {
        for key in ["-->", "--!>", "a -->b", "<!-- x -->", "%41", "ünï 😀", "", " -- "] {
            let m = marker(key);
            let inner = &m[MARKER_PREFIX.len()..m.len() - MARKER_SUFFIX.len()];
            assert!(
                !inner.contains("--") && !inner.contains('>') && !inner.contains('<'),
                "{m}"
            );
            assert_eq!(parse_marker(&m).as_deref(), Some(key));
        }
    }

    #[test]
    fn finds_all_and_skips_malformed() {
        let text = format!("{} junk <!-- effect-tool:effect=%ZZ --> {}", marker("a"), marker("b"));
        assert_eq!(parse_markers(&text), vec!["a".to_owned(), "b".to_owned()]);
        assert!(contains_marker(&text, "b"));
        assert!(!contains_marker(&text, "c"));
    }
}
