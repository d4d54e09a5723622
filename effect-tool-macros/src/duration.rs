//! Durations as declarations write them (`"30s"`, `"500ms"`, `"1h30m"`).
//!
//! This file uses nothing but `std`, so that the fuzz target `duration` (`fuzz/`) can include
//! it by path: a proc-macro crate's functions cannot be called from another crate.

/// Parse a duration such as `"30s"`, `"500ms"`, `"24h"` or `"1h30m"` into milliseconds.
pub fn parse_duration(text: &str) -> Result<u64, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("the duration is empty".to_owned());
    }
    let mut total: u64 = 0;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(format!("expected a number at `{rest}`"));
        }
        let number: u64 = rest[..digits]
            .parse()
            .map_err(|_| "the number is too large".to_owned())?;
        rest = &rest[digits..];
        if rest.starts_with(char::is_whitespace) {
            return Err(format!("a space after `{number}`"));
        }
        let unit_len = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let factor = match unit {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            "" => return Err(format!("`{number}` has no unit")),
            other => return Err(format!("unknown unit `{other}`")),
        };
        total = number
            .checked_mul(factor)
            .and_then(|ms| total.checked_add(ms))
            .ok_or_else(|| "the duration is too large".to_owned())?;
    }
    Ok(total)
}
