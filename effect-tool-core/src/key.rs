//! Effect keys: what makes two calls "the same effect".
//!
//! The default key is `<scope>:<tool>:<sha256 hex of the RFC 8785 canonical JSON input>`,
//! secrets left out; a custom key `k` (a key closure's value) is `<scope>:k`. The window says
//! where the key is unique, which is its scope:
//!
//! | window | scope | default key | custom key `k` |
//! |---|---|---|---|
//! | `run` | the run | `<run_id>:<tool>:<hash>` | `<run_id>:k` |
//! | `thread` | the thread | `thread:<thread_id>:<tool>:<hash>` | `thread:<thread_id>:k` |
//! | `cross-run` | none | `<tool>:<hash>` | `k` |
//! | `cross-run`, for a principal | the principal | `principal:<principal>:<tool>:<hash>` | `principal:<principal>:k` |
//!
//! A `thread` window on a run without a thread id falls back to the run. A run made for a
//! principal ([`RunContext::with_principal`], as the MCP server does for an authenticated
//! caller) gives `cross-run` keys that principal's scope, unless the tool declares
//! `shared_keys` ([`crate::Tool::SHARED_KEYS`]): then they are shared by every principal. (Run
//! and thread ids carry the principal already when the MCP server makes them.)
//!
//! # No two scopes give one key
//!
//! Run, thread and principal ids go into a key escaped, so that no two calls whose scopes
//! differ give the same key by where a separator falls (principal `thread:bob` naming run `x`
//! against `bob`'s call in thread `x`): `%` is written `%25` and `:` is written `%3A`, and an
//! id that reads as one of the words above (`thread`, `principal`) has its first letter
//! escaped too (`%74hread`). An unscoped custom key (`cross-run`, no principal) that starts
//! with `principal:` or `%` gets a `%` in front, so it cannot be taken for a principal's key.
//! Ids made of letters, digits, `-`, `_`, `.` and `/` (as the MCP server's are) are written as
//! they are, so their keys are what they were before this escaping.
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::canonical;
use crate::class::Window;
use crate::context::RunContext;
use crate::tool::KeyRule;

/// Lowercase hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let digest = Sha256::digest(bytes);
    let mut out = String::with_capacity(64);
    for b in digest {
        out.push(char::from(HEX[(b >> 4) as usize]));
        out.push(char::from(HEX[(b & 0xf) as usize]));
    }
    out
}

/// `args` with the sensitive top-level fields (by serialized name) removed: what may be stored,
/// logged and hashed.
pub fn redact(mut args: Value, secrets: &[&str]) -> Value {
    if !secrets.is_empty()
        && let Value::Object(map) = &mut args
    {
        for s in secrets {
            map.remove(*s);
        }
    }
    args
}

/// `message` (an error text about `args`, such as serde's "invalid type: string \"4111...\"")
/// with the values of the sensitive fields of `args` replaced by `[sensitive]`.
pub fn scrub(message: String, args: &Value, sensitive: &[&str]) -> String {
    let Value::Object(map) = args else { return message };
    let mut out = message;
    for name in sensitive {
        let Some(value) = map.get(*name) else { continue };
        let mut forms = vec![value.to_string()];
        if let Value::String(s) = value {
            forms.push(s.clone());
        }
        for form in forms {
            if !form.is_empty() && form != "null" {
                out = out.replace(&form, "[sensitive]");
            }
        }
    }
    out
}

/// The fingerprint of an input: SHA-256 hex of its canonical JSON (secrets already removed).
pub fn fingerprint(redacted: &Value) -> String {
    sha256_hex(canonical::to_string(redacted).as_bytes())
}

/// The words a key's scope starts with (besides an escaped run id).
const THREAD: &str = "thread";
const PRINCIPAL: &str = "principal";

/// `id` as a component of a key's scope: `%` and `:` percent-encoded, and the first letter of
/// an id that reads as one of the scope's words (`thread`, `principal`) too (see the module
/// docs, "No two scopes give one key").
pub fn key_component(id: &str) -> std::borrow::Cow<'_, str> {
    if id == THREAD || id == PRINCIPAL {
        return std::borrow::Cow::Owned(format!("%{:02X}{}", id.as_bytes()[0], &id[1..]));
    }
    if !id.contains(['%', ':']) {
        return std::borrow::Cow::Borrowed(id);
    }
    let mut out = String::with_capacity(id.len() + 8);
    for c in id.chars() {
        match c {
            '%' => out.push_str("%25"),
            ':' => out.push_str("%3A"),
            c => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out)
}

/// The scope prefix a window gives a key (`<run_id>`, `thread:<thread_id>`,
/// `principal:<principal>`, or none), each id escaped ([`key_component`]). The principal's
/// scope is for a `cross-run` tool whose keys are not shared ([`scope_of`]).
pub fn scope(window: Window, run: &RunContext) -> Option<String> {
    scope_of(window, false, run)
}

/// [`scope`], for a tool whose keys are shared by every principal (`shared`) or not.
pub fn scope_of(window: Window, shared: bool, run: &RunContext) -> Option<String> {
    match (window, run.thread_id(), run.principal()) {
        (Window::Run, _, _) | (Window::Thread, None, _) => Some(key_component(run.run_id()).into_owned()),
        (Window::Thread, Some(t), _) => Some(format!("{THREAD}:{}", key_component(t))),
        (Window::CrossRun, _, Some(p)) if !shared => Some(format!("{PRINCIPAL}:{}", key_component(p))),
        (Window::CrossRun, _, _) => None,
    }
}

/// The default key of a call: `<scope>:<tool>:<hash>` (see the module docs).
pub fn default_key(window: Window, run: &RunContext, tool: &str, hash: &str) -> String {
    default_key_of(scope(window, run), tool, hash)
}

fn default_key_of(scope: Option<String>, tool: &str, hash: &str) -> String {
    match scope {
        Some(scope) => format!("{scope}:{tool}:{hash}"),
        None => format!("{tool}:{hash}"),
    }
}

/// A custom key placed in its window: `<scope>:<custom>`, or without a scope the custom key as
/// is (with a `%` in front when it starts with `principal:` or `%`; see the module docs).
pub fn scoped_custom_key(window: Window, run: &RunContext, custom: &str) -> String {
    custom_key_of(scope(window, run), custom)
}

fn custom_key_of(scope: Option<String>, custom: &str) -> String {
    match scope {
        Some(scope) => format!("{scope}:{custom}"),
        None if custom.starts_with('%') || custom.starts_with("principal:") => format!("%{custom}"),
        None => custom.to_owned(),
    }
}

/// The canonical input and key of a call, computed once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallKey {
    /// The effect key.
    pub key: String,
    /// SHA-256 hex of the canonical JSON of the redacted input.
    pub fingerprint: String,
}

/// Compute the key of a call from its redacted JSON input.
///
/// `custom` is what the tool's key closure returned, if it has one.
pub fn call_key(
    rule: KeyRule,
    window: Window,
    run: &RunContext,
    tool: &str,
    redacted: &Value,
    custom: Option<String>,
) -> CallKey {
    with_fingerprint(rule, window, false, run, tool, redacted, fingerprint(redacted), custom)
}

/// [`call_key`], the input's fingerprint already computed.
#[allow(clippy::too_many_arguments)]
fn with_fingerprint(
    rule: KeyRule,
    window: Window,
    shared: bool,
    run: &RunContext,
    tool: &str,
    redacted: &Value,
    fingerprint: String,
    custom: Option<String>,
) -> CallKey {
    let scope = scope_of(window, shared, run);
    let key = match (custom, rule) {
        (Some(custom), _) => custom_key_of(scope, &custom),
        (None, KeyRule::Fields(fields)) => {
            let mut picked = serde_json::Map::new();
            if let Value::Object(map) = redacted {
                for f in fields {
                    picked.insert((*f).to_owned(), map.get(*f).cloned().unwrap_or(Value::Null));
                }
            }
            default_key_of(scope, tool, &self::fingerprint(&Value::Object(picked)))
        }
        (None, _) => default_key_of(scope, tool, &fingerprint),
    };
    CallKey { key, fingerprint }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn default_key_shape() {
        let run = RunContext::new("r1").with_thread("t1");
        let input = json!({"b": 2, "a": 1});
        let k = call_key(KeyRule::Default, Window::Run, &run, "tool", &input, None);
        assert_eq!(k.key, format!("r1:tool:{}", sha256_hex(br#"{"a":1,"b":2}"#)));
        let t = call_key(KeyRule::Default, Window::Thread, &run, "tool", &input, None);
        assert!(t.key.starts_with("thread:t1:tool:"));
        let c = call_key(KeyRule::Default, Window::CrossRun, &run, "tool", &input, None);
        assert!(c.key.starts_with("tool:"));
        assert_eq!(k.fingerprint, t.fingerprint);
    }

    #[test]
    fn secrets_do_not_change_the_key() {
        let run = RunContext::new("r1");
        let a = redact(json!({"to": "x", "token": "s1"}), &["token"]);
        let b = redact(json!({"to": "x", "token": "s2"}), &["token"]);
        assert_eq!(a, json!({"to": "x"}));
        assert_eq!(
            call_key(KeyRule::Default, Window::Run, &run, "t", &a, None),
            call_key(KeyRule::Default, Window::Run, &run, "t", &b, None)
        );
    }

    #[test]
    fn field_keys_ignore_other_fields() {
        let run = RunContext::new("r1");
        let rule = KeyRule::Fields(&["order"]);
        let a = call_key(rule, Window::Run, &run, "t", &json!({"order": 1, "note": "x"}), None);
        let b = call_key(rule, Window::Run, &run, "t", &json!({"order": 1, "note": "y"}), None);
        assert_eq!(a.key, b.key);
        assert_ne!(a.fingerprint, b.fingerprint);
    }

    #[test]
    fn no_two_scopes_give_one_key() {
        let input = json!({"a": 1});
        let key = |window, run: &RunContext| call_key(KeyRule::Default, window, run, "t", &input, None).key;
        // Principal `thread:bob` naming run `x` (the MCP server's run `thread:bob/x`) against
        // bob's call in thread `x` (thread `bob/x`).
        let mallory = RunContext::new("thread:bob/x").with_principal("thread:bob");
        let bob = RunContext::new("bob/r").with_thread("bob/x").with_principal("bob");
        assert_ne!(key(Window::Run, &mallory), key(Window::Thread, &bob));
        assert!(key(Window::Run, &mallory).starts_with("thread%3Abob/x:t:"));
        // Run `thread` falling back from a thread window, against thread `x`, with custom keys.
        let custom = |window, run: &RunContext, k: &str| {
            call_key(KeyRule::Custom(""), window, run, "t", &input, Some(k.to_owned())).key
        };
        let run_named_thread = RunContext::new("thread");
        let in_thread = RunContext::new("r").with_thread("x");
        assert_ne!(
            custom(Window::Thread, &run_named_thread, "x:k"),
            custom(Window::Thread, &in_thread, "k")
        );
        // Runs `a:b` and `a` with custom keys `c` and `b:c`.
        assert_ne!(
            custom(Window::Run, &RunContext::new("a:b"), "c"),
            custom(Window::Run, &RunContext::new("a"), "b:c")
        );
        // An unscoped custom key cannot pass for a principal's.
        let alice = RunContext::new("r").with_principal("alice");
        assert_eq!(custom(Window::CrossRun, &alice, "order:1"), "principal:alice:order:1");
        let anonymous = RunContext::new("r");
        assert_eq!(
            custom(Window::CrossRun, &anonymous, "principal:alice:order:1"),
            "%principal:alice:order:1"
        );
        assert_eq!(custom(Window::CrossRun, &anonymous, "%x"), "%%x");
        assert_eq!(custom(Window::CrossRun, &anonymous, "order:1"), "order:1");
        // Plain ids are written as they are (keys recorded before the escaping stay valid).
        assert_eq!(key_component("mcp-session-0af3/run_1.2"), "mcp-session-0af3/run_1.2");
        assert_eq!(key_component("a%b:c"), "a%25b%3Ac");
        assert_eq!(key_component("principal"), "%70rincipal");
    }

    #[test]
    fn principals_have_their_own_cross_run_keys_unless_the_tool_shares_them() {
        let input = json!({"order": 1});
        let alice = RunContext::new("alice/r1").with_principal("alice");
        let bob = RunContext::new("bob/r1").with_principal("bob");
        let own = |run: &RunContext| {
            with_fingerprint(
                KeyRule::Default,
                Window::CrossRun,
                false,
                run,
                "t",
                &input,
                fingerprint(&input),
                None,
            )
            .key
        };
        let shared = |run: &RunContext| {
            with_fingerprint(
                KeyRule::Default,
                Window::CrossRun,
                true,
                run,
                "t",
                &input,
                fingerprint(&input),
                None,
            )
            .key
        };
        assert_ne!(own(&alice), own(&bob));
        assert!(own(&alice).starts_with("principal:alice:t:"), "{}", own(&alice));
        assert_eq!(shared(&alice), shared(&bob));
        assert_eq!(shared(&alice), own(&RunContext::new("r")));
    }

    #[test]
    fn sha256_of_empty() {
        assert_eq!(
            sha256_hex(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}

/// Everything the engine journals a call under: its key, the fingerprint and the redacted input.
#[derive(Debug, Clone, PartialEq)]
pub struct CallIdentity {
    /// The effect key.
    pub key: String,
    /// SHA-256 hex of the canonical redacted input.
    pub fingerprint: String,
    /// The input with secret fields removed (what is stored).
    pub input: Value,
    /// Whether the key comes from a declared rule (`key = ...` or `key(...)`) rather than the
    /// default hash of the whole input.
    pub keyed: bool,
}

/// The identity of a call of `tool` with `args` in `run`: exactly what the engine computes, for
/// tools, tests and operators that need the key before (or without) calling.
///
/// Fails when `args` do not serialize, or hold an integer beyond ±(2^53 − 1) (see
/// [`canonical`]'s "Integers" section): the error names its path and says to send it as a string.
pub fn identify<T: crate::Tool>(tool: &T, run: &RunContext, args: &T::Args) -> Result<CallIdentity, serde_json::Error> {
    let input = redact(serde_json::to_value(args)?, T::SENSITIVE);
    // One walk makes the canonical form and refuses an integer RFC 8785 would round into
    // another one's key (refused, not merged).
    let canonical = canonical::try_to_string(&input).map_err(<serde_json::Error as serde::ser::Error>::custom)?;
    let custom = tool.key(args);
    let keyed = custom.is_some() || T::KEY_RULE != KeyRule::Default;
    let fingerprint = sha256_hex(canonical.as_bytes());
    let CallKey { key, fingerprint } = with_fingerprint(
        T::KEY_RULE,
        T::WINDOW,
        T::SHARED_KEYS,
        run,
        T::NAME,
        &input,
        fingerprint,
        custom,
    );
    Ok(CallIdentity {
        key,
        fingerprint,
        input,
        keyed,
    })
}
