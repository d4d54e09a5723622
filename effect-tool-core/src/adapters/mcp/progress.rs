//! A call's progress, sent to the MCP client: when a `tools/call` request's `_meta` carries a
//! `progressToken`, each value the tool reports ([`crate::EffectCtx::progress`], every item of a
//! `#[tool(stream)]`) is sent as `notifications/progress` with that token, `progress` counting
//! 1, 2, 3, ... and `message` the value (a string as it is, anything else as JSON text, cut at
//! [`MAX_MESSAGE_CHARS`] characters). The notifications are sent in order, all of them before
//! the call's result. A replayed call runs nothing and so reports no progress. A progress
//! callback the run already has ([`RunContext::with_progress`], set by the application's run
//! values) keeps receiving the values too.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::service::{Peer, RoleServer};
use serde_json::{Map, Value};
use tokio::sync::mpsc;

use crate::call::context::{ProgressEvent, RunContext};

/// The `_meta` field of a request that asks for progress notifications.
const PROGRESS_TOKEN_META: &str = "progressToken";

/// The longest `message` of a progress notification, in characters: longer values are cut
/// (with `…`), the whole value being the tool's business, not the client's status line.
const MAX_MESSAGE_CHARS: usize = 1000;

/// The notifications of one call, on their way to the client.
pub(super) struct Progress {
    /// The sender the run's progress callback writes to; taken when the call is done, which
    /// ends the forwarding even if a copy of the run outlives the call.
    sender: Arc<Mutex<Option<mpsc::UnboundedSender<ProgressNotificationParam>>>>,
    receiver: mpsc::UnboundedReceiver<ProgressNotificationParam>,
    peer: Peer<RoleServer>,
}

impl Progress {
    /// When `meta` carries a progress token: `run` with a progress callback that queues each
    /// value as a notification to `peer`, and what sends them ([`Progress::around`]).
    pub(super) fn of(
        meta: &Map<String, Value>,
        peer: &Peer<RoleServer>,
        run: RunContext,
    ) -> (RunContext, Option<Progress>) {
        let Some(token) = meta
            .get(PROGRESS_TOKEN_META)
            .and_then(|v| serde_json::from_value::<ProgressToken>(v.clone()).ok())
        else {
            return (run, None);
        };
        let (tx, receiver) = mpsc::unbounded_channel();
        let sender = Arc::new(Mutex::new(Some(tx)));
        let slot = sender.clone();
        let count = AtomicU64::new(0);
        let before = run.progress_sink().cloned();
        let sink = Arc::new(move |event: &ProgressEvent| {
            if let Some(before) = &before {
                before(event);
            }
            let n = count.fetch_add(1, Ordering::SeqCst) + 1;
            let note = ProgressNotificationParam::new(token.clone(), n as f64).with_message(message(&event.value));
            if let Some(tx) = slot.lock().unwrap_or_else(std::sync::PoisonError::into_inner).as_ref() {
                let _ = tx.send(note);
            }
        });
        let progress = Progress {
            sender,
            receiver,
            peer: peer.clone(),
        };
        (run.with_progress(sink), Some(progress))
    }

    /// Run `call`, sending the notifications it queues as they come; return its value once
    /// every one was sent (a client that went away gets none, and the call goes on).
    pub(super) async fn around<T>(mut self, call: impl std::future::Future<Output = T>) -> T {
        let sender = self.sender.clone();
        let done = async move {
            let out = call.await;
            sender.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
            out
        };
        let peer = self.peer.clone();
        let send = async move {
            while let Some(note) = self.receiver.recv().await {
                if let Err(e) = peer.notify_progress(note).await {
                    tracing::debug!(error = %e, "a progress notification could not be sent");
                }
            }
        };
        let (out, ()) = futures::join!(done, send);
        out
    }
}

/// The `message` of a progress value: a string as it is, anything else as JSON text, cut at
/// [`MAX_MESSAGE_CHARS`].
fn message(value: &Value) -> String {
    let text = match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    match text.char_indices().nth(MAX_MESSAGE_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_the_value_as_text_and_short() {
        assert_eq!(message(&Value::String("built".into())), "built");
        assert_eq!(message(&serde_json::json!({"done": 2})), r#"{"done":2}"#);
        let long = message(&Value::String("é".repeat(MAX_MESSAGE_CHARS + 5)));
        assert_eq!(long.chars().count(), MAX_MESSAGE_CHARS + 1);
        assert!(long.ends_with('…'));
    }
}
