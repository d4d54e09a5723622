//! Scripted tools: each execution follows the next [`Step`] of a script and acts on a
//! [`Downstream`], so a test decides how every attempt ends and counts what reached the world.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use effect_tool::{EffectCtx, RunContext, ToolError};
use tokio::sync::{Notify, Semaphore};

use super::ledger::Downstream;

/// What one execution of a scripted tool does.
#[derive(Clone, Debug)]
pub enum Step {
    /// Apply the effect and succeed.
    Ok,
    /// Announce on `started`, wait (cancellable by dropping) for a permit of `hold`, then apply
    /// the effect and succeed.
    HoldThenOk,
    /// Apply the effect, announce on `started`, then never return.
    ApplyThenHang,
    /// Fail without applying, with this error.
    Fail(ToolError),
}

/// The shared behaviour of the tools that [`scripted!`] declares: the steps still to play, what
/// ran, and the hands a test uses to hold or cancel an execution or a `recover` midway.
pub struct Script {
    /// Where the effects land.
    pub down: Arc<Downstream>,
    steps: Mutex<Vec<Step>>,
    executions: AtomicUsize,
    /// How many times `recover` was asked.
    pub recovers: AtomicUsize,
    /// Announced when an execution (or a held recover) starts.
    pub started: Notify,
    /// Permits that let held executions go on.
    pub hold: Semaphore,
    /// How many recover calls wait for a permit of `recover_hold` before answering.
    pub held_recovers: AtomicUsize,
    /// Permits that let held recovers answer.
    pub recover_hold: Semaphore,
    /// The run to cancel from inside `recover` (a cancellation that lands while it runs).
    pub cancel_in_recover: Mutex<Option<RunContext>>,
}

impl Script {
    /// A script acting on `down` that plays `steps` in order; the last step repeats.
    pub fn new(down: &Arc<Downstream>, steps: &[Step]) -> Arc<Self> {
        Arc::new(Script {
            down: down.clone(),
            steps: Mutex::new(steps.to_vec()),
            executions: AtomicUsize::new(0),
            recovers: AtomicUsize::new(0),
            started: Notify::new(),
            hold: Semaphore::new(0),
            held_recovers: AtomicUsize::new(0),
            recover_hold: Semaphore::new(0),
            cancel_in_recover: Mutex::new(None),
        })
    }

    /// How many executions started (counted at the first poll, where a real tool sends).
    pub fn executions(&self) -> usize {
        self.executions.load(Ordering::SeqCst)
    }

    fn next(&self) -> Step {
        let mut steps = self.steps.lock().unwrap();
        if steps.len() > 1 {
            steps.remove(0)
        } else {
            steps[0].clone()
        }
    }

    /// One execution for `to`: plays the next step; a success says its attempt.
    pub async fn run(&self, ctx: &EffectCtx, to: &str) -> Result<String, ToolError> {
        // The first poll of the tool is where a real tool sends its request.
        self.executions.fetch_add(1, Ordering::SeqCst);
        match self.next() {
            Step::Ok => self.down.apply(&ctx.idempotency_key()),
            Step::HoldThenOk => {
                self.started.notify_one();
                self.hold.acquire().await.unwrap().forget();
                self.down.apply(&ctx.idempotency_key());
            }
            Step::ApplyThenHang => {
                self.down.apply(&ctx.idempotency_key());
                self.started.notify_one();
                std::future::pending::<()>().await;
            }
            Step::Fail(e) => return Err(e),
        }
        Ok(format!("done for {to} (attempt {})", ctx.attempt()))
    }

    /// The check whether this attempt's effect landed: `Some` when the downstream system has
    /// it. Cancels `cancel_in_recover`'s run first if one is set; a held recover (see
    /// `held_recovers`) announces itself and answers, once let go, from what it saw first.
    pub async fn recover(&self, ctx: &EffectCtx, to: &str) -> Result<Option<String>, ToolError> {
        self.recovers.fetch_add(1, Ordering::SeqCst);
        if let Some(run) = self.cancel_in_recover.lock().unwrap().take() {
            run.cancel();
        }
        // The answer is read first: a slow recover answers from what it saw when it asked.
        let found = self.down.has(&ctx.idempotency_key());
        let held = self
            .held_recovers
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if held {
            self.started.notify_one();
            self.recover_hold.acquire().await.unwrap().forget();
        }
        Ok(found.then(|| format!("found for {to}")))
    }
}

/// Declares `struct $name(Arc<Script>)`, a [`Tool`](effect_tool::Tool) of the given class whose
/// calls and `recover` are played by its [`Script`] (arguments: the recipient, a `String`).
///
/// `scripted!(Name, class, recover = bool, approval = Option<&str>, window = Window)` retries
/// 3 times with backoff of 1 ms up to 2 ms; `scripted!(Name, class, recover = bool, max_delay =
/// Duration)` has no approval, the run window, and backoff of 1 ms up to `max_delay`.
macro_rules! scripted {
    ($name:ident, $class:expr, recover = $recover:expr, approval = $approval:expr, window = $window:expr) => {
        $crate::common::script::scripted!(
            @tool $name, $class, $recover, $approval, $window, ::std::time::Duration::from_millis(2)
        );
    };
    ($name:ident, $class:expr, recover = $recover:expr, max_delay = $max_delay:expr) => {
        $crate::common::script::scripted!(
            @tool $name, $class, $recover, None, ::effect_tool::Window::Run, $max_delay
        );
    };
    (@tool $name:ident, $class:expr, $recover:expr, $approval:expr, $window:expr, $max_delay:expr) => {
        #[derive(Clone)]
        struct $name(::std::sync::Arc<$crate::common::script::Script>);
        impl ::effect_tool::Tool for $name {
            type Args = String;
            type Output = String;
            type Error = ::effect_tool::ToolError;
            const NAME: &'static str = stringify!($name);
            const CLASS: ::effect_tool::EffectClass = $class;
            const HAS_RECOVER: bool = $recover;
            const APPROVAL: Option<&'static str> = $approval;
            const WINDOW: ::effect_tool::Window = $window;
            const RETRY: ::effect_tool::RetryPolicy = ::effect_tool::RetryPolicy {
                max_attempts: 3,
                base_delay: ::std::time::Duration::from_millis(1),
                max_delay: $max_delay,
            };
            async fn call(
                &self,
                ctx: &::effect_tool::EffectCtx,
                to: String,
            ) -> Result<String, ::effect_tool::ToolError> {
                self.0.run(ctx, &to).await
            }
            async fn recover(
                &self,
                ctx: &::effect_tool::EffectCtx,
                to: &String,
            ) -> Result<Option<String>, ::effect_tool::ToolError> {
                self.0.recover(ctx, to).await
            }
        }
    };
}
pub(crate) use scripted;
