//! The compile-time checks of `#[tool]`, as the user sees them: every `tests/ui/<topic>/*.rs`
//! must fail with the `.stderr` beside it (each read by a person: the message says what to
//! write), and every `tests/ui/pass/*.rs` must compile and run.
//!
//! Re-bless after an intended change of messages: `TRYBUILD=overwrite cargo test --test macro_ui`,
//! then read the diff of every `.stderr`.

/// The macro's own messages, and rustc's errors at the user's tokens (unknown field in a key
/// closure, a closure of the wrong type, a missing hook): the same whatever features are on.
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
    ] {
        t.compile_fail(format!("tests/ui/{topic}/*.rs"));
    }
    t.pass("tests/ui/pass/*.rs");
}

/// Unmet trait bounds (an argument or output without serde/schemars impls, an error type that
/// does not classify, a return type that is not a `Result`). rustc names the traits and types in
/// these messages by their shortest visible path, which depends on the crates linked (with the
/// `rig` feature, serde's traits print as `effect_tool::rig::rig_core::serde::Serialize`), so the
/// `.stderr` files are blessed with the default features and checked with them.
#[test]
#[cfg_attr(
    any(feature = "postgres", feature = "mcp", feature = "rig", feature = "testing"),
    ignore = "the .stderr files of tests/ui/trait-bounds are blessed with the default features: run `cargo test --test macro_ui`"
)]
fn ui_trait_bounds() {
    trybuild::TestCases::new().compile_fail("tests/ui/trait-bounds/*.rs");
}

/// Hooks of the wrong shape (`recover`, `compensate`, a `#[tools]` method hook): rustc's
/// expected/found signatures name the argument, output and error types by their shortest
/// visible path (`String` or `std::string::String`), which depends on the crates linked, so
/// these `.stderr` files too are blessed with the default features and checked with them.
#[test]
#[cfg_attr(
    any(feature = "postgres", feature = "mcp", feature = "rig", feature = "testing"),
    ignore = "the .stderr files of tests/ui/hook-signatures are blessed with the default features: run `cargo test --test macro_ui`"
)]
fn ui_hook_signatures() {
    trybuild::TestCases::new().compile_fail("tests/ui/hook-signatures/*.rs");
}
