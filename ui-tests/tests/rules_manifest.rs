//! A team's rules where a team states them, in its crate's `Cargo.toml`, end to end: a crate
//! of its own, built by a real cargo, its manifest edited between builds. Proves that the rules
//! are read from `[package.metadata.effect-tool.rules]`, that cargo expands the declarations
//! again when the manifest or `EFFECT_TOOL_RULES` changes (a build that passed is not reused
//! after the rules changed: the generated code names both as inputs), and that a misspelt table
//! is an error, not rules silently off.

use std::path::{Path, PathBuf};
use std::process::Command;

const LIB: &str = r#"
/// Send an email.
#[effect_tool::tool(effect = "irreversible", key(message_id))]
pub async fn send_email(message_id: String) -> Result<String, effect_tool::ToolError> {
    Ok(message_id)
}
"#;

/// The probe crate's manifest, with `rules` as its `[package.metadata.effect-tool...]` part.
fn manifest(rules: &str) -> String {
    let facade = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .display()
        .to_string();
    format!(
        r#"[package]
name = "rules-manifest-probe"
version = "0.0.0"
edition = "2024"
publish = false

[workspace]

[dependencies]
effect-tool = {{ path = "{facade}", default-features = false }}

{rules}
"#
    )
}

struct Probe {
    dir: PathBuf,
}

impl Probe {
    fn new() -> Probe {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("rules-manifest-probe");
        std::fs::create_dir_all(dir.join("src")).unwrap();
        std::fs::write(dir.join("src/lib.rs"), LIB).unwrap();
        // The workspace's lock file, so the probe builds offline with the same versions.
        let lock = Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.lock");
        std::fs::copy(lock, dir.join("Cargo.lock")).unwrap();
        Probe { dir }
    }

    fn rules(&self, rules: &str) {
        std::fs::write(self.dir.join("Cargo.toml"), manifest(rules)).unwrap();
    }

    /// `cargo check` of the probe: whether it passed, and what it printed.
    fn check(&self, rules_env: Option<&str>) -> (bool, String) {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.args(["check", "--offline", "--message-format=short"])
            .current_dir(&self.dir)
            .env("CARGO_TARGET_DIR", self.dir.join("target"))
            .env_remove("EFFECT_TOOL_RULES");
        if let Some(path) = rules_env {
            cmd.env("EFFECT_TOOL_RULES", path);
        }
        let out = cmd.output().unwrap();
        (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

#[test]
fn rules_in_the_manifest_are_checked_and_followed_when_they_change() {
    let probe = Probe::new();

    probe.rules("");
    let (ok, out) = probe.check(None);
    assert!(ok, "no rules: the declaration compiles\n{out}");

    // The build above passed and nothing in `src/` changed: only the manifest's rules did.
    probe.rules("[package.metadata.effect-tool.rules]\nnon-pure-needs-timeout = true\n");
    let (ok, out) = probe.check(None);
    assert!(!ok, "a rule added to the manifest is checked at the next build\n{out}");
    assert!(out.contains("irreversible tool `send_email` has no `timeout`"), "{out}");
    assert!(
        out.contains(
            "rule `non-pure-needs-timeout` in `[package.metadata.effect-tool.rules]` of this crate's Cargo.toml"
        ),
        "the error says which rule and where it is stated\n{out}"
    );

    probe.rules("[package.metadata.effect-tool.rules]\nnon-pure-needs-timeout = false\n");
    let (ok, out) = probe.check(None);
    assert!(ok, "a rule turned off\n{out}");

    // After a passing build, the variable naming a rules file (relative to the crate).
    std::fs::write(
        probe.dir.join("strict.toml"),
        "irreversible-needs-approval-or-recover = true\n",
    )
    .unwrap();
    let (ok, out) = probe.check(Some("strict.toml"));
    assert!(!ok, "EFFECT_TOOL_RULES set: its rules are checked\n{out}");
    assert!(
        out.contains(
            "rule `irreversible-needs-approval-or-recover` in the rules file `strict.toml` (EFFECT_TOOL_RULES)"
        ),
        "{out}"
    );
    let (ok, out) = probe.check(None);
    assert!(ok, "EFFECT_TOOL_RULES unset: the manifest's rules again\n{out}");

    probe.rules("[package.metadata.effect-tool.rule]\nnon-pure-needs-timeout = true\n");
    let (ok, out) = probe.check(None);
    assert!(!ok, "a misspelt table is an error, not rules silently off\n{out}");
    assert!(
        out.contains("did you mean `[package.metadata.effect-tool.rules]`?"),
        "{out}"
    );
}
