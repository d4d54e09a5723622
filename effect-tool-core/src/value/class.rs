//! The four effect classes: what running a tool twice does to the world.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// What running a tool a second time does to the world.
///
/// The class belongs to the tool, not to the call; the runtime derives the retry policy from it
/// (see [`crate::decide::policy`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EffectClass {
    /// Nothing changes (lookups, searches): retried freely, not journaled.
    Pure,
    /// Same result if the same key is passed downstream: retried with the same key.
    Idempotent,
    /// A second effect that can be undone (reserve, draft): retried only after checking whether
    /// the first attempt landed; compensated when the run is abandoned.
    Compensable,
    /// A second effect that cannot be undone (email, payment, deploy): at most once.
    Irreversible,
}

impl EffectClass {
    /// Every class, in declaration order.
    pub const ALL: [EffectClass; 4] = [
        EffectClass::Pure,
        EffectClass::Idempotent,
        EffectClass::Compensable,
        EffectClass::Irreversible,
    ];

    /// Whether a claim of this class must be on disk before the tool runs.
    ///
    /// `false` for [`EffectClass::Idempotent`] (and [`EffectClass::Pure`], which is journaled
    /// only when asked): a claim lost in a power failure only means the call runs again with the
    /// same key, which the class allows, and the record's own flush, later in the same
    /// write-ahead log, makes the claim durable with it. `true` for [`EffectClass::Compensable`]
    /// and [`EffectClass::Irreversible`]: their claim is the evidence that the effect may have
    /// happened, which must survive to make the next attempt reconcile instead of acting again.
    /// Stores read it through [`crate::decide::record::Op::needs_flush`].
    pub const fn claim_needs_flush(self) -> bool {
        match self {
            EffectClass::Pure | EffectClass::Idempotent => false,
            EffectClass::Compensable | EffectClass::Irreversible => true,
        }
    }

    /// The name used in declarations, records and manifests (`"pure"`, `"idempotent"`, ...).
    pub const fn as_str(self) -> &'static str {
        match self {
            EffectClass::Pure => "pure",
            EffectClass::Idempotent => "idempotent",
            EffectClass::Compensable => "compensable",
            EffectClass::Irreversible => "irreversible",
        }
    }
}

impl fmt::Display for EffectClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The error of parsing an [`EffectClass`] from text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown effect class `{0}`: expected one of pure, idempotent, compensable, irreversible")]
pub struct UnknownClass(pub String);

impl FromStr for EffectClass {
    type Err = UnknownClass;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        EffectClass::ALL
            .into_iter()
            .find(|c| c.as_str() == s)
            .ok_or_else(|| UnknownClass(s.to_owned()))
    }
}

/// Where an effect key is unique.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Window {
    /// Unique within one run (the default): a new run may apply the effect again.
    #[default]
    Run,
    /// Unique within one conversation thread, across its runs.
    Thread,
    /// Unique everywhere the store is shared, until the record's ttl expires.
    CrossRun,
}

impl Window {
    /// The name used in declarations and manifests (`"run"`, `"thread"`, `"cross-run"`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Window::Run => "run",
            Window::Thread => "thread",
            Window::CrossRun => "cross-run",
        }
    }
}

impl fmt::Display for Window {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn class_names_round_trip() {
        for class in EffectClass::ALL {
            assert_eq!(class.as_str().parse::<EffectClass>(), Ok(class));
            let json = serde_json::to_string(&class).unwrap();
            assert_eq!(json, format!("\"{}\"", class.as_str()));
        }
        assert!("pur".parse::<EffectClass>().is_err());
    }
}
