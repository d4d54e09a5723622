//! The names the attribute accepts, in one place, and the "did you mean" helper.

pub const EFFECT: &str = "effect";
pub const KEY: &str = "key";
pub const WINDOW: &str = "window";
pub const TTL: &str = "ttl";
pub const RECOVER: &str = "recover";
pub const RECOVER_FIRST: &str = "recover_first";
pub const RECOVER_SETTLE: &str = "recover_settle";
pub const COMPENSATE: &str = "compensate";
pub const APPROVAL: &str = "approval";
pub const APPROVAL_TTL: &str = "approval_ttl";
pub const WHEN: &str = "when";
pub const TIMEOUT: &str = "timeout";
pub const RETRY: &str = "retry";
pub const COST: &str = "cost";
pub const NAME: &str = "name";
pub const DESCRIPTION: &str = "description";
pub const TO_MODEL: &str = "to_model";
pub const STRICT_INPUT: &str = "strict_input";
pub const STRICT: &str = "strict";
pub const SHARED_KEYS: &str = "shared_keys";
pub const OPEN_WORLD: &str = "open_world";
pub const TRANSACTIONAL: &str = "transactional";
pub const ONE_WRITE: &str = "one_write";
pub const STREAM: &str = "stream";
pub const CRATE: &str = "crate";

/// Every key of `#[tool(...)]`, in the order the docs list them.
pub const KEYS: &[&str] = &[
    EFFECT,
    KEY,
    WINDOW,
    TTL,
    RECOVER,
    RECOVER_FIRST,
    RECOVER_SETTLE,
    COMPENSATE,
    APPROVAL,
    APPROVAL_TTL,
    WHEN,
    TIMEOUT,
    RETRY,
    COST,
    NAME,
    DESCRIPTION,
    TO_MODEL,
    STRICT_INPUT,
    STRICT,
    SHARED_KEYS,
    TRANSACTIONAL,
    ONE_WRITE,
    STREAM,
    OPEN_WORLD,
    CRATE,
];

pub const MAX_ATTEMPTS: &str = "max_attempts";
pub const BASE_DELAY: &str = "base_delay";
pub const MAX_DELAY: &str = "max_delay";

/// Every key of `retry(...)`.
pub const RETRY_KEYS: &[&str] = &[MAX_ATTEMPTS, BASE_DELAY, MAX_DELAY];

/// The table of a team's rules: `[package.metadata.effect-tool.rules]`.
pub const RULES: &str = "rules";

pub const IRREVERSIBLE_NEEDS_APPROVAL_OR_RECOVER: &str = "irreversible-needs-approval-or-recover";
pub const IDEMPOTENT_NEEDS_KEY: &str = "idempotent-needs-key";
pub const CROSS_RUN_NEEDS_CUSTOM_KEY: &str = "cross-run-needs-custom-key";
pub const NON_PURE_NEEDS_TIMEOUT: &str = "non-pure-needs-timeout";
pub const APPROVAL_ROLES: &str = "approval-roles";

/// Every rule a team can state, in the order the docs list them.
pub const RULE_NAMES: &[&str] = &[
    IRREVERSIBLE_NEEDS_APPROVAL_OR_RECOVER,
    IDEMPOTENT_NEEDS_KEY,
    CROSS_RUN_NEEDS_CUSTOM_KEY,
    NON_PURE_NEEDS_TIMEOUT,
    APPROVAL_ROLES,
];

/// The effect classes, as written in `effect = "..."`.
pub const CLASSES: &[&str] = &["pure", "idempotent", "compensable", "irreversible"];

/// The key windows, as written in `window = "..."`.
pub const WINDOWS: &[&str] = &["run", "thread", "cross-run"];

/// The argument attribute of a value the application holds, taken from the run (never in the
/// schema, never seen by the model).
pub const SECRET: &str = "secret";

/// The argument attribute of a value the model supplies that is never kept (journal, logs, keys,
/// error texts).
pub const SENSITIVE: &str = "sensitive";

/// The facade's doc-hidden module that generated code names (`::effect_tool::__private_0_1_0`),
/// named after this crate's version as thiserror names its `__private17`: a facade and a macro
/// crate of different versions fail to compile (rustc: could not find `__private_0_1_1` in
/// `effect_tool`) instead of generating code against items that changed. The facade's module
/// has the same name; `ui-tests/tests/private_path.rs` keeps the two in step.
pub const PRIVATE: &str = concat!(
    "__private_",
    env!("CARGO_PKG_VERSION_MAJOR"),
    "_",
    env!("CARGO_PKG_VERSION_MINOR"),
    "_",
    env!("CARGO_PKG_VERSION_PATCH")
);

/// The context type injected into tools.
pub const EFFECT_CTX: &str = "EffectCtx";

/// The candidate closest to `word` (case-insensitive edit distance), if it is close enough to
/// be what the user meant.
pub fn nearest<'a>(word: &str, candidates: &[&'a str]) -> Option<&'a str> {
    let word = word.to_ascii_lowercase();
    candidates
        .iter()
        .map(|c| {
            // A shared stem (`retries` for `retry`) counts as close.
            let stem = word.len().min(c.len()).min(4);
            let d = if stem >= 3 && word.as_bytes()[..stem] == c.as_bytes()[..stem] {
                1
            } else {
                distance(&word, c)
            };
            (d.min(distance(&word, c)), *c)
        })
        .filter(|(d, c)| *d <= (c.len().max(word.len()) / 3).max(2))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// `a`, `b`, `c` as a list for messages: "`a`, `b`, `c`".
pub fn list(items: &[&str]) -> String {
    items.iter().map(|i| format!("`{i}`")).collect::<Vec<_>>().join(", ")
}

/// Levenshtein distance.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggests_the_nearest_name() {
        assert_eq!(nearest("idempotnt", CLASSES), Some("idempotent"));
        assert_eq!(nearest("Irreversable", CLASSES), Some("irreversible"));
        assert_eq!(nearest("windo", KEYS), Some("window"));
        assert_eq!(nearest("retries", KEYS), Some("retry"));
        assert_eq!(nearest("one_wirte", KEYS), Some("one_write"));
        assert_eq!(nearest("onewrite", KEYS), Some("one_write"));
        assert_eq!(nearest("zzzzzzzz", KEYS), None);
    }
}
