//! [`RunHandle`]: an engine bound to one run.

use std::time::Duration;

use super::lifecycle::Engine;
use super::report::{CallOptions, CallReport};
use crate::call::context::RunContext;
use crate::call::error::{EffectError, StoreError};
use crate::call::tool::Tool;

impl Engine {
    /// Bind this engine to one run: call tools without passing the run each time.
    pub fn run(&self, run: RunContext) -> RunHandle {
        RunHandle {
            engine: self.clone(),
            run,
        }
    }
}

/// An engine bound to one run: call tools without passing the run each time.
#[derive(Debug, Clone)]
pub struct RunHandle {
    engine: Engine,
    run: RunContext,
}

impl RunHandle {
    /// The run.
    pub fn context(&self) -> &RunContext {
        &self.run
    }

    /// The engine.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Wait until a person approves or denies the call parked under `key` (the key of its
    /// [`ApprovalPending`](crate::call::error::ApprovalPending)), or `timeout` passes, without calling the
    /// tool again. Then call it again: an approved call runs (once), a denied one fails with the
    /// reason. Reads the journal with backoff (20 ms, doubling, at most 1 s), and at once when a
    /// decision goes through the same [`MemoryStore`](crate::MemoryStore), or through any
    /// PostgreSQL store on the journal, in any process (`NOTIFY`; not behind a pooler in
    /// transaction mode) ([`Store::changed`](crate::store::Store::changed)). Cancel it by dropping the future (e.g. in a `tokio::select!`).
    pub async fn wait_for_approval(
        &self,
        key: &str,
        timeout: Duration,
    ) -> Result<crate::store::approval::ApprovalAnswer, StoreError> {
        crate::store::approval::wait_for_approval(self.engine.store(), key, timeout).await
    }

    /// Call `tool` in this run.
    pub async fn call<T: Tool>(&self, tool: &T, args: T::Args) -> Result<T::Output, EffectError<T::Error>> {
        self.engine.call(tool, &self.run, CallOptions::default(), args).await
    }

    /// Call `tool` in this run as the model's tool call `call_id`.
    pub async fn call_as<T: Tool>(
        &self,
        tool: &T,
        call_id: &str,
        args: T::Args,
    ) -> Result<T::Output, EffectError<T::Error>> {
        self.engine
            .call(tool, &self.run, CallOptions::call_id(call_id), args)
            .await
    }

    /// Call `tool` and report what happened.
    pub async fn call_with_report<T: Tool>(
        &self,
        tool: &T,
        opts: CallOptions,
        args: T::Args,
    ) -> CallReport<T::Output, T::Error> {
        self.engine.call_with_report(tool, &self.run, opts, args).await
    }
}
