//! Root names of earlier releases that are now only in their layer's module: each a deprecated
//! alias (or, for a function, a deprecated wrapper) of its new path, kept for one release.
//! CHANGELOG.md lists them. The root keeps what a user of the attribute names.

/// Deprecated: [`effect_tool::call::tool::Injected`](crate::call::tool::Injected).
#[doc(hidden)]
#[deprecated(note = "moved to `effect_tool::call::tool::Injected` (what the code of `#[tool]` names)")]
pub type Injected = effect_tool_core::call::tool::Injected;

/// Deprecated: [`effect_tool::decide::policy::Decision`](crate::decide::policy::Decision).
#[doc(hidden)]
#[deprecated(note = "moved to `effect_tool::decide::policy::Decision`")]
pub type Decision = effect_tool_core::decide::policy::Decision;

/// Deprecated: [`effect_tool::value::outcome::Outcome`](crate::value::outcome::Outcome).
#[doc(hidden)]
#[deprecated(note = "moved to `effect_tool::value::outcome::Outcome`")]
pub type Outcome = effect_tool_core::value::outcome::Outcome;

/// Deprecated: [`effect_tool::engine::compensation::AbandonReport`](crate::engine::compensation::AbandonReport).
#[doc(hidden)]
#[deprecated(note = "moved to `effect_tool::engine::compensation::AbandonReport`")]
pub type AbandonReport = effect_tool_core::engine::compensation::AbandonReport;

/// Deprecated: [`effect_tool::call::tool::missing_value`](crate::call::tool::missing_value).
#[doc(hidden)]
#[deprecated(note = "moved to `effect_tool::call::tool::missing_value`")]
pub fn missing_value<T: crate::Tool>(run: &crate::RunContext) -> Option<&'static str> {
    effect_tool_core::call::tool::missing_value::<T>(run)
}

/// Deprecated: [`effect_tool::call::tool::check_values`](crate::call::tool::check_values).
#[doc(hidden)]
#[deprecated(note = "moved to `effect_tool::call::tool::check_values`")]
pub fn check_values<T: crate::Tool>(run: &crate::RunContext) -> Result<(), crate::EffectError<T::Error>> {
    effect_tool_core::call::tool::check_values::<T>(run)
}
