//! A team's rules for its crate's declarations, checked at compile time: stated once in the
//! crate's `Cargo.toml` (`[package.metadata.effect-tool.rules]`), parsed strictly (`load.rs`),
//! and every `#[tool]` and `#[tools]` method checked against them (`check.rs`).
//!
//! Why the manifest: it is the one file every crate has, cargo already reserves
//! `[package.metadata]` for tools (docs.rs, cargo-deb), a reviewer sees a change of the rules in
//! the same diff as the code, and the attribute finds it without being told (cargo sets
//! `CARGO_MANIFEST_DIR` for every crate it compiles). A crate's rules apply to that crate only:
//! a dependency that declares tools is checked against its own manifest, never against yours.
//!
//! `EFFECT_TOOL_RULES`, when set, names a rules file (the same keys, at its top level) used
//! instead of the manifest's table, for the crates cargo was asked to build (cargo's
//! `CARGO_PRIMARY_PACKAGE`), never for dependencies: a crate's own trybuild tests of its rules
//! set it (trybuild builds its cases in a generated crate whose manifest it writes), and CI can
//! try a stricter set without editing the manifest. A relative path is read from the crate's
//! directory.
//!
//! Cargo re-runs the attribute when the rules change: the generated code holds
//! `include_bytes!` of the file the rules were read from (the manifest, even when it states no
//! rules, so that adding some is seen) and `option_env!("EFFECT_TOOL_RULES")`, so rustc lists
//! both among the crate's inputs, as `pest_derive` does for its grammar files (a proc macro
//! cannot declare an input on stable Rust).

mod check;
mod load;

use std::fmt;
use std::path::PathBuf;

use proc_macro2::{Literal, TokenStream};
use quote::quote;

pub use check::check;

/// The environment variable that names a rules file used instead of the manifest's table.
pub const RULES_ENV: &str = "EFFECT_TOOL_RULES";

/// The rules a crate states. Every rule is off unless stated.
#[derive(Default)]
pub struct Rules {
    /// Where they are stated, for messages.
    pub source: Source,
    /// `irreversible-needs-approval-or-recover`.
    pub irreversible_needs_approval_or_recover: bool,
    /// `idempotent-needs-key`.
    pub idempotent_needs_key: bool,
    /// `cross-run-needs-custom-key`.
    pub cross_run_needs_custom_key: bool,
    /// `non-pure-needs-timeout`.
    pub non_pure_needs_timeout: bool,
    /// `approval-roles`: the roles `approval = "..."` may name.
    pub approval_roles: Option<Vec<String>>,
}

/// Where the rules are stated.
#[derive(Default)]
pub enum Source {
    /// `[package.metadata.effect-tool.rules]` of the crate's `Cargo.toml`.
    #[default]
    Manifest,
    /// The file `EFFECT_TOOL_RULES` names, as written there.
    File(String),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Manifest => f.write_str("`[package.metadata.effect-tool.rules]` of this crate's Cargo.toml"),
            Source::File(path) => write!(f, "the rules file `{path}` ({RULES_ENV})"),
        }
    }
}

/// What loading the rules found, and what makes cargo load them again when they change.
pub struct Team {
    /// The rules (`None`: the crate states none), or why they cannot be read.
    pub rules: Result<Option<Rules>, load::Invalid>,
    /// The files read.
    files: Vec<PathBuf>,
}

impl Team {
    /// The crate's rules, read from its manifest or from `EFFECT_TOOL_RULES`.
    pub fn load() -> Team {
        load::team()
    }

    /// Items that make rustc list the rules' sources among the crate's inputs, so cargo
    /// expands the declarations again when they change.
    pub fn tracking(&self) -> TokenStream {
        let files = self.files.iter().filter_map(|f| f.to_str()).map(Literal::string);
        let env = Literal::string(RULES_ENV);
        quote! {
            #(const _: &[u8] = ::core::include_bytes!(#files);)*
            const _: ::core::option::Option<&str> = ::core::option_env!(#env);
        }
    }
}
