//! What happened when a tool ran: the classification of failures, kept apart from the policy
//! that decides what to do about them ([`crate::decide::policy`]).

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How a failed call left the world, as the tool's error says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum Failure {
    /// Nothing happened and retrying will not help (bad request, refused, not found).
    Definitive,
    /// Nothing happened; retrying is safe (rate limited, connection refused before sending).
    Transient {
        /// How long the remote system asked us to wait, if it said (e.g. `Retry-After`).
        #[serde(default, skip_serializing_if = "Option::is_none", with = "opt_millis")]
        retry_after: Option<Duration>,
    },
    /// The effect may or may not have happened (timeout after sending, connection reset).
    Unknown,
}

impl Failure {
    /// A transient failure with no requested delay.
    pub const TRANSIENT: Failure = Failure::Transient { retry_after: None };

    /// The short name of the kind: `definitive`, `transient` or `unknown`.
    pub const fn as_str(&self) -> &'static str {
        match self {
            Failure::Definitive => "definitive",
            Failure::Transient { .. } => "transient",
            Failure::Unknown => "unknown",
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Implemented by a tool's error type to say whether a failure is definitive, transient or
/// unknown.
///
/// The default says nothing (`None`), and the runtime then takes the safe direction: an
/// unclassified failure counts as [`Failure::Unknown`], so `compensable` and `irreversible`
/// tools reconcile or block, and `idempotent` tools retry with the same key.
///
/// ```
/// use effect_tool_core::{ClassifyError, Failure};
///
/// #[derive(Debug)]
/// enum PayError { Declined, RateLimited, Timeout }
///
/// impl ClassifyError for PayError {
///     fn failure(&self) -> Option<Failure> {
///         Some(match self {
///             PayError::Declined => Failure::Definitive,
///             PayError::RateLimited => Failure::TRANSIENT,
///             PayError::Timeout => Failure::Unknown,
///         })
///     }
/// }
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` does not say whether a failure is definitive, transient or unknown",
    label = "a tool's error type implements `ClassifyError`",
    note = "add `impl effect_tool::ClassifyError for {Self} {{}}` (every failure then counts as unknown, the safe default) or override `failure()`; or return `effect_tool::ToolError`"
)]
pub trait ClassifyError {
    /// The kind of this failure, or `None` if the error does not say.
    fn failure(&self) -> Option<Failure> {
        None
    }
}

impl ClassifyError for String {}
impl ClassifyError for &'static str {}
impl ClassifyError for Box<dyn std::error::Error + Send + Sync> {}
impl ClassifyError for std::convert::Infallible {
    fn failure(&self) -> Option<Failure> {
        match *self {}
    }
}

impl ClassifyError for std::io::Error {
    fn failure(&self) -> Option<Failure> {
        use std::io::ErrorKind as K;
        match self.kind() {
            K::NotFound | K::PermissionDenied | K::InvalidInput | K::InvalidData | K::Unsupported => {
                Some(Failure::Definitive)
            }
            K::ConnectionRefused | K::AddrNotAvailable | K::WouldBlock | K::Interrupted => Some(Failure::TRANSIENT),
            K::TimedOut | K::ConnectionReset | K::ConnectionAborted | K::BrokenPipe | K::UnexpectedEof => {
                Some(Failure::Unknown)
            }
            _ => None,
        }
    }
}

/// A ready-made error type for tools: a message and the kind of failure.
///
/// ```
/// use effect_tool_core::ToolError;
/// let err = ToolError::transient("rate limited").retry_after(std::time::Duration::from_secs(2));
/// assert_eq!(err.to_string(), "rate limited");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{message}")]
pub struct ToolError {
    /// What went wrong, in words the model or a person can act on.
    pub message: String,
    /// The kind of failure; `None` leaves the decision to the class's safe default.
    pub kind: Option<Failure>,
}

impl ToolError {
    /// Nothing happened and retrying will not help.
    pub fn definitive(message: impl Into<String>) -> Self {
        ToolError {
            message: message.into(),
            kind: Some(Failure::Definitive),
        }
    }
    /// Nothing happened; retrying is safe.
    pub fn transient(message: impl Into<String>) -> Self {
        ToolError {
            message: message.into(),
            kind: Some(Failure::TRANSIENT),
        }
    }
    /// The effect may have happened.
    pub fn unknown(message: impl Into<String>) -> Self {
        ToolError {
            message: message.into(),
            kind: Some(Failure::Unknown),
        }
    }
    /// An error that does not say what happened (the class's safe default applies).
    pub fn unclassified(message: impl Into<String>) -> Self {
        ToolError {
            message: message.into(),
            kind: None,
        }
    }
    /// Ask for a delay before the retry (honoured within the policy's bounds).
    pub fn retry_after(mut self, delay: Duration) -> Self {
        self.kind = Some(Failure::Transient {
            retry_after: Some(delay),
        });
        self
    }
}

impl ClassifyError for ToolError {
    fn failure(&self) -> Option<Failure> {
        self.kind
    }
}

/// What a single execution of a tool came to, as the policy sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The tool returned a value.
    Success,
    /// The tool failed and said how (or the runtime classified the failure, e.g. a timeout).
    Failed(Failure),
    /// The tool failed and did not say how.
    Unclassified,
}

impl Outcome {
    /// The failure kind this outcome counts as, with unclassified failures read in the safe
    /// direction (unknown). (A cancelled execution never reaches the policy: the engine records
    /// it in doubt itself.)
    pub fn effective_failure(self) -> Option<Failure> {
        match self {
            Outcome::Success => None,
            Outcome::Failed(f) => Some(f),
            Outcome::Unclassified => Some(Failure::Unknown),
        }
    }
}

mod opt_millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_u64(d.as_millis() as u64),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        Ok(Option::<u64>::deserialize(d)?.map(Duration::from_millis))
    }
}
