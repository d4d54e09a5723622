//! Reading a crate's rules, strictly: an unknown rule (with the nearest one suggested), a value
//! of the wrong type or an empty list of roles is an error, never ignored.

use std::path::{Path, PathBuf};

use super::{RULES_ENV, Rules, Source, Team};
use crate::symbol::{self, RULE_NAMES, RULES};

/// Why a crate's rules cannot be read: reported at every declaration until fixed.
pub struct Invalid {
    pub msg: String,
    pub help: String,
}

fn invalid(msg: impl Into<String>, help: impl Into<String>) -> Invalid {
    Invalid {
        msg: msg.into(),
        help: help.into(),
    }
}

/// The crate's rules: from the file `EFFECT_TOOL_RULES` names when cargo was asked to build
/// this crate, else from its manifest. No rules (and nothing tracked) outside cargo.
pub fn team() -> Team {
    let Some(dir) = std::env::var_os("CARGO_MANIFEST_DIR").map(PathBuf::from) else {
        return Team {
            rules: Ok(None),
            files: Vec::new(),
        };
    };
    let manifest = dir.join("Cargo.toml");
    let mut files = vec![manifest.clone()];
    let primary = std::env::var_os("CARGO_PRIMARY_PACKAGE").is_some();
    let rules = match std::env::var(RULES_ENV) {
        Ok(path) if primary && !path.trim().is_empty() => {
            let full = dir.join(&path);
            files.push(full.clone());
            from_file(&full, path)
        }
        _ => from_manifest(&manifest),
    };
    files.retain(|f| f.is_file());
    Team { rules, files }
}

/// `[package.metadata.effect-tool.rules]` of the manifest, if any.
fn from_manifest(manifest: &Path) -> Result<Option<Rules>, Invalid> {
    // No manifest to read (not a cargo build): no rules. Cargo itself rejects a manifest it
    // cannot read or parse, so the errors below are for completeness.
    let Ok(text) = std::fs::read_to_string(manifest) else {
        return Ok(None);
    };
    let doc: toml::Table = text.parse().map_err(|e| {
        invalid(
            format!("this crate's Cargo.toml cannot be read for its rules: {e}"),
            "fix the manifest",
        )
    })?;
    let Some(ours) = doc
        .get("package")
        .and_then(|p| p.get("metadata"))
        .and_then(|m| m.get("effect-tool"))
    else {
        return Ok(None);
    };
    let Some(ours) = ours.as_table() else {
        return Err(invalid(
            "`package.metadata.effect-tool` of this crate's Cargo.toml is not a table",
            "state the rules as `[package.metadata.effect-tool.rules]`, one `rule = value` a line",
        ));
    };
    // A misspelt `rules` table would silently state nothing. (Other keys of this table are
    // other tools' settings.)
    for key in ours.keys() {
        if key != RULES && symbol::nearest(key, &[RULES]).is_some() {
            return Err(invalid(
                format!("`[package.metadata.effect-tool.{key}]` of this crate's Cargo.toml is not read"),
                format!("did you mean `[package.metadata.effect-tool.{RULES}]`?"),
            ));
        }
    }
    let Some(table) = ours.get(RULES) else {
        return Ok(None);
    };
    let Some(table) = table.as_table() else {
        return Err(invalid(
            "`package.metadata.effect-tool.rules` of this crate's Cargo.toml is not a table",
            "state the rules as `[package.metadata.effect-tool.rules]`, one `rule = value` a line",
        ));
    };
    parse(table, Source::Manifest).map(Some)
}

/// A rules file: the rules at its top level.
fn from_file(path: &Path, written: String) -> Result<Option<Rules>, Invalid> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        invalid(
            format!("{RULES_ENV} names `{written}`, which cannot be read: {e}"),
            format!("name a TOML file of rules (relative to the crate's directory), or unset {RULES_ENV} to use `[package.metadata.effect-tool.rules]` of Cargo.toml"),
        )
    })?;
    let table: toml::Table = text.parse().map_err(|e| {
        invalid(
            format!("the rules file `{written}` ({RULES_ENV}) is not TOML: {e}"),
            "write one `rule = value` a line, e.g. `non-pure-needs-timeout = true`",
        )
    })?;
    parse(&table, Source::File(written)).map(Some)
}

/// The rules of one table, every key checked.
fn parse(table: &toml::Table, source: Source) -> Result<Rules, Invalid> {
    let mut rules = Rules::default();
    for (key, value) in table {
        match key.as_str() {
            symbol::IRREVERSIBLE_NEEDS_APPROVAL_OR_RECOVER => {
                rules.irreversible_needs_approval_or_recover = flag(key, value, &source)?;
            }
            symbol::IDEMPOTENT_NEEDS_KEY => rules.idempotent_needs_key = flag(key, value, &source)?,
            symbol::CROSS_RUN_NEEDS_CUSTOM_KEY => rules.cross_run_needs_custom_key = flag(key, value, &source)?,
            symbol::NON_PURE_NEEDS_TIMEOUT => rules.non_pure_needs_timeout = flag(key, value, &source)?,
            symbol::APPROVAL_ROLES => rules.approval_roles = Some(roles(value, &source)?),
            other => {
                let help = match symbol::nearest(other, RULE_NAMES) {
                    Some(near) => format!("did you mean `{near}`? The rules are {}", symbol::list(RULE_NAMES)),
                    None => format!("the rules are {}", symbol::list(RULE_NAMES)),
                };
                return Err(invalid(format!("unknown rule `{other}` in {source}"), help));
            }
        }
    }
    rules.source = source;
    Ok(rules)
}

/// What a TOML value is, for messages: `a string`, `an integer`, ...
fn kind(value: &toml::Value) -> String {
    let t = value.type_str();
    let article = if t.starts_with(['a', 'e', 'i', 'o', 'u']) {
        "an"
    } else {
        "a"
    };
    format!("{article} {t}")
}

/// A rule that is on or off.
fn flag(key: &str, value: &toml::Value, source: &Source) -> Result<bool, Invalid> {
    value.as_bool().ok_or_else(|| {
        invalid(
            format!("rule `{key}` in {source} is {}, not `true` or `false`", kind(value)),
            format!("write `{key} = true` (or `false`)"),
        )
    })
}

/// `approval-roles = ["finance", ...]`: at least one role, none empty.
fn roles(value: &toml::Value, source: &Source) -> Result<Vec<String>, Invalid> {
    let key = symbol::APPROVAL_ROLES;
    let help = format!("list the roles a tool may name in `approval = \"...\"`: `{key} = [\"finance\", \"support\"]`");
    let Some(items) = value.as_array() else {
        return Err(invalid(
            format!("rule `{key}` in {source} is {}, not a list of roles", kind(value)),
            help,
        ));
    };
    let mut roles = Vec::new();
    for item in items {
        match item.as_str() {
            Some(role) if !role.trim().is_empty() => roles.push(role.to_owned()),
            Some(_) => return Err(invalid(format!("rule `{key}` in {source} lists an empty role"), help)),
            None => {
                let what = kind(item);
                return Err(invalid(
                    format!("rule `{key}` in {source} lists {what}, not a role"),
                    help,
                ));
            }
        }
    }
    if roles.is_empty() {
        return Err(invalid(
            format!("rule `{key}` in {source} lists no role, so no tool could name one"),
            format!("{help}, or remove `{key}` to let a tool name any role"),
        ));
    }
    Ok(roles)
}

#[cfg(test)]
mod tests {
    use super::{Source, parse};

    fn rules(text: &str) -> Result<super::Rules, String> {
        let table: toml::Table = text.parse().unwrap();
        parse(&table, Source::Manifest).map_err(|e| format!("{} / {}", e.msg, e.help))
    }

    #[test]
    fn every_rule_is_read() {
        let r = rules(
            "irreversible-needs-approval-or-recover = true\nidempotent-needs-key = true\n\
             cross-run-needs-custom-key = true\nnon-pure-needs-timeout = false\n\
             approval-roles = [\"finance\", \"support\"]",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(r.irreversible_needs_approval_or_recover && r.idempotent_needs_key && r.cross_run_needs_custom_key);
        assert!(!r.non_pure_needs_timeout);
        assert_eq!(
            r.approval_roles.as_deref(),
            Some(&["finance".to_owned(), "support".to_owned()][..])
        );
        let none = rules("").unwrap_or_else(|e| panic!("{e}"));
        assert!(!none.irreversible_needs_approval_or_recover && none.approval_roles.is_none());
    }

    #[test]
    fn mistakes_are_errors() {
        let err = |text: &str| rules(text).err().unwrap_or_else(|| panic!("accepted: {text}"));
        assert!(err("idempotent-needs-keys = true").contains("did you mean `idempotent-needs-key`?"));
        assert!(err("IDEMPOTENT-NEEDS-KEY = true").contains("unknown rule"));
        assert!(err("non-pure-needs-timeout = 1").contains("is an integer, not `true` or `false`"));
        assert!(err("approval-roles = \"finance\"").contains("not a list of roles"));
        assert!(err("approval-roles = []").contains("lists no role"));
        assert!(err("approval-roles = [\"\"]").contains("an empty role"));
        assert!(err("approval-roles = [1]").contains("lists an integer"));
    }
}
