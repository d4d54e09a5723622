//! Standing approvals ("grants"): a person holding a role approves, in advance, the calls of one
//! tool whose arguments meet a condition, for a period, optionally only for one run or one
//! principal's runs. A call a live grant covers claims instead of parking for approval
//! ([`crate::decide::record::Op::ClaimGranted`]); its record names the granter as approver and
//! its audit entry (`grant-used`) names the grant.
//!
//! [`covers`] is the decision: a pure function of the grant, the call and the time. The
//! condition is the JSON comparison form the gateway's declarations use for `approval_when`
//! (`{"arg": "cents", "at_most": 5000}`), a list whose tests must all hold; [`check_condition`]
//! refuses, when a grant is made, a condition naming a field the tool's argument schema does
//! not have, or testing it as a type it is not.
//!
//! Four eyes: a grant never covers a call requested by its granter (a run scoped to them, under
//! the name that granted or any other name an identities file gives them, [`Grant::granter_names`];
//! [`crate::decide::record::requested_by`]): their own calls still park for another person.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::decide::record::{AuditEntry, GrantUse, Millis, requested_by};

/// A standing approval, as the journal keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Grant {
    /// Its id (unique in the journal).
    pub id: String,
    /// The tool whose calls it approves.
    pub tool: String,
    /// The role it approves in: the role the tool's calls need (`#[tool(approval(role = ...))]`).
    pub role: String,
    /// Who granted it (a person holding the role), as the audit trail names them.
    pub granted_by: String,
    /// The granter's other names, when the grant was made by someone an identities file knows
    /// ([`crate::decide::identity::Identities::names`]: their person id, console names, MCP
    /// principals, ...): a run scoped to any of them is the granter's own, and never covered.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub granter_names: Vec<String>,
    /// The tests the call's arguments must all meet (none: every call of the tool).
    #[serde(default)]
    pub when: Vec<Condition>,
    /// From when it covers calls (milliseconds since the Unix epoch, the journal's clock).
    pub valid_from: Millis,
    /// Until when (exclusive).
    pub valid_until: Millis,
    /// Only the calls of this run, if set.
    #[serde(default)]
    pub run_id: Option<String>,
    /// Only the calls of this principal's runs (runs scoped `<principal>/...`), if set.
    #[serde(default)]
    pub principal: Option<String>,
    /// When it was made.
    pub created_at: Millis,
    /// Its revocation, once revoked (a revoked grant covers nothing, for good).
    #[serde(default)]
    pub revoked: Option<Revocation>,
}

/// Who revoked a grant, and when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Revocation {
    /// Who.
    pub by: String,
    /// When.
    pub at: Millis,
}

/// One test of a grant's condition on one argument: `{"arg": "cents", "at_most": 5000}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Condition {
    /// The argument's path (`a.b` for a nested field), as the gateway's `approval_when` names it.
    pub arg: String,
    /// The test on its value.
    #[serde(flatten)]
    pub test: Test,
}

/// The test of a [`Condition`]. A missing or `null` argument meets none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Test {
    /// A number at most this one.
    AtMost(f64),
    /// A number at least this one.
    AtLeast(f64),
    /// Exactly this JSON value.
    Equals(Value),
    /// One of these JSON values.
    OneOf(Vec<Value>),
    /// A string starting with this one.
    Prefix(String),
}

impl Condition {
    /// Whether `args` meet the test.
    pub fn holds(&self, args: &Value) -> bool {
        let Some(value) = lookup(args, &self.arg).filter(|v| !v.is_null()) else {
            return false;
        };
        match &self.test {
            Test::AtMost(n) => value.as_f64().is_some_and(|v| v <= *n),
            Test::AtLeast(n) => value.as_f64().is_some_and(|v| v >= *n),
            Test::Equals(e) => e == value,
            Test::OneOf(any) => any.contains(value),
            Test::Prefix(p) => value.as_str().is_some_and(|s| s.starts_with(p.as_str())),
        }
    }
}

impl std::fmt::Display for Condition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.test {
            Test::AtMost(n) => write!(f, "{} <= {n}", self.arg),
            Test::AtLeast(n) => write!(f, "{} >= {n}", self.arg),
            Test::Equals(v) => write!(f, "{} == {v}", self.arg),
            Test::OneOf(v) => write!(f, "{} in {}", self.arg, Value::Array(v.clone())),
            Test::Prefix(p) => write!(f, "{} starts with {p:?}", self.arg),
        }
    }
}

/// The value at `path` (`a.b.c`) in `args`.
fn lookup<'a>(args: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(args, |v, part| v.as_object()?.get(part))
}

/// What a grant is asked about: one call that needs a person's approval.
#[derive(Debug, Clone, Copy)]
pub struct GrantCall<'a> {
    /// The tool.
    pub tool: &'a str,
    /// The role its approval needs.
    pub role: &'a str,
    /// Its input as the journal keeps it (sensitive fields as digests).
    pub input: &'a Value,
    /// Its run.
    pub run_id: &'a str,
    /// Its thread, if any.
    pub thread_id: Option<&'a str>,
}

/// Why a grant does not cover a call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotCovered {
    /// It is a grant for another tool.
    #[error("the grant is for tool `{0}`")]
    OtherTool(String),
    /// It was granted in another role than the call needs.
    #[error("the grant is in role `{0}`, the call needs another")]
    OtherRole(String),
    /// It was revoked.
    #[error("the grant was revoked by {0}")]
    Revoked(String),
    /// Its period has not begun.
    #[error("the grant is not valid yet")]
    NotYet,
    /// Its period is over.
    #[error("the grant expired")]
    Expired,
    /// It is for another run.
    #[error("the grant is for run `{0}` only")]
    OtherRun(String),
    /// It is for another principal's runs.
    #[error("the grant is for principal `{0}`'s runs only")]
    OtherPrincipal(String),
    /// Four eyes: the call is its granter's own.
    #[error("the call is requested by {0}, who granted it: another person must approve")]
    OwnRequest(String),
    /// The arguments fail a test of its condition.
    #[error("the arguments do not meet `{0}`")]
    Condition(String),
}

/// Whether `grant` covers `call` at `now` (the journal's clock): `Ok` when it does, else the
/// first reason it does not.
pub fn covers(grant: &Grant, call: &GrantCall<'_>, now: Millis) -> Result<(), NotCovered> {
    if grant.tool != call.tool {
        return Err(NotCovered::OtherTool(grant.tool.clone()));
    }
    if grant.role != call.role {
        return Err(NotCovered::OtherRole(grant.role.clone()));
    }
    if let Some(r) = &grant.revoked {
        return Err(NotCovered::Revoked(r.by.clone()));
    }
    if now < grant.valid_from {
        return Err(NotCovered::NotYet);
    }
    if now >= grant.valid_until {
        return Err(NotCovered::Expired);
    }
    if let Some(run) = grant.run_id.as_deref().filter(|r| *r != call.run_id) {
        return Err(NotCovered::OtherRun(run.to_owned()));
    }
    if let Some(p) = grant
        .principal
        .as_deref()
        .filter(|p| !requested_by(call.run_id, call.thread_id, p))
    {
        return Err(NotCovered::OtherPrincipal(p.to_owned()));
    }
    if std::iter::once(&grant.granted_by)
        .chain(&grant.granter_names)
        .any(|name| requested_by(call.run_id, call.thread_id, name))
    {
        return Err(NotCovered::OwnRequest(grant.granted_by.clone()));
    }
    match grant.when.iter().find(|c| !c.holds(call.input)) {
        Some(failed) => Err(NotCovered::Condition(failed.to_string())),
        None => Ok(()),
    }
}

/// The first of `grants` that covers `call` at `now`, if any.
pub fn pick<'g>(grants: &'g [Grant], call: &GrantCall<'_>, now: Millis) -> Option<&'g Grant> {
    grants.iter().find(|g| covers(g, call, now).is_ok())
}

impl Grant {
    /// Its state at `now`: `revoked`, `expired`, `not-yet-valid` or `live` (the first that
    /// holds, in that order).
    pub fn state(&self, now: Millis) -> &'static str {
        if self.revoked.is_some() {
            "revoked"
        } else if now >= self.valid_until {
            "expired"
        } else if now < self.valid_from {
            "not-yet-valid"
        } else {
            "live"
        }
    }

    /// What a claim under this grant names ([`crate::decide::record::Op::ClaimGranted`]).
    pub fn usage(&self) -> GrantUse {
        GrantUse {
            id: self.id.clone(),
            by: self.granted_by.clone(),
            role: self.role.clone(),
        }
    }
}

/// The key of a grant's own audit entries (its making, its revocation): `grant:<id>`.
pub fn audit_key(id: &str) -> String {
    format!("grant:{id}")
}

/// The audit entry of `grant`'s making: by its granter, the grant as made in its detail.
pub fn created_entry(grant: &Grant) -> AuditEntry {
    AuditEntry {
        key: audit_key(&grant.id),
        at: grant.created_at,
        actor: grant.granted_by.clone(),
        action: "grant".to_owned(),
        detail: serde_json::to_value(grant).ok(),
    }
}

/// Revoke `grant` as `by` at `now`: the audit entry to append with the write, or `None` when it
/// was revoked already (kept as it was: a revocation is never overwritten).
pub fn revoke(grant: &mut Grant, by: &str, now: Millis) -> Option<AuditEntry> {
    if grant.revoked.is_some() {
        return None;
    }
    grant.revoked = Some(Revocation {
        by: by.to_owned(),
        at: now,
    });
    Some(AuditEntry {
        key: audit_key(&grant.id),
        at: now,
        actor: by.to_owned(),
        action: "grant-revoked".to_owned(),
        detail: Some(serde_json::json!({ "tool": grant.tool, "role": grant.role })),
    })
}

/// Why a new grant is refused ([`check_new`], [`check_condition`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadGrant {
    /// A required text is empty.
    #[error("a grant needs its {0}: give one")]
    Missing(&'static str),
    /// Its period is empty.
    #[error("the grant's period is empty (valid until {until}, from {from}): give an end after its start")]
    EmptyPeriod {
        /// From.
        from: Millis,
        /// Until.
        until: Millis,
    },
    /// The tool's argument schema is not in the journal.
    #[error(
        "the journal has no argument schema of tool `{0}` (it is written before the tool's first call that needs approval): run the tool once, or check its name with `effect-tool list`"
    )]
    NoSchema(String),
    /// The condition names an argument the tool does not have.
    #[error("tool `{tool}` has no argument `{arg}`: name one of its schema's properties ({known})")]
    NoSuchArgument {
        /// The tool.
        tool: String,
        /// The argument named.
        arg: String,
        /// The properties it has, at the level where the path broke off.
        known: String,
    },
    /// The condition tests an argument as a type it is not.
    #[error("argument `{arg}` of tool `{tool}` is {kind}, which `{test}` cannot test: use `equals` or `one_of`")]
    WrongType {
        /// The tool.
        tool: String,
        /// The argument.
        arg: String,
        /// Its schema's type.
        kind: String,
        /// The test.
        test: &'static str,
    },
}

/// A new grant's own checks: an id, a tool, a role, a granter and a period that is not empty.
pub fn check_new(grant: &Grant) -> Result<(), BadGrant> {
    for (what, text) in [
        ("id", &grant.id),
        ("tool", &grant.tool),
        ("role", &grant.role),
        ("granter", &grant.granted_by),
    ] {
        if text.trim().is_empty() {
            return Err(BadGrant::Missing(what));
        }
    }
    if grant.valid_until <= grant.valid_from {
        return Err(BadGrant::EmptyPeriod {
            from: grant.valid_from,
            until: grant.valid_until,
        });
    }
    Ok(())
}

/// Check `when` against `schema`, the JSON Schema of `tool`'s arguments: every argument it
/// names is a property (`$ref`s into `$defs`/`definitions` followed), and a numeric test names
/// a number, a prefix test a string.
pub fn check_condition(tool: &str, when: &[Condition], schema: &Value) -> Result<(), BadGrant> {
    for c in when {
        let mut node = resolve(schema, schema);
        for part in c.arg.split('.') {
            let props = node.get("properties").and_then(Value::as_object);
            match props.and_then(|p| p.get(part)) {
                Some(next) => node = resolve(schema, next),
                None => {
                    let known = props.map(|p| p.keys().cloned().collect::<Vec<_>>().join(", "));
                    return Err(BadGrant::NoSuchArgument {
                        tool: tool.to_owned(),
                        arg: c.arg.clone(),
                        known: known.unwrap_or_else(|| "none".to_owned()),
                    });
                }
            }
        }
        let types = types_of(node);
        let (test, fits) = match c.test {
            Test::AtMost(_) => ("at_most", types.iter().any(|t| t == "number" || t == "integer")),
            Test::AtLeast(_) => ("at_least", types.iter().any(|t| t == "number" || t == "integer")),
            Test::Prefix(_) => ("prefix", types.iter().any(|t| t == "string")),
            Test::Equals(_) | Test::OneOf(_) => continue,
        };
        if !fits {
            return Err(BadGrant::WrongType {
                tool: tool.to_owned(),
                arg: c.arg.clone(),
                kind: if types.is_empty() {
                    "of no declared type".to_owned()
                } else {
                    format!("of type {}", types.join(" or "))
                },
                test,
            });
        }
    }
    Ok(())
}

/// `node`, or the definition its `$ref` names in `root`.
fn resolve<'a>(root: &'a Value, node: &'a Value) -> &'a Value {
    match node.get("$ref").and_then(Value::as_str) {
        Some(r) => r
            .strip_prefix('#')
            .and_then(|pointer| root.pointer(pointer))
            .unwrap_or(node),
        None => node,
    }
}

/// The JSON types a schema node allows (`type`, as one name or a list).
fn types_of(node: &Value) -> Vec<String> {
    match node.get("type") {
        Some(Value::String(t)) => vec![t.clone()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).map(str::to_owned).collect(),
        _ => Vec::new(),
    }
}
