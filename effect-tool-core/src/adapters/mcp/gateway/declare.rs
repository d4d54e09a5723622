//! The declarations file (`effect-tool.gateway.toml`): parse → validate, each error naming its
//! line and what to write.
//!
//! ```toml
//! [upstreams.fs]
//! command = "npx"
//! args = ["-y", "@modelcontextprotocol/server-filesystem", "/srv/notes"]
//!
//! [upstreams.fs.tools.write_file]
//! class = "idempotent"
//! key = ["path", "content"]
//! window = "cross-run"
//! ttl = "7d"
//! timeout = "30s"
//! digest = "3f6c…"
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use crate::decide::policy::RetryPolicy;
use crate::value::class::{EffectClass, Window};

/// The file name the CLI looks for when none is given.
pub const DEFAULT_FILE: &str = "effect-tool.gateway.toml";

/// Everything the declarations file says: the upstream servers and, per upstream, one
/// declaration per tool.
#[derive(Debug, Clone, Default)]
pub struct Declarations {
    /// Where the file was read from (`None`: parsed from text).
    pub path: Option<PathBuf>,
    /// The upstreams by name, in name order.
    pub upstreams: BTreeMap<String, UpstreamDecl>,
}

/// How to reach one upstream MCP server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport {
    /// A child process the gateway starts (and starts again when it exits), spoken to over
    /// its stdin and stdout.
    Stdio {
        /// The program.
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Variables added to the gateway's own environment.
        env: BTreeMap<String, String>,
        /// The working directory (default: the gateway's).
        cwd: Option<PathBuf>,
    },
    /// A Streamable HTTP endpoint.
    Http {
        /// The endpoint's URL (`http://host:port/mcp`).
        url: String,
    },
}

/// One upstream server and its tools' declarations.
#[derive(Debug, Clone)]
pub struct UpstreamDecl {
    /// The upstream's name in the file (`[upstreams.<name>]`).
    pub name: String,
    /// How to reach it.
    pub transport: Transport,
    /// Whether every tool's name is prefixed `<upstream>__` (by default only names two
    /// upstreams share are).
    pub prefix: bool,
    /// The declarations by upstream tool name.
    pub tools: BTreeMap<String, ToolDecl>,
}

/// One upstream tool's declaration, in the words of `#[tool]`.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolDecl {
    /// The effect class (`class = "..."`).
    pub class: EffectClass,
    /// How the key is made (`key = [...]` or `key = "template"`; none: the default key).
    pub key: KeyDecl,
    /// Where the key is unique.
    pub window: Window,
    /// The records' time to live.
    pub ttl: Option<Duration>,
    /// The longest an upstream call may take; past it the outcome is unknown.
    pub timeout: Option<Duration>,
    /// The approving role, if calls wait for a person.
    pub approval: Option<String>,
    /// When approval is needed (none: every call).
    pub approval_when: Option<Condition>,
    /// Retry limits (clamped by the class, as for `#[tool]`).
    pub retry: RetryPolicy,
    /// A read-only upstream tool that finds an earlier effect.
    pub recover: Option<RecoverDecl>,
    /// The reviewed digest of the upstream tool's schema and annotations.
    pub digest: Option<String>,
    /// The line of the declaration's table in the file (0: unknown).
    pub line: usize,
}

impl ToolDecl {
    /// The declaration a read-only tool gets when the file says nothing of it: `pure`.
    pub fn pure() -> ToolDecl {
        ToolDecl {
            class: EffectClass::Pure,
            key: KeyDecl::Default,
            window: Window::Run,
            ttl: None,
            timeout: None,
            approval: None,
            approval_when: None,
            retry: RetryPolicy::DEFAULT,
            recover: None,
            digest: None,
            line: 0,
        }
    }
}

/// How a gateway tool's effect key is made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyDecl {
    /// The default key: a hash of the tool's name and all its arguments.
    Default,
    /// The values at these argument paths (`a.b` for nested fields), canonical JSON, hashed.
    Fields(Vec<String>),
    /// A template: `{path}` replaced by the argument's value (`"issue:{repo}:{title}"`).
    Template(String),
}

/// A condition over the arguments (`approval_when = { arg = "amount", above = 100 }`).
#[derive(Debug, Clone, PartialEq)]
pub struct Condition {
    /// The argument's path (`a.b` for nested fields).
    pub arg: String,
    /// The test on its value.
    pub test: Test,
}

/// The test of a [`Condition`].
#[derive(Debug, Clone, PartialEq)]
pub enum Test {
    /// The value is a number above this one.
    Above(f64),
    /// The value equals this JSON value.
    Equals(Value),
    /// The value is a string starting with this one.
    Prefix(String),
    /// The argument is present (and not null).
    Present,
}

impl Condition {
    /// Whether `args` meet the condition.
    pub fn holds(&self, args: &Value) -> bool {
        let value = lookup(args, &self.arg);
        match (&self.test, value) {
            (_, None) | (_, Some(Value::Null)) => false,
            (Test::Present, Some(_)) => true,
            (Test::Above(n), Some(v)) => v.as_f64().is_some_and(|v| v > *n),
            (Test::Equals(e), Some(v)) => e == v,
            (Test::Prefix(p), Some(v)) => v.as_str().is_some_and(|s| s.starts_with(p.as_str())),
        }
    }
}

impl std::fmt::Display for Condition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.test {
            Test::Above(n) => write!(f, "{} > {n}", self.arg),
            Test::Equals(v) => write!(f, "{} == {v}", self.arg),
            Test::Prefix(p) => write!(f, "{} starts with {p:?}", self.arg),
            Test::Present => write!(f, "{} is present", self.arg),
        }
    }
}

/// `recover = { tool = "...", args = { ... }, found = "/pointer" }`: a read-only upstream tool
/// asked, after an unknown outcome, whether the effect already exists.
#[derive(Debug, Clone, PartialEq)]
pub struct RecoverDecl {
    /// The read-only upstream tool (of the same upstream).
    pub tool: String,
    /// Its arguments: each string value a template over the call's arguments (`"{title}"` alone
    /// gives the argument's value whatever its type).
    pub args: serde_json::Map<String, Value>,
    /// A JSON pointer into the recover tool's result (its structured content, or its text read
    /// as JSON) that must hold a non-empty value for the effect to count as found; none: any
    /// result that is not an error and not empty.
    pub found: Option<String>,
}

/// The value at `path` (`a.b.c`, or a JSON pointer `/a/b/c`) in `args`.
pub fn lookup<'a>(args: &'a Value, path: &str) -> Option<&'a Value> {
    if path.starts_with('/') {
        return args.pointer(path);
    }
    path.split('.').try_fold(args, |v, part| match v {
        Value::Object(m) => m.get(part),
        Value::Array(a) => part.parse::<usize>().ok().and_then(|i| a.get(i)),
        _ => None,
    })
}

/// Fill a template: each `{path}` replaced by the argument's value (a string as is, anything
/// else as canonical JSON); `None` when an argument it names is absent.
pub fn fill(template: &str, args: &Value) -> Option<String> {
    let mut out = String::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let close = rest[open..].find('}')? + open;
        let value = lookup(args, &rest[open + 1..close])?;
        match value {
            Value::String(s) => out.push_str(s),
            other => out.push_str(&crate::value::canonical::to_string(other)),
        }
        rest = &rest[close + 1..];
    }
    out.push_str(rest);
    Some(out)
}

/// An error in the declarations file: where, what, and what to write.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}: {message}\nhelp: {help}")]
pub struct DeclarationError {
    /// The file (or `<text>`).
    pub file: String,
    /// The line (1-based; 0 when the file could not be read).
    pub line: usize,
    /// What is wrong.
    pub message: String,
    /// What to write instead.
    pub help: String,
}

// ---- parse: the file's shape, as serde reads it ----

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    upstreams: BTreeMap<String, toml::Spanned<RawUpstream>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawUpstream {
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    cwd: Option<PathBuf>,
    url: Option<String>,
    #[serde(default)]
    prefix: bool,
    #[serde(default)]
    tools: BTreeMap<String, toml::Spanned<RawTool>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTool {
    class: toml::Spanned<String>,
    key: Option<toml::Spanned<RawKey>>,
    window: Option<toml::Spanned<String>>,
    ttl: Option<toml::Spanned<String>>,
    timeout: Option<toml::Spanned<String>>,
    approval: Option<String>,
    approval_when: Option<toml::Spanned<RawCondition>>,
    retry: Option<RawRetry>,
    recover: Option<toml::Spanned<RawRecover>>,
    digest: Option<String>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum RawKey {
    Fields(Vec<String>),
    Template(String),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCondition {
    arg: String,
    above: Option<f64>,
    equals: Option<toml::Value>,
    prefix: Option<String>,
    present: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRetry {
    max_attempts: Option<u32>,
    base_delay: Option<String>,
    max_delay: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRecover {
    tool: String,
    #[serde(default)]
    args: toml::Table,
    found: Option<String>,
}

/// Parse a duration as declarations write it (`"500ms"`, `"30s"`, `"1h30m"`, `"7d"`), with
/// the `humantime` crate (as the CLI's `--older-than`): every duration `#[tool]` accepts, and
/// its longer spellings (`"30sec"`, `"2 days"`). A number without a unit is refused.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text.trim()).map_err(|e| e.to_string())
}

/// The 1-based line of byte offset `at` in `text`.
fn line_of(text: &str, at: usize) -> usize {
    text[..at.min(text.len())].bytes().filter(|&b| b == b'\n').count() + 1
}

impl Declarations {
    /// Read and check the file at `path`.
    pub fn load(path: impl AsRef<Path>) -> Result<Declarations, DeclarationError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| DeclarationError {
            file: path.display().to_string(),
            line: 0,
            message: format!("cannot read the declarations file: {e}"),
            help: format!(
                "write `{DEFAULT_FILE}` with one `[upstreams.<name>]` table per upstream server (see the README's \"MCP gateway\" section), or name the file with `--config`"
            ),
        })?;
        let mut decls = Declarations::parse_named(&text, &path.display().to_string())?;
        decls.path = Some(path.to_owned());
        Ok(decls)
    }

    /// Parse and check declarations from `text`.
    pub fn parse(text: &str) -> Result<Declarations, DeclarationError> {
        Declarations::parse_named(text, "<text>")
    }

    fn parse_named(text: &str, file: &str) -> Result<Declarations, DeclarationError> {
        let err = |at: usize, message: String, help: String| DeclarationError {
            file: file.to_owned(),
            line: line_of(text, at),
            message,
            help,
        };
        let raw: RawFile = toml::from_str(text).map_err(|e| {
            let at = e.span().map_or(0, |s| s.start);
            err(
                at,
                e.message().to_owned(),
                "each upstream is `[upstreams.<name>]` with `command`/`args`/`env` or `url`; each tool `[upstreams.<name>.tools.<tool>]` with `class` and, as needed, `key`, `window`, `ttl`, `timeout`, `approval`, `approval_when`, `retry`, `recover`, `digest`".to_owned(),
            )
        })?;
        let mut upstreams = BTreeMap::new();
        for (name, raw_up) in raw.upstreams {
            let at = raw_up.span().start;
            let up = raw_up.into_inner();
            let transport = match (up.command, up.url) {
                (Some(command), None) => Transport::Stdio {
                    command,
                    args: up.args,
                    env: up.env,
                    cwd: up.cwd,
                },
                (None, Some(url)) => Transport::Http { url },
                (Some(_), Some(_)) => {
                    return Err(err(
                        at,
                        format!("upstream `{name}` has both `command` and `url`"),
                        "keep `command` (a child process over stdio) or `url` (Streamable HTTP), not both".to_owned(),
                    ));
                }
                (None, None) => {
                    return Err(err(
                        at,
                        format!("upstream `{name}` says neither how to start it nor where it is"),
                        "add `command = \"...\"` (and `args = [...]`) for a child process, or `url = \"http://host:port/mcp\"`".to_owned(),
                    ));
                }
            };
            let mut tools = BTreeMap::new();
            for (tool, raw_tool) in up.tools {
                let at = raw_tool.span().start;
                let decl = tool_decl(&name, &tool, raw_tool.into_inner(), at, line_of(text, at), &err)?;
                tools.insert(tool, decl);
            }
            upstreams.insert(
                name.clone(),
                UpstreamDecl {
                    name,
                    transport,
                    prefix: up.prefix,
                    tools,
                },
            );
        }
        Ok(Declarations { path: None, upstreams })
    }
}

/// Validate one tool's declaration: the rules `#[tool]` checks at compile time, checked here
/// when the file is read.
fn tool_decl(
    upstream: &str,
    tool: &str,
    raw: RawTool,
    table_at: usize,
    line: usize,
    err: &dyn Fn(usize, String, String) -> DeclarationError,
) -> Result<ToolDecl, DeclarationError> {
    let here = format!("[upstreams.{upstream}.tools.{tool}]");
    let class_at = raw.class.span().start;
    let class: EffectClass = raw
        .class
        .get_ref()
        .parse()
        .map_err(|e: crate::value::class::UnknownClass| {
            err(
                class_at,
                format!("{here}: {e}"),
                "write `class = \"pure\"`, `\"idempotent\"` or `\"irreversible\"`".to_owned(),
            )
        })?;
    if class == EffectClass::Compensable {
        return Err(err(
            class_at,
            format!("{here}: the gateway cannot run a compensation of an upstream tool yet"),
            "declare it `class = \"irreversible\"` (a person decides what to do with an abandoned run) or `\"idempotent\"` with a `key` if the upstream dedupes it".to_owned(),
        ));
    }
    let key = match raw.key {
        None => KeyDecl::Default,
        Some(k) => {
            let at = k.span().start;
            match k.into_inner() {
                RawKey::Fields(f) if f.is_empty() => {
                    return Err(err(at, format!("{here}: `key = []` names no argument"), "name the arguments that identify the effect, `key = [\"path\"]`, or leave `key` out for the default key".to_owned()));
                }
                RawKey::Fields(f) => KeyDecl::Fields(f),
                RawKey::Template(t) if !t.contains('{') => {
                    return Err(err(at, format!("{here}: the key template `{t}` uses no argument: every call would share one key"), "put the identifying arguments in braces, `key = \"note:{path}\"`, or list them, `key = [\"path\"]`".to_owned()));
                }
                RawKey::Template(t) => KeyDecl::Template(t),
            }
        }
    };
    let window = match raw.window {
        None => Window::Run,
        Some(w) => match w.get_ref().as_str() {
            "run" => Window::Run,
            "thread" => Window::Thread,
            "cross-run" => Window::CrossRun,
            other => {
                return Err(err(
                    w.span().start,
                    format!("{here}: unknown window `{other}`"),
                    "write `window = \"run\"`, `\"thread\"` or `\"cross-run\"`".to_owned(),
                ));
            }
        },
    };
    let duration = |d: Option<toml::Spanned<String>>, what: &str| -> Result<Option<Duration>, DeclarationError> {
        d.map(|d| {
            parse_duration(d.get_ref()).map_err(|e| {
                err(
                    d.span().start,
                    format!("{here}: `{what}`: {e}"),
                    format!("write `{what} = \"30s\"` (units ms, s, m, h, d)"),
                )
            })
        })
        .transpose()
    };
    let ttl = duration(raw.ttl, "ttl")?;
    let timeout = duration(raw.timeout, "timeout")?;
    let approval_when = match raw.approval_when {
        None => None,
        Some(c) => {
            let at = c.span().start;
            let c = c.into_inner();
            let tests = [
                c.above.map(Test::Above),
                c.equals
                    .map(|v| Test::Equals(serde_json::to_value(v).unwrap_or(Value::Null))),
                c.prefix.map(Test::Prefix),
                c.present.filter(|p| *p).map(|_| Test::Present),
            ];
            let mut tests = tests.into_iter().flatten();
            let (Some(test), None) = (tests.next(), tests.next()) else {
                return Err(err(
                    at,
                    format!("{here}: `approval_when` needs exactly one test"),
                    "write one of `above = 100`, `equals = \"x\"`, `prefix = \"/etc\"`, `present = true` beside `arg`"
                        .to_owned(),
                ));
            };
            Some(Condition { arg: c.arg, test })
        }
    };
    if approval_when.is_some() && raw.approval.is_none() {
        return Err(err(
            table_at,
            format!("{here}: `approval_when` without `approval`"),
            "name the role that approves, `approval = \"ops\"`".to_owned(),
        ));
    }
    let mut retry = RetryPolicy::DEFAULT;
    if let Some(r) = raw.retry {
        if let Some(n) = r.max_attempts {
            retry.max_attempts = n.max(1);
        }
        for (field, value) in [("base_delay", r.base_delay), ("max_delay", r.max_delay)] {
            if let Some(v) = value {
                let d = parse_duration(&v).map_err(|e| {
                    err(
                        table_at,
                        format!("{here}: `retry.{field}`: {e}"),
                        format!("write `retry = {{ {field} = \"100ms\" }}`"),
                    )
                })?;
                if field == "base_delay" {
                    retry.base_delay = d;
                } else {
                    retry.max_delay = d;
                }
            }
        }
    }
    let recover = raw.recover.map(|r| {
        let r = r.into_inner();
        RecoverDecl {
            tool: r.tool,
            args: match serde_json::to_value(r.args) {
                Ok(Value::Object(m)) => m,
                _ => serde_json::Map::new(),
            },
            found: r.found,
        }
    });
    if class == EffectClass::Pure {
        let extra = [
            (!matches!(key, KeyDecl::Default), "key"),
            (raw.approval.is_some(), "approval"),
            (recover.is_some(), "recover"),
        ];
        if let Some((_, what)) = extra.iter().find(|(bad, _)| *bad) {
            return Err(err(
                class_at,
                format!("{here}: a `pure` tool has no `{what}`: nothing is journaled"),
                format!("remove `{what}`, or declare the class the tool really has"),
            ));
        }
    }
    Ok(ToolDecl {
        class,
        key,
        window,
        ttl,
        timeout,
        approval: raw.approval,
        approval_when,
        retry,
        recover,
        digest: raw.digest,
        line,
    })
}
