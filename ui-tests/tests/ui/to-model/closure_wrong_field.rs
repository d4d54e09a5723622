use effect_tool::{tool, ModelOutput, ToolError};

#[derive(serde::Serialize, serde::Deserialize)]
pub struct Report {
    pub rows: Vec<String>,
}

/// Build a report.
#[tool(effect = "pure", to_model = |r| ModelOutput::text(format!("{} rows", r.lines.len())))]
async fn build_report(month: String) -> Result<Report, ToolError> {
    Ok(Report { rows: vec![month] })
}

fn main() {}
