use effect_tool::{tool, Tool};

/// Read a file: the return type is an alias of `Result`.
#[tool(effect = "pure")]
async fn read_file(path: String) -> std::io::Result<String> {
    std::fs::read_to_string(path)
}

fn main() {
    let _: fn() -> &'static str = || <ReadFile as Tool>::NAME;
}
