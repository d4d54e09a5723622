//! The commands of the `effect-tool` CLI as the core's messages quote them to a person.
//!
//! The core's refusals and errors tell a person what to run next (a decision's refusal, a
//! recorded output that no longer decodes); the core cannot depend on the CLI crate, so the
//! command lines are written here, once, and the decisions only call for them.

/// The commands that resolve (or, with `amend`, amend) `key`, for messages to a person: one
/// for "the effect happened, with this output", one for "it did not happen".
pub(crate) fn resolve_commands(key: &str, amend: bool) -> String {
    let k = super::shell::quote(key);
    let flag = if amend { " --amend" } else { "" };
    format!(
        "`effect-tool resolve {k} --applied --output '<json>'{flag}` (the output the tool returns) or `effect-tool resolve {k} --not-applied{flag}` (the effect did not happen: the next call applies it)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_quote_keys_for_the_shell() {
        assert!(resolve_commands("run-1:send:ab12", true).contains("resolve run-1:send:ab12 --applied"));
        assert!(resolve_commands("it's a key", false).contains(r"resolve 'it'\''s a key' --not-applied`"));
    }
}
