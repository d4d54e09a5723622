//! One declaration against its crate's rules: each violation reported at the declaration's
//! token that breaks it, with a `help:` line that says what to write and which rule, stated
//! where, asks for it.

use proc_macro2::Span;

use super::{Rules, Team};
use crate::ast::ToolFn;
use crate::attr::{Class, KeySpec, ToolAttrs};
use crate::ctxt::Ctxt;
use crate::symbol::{self, APPROVAL, KEY, RECOVER, TIMEOUT};

/// Check `attrs` of `func` against the crate's rules (nothing when the crate states none).
pub fn check(cx: &Ctxt, team: &Team, attrs: &ToolAttrs, func: &ToolFn) {
    let rules = match &team.rules {
        Ok(Some(rules)) => rules,
        Ok(None) => return,
        Err(invalid) => {
            cx.error(attrs.span.unwrap_or_else(Span::call_site), &invalid.msg, &invalid.help);
            return;
        }
    };
    // A declaration with no class, or an unknown one, is already reported.
    let Some(effect) = &attrs.effect else { return };
    let tool = func.ident.to_string();
    let class = effect.value;
    let at_class = effect.span;
    let rejected = |key: &str| attrs.rejected.contains(&key);
    let report = |span: Span, rule: &str, msg: String, help: String| {
        cx.error(span, msg, format!("{help}; rule `{rule}` in {}", rules.source));
    };

    if rules.irreversible_needs_approval_or_recover
        && class == Class::Irreversible
        && attrs.approval.is_none()
        && attrs.recover.is_none()
        && !rejected(APPROVAL)
        && !rejected(RECOVER)
    {
        report(
            at_class,
            symbol::IRREVERSIBLE_NEEDS_APPROVAL_OR_RECOVER,
            format!("irreversible tool `{tool}` has neither `approval` nor `recover`: this crate's rules ask for one"),
            format!(
                "name who approves each call, `approval = \"{}\"`, or a hook that asks whether an unknown outcome already happened, `recover = find_{tool}`",
                example_role(rules)
            ),
        );
    }
    if rules.idempotent_needs_key && class == Class::Idempotent && attrs.key.is_none() && !rejected(KEY) {
        report(
            at_class,
            symbol::IDEMPOTENT_NEEDS_KEY,
            format!(
                "idempotent tool `{tool}` has no key: this crate's rules ask that it say which arguments identify the effect (the default key hashes all of them)"
            ),
            format!(
                "write {}, or `key = |a| format!(\"{tool}:{{}}\", a.{})`",
                key_example(func),
                first_arg(func)
            ),
        );
    }
    if rules.cross_run_needs_custom_key
        && let Some(window) = &attrs.window
        && window.value == "cross-run"
        && !matches!(attrs.key.as_ref().map(|k| &k.value), Some(KeySpec::Closure(_)))
    {
        report(
            window.span,
            symbol::CROSS_RUN_NEEDS_CUSTOM_KEY,
            format!(
                "tool `{tool}` keys across runs without a custom key: this crate's rules ask that a key shared by every run be written out"
            ),
            format!(
                "write the key: `key = |a| format!(\"{tool}:{{}}\", a.{})`, or key within one run (remove `window`)",
                first_arg(func)
            ),
        );
    }
    if rules.non_pure_needs_timeout && class != Class::Pure && attrs.timeout.is_none() && !rejected(TIMEOUT) {
        report(
            at_class,
            symbol::NON_PURE_NEEDS_TIMEOUT,
            format!(
                "{} tool `{tool}` has no `timeout`: this crate's rules ask every tool with an effect for one",
                class.as_str()
            ),
            "give the longest a call may run, e.g. `timeout = \"30s\"` (past it the outcome is unknown)".to_owned(),
        );
    }
    if let (Some(roles), Some(approval)) = (&rules.approval_roles, &attrs.approval)
        && !roles.contains(&approval.value)
    {
        let names: Vec<&str> = roles.iter().map(String::as_str).collect();
        let help = match symbol::nearest(&approval.value, &names) {
            Some(near) => format!(
                "did you mean `approval = \"{near}\"`? The roles are {}",
                symbol::list(&names)
            ),
            None => format!(
                "name one of the roles {}, or add `{}` to `approval-roles`",
                symbol::list(&names),
                approval.value
            ),
        };
        report(
            approval.span,
            symbol::APPROVAL_ROLES,
            format!(
                "tool `{tool}` asks `{}` to approve, a role this crate's rules do not list",
                approval.value
            ),
            help,
        );
    }
}

/// A role to show in an example: the first the rules list, else `finance`.
fn example_role(rules: &Rules) -> &str {
    rules
        .approval_roles
        .as_ref()
        .and_then(|r| r.first())
        .map_or("finance", String::as_str)
}

/// `key(first_argument)`, or a placeholder when the tool takes none.
fn key_example(func: &ToolFn) -> String {
    format!("`key({})`", first_arg(func))
}

fn first_arg(func: &ToolFn) -> String {
    func.args
        .first()
        .map_or_else(|| "id".to_owned(), |a| crate::unraw::unraw(&a.ident))
}
