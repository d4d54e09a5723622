use effect_tool::{tools, ToolError};

pub struct Shop {
    count: u64,
}

#[tools]
impl Shop {
    /// Count a visit.
    #[tool(effect = "idempotent")]
    pub async fn visit(&mut self, page: String) -> Result<String, ToolError> {
        self.count += 1;
        Ok(page)
    }
}

fn main() {}
