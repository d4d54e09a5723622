//! The CLI's errors and the exit code each maps to.

use std::fmt;

use effect_tool_core::StoreError;
use effect_tool_core::decide::record::Rejected;

/// Success.
pub const EXIT_OK: u8 = 0;
/// The record was not found, or the journal refused the operation (wrong state, wrong role).
pub const EXIT_REFUSED: u8 = 1;
/// Bad usage or bad input: unknown option, invalid JSON, missing `--store`.
pub const EXIT_USAGE: u8 = 2;
/// The journal store is unreachable or failed (cannot open the file, cannot connect, query
/// failed, unreadable record).
pub const EXIT_STORE: u8 = 3;

/// Why a command failed. Each variant is one line for a person and an exit code for a script.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CliError {
    /// Bad usage or bad input (exit 2).
    Usage(String),
    /// No record under the key (exit 1).
    NotFound(String),
    /// The journal refused the operation (exit 1).
    Refused(String),
    /// The store is unreachable or failed, or the output could not be written (exit 3).
    Store(String),
    /// Whoever read the output went away (`effect-tool list | head`): not an error (exit 0).
    OutputClosed,
}

impl CliError {
    /// The process exit code for this error.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Usage(_) => EXIT_USAGE,
            CliError::NotFound(_) | CliError::Refused(_) => EXIT_REFUSED,
            CliError::Store(_) => EXIT_STORE,
            CliError::OutputClosed => EXIT_OK,
        }
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let msg = match self {
            CliError::Usage(m) | CliError::NotFound(m) | CliError::Refused(m) | CliError::Store(m) => m,
            CliError::OutputClosed => "the output was closed",
        };
        // One line, whatever the underlying error printed.
        f.write_str(&one_line(msg))
    }
}

impl std::error::Error for CliError {}

impl From<StoreError> for CliError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Rejected(Rejected::NotFound { key }) => not_found(&key),
            StoreError::Rejected(r) => CliError::Refused(r.to_string()),
            other => CliError::Store(other.to_string()),
        }
    }
}

/// The error for a key with no record.
pub fn not_found(key: &str) -> CliError {
    CliError::NotFound(format!(
        "no record under key `{}`: check the key (list them with `effect-tool list`) and the store",
        crate::output::clean(key)
    ))
}

/// `msg` with line breaks and tabs folded into spaces.
fn one_line(msg: &str) -> String {
    msg.split(['\n', '\r', '\t'])
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes() {
        assert_eq!(CliError::from(StoreError::Backend("x".into())).exit_code(), EXIT_STORE);
        let nf = CliError::from(StoreError::Rejected(Rejected::NotFound { key: "k".into() }));
        assert_eq!(nf.exit_code(), EXIT_REFUSED);
        assert!(nf.to_string().contains("effect-tool list"));
        assert_eq!(CliError::Usage("a\n  b".into()).to_string(), "a b");
    }
}
