//! What a toolkit does with an engine: dispatch a model turn's calls, abandon a run.

use std::sync::Arc;

use super::{Dispatcher, Toolkit};
use crate::call::context::RunContext;
use crate::call::error::StoreError;
use crate::engine::Engine;
use crate::engine::compensation::AbandonReport;
use crate::engine::dyn_tool::DynTool;

impl Toolkit {
    /// A dispatcher of this toolkit's calls through `engine`, with the default concurrency.
    pub fn dispatcher(&self, engine: Engine) -> Dispatcher {
        Dispatcher::new(self.clone(), engine)
    }

    /// Abandon `run`: compensate each of its completed compensable effects made by these tools
    /// (see [`crate::Engine::abandon_run`]).
    pub async fn abandon_run(&self, engine: &Engine, run: &RunContext) -> Result<AbandonReport, StoreError> {
        let tools: Vec<Arc<dyn DynTool>> = self.tools().cloned().collect();
        engine.abandon_run(run, &tools).await
    }
}
