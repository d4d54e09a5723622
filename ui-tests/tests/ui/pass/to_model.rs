use effect_tool::{tool, tools, ModelOutput, Tool, ToolError};
use std::sync::Arc;

#[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct Report {
    pub rows: Vec<String>,
    pub secret_note: String,
}

fn summary(report: &Report) -> ModelOutput {
    ModelOutput::text(format!("{} rows", report.rows.len()))
}

/// Build a report (a function as the view).
#[tool(effect = "pure", to_model = summary)]
async fn build_report(month: String) -> Result<Report, ToolError> {
    Ok(Report { rows: vec![month], secret_note: "x".into() })
}

/// Build a report (a closure as the view; a path in a string, as serde takes them, too).
#[tool(effect = "pure", to_model = |r| ModelOutput::json(&r.rows))]
async fn build_report_closure(month: String) -> Result<Report, ToolError> {
    Ok(Report { rows: vec![month], secret_note: "x".into() })
}

/// Build a report (a quoted path).
#[tool(effect = "idempotent", to_model = "summary")]
async fn build_report_quoted(month: String) -> Result<Report, ToolError> {
    Ok(Report { rows: vec![month], secret_note: "x".into() })
}

struct Charts;

#[tools]
impl Charts {
    /// Draw a chart (an associated function of the block as the view).
    #[tool(effect = "pure", to_model = Self::as_image)]
    async fn draw(&self, title: String) -> Result<String, ToolError> {
        Ok(title)
    }

    fn as_image(_png: &String) -> ModelOutput {
        ModelOutput::text("a chart").with_image("image/png", "iVBORw0KGgo=")
    }
}

fn main() {
    assert!(BuildReport::HAS_VIEW && BuildReportClosure::HAS_VIEW && BuildReportQuoted::HAS_VIEW);
    let report = Report { rows: vec!["a".into(), "b".into()], secret_note: "x".into() };
    assert_eq!(BuildReport.to_model(&report), Some(ModelOutput::text("2 rows")));
    assert_eq!(BuildReportClosure.to_model(&report), Some(ModelOutput::text(r#"["a","b"]"#)));
    let charts = Arc::new(Charts);
    assert!(charts.draw_tool().to_model(&"t".to_owned()).unwrap().has_images());
}
