//! The facade's doc-hidden module and the module the macros' generated code names are one
//! name, tied to the release (`__private_<major>_<minor>_<patch>`, as thiserror's
//! `__private17`), so a facade and a macro crate of different versions fail to compile.
//!
//! After a version bump this file does not compile (`could not find `__private_0_1_0``) until
//! the facade's module in `src/lib.rs` is renamed after the new version; rename it here too.

use effect_tool::{Tool, ToolError, tool};

/// A declaration: its generated code names the macro crate's `__private_<version>`, so this
/// file compiles only when the facade has a module of that name.
#[tool(effect = "pure")]
async fn probe(id: String) -> Result<String, ToolError> {
    Ok(id)
}

#[test]
fn private_module_is_named_after_the_version() {
    // Every crate of the workspace has the workspace's version: this crate's is the facade's
    // and the macro crate's.
    let release = concat!(
        "effect_tool::__private_",
        env!("CARGO_PKG_VERSION_MAJOR"),
        "_",
        env!("CARGO_PKG_VERSION_MINOR"),
        "_",
        env!("CARGO_PKG_VERSION_PATCH")
    );
    assert_eq!(
        effect_tool::__private_0_1_0::MODULE,
        release,
        "rename the facade's `__private_...` module (src/lib.rs) after the release"
    );
    assert_eq!(Probe::NAME, "probe");
}
