//! The webhook a provider calls back to settle a pending record (feature `callback-webhook`):
//! `POST /callback` with the token the tool handed it ([`crate::EffectCtx::pending`]) and its
//! answer. An axum router to mount in the application's server (at any path, with
//! [`axum::Router::nest`]), or what `effect-tool serve --callbacks` serves.
//!
//! The request's body is JSON: the token (or `?token=` in the URL, for providers that only let
//! you set a URL) and the verdict, as [`Verdict`] spells it:
//!
//! ```json
//! {"token": "etcb1....", "verdict": "applied", "output": {"id": "po_1", "status": "paid"}}
//! {"token": "etcb1....", "verdict": "not-applied"}
//! ```
//!
//! The answer: `200` with `{"key", "state"}` once settled; `403` for a forged or late token
//! (the record is in doubt past its deadline), `409` for a record not pending (a callback sent
//! again), `404` for no record, `422` for an output of the wrong shape or a body that is not a
//! verdict, `503` when the journal fails (the provider should retry). Every refusal is audited
//! ([`crate::store::callback::CALLBACK_REFUSED`]) and nothing is written. The token is the only
//! credential: serve the route over TLS, since whoever reads a token can settle its record.

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use crate::call::error::StoreError;
use crate::decide::record::{Rejected, Verdict};
use crate::store::Store;
use crate::store::callback::settle_callback;
use crate::value::marker::MarkerSecret;

/// The webhook's state: the journal, its secret, and the name settlements are audited under.
pub struct CallbackWebhook {
    store: Arc<dyn Store>,
    secret: MarkerSecret,
    by: String,
}

impl std::fmt::Debug for CallbackWebhook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallbackWebhook")
            .field("by", &self.by)
            .finish_non_exhaustive()
    }
}

/// What a provider sends (see the module docs).
#[derive(Debug, Deserialize)]
struct Body {
    token: Option<String>,
    #[serde(flatten)]
    verdict: Verdict,
}

/// The URL's query: the token, for providers that call back a URL they were given.
#[derive(Debug, Deserialize)]
struct TokenQuery {
    token: Option<String>,
}

impl CallbackWebhook {
    /// A webhook settling records of `store`, verifying tokens under `secret`: the journal's
    /// marker secret, as the engine that issued the tokens has it
    /// ([`crate::Engine::marker_secret`], or [`Store::marker_secret`] when the application gave
    /// the engine none).
    pub fn new(store: Arc<dyn Store>, secret: MarkerSecret) -> Self {
        CallbackWebhook {
            store,
            secret,
            by: "callback".to_owned(),
        }
    }

    /// The name settlements and refusals are audited under (default `callback`), e.g. the
    /// provider's.
    pub fn audited_as(mut self, by: impl Into<String>) -> Self {
        self.by = by.into();
        self
    }

    /// `POST /callback`, as an axum router to merge into (or nest in) the application's.
    pub fn router(self) -> axum::Router {
        axum::Router::new()
            .route("/callback", axum::routing::post(receive))
            .with_state(Arc::new(self))
    }
}

/// One callback: parsed, settled, answered.
async fn receive(
    State(hook): State<Arc<CallbackWebhook>>,
    Query(query): Query<TokenQuery>,
    body: axum::body::Bytes,
) -> Response {
    let body: Body = match serde_json::from_slice(&body) {
        Ok(b) => b,
        Err(e) => {
            return answer(
                StatusCode::UNPROCESSABLE_ENTITY,
                format!(
                    "the body is not a callback: {e}; send {{\"token\": \"...\", \"verdict\": \"applied\", \"output\": ...}} or {{\"token\": \"...\", \"verdict\": \"not-applied\"}}"
                ),
            );
        }
    };
    let Some(token) = body.token.or(query.token) else {
        return answer(
            StatusCode::UNPROCESSABLE_ENTITY,
            "no token: send it as `token` in the body or `?token=` in the URL".to_owned(),
        );
    };
    match settle_callback(hook.store.as_ref(), &hook.secret, &token, &hook.by, body.verdict).await {
        Ok(rec) => (
            StatusCode::OK,
            axum::Json(serde_json::json!({ "key": rec.key, "state": rec.state })),
        )
            .into_response(),
        Err(StoreError::Rejected(r)) => {
            let status = match &r {
                Rejected::CallbackRefused { .. } => StatusCode::FORBIDDEN,
                Rejected::NotFound { .. } => StatusCode::NOT_FOUND,
                Rejected::OutputMismatch(_) => StatusCode::UNPROCESSABLE_ENTITY,
                _ => StatusCode::CONFLICT,
            };
            answer(status, r.to_string())
        }
        Err(e) => answer(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("the journal failed: {e}; send the callback again later"),
        ),
    }
}

/// A refusal: its status and the reason, as JSON.
fn answer(status: StatusCode, error: String) -> Response {
    (status, axum::Json(serde_json::json!({ "error": error }))).into_response()
}
