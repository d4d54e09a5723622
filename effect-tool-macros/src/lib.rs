//! The `#[tool]` attribute of effect-tool.
