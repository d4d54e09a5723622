//! The console's standing approvals ([`crate::decide::grant`]): the JSON API behind the
//! console's gates, and its page (`/grants`).
//!
//! | route | what |
//! |---|---|
//! | `GET /api/grants?tool=` | the grants, oldest first, each with its `state` (`live`, `revoked`, `expired`, `not-yet-valid`) |
//! | `POST /api/grants` `{"tool", "role", "when", "valid_until", "valid_from", "run_id", "principal"}` | make one, as the operator: needs the role it approves in; refused (422) for a condition on an argument the tool does not have |
//! | `POST /api/grants/revoke` `{"id"}` | revoke one: needs its role or the resolver role |
//!
//! Four eyes: a grant never covers its granter's own calls (runs scoped to their name), and
//! the console records the operator's name as the granter.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Console, Identity, Refusal, may_read, store_refusal};
use crate::decide::grant::{Condition, Grant};
use crate::decide::identity::Actor;
use crate::decide::record::Millis;
use crate::store::{GrantError, GrantsExt, NewGrant};

/// `GET /api/grants` query parameters.
#[derive(Debug, Deserialize)]
pub(super) struct GrantsQuery {
    tool: Option<String>,
}

fn grant_json(g: &Grant, now: Millis) -> Value {
    let mut v = serde_json::to_value(g).unwrap_or(Value::Null);
    if let Some(o) = v.as_object_mut() {
        o.insert("state".to_owned(), json!(g.state(now)));
    }
    v
}

pub(super) async fn list(
    State(console): State<Arc<Console>>,
    axum::Extension(who): axum::Extension<Identity>,
    Query(q): Query<GrantsQuery>,
) -> Result<Json<Value>, Refusal> {
    may_read(&console, &who)?;
    let grants = console.store.grants(q.tool.as_deref()).await.map_err(store_refusal)?;
    let now = console.store.now();
    Ok(Json(json!({
        "grants": grants.iter().map(|g| grant_json(g, now)).collect::<Vec<_>>(),
        "now": now,
    })))
}

/// `POST /api/grants`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Create {
    tool: String,
    role: String,
    #[serde(default)]
    when: Vec<Condition>,
    valid_until: Millis,
    #[serde(default)]
    valid_from: Option<Millis>,
    #[serde(default)]
    run_id: Option<String>,
    #[serde(default)]
    principal: Option<String>,
}

pub(super) async fn create(
    State(console): State<Arc<Console>>,
    axum::Extension(who): axum::Extension<Identity>,
    Json(body): Json<Create>,
) -> Result<Json<Value>, Refusal> {
    if !who.has_role(&body.role) {
        return Err(Refusal(
            StatusCode::FORBIDDEN,
            format!(
                "{} needs role `{}` to approve calls in it in advance",
                who.name, body.role
            ),
            "ask someone who holds the role",
        ));
    }
    // Four eyes across systems: the grant keeps every name the identities file (and the tokens
    // file's `as=`) gives its granter, so it never covers their own calls under another name.
    let granted_by = console.actor_name(&who);
    let mut granter_names = console.identities.names(&Actor::console(who.name.clone()));
    granter_names.extend(who.principals.iter().cloned());
    granter_names.remove(&granted_by);
    let new = NewGrant {
        tool: body.tool,
        role: body.role,
        granted_by,
        granter_names: granter_names.into_iter().collect(),
        when: body.when,
        valid_from: body.valid_from,
        valid_until: body.valid_until,
        run_id: body.run_id.filter(|r| !r.is_empty()),
        principal: body.principal.filter(|p| !p.is_empty()),
    };
    match console.store.add_grant(new).await {
        Ok(g) => Ok(Json(json!({ "grant": grant_json(&g, console.store.now()) }))),
        Err(GrantError::Bad(bad)) => Err(Refusal(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!("nothing was granted: {bad}"),
            "fix the grant and make it again",
        )),
        Err(GrantError::Store(e)) => Err(store_refusal(e)),
    }
}

/// `POST /api/grants/revoke`.
#[derive(Debug, Deserialize)]
pub(super) struct Revoke {
    id: String,
}

pub(super) async fn revoke(
    State(console): State<Arc<Console>>,
    axum::Extension(who): axum::Extension<Identity>,
    Json(body): Json<Revoke>,
) -> Result<Json<Value>, Refusal> {
    let Some(g) = console.store.grant(&body.id).await.map_err(store_refusal)? else {
        return Err(Refusal(
            StatusCode::NOT_FOUND,
            format!("no standing approval `{}`", body.id),
            "list them: GET /api/grants",
        ));
    };
    if !who.has_role(&g.role) && !who.has_role(&console.resolver_role) {
        return Err(Refusal(
            StatusCode::FORBIDDEN,
            format!(
                "{} needs role `{}` or `{}` to revoke `{}`",
                who.name, g.role, console.resolver_role, g.id
            ),
            "ask someone who holds the role",
        ));
    }
    let g = console
        .store
        .revoke_grant(&body.id, &who.name)
        .await
        .map_err(store_refusal)?
        .unwrap_or(g);
    Ok(Json(json!({ "grant": grant_json(&g, console.store.now()) })))
}
