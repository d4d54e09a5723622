//! A team's rules (`[package.metadata.effect-tool.rules]`), as the team sees them: every
//! `tests/ui/rules/*.rs` must fail against `tests/rules/team.toml` with the `.stderr` beside it,
//! each `tests/ui/rules-config/*.rs` against the rules file of its name, and
//! `tests/ui/rules-pass/*.rs` must compile and run.
//!
//! trybuild builds the cases in a crate whose Cargo.toml it writes, so the rules cannot be in
//! a manifest here: `EFFECT_TOOL_RULES` names the rules file instead (the same keys, at the top
//! level), as a team's own trybuild tests of its rules do. One batch per rules file, in turn;
//! cargo builds a case again when the variable or the file changes (the generated code names
//! both), so batches do not see each other's rules.
//!
//! A binary of its own: the variable reaches every cargo trybuild starts, and the cases of
//! `macro_ui.rs` must be built without rules.
//!
//! Re-bless after an intended change of messages:
//! `TRYBUILD=overwrite cargo test -p effect-tool-ui-tests --test rules_ui`, then read the diff.

fn with_rules(file: &str, run: impl FnOnce(&trybuild::TestCases)) {
    let path = format!("{}/tests/rules/{file}", env!("CARGO_MANIFEST_DIR"));
    // SAFETY: the only test of this binary, and nothing else reads the environment meanwhile;
    // the cargo trybuild starts inherits the variable.
    unsafe { std::env::set_var("EFFECT_TOOL_RULES", &path) };
    let t = trybuild::TestCases::new();
    run(&t);
    // trybuild builds and checks the cases when `t` is dropped, with the variable still set.
    drop(t);
}

#[test]
fn rules() {
    with_rules("team.toml", |t| {
        t.compile_fail("tests/ui/rules/*.rs");
        t.pass("tests/ui/rules-pass/*.rs");
    });
    with_rules("misspelt.toml", |t| {
        t.compile_fail("tests/ui/rules-config/misspelt_rule.rs")
    });
    with_rules("not_a_flag.toml", |t| {
        t.compile_fail("tests/ui/rules-config/rule_not_a_flag.rs")
    });
    with_rules("no_roles.toml", |t| t.compile_fail("tests/ui/rules-config/no_roles.rs"));
}
