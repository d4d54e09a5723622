//! The paths modules had before the crate's folders followed its layers (0.1): each a deprecated
//! module re-exporting its new home, kept for one release. CHANGELOG.md lists them.
//!
//! Only these shims are deprecated, not what they re-export. rustc warns where a shim itself is
//! named (`use effect_tool::record;`), not for a path through it
//! (`use effect_tool::record::EffectRecord;` compiles silently): it checks the deprecation of a
//! path's last item only. What left the API (`key::sha256_hex`, `key::redact`,
//! `compensation::compensation_key`, the `shell` functions) is deprecated item by item, so every
//! use warns, with what to do instead.
#![allow(missing_docs)]

#[doc(hidden)]
#[deprecated(note = "moved to `value::canonical` (effect_tool::value::canonical)")]
pub mod canonical {
    pub use crate::value::canonical::*;
}

#[doc(hidden)]
#[deprecated(note = "moved to `value::class` (effect_tool::value::class)")]
pub mod class {
    pub use crate::value::class::*;
}

#[doc(hidden)]
#[deprecated(note = "moved to `value::outcome` (effect_tool::value::outcome)")]
pub mod outcome {
    pub use crate::value::outcome::*;
}

#[doc(hidden)]
#[deprecated(
    note = "moved to `value::marker` (effect_tool::value::marker); `find_record` to `store::markers` (effect_tool::store::markers::find_record)"
)]
pub mod marker {
    pub use crate::store::markers::find_record;
    pub use crate::value::marker::*;
}

#[doc(hidden)]
#[deprecated(note = "no longer part of the API (only the effect-tool command used it)")]
pub mod shell {
    #[deprecated(
        note = "no longer part of the API (only the effect-tool command used it): copy it into your code, or quote with a crate such as `shlex`"
    )]
    pub fn quote(s: &str) -> String {
        crate::__cli::quote(s)
    }

    #[deprecated(
        note = "no longer part of the API (only the effect-tool command used it): `c.is_control()`, or copy it into your code for the Unicode format characters too"
    )]
    pub fn is_hidden(c: char) -> bool {
        crate::__cli::is_hidden(c)
    }
}

#[doc(hidden)]
#[deprecated(note = "moved to `value::schema` (effect_tool::value::schema)")]
pub mod schema {
    pub use crate::value::schema::*;
}

#[doc(hidden)]
#[deprecated(note = "moved to `decide::policy` (effect_tool::decide::policy)")]
pub mod policy {
    pub use crate::decide::policy::*;
}

#[doc(hidden)]
#[deprecated(note = "moved to `decide::record` (effect_tool::decide::record)")]
pub mod record {
    pub use crate::decide::record::*;
}

#[doc(hidden)]
#[deprecated(note = "moved to `call::error` (effect_tool::call::error)")]
pub mod error {
    pub use crate::call::error::*;
}

#[doc(hidden)]
#[deprecated(note = "moved to `call::context` (effect_tool::call::context)")]
pub mod context {
    pub use crate::call::context::*;
}

// The old path of `call::tool`, `tool`, is a plain re-export in lib.rs (and the facade's), not a
// deprecated shim: `use effect_tool::tool;` imports the attribute, and with it the module of the
// same name (another namespace); a deprecated module would warn every user of the attribute.

#[doc(hidden)]
#[deprecated(note = "moved to `call::key` (effect_tool::call::key)")]
pub mod key {
    pub use crate::call::key::*;

    #[deprecated(
        note = "no longer part of the API (only the effect-tool command used it): hash with the `sha2` crate, `format!(\"{:x}\", sha2::Sha256::digest(bytes))`"
    )]
    pub fn sha256_hex(bytes: &[u8]) -> String {
        crate::__cli::sha256_hex(bytes)
    }

    #[deprecated(
        note = "no longer part of the API (only the effect-tool command used it): remove the sensitive fields from the arguments' JSON object yourself (`map.remove(name)`)"
    )]
    pub fn redact(args: serde_json::Value, secrets: &[&str]) -> serde_json::Value {
        crate::__cli::redact(args, secrets)
    }
}

#[doc(hidden)]
#[deprecated(note = "moved to `call::stream` (effect_tool::call::stream)")]
pub mod stream {
    pub use crate::call::stream::*;
}

#[doc(hidden)]
#[deprecated(note = "moved to `engine::compensation` (effect_tool::engine::compensation)")]
pub mod compensation {
    pub use crate::engine::compensation::*;

    #[deprecated(
        note = "no longer part of the API (only the effect-tool command used it): the compensation of a record is journaled under `compensate:` followed by the record's key"
    )]
    pub fn compensation_key(key: &str) -> String {
        crate::__cli::compensation_key(key)
    }
}

#[doc(hidden)]
#[deprecated(note = "moved to `engine::dyn_tool` (effect_tool::engine::dyn_tool)")]
pub mod dyn_tool {
    pub use crate::engine::dyn_tool::*;
}

#[doc(hidden)]
#[deprecated(note = "moved to `toolkit::manifest` (effect_tool::toolkit::manifest)")]
pub mod manifest {
    pub use crate::toolkit::manifest::*;
}

#[doc(hidden)]
#[deprecated(note = "moved to `ops::notify` (effect_tool::ops::notify)")]
pub mod notify {
    pub use crate::ops::notify::*;
}

#[doc(hidden)]
#[deprecated(note = "moved to `ops::gauges` (effect_tool::ops::gauges)")]
pub mod gauges {
    pub use crate::ops::gauges::*;
}

#[cfg(feature = "prometheus")]
#[doc(hidden)]
#[deprecated(note = "moved to `ops::prometheus` (effect_tool::ops::prometheus)")]
pub mod prometheus {
    pub use crate::ops::prometheus::*;
}

#[cfg(feature = "console")]
#[doc(hidden)]
#[deprecated(note = "moved to `ops::console` (effect_tool::ops::console)")]
pub mod console {
    pub use crate::ops::console::*;
}

#[cfg(feature = "mcp")]
#[doc(hidden)]
#[deprecated(note = "moved to `adapters::mcp` (effect_tool::adapters::mcp)")]
pub mod mcp {
    pub use crate::adapters::mcp::*;
}

#[cfg(feature = "rig")]
#[doc(hidden)]
#[deprecated(note = "moved to `adapters::rig` (effect_tool::adapters::rig)")]
pub mod rig {
    pub use crate::adapters::rig::*;
}

#[cfg(feature = "testing")]
#[doc(hidden)]
#[deprecated(note = "moved to `testing::conformance` (effect_tool::testing::conformance)")]
pub mod conformance {
    pub use crate::testing::conformance::*;
}
