//! The MCP server, tested by an external client: the official Python `mcp` SDK launches
//! `examples/mcp_server.rs` over stdio, lists its tools (schemas, annotations per class) and
//! calls an idempotent tool twice, counting effects in a ledger file the server's tools append
//! to (see `tests/mcp_client/client.py`).
//!
//! Needs `python3 -m pip install -r tests/mcp_client/requirements.txt` (scripts/test.sh does it).

#![cfg(feature = "mcp")]

mod common;

use std::path::PathBuf;
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
