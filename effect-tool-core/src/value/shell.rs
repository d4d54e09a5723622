//! Commands printed for people to paste into a shell (in errors and the CLI's output), and the
//! characters that must never reach a terminal raw.

/// Whether `c` would act on a terminal or hide itself when printed raw: a control character
/// (Unicode category Cc: a newline, an escape sequence's ESC) or a format character (Cf: bidi
/// overrides, zero-width spaces and joiners, the BOM), with which one key can be made to look
/// like another.
pub fn is_hidden(c: char) -> bool {
    use unicode_general_category::{GeneralCategory, get_general_category};
    c.is_control() || get_general_category(c) == GeneralCategory::Format
}

/// `s` quoted as one word for a POSIX shell, so a printed command can be pasted as is: as it
/// is when that is safe, single-quoted otherwise, and with ANSI-C quoting (`$'...'`, bash and
/// zsh) when it holds control or format characters ([`is_hidden`]), so that they are written as
/// escapes, never raw.
pub fn quote(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:/@+=,%".contains(&b))
    {
        return s.to_owned();
    }
    if s.chars().any(is_hidden) {
        let mut out = String::from("$'");
        for c in s.chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                '\'' => out.push_str("\\'"),
                '\n' => out.push_str("\\n"),
                '\t' => out.push_str("\\t"),
                c if c.is_control() && c.is_ascii() => out.push_str(&format!("\\x{:02x}", c as u32)),
                c if is_hidden(c) && (c as u32) <= 0xffff => out.push_str(&format!("\\u{:04x}", c as u32)),
                c if is_hidden(c) => out.push_str(&format!("\\U{:08x}", c as u32)),
                c => out.push(c),
            }
        }
        out.push('\'');
        return out;
    }
    format!("'{}'", s.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::quote;

    #[test]
    fn words_are_quoted_only_when_needed() {
        assert_eq!(quote("r1:tool:ab"), "r1:tool:ab");
        assert_eq!(quote("it's"), r"'it'\''s'");
        assert_eq!(quote(""), "''");
        assert_eq!(quote("a\u{1b}[2J\n'b"), r"$'a\x1b[2J\n\'b'");
    }

    #[test]
    fn format_characters_are_escaped_never_raw() {
        // A bidi override and a zero-width space: without escapes, `r1:tool:ab` and this key
        // would look alike.
        assert_eq!(quote("r1:tool:\u{202e}ab\u{200b}"), r"$'r1:tool:\u202eab\u200b'");
        assert_eq!(quote("k\u{e0041}"), r"$'k\U000e0041'");
        assert!(super::is_hidden('\u{feff}'));
        assert!(!super::is_hidden('é'));
    }
}
