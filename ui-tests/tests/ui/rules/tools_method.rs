use effect_tool::{tools, ToolError};

pub struct Mailer;

#[tools]
impl Mailer {
    /// Send an email.
    #[tool(effect = "irreversible", key(message_id))]
    pub async fn send(&self, message_id: String) -> Result<String, ToolError> {
        Ok(message_id)
    }
}

fn main() {}
