//! The engine's redaction hook ([`Engine::with_redactor`](crate::Engine::with_redactor)): one
//! function that sees every text and value the engine stores or logs, before it is stored or
//! logged.
//!
//! What it sees, by [`Site`]: a call's input (already without its `#[sensitive]` fields) and
//! output before they are journaled, every reason written to the journal (a tool's error text
//! when a claim is released or marked in doubt, a denial's reason), the details of the audit
//! entries the engine appends, and the texts of the engine's logs that quote a tool or its
//! hooks (error texts, panic messages). Values of `#[sensitive]` fields are cut out of error
//! texts by value before the hook sees them ([`crate::call::key::scrub`]), whatever the hook
//! does.
//!
//! ```
//! use effect_tool_core::{Engine, MemoryStore, Site};
//!
//! // Mask anything that looks like one of our API tokens, wherever it appears.
//! let engine = Engine::new(MemoryStore::new()).with_redactor(|_site: Site, text: &mut String| {
//!     while let Some(at) = text.find("tok_") {
//!         let end = text[at..].find(|c: char| !c.is_ascii_alphanumeric() && c != '_').map_or(text.len(), |n| at + n);
//!         text.replace_range(at..end, "[token]");
//!     }
//! });
//! # drop(engine);
//! ```
//!
//! A redacted output is what a replay returns: a hook that changes outputs must keep them
//! decodable as the tool's output type (replace a string by another string, not by a number).
//! The hook may see one text more than once (a reason is logged and stored): make it
//! idempotent, as masking is.

use serde_json::Value;

/// Where a text or value is going when the redaction hook sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Site {
    /// A call's input, journaled with its claim (its `#[sensitive]` fields are already
    /// replaced by their keyed digests).
    Input,
    /// A call's output (or a person's, recorded with a resolution), journaled and replayed.
    Output,
    /// A reason written to the journal: a tool's error text on a released claim or a record in
    /// doubt, a denial's reason.
    Reason,
    /// The detail of an audit entry the engine appends.
    Audit,
    /// The text of a log line (a tool's error, a hook's error, a panic message).
    Log,
}

impl Site {
    /// The site's name (`input`, `output`, `reason`, `audit`, `log`).
    pub fn as_str(self) -> &'static str {
        match self {
            Site::Input => "input",
            Site::Output => "output",
            Site::Reason => "reason",
            Site::Audit => "audit",
            Site::Log => "log",
        }
    }
}

/// The redaction hook (see the module docs). Implement [`Redactor::text`]; the default
/// [`Redactor::value`] applies it to every string of a value (object keys are left as they
/// are). Every `Fn(Site, &mut String)` closure is one.
pub trait Redactor: Send + Sync + 'static {
    /// Redact `text`, going to `site`, in place.
    fn text(&self, site: Site, text: &mut String);

    /// Redact `value`, going to `site`, in place: by default, [`Redactor::text`] on each of its
    /// strings.
    fn value(&self, site: Site, value: &mut Value) {
        match value {
            Value::String(s) => self.text(site, s),
            Value::Array(items) => items.iter_mut().for_each(|v| self.value(site, v)),
            Value::Object(map) => map.values_mut().for_each(|v| self.value(site, v)),
            _ => {}
        }
    }
}

impl<F> Redactor for F
where
    F: Fn(Site, &mut String) + Send + Sync + 'static,
{
    fn text(&self, site: Site, text: &mut String) {
        self(site, text)
    }
}
