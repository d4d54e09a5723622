//! Effect keys: what makes two calls "the same effect".
//!
//! The default key is `<run_id>:<tool>:<sha256 hex of the RFC 8785 canonical JSON input>`,
//! secrets left out. The window widens or narrows where the key is unique:
//!
//! | window | default key | custom key `k` |
//! |---|---|---|
//! | `run` | `<run_id>:<tool>:<hash>` | `<run_id>:k` |
//! | `thread` | `thread:<thread_id>:<tool>:<hash>` | `thread:<thread_id>:k` |
//! | `cross-run` | `<tool>:<hash>` | `k` |
//!
//! A `thread` window on a run without a thread id falls back to the run.

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

/// The scope prefix a window gives a key (`<run_id>`, `thread:<thread_id>`, or none).
pub fn scope(window: Window, run: &RunContext) -> Option<String> {
    match window {
        Window::Run => Some(run.run_id().to_owned()),
        Window::Thread => Some(match run.thread_id() {
            Some(t) => format!("thread:{t}"),
            None => run.run_id().to_owned(),
        }),
        Window::CrossRun => None,
    }
}

/// The default key of a call: `<scope>:<tool>:<hash>` (see the module docs).
pub fn default_key(window: Window, run: &RunContext, tool: &str, hash: &str) -> String {
    let mut key = String::with_capacity(run.run_id().len() + tool.len() + hash.len() + 16);
    match (window, run.thread_id()) {
        (Window::Run, _) | (Window::Thread, None) => key.push_str(run.run_id()),
        (Window::Thread, Some(thread)) => {
            key.push_str("thread:");
            key.push_str(thread);
        }
        (Window::CrossRun, _) => {}
    }
    if !key.is_empty() {
        key.push(':');
    }
    key.push_str(tool);
    key.push(':');
    key.push_str(hash);
    key
}

/// A custom key placed in its window: `<scope>:<custom>` or the custom key as is (cross-run).
pub fn scoped_custom_key(window: Window, run: &RunContext, custom: &str) -> String {
    match scope(window, run) {
        Some(scope) => format!("{scope}:{custom}"),
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
    with_fingerprint(rule, window, run, tool, redacted, fingerprint(redacted), custom)
}

/// [`call_key`], the input's fingerprint already computed.
fn with_fingerprint(
    rule: KeyRule,
    window: Window,
    run: &RunContext,
    tool: &str,
    redacted: &Value,
    fingerprint: String,
    custom: Option<String>,
) -> CallKey {
    let key = match (custom, rule) {
        (Some(custom), _) => scoped_custom_key(window, run, &custom),
        (None, KeyRule::Fields(fields)) => {
            let mut picked = serde_json::Map::new();
            if let Value::Object(map) = redacted {
                for f in fields {
                    picked.insert((*f).to_owned(), map.get(*f).cloned().unwrap_or(Value::Null));
                }
            }
            default_key(window, run, tool, &self::fingerprint(&Value::Object(picked)))
        }
        (None, _) => default_key(window, run, tool, &fingerprint),
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
    let CallKey { key, fingerprint } =
        with_fingerprint(T::KEY_RULE, T::WINDOW, run, T::NAME, &input, fingerprint, custom);
    Ok(CallIdentity {
        key,
        fingerprint,
        input,
        keyed,
    })
}
