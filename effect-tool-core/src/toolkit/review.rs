//! The review of a declaration change: what a change of a tool's declaration does at run time,
//! riskiest first.
//!
//! A [`manifest`] diff shows that `class=irreversible` became
//! `class=idempotent`; a reviewer also needs to be told what that means: the runtime will now
//! retry the tool and run an unknown outcome again. [`diff`] compares two sets of
//! [`Declaration`]s and says, for every field that changed, what the runtime now does
//! differently, with a [`Risk`] that orders the list. [`Review`] prints it three ways: terminal
//! text ([`Review::to_text`]), a pull-request comment ([`Review::to_markdown`]) and JSON with
//! stable field names ([`Review::to_json`]). `effect-tool manifest FILE --check COMMITTED` is this
//! module on two manifest files; a team's own check can call it directly:
//!
//! ```
//! use effect_tool_core::toolkit::{manifest, review};
//!
//! let committed = format!(
//!     "{}\nissue_refund class=irreversible key=fields(order_id) window=run ttl=- timeout=30s \
//!      approval=finance recover=yes compensate=no sensitive=- injected=- retry=3x100ms..10s\n",
//!     manifest::HEADER,
//! );
//! // Printed now (by `manifest::render(&toolkit.metas())`, or `toolkit.manifest()`).
//! let printed = committed.replace("class=irreversible", "class=idempotent").replace("approval=finance", "approval=-");
//! let review = review::diff_manifests(&committed, &printed).unwrap();
//! assert_eq!(
//!     review.to_text(),
//!     "high    `issue_refund`: irreversible → idempotent: the runtime will now retry it and re-run \
//!      an unknown outcome with the same key; confirm the provider honours `Idempotency-Key`\n\
//!      high    `issue_refund`: approval removed: calls now run without waiting for `finance` to approve them\n",
//! );
//! assert!(review.has_risk(review::Risk::High));
//! ```
//!
//! The diff works on [`Declaration`]s, not on Rust types: a manifest file ([`parse`]), a
//! toolkit's [`ToolMeta`]s ([`declarations`]) or any other source of declarations (a file that
//! declares someone else's tools) feed the same review.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::time::Duration;

use serde_json::{Value, json};

use crate::call::tool::ToolMeta;
use crate::decide::policy::RetryPolicy;
use crate::toolkit::manifest;
use crate::value::class::{EffectClass, Window};

// ---------------------------------------------------------------------------------------------
// Declarations

/// One tool's declaration, as a manifest line states it: what the review compares.
///
/// Built from a [`ToolMeta`] (`Declaration::from(&meta)`), parsed from a manifest ([`parse`]),
/// or built field by field from [`Declaration::new`] by any other source of declarations.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Declaration {
    /// The tool's name.
    pub name: String,
    /// The effect class.
    pub class: EffectClass,
    /// Whether an idempotent tool's calls run before any journal write, their record the one
    /// write (`one_write=yes`, [`crate::Tool::ONE_WRITE`]).
    pub one_write: bool,
    /// The key rule as the manifest writes it: `default`, `fields(a, b)` or `custom(<closure>)`.
    pub key: String,
    /// Where the key is unique.
    pub window: Window,
    /// Whether every principal shares the keys (`principals=shared`).
    pub shared_keys: bool,
    /// How long a record lives (`None`: kept until removed).
    pub ttl: Option<Duration>,
    /// The execution timeout.
    pub timeout: Option<Duration>,
    /// The approving role.
    pub approval: Option<String>,
    /// The approval's condition as written (`when(...)`), if it has one.
    pub approval_when: Option<String>,
    /// How long an approval stays valid (`approval_ttl=2h`; `None`: the default, 24 hours).
    pub approval_ttl: Option<Duration>,
    /// Whether a `recover` hook is declared.
    pub recover: bool,
    /// Whether `recover` is asked before every first execution (`recover_first=yes`).
    pub recover_first: bool,
    /// How long after an unknown outcome `recover` is first asked (`recover_settle=30s`;
    /// `None`: at once).
    pub recover_settle: Option<Duration>,
    /// Whether a `compensate` hook is declared.
    pub compensate: bool,
    /// The sensitive argument fields (model-supplied values the journal never keeps).
    pub sensitive: Vec<String>,
    /// The types of the values the tool takes from the run (`#[secret]` arguments).
    pub injected: Vec<String>,
    /// The retry limits.
    pub retry: RetryPolicy,
    /// Why the tool cannot be sent with OpenAI's `"strict": true` (empty: it can, or the
    /// source does not say).
    pub not_strict: Vec<String>,
    /// The declared output, as the manifest's `# output:` line writes it
    /// (`<type> schema=<digest>`; `None`: the source does not say).
    pub output: Option<String>,
    /// Fields this version of effect-tool does not know, by name, with their text: compared as
    /// text and reported without an explanation.
    pub other: BTreeMap<String, String>,
}

impl Declaration {
    /// A declaration with the defaults of `#[tool]`: default key, `run` window, no ttl, no
    /// timeout, no approval, no hooks, nothing sensitive or injected, the default retry.
    pub fn new(name: impl Into<String>, class: EffectClass) -> Declaration {
        Declaration {
            name: name.into(),
            class,
            one_write: false,
            key: "default".to_owned(),
            window: Window::Run,
            shared_keys: false,
            ttl: None,
            timeout: None,
            approval: None,
            approval_when: None,
            approval_ttl: None,
            recover: false,
            recover_first: false,
            recover_settle: None,
            compensate: false,
            sensitive: Vec::new(),
            injected: Vec::new(),
            retry: RetryPolicy::DEFAULT,
            not_strict: Vec::new(),
            output: None,
            other: BTreeMap::new(),
        }
    }
}

impl From<&ToolMeta> for Declaration {
    fn from(meta: &ToolMeta) -> Declaration {
        Declaration {
            key: one_line(&meta.key_rule.to_string()),
            window: meta.window,
            shared_keys: meta.shared_keys,
            ttl: meta.ttl,
            timeout: meta.timeout,
            approval: meta.approval.map(str::to_owned),
            approval_when: meta.approval.and(meta.approval_when).map(one_line),
            recover: meta.has_recover,
            compensate: meta.has_compensate,
            sensitive: meta.sensitive.iter().map(|s| (*s).to_owned()).collect(),
            injected: meta.injected.iter().map(|i| i.type_name.to_owned()).collect(),
            retry: meta.retry,
            // Read back from a manifest as a field this version keeps as text (reviewed as a
            // medium-risk change): the same here, so a toolkit and its manifest compare equal.
            other: if meta.costs.is_empty() {
                BTreeMap::new()
            } else {
                BTreeMap::from([("cost".to_owned(), meta.costs.join(","))])
            },
            ..Declaration::new(meta.name, meta.class)
        }
    }
}

/// The declarations of `tools` (their strictness is not known from a [`ToolMeta`]).
pub fn declarations(tools: &[ToolMeta]) -> Vec<Declaration> {
    tools.iter().map(Declaration::from).collect()
}

// ---------------------------------------------------------------------------------------------
// Parsing a manifest

/// A manifest that could not be read as declarations.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct ParseError {
    /// The line, counted from 1 (blank lines at the start included).
    pub line: usize,
    /// What is wrong with it.
    pub message: String,
}

/// The declarations of a manifest ([`manifest::render`] or [`manifest::render_with_strict`]).
///
/// The first non-blank line must be [`manifest::HEADER`]. Each tool line is its name, then
/// `field=value` pairs; `class`, `key` and `window` are required, the other fields of the format
/// take the declaration defaults when absent (a manifest printed before they existed), and a
/// field this version does not know is kept in [`Declaration::other`]. `# not strict: <tool>:
/// <reason>; <reason>` lines fill [`Declaration::not_strict`], `# output: <tool>: <type>
/// schema=<digest>` lines [`Declaration::output`]; other `#` lines are comments.
pub fn parse(text: &str) -> Result<Vec<Declaration>, ParseError> {
    let mut lines = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim_end()))
        .skip_while(|(_, l)| l.is_empty());
    match lines.next() {
        Some((_, first)) if first == manifest::HEADER => {}
        Some((n, _)) => {
            return Err(ParseError {
                line: n,
                message: format!(
                    "not an effect-tool manifest: the first line must be `{}`",
                    manifest::HEADER
                ),
            });
        }
        None => {
            return Err(ParseError {
                line: 1,
                message: "the manifest is empty".to_owned(),
            });
        }
    }
    let mut tools: Vec<Declaration> = Vec::new();
    let mut strictness: Vec<(usize, String, Vec<String>)> = Vec::new();
    let mut outputs: Vec<(usize, String, String)> = Vec::new();
    for (n, l) in lines {
        let err = |message: String| ParseError { line: n, message };
        if let Some(note) = l.strip_prefix(manifest::OUTPUT_NOTE) {
            let (name, output) = note.split_once(": ").ok_or_else(|| {
                err("an `# output:` line must read `# output: <tool>: <type> schema=<digest>`".into())
            })?;
            outputs.push((n, name.to_owned(), output.to_owned()));
        } else if let Some(note) = l.strip_prefix("# not strict: ") {
            let (name, reasons) = note
                .split_once(": ")
                .ok_or_else(|| err("a `# not strict:` line must read `# not strict: <tool>: <reason>`".into()))?;
            strictness.push((n, name.to_owned(), reasons.split("; ").map(str::to_owned).collect()));
        } else if !l.is_empty() && !l.starts_with('#') {
            let d = parse_line(l).map_err(err)?;
            if tools.iter().any(|t| t.name == d.name) {
                return Err(err(format!("the tool `{}` is declared twice", d.name)));
            }
            tools.push(d);
        }
    }
    for (n, name, reasons) in strictness {
        match tools.iter_mut().find(|t| t.name == name) {
            Some(t) => t.not_strict = reasons,
            None => {
                return Err(ParseError {
                    line: n,
                    message: format!("`# not strict:` names `{name}`, which has no line of its own"),
                });
            }
        }
    }
    for (n, name, output) in outputs {
        match tools.iter_mut().find(|t| t.name == name) {
            Some(t) => t.output = Some(output),
            None => {
                return Err(ParseError {
                    line: n,
                    message: format!("`# output:` names `{name}`, which has no line of its own"),
                });
            }
        }
    }
    Ok(tools)
}

/// One tool line (see [`parse`]).
fn parse_line(line: &str) -> Result<Declaration, String> {
    let (name, fields) = split_fields(line)?;
    let mut fields: BTreeMap<&str, &str> = {
        let mut map = BTreeMap::new();
        for (field, value) in fields {
            if map.insert(field, value).is_some() {
                return Err(format!("`{name}` has `{field}=` twice"));
            }
        }
        map
    };
    let mut take = |field: &str| fields.remove(field);
    let class_text = required(take("class"), name, "class")?;
    let class = class_text
        .parse::<EffectClass>()
        .map_err(|e| format!("`{name}`: {e}"))?;
    let mut d = Declaration::new(name, class);
    let field_err = |field: &str, e: String| format!("`{name}` {field}: {e}");
    if let Some(w) = take("one_write") {
        d.one_write = parse_yes(w).map_err(|e| field_err("one_write", e))?;
    }
    d.key = required(take("key"), name, "key")?.to_owned();
    d.window = parse_window(required(take("window"), name, "window")?).map_err(|e| format!("`{name}`: {e}"))?;
    if let Some(p) = take("principals") {
        d.shared_keys = match p {
            "shared" => true,
            "own" => false,
            other => return Err(field_err("principals", format!("`{other}` is not `shared`"))),
        };
    }
    if let Some(t) = take("ttl") {
        d.ttl = parse_optional_duration(t).map_err(|e| field_err("ttl", e))?;
    }
    if let Some(t) = take("timeout") {
        d.timeout = parse_optional_duration(t).map_err(|e| field_err("timeout", e))?;
    }
    if let Some(a) = take("approval") {
        (d.approval, d.approval_when) = parse_approval(a);
    }
    if let Some(t) = take("approval_ttl") {
        d.approval_ttl = parse_optional_duration(t).map_err(|e| field_err("approval_ttl", e))?;
    }
    if let Some(r) = take("recover") {
        d.recover = parse_yes(r).map_err(|e| field_err("recover", e))?;
    }
    if let Some(f) = take("recover_first") {
        d.recover_first = parse_yes(f).map_err(|e| field_err("recover_first", e))?;
    }
    if let Some(t) = take("recover_settle") {
        d.recover_settle = parse_optional_duration(t).map_err(|e| field_err("recover_settle", e))?;
    }
    if let Some(c) = take("compensate") {
        d.compensate = parse_yes(c).map_err(|e| field_err("compensate", e))?;
    }
    if let Some(s) = take("sensitive") {
        d.sensitive = parse_list(s);
    }
    if let Some(i) = take("injected") {
        d.injected = parse_list(i);
    }
    if let Some(r) = take("retry") {
        d.retry = parse_retry(r).map_err(|e| field_err("retry", e))?;
    }
    d.other = fields.into_iter().map(|(k, v)| (k.to_owned(), v.to_owned())).collect();
    Ok(d)
}

fn required<'a>(value: Option<&'a str>, name: &str, field: &str) -> Result<&'a str, String> {
    value.ok_or_else(|| format!("`{name}` has no `{field}=`: every tool line states its class, key and window"))
}

/// A line's `(field, value)` pairs, in order.
type Fields<'a> = Vec<(&'a str, &'a str)>;

/// The name, then each `field=value`: a field starts at a space followed by `word=`, outside
/// brackets and string literals (so a key closure or a condition may hold spaces and `=`).
fn split_fields(line: &str) -> Result<(&str, Fields<'_>), String> {
    let (name, rest) = line.split_once(' ').unwrap_or((line, ""));
    if name.is_empty() || name.contains('=') {
        return Err(format!("`{line}` does not start with a tool name"));
    }
    let bytes = rest.as_bytes();
    let field_at = |i: usize| {
        let word = bytes[i..]
            .iter()
            .take_while(|b| b.is_ascii_lowercase() || **b == b'_')
            .count();
        (word > 0 && bytes.get(i + word) == Some(&b'=')).then_some(word)
    };
    let mut starts = Vec::new();
    if !rest.is_empty() {
        if field_at(0).is_none() {
            return Err(format!(
                "`{name}`: expected `field=value` after the name, found `{rest}`"
            ));
        }
        starts.push(0);
    }
    let (mut depth, mut in_string, mut escaped) = (0i32, false, false);
    for (i, &b) in bytes.iter().enumerate() {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' => depth -= 1,
            b' ' if depth <= 0 && field_at(i + 1).is_some() => starts.push(i + 1),
            _ => {}
        }
    }
    let mut fields = Vec::with_capacity(starts.len());
    for (k, &start) in starts.iter().enumerate() {
        let end = starts.get(k + 1).map_or(rest.len(), |next| next - 1);
        let word = field_at(start).unwrap_or(0);
        fields.push((&rest[start..start + word], &rest[start + word + 1..end]));
    }
    Ok((name, fields))
}

fn parse_window(text: &str) -> Result<Window, String> {
    [Window::Run, Window::Thread, Window::CrossRun]
        .into_iter()
        .find(|w| w.as_str() == text)
        .ok_or_else(|| format!("unknown window `{text}`: expected run, thread or cross-run"))
}

fn parse_optional_duration(text: &str) -> Result<Option<Duration>, String> {
    if text == "-" {
        Ok(None)
    } else {
        parse_duration(text).map(Some)
    }
}

/// A duration as [`manifest::format_duration`] writes it: digits, then `ms`, `s`, `m`, `h` or `d`.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    let (number, unit) = text.split_at(digits);
    let bad = || format!("`{text}` is not a duration such as 500ms, 30s, 5m, 24h or 7d");
    let n: u64 = number.parse().map_err(|_| bad())?;
    let ms = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err(bad()),
    };
    n.checked_mul(ms).map(Duration::from_millis).ok_or_else(bad)
}

fn parse_approval(text: &str) -> (Option<String>, Option<String>) {
    if text == "-" {
        return (None, None);
    }
    match text.split_once(" when(") {
        Some((role, rest)) => (
            Some(role.to_owned()),
            Some(rest.strip_suffix(')').unwrap_or(rest).to_owned()),
        ),
        None => (Some(text.to_owned()), None),
    }
}

fn parse_yes(text: &str) -> Result<bool, String> {
    match text {
        "yes" => Ok(true),
        "no" => Ok(false),
        other => Err(format!("`{other}` is neither `yes` nor `no`")),
    }
}

fn parse_list(text: &str) -> Vec<String> {
    if text == "-" {
        Vec::new()
    } else {
        text.split(',').map(str::to_owned).collect()
    }
}

/// `<attempts>x<base>..<max>`.
fn parse_retry(text: &str) -> Result<RetryPolicy, String> {
    let bad = || format!("`{text}` is not `<attempts>x<base>..<max>` such as 3x100ms..10s");
    let (attempts, delays) = text.split_once('x').ok_or_else(bad)?;
    let (base, max) = delays.split_once("..").ok_or_else(bad)?;
    Ok(RetryPolicy {
        max_attempts: attempts.parse().map_err(|_| bad())?,
        base_delay: parse_duration(base)?,
        max_delay: parse_duration(max)?,
    })
}

// ---------------------------------------------------------------------------------------------
// The review

/// How much a change can hurt, and so where it appears in a [`Review`] (the riskiest first).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Risk {
    /// Safer, or only more cautious: more journaling, an approval added, a value kept out.
    Low,
    /// When or how the tool runs changes (timeouts, retries, expiry, roles); read it.
    Medium,
    /// A call may now run twice, run without a person, get another call's recorded result, or
    /// leave a sensitive value in the journal.
    High,
}

impl Risk {
    /// `"high"`, `"medium"` or `"low"`, as the text and the JSON write it.
    pub const fn as_str(self) -> &'static str {
        match self {
            Risk::High => "high",
            Risk::Medium => "medium",
            Risk::Low => "low",
        }
    }
}

/// One changed field of one tool, and what it does at run time.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Change {
    /// The tool (its new name when it was renamed).
    pub tool: String,
    /// The manifest field that changed: `class`, `key`, `window`, `principals`, `ttl`,
    /// `timeout`, `approval`, `recover`, `compensate`, `sensitive`, `injected`, `retry`,
    /// `strict`, `tool` (added, removed or renamed), or the name of a field this version does
    /// not know.
    pub field: String,
    /// How much it can hurt.
    pub risk: Risk,
    /// The field's text before (`None` when the tool was added).
    pub before: Option<String>,
    /// The field's text after (`None` when the tool was removed).
    pub after: Option<String>,
    /// What changed, in a few words: `irreversible → idempotent`, `approval removed`.
    pub summary: String,
    /// What the runtime now does differently, and what to confirm.
    pub effect: String,
}

impl Change {
    /// One line: `` `tool`: summary: effect ``.
    pub fn sentence(&self) -> String {
        format!("`{}`: {}: {}", self.tool, self.summary, self.effect)
    }
}

/// The changes between two sets of declarations, riskiest first (then by tool, then in the
/// order of the manifest's fields). Empty when no declaration changed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Review {
    /// The changes, riskiest first.
    pub changes: Vec<Change>,
}

/// What changed from `old` (the committed declarations) to `new`, riskiest first.
///
/// Tools are matched by name; a removed tool and an added one whose declarations are otherwise
/// equal are reported as one rename.
pub fn diff(old: &[Declaration], new: &[Declaration]) -> Review {
    let old_by: BTreeMap<&str, &Declaration> = old.iter().map(|d| (d.name.as_str(), d)).collect();
    let new_by: BTreeMap<&str, &Declaration> = new.iter().map(|d| (d.name.as_str(), d)).collect();
    let mut removed: Vec<&Declaration> = old_by
        .iter()
        .filter(|(n, _)| !new_by.contains_key(*n))
        .map(|(_, d)| *d)
        .collect();
    let mut added: Vec<&Declaration> = new_by
        .iter()
        .filter(|(n, _)| !old_by.contains_key(*n))
        .map(|(_, d)| *d)
        .collect();
    let mut changes = Vec::new();
    for (name, before) in &old_by {
        if let Some(after) = new_by.get(name) {
            changes.extend(changed_fields(before, after));
        }
    }
    for (before, after) in renames(&mut removed, &mut added) {
        changes.push(renamed(before, after));
    }
    changes.extend(removed.into_iter().map(tool_removed));
    changes.extend(added.into_iter().map(tool_added));
    changes.sort_by(|a, b| {
        b.risk
            .cmp(&a.risk)
            .then_with(|| a.tool.cmp(&b.tool))
            .then_with(|| field_rank(&a.field).cmp(&field_rank(&b.field)))
    });
    Review { changes }
}

/// [`diff`] of two manifests' texts: `old` the committed one, `new` the one printed now.
pub fn diff_manifests(old: &str, new: &str) -> Result<Review, ParseError> {
    Ok(diff(&parse(old)?, &parse(new)?))
}

/// The fields in the manifest's order, for sorting changes of one tool.
const FIELDS: [&str; 19] = [
    "tool",
    "class",
    "one_write",
    "key",
    "window",
    "principals",
    "ttl",
    "timeout",
    "approval",
    "approval_ttl",
    "recover",
    "recover_first",
    "recover_settle",
    "compensate",
    "sensitive",
    "injected",
    "retry",
    "strict",
    "output",
];

fn field_rank(field: &str) -> usize {
    FIELDS.iter().position(|f| *f == field).unwrap_or(FIELDS.len())
}

impl Review {
    /// Whether no declaration changed.
    pub fn is_empty(&self) -> bool {
        self.changes.is_empty()
    }

    /// Whether some change is at least as risky as `risk`.
    pub fn has_risk(&self, risk: Risk) -> bool {
        self.changes.iter().any(|c| c.risk >= risk)
    }

    /// How many changes of each risk: `(high, medium, low)`.
    pub fn counts(&self) -> (usize, usize, usize) {
        let count = |r: Risk| self.changes.iter().filter(|c| c.risk == r).count();
        (count(Risk::High), count(Risk::Medium), count(Risk::Low))
    }

    /// For a terminal: one line per change, `<risk padded to 7> <sentence>`, riskiest first, or
    /// `no declaration changed` when empty. Ends with a newline.
    pub fn to_text(&self) -> String {
        if self.is_empty() {
            return "no declaration changed\n".to_owned();
        }
        let mut out = String::new();
        for c in &self.changes {
            let _ = writeln!(out, "{:<7} {}", c.risk.as_str(), c.sentence());
        }
        out
    }

    /// For a pull-request comment: a heading with the counts, then a table (risk, tool, change,
    /// what it does at run time), riskiest first. Cell text escapes `|`, so closures stay in
    /// their cell.
    pub fn to_markdown(&self) -> String {
        if self.is_empty() {
            return "### effect-tool: no declaration changed\n".to_owned();
        }
        let (high, medium, low) = self.counts();
        let mut out = format!(
            "### effect-tool: {} declaration change{} to review ({high} high, {medium} medium, {low} low)\n\n\
             | risk | tool | change | at run time |\n|---|---|---|---|\n",
            self.changes.len(),
            if self.changes.len() == 1 { "" } else { "s" },
        );
        for c in &self.changes {
            let risk = match c.risk {
                Risk::High => "**high**".to_owned(),
                other => other.as_str().to_owned(),
            };
            let _ = writeln!(
                out,
                "| {risk} | `{}` | {} | {} |",
                cell(&c.tool),
                cell(&c.summary),
                cell(&c.effect)
            );
        }
        out
    }

    /// For scripts: `{"changes": [{"tool", "field", "risk", "before", "after", "summary",
    /// "effect"}...], "counts": {"high", "medium", "low"}}`. `risk` is `"high"`, `"medium"` or
    /// `"low"`; `before` is `null` for an added tool, `after` for a removed one; the field
    /// names are stable.
    pub fn to_json(&self) -> Value {
        let (high, medium, low) = self.counts();
        json!({
            "changes": self.changes.iter().map(|c| json!({
                "tool": c.tool,
                "field": c.field,
                "risk": c.risk.as_str(),
                "before": c.before,
                "after": c.after,
                "summary": c.summary,
                "effect": c.effect,
            })).collect::<Vec<_>>(),
            "counts": { "high": high, "medium": medium, "low": low },
        })
    }
}

/// Markdown table cell text: `|` escaped (GitHub keeps it escaped inside code spans too).
fn cell(text: &str) -> String {
    text.replace('|', "\\|")
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

// ---------------------------------------------------------------------------------------------
// What each change does

/// A change of one field; `tool` is filled in by the caller.
struct Said {
    field: String,
    risk: Risk,
    before: Option<String>,
    after: Option<String>,
    summary: String,
    effect: String,
}

fn said(field: &'static str, risk: Risk, before: String, after: String, summary: String, effect: String) -> Said {
    Said {
        field: field.to_owned(),
        risk,
        before: Some(before),
        after: Some(after),
        summary,
        effect,
    }
}

/// Every changed field of one tool, in the manifest's order.
fn changed_fields(before: &Declaration, after: &Declaration) -> Vec<Change> {
    let mut out: Vec<Said> = Vec::new();
    if before.class != after.class {
        out.push(class_change(before, after));
    }
    if before.one_write != after.one_write {
        out.push(one_write_change(after.one_write));
    }
    if before.key != after.key {
        out.push(key_change(before, after));
    }
    if before.window != after.window {
        out.push(window_change(before.window, after.window));
    }
    if before.shared_keys != after.shared_keys {
        out.push(principals_change(after.shared_keys));
    }
    if before.ttl != after.ttl {
        out.push(ttl_change(before.ttl, after.ttl));
    }
    if before.timeout != after.timeout {
        out.push(timeout_change(before.timeout, after));
    }
    out.extend(approval_changes(before, after));
    if before.approval_ttl != after.approval_ttl {
        out.push(approval_ttl_change(before.approval_ttl, after.approval_ttl));
    }
    if before.recover != after.recover {
        out.push(recover_change(after));
    }
    if before.recover_first != after.recover_first {
        out.push(recover_first_change(after.recover_first));
    }
    if before.recover_settle != after.recover_settle {
        out.push(recover_settle_change(before.recover_settle, after.recover_settle));
    }
    if before.compensate != after.compensate {
        out.push(compensate_change(after.compensate));
    }
    out.extend(sensitive_changes(before, after));
    out.extend(injected_changes(before, after));
    if before.retry != after.retry {
        out.push(retry_change(before.retry, after.retry));
    }
    if before.not_strict != after.not_strict {
        out.push(strict_change(&before.not_strict, &after.not_strict));
    }
    if before.output != after.output {
        out.push(output_change(before.output.as_deref(), after.output.as_deref()));
    }
    out.extend(other_changes(before, after));
    out.into_iter()
        .map(|s| Change {
            tool: after.name.clone(),
            field: s.field,
            risk: s.risk,
            before: s.before,
            after: s.after,
            summary: s.summary,
            effect: s.effect,
        })
        .collect()
}

/// What the runtime does with a call whose outcome is unknown, for `d`'s class and hooks.
fn unknown_outcome(d: &Declaration) -> &'static str {
    match (d.class, d.recover) {
        (EffectClass::Pure, _) => "it is retried",
        (EffectClass::Idempotent, false) => "it runs again with the same key",
        (EffectClass::Idempotent, true) => {
            "`recover` is asked whether it landed; if it did not, it runs again with the same key"
        }
        (_, true) => {
            "`recover` is asked whether it landed; if it did not, it runs again; if `recover` fails, it waits for a person"
        }
        (_, false) => "it waits for a person",
    }
}

fn class_change(before: &Declaration, after: &Declaration) -> Said {
    use EffectClass::{Compensable, Idempotent, Irreversible, Pure};
    let (risk, effect) = match (before.class, after.class) {
        (_, Pure) => (
            Risk::High,
            "the runtime will no longer journal it: every call runs, a retried or repeated call included, \
             with no record to replay; confirm it changes nothing",
        ),
        (Compensable | Irreversible, Idempotent) => (
            Risk::High,
            "the runtime will now retry it and re-run an unknown outcome with the same key; \
             confirm the provider honours `Idempotency-Key`",
        ),
        (Irreversible, Compensable) => (
            Risk::High,
            "the runtime will now retry it once it has checked the first attempt did not land, and run \
             `compensate` when a run is abandoned; confirm the compensation undoes it",
        ),
        (Pure, Idempotent) => (
            Risk::Low,
            "the runtime will now journal it: a call with the same key gets the recorded result instead of running again",
        ),
        (Pure, Compensable) => (
            Risk::Low,
            "the runtime will now journal it, retry it only after checking whether the first attempt landed, \
             and run `compensate` when a run is abandoned",
        ),
        (Idempotent, Compensable) => (
            Risk::Low,
            "the runtime will now retry it only after checking whether the first attempt landed (an unknown \
             outcome no longer runs again), and run `compensate` when a run is abandoned",
        ),
        (Pure, Irreversible) => (
            Risk::Low,
            "the runtime will now journal it and run it at most once: an unknown outcome goes to `recover` \
             or waits for a person",
        ),
        (Idempotent, Irreversible) => (
            Risk::Low,
            "the runtime will now run it at most once: an unknown outcome goes to `recover` or waits for a \
             person instead of running again",
        ),
        (Compensable, Irreversible) => (
            Risk::Low,
            "the runtime will now run it at most once and no longer compensate it when a run is abandoned",
        ),
        (Idempotent, Idempotent) | (Compensable, Compensable) | (Irreversible, Irreversible) => {
            unreachable!("the class changed")
        }
    };
    said(
        "class",
        risk,
        before.class.to_string(),
        after.class.to_string(),
        format!("{} → {}", before.class, after.class),
        effect.to_owned(),
    )
}

/// The fields of a `fields(a, b)` key, or `None` for `default` and custom keys.
fn key_fields(key: &str) -> Option<BTreeSet<&str>> {
    let inner = key.strip_prefix("fields(")?.strip_suffix(')')?;
    Some(inner.split(',').map(str::trim).filter(|f| !f.is_empty()).collect())
}

fn ticked(names: &[&str]) -> String {
    names.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ")
}

fn key_change(before: &Declaration, after: &Declaration) -> Said {
    let mut effect =
        "calls recorded under the old key will not be replayed: a call retried across the change runs again".to_owned();
    let detail = match (before.key.as_str(), key_fields(&before.key), key_fields(&after.key)) {
        (_, Some(old), Some(new)) => {
            let dropped: Vec<&str> = old.difference(&new).copied().collect();
            let gained: Vec<&str> = new.difference(&old).copied().collect();
            let mut parts = Vec::new();
            if !dropped.is_empty() {
                parts.push(format!(
                    "calls that differ only in {} now share a key: the second gets the first's recorded result instead of running",
                    ticked(&dropped)
                ));
            }
            if !gained.is_empty() {
                parts.push(format!("calls that differ only in {} are now separate effects", ticked(&gained)));
            }
            parts.join("; ")
        }
        ("default", None, Some(new)) => format!(
            "only {} key it now: calls that differ in any other argument share a key, and the second gets the \
             first's recorded result instead of running",
            ticked(&new.into_iter().collect::<Vec<_>>())
        ),
        (_, Some(_), None) if after.key == "default" => {
            "every argument keys it now (sensitive ones left out): calls that differ in any argument are separate effects"
                .to_owned()
        }
        _ => "read the new key: calls it maps to one key share one result, and only the first runs".to_owned(),
    };
    if !detail.is_empty() {
        effect.push_str("; ");
        effect.push_str(&detail);
    }
    said(
        "key",
        Risk::High,
        before.key.clone(),
        after.key.clone(),
        format!("key changed from `{}` to `{}`", before.key, after.key),
        effect,
    )
}

fn window_rank(w: Window) -> u8 {
    match w {
        Window::Run => 0,
        Window::Thread => 1,
        Window::CrossRun => 2,
    }
}

fn window_change(before: Window, after: Window) -> Said {
    let effect = match (before, after) {
        (Window::CrossRun, Window::Thread) => "a call repeated in another thread is no longer replayed: it runs again",
        (_, Window::Run) => "a call repeated in a later run is no longer replayed: it runs again",
        (_, Window::Thread) => {
            "a call with the same key in a later run of the same thread now gets the recorded result instead of running"
        }
        (_, Window::CrossRun) => {
            "a call with the same key in any run now gets the recorded result (until the ttl) instead of running"
        }
    };
    let verb = if window_rank(after) < window_rank(before) {
        "narrowed"
    } else {
        "widened"
    };
    said(
        "window",
        Risk::High,
        before.to_string(),
        after.to_string(),
        format!("window {verb}: {before} → {after}"),
        format!("{effect}; {KEYS_MOVE}"),
    )
}

/// What a change of a key's scope (window, principals) does to the calls already recorded.
const KEYS_MOVE: &str = "the keys change with it: calls recorded before will not be replayed";

fn principals_change(shared: bool) -> Said {
    let (before, after) = if shared { ("own", "shared") } else { ("shared", "own") };
    let (summary, effect) = if shared {
        (
            "keys now shared by every principal",
            "a call by one principal gets the recorded result of another principal's call with the same key, \
             and can pre-empt it; confirm the key says whose effect it is",
        )
    } else {
        (
            "keys now each principal's own",
            "a call recorded for one principal is no longer replayed for another: it runs again",
        )
    };
    said(
        "principals",
        Risk::High,
        before.into(),
        after.into(),
        summary.into(),
        format!("{effect}; {KEYS_MOVE} (under an authenticated principal, in a cross-run window)"),
    )
}

fn text_of(d: Option<Duration>) -> String {
    d.map_or_else(|| "-".to_owned(), manifest::format_duration)
}

fn ttl_change(before: Option<Duration>, after: Option<Duration>) -> Said {
    let (risk, summary, effect) = match (before, after) {
        (_, None) => (
            Risk::Low,
            format!("ttl {} removed", text_of(before)),
            "records are kept until removed: a repeated call gets the recorded result however late".to_owned(),
        ),
        (None, Some(b)) => (
            Risk::Medium,
            format!("ttl {} added", text_of(after)),
            format!(
                "records may be dropped after {}: a call repeated after that runs again",
                text_of(Some(b))
            ),
        ),
        (Some(a), Some(b)) if b < a => (
            Risk::Medium,
            format!("ttl shortened: {} → {}", text_of(before), text_of(after)),
            format!(
                "records may be dropped after {}: a call repeated after that runs again",
                text_of(Some(b))
            ),
        ),
        (Some(_), Some(b)) => (
            Risk::Low,
            format!("ttl lengthened: {} → {}", text_of(before), text_of(after)),
            format!(
                "records are kept longer: a call repeated within {} gets the recorded result",
                text_of(Some(b))
            ),
        ),
    };
    said("ttl", risk, text_of(before), text_of(after), summary, effect)
}

fn timeout_change(before: Option<Duration>, after: &Declaration) -> Said {
    let now = after.timeout;
    let (risk, summary, effect) = match (before, now) {
        (_, None) => (
            Risk::Medium,
            format!("timeout {} removed", text_of(before)),
            "a call that hangs is no longer stopped by a timeout of its own".to_owned(),
        ),
        (None, Some(b)) => (
            Risk::Medium,
            format!("timeout {} added", text_of(now)),
            format!(
                "a call still running after {} is stopped and its outcome is unknown: {}",
                text_of(Some(b)),
                unknown_outcome(after)
            ),
        ),
        (Some(a), Some(b)) if b < a => (
            Risk::Medium,
            format!("timeout shortened: {} → {}", text_of(before), text_of(now)),
            format!(
                "a call still running after {} is stopped and its outcome is unknown: {}",
                text_of(Some(b)),
                unknown_outcome(after)
            ),
        ),
        (Some(_), Some(b)) => (
            Risk::Low,
            format!("timeout lengthened: {} → {}", text_of(before), text_of(now)),
            format!(
                "a call may run up to {} before its outcome counts as unknown",
                text_of(Some(b))
            ),
        ),
    };
    said("timeout", risk, text_of(before), text_of(now), summary, effect)
}

fn approval_text(d: &Declaration) -> String {
    match (&d.approval, &d.approval_when) {
        (None, _) => "-".to_owned(),
        (Some(role), None) => role.clone(),
        (Some(role), Some(when)) => format!("{role} when({when})"),
    }
}

fn approval_changes(before: &Declaration, after: &Declaration) -> Vec<Said> {
    let (b, a) = (approval_text(before), approval_text(after));
    let mk = |risk, summary: String, effect: String| said("approval", risk, b.clone(), a.clone(), summary, effect);
    match (&before.approval, &after.approval) {
        (None, None) => Vec::new(),
        (Some(role), None) => vec![mk(
            Risk::High,
            "approval removed".into(),
            format!("calls now run without waiting for `{role}` to approve them"),
        )],
        (None, Some(role)) => vec![mk(
            Risk::Low,
            "approval added".into(),
            match &after.approval_when {
                None => format!("every call now waits for `{role}` to approve it before it runs"),
                Some(when) => {
                    format!("a call where `{when}` holds now waits for `{role}` to approve it before it runs")
                }
            },
        )],
        (Some(old), Some(new)) => {
            let mut out = Vec::new();
            if old != new {
                out.push(mk(
                    Risk::Medium,
                    format!("approval role changed: `{old}` → `{new}`"),
                    format!("calls now wait for `{new}` to approve them; `{old}` can no longer approve them"),
                ));
            }
            match (&before.approval_when, &after.approval_when) {
                (None, Some(when)) => out.push(mk(
                    Risk::High,
                    "approval now conditional".into(),
                    format!("only a call where `{when}` holds waits for `{new}`: the others run without approval"),
                )),
                (Some(_), None) => out.push(mk(
                    Risk::Low,
                    "approval condition removed".into(),
                    format!("every call now waits for `{new}` to approve it"),
                )),
                (Some(was), Some(when)) if was != when => out.push(mk(
                    Risk::High,
                    "approval condition changed".into(),
                    format!(
                        "a call now waits for `{new}` only where `{when}` holds (was `{was}`): check which calls now run without approval"
                    ),
                )),
                _ => {}
            }
            out
        }
    }
}

/// An approval's ttl changed (`None`: the journal's default, 24 hours).
fn approval_ttl_change(before: Option<Duration>, after: Option<Duration>) -> Said {
    const DAY: Duration = Duration::from_secs(24 * 3600);
    let (b, a) = (before.unwrap_or(DAY), after.unwrap_or(DAY));
    let text = |d: Option<Duration>| d.map_or_else(|| "24h (default)".to_owned(), manifest::format_duration);
    let (risk, summary, effect) = if a > b {
        (
            Risk::Medium,
            format!("approval ttl lengthened: {} → {}", text(before), text(after)),
            format!(
                "an approval now lets the approved call run up to {} after it was given: a decision made on older facts still counts",
                text(after)
            ),
        )
    } else {
        (
            Risk::Low,
            format!("approval ttl shortened: {} → {}", text(before), text(after)),
            format!(
                "a call that comes more than {} after its approval parks again for a new one",
                text(after)
            ),
        )
    };
    said("approval_ttl", risk, text_of(before), text_of(after), summary, effect)
}

fn yes(b: bool) -> String {
    if b { "yes" } else { "no" }.to_owned()
}

fn recover_change(after: &Declaration) -> Said {
    if after.recover {
        return said(
            "recover",
            Risk::Low,
            yes(false),
            yes(true),
            "recover hook added".into(),
            "an unknown outcome is first reconciled: the hook asks the provider whether the effect landed".into(),
        );
    }
    let effect = match after.class {
        EffectClass::Pure => "nothing at run time: a pure tool is not journaled",
        EffectClass::Idempotent => "an unknown outcome runs again with the same key without asking the provider first",
        EffectClass::Compensable | EffectClass::Irreversible => {
            "an unknown outcome is no longer reconciled: it waits for a person to resolve it"
        }
    };
    said(
        "recover",
        Risk::Medium,
        yes(true),
        yes(false),
        "recover hook removed".into(),
        effect.into(),
    )
}

/// An idempotent tool's calls run before any journal write (`one_write`), or are claimed again.
fn one_write_change(now: bool) -> Said {
    if now {
        said(
            "one_write",
            Risk::Medium,
            yes(false),
            yes(true),
            "calls now run before any journal write (one_write)".into(),
            "a call whose key has no record runs unclaimed and its record is its one write: while it runs `effect-tool list` shows nothing in flight, and an identical call in another process runs too, with the same key; confirm the provider applies a key once (`Idempotency-Key`)".into(),
        )
    } else {
        said(
            "one_write",
            Risk::Low,
            yes(true),
            yes(false),
            "calls claimed before they run again (one_write removed)".into(),
            "each call writes a claim before it runs and its record after: an identical call in another process waits for it instead of running too; one more journal write per call".into(),
        )
    }
}

/// `recover` asked before every first execution, or no longer.
fn recover_first_change(now: bool) -> Said {
    if now {
        said(
            "recover_first",
            Risk::Low,
            yes(false),
            yes(true),
            "recover asked first".into(),
            "asks the remote before every first execution: an effect the journal does not know of (a restored journal, an expired record) is recorded instead of made again; one more `recover` call per first execution".into(),
        )
    } else {
        said(
            "recover_first",
            Risk::Medium,
            yes(true),
            yes(false),
            "recover no longer asked first".into(),
            "a first execution no longer asks the remote: after a journal is restored from a backup, or a record expires, the effect is made again".into(),
        )
    }
}

/// The settle delay before `recover` is asked changed (`None`: at once).
fn recover_settle_change(before: Option<Duration>, after: Option<Duration>) -> Said {
    let text = |d: Option<Duration>| d.map_or_else(|| "none".to_owned(), manifest::format_duration);
    let (b, a) = (before.unwrap_or_default(), after.unwrap_or_default());
    let (risk, summary, effect) = if a < b {
        (
            Risk::Medium,
            format!("recover settle shortened: {} → {}", text(before), text(after)),
            format!(
                "`recover` is now asked {} an unknown outcome: a write the remote shows later than that is answered \"not applied\", and the effect can be made again",
                after.map_or_else(
                    || "at once after".to_owned(),
                    |d| format!("{} after", manifest::format_duration(d))
                )
            ),
        )
    } else {
        (
            Risk::Low,
            format!("recover settle lengthened: {} → {}", text(before), text(after)),
            format!(
                "`recover` waits {} after an unknown outcome before asking: a call in doubt takes that long to settle",
                text(after)
            ),
        )
    };
    said("recover_settle", risk, text_of(before), text_of(after), summary, effect)
}

fn compensate_change(now: bool) -> Said {
    if now {
        said(
            "compensate",
            Risk::Low,
            yes(false),
            yes(true),
            "compensate hook added".into(),
            "an abandoned run now undoes it with the hook".into(),
        )
    } else {
        said(
            "compensate",
            Risk::Medium,
            yes(true),
            yes(false),
            "compensate hook removed".into(),
            "an abandoned run no longer undoes it".into(),
        )
    }
}

fn list_text(list: &[String]) -> String {
    if list.is_empty() {
        "-".to_owned()
    } else {
        list.join(",")
    }
}

fn sensitive_changes(before: &Declaration, after: &Declaration) -> Vec<Said> {
    let (b, a) = (list_text(&before.sensitive), list_text(&after.sensitive));
    let default_key = after.key == "default";
    let mut out = Vec::new();
    for field in before.sensitive.iter().filter(|f| !after.sensitive.contains(f)) {
        let mut effect =
            "the journal, logs and error texts will now keep the value the model sends; confirm it may be kept"
                .to_owned();
        if default_key {
            effect.push_str("; the default key now includes it, so calls recorded before will not be replayed");
        }
        out.push(said(
            "sensitive",
            Risk::High,
            b.clone(),
            a.clone(),
            format!("`{field}` no longer sensitive"),
            effect,
        ));
    }
    for field in after.sensitive.iter().filter(|f| !before.sensitive.contains(f)) {
        let mut effect = "the journal, logs and error texts no longer keep its value".to_owned();
        let risk = if default_key {
            effect.push_str("; the default key now leaves it out, so calls recorded before will not be replayed");
            Risk::Medium
        } else {
            Risk::Low
        };
        out.push(said(
            "sensitive",
            risk,
            b.clone(),
            a.clone(),
            format!("`{field}` now sensitive"),
            effect,
        ));
    }
    out
}

fn injected_changes(before: &Declaration, after: &Declaration) -> Vec<Said> {
    let (b, a) = (list_text(&before.injected), list_text(&after.injected));
    let mut out = Vec::new();
    for ty in after.injected.iter().filter(|t| !before.injected.contains(t)) {
        out.push(said(
            "injected",
            Risk::Medium,
            b.clone(),
            a.clone(),
            format!("now takes `{ty}` from the run"),
            format!(
                "a run that does not give a `{ty}` (`RunContext::with_value`) now fails the call with a missing value; \
                 confirm every caller gives it"
            ),
        ));
    }
    for ty in before.injected.iter().filter(|t| !after.injected.contains(t)) {
        out.push(said(
            "injected",
            Risk::Low,
            b.clone(),
            a.clone(),
            format!("no longer takes `{ty}` from the run"),
            "a run no longer needs to give it".into(),
        ));
    }
    out
}

fn retry_text(r: RetryPolicy) -> String {
    format!(
        "{}x{}..{}",
        r.max_attempts,
        manifest::format_duration(r.base_delay),
        manifest::format_duration(r.max_delay)
    )
}

fn retry_change(before: RetryPolicy, after: RetryPolicy) -> Said {
    let risk = if after.max_attempts > before.max_attempts {
        Risk::Medium
    } else {
        Risk::Low
    };
    said(
        "retry",
        risk,
        retry_text(before),
        retry_text(after),
        format!("retry {} → {}", retry_text(before), retry_text(after)),
        format!(
            "up to {} attempt{} per call (was {}), {}..{} apart",
            after.max_attempts,
            if after.max_attempts == 1 { "" } else { "s" },
            before.max_attempts,
            manifest::format_duration(after.base_delay),
            manifest::format_duration(after.max_delay),
        ),
    )
}

fn strict_change(before: &[String], after: &[String]) -> Said {
    let text = |r: &[String]| {
        if r.is_empty() {
            "strict".to_owned()
        } else {
            format!("not strict: {}", r.join("; "))
        }
    };
    let (risk, summary, effect) = match (before.is_empty(), after.is_empty()) {
        (_, true) => (
            Risk::Low,
            "now strict",
            "its schema can be sent with OpenAI's `\"strict\": true`".to_owned(),
        ),
        (true, false) => (
            Risk::Medium,
            "no longer strict",
            format!(
                "its schema can no longer be sent with OpenAI's `\"strict\": true`: {}",
                after.join("; ")
            ),
        ),
        (false, false) => (
            Risk::Low,
            "still not strict, for other reasons",
            format!("now: {}", after.join("; ")),
        ),
    };
    said("strict", risk, text(before), text(after), summary.to_owned(), effect)
}

/// The type of an `# output:` line's text (`<type> schema=<digest>`).
fn output_type(text: &str) -> &str {
    text.rsplit_once(" schema=").map_or(text, |(ty, _)| ty)
}

fn output_change(before: Option<&str>, after: Option<&str>) -> Said {
    let text = |o: Option<&str>| o.unwrap_or("-").to_owned();
    let (risk, summary, effect) = match (before, after) {
        (Some(b), Some(a)) if output_type(b) != output_type(a) => (
            Risk::Medium,
            format!("output type `{}` → `{}`", output_type(b), output_type(a)),
            "results recorded with the old type are replayed as they were recorded: one that no longer decodes fails its replay as a codec error for a person; MCP clients get the new `outputSchema`",
        ),
        (Some(b), Some(_)) => (
            Risk::Medium,
            format!("output type `{}` changed shape", output_type(b)),
            "its JSON Schema changed (a field added, removed, renamed or retyped): results recorded before may no longer decode when replayed, and MCP clients that check `structuredContent` get the new `outputSchema`",
        ),
        (None, Some(a)) => (
            Risk::Low,
            format!("output declared as `{}`", output_type(a)),
            "MCP clients now get an `outputSchema` and `structuredContent` checked against it",
        ),
        (Some(b), None) => (
            Risk::Low,
            format!("output `{}` no longer declared", output_type(b)),
            "MCP clients no longer get an `outputSchema`; outputs recorded by hand are no longer checked",
        ),
        (None, None) => (Risk::Low, "output unchanged".to_owned(), ""),
    };
    said("output", risk, text(before), text(after), summary, effect.to_owned())
}

fn other_changes(before: &Declaration, after: &Declaration) -> Vec<Said> {
    let names: BTreeSet<&String> = before.other.keys().chain(after.other.keys()).collect();
    names
        .into_iter()
        .filter(|n| before.other.get(*n) != after.other.get(*n))
        .map(|n| {
            let b = before.other.get(n).cloned().unwrap_or_else(|| "-".to_owned());
            let a = after.other.get(n).cloned().unwrap_or_else(|| "-".to_owned());
            Said {
                field: n.clone(),
                risk: Risk::Medium,
                summary: format!("{n} {b} → {a}"),
                before: Some(b),
                after: Some(a),
                effect: "this version of effect-tool cannot say what this field does at run time: read the declaration"
                    .into(),
            }
        })
        .collect()
}

/// Pairs of a removed and an added tool whose declarations differ only in the name (each used
/// once), taken out of both lists.
fn renames<'a>(
    removed: &mut Vec<&'a Declaration>,
    added: &mut Vec<&'a Declaration>,
) -> Vec<(&'a Declaration, &'a Declaration)> {
    let mut pairs = Vec::new();
    removed.retain(|old| {
        let same = added.iter().position(|new| {
            Declaration {
                name: old.name.clone(),
                ..(*new).clone()
            } == **old
        });
        match same {
            Some(i) => {
                pairs.push((*old, added.remove(i)));
                false
            }
            None => true,
        }
    });
    pairs
}

fn renamed(before: &Declaration, after: &Declaration) -> Change {
    let effect = if after.class == EffectClass::Pure {
        "the model now calls it by the new name".to_owned()
    } else {
        format!(
            "the tool's name is part of its keys: calls recorded under `{}` will not be replayed under `{}`, \
             so a call retried across the change runs again",
            before.name, after.name
        )
    };
    Change {
        tool: after.name.clone(),
        field: "tool".into(),
        risk: if after.class == EffectClass::Pure {
            Risk::Low
        } else {
            Risk::High
        },
        before: Some(before.name.clone()),
        after: Some(after.name.clone()),
        summary: format!("renamed from `{}`", before.name),
        effect,
    }
}

fn tool_removed(d: &Declaration) -> Change {
    Change {
        tool: d.name.clone(),
        field: "tool".into(),
        risk: Risk::Medium,
        before: Some(manifest_fields(d)),
        after: None,
        summary: format!("tool removed ({})", d.class),
        effect: "the model can no longer call it; its records stay in the journal for operators".into(),
    }
}

fn tool_added(d: &Declaration) -> Change {
    let unapproved = matches!(d.class, EffectClass::Compensable | EffectClass::Irreversible) && d.approval.is_none();
    let what = match d.class {
        EffectClass::Pure => "it is not journaled and is retried freely",
        EffectClass::Idempotent => "it is journaled and retried, and an unknown outcome runs again with the same key",
        EffectClass::Compensable => {
            "it is journaled, retried only after checking whether the first attempt landed, and compensated when a run is abandoned"
        }
        EffectClass::Irreversible => {
            "it is journaled and runs at most once: an unknown outcome goes to `recover` or waits for a person"
        }
    };
    let approval = match (&d.approval, &d.approval_when) {
        (None, _) => "no approval".to_owned(),
        (Some(role), None) => format!("approval `{role}`"),
        (Some(role), Some(when)) => format!("approval `{role}` when `{when}`"),
    };
    Change {
        tool: d.name.clone(),
        field: "tool".into(),
        risk: if unapproved { Risk::Medium } else { Risk::Low },
        before: None,
        after: Some(manifest_fields(d)),
        summary: format!("tool added ({}, {approval})", d.class),
        effect: format!("the model can call it now; {what}"),
    }
}

/// `d`'s manifest line without the name (for a tool added or removed).
fn manifest_fields(d: &Declaration) -> String {
    let mut s = format!(
        "class={}{} key={} window={}{} ttl={} timeout={} approval={}{} recover={}{}{} compensate={} sensitive={} injected={} retry={}",
        d.class,
        if d.one_write { " one_write=yes" } else { "" },
        d.key,
        d.window,
        if d.shared_keys { " principals=shared" } else { "" },
        text_of(d.ttl),
        text_of(d.timeout),
        approval_text(d),
        d.approval_ttl
            .map(|t| format!(" approval_ttl={}", text_of(Some(t))))
            .unwrap_or_default(),
        yes(d.recover),
        if d.recover_first { " recover_first=yes" } else { "" },
        d.recover_settle
            .map(|t| format!(" recover_settle={}", text_of(Some(t))))
            .unwrap_or_default(),
        yes(d.compensate),
        list_text(&d.sensitive),
        list_text(&d.injected),
        retry_text(d.retry),
    );
    for (k, v) in &d.other {
        let _ = write!(s, " {k}={v}");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = "t class=idempotent key=fields(order_id, amount_cents) window=thread ttl=1d timeout=30s \
                        approval=finance recover=yes compensate=no sensitive=card injected=- retry=3x100ms..10s";

    fn manifest_of(lines: &[&str]) -> String {
        let mut text = format!("{}\n", manifest::HEADER);
        for l in lines {
            text.push_str(l);
            text.push('\n');
        }
        text
    }

    /// The review of `BASE` changed by replacing `from` with `to`, one sentence per change.
    fn said_of(from: &str, to: &str) -> Vec<String> {
        assert!(BASE.contains(from), "{from}");
        let review = diff_manifests(&manifest_of(&[BASE]), &manifest_of(&[&BASE.replace(from, to)])).unwrap();
        review
            .changes
            .iter()
            .map(|c| format!("{} {}", c.risk.as_str(), c.sentence()))
            .collect()
    }

    fn one(from: &str, to: &str) -> String {
        let mut all = said_of(from, to);
        assert_eq!(all.len(), 1, "{all:#?}");
        all.remove(0)
    }

    #[test]
    fn class_changes() {
        assert_eq!(
            one("class=idempotent", "class=pure"),
            "high `t`: idempotent → pure: the runtime will no longer journal it: every call runs, a retried or \
             repeated call included, with no record to replay; confirm it changes nothing"
        );
        let base = BASE.replace("class=idempotent", "class=irreversible");
        let review = diff_manifests(&manifest_of(&[&base]), &manifest_of(&[BASE])).unwrap();
        assert_eq!(
            review.changes[0].sentence(),
            "`t`: irreversible → idempotent: the runtime will now retry it and re-run an unknown outcome with \
             the same key; confirm the provider honours `Idempotency-Key`"
        );
        assert_eq!(review.changes[0].risk, Risk::High);
        assert_eq!(
            one("class=idempotent", "class=irreversible"),
            "low `t`: idempotent → irreversible: the runtime will now run it at most once: an unknown outcome \
             goes to `recover` or waits for a person instead of running again"
        );
        assert_eq!(
            one("class=idempotent", "class=compensable"),
            "low `t`: idempotent → compensable: the runtime will now retry it only after checking whether the \
             first attempt landed (an unknown outcome no longer runs again), and run `compensate` when a run is abandoned"
        );
        // Every pair of classes says something, and a weaker class is always high.
        for from in EffectClass::ALL {
            for to in EffectClass::ALL.into_iter().filter(|c| *c != from) {
                let (a, b) = (Declaration::new("t", from), Declaration::new("t", to));
                let c = &diff(&[a], &[b]).changes[0];
                assert_eq!(c.summary, format!("{from} → {to}"));
                let weaker =
                    EffectClass::ALL.iter().position(|c| *c == to) < EffectClass::ALL.iter().position(|c| *c == from);
                assert_eq!(c.risk == Risk::High, weaker, "{from} → {to}");
            }
        }
    }

    #[test]
    fn key_changes() {
        assert_eq!(
            one("key=fields(order_id, amount_cents)", "key=fields(order_id)"),
            "high `t`: key changed from `fields(order_id, amount_cents)` to `fields(order_id)`: calls recorded under \
             the old key will not be replayed: a call retried across the change runs again; calls that differ only \
             in `amount_cents` now share a key: the second gets the first's recorded result instead of running"
        );
        assert_eq!(
            one(
                "key=fields(order_id, amount_cents)",
                "key=fields(order_id, amount_cents, currency)"
            ),
            "high `t`: key changed from `fields(order_id, amount_cents)` to `fields(order_id, amount_cents, currency)`: \
             calls recorded under the old key will not be replayed: a call retried across the change runs again; \
             calls that differ only in `currency` are now separate effects"
        );
        assert_eq!(
            one("key=fields(order_id, amount_cents)", "key=default"),
            "high `t`: key changed from `fields(order_id, amount_cents)` to `default`: calls recorded under the old \
             key will not be replayed: a call retried across the change runs again; every argument keys it now \
             (sensitive ones left out): calls that differ in any argument are separate effects"
        );
        let from_default = diff(
            &[Declaration::new("t", EffectClass::Idempotent)],
            &[Declaration {
                key: "fields(order_id)".into(),
                ..Declaration::new("t", EffectClass::Idempotent)
            }],
        );
        assert!(
            from_default.changes[0]
                .effect
                .ends_with("; only `order_id` key it now: calls that differ in any other argument share a key, and the second gets the first's recorded result instead of running"),
            "{from_default:?}"
        );
        assert_eq!(
            one(
                "key=fields(order_id, amount_cents)",
                "key=custom(|a| format!(\"refund:{}\", a.order_id))"
            ),
            "high `t`: key changed from `fields(order_id, amount_cents)` to `custom(|a| format!(\"refund:{}\", a.order_id))`: \
             calls recorded under the old key will not be replayed: a call retried across the change runs again; \
             read the new key: calls it maps to one key share one result, and only the first runs"
        );
    }

    #[test]
    fn window_and_principal_changes() {
        assert_eq!(
            one("window=thread", "window=run"),
            "high `t`: window narrowed: thread → run: a call repeated in a later run is no longer replayed: it runs again; \
             the keys change with it: calls recorded before will not be replayed"
        );
        assert_eq!(
            one("window=thread", "window=cross-run"),
            "high `t`: window widened: thread → cross-run: a call with the same key in any run now gets the \
             recorded result (until the ttl) instead of running; the keys change with it: calls recorded before will \
             not be replayed"
        );
        assert_eq!(
            one("window=thread", "window=thread principals=shared"),
            "high `t`: keys now shared by every principal: a call by one principal gets the recorded result of \
             another principal's call with the same key, and can pre-empt it; confirm the key says whose effect it is; \
             the keys change with it: calls recorded before will not be replayed (under an authenticated principal, \
             in a cross-run window)"
        );
        let shared = BASE.replace("window=thread", "window=cross-run principals=shared");
        let review = diff_manifests(&manifest_of(&[&shared]), &manifest_of(&[BASE])).unwrap();
        let said: Vec<String> = review.changes.iter().map(Change::sentence).collect();
        assert_eq!(
            said,
            [
                "`t`: window narrowed: cross-run → thread: a call repeated in another thread is no longer replayed: it \
                 runs again; the keys change with it: calls recorded before will not be replayed",
                "`t`: keys now each principal's own: a call recorded for one principal is no longer replayed for \
                 another: it runs again; the keys change with it: calls recorded before will not be replayed (under \
                 an authenticated principal, in a cross-run window)",
            ]
        );
    }

    #[test]
    fn ttl_timeout_and_retry_changes() {
        assert_eq!(
            one("ttl=1d", "ttl=1h"),
            "medium `t`: ttl shortened: 1d → 1h: records may be dropped after 1h: a call repeated after that runs again"
        );
        assert_eq!(
            one("ttl=1d", "ttl=7d"),
            "low `t`: ttl lengthened: 1d → 7d: records are kept longer: a call repeated within 7d gets the recorded result"
        );
        assert_eq!(
            one("ttl=1d", "ttl=-"),
            "low `t`: ttl 1d removed: records are kept until removed: a repeated call gets the recorded result however late"
        );
        assert_eq!(
            one("timeout=30s", "timeout=5s"),
            "medium `t`: timeout shortened: 30s → 5s: a call still running after 5s is stopped and its outcome is \
             unknown: `recover` is asked whether it landed; if it did not, it runs again with the same key"
        );
        assert_eq!(
            one("timeout=30s", "timeout=-"),
            "medium `t`: timeout 30s removed: a call that hangs is no longer stopped by a timeout of its own"
        );
        assert_eq!(
            one("timeout=30s", "timeout=2m"),
            "low `t`: timeout lengthened: 30s → 2m: a call may run up to 2m before its outcome counts as unknown"
        );
        let irreversible = BASE
            .replace("class=idempotent", "class=irreversible")
            .replace(" recover=yes", " recover=no");
        let review = diff_manifests(
            &manifest_of(&[&irreversible.replace("timeout=30s", "timeout=-")]),
            &manifest_of(&[&irreversible]),
        )
        .unwrap();
        assert_eq!(
            review.changes[0].sentence(),
            "`t`: timeout 30s added: a call still running after 30s is stopped and its outcome is unknown: it waits for a person"
        );
        assert_eq!(
            one("retry=3x100ms..10s", "retry=5x1s..1m"),
            "medium `t`: retry 3x100ms..10s → 5x1s..1m: up to 5 attempts per call (was 3), 1s..1m apart"
        );
        assert_eq!(
            one("retry=3x100ms..10s", "retry=1x100ms..10s"),
            "low `t`: retry 3x100ms..10s → 1x100ms..10s: up to 1 attempt per call (was 3), 100ms..10s apart"
        );
    }

    #[test]
    fn approval_changes() {
        assert_eq!(
            one("approval=finance", "approval=-"),
            "high `t`: approval removed: calls now run without waiting for `finance` to approve them"
        );
        assert_eq!(
            one("approval=finance", "approval=finance when(|a| a.amount_cents > 10_000)"),
            "high `t`: approval now conditional: only a call where `|a| a.amount_cents > 10_000` holds waits for \
             `finance`: the others run without approval"
        );
        assert_eq!(
            one("approval=finance", "approval=ops"),
            "medium `t`: approval role changed: `finance` → `ops`: calls now wait for `ops` to approve them; \
             `finance` can no longer approve them"
        );
        let conditional = BASE.replace("approval=finance", "approval=finance when(|a| a.amount_cents > 100)");
        let review = diff_manifests(
            &manifest_of(&[&conditional]),
            &manifest_of(&[&conditional.replace("> 100", "> 10_000")]),
        )
        .unwrap();
        assert_eq!(
            review.changes[0].sentence(),
            "`t`: approval condition changed: a call now waits for `finance` only where `|a| a.amount_cents > 10_000` \
             holds (was `|a| a.amount_cents > 100`): check which calls now run without approval"
        );
        assert_eq!(
            review.changes[0].before.as_deref(),
            Some("finance when(|a| a.amount_cents > 100)")
        );
        let review = diff_manifests(&manifest_of(&[&conditional]), &manifest_of(&[BASE])).unwrap();
        assert_eq!(
            review.changes[0].sentence(),
            "`t`: approval condition removed: every call now waits for `finance` to approve it"
        );
        let review = diff_manifests(
            &manifest_of(&[&BASE.replace("approval=finance", "approval=-")]),
            &manifest_of(&[BASE]),
        )
        .unwrap();
        assert_eq!(
            review.changes[0].sentence(),
            "`t`: approval added: every call now waits for `finance` to approve it before it runs"
        );
        assert_eq!(review.changes[0].risk, Risk::Low);
    }

    #[test]
    fn when_recover_is_asked_changes() {
        // The review of `BASE` with `recover=yes` written `from`, then `to`.
        let one = |from: &str, to: &str| {
            let review = diff_manifests(
                &manifest_of(&[&BASE.replace("recover=yes", from)]),
                &manifest_of(&[&BASE.replace("recover=yes", to)]),
            )
            .unwrap();
            assert_eq!(review.changes.len(), 1, "{review:?}");
            format!("{} {}", review.changes[0].risk.as_str(), review.changes[0].sentence())
        };
        assert_eq!(
            one("recover=yes", "recover=yes recover_first=yes"),
            "low `t`: recover asked first: asks the remote before every first execution: an effect the journal does \
             not know of (a restored journal, an expired record) is recorded instead of made again; one more \
             `recover` call per first execution"
        );
        assert_eq!(
            one("recover=yes recover_first=yes", "recover=yes"),
            "medium `t`: recover no longer asked first: a first execution no longer asks the remote: after a journal \
             is restored from a backup, or a record expires, the effect is made again"
        );
        assert_eq!(
            one("recover=yes recover_settle=1m", "recover=yes recover_settle=5s"),
            "medium `t`: recover settle shortened: 1m → 5s: `recover` is now asked 5s after an unknown outcome: a \
             write the remote shows later than that is answered \"not applied\", and the effect can be made again"
        );
        assert_eq!(
            one("recover=yes recover_settle=5s", "recover=yes"),
            "medium `t`: recover settle shortened: 5s → none: `recover` is now asked at once after an unknown \
             outcome: a write the remote shows later than that is answered \"not applied\", and the effect can be \
             made again"
        );
        assert_eq!(
            one("recover=yes", "recover=yes recover_settle=30s"),
            "low `t`: recover settle lengthened: none → 30s: `recover` waits 30s after an unknown outcome before \
             asking: a call in doubt takes that long to settle"
        );
        let line = BASE.replace("recover=yes", "recover=yes recover_first=yes recover_settle=30s");
        let parsed = parse(&manifest_of(&[&line])).unwrap();
        assert!(parsed[0].recover_first);
        assert_eq!(parsed[0].recover_settle, Some(Duration::from_secs(30)));
        assert!(parsed[0].other.is_empty());
        assert_eq!(format!("t {}", manifest_fields(&parsed[0])), line);
    }

    #[test]
    fn one_write_changes() {
        // An idempotent tool that may run unclaimed: no approval, no `recover`.
        let base = BASE
            .replace("approval=finance", "approval=-")
            .replace("recover=yes", "recover=no");
        let on = base.replace("class=idempotent", "class=idempotent one_write=yes");
        let review_of = |from: &str, to: &str| diff_manifests(&manifest_of(&[from]), &manifest_of(&[to])).unwrap();
        let review = review_of(&base, &on);
        assert_eq!(review.changes.len(), 1, "{review:?}");
        let change = &review.changes[0];
        assert_eq!((change.field.as_str(), change.risk), ("one_write", Risk::Medium));
        assert_eq!(
            (change.before.as_deref(), change.after.as_deref()),
            (Some("no"), Some("yes"))
        );
        assert_eq!(
            change.sentence(),
            "`t`: calls now run before any journal write (one_write): a call whose key has no record runs \
             unclaimed and its record is its one write: while it runs `effect-tool list` shows nothing in flight, \
             and an identical call in another process runs too, with the same key; confirm the provider applies a \
             key once (`Idempotency-Key`)"
        );
        assert!(review.has_risk(Risk::Medium) && !review.has_risk(Risk::High));
        let review = review_of(&on, &base);
        assert_eq!(review.changes.len(), 1, "{review:?}");
        assert_eq!(
            format!("{} {}", review.changes[0].risk.as_str(), review.changes[0].sentence()),
            "low `t`: calls claimed before they run again (one_write removed): each call writes a claim before it \
             runs and its record after: an identical call in another process waits for it instead of running too; \
             one more journal write per call"
        );
        // Parsed, written back where the manifest writes it, and not an unknown field.
        let parsed = parse(&manifest_of(&[&on])).unwrap();
        assert!(parsed[0].one_write);
        assert!(parsed[0].other.is_empty());
        assert_eq!(format!("t {}", manifest_fields(&parsed[0])), on);
        assert!(!parse(&manifest_of(&[&base])).unwrap()[0].one_write);
        let err = parse(&manifest_of(&[&on.replace("one_write=yes", "one_write=maybe")])).unwrap_err();
        assert_eq!(err.message, "`t` one_write: `maybe` is neither `yes` nor `no`");
    }

    #[test]
    fn hook_sensitive_and_injected_changes() {
        assert_eq!(
            one("recover=yes", "recover=no"),
            "medium `t`: recover hook removed: an unknown outcome runs again with the same key without asking the provider first"
        );
        assert_eq!(
            one("compensate=no", "compensate=yes"),
            "low `t`: compensate hook added: an abandoned run now undoes it with the hook"
        );
        assert_eq!(
            one("sensitive=card", "sensitive=-"),
            "high `t`: `card` no longer sensitive: the journal, logs and error texts will now keep the value the \
             model sends; confirm it may be kept"
        );
        assert_eq!(
            one("sensitive=card", "sensitive=card,cvc"),
            "low `t`: `cvc` now sensitive: the journal, logs and error texts no longer keep its value"
        );
        // With the default key, a sensitive field changes the key too.
        let default_key = BASE.replace("key=fields(order_id, amount_cents)", "key=default");
        let review = diff_manifests(
            &manifest_of(&[&default_key]),
            &manifest_of(&[&default_key.replace("sensitive=card", "sensitive=-")]),
        )
        .unwrap();
        assert!(
            review.changes[0]
                .effect
                .ends_with("; the default key now includes it, so calls recorded before will not be replayed"),
            "{review:?}"
        );
        assert_eq!(
            one("injected=-", "injected=SmtpPassword"),
            "medium `t`: now takes `SmtpPassword` from the run: a run that does not give a `SmtpPassword` \
             (`RunContext::with_value`) now fails the call with a missing value; confirm every caller gives it"
        );
    }

    #[test]
    fn tools_added_removed_renamed_and_strictness() {
        let email = "send_email class=irreversible key=default window=run ttl=- timeout=- approval=- recover=no \
                     compensate=no sensitive=- injected=- retry=3x100ms..10s";
        let review = diff_manifests(&manifest_of(&[BASE]), &manifest_of(&[BASE, email])).unwrap();
        assert_eq!(
            review.to_text(),
            "medium  `send_email`: tool added (irreversible, no approval): the model can call it now; it is journaled \
             and runs at most once: an unknown outcome goes to `recover` or waits for a person\n"
        );
        assert_eq!(review.changes[0].after.as_deref(), Some(&email["send_email ".len()..]));
        let review = diff_manifests(&manifest_of(&[BASE, email]), &manifest_of(&[BASE])).unwrap();
        assert_eq!(
            review.to_text(),
            "medium  `send_email`: tool removed (irreversible): the model can no longer call it; its records stay \
             in the journal for operators\n"
        );
        let renamed = email.replace("send_email", "send_mail");
        let review = diff_manifests(&manifest_of(&[email]), &manifest_of(&[&renamed])).unwrap();
        assert_eq!(
            review.to_text(),
            "high    `send_mail`: renamed from `send_email`: the tool's name is part of its keys: calls recorded \
             under `send_email` will not be replayed under `send_mail`, so a call retried across the change runs again\n"
        );
        let strict_note = "# not strict: t: `card` is optional";
        let review = diff_manifests(&manifest_of(&[BASE]), &manifest_of(&[BASE, strict_note])).unwrap();
        assert_eq!(
            review.to_text(),
            "medium  `t`: no longer strict: its schema can no longer be sent with OpenAI's `\"strict\": true`: `card` is optional\n"
        );
    }

    #[test]
    fn a_changed_output_type_or_shape_is_reported() {
        let v1 = "# output: t: Refund schema=00000000000000aa";
        let v2 = "# output: t: Refund schema=00000000000000bb";
        let v3 = "# output: t: Vec<Refund> schema=00000000000000cc";
        let review = diff_manifests(&manifest_of(&[BASE, v1]), &manifest_of(&[BASE, v3])).unwrap();
        assert_eq!(review.changes.len(), 1, "{}", review.to_text());
        assert_eq!(review.changes[0].field, "output");
        assert_eq!(review.changes[0].risk, Risk::Medium);
        assert!(
            review.to_text().contains("output type `Refund` → `Vec<Refund>`"),
            "{}",
            review.to_text()
        );
        let review = diff_manifests(&manifest_of(&[BASE, v1]), &manifest_of(&[BASE, v2])).unwrap();
        assert!(
            review.to_text().contains("output type `Refund` changed shape"),
            "{}",
            review.to_text()
        );
        let review = diff_manifests(&manifest_of(&[BASE]), &manifest_of(&[BASE, v1])).unwrap();
        assert!(
            review.to_text().contains("output declared as `Refund`"),
            "{}",
            review.to_text()
        );
        assert!(
            diff_manifests(&manifest_of(&[BASE, v1]), &manifest_of(&[BASE, v1]))
                .unwrap()
                .is_empty()
        );
        let orphan = parse(&manifest_of(&[BASE, "# output: nope: X schema=1"])).unwrap_err();
        assert!(orphan.message.contains("`nope`"), "{orphan}");
    }

    #[test]
    fn a_field_this_version_does_not_know_is_reported_as_text() {
        let review = diff_manifests(
            &manifest_of(&[&format!("{BASE} output=Refund")]),
            &manifest_of(&[&format!("{BASE} output=RefundV2")]),
        )
        .unwrap();
        assert_eq!(
            review.to_text(),
            "medium  `t`: output Refund → RefundV2: this version of effect-tool cannot say what this field does at \
             run time: read the declaration\n"
        );
        assert_eq!(review.changes[0].field, "output");
    }

    #[test]
    fn riskiest_first_then_by_tool_then_by_field() {
        let a = BASE.replace("t class", "a class");
        let b = BASE.replace("t class", "b class");
        let new_a = a.replace("ttl=1d", "ttl=1h").replace("approval=finance", "approval=-");
        let new_b = b
            .replace("class=idempotent", "class=irreversible")
            .replace("timeout=30s", "timeout=5s")
            .replace("key=fields(order_id, amount_cents)", "key=fields(order_id)");
        let review = diff_manifests(&manifest_of(&[&a, &b]), &manifest_of(&[&new_a, &new_b])).unwrap();
        let order: Vec<(&str, &str, Risk)> = review
            .changes
            .iter()
            .map(|c| (c.tool.as_str(), c.field.as_str(), c.risk))
            .collect();
        assert_eq!(
            order,
            [
                ("a", "approval", Risk::High),
                ("b", "key", Risk::High),
                ("a", "ttl", Risk::Medium),
                ("b", "timeout", Risk::Medium),
                ("b", "class", Risk::Low),
            ]
        );
        assert_eq!(review.counts(), (2, 2, 1));
        assert!(review.has_risk(Risk::High));
    }

    #[test]
    fn the_three_forms() {
        let review = diff_manifests(
            &manifest_of(&[BASE]),
            &manifest_of(&[&BASE
                .replace("approval=finance", "approval=-")
                .replace("key=fields(order_id, amount_cents)", "key=custom(|a| a.id.clone())")]),
        )
        .unwrap();
        assert_eq!(
            review.to_markdown(),
            "### effect-tool: 2 declaration changes to review (2 high, 0 medium, 0 low)\n\n\
             | risk | tool | change | at run time |\n\
             |---|---|---|---|\n\
             | **high** | `t` | key changed from `fields(order_id, amount_cents)` to `custom(\\|a\\| a.id.clone())` | \
             calls recorded under the old key will not be replayed: a call retried across the change runs again; \
             read the new key: calls it maps to one key share one result, and only the first runs |\n\
             | **high** | `t` | approval removed | calls now run without waiting for `finance` to approve them |\n"
        );
        assert_eq!(
            review.to_json()["changes"][1],
            json!({
                "tool": "t",
                "field": "approval",
                "risk": "high",
                "before": "finance",
                "after": "-",
                "summary": "approval removed",
                "effect": "calls now run without waiting for `finance` to approve them",
            })
        );
        assert_eq!(review.to_json()["counts"], json!({ "high": 2, "medium": 0, "low": 0 }));
        let same = diff_manifests(&manifest_of(&[BASE]), &manifest_of(&[BASE])).unwrap();
        assert!(same.is_empty());
        assert_eq!(same.to_text(), "no declaration changed\n");
        assert_eq!(same.to_markdown(), "### effect-tool: no declaration changed\n");
        assert_eq!(
            same.to_json(),
            json!({ "changes": [], "counts": { "high": 0, "medium": 0, "low": 0 } })
        );
    }

    #[test]
    fn parse_reads_what_render_writes() {
        use crate::call::tool::{Injected, KeyRule};
        const INJECTED: &[Injected] = &[Injected {
            type_name: "ApiKey",
            present: crate::RunContext::has_value::<String>,
        }];
        let meta = ToolMeta {
            name: "issue_refund",
            description: "",
            class: EffectClass::Compensable,
            key_rule: KeyRule::Custom("|a| format!(\"refund window={} {}\", a.id, a.x)"),
            window: Window::CrossRun,
            shared_keys: true,
            ttl: Some(Duration::from_secs(7 * 86_400)),
            timeout: Some(Duration::from_millis(1500)),
            sensitive: &["card", "cvc"],
            injected: INJECTED,
            has_recover: true,
            has_compensate: true,
            approval: Some("finance"),
            approval_when: Some("|a| a.amount > 10 && a.note == \"x)\""),
            open_world: None,
            retry: RetryPolicy {
                max_attempts: 5,
                base_delay: Duration::from_millis(250),
                max_delay: Duration::from_secs(60),
            },
            costs: &["refund_cents", "refunds"],
        };
        let text = manifest::render_with_strict(
            std::slice::from_ref(&meta),
            &[("issue_refund", vec!["a".into(), "b".into()])],
        );
        let parsed = parse(&text).unwrap();
        let expected = Declaration {
            not_strict: vec!["a".into(), "b".into()],
            ..Declaration::from(&meta)
        };
        assert_eq!(parsed, [expected]);
        assert!(
            diff(&parsed, &declarations(std::slice::from_ref(&meta)))
                .changes
                .iter()
                .all(|c| c.field == "strict")
        );
        // `one_write=yes`, written after the class of an idempotent tool, reads back.
        let reindex = ToolMeta {
            name: "reindex",
            class: EffectClass::Idempotent,
            ..meta
        };
        let one_write = manifest::LineExtras {
            one_write: true,
            ..manifest::LineExtras::default()
        };
        let text = manifest::render_with_extras(&[meta, reindex], &[("reindex", one_write)], &[]);
        let read: Vec<(String, bool)> = parse(&text)
            .unwrap()
            .into_iter()
            .map(|d| (d.name, d.one_write))
            .collect();
        assert_eq!(read, [("issue_refund".to_owned(), false), ("reindex".to_owned(), true)]);
    }

    #[test]
    fn parse_errors_name_the_line() {
        let err = |text: &str| parse(text).unwrap_err().to_string();
        assert_eq!(err(""), "line 1: the manifest is empty");
        assert_eq!(
            err("\ntool x\n"),
            format!(
                "line 2: not an effect-tool manifest: the first line must be `{}`",
                manifest::HEADER
            )
        );
        assert_eq!(
            err(&manifest_of(&["t key=default window=run"])),
            "line 2: `t` has no `class=`: every tool line states its class, key and window"
        );
        assert_eq!(
            err(&manifest_of(&["t class=idempotnt key=default window=run"])),
            "line 2: `t`: unknown effect class `idempotnt`: expected one of pure, idempotent, compensable, irreversible"
        );
        assert_eq!(
            err(&manifest_of(&["t class=pure key=default window=run ttl=1y"])),
            "line 2: `t` ttl: `1y` is not a duration such as 500ms, 30s, 5m, 24h or 7d"
        );
        assert_eq!(
            err(&manifest_of(&[BASE, BASE])),
            "line 3: the tool `t` is declared twice"
        );
        assert_eq!(
            err(&manifest_of(&[BASE, "# not strict: u: why"])),
            "line 3: `# not strict:` names `u`, which has no line of its own"
        );
        // Older manifests without the later fields read with the defaults.
        let old = parse(&manifest_of(&["t class=pure key=default window=run"])).unwrap();
        assert_eq!(old, [Declaration::new("t", EffectClass::Pure)]);
    }
}
