//! The compile-time checks of `#[tool]`, as the user sees them: every `tests/ui/<topic>/*.rs`
//! must fail with the `.stderr` beside it (each read by a person: the message says what to
//! write), and every `tests/ui/pass/*.rs` must compile and run.
//!
//! Re-bless after an intended change of messages: `TRYBUILD=overwrite cargo test --test macro_ui`,
//! then read the diff of every `.stderr`.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    for topic in [
        "missing-effect",
        "unknown-attribute",
        "conflict",
        "key",
        "types",
        "async",
        "duration",
        "hooks",
        "name",
    ] {
        t.compile_fail(format!("tests/ui/{topic}/*.rs"));
    }
    t.pass("tests/ui/pass/*.rs");
}
