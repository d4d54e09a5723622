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
//! # The client's own key
//!
//! A call made in a run that carries the client's idempotency key
//! ([`RunContext::with_client_key`]: the MCP server sets it from an `idempotencyKey` in the
//! request's `_meta` or an `Idempotency-Key` HTTP header) is keyed by it instead of the tool's
//! rule, whatever the window: `%client:<tool>:<key>`, or `%client:principal:<principal>:<tool>:<key>`
//! for a principal ([`client_key`]). So a client's key never reaches another tool's record or
//! another principal's, and it holds across runs and sessions, as an idempotency key must. No
//! other key starts with `%client:` (an unscoped custom key starting with `%` gets another `%`).
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
//!
//! # Sensitive values: left out of the key, bound by the fingerprint
//!
//! A `#[sensitive]` field's value is never journaled, and never part of the key (keys are
//! portable: the same call has the same key on every journal). But an approval must bind it:
//! a person who approved a transfer approved it to one account, and a call that swaps the
//! account must not run on that approval. So the input the engine journals (and fingerprints)
//! holds, in place of each sensitive value, its keyed digest ([`SENSITIVE_FIELD`]):
//!
//! ```text
//! {"amount": 100, "iban": {"$sensitive": "hmac-sha256:<64 hex digits>"}}
//! ```
//!
//! The digest is HMAC-SHA256 of the field's name and canonical value under the journal's
//! secret ([`Store::marker_secret`](crate::Store::marker_secret), the one markers are signed
//! with), so a reader of the journal learns that the field was given and when it changed, not
//! its value (a card number cannot be found by trying candidates without the secret). A
//! changed sensitive value changes the fingerprint: an approval given for the other value is
//! voided and the call parks again. A journal that keeps no secret (a custom store whose
//! `marker_secret` is `None`, and no [`Engine::with_marker_secret`](crate::Engine::with_marker_secret))
//! binds under a secret random to the process ([`identify`] without a secret does the same):
//! an approval is then honoured only by the process that computed its fingerprint, and a call
//! made by another process parks again for its own approval.

use hmac::{Hmac, Mac};
use serde_json::Value;
use sha2::Sha256;

use crate::call::context::RunContext;
use crate::call::tool::KeyRule;
use crate::value::canonical;
use crate::value::class::Window;
use crate::value::marker::MarkerSecret;

use crate::value::digest::sha256_hex;

/// `args` with the sensitive top-level fields (by serialized name) removed: what may be stored,
/// logged and hashed. (The CLI's `key` command reaches it through `crate::__cli`.)
pub(crate) fn redact(mut args: Value, secrets: &[&str]) -> Value {
    if !secrets.is_empty()
        && let Value::Object(map) = &mut args
    {
        for s in secrets {
            map.remove(*s);
        }
    }
    args
}

/// The name of the one field of the object that stands for a sensitive value in a journaled
/// input: `{"$sensitive": "hmac-sha256:<hex>"}` (see the module docs).
pub const SENSITIVE_FIELD: &str = "$sensitive";

/// What the digest of a sensitive value covers before its field's name, so that it means "a
/// sensitive value" and nothing else (not a marker's MAC under the same secret).
const SENSITIVE_CONTEXT: &[u8] = b"effect-tool sensitive value v1\n";

/// The secret sensitive values are bound under when the journal keeps none: random, once per
/// process.
fn process_secret() -> &'static MarkerSecret {
    static SECRET: std::sync::OnceLock<MarkerSecret> = std::sync::OnceLock::new();
    SECRET.get_or_init(|| {
        MarkerSecret::random().unwrap_or_else(|e| panic!("no secret to bind sensitive values under: {e}"))
    })
}

/// `args` as the engine journals and fingerprints it: each sensitive top-level field (by
/// serialized name) that is present holds, instead of its value, the value's keyed digest
/// under `secret` (`None`: a secret random to this process), as
/// `{"$sensitive": "hmac-sha256:<hex>"}`. The value itself is gone. See the module docs.
pub fn bind(mut args: Value, sensitive: &[&str], secret: Option<&MarkerSecret>) -> Value {
    if sensitive.is_empty() {
        return args;
    }
    let secret = secret.unwrap_or_else(|| process_secret());
    if let Value::Object(map) = &mut args {
        for name in sensitive {
            if let Some(value) = map.get_mut(*name) {
                // HMAC takes a key of any length: this cannot fail.
                let mut mac =
                    <Hmac<Sha256> as Mac>::new_from_slice(secret.as_bytes()).unwrap_or_else(|_| unreachable!());
                mac.update(SENSITIVE_CONTEXT);
                mac.update(name.as_bytes());
                mac.update(b"\n");
                mac.update(canonical::to_string(value).as_bytes());
                let digest = mac.finalize().into_bytes();
                let mut hex = String::with_capacity(64 + 12);
                hex.push_str("hmac-sha256:");
                for b in digest {
                    hex.push_str(&format!("{b:02x}"));
                }
                *value = serde_json::json!({ SENSITIVE_FIELD: hex });
            }
        }
    }
    args
}

/// The names of the top-level fields of a journaled `input` that stand for a sensitive value
/// ([`bind`]): what an approver is told was given, and is bound, without being shown.
pub fn bound_fields(input: &Value) -> Vec<&str> {
    let Value::Object(map) = input else { return Vec::new() };
    map.iter()
        .filter(|(_, v)| matches!(v, Value::Object(o) if o.len() == 1 && o.get(SENSITIVE_FIELD).is_some_and(Value::is_string)))
        .map(|(k, _)| k.as_str())
        .collect()
}

/// `input` (a journaled input) without its bound sensitive fields ([`bind`]), as the tool's
/// arguments were before sensitive values were bound: what a compensation is given.
pub fn unbind(mut input: Value, sensitive: &[&str]) -> Value {
    if let Value::Object(map) = &mut input {
        for name in sensitive {
            if map
                .get(*name)
                .is_some_and(|v| matches!(v, Value::Object(o) if o.contains_key(SENSITIVE_FIELD)))
            {
                map.remove(*name);
            }
        }
    }
    input
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

/// `error` with the values of the sensitive fields of `args` cut out of its texts ([`scrub`]):
/// the tool's own error text, and the text of an identical call's failure it shares. A tool
/// error that echoes a `#[sensitive]` argument reaches no log, journal or model with it.
pub fn scrub_error(
    error: crate::call::error::EffectError<String>,
    args: &Value,
    sensitive: &[&str],
) -> crate::call::error::EffectError<String> {
    use crate::call::error::EffectError;
    if sensitive.is_empty() {
        return error;
    }
    match error {
        EffectError::SharedFailure {
            tool,
            key,
            failure,
            message,
        } => EffectError::SharedFailure {
            tool,
            key,
            failure,
            message: scrub(message, args, sensitive),
        },
        other => other.map_tool_error(|text| scrub(text, args, sensitive)),
    }
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
    if !id.bytes().any(|b| b == b'%' || b == b':') {
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
    let mut scope = String::new();
    push_scope(&mut scope, window, shared, run).then_some(scope)
}

/// Append the scope [`scope_of`] gives to `out`; `false` (nothing appended) when the window has
/// none. Keys are built in one buffer this way, not from a scope allocated on its own.
fn push_scope(out: &mut String, window: Window, shared: bool, run: &RunContext) -> bool {
    let (word, id) = match (window, run.thread_id(), run.principal()) {
        (Window::Run, _, _) | (Window::Thread, None, _) => (None, run.run_id()),
        (Window::Thread, Some(t), _) => (Some(THREAD), t),
        (Window::CrossRun, _, Some(p)) if !shared => (Some(PRINCIPAL), p),
        (Window::CrossRun, _, _) => return false,
    };
    if let Some(word) = word {
        out.push_str(word);
        out.push(':');
    }
    out.push_str(&key_component(id));
    true
}

/// The default key of a call: `<scope>:<tool>:<hash>` (see the module docs).
pub fn default_key(window: Window, run: &RunContext, tool: &str, hash: &str) -> String {
    default_key_in(window, false, run, tool, hash)
}

/// [`default_key`] for a tool whose keys are `shared` or not, written into one buffer sized
/// for it (a new call's key is built on every call's path).
fn default_key_in(window: Window, shared: bool, run: &RunContext, tool: &str, hash: &str) -> String {
    let mut key = String::with_capacity(run.run_id().len() + tool.len() + hash.len() + 16);
    if push_scope(&mut key, window, shared, run) {
        key.push(':');
    }
    key.push_str(tool);
    key.push(':');
    key.push_str(hash);
    key
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

/// The longest client idempotency key accepted, in bytes (as Stripe's): a longer one is
/// refused before anything runs.
pub const MAX_CLIENT_KEY_BYTES: usize = 255;

/// The effect key of a call of `tool` made under the client's idempotency key `client` (see
/// the module docs, "The client's own key"): scoped to the tool and to the run's principal,
/// every part escaped ([`key_component`]).
pub fn client_key(run: &RunContext, tool: &str, client: &str) -> String {
    match run.principal() {
        Some(p) => format!(
            "%client:{PRINCIPAL}:{}:{}:{}",
            key_component(p),
            key_component(tool),
            key_component(client)
        ),
        None => format!("%client:{}:{}", key_component(tool), key_component(client)),
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
    let key = match (custom, rule) {
        (Some(custom), _) => custom_key_of(scope_of(window, shared, run), &custom),
        (None, KeyRule::Fields(fields)) => {
            let mut picked = serde_json::Map::new();
            if let Value::Object(map) = redacted {
                for f in fields {
                    picked.insert((*f).to_owned(), map.get(*f).cloned().unwrap_or(Value::Null));
                }
            }
            default_key_in(window, shared, run, tool, &self::fingerprint(&Value::Object(picked)))
        }
        (None, _) => default_key_in(window, shared, run, tool, &fingerprint),
    };
    CallKey { key, fingerprint }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn client_keys_are_scoped_to_the_tool_and_the_principal() {
        let run = RunContext::new("r1");
        assert_eq!(client_key(&run, "refund", "abc"), "%client:refund:abc");
        let alice = RunContext::new("r2").with_principal("alice");
        assert_eq!(
            client_key(&alice, "refund", "abc"),
            "%client:principal:alice:refund:abc"
        );
        // Separators in a part cannot move a key into another tool's or principal's place.
        assert_ne!(
            client_key(&run, "principal", "alice:refund:abc"),
            client_key(&alice, "refund", "abc")
        );
        assert_ne!(client_key(&run, "a:b", "c"), client_key(&run, "a", "b:c"));
        // No custom key of a cross-run tool can be one.
        assert_eq!(custom_key_of(None, "%client:refund:abc"), "%%client:refund:abc");
    }

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

    /// A sensitive value is left out of the key and bound by the fingerprint: another value is
    /// the same key and another fingerprint; the journaled input holds its keyed digest, which
    /// depends on the secret, and never the value.
    #[test]
    fn sensitive_values_bind_the_fingerprint_not_the_key() {
        #[derive(Clone, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
        struct Args {
            amount: u64,
            iban: String,
        }
        struct Transfer;
        impl crate::Tool for Transfer {
            type Args = Args;
            type Output = ();
            type Error = crate::ToolError;
            const NAME: &'static str = "transfer";
            const CLASS: crate::EffectClass = crate::EffectClass::Irreversible;
            const SENSITIVE: &'static [&'static str] = &["iban"];
            async fn call(&self, _ctx: &crate::EffectCtx, _args: Args) -> Result<(), crate::ToolError> {
                Ok(())
            }
        }
        let run = RunContext::new("r1");
        let secret = MarkerSecret::from_bytes([7; 32]);
        let to = |iban: &str| Args {
            amount: 100,
            iban: iban.to_owned(),
        };
        let ours = identify_with(&Transfer, &run, &to("DE00 1111"), Some(&secret)).unwrap();
        let theirs = identify_with(&Transfer, &run, &to("DE99 6666"), Some(&secret)).unwrap();
        assert_eq!(ours.key, theirs.key, "keys leave sensitive values out");
        assert_ne!(ours.fingerprint, theirs.fingerprint, "the fingerprint binds them");
        assert_eq!(
            ours.fingerprint,
            identify_with(&Transfer, &run, &to("DE00 1111"), Some(&secret))
                .unwrap()
                .fingerprint
        );
        assert_eq!(bound_fields(&ours.input), ["iban"]);
        assert!(!ours.input.to_string().contains("1111"), "{}", ours.input);
        let other_secret = MarkerSecret::from_bytes([8; 32]);
        let elsewhere = identify_with(&Transfer, &run, &to("DE00 1111"), Some(&other_secret)).unwrap();
        assert_ne!(
            elsewhere.input, ours.input,
            "the digest is keyed by the journal's secret"
        );
        assert_eq!(elsewhere.key, ours.key);
        // A compensation is given the arguments without the digests.
        assert_eq!(
            unbind(ours.input.clone(), <Transfer as crate::Tool>::SENSITIVE),
            json!({"amount": 100})
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

/// Everything the engine journals a call under: its key, the fingerprint and the journaled input.
#[derive(Debug, Clone, PartialEq)]
pub struct CallIdentity {
    /// The effect key (sensitive values left out).
    pub key: String,
    /// SHA-256 hex of the canonical journaled input (sensitive values bound by their digests).
    pub fingerprint: String,
    /// The input as it is journaled: secret fields removed, sensitive values replaced by their
    /// keyed digests ([`bind`]).
    pub input: Value,
    /// Whether the key comes from a declared rule (`key = ...` or `key(...)`) rather than the
    /// default hash of the whole input.
    pub keyed: bool,
}

/// The identity of a call of `tool` with `args` in `run`: the key exactly as the engine
/// computes it, for tools, tests and operators that need the key before (or without) calling.
///
/// The fingerprint and input bind sensitive values under a secret random to this process (see
/// the module docs): for a tool with `#[sensitive]` fields, use [`identify_with`] and the
/// journal's secret ([`Engine::marker_secret`](crate::Engine::marker_secret)) for the
/// fingerprint the engine journals. For other tools both agree.
///
/// Fails when `args` do not serialize, or hold an integer beyond ±(2^53 − 1) (see
/// [`canonical`]'s "Integers" section): the error names its path and says to send it as a string.
pub fn identify<T: crate::Tool>(tool: &T, run: &RunContext, args: &T::Args) -> Result<CallIdentity, serde_json::Error> {
    identify_with(tool, run, args, None)
}

/// [`identify`], sensitive values bound under `secret` (the journal's, as the engine does;
/// `None`: a secret random to this process).
pub fn identify_with<T: crate::Tool>(
    tool: &T,
    run: &RunContext,
    args: &T::Args,
    secret: Option<&MarkerSecret>,
) -> Result<CallIdentity, serde_json::Error> {
    let value = serde_json::to_value(args)?;
    let bound = (!T::SENSITIVE.is_empty()
        && matches!(&value, Value::Object(m) if T::SENSITIVE.iter().any(|s| m.contains_key(*s))))
    .then(|| bind(value.clone(), T::SENSITIVE, secret));
    let input = redact(value, T::SENSITIVE);
    // One walk makes the canonical form and refuses an integer RFC 8785 would round into
    // another one's key (refused, not merged).
    let canonical = canonical::try_to_string(&input).map_err(<serde_json::Error as serde::ser::Error>::custom)?;
    let custom = tool.key(args);
    let keyed = custom.is_some() || T::KEY_RULE != KeyRule::Default || run.client_key().is_some();
    let hash = sha256_hex(canonical.as_bytes());
    let CallKey { mut key, fingerprint } = with_fingerprint(
        T::KEY_RULE,
        tool.declared_window(),
        T::SHARED_KEYS,
        run,
        tool.declared_name(),
        &input,
        hash,
        custom,
    );
    if let Some(client) = run.client_key() {
        key = client_key(run, tool.declared_name(), client);
    }
    // The key leaves sensitive values out; the fingerprint (and what is journaled) binds them.
    let (fingerprint, input) = match bound {
        Some(bound) => (fingerprint_bound(&bound), bound),
        None => (fingerprint, input),
    };
    Ok(CallIdentity {
        key,
        fingerprint,
        input,
        keyed,
    })
}

/// The fingerprint of a journaled input whose sensitive values are bound (its canonical form
/// was checked while the key was made, without them; the digests are plain strings).
fn fingerprint_bound(bound: &Value) -> String {
    fingerprint(bound)
}
