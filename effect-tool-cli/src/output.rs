//! Printing for people: tables, times, escaping of untrusted text, shell quoting.

use std::io::{self, Write};

/// `s` safe to print on a terminal: control characters (a newline in a key, an escape
/// sequence in a reason written by a tool) and format characters (a bidi override or a
/// zero-width space that makes one key look like another) are shown escaped instead of acting
/// on the terminal, hiding themselves or breaking a table.
pub fn clean(s: &str) -> String {
    use effect_tool_core::__cli::is_hidden;
    if !s.chars().any(is_hidden) {
        return s.to_owned();
    }
    s.chars()
        .map(|c| {
            if is_hidden(c) {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// `s` quoted for a POSIX shell, so a printed command can be pasted as is (the same quoting
/// as the commands in the journal's own messages).
pub use effect_tool_core::__cli::quote as shell_quote;

/// Milliseconds since the Unix epoch as `YYYY-MM-DD HH:MM:SSZ` (UTC).
pub fn time(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to a proleptic Gregorian date (H. Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// A plain-text table: a header row and left-aligned columns separated by two spaces. The last
/// column is not padded (it holds the long keys).
pub struct Table {
    header: Vec<&'static str>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column names.
    pub fn new(header: Vec<&'static str>) -> Self {
        Table {
            header,
            rows: Vec::new(),
        }
    }

    /// Add a row (cells are cleaned of control characters).
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells.iter().map(|c| clean(c)).collect());
    }

    /// Write the table.
    pub fn write(&self, out: &mut dyn Write) -> io::Result<()> {
        let n = self.header.len();
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate().take(n) {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
        let line = |out: &mut dyn Write, cells: &mut dyn Iterator<Item = &str>| -> io::Result<()> {
            let mut text = String::new();
            for (i, cell) in cells.enumerate() {
                if i + 1 < n {
                    text.push_str(cell);
                    text.extend(std::iter::repeat_n(' ', widths[i] - cell.chars().count() + 2));
                } else {
                    text.push_str(cell);
                }
            }
            writeln!(out, "{}", text.trim_end())
        };
        line(out, &mut self.header.iter().copied())?;
        for row in &self.rows {
            line(out, &mut row.iter().map(String::as_str))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times() {
        assert_eq!(time(0), "1970-01-01 00:00:00Z");
        assert_eq!(time(951_782_400_000), "2000-02-29 00:00:00Z");
        assert_eq!(time(1_796_031_840_123), "2026-11-30 09:44:00Z");
        assert_eq!(time(-1000), "1969-12-31 23:59:59Z");
    }

    #[test]
    fn cleaning() {
        assert_eq!(clean("a\nb\u{1b}[2J"), "a\\nb\\u{1b}[2J");
        // Format characters: `r1:k` and `r1:\u{202e}k\u{200b}` must not print alike.
        assert_eq!(clean("r1:\u{202e}k\u{200b}"), "r1:\\u{202e}k\\u{200b}");
        assert_eq!(clean("plain"), "plain");
    }

    #[test]
    fn table_layout() {
        let mut t = Table::new(vec!["A", "BB", "KEY"]);
        t.row(vec!["xxx".into(), "y".into(), "k1".into()]);
        let mut out = Vec::new();
        t.write(&mut out).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "A    BB  KEY\nxxx  y   k1\n");
    }
}
