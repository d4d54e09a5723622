//! What the model reads of a tool's output, when it is not the output itself
//! (`#[tool(to_model = path)]`, [`Tool::to_model`](crate::Tool::to_model)).
//!
//! The journal keeps the whole output and a replay returns it whole to code
//! ([`Engine::call`](crate::Engine::call)); the model is given the view instead: a summary of
//! a large object, an image part, a form with some fields left out. A replayed or shared result
//! goes through the same view, so the model reads the same thing however the result came.
//!
//! ```
//! use effect_tool_core::call::view::ModelOutput;
//!
//! let view = ModelOutput::text("chart of March sales (31 points)").with_image("image/png", "iVBORw0KGgo=");
//! assert_eq!(view.parts().len(), 2);
//! assert_eq!(
//!     view.to_text(),
//!     "chart of March sales (31 points)\n[image/png image: this channel carries only text]"
//! );
//! ```

use serde::{Deserialize, Serialize};

/// One part of what the model reads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ModelPart {
    /// Text.
    Text {
        /// The text.
        text: String,
    },
    /// An image, base64-encoded.
    Image {
        /// Its media type (`image/png`, `image/jpeg`, `image/gif`, `image/webp`).
        mime_type: String,
        /// The image's bytes in standard base64 (with padding, no `data:` prefix).
        data: String,
    },
}

/// What the model reads of one tool output: one or more parts, in order. Made by a tool's view
/// (`#[tool(to_model = path)]`); every provider format and adapter writes it in its own shape
/// (see [`ModelOutput::to_text`] for channels that carry only text).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelOutput {
    parts: Vec<ModelPart>,
}

impl ModelOutput {
    /// A text.
    pub fn text(text: impl Into<String>) -> ModelOutput {
        ModelOutput {
            parts: vec![ModelPart::Text { text: text.into() }],
        }
    }

    /// A value as JSON text: for a view that keeps some fields of the output and leaves the
    /// others out. A value that does not serialize gives a text that says so.
    pub fn json(value: &impl Serialize) -> ModelOutput {
        match serde_json::to_string(value) {
            Ok(text) => ModelOutput::text(text),
            Err(e) => ModelOutput::text(format!("(the result could not be shown: {e})")),
        }
    }

    /// An image: its media type and its bytes in standard base64.
    pub fn image(mime_type: impl Into<String>, base64: impl Into<String>) -> ModelOutput {
        ModelOutput {
            parts: vec![ModelPart::Image {
                mime_type: mime_type.into(),
                data: base64.into(),
            }],
        }
    }

    /// This output, then a text.
    pub fn with_text(mut self, text: impl Into<String>) -> ModelOutput {
        self.parts.push(ModelPart::Text { text: text.into() });
        self
    }

    /// This output, then an image (media type, standard base64).
    pub fn with_image(mut self, mime_type: impl Into<String>, base64: impl Into<String>) -> ModelOutput {
        self.parts.push(ModelPart::Image {
            mime_type: mime_type.into(),
            data: base64.into(),
        });
        self
    }

    /// The parts, in order.
    pub fn parts(&self) -> &[ModelPart] {
        &self.parts
    }

    /// Whether a part is an image (a channel that carries only text cannot send it whole).
    pub fn has_images(&self) -> bool {
        self.parts.iter().any(|p| matches!(p, ModelPart::Image { .. }))
    }

    /// The output as one text, for channels that carry only text (OpenAI Chat Completions'
    /// `tool` messages): the texts joined by line breaks, each image replaced by a line that
    /// names its media type and says it was not sent.
    pub fn to_text(&self) -> String {
        self.parts
            .iter()
            .map(|p| match p {
                ModelPart::Text { text } => text.clone(),
                ModelPart::Image { mime_type, .. } => {
                    format!("[{mime_type} image: this channel carries only text]")
                }
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl ModelOutput {
    /// The texts only, joined by line breaks (for a format that carries the images beside the
    /// text, such as Gemini's `functionResponse.parts`).
    pub fn texts(&self) -> String {
        self.parts
            .iter()
            .filter_map(|p| match p {
                ModelPart::Text { text } => Some(text.as_str()),
                ModelPart::Image { .. } => None,
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The images, as (media type, base64) pairs, in order.
    pub fn images(&self) -> impl Iterator<Item = (&str, &str)> {
        self.parts.iter().filter_map(|p| match p {
            ModelPart::Image { mime_type, data } => Some((mime_type.as_str(), data.as_str())),
            ModelPart::Text { .. } => None,
        })
    }
}

impl From<String> for ModelOutput {
    fn from(text: String) -> ModelOutput {
        ModelOutput::text(text)
    }
}

impl From<&str> for ModelOutput {
    fn from(text: &str) -> ModelOutput {
        ModelOutput::text(text)
    }
}

impl From<ModelPart> for ModelOutput {
    fn from(part: ModelPart) -> ModelOutput {
        ModelOutput { parts: vec![part] }
    }
}

/// The text a model reads when a tool's view cannot be made of a recorded output (it no longer
/// decodes as the tool's output type): never the output itself, which the view exists to keep
/// from the model.
pub(crate) fn unviewable(tool: &str) -> ModelOutput {
    ModelOutput::text(format!(
        "`{tool}` ran and its result is recorded, but the result cannot be shown here. Do not call it again for it; tell the user."
    ))
}
