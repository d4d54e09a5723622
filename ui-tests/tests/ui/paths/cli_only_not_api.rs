// What only the `effect-tool` command uses is not the facade's API: it is neither at its new
// home in the layers nor re-exported (the CLI reaches it through the core's doc-hidden
// `__cli`, pinned to the core's exact version).
use effect_tool::__cli;
use effect_tool::call::key::{redact, sha256_hex};
use effect_tool::engine::compensation::compensation_key;
use effect_tool::value::shell::{is_hidden, quote};

fn main() {}
