//! Duration parsing of declarations (`#[tool(ttl = "1h30m")]`, `effect-tool-macros/src/duration.rs`,
//! included here by path: a proc-macro crate's functions cannot be called from another crate).
//!
//! For any text: parsing never panics; a parsed duration renders (`manifest::format_duration`,
//! what the manifest prints) as text that parses back to the same number of milliseconds, and
//! renders the same again; what parses is digits and unit letters only (after trimming).

#![no_main]

#[path = "../../effect-tool-macros/src/duration.rs"]
mod duration;

use std::time::Duration;

use effect_tool::toolkit::manifest::format_duration;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(ms) = duration::parse_duration(text) else {
        return;
    };
    assert!(
        text.trim().bytes().all(|b| b.is_ascii_alphanumeric()),
        "{text:?} parsed ({ms} ms) but holds more than digits and units"
    );
    let rendered = format_duration(Duration::from_millis(ms));
    assert_eq!(
        duration::parse_duration(&rendered),
        Ok(ms),
        "{text:?} -> {ms} ms -> {rendered:?}"
    );
    assert_eq!(format_duration(Duration::from_millis(ms)), rendered);
});
