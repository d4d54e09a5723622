//! Nothing to use: this crate holds the compile-time checks of `#[tool]` (`tests/macro_ui.rs`
//! and the cases under `tests/ui/`), built by trybuild against `effect-tool` with its default
//! features, as a user's crate would build them. See its `Cargo.toml` for why it is a crate.
