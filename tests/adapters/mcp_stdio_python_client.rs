//! The MCP server, tested by an external client: the official Python `mcp` SDK launches
//! `examples/mcp_server.rs` over stdio, lists its tools (schemas, annotations per class) and
//! calls an idempotent tool twice, counting effects in a ledger file the server's tools append
//! to (see `tests/mcp_client/client.py`). With the example's TRACE log on, no tool argument may
//! reach the log (rmcp logs whole requests at DEBUG and TRACE, which the example's filter
//! keeps at INFO).
//!
//! Needs `python3 -m pip install -r tests/mcp_client/requirements.txt` (scripts/test.sh does it).

#![cfg(feature = "mcp")]

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::python::{client_passed, client_script, python, require_sdk};

/// `target/<profile>/examples/mcp_server`, built by `cargo test` with the `mcp` feature.
fn example_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("the test binary lives in target/<profile>/deps");
    let bin = profile_dir
        .join("examples")
        .join(format!("mcp_server{}", std::env::consts::EXE_SUFFIX));
    assert!(
        bin.exists(),
        "{} is missing: build it with `cargo build --example mcp_server --features mcp` (cargo test --all-features builds it)",
        bin.display()
    );
    bin
}

#[test]
fn mcp_python_client_lists_tools_and_calls_an_idempotent_tool_twice_with_one_effect() {
    let python = python();
    require_sdk(&python, "import mcp", "the Python MCP SDK");

    let dir = tempfile::tempdir().unwrap();
    let ledger = dir.path().join("ledger.txt");
    let script = client_script("client.py");
    let out = Command::new(&python)
        .arg(&script)
        .arg(example_binary())
        .env("EFFECT_TOOL_LEDGER", &ledger)
        .env("EFFECT_TOOL_DB", dir.path().join("journal.db"))
        .env_remove("EFFECT_TOOL_RUN_ID")
        .output()
        .expect("python3 runs");
    let stdout = client_passed(&out);
    assert!(
        stdout.contains("issue_refund called twice, one refund in the ledger"),
        "{stdout}"
    );

    // Checked here too, independently of the client: two runs, one refund each; one email.
    let text = std::fs::read_to_string(&ledger).unwrap();
    let refunds = text.lines().filter(|l| l.starts_with("refund ")).count();
    let emails = text.lines().filter(|l| l.starts_with("email ")).count();
    assert_eq!((refunds, emails), (2, 1), "ledger:\n{text}");
}

/// client.py against the example, logging to `log` (with `RUST_LOG` = `filter`, if given), one
/// email carrying `probe`. The client's output (standard output and error, which has the
/// server's standard error too).
fn run_with_log(dir: &Path, log: &Path, probe: &str, filter: Option<&str>) -> String {
    let python = python();
    require_sdk(&python, "import mcp", "the Python MCP SDK");
    let mut command = Command::new(&python);
    command
        .arg(client_script("client.py"))
        .arg(example_binary())
        .env("EFFECT_TOOL_LEDGER", dir.join("ledger.txt"))
        .env("EFFECT_TOOL_DB", dir.join("journal.db"))
        .env("EFFECT_TOOL_MCP_LOG", log)
        .env("EFFECT_TOOL_SECRET_PROBE", probe)
        .env_remove("EFFECT_TOOL_RUN_ID");
    match filter {
        Some(f) => command.env("RUST_LOG", f),
        None => command.env_remove("RUST_LOG"),
    };
    let out = command.output().expect("python3 runs");
    let stdout = client_passed(&out);
    assert!(
        stdout.contains("sent an email whose arguments hold the probe value"),
        "{stdout}"
    );
    // A tool with a `#[secret]` argument runs over MCP: the server gives the value.
    assert!(
        stdout.contains("charge_card ran with the server's key and a card number in its arguments"),
        "{stdout}"
    );
    format!("{stdout}\n{}", String::from_utf8_lossy(&out.stderr))
}

#[test]
fn with_the_examples_trace_log_on_no_tool_argument_reaches_any_log() {
    let probe = format!("PROBE-{:08x}-{}", std::process::id(), "k9Xq2vLm7Rt4");
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("server.log");
    let output = run_with_log(dir.path(), &log, &probe, None);
    let text = std::fs::read_to_string(&log).expect("the server wrote its log");
    // The log is on, at TRACE for effect-tool and INFO for rmcp ...
    assert!(
        text.contains("MCP tools/call"),
        "effect-tool's DEBUG lines are missing:\n{text}"
    );
    assert!(
        text.contains("Service initialized as server"),
        "rmcp's INFO lines are missing:\n{text}"
    );
    // ... and the probe is in no log line, nor in anything the server printed.
    assert!(!text.contains(&probe), "the log holds a tool argument:\n{text}");
    assert!(!output.contains(&probe), "the output holds a tool argument:\n{output}");
    // The probe was sent: it is in the ledger (the world), as the email's body.
    let ledger = std::fs::read_to_string(dir.path().join("ledger.txt")).unwrap();
    assert!(ledger.contains(&probe), "ledger:\n{ledger}");

    // Without the filter, rmcp logs the arguments: the email's body is there ...
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("server.log");
    let output = run_with_log(dir.path(), &log, &probe, Some("trace"));
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains(&probe),
        "rmcp at TRACE no longer logs tool arguments: the filter may be unnecessary; log:\n{text}"
    );
    // ... but never a `#[sensitive]` one: the card number is sealed before rmcp sees it.
    let card = format!("4111{probe}");
    assert!(text.contains("charge_card"), "{text}");
    assert!(text.contains("effect-tool/sealed"), "{text}");
    assert!(
        !text.contains(&card),
        "the card number reached the log at TRACE:\n{text}"
    );
    assert!(!output.contains(&card), "the card number reached the output:\n{output}");
}
