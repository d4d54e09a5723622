//! The compile-time checks of `#[tool]`, as the user sees them: every `tests/ui/<topic>/*.rs`
//! must fail with the `.stderr` beside it (each read by a person: the message says what to
//! write), and every `tests/ui/pass/*.rs` must compile and run.
//!
//! The cases build against `effect-tool` with its default features, as a user's crate does,
//! whatever features the workspace's test run turns on: rustc names traits and types in its
//! messages by their shortest visible path, which depends on the crates linked (with the `rig`
//! feature, serde's traits print as `effect_tool::adapters::rig::rig_core::serde::Serialize`), and the
//! `.stderr` files quote those paths.
//!
//! Re-bless after an intended change of messages:
//! `TRYBUILD=overwrite cargo test -p effect-tool-ui-tests`, then read the diff of every `.stderr`.

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
        "serde",
        "protected",
        "description",
        // `cost(...)`: a cost without a unit, a signed amount, a unit declared twice.
        "cost",
        // Unmet trait bounds: an argument or output without serde/schemars impls, an error type
        // that does not classify, a return type that is not a `Result`.
        "trait-bounds",
        // Hooks of the wrong shape (`recover`, `compensate`, a `#[tools]` method hook).
        "hook-signatures",
        // `assert_declared!` pins that no longer hold, or are written wrong.
        "pins",
        // Paths of earlier releases: they compile, and the deprecated ones say where to go.
        "paths",
        // `to_model = ...` that is not a view of the output.
        "to-model",
        // `stream`: a return type that is not a stream (or a stream without `stream`), with
        // `transactional`, an error type that cannot say the stream was empty.
        "stream",
    ] {
        t.compile_fail(format!("tests/ui/{topic}/*.rs"));
    }
    t.pass("tests/ui/pass/*.rs");
}
