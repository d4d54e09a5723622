//! Writing a command's answer and naming who acts: the helpers every command shares.

use std::io::Write;

use serde_json::Value;

use crate::error::CliError;

/// Write `text` to `out`; a closed pipe is [`CliError::OutputClosed`].
pub fn write(out: &mut dyn Write, text: &str) -> Result<(), CliError> {
    out.write_all(text.as_bytes()).map_err(io_error)
}

/// Write `value` as pretty JSON and a newline.
pub fn write_json(out: &mut dyn Write, value: &Value) -> Result<(), CliError> {
    let text = serde_json::to_string_pretty(value).map_err(|e| CliError::Store(format!("cannot encode JSON: {e}")))?;
    write(out, &text)?;
    write(out, "\n")
}

/// A write error as the CLI reports it.
pub fn io_error(e: std::io::Error) -> CliError {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        CliError::OutputClosed
    } else {
        CliError::Store(format!("cannot write the output: {e}"))
    }
}

/// Who decides: `--by` (or `$USER`), never empty.
pub fn who(by: Option<String>) -> Result<String, CliError> {
    match by.map(|b| b.trim().to_owned()) {
        Some(b) if !b.is_empty() => Ok(b),
        _ => Err(CliError::Usage(
            "say who decides: --by NAME (it goes into the audit trail; defaults to $USER, which is not set)".into(),
        )),
    }
}
