//! Tools that yield a stream of values: each value is passed on as progress
//! ([`EffectCtx::progress`], received through [`crate::RunContext::with_progress`]) and the last
//! one is the tool's output, the value that is recorded and that a replay returns.
//!
//! ```
//! use effect_tool_core::{EffectCtx, ToolError, call::stream};
//! use futures::stream::{self as fstream, StreamExt};
//!
//! async fn deploy_steps(ctx: &EffectCtx) -> Result<String, ToolError> {
//!     let steps = fstream::iter(["built", "pushed", "rolled out"]).map(|s| Ok::<_, ToolError>(s.to_owned()));
//!     stream::last(ctx, steps, || ToolError::definitive("the deploy reported nothing")).await
//! }
//! ```

use futures::{Stream, StreamExt};
use serde::Serialize;

use crate::call::context::EffectCtx;

/// Drain `values`, reporting each as progress, and return the last one. The first error ends
/// the stream and is returned; an empty stream returns `empty()`.
pub async fn last<S, O, E>(ctx: &EffectCtx, values: S, empty: impl FnOnce() -> E) -> Result<O, E>
where
    S: Stream<Item = Result<O, E>>,
    O: Serialize,
{
    let mut values = std::pin::pin!(values);
    let mut last = None;
    while let Some(item) = values.next().await {
        let value = item?;
        ctx.progress(&value);
        last = Some(value);
    }
    last.ok_or_else(empty)
}
