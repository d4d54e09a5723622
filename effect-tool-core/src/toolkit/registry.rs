//! The toolkit itself: declared tools by name, in the order they were added, each with its
//! declaration and its argument schema (compiled once, for the dispatcher's validation).
//!
//! What a toolkit writes for providers is in [`super::export`]; what it does with an engine
//! (dispatch, abandon) in [`super::with_engine`].

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

use super::validate;
use crate::call::tool::{Tool, ToolMeta};
use crate::engine::dyn_tool::DynTool;

/// Two tools of one name were added to a toolkit. A model addresses tools by name, so each
/// name must be unique: rename one (`#[tool(name = "...")]` or [`Tool::NAME`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "a tool named `{name}` is already in the toolkit ({existing}); cannot add {added}: tool names must be unique, rename one of them"
)]
pub struct DuplicateTool {
    /// The name both tools use.
    pub name: String,
    /// The tool already in the toolkit (its Rust type and class).
    pub existing: String,
    /// The tool that was refused (its Rust type and class).
    pub added: String,
}

/// One declared tool, as the toolkit keeps it.
pub(super) struct Entry {
    pub(super) tool: Arc<dyn DynTool>,
    pub(super) meta: ToolMeta,
    pub(super) schema: validate::ArgumentSchema,
    pub(super) type_name: &'static str,
    /// The declared output, when the tool has an output schema ([`DynTool::output_schema`]).
    pub(super) output: Option<super::output::OutputSchema>,
}

impl Entry {
    fn describe(&self) -> String {
        format!("`{}`, {}", self.type_name, self.meta.class)
    }
}

/// Declared tools, by name, in the order they were added.
///
/// Cheap to clone (the tools are shared). Adding a second tool with a name already present is
/// an error: [`Toolkit::try_add`] returns [`DuplicateTool`]; [`Toolkit::add`] and
/// [`Toolkit::with`] panic with the same message (a duplicate is a programming error, found on
/// the first run).
#[derive(Clone, Default)]
pub struct Toolkit {
    pub(super) entries: Vec<Arc<Entry>>,
    by_name: BTreeMap<&'static str, usize>,
}

impl std::fmt::Debug for Toolkit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Toolkit").field("tools", &self.names()).finish()
    }
}

impl Toolkit {
    /// An empty toolkit.
    pub fn new() -> Self {
        Toolkit::default()
    }

    /// Add `tool`, or fail if a tool of the same name is already present.
    pub fn try_add<T: Tool>(&mut self, tool: T) -> Result<&mut Self, DuplicateTool> {
        self.try_add_shared(Arc::new(tool))
    }

    /// Add a tool shared with other owners (e.g. one holding clients), or fail on a duplicate name.
    pub fn try_add_shared<T: Tool>(&mut self, tool: Arc<T>) -> Result<&mut Self, DuplicateTool> {
        let entry = Entry {
            meta: ToolMeta::of::<T>(),
            schema: validate::ArgumentSchema::new(T::input_schema()),
            type_name: std::any::type_name::<T>(),
            // A tool with a view (`to_model`) declares no output to MCP: the model reads the
            // view's parts, and `structuredContent`, which an `outputSchema` requires, would
            // carry the whole output the view keeps from it.
            output: T::output_schema()
                .filter(|_| !T::HAS_VIEW)
                .map(|schema| super::output::OutputSchema::new(Some(T::output_type().to_owned()), schema)),
            tool,
        };
        if let Some(&i) = self.by_name.get(T::NAME) {
            return Err(DuplicateTool {
                name: T::NAME.to_owned(),
                existing: self.entries[i].describe(),
                added: entry.describe(),
            });
        }
        self.by_name.insert(T::NAME, self.entries.len());
        self.entries.push(Arc::new(entry));
        Ok(self)
    }

    /// Add a tool declared at run time (a [`DynTool`] that is not a `#[tool]`, such as an
    /// upstream tool of the MCP gateway), or fail on a duplicate name. Its name, class and the
    /// rest of its declaration are its [`DynTool::meta`]; `type_name` names it in a
    /// [`DuplicateTool`] error. Its [`DynTool::output_schema`], if any, is its declared output,
    /// as a `#[tool]`'s: listed as its MCP `outputSchema`, and every output checked against it
    /// before it is sent ([`crate::toolkit::output`]).
    pub fn try_add_dyn(&mut self, tool: Arc<dyn DynTool>, type_name: &'static str) -> Result<&mut Self, DuplicateTool> {
        let meta = tool.meta();
        let entry = Entry {
            schema: validate::ArgumentSchema::new(tool.input_schema()),
            meta,
            type_name,
            output: tool
                .output_schema()
                .map(|schema| super::output::OutputSchema::new(tool.output_type(), schema)),
            tool,
        };
        let name = entry.meta.name;
        if let Some(&i) = self.by_name.get(name) {
            return Err(DuplicateTool {
                name: name.to_owned(),
                existing: self.entries[i].describe(),
                added: entry.describe(),
            });
        }
        self.by_name.insert(name, self.entries.len());
        self.entries.push(Arc::new(entry));
        Ok(self)
    }

    /// Add `tool`.
    ///
    /// # Panics
    ///
    /// If a tool of the same name is already present (see [`Toolkit::try_add`]).
    #[track_caller]
    pub fn add<T: Tool>(&mut self, tool: T) -> &mut Self {
        if let Err(e) = self.try_add(tool) {
            panic!("{e}");
        }
        self
    }

    /// Add `tool`, builder style.
    ///
    /// # Panics
    ///
    /// If a tool of the same name is already present (see [`Toolkit::try_add`]).
    #[track_caller]
    pub fn with<T: Tool>(mut self, tool: T) -> Self {
        self.add(tool);
        self
    }

    /// Add a shared tool, builder style.
    ///
    /// # Panics
    ///
    /// If a tool of the same name is already present.
    #[track_caller]
    pub fn with_shared<T: Tool>(mut self, tool: Arc<T>) -> Self {
        if let Err(e) = self.try_add_shared(tool) {
            panic!("{e}");
        }
        self
    }

    /// The tool called `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn DynTool>> {
        self.by_name.get(name).map(|&i| &self.entries[i].tool)
    }

    /// The declaration of the tool called `name`.
    pub fn meta(&self, name: &str) -> Option<&ToolMeta> {
        self.by_name.get(name).map(|&i| &self.entries[i].meta)
    }

    /// The exported argument schema of the tool called `name`.
    pub fn input_schema(&self, name: &str) -> Option<&Value> {
        self.by_name.get(name).map(|&i| self.entries[i].schema.schema())
    }

    /// The declared output of the tool called `name`: its type, schema, digest and MCP form
    /// (`None`: no such tool, or a tool without an output schema).
    pub fn output(&self, name: &str) -> Option<&super::output::OutputSchema> {
        self.by_name.get(name).and_then(|&i| self.entries[i].output.as_ref())
    }

    /// The argument schema of the tool called `name`, with its compiled validator.
    pub(crate) fn argument_schema(&self, name: &str) -> Option<&validate::ArgumentSchema> {
        self.by_name.get(name).map(|&i| &self.entries[i].schema)
    }

    /// The tools' names, in the order they were added.
    pub fn names(&self) -> Vec<&'static str> {
        self.entries.iter().map(|e| e.meta.name).collect()
    }

    /// Every tool's declaration, in the order they were added.
    pub fn metas(&self) -> Vec<ToolMeta> {
        self.entries.iter().map(|e| e.meta.clone()).collect()
    }

    /// The tools, in the order they were added.
    pub fn tools(&self) -> impl Iterator<Item = &Arc<dyn DynTool>> {
        self.entries.iter().map(|e| &e.tool)
    }

    /// How many tools there are.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The values this toolkit's tools take from the run (`#[secret]` arguments) that `run` does not
    /// hold, as "`tool` takes a `Type`" phrases, for the error of a server or adapter that would
    /// otherwise list tools every call of which fails.
    #[cfg(any(feature = "mcp", feature = "rig"))]
    pub(crate) fn missing_values(&self, run: &crate::RunContext) -> Vec<String> {
        let mut missing: Vec<String> = self
            .tools()
            .flat_map(|tool| {
                let name = tool.meta().name;
                tool.injected()
                    .iter()
                    .filter(|i| !(i.present)(run))
                    .map(move |i| format!("`{name}` takes a `{}`", i.type_name))
            })
            .collect();
        missing.sort();
        missing
    }
}
