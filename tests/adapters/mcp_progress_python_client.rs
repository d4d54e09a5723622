//! Progress over MCP, tested by an external client: the official Python `mcp` SDK launches
//! `examples/deploy_stream.rs serve` over stdio and calls its streaming `deploy` tool twice
//! with a progress callback (see `tests/mcp_client/progress.py`): the first call delivers one
//! `notifications/progress` per step and returns the last step; the second, the same key, is a
//! replay that sends no progress and returns the recorded last step. The steps are counted in a
//! ledger file the tool appends to, which the engine never reads.
//!
//! Needs `python3 -m pip install -r tests/mcp_client/requirements.txt` (scripts/test.sh does it).

#![cfg(feature = "mcp")]

use crate::common;

use std::process::Command;

use common::python::{client_passed, client_script, example_binary, python, require_sdk};

#[test]
fn a_streaming_tool_sends_progress_to_an_mcp_client_and_a_replay_sends_none() {
    let python = python();
    require_sdk(&python, "import mcp", "the Python MCP SDK");
    let dir = tempfile::tempdir().unwrap();
    let ledger = dir.path().join("ledger.txt");
    let out = Command::new(&python)
        .arg(client_script("progress.py"))
        .arg(example_binary("deploy_stream", "mcp"))
        .arg("serve")
        .env("EFFECT_TOOL_LEDGER", &ledger)
        .output()
        .expect("python3 runs");
    let stdout = client_passed(&out);
    assert!(
        stdout.contains("deploy streamed 3 progress notifications and returned the last step"),
        "{stdout}"
    );
    assert!(stdout.contains("the same deploy again is a replay"), "{stdout}");

    // Checked here too, independently of the client: three steps, made once.
    let text = std::fs::read_to_string(&ledger).unwrap();
    assert_eq!(
        text.lines().collect::<Vec<_>>(),
        [
            "step billing 1.4.2 built",
            "step billing 1.4.2 pushed",
            "step billing 1.4.2 live"
        ],
        "ledger:\n{text}"
    );
}
