//! Who acts through the command (`approve`, `deny`, `resolve`, `abandon --mark-compensated`):
//! a person named by their CLI token, which
//! the identities file lists by its SHA-256; or, explicitly, the local administrator (the OS
//! user on this host, audited as such); or, deprecated, whoever `--by` names with the role of
//! `--as` believed.

use std::collections::BTreeSet;
use std::path::PathBuf;

use clap::Args;
use effect_tool_core::decide::identity::{Actor, Identities, IdentitySystem};
use effect_tool_core::decide::record::EffectRecord;

use crate::error::CliError;
use crate::output::clean;

/// The variable that holds the person's CLI token (never an option: a command line is visible
/// to every local user).
pub const TOKEN_VAR: &str = "EFFECT_TOOL_TOKEN";

/// How the command knows who acts (global options).
#[derive(Debug, Clone, Default, Args)]
pub struct IdentityArgs {
    /// The identities file (TOML: `[[person]]` tables with `id`, `roles`, `console`, `mcp`,
    /// `cli_tokens`, `os_users`): who is who across the console, MCP and this command, for four
    /// eyes and the audit trail. With it, approve and deny need your token (EFFECT_TOOL_TOKEN
    /// or --token-file) or --local-admin.
    #[arg(long, global = true, env = "EFFECT_TOOL_IDENTITIES", value_name = "FILE")]
    pub identities: Option<PathBuf>,
    /// A file whose first line is your CLI token (instead of the EFFECT_TOOL_TOKEN variable):
    /// the identities file lists its SHA-256, and it names you and your roles.
    #[arg(long, global = true, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// Act as the local administrator: the audit trail names you `local administrator on host
    /// H, OS user U`, and the role of --as is believed (whoever runs this command holds the
    /// journal's credentials). For break-glass work; prefer a token.
    #[arg(long, global = true, conflicts_with = "token_file")]
    pub local_admin: bool,
}

/// Who acts, as the command found out.
#[derive(Debug, Clone)]
pub struct Acting {
    /// The identities map (empty without a file).
    pub identities: Identities,
    /// Who, through which system.
    pub actor: Actor,
    /// The roles they hold, when a token named them; `None`: the role of `--as` is believed
    /// (local administrator, or the deprecated `--by`).
    pub roles: Option<BTreeSet<String>>,
}

impl Acting {
    /// How the audit trail names them.
    pub fn audit_name(&self) -> String {
        self.identities.audit_name(&self.actor)
    }

    /// Four eyes, as the console checks it: refused when they requested `rec` under any name
    /// of theirs.
    pub fn four_eyes(&self, rec: &EffectRecord, action: &str) -> Result<(), CliError> {
        let Err(requester) = self.identities.four_eyes(rec, &self.actor, []) else {
            return Ok(());
        };
        let person = self
            .identities
            .person(&self.actor)
            .map(|p| format!(" (person `{}`)", clean(&p.id)))
            .unwrap_or_default();
        Err(CliError::Refused(format!(
            "{}{person} requested {} (run `{}`, as `{}`) and cannot {action} it: four eyes, another person holding the role must decide",
            clean(&self.actor.name),
            clean(&rec.key),
            clean(&rec.run_id),
            clean(&requester)
        )))
    }

    /// Every name they are known by: their own and, when the identities file knows them, their
    /// person's id and names in every system (what four eyes compares a requester with).
    pub fn names(&self) -> std::collections::BTreeSet<String> {
        self.identities.names(&self.actor)
    }

    /// Whether they may act as `role`: a token's person must hold it; otherwise it is believed.
    pub fn holds(&self, role: &str, action: &str) -> Result<(), CliError> {
        match &self.roles {
            Some(roles) if !roles.contains(role) => Err(CliError::Refused(format!(
                "`{}` does not hold the role `{}` in the identities file and cannot {action} as it: ask for the role there (`roles` of their [[person]]), or let someone who holds it decide",
                clean(&self.actor.name),
                clean(role)
            ))),
            _ => Ok(()),
        }
    }
}

/// Who acts, from the options, the token variable and `by` (`--by`, or `$USER`).
///
/// # Errors
///
/// A usage error when the identities file cannot be used, a token is given without it, or
/// with it neither a token nor `--local-admin`; refused when the token is not the file's.
pub fn acting(args: &IdentityArgs, by: Option<String>) -> Result<Acting, CliError> {
    let identities = match &args.identities {
        Some(path) => {
            effect_tool_core::ops::identity::read_identities(path).map_err(|e| CliError::Usage(e.to_string()))?
        }
        None => Identities::default(),
    };
    let token = token(args)?;
    if token.is_some() && args.local_admin {
        return Err(CliError::Usage(format!(
            "give a token ({TOKEN_VAR} or --token-file) or --local-admin, not both"
        )));
    }
    if let Some(token) = token {
        if args.identities.is_none() {
            return Err(CliError::Usage(format!(
                "a CLI token names a person of the identities file: give it with --identities FILE (or EFFECT_TOOL_IDENTITIES), or unset {TOKEN_VAR}"
            )));
        }
        let Some(person) = identities.person_of_token(&token) else {
            return Err(CliError::Refused(
                "the CLI token is not one of the identities file's: list its SHA-256 (`printf %s \"$TOKEN\" | sha256sum`) in `cli_tokens` of your [[person]]".into(),
            ));
        };
        let (id, roles) = (person.id.clone(), person.roles.clone());
        return Ok(Acting {
            identities,
            actor: Actor::new(IdentitySystem::Cli, id),
            roles: Some(roles),
        });
    }
    if args.local_admin {
        let host = whoami::hostname()
            .map_err(|e| CliError::Usage(format!("cannot tell this host's name for the audit trail: {e}")))?;
        let user = whoami::username()
            .map_err(|e| CliError::Usage(format!("cannot tell the OS user for the audit trail: {e}")))?;
        return Ok(Acting {
            identities,
            actor: Actor::local_admin(host, user),
            roles: None,
        });
    }
    if args.identities.is_some() {
        return Err(CliError::Usage(format!(
            "say who you are: set {TOKEN_VAR} (or --token-file FILE) to your CLI token, which the identities file lists, or act as the local administrator with --local-admin (audited as such)"
        )));
    }
    let by = match by.map(|b| b.trim().to_owned()) {
        Some(b) if !b.is_empty() => b,
        _ => {
            return Err(CliError::Usage(
                "say who decides: a CLI token (EFFECT_TOOL_TOKEN with --identities FILE), --local-admin, or --by NAME (deprecated; it defaults to $USER, which is not set)".into(),
            ));
        }
    };
    // Said to a person at a terminal; scripts read stdout and one `error:` line, unchanged
    // until the mode is refused.
    if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        eprintln!(
            "warning: acting as `{}`, named by --by (or $USER) and believed (with the role of --as, for approve), is deprecated and will be refused: use a CLI token ({TOKEN_VAR} with --identities FILE) or --local-admin",
            clean(&by)
        );
    }
    Ok(Acting {
        identities,
        actor: Actor::console(by),
        roles: None,
    })
}

/// The token, from `--token-file` or the variable; `None` without either.
fn token(args: &IdentityArgs) -> Result<Option<String>, CliError> {
    if let Some(path) = &args.token_file {
        let text = std::fs::read_to_string(path)
            .map_err(|e| CliError::Usage(format!("cannot read the token file {}: {e}", path.display())))?;
        let line = text.lines().next().unwrap_or_default().trim().to_owned();
        if line.is_empty() {
            return Err(CliError::Usage(format!(
                "the token file {} is empty: put your CLI token on its first line",
                path.display()
            )));
        }
        return Ok(Some(line));
    }
    Ok(std::env::var(TOKEN_VAR)
        .ok()
        .map(|t| t.trim().to_owned())
        .filter(|t| !t.is_empty()))
}
