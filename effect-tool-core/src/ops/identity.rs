//! The identities file (feature `console`): one TOML file that says who is who across the
//! console, MCP and the CLI, read into [`Identities`] (the decision layer's map, where four
//! eyes compares people; see [`crate::decide::identity`]).
//!
//! ```toml
//! # effect-tool.identities.toml: one [[person]] table per person.
//! [[person]]
//! id = "maria"
//! roles = ["manager"]                  # what she may approve as through the CLI
//! console = ["maria", "m.rossi@example.com"] # console names (tokens file, proxy user)
//! mcp = ["00u1abc"]                    # MCP principal ids (JWT `sub`, static token names)
//! cli_tokens = ["<sha256 hex of her CLI token>"] # printf %s "$TOKEN" | sha256sum
//! os_users = ["maria"]                 # OS users of the CLI's --local-admin mode
//! ```
//!
//! The file holds no secret (CLI tokens only as digests), but whoever may change it may make
//! two people one or give a token to anyone: on Unix a file its group or others may write is
//! refused.

use std::path::Path;

pub use crate::decide::identity::{Actor, Identities, IdentitiesError, IdentitySystem, Person, same_person};

/// Read the identities file at `path` (see the module docs).
///
/// # Errors
///
/// [`IdentitiesError`] when the file cannot be read, its group or others may write it, it is
/// not TOML of the file's shape, or [`Identities::new`] refuses what it says; the message names
/// the file and what to do.
pub fn read_identities(path: impl AsRef<Path>) -> Result<Identities, IdentitiesError> {
    use std::io::Read;
    let path = path.as_ref();
    let error = |why: String| IdentitiesError(format!("identities file {}: {why}", path.display()));
    let mut file = std::fs::File::open(path).map_err(|e| error(e.to_string()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = file.metadata().map_err(|e| error(e.to_string()))?.permissions().mode();
        if mode & 0o022 != 0 {
            return Err(error(format!(
                "its group or others may write it (mode {:04o}), and whoever changes it can make two people one or give themselves a token: chmod go-w it",
                mode & 0o7777
            )));
        }
    }
    let mut text = String::new();
    file.read_to_string(&mut text).map_err(|e| error(e.to_string()))?;
    toml::from_str(&text).map_err(|e| error(e.to_string()))
}
