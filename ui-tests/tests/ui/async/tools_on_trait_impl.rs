use effect_tool::{tools, ToolError};

pub struct Shop;

pub trait Lookup {
    fn lookup(&self, id: String) -> impl std::future::Future<Output = Result<String, ToolError>> + Send;
}

#[tools]
impl Lookup for Shop {
    #[tool(effect = "pure")]
    async fn lookup(&self, id: String) -> Result<String, ToolError> {
        Ok(id)
    }
}

fn main() {}
