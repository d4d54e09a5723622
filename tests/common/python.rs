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

/// [`require_sdk`] for the Streamable HTTP client, which the HTTP tests' scripts use.
pub fn require_http_client(python: &str) {
    require_sdk(
        python,
        "from mcp.client.streamable_http import streamable_http_client",
        "the Python MCP SDK (with its Streamable HTTP client)",
    );
}

/// Run the client script `script` of `tests/mcp_client` with `args`; what it wrote and how it
/// ended (it is killed if the test is dropped first). Check it with [`client_passed`].
pub async fn run_client<I, S>(python: &str, script: &str, args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    tokio::process::Command::new(python)
        .arg(client_script(script))
        .args(args)
        .kill_on_drop(true)
        .output()
        .await
        .expect("python3 runs")
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

/// `target/<profile>/examples/<name>`, built by `cargo test --all-features` (or
/// `cargo build --example <name> --features <its features>`, which the message says).
#[allow(dead_code)]
pub fn example_binary(name: &str, features: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("the test binary lives in target/<profile>/deps");
    let bin = profile_dir
        .join("examples")
        .join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    assert!(
        bin.exists(),
        "{} is missing: build it with `cargo build --example {name} --features {features}` (cargo test --all-features builds it)",
        bin.display()
    );
    bin
}
