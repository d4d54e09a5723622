use effect_tool::tool;

#[tool(effect = "pure")]
pub struct Lookup {
    pub id: String,
}

fn main() {}
