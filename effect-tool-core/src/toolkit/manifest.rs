//! The tool manifest: every tool's declaration as stable text, one line per tool, for code
//! review.
//!
//! Commit the manifest beside the code and check it in a test (see `tests/toolkit/macro_manifest.rs` in
//! the repository for one to copy): a change of any effect declaration (a class, a key rule, a
//! window, an approval, a hook) then shows up in review as a one-line diff, and nobody changes
//! what running a tool twice does without a reviewer seeing it.
//!
//! ```
//! use effect_tool_core::{EffectClass, KeyRule, RetryPolicy, ToolMeta, Window, toolkit::manifest};
//! use std::time::Duration;
//!
//! let refund = ToolMeta {
//!     name: "issue_refund",
//!     description: "Refund part of an order.",
//!     class: EffectClass::Idempotent,
//!     key_rule: KeyRule::Custom("|a| format!(\"refund:{}\", a.order_id)"),
//!     window: Window::CrossRun,
//!     shared_keys: false,
//!     ttl: Some(Duration::from_secs(24 * 3600)),
//!     timeout: None,
//!     sensitive: &[],
//!     injected: &[],
//!     has_recover: true,
//!     has_compensate: false,
//!     approval: None,
//!     approval_when: None,
//!     open_world: None,
//!     retry: RetryPolicy::DEFAULT,
//!     costs: &[],
//! };
//! let text = manifest::render(&[refund]);
//! assert_eq!(
//!     text.lines().nth(1).unwrap(),
//!     "issue_refund class=idempotent key=custom(|a| format!(\"refund:{}\", a.order_id)) window=cross-run ttl=1d \
//!      timeout=- approval=- recover=yes compensate=no sensitive=- injected=- retry=3x100ms..10s",
//! );
//! ```

use std::fmt::Write as _;
use std::time::Duration;

use crate::call::tool::ToolMeta;

/// The first line of every manifest; it names the format so a future change of the format is
/// itself visible in review.
pub const HEADER: &str = "# effect-tool manifest v1: one line per tool, sorted by name";

/// The manifest of `tools`: [`HEADER`], then one line per tool, sorted by name:
///
/// `<name> class=<class> key=<rule> window=<window> ttl=<ttl|-> timeout=<timeout|-> approval=<role|-> recover=<yes|no> compensate=<yes|no> sensitive=<a,b|-> injected=<Type,Type|-> retry=<attempts>x<base>..<max>`
///
/// `sensitive` lists the arguments the model supplies that the journal never keeps (by their
/// serialized names); `injected` the values the tool takes from the run (its `#[secret]`
/// arguments, by type, as written), which never reach the model. A conditional approval reads
/// `approval=<role> when(<condition as written>)`. A tool whose keys are shared by every
/// principal (`#[tool(shared_keys)]`) has `principals=shared` after its window; the others' keys
/// are each principal's own, and their lines say nothing of it. A tool that declares a cost
/// (`#[tool(cost(refund_cents = |a| ...))]`) ends its line with `cost=<unit,unit>`: the run's
/// spend budgets it charges ([`crate::call::budget::Budgets::spend`]); the others' lines say
/// nothing of it. A tool whose `recover` hook is asked before every first execution
/// (`#[tool(recover_first)]`) has `recover_first=yes` after `recover`, and one that waits for
/// its writes to show (`#[tool(recover_settle = "30s")]`) `recover_settle=<duration>`
/// ([`render_with_extras`]); the others' lines say nothing of it. An idempotent tool whose
/// calls run before any journal write, their record the one write (`#[tool(one_write)]`), has
/// `one_write=yes` after its class; the others' lines say nothing of it.
/// The key rule is written as in the source (`default`, `fields(order_id, amount_cents)` or
/// `custom(|a| ...)`); durations as in declarations (`500ms`, `30s`, `5m`, `24h`, `7d`). The
/// description is left out: rewording it changes no contract. The text depends only on the
/// declarations, not on the order tools were added in, and ends with a newline.
pub fn render(tools: &[ToolMeta]) -> String {
    let mut lines: Vec<String> = tools.iter().map(line).collect();
    lines.sort();
    let mut out = String::with_capacity(64 * (lines.len() + 1));
    out.push_str(HEADER);
    out.push('\n');
    for l in lines {
        out.push_str(&l);
        out.push('\n');
    }
    out
}

/// [`render`], then one comment line per tool that cannot be sent with OpenAI's
/// `"strict": true`, sorted by name: `# not strict: <name>: <reason>; <reason>`. A change of a
/// tool's strictness is then a one-line diff too. `not_strict` pairs a tool's name with its
/// reasons ([`crate::value::schema::strict_report`]).
pub fn render_with_strict(tools: &[ToolMeta], not_strict: &[(&str, Vec<String>)]) -> String {
    let mut out = render(tools);
    let mut notes: Vec<String> = not_strict
        .iter()
        .map(|(name, reasons)| single_line(&format!("# not strict: {name}: {}", reasons.join("; "))))
        .collect();
    notes.sort();
    for n in notes {
        out.push_str(&n);
        out.push('\n');
    }
    out
}

/// [`render_with_strict`], with the approvals' ttls: a tool of `approval_ttls` (its name, and
/// its declared `approval_ttl`) has `approval_ttl=<duration>` after its `approval` field. A tool
/// that declares none keeps the line [`render`] writes, so a manifest committed before the field
/// existed stays the same. See [`render_with_extras`] for every such field.
pub fn render_with_approval_ttls(
    tools: &[ToolMeta],
    approval_ttls: &[(&str, Duration)],
    not_strict: &[(&str, Vec<String>)],
) -> String {
    let extras: Vec<(&str, LineExtras)> = approval_ttls
        .iter()
        .map(|(name, ttl)| {
            (
                *name,
                LineExtras {
                    approval_ttl: Some(*ttl),
                    ..LineExtras::default()
                },
            )
        })
        .collect();
    render_with_extras(tools, &extras, not_strict)
}

/// What a tool's line says beyond its [`ToolMeta`], each only when declared (a tool that
/// declares none of them keeps the line [`render`] writes, so a manifest committed before these
/// fields existed stays the same). Build it with `..LineExtras::default()` for the fields you do
/// not set: later releases may add fields for new declarations.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LineExtras {
    /// `approval_ttl=<duration>` after `approval` (when the tool has an approval): how long a
    /// person's approval stays valid ([`crate::Tool::APPROVAL_TTL`]).
    pub approval_ttl: Option<Duration>,
    /// `recover_first=yes` after `recover` (when the tool has a `recover` hook): `recover` is
    /// asked before every first execution ([`crate::Tool::RECOVER_FIRST`]).
    pub recover_first: bool,
    /// `recover_settle=<duration>` after `recover` (when the tool has a `recover` hook): how long
    /// after an unknown outcome `recover` is first asked ([`crate::Tool::RECOVER_SETTLE`]).
    pub recover_settle: Option<Duration>,
    /// `one_write=yes` after `class` (when the tool is idempotent): its calls run before any
    /// journal write, their record the one write, so nothing shows in flight while one runs and
    /// an identical call in another process runs too ([`crate::Tool::ONE_WRITE`]).
    pub one_write: bool,
}

/// [`render_with_strict`], each tool of `extras` (its name, and what its line says beyond its
/// [`ToolMeta`]) written with [`line_with`]. [`crate::Toolkit::manifest`] calls it with its
/// tools' declarations.
pub fn render_with_extras(
    tools: &[ToolMeta],
    extras: &[(&str, LineExtras)],
    not_strict: &[(&str, Vec<String>)],
) -> String {
    let mut lines: Vec<String> = tools
        .iter()
        .map(|meta| {
            let extra = extras
                .iter()
                .find(|(n, _)| *n == meta.name)
                .map(|(_, e)| *e)
                .unwrap_or_default();
            line_with(meta, &extra)
        })
        .collect();
    lines.sort();
    let mut out = String::with_capacity(64 * (lines.len() + 1));
    out.push_str(HEADER);
    out.push('\n');
    for l in lines {
        out.push_str(&l);
        out.push('\n');
    }
    let full = render_with_strict(&[], not_strict);
    out.push_str(full.strip_prefix(HEADER).unwrap_or(&full).trim_start_matches('\n'));
    out
}

/// The prefix of a manifest's output lines ([`render_outputs`]).
pub const OUTPUT_NOTE: &str = "# output: ";

/// One comment line per tool that declares its output, sorted by name:
/// `# output: <name>: <type> schema=<digest>`, the type as written in the tool's signature
/// (`-` when not known) and the first 16 hex digits of the SHA-256 of its JSON Schema's
/// canonical JSON ([`crate::toolkit::OutputSchema::digest`]). A changed output type, or a
/// changed shape of the same type (a field added, renamed, made optional), is a one-line diff.
/// `outputs` pairs a tool's name with its output type and digest; empty gives an empty text.
pub fn render_outputs(outputs: &[(&str, Option<&str>, &str)]) -> String {
    let mut notes: Vec<String> = outputs
        .iter()
        .map(|(name, ty, digest)| single_line(&format!("{OUTPUT_NOTE}{name}: {} schema={digest}", ty.unwrap_or("-"))))
        .collect();
    notes.sort();
    let mut out = String::new();
    for n in notes {
        out.push_str(&n);
        out.push('\n');
    }
    out
}

/// One tool's line (see [`render`]).
pub fn line(meta: &ToolMeta) -> String {
    line_with_approval_ttl(meta, None)
}

/// One tool's line with its approval's ttl, if declared (`approval_ttl=2h` after `approval`).
pub fn line_with_approval_ttl(meta: &ToolMeta, approval_ttl: Option<Duration>) -> String {
    line_with(
        meta,
        &LineExtras {
            approval_ttl,
            ..LineExtras::default()
        },
    )
}

/// One tool's line with what it says beyond its [`ToolMeta`] ([`LineExtras`]): `one_write=yes`
/// after `class`, `approval_ttl=` after `approval`, `recover_first=yes` and `recover_settle=`
/// after `recover`, each only when declared (and only on an idempotent tool, with an approval,
/// or with a `recover` hook, to qualify).
pub fn line_with(meta: &ToolMeta, extras: &LineExtras) -> String {
    let approval_ttl = extras.approval_ttl;
    let mut s = String::new();
    let opt = |d: Option<Duration>| d.map_or_else(|| "-".to_owned(), format_duration);
    let yes = |b: bool| if b { "yes" } else { "no" };
    let _ = write!(
        s,
        "{} class={}{} key={} window={}{} ttl={} timeout={} approval={}{} recover={}{} compensate={} sensitive={} injected={} retry={}x{}..{}",
        meta.name,
        meta.class,
        if extras.one_write && meta.class == crate::value::class::EffectClass::Idempotent {
            " one_write=yes"
        } else {
            ""
        },
        single_line(&meta.key_rule.to_string()),
        meta.window,
        if meta.shared_keys { " principals=shared" } else { "" },
        opt(meta.ttl),
        opt(meta.timeout),
        match (meta.approval, meta.approval_when) {
            (None, _) => "-".to_owned(),
            (Some(role), None) => role.to_owned(),
            (Some(role), Some(when)) => format!("{role} when({})", single_line(when)),
        },
        match (meta.approval, approval_ttl) {
            (Some(_), Some(d)) => format!(" approval_ttl={}", format_duration(d)),
            _ => String::new(),
        },
        yes(meta.has_recover),
        recover_extras(meta.has_recover, extras),
        yes(meta.has_compensate),
        if meta.sensitive.is_empty() {
            "-".to_owned()
        } else {
            meta.sensitive.join(",")
        },
        if meta.injected.is_empty() {
            "-".to_owned()
        } else {
            meta.injected.iter().map(|i| i.type_name).collect::<Vec<_>>().join(",")
        },
        meta.retry.max_attempts,
        format_duration(meta.retry.base_delay),
        format_duration(meta.retry.max_delay),
    );
    if !meta.costs.is_empty() {
        let _ = write!(s, " cost={}", meta.costs.join(","));
    }
    s
}

/// ` recover_first=yes recover_settle=30s` (each when declared) after `recover=yes`.
fn recover_extras(has_recover: bool, extras: &LineExtras) -> String {
    let mut s = String::new();
    if has_recover && extras.recover_first {
        s.push_str(" recover_first=yes");
    }
    if let (true, Some(d)) = (has_recover, extras.recover_settle) {
        let _ = write!(s, " recover_settle={}", format_duration(d));
    }
    s
}

/// A duration as declarations write it: the largest unit that divides it exactly.
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        return "0s".to_owned();
    }
    for (unit, size) in [("d", 86_400_000u128), ("h", 3_600_000), ("m", 60_000), ("s", 1_000)] {
        if ms.is_multiple_of(size) {
            return format!("{}{unit}", ms / size);
        }
    }
    format!("{ms}ms")
}

/// Keep one tool on one line whatever its key closure looks like.
fn single_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::tool::KeyRule;
    use crate::decide::policy::RetryPolicy;
    use crate::value::class::{EffectClass, Window};

    fn meta(name: &'static str, class: EffectClass) -> ToolMeta {
        ToolMeta {
            name,
            description: "",
            class,
            key_rule: KeyRule::Default,
            window: Window::Run,
            shared_keys: false,
            ttl: None,
            timeout: None,
            sensitive: &[],
            injected: &[],
            has_recover: false,
            has_compensate: false,
            approval: None,
            approval_when: None,
            open_world: None,
            retry: RetryPolicy::DEFAULT,
            costs: &[],
        }
    }

    #[test]
    fn sorted_one_line_each_and_independent_of_order() {
        let a = meta("send_email", EffectClass::Irreversible);
        let b = ToolMeta {
            key_rule: KeyRule::Fields(&["order_id", "amount_cents"]),
            sensitive: &["token"],
            approval: Some("finance"),
            approval_when: Some("|a| a.amount_cents > 10_000"),
            timeout: Some(Duration::from_millis(1500)),
            ..meta("issue_refund", EffectClass::Idempotent)
        };
        let text = render(&[a.clone(), b.clone()]);
        assert_eq!(text, render(&[b, a]));
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0], HEADER);
        assert_eq!(
            lines[1],
            "issue_refund class=idempotent key=fields(order_id, amount_cents) window=run ttl=- timeout=1500ms \
             approval=finance when(|a| a.amount_cents > 10_000) recover=no compensate=no sensitive=token injected=- retry=3x100ms..10s"
        );
        assert!(lines[2].starts_with("send_email class=irreversible "));
        assert!(text.ends_with('\n'));
    }

    #[test]
    fn injected_values_are_listed_by_type() {
        const INJECTED: &[crate::call::tool::Injected] = &[
            crate::call::tool::Injected {
                type_name: "SmtpPassword",
                present: crate::RunContext::has_value::<String>,
            },
            crate::call::tool::Injected {
                type_name: "ApiKey",
                present: crate::RunContext::has_value::<u64>,
            },
        ];
        let m = ToolMeta {
            injected: INJECTED,
            ..meta("send_email", EffectClass::Irreversible)
        };
        assert!(
            line(&m).contains(" sensitive=- injected=SmtpPassword,ApiKey retry="),
            "{}",
            line(&m)
        );
        assert!(line(&meta("t", EffectClass::Pure)).contains(" sensitive=- injected=- retry="));
    }

    #[test]
    fn a_multi_line_key_closure_stays_on_one_line() {
        let m = ToolMeta {
            key_rule: KeyRule::Custom("|a| {\n    a.id.clone()\n}"),
            ..meta("t", EffectClass::Idempotent)
        };
        assert!(line(&m).contains("key=custom(|a| { a.id.clone() })"));
    }

    #[test]
    fn a_declared_cost_ends_the_line_and_no_cost_says_nothing() {
        let m = ToolMeta {
            costs: &["refund_cents", "refunds"],
            ..meta("refund", EffectClass::Idempotent)
        };
        assert!(
            line(&m).ends_with(" retry=3x100ms..10s cost=refund_cents,refunds"),
            "{}",
            line(&m)
        );
        assert!(!line(&meta("refund", EffectClass::Idempotent)).contains("cost="));
    }

    #[test]
    fn output_lines_are_sorted_one_per_tool() {
        let text = render_outputs(&[("b", Some("Vec<Refund>"), "00ff"), ("a", None, "11ee")]);
        assert_eq!(
            text,
            "# output: a: - schema=11ee\n# output: b: Vec<Refund> schema=00ff\n"
        );
        assert_eq!(render_outputs(&[]), "");
    }

    #[test]
    fn when_recover_is_asked_follows_recover_and_only_when_declared() {
        let mut m = meta("send_invoice", EffectClass::Irreversible);
        let extras = LineExtras {
            recover_first: true,
            recover_settle: Some(Duration::from_secs(30)),
            ..LineExtras::default()
        };
        // Without a `recover` hook there is nothing to ask: the line says nothing of it.
        assert_eq!(line_with(&m, &extras), line(&m));
        m.has_recover = true;
        let text = line_with(&m, &extras);
        assert!(
            text.contains(" recover=yes recover_first=yes recover_settle=30s compensate=no "),
            "{text}"
        );
        assert_eq!(line_with(&m, &LineExtras::default()), line(&m));
    }

    #[test]
    fn one_write_follows_the_class_of_an_idempotent_tool_only() {
        let extras = LineExtras {
            one_write: true,
            ..LineExtras::default()
        };
        let m = meta("issue_refund", EffectClass::Idempotent);
        let text = line_with(&m, &extras);
        assert!(
            text.starts_with("issue_refund class=idempotent one_write=yes key=default window=run "),
            "{text}"
        );
        assert_eq!(text.replace(" one_write=yes", ""), line(&m));
        // Not declared: the line a manifest committed before the field existed holds.
        assert_eq!(line_with(&m, &LineExtras::default()), line(&m));
        assert!(!line(&m).contains("one_write"));
        // Another class: the engine claims its calls as usual, and the line says nothing of it.
        for class in [EffectClass::Pure, EffectClass::Compensable, EffectClass::Irreversible] {
            let other = meta("t", class);
            assert_eq!(line_with(&other, &extras), line(&other));
        }
        // Through the whole manifest, sorted among the other tools.
        let text = render_with_extras(
            &[meta("b", EffectClass::Idempotent), m.clone()],
            &[("issue_refund", extras)],
            &[],
        );
        assert_eq!(
            text.lines().filter(|l| l.contains(" one_write=yes ")).count(),
            1,
            "{text}"
        );
        assert!(
            text.lines()
                .nth(2)
                .unwrap()
                .starts_with("issue_refund class=idempotent one_write=yes "),
            "{text}"
        );
    }

    #[test]
    fn durations_read_like_declarations() {
        assert_eq!(format_duration(Duration::from_secs(86_400)), "1d");
        assert_eq!(format_duration(Duration::from_secs(3 * 3600)), "3h");
        assert_eq!(format_duration(Duration::from_secs(90)), "90s");
        assert_eq!(format_duration(Duration::from_secs(120)), "2m");
        assert_eq!(format_duration(Duration::from_millis(250)), "250ms");
        assert_eq!(format_duration(Duration::ZERO), "0s");
    }
}
