//! Commands printed for people to paste into a shell (in errors and the CLI's output).

/// `s` quoted as one word for a POSIX shell, so a printed command can be pasted as is: as it
/// is when that is safe, single-quoted otherwise, and with ANSI-C quoting (`$'...'`, bash and
/// zsh) when it holds control characters, so that they are written as escapes, never raw.
pub fn quote(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:/@+=,%".contains(&b))
    {
        return s.to_owned();
    }
    if s.chars().any(char::is_control) {
        let mut out = String::from("$'");
        for c in s.chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                '\'' => out.push_str("\\'"),
                '\n' => out.push_str("\\n"),
                '\t' => out.push_str("\\t"),
                c if c.is_control() && c.is_ascii() => out.push_str(&format!("\\x{:02x}", c as u32)),
                c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
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
}
