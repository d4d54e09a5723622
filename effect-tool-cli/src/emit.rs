//! Writing a command's answer: the helpers every command shares.

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
