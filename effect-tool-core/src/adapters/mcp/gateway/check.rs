//! The declarations against the upstreams' live tool lists: a digest per tool, what drifted
//! since the file was reviewed, the declaration to add for a tool the file does not name, and
//! the file with its digests (re)written after review.

use std::path::Path;

use rmcp::model::Tool as McpTool;
use serde_json::{Value, json};

use super::declare::{DeclarationError, Declarations, UpstreamDecl};

/// The digest of an upstream tool as the file records it: SHA-256 (hex) of the canonical JSON
/// (RFC 8785) of its description, `inputSchema`, `outputSchema` and annotations. A change to any
/// of them (a new argument, a new description the model reads, `readOnlyHint` turned off) is
/// a change a person reviews.
pub fn digest_of(tool: &McpTool) -> String {
    let shape = json!({
        "description": tool.description,
        "inputSchema": Value::Object((*tool.input_schema).clone()),
        "outputSchema": tool.output_schema.as_ref().map(|s| Value::Object((**s).clone())),
        "annotations": tool.annotations.as_ref().map(|a| serde_json::to_value(a).unwrap_or(Value::Null)),
    });
    crate::value::digest::sha256_hex(crate::value::canonical::to_string(&shape).as_bytes())
}

/// Whether the upstream says the tool only reads (`readOnlyHint: true`).
pub fn read_only(tool: &McpTool) -> bool {
    tool.annotations.as_ref().and_then(|a| a.read_only_hint) == Some(true)
}

/// One difference between the file and an upstream's live tools.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Drift {
    /// A declared tool the upstream no longer lists.
    Vanished {
        /// The upstream.
        upstream: String,
        /// The tool.
        tool: String,
    },
    /// A tool the upstream lists and the file does not declare.
    Undeclared {
        /// The upstream.
        upstream: String,
        /// The tool.
        tool: String,
        /// The declaration to add (with its digest), once reviewed.
        declaration: String,
    },
    /// A declared tool whose schema, description or annotations changed since its digest was
    /// written.
    Changed {
        /// The upstream.
        upstream: String,
        /// The tool.
        tool: String,
        /// The digest in the file.
        recorded: String,
        /// The live digest.
        live: String,
    },
    /// A declared tool with no digest: never reviewed against the upstream.
    Unreviewed {
        /// The upstream.
        upstream: String,
        /// The tool.
        tool: String,
        /// The live digest.
        live: String,
    },
}

impl std::fmt::Display for Drift {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Drift::Vanished { upstream, tool } => write!(
                f,
                "`{tool}` of upstream `{upstream}` is declared but the upstream no longer lists it\nhelp: remove `[upstreams.{upstream}.tools.{tool}]`, or pin the upstream's version that has it"
            ),
            Drift::Undeclared {
                upstream,
                tool,
                declaration,
            } => write!(
                f,
                "`{tool}` of upstream `{upstream}` is not declared\nhelp: review it and add to the file:\n{declaration}"
            ),
            Drift::Changed {
                upstream,
                tool,
                recorded,
                live,
            } => write!(
                f,
                "`{tool}` of upstream `{upstream}` changed since it was reviewed (digest {recorded} in the file, {live} now): its arguments, description or annotations differ\nhelp: review the upstream's change and its declaration's class and key, then run `effect-tool gateway check --write-digests`"
            ),
            Drift::Unreviewed { upstream, tool, live } => write!(
                f,
                "`{tool}` of upstream `{upstream}` has no digest (now {live})\nhelp: review the tool, then run `effect-tool gateway check --write-digests`"
            ),
        }
    }
}

/// The declaration the file needs for an upstream tool it does not name: `pure` for a
/// read-only tool, `idempotent` for one the upstream says is idempotent, else `irreversible`
/// (the safe reading of an unknown effect), with its digest.
pub fn suggested_declaration(upstream: &str, tool: &McpTool) -> String {
    let hints = tool.annotations.as_ref();
    let class = if read_only(tool) {
        "\"pure\""
    } else if hints.and_then(|a| a.idempotent_hint) == Some(true) {
        "\"idempotent\"  # the upstream says idempotent: name a `key` of the arguments that identify the effect"
    } else {
        "\"irreversible\"  # or \"idempotent\" if running it twice with the same arguments is safe"
    };
    format!(
        "[upstreams.{upstream}.tools.{}]\nclass = {class}\ndigest = \"{}\"",
        tool.name,
        digest_of(tool)
    )
}

/// What differs between `decl`'s tools and `live` (one upstream's tool list).
pub fn drift_of(decl: &UpstreamDecl, live: &[McpTool]) -> Vec<Drift> {
    let mut out = Vec::new();
    for name in decl.tools.keys() {
        if !live.iter().any(|t| t.name == name.as_str()) {
            out.push(Drift::Vanished {
                upstream: decl.name.clone(),
                tool: name.clone(),
            });
        }
    }
    for tool in live {
        let live_digest = digest_of(tool);
        match decl.tools.get(tool.name.as_ref()) {
            None => out.push(Drift::Undeclared {
                upstream: decl.name.clone(),
                tool: tool.name.to_string(),
                declaration: suggested_declaration(&decl.name, tool),
            }),
            Some(d) => match &d.digest {
                None => out.push(Drift::Unreviewed {
                    upstream: decl.name.clone(),
                    tool: tool.name.to_string(),
                    live: live_digest,
                }),
                Some(recorded) if *recorded != live_digest => out.push(Drift::Changed {
                    upstream: decl.name.clone(),
                    tool: tool.name.to_string(),
                    recorded: recorded.clone(),
                    live: live_digest,
                }),
                Some(_) => {}
            },
        }
    }
    out
}

/// Write the live digest of every declared tool into the file at `path` (its comments and
/// layout kept); returns how many digests changed. Undeclared tools are not added: their class
/// is a person's decision ([`Drift::Undeclared`] prints the declaration to review).
pub fn write_digests(
    path: &Path,
    decls: &Declarations,
    live: &[(String, Vec<McpTool>)],
) -> Result<usize, DeclarationError> {
    let file = path.display().to_string();
    let io = |e: std::io::Error| DeclarationError {
        file: file.clone(),
        line: 0,
        message: format!("cannot rewrite the declarations file: {e}"),
        help: "check that the file is writable".to_owned(),
    };
    let text = std::fs::read_to_string(path).map_err(io)?;
    let mut doc: toml_edit::DocumentMut = text.parse().map_err(|e: toml_edit::TomlError| DeclarationError {
        file: file.clone(),
        line: 0,
        message: e.to_string(),
        help: "fix the file's TOML first".to_owned(),
    })?;
    let mut changed = 0;
    for (upstream, tools) in live {
        let Some(decl) = decls.upstreams.get(upstream) else {
            continue;
        };
        for tool in tools {
            let Some(d) = decl.tools.get(tool.name.as_ref()) else {
                continue;
            };
            let digest = digest_of(tool);
            if d.digest.as_deref() == Some(digest.as_str()) {
                continue;
            }
            let slot = doc
                .get_mut("upstreams")
                .and_then(|u| u.get_mut(upstream))
                .and_then(|u| u.get_mut("tools"))
                .and_then(|t| t.get_mut(tool.name.as_ref()));
            if let Some(table) = slot.and_then(|t| t.as_table_like_mut()) {
                table.insert("digest", toml_edit::value(digest));
                changed += 1;
            }
        }
    }
    if changed > 0 {
        std::fs::write(path, doc.to_string()).map_err(io)?;
    }
    Ok(changed)
}
