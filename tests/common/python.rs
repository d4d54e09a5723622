//! The Python MCP client of `tests/mcp_client`: finding Python, checking its SDK is installed,
//! and reading what a client script reported.

use std::path::PathBuf;
use std::process::{Command, Output};

/// The Python interpreter to run the clients with: `$PYTHON`, else `python3`.
pub fn python() -> String {
    std::env::var("PYTHON").unwrap_or_else(|_| "python3".to_owned())
}

/// Fail the test, saying how to install the client's requirements, unless `python` can run
/// `import` (the import of the Python MCP SDK part the client needs, named `what`).
pub fn require_sdk(python: &str, import: &str, what: &str) {
    let has_sdk = Command::new(python).args(["-c", import]).status();
    assert!(
        matches!(has_sdk, Ok(s) if s.success()),
        "{what} is missing: run `{python} -m pip install -r tests/mcp_client/requirements.txt`"
    );
}

/// The path of the client script `name` in `tests/mcp_client`.
pub fn client_script(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/mcp_client")
        .join(name)
}

/// The standard output of a client run, after checking the run succeeded and reported every
/// check passed (" passed, 0 failed"); a failure shows both of its outputs.
pub fn client_passed(out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the Python client failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(stdout.contains(" passed, 0 failed"), "{stdout}");
    stdout
}
