//! `effect-tool grant add|list|revoke`: standing approvals in the journal
//! (`effect_tool_core::decide::grant`). A person holding a role approves, in advance, the calls
//! of one tool whose arguments meet a condition, for a period; a covered call runs without
//! parking, its audit entry naming the grant.

use clap::{Args, Subcommand};
use effect_tool_core::Store;
use effect_tool_core::decide::grant::{Condition, Grant};
use effect_tool_core::store::{GrantError, GrantsExt, NewGrant};
use serde_json::{Value, json};

use crate::emit::{write, write_json};
use crate::error::CliError;
use crate::identity::{IdentityArgs, acting};
use crate::output::{Table, clean, time};

/// `effect-tool grant`.
#[derive(Debug, Args)]
pub struct GrantArgs {
    /// What to do.
    #[command(subcommand)]
    pub action: GrantAction,
}

/// The subcommands of `effect-tool grant`.
#[derive(Debug, Subcommand)]
pub enum GrantAction {
    /// Approve a tool's calls in advance: those whose arguments meet every --when, for a
    /// period, optionally of one run or one principal's runs only.
    ///
    /// The condition is checked against the tool's parameters as the journal keeps them
    /// (written before the tool's first call that needs approval): an argument the tool does
    /// not have is refused. Your own calls are never covered (four eyes).
    Add {
        /// The tool.
        tool: String,
        /// The role you approve as; it must be the role the tool asks for.
        #[arg(long = "as", value_name = "ROLE")]
        role: String,
        /// A test the arguments must meet, as JSON: `{"arg": "cents", "at_most": 5000}`; the
        /// tests are `at_most`, `at_least` (numbers), `equals`, `one_of` (a list), `prefix`
        /// (strings). Repeat it for several tests; all must hold.
        #[arg(long, value_name = "JSON")]
        when: Vec<String>,
        /// How long it holds, from now (or from --from): `8h`, `30m`, `7days`.
        #[arg(long = "for", value_name = "DURATION")]
        valid_for: humantime::Duration,
        /// When it starts holding, in milliseconds since the Unix epoch (default: now).
        #[arg(long, value_name = "MS")]
        from: Option<i64>,
        /// Only the calls of this run.
        #[arg(long, value_name = "RUN")]
        run: Option<String>,
        /// Only the calls of this principal's runs.
        #[arg(long, value_name = "NAME")]
        principal: Option<String>,
        /// Who grants (recorded in the audit trail and on every record it approves).
        #[arg(long, env = "USER", value_name = "NAME")]
        by: Option<String>,
    },
    /// List the standing approvals, oldest first, with their state (live, revoked, expired,
    /// not-yet-valid).
    List {
        /// Only those of this tool.
        #[arg(long)]
        tool: Option<String>,
    },
    /// Revoke a standing approval: from the moment the command answers, it lets no call
    /// through (a call claimed under it before then is checked again before it runs).
    Revoke {
        /// The grant's id (`g-...`, as `grant list` prints it).
        id: String,
        /// Who revokes (recorded in the audit trail).
        #[arg(long, env = "USER", value_name = "NAME")]
        by: Option<String>,
    },
}

/// Run `effect-tool grant ...`.
pub async fn grant(
    store: &dyn Store,
    args: GrantArgs,
    identity: &IdentityArgs,
    json: bool,
    out: &mut dyn std::io::Write,
) -> Result<(), CliError> {
    match args.action {
        GrantAction::Add {
            tool,
            role,
            when,
            valid_for,
            from,
            run,
            principal,
            by,
        } => {
            // Granting stands in for a person's approval in `role`: only someone who may approve
            // as it may grant it.
            let acting = acting(identity, by)?;
            acting.holds(&role, "grant a standing approval")?;
            let by = acting.audit_name();
            // Four eyes across systems: every name the identities file gives the granter.
            let granter_names = acting.names().into_iter().filter(|n| *n != by).collect();
            let when = when
                .iter()
                .map(|w| {
                    serde_json::from_str::<Condition>(w).map_err(|e| {
                        CliError::Usage(format!(
                            "--when {w}: {e}; write one test as JSON, e.g. '{{\"arg\": \"cents\", \"at_most\": 5000}}'"
                        ))
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
            let start = from.unwrap_or_else(|| store.now());
            let length = i64::try_from(valid_for.as_millis()).unwrap_or(i64::MAX);
            let new = NewGrant {
                tool,
                role,
                granted_by: by,
                granter_names,
                when,
                valid_from: Some(start),
                valid_until: start.saturating_add(length),
                run_id: run,
                principal,
            };
            let g = store.add_grant(new).await.map_err(|e| match e {
                GrantError::Bad(bad) => CliError::Refused(format!("nothing was granted: {bad}")),
                GrantError::Store(e) => e.into(),
            })?;
            if json {
                return write_json(out, &grant_json(&g, store.now()));
            }
            write(
                out,
                &format!(
                    "granted {}: calls of {} {} run without waiting for a person, until {}, approved by {}; revoke it with `effect-tool grant revoke {}`\n",
                    clean(&g.id),
                    clean(&g.tool),
                    condition_text(&g),
                    time(g.valid_until),
                    clean(&g.granted_by),
                    clean(&g.id),
                ),
            )
        }
        GrantAction::List { tool } => {
            let grants = store.grants(tool.as_deref()).await?;
            let now = store.now();
            if json {
                return write_json(out, &Value::Array(grants.iter().map(|g| grant_json(g, now)).collect()));
            }
            if grants.is_empty() {
                return write(out, "no standing approvals\n");
            }
            let mut table = Table::new(vec!["STATE", "TOOL", "ROLE", "BY", "UNTIL", "WHEN", "ID"]);
            for g in &grants {
                table.row(vec![
                    g.state(now).to_owned(),
                    g.tool.clone(),
                    g.role.clone(),
                    g.granted_by.clone(),
                    time(g.valid_until),
                    condition_text(g),
                    g.id.clone(),
                ]);
            }
            table.write(out).map_err(crate::emit::io_error)
        }
        GrantAction::Revoke { id, by } => {
            let by = acting(identity, by)?.audit_name();
            let Some(g) = store.revoke_grant(&id, &by).await? else {
                return Err(CliError::NotFound(format!(
                    "no standing approval `{}` in this journal; `effect-tool grant list` shows them",
                    clean(&id)
                )));
            };
            if json {
                return write_json(out, &grant_json(&g, store.now()));
            }
            let r = g
                .revoked
                .as_ref()
                .map(|r| (r.by.as_str(), r.at))
                .unwrap_or((by.as_str(), 0));
            write(
                out,
                &format!(
                    "revoked {} (by {} at {}): calls of {} wait for a person again\n",
                    clean(&g.id),
                    clean(r.0),
                    time(r.1),
                    clean(&g.tool)
                ),
            )
        }
    }
}

/// The grant's condition and scope in words.
fn condition_text(g: &Grant) -> String {
    let mut parts: Vec<String> = g.when.iter().map(|c| clean(&c.to_string())).collect();
    if parts.is_empty() {
        parts.push("(any arguments)".to_owned());
    }
    let mut text = format!("where {}", parts.join(" and "));
    if let Some(r) = &g.run_id {
        text.push_str(&format!(", run {}", clean(r)));
    }
    if let Some(p) = &g.principal {
        text.push_str(&format!(", principal {}", clean(p)));
    }
    text
}

/// The grant as JSON, with its state at `now`.
fn grant_json(g: &Grant, now: i64) -> Value {
    let mut v = serde_json::to_value(g).unwrap_or(Value::Null);
    if let Some(o) = v.as_object_mut() {
        o.insert("state".to_owned(), json!(g.state(now)));
    }
    v
}
