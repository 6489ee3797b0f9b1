//! `/v1/tokens` (admin only, by [`super::access::need`]): create a scoped token, list them,
//! revoke one. The secret is in the creating answer only; the store keeps its hash.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::wire::access::{TokenRequest, TokenView};
use super::{ApiState, error, internal};
use crate::store::{Role, TokenRecord, check_scope};

fn view(t: TokenRecord, secret: Option<String>) -> TokenView {
    TokenView {
        id: t.id,
        token: secret,
        role: t.role.as_str().to_string(),
        team: t.team,
        job: t.job,
        created_at: t.created_at,
        revoked_at: t.revoked_at,
    }
}

/// `POST /v1/tokens`: 201 with the token's id and secret.
pub(super) async fn create(
    State(state): State<ApiState>,
    axum::Json(req): axum::Json<TokenRequest>,
) -> Response {
    let role: Role = match req.role.parse() {
        Ok(r) => r,
        Err(why) => return error(StatusCode::UNPROCESSABLE_ENTITY, why),
    };
    if let Err(why) = check_scope(role, req.team.as_deref(), req.job.as_deref()) {
        return error(StatusCode::UNPROCESSABLE_ENTITY, why);
    }
    let (store, now) = (state.store.clone(), chrono::Utc::now());
    let made = tokio::task::spawn_blocking(move || {
        store.create_token(role, req.team.as_deref(), req.job.as_deref(), now)
    })
    .await;
    match made {
        Ok(Ok(t)) => {
            let mut answer = (
                StatusCode::CREATED,
                axum::Json(view(t.record.clone(), Some(t.secret))),
            )
                .into_response();
            answer.extensions_mut().insert(super::audit::AuditNote {
                job: t.record.job,
                team: t.record.team,
            });
            answer
        }
        Ok(Err(e)) => internal(e),
        Err(e) => internal(e),
    }
}

/// `GET /v1/tokens`: every created token, revoked ones included, without secrets.
pub(super) async fn list(State(state): State<ApiState>) -> Response {
    let store = state.store.clone();
    match tokio::task::spawn_blocking(move || store.tokens()).await {
        Ok(Ok(all)) => {
            axum::Json(all.into_iter().map(|t| view(t, None)).collect::<Vec<_>>()).into_response()
        }
        Ok(Err(e)) => internal(e),
        Err(e) => internal(e),
    }
}

/// `DELETE /v1/tokens/{id}`: the token is refused from now on; 404 for an unknown id.
pub(super) async fn revoke(State(state): State<ApiState>, Path(id): Path<String>) -> Response {
    let (store, key, now) = (state.store.clone(), id.clone(), chrono::Utc::now());
    let done = tokio::task::spawn_blocking(move || {
        if !store.revoke_token(&key, now)? {
            return Ok(None);
        }
        Ok(store.tokens()?.into_iter().find(|t| t.id == key))
    })
    .await;
    match done {
        Ok(Ok(Some(t))) => axum::Json(view(t, None)).into_response(),
        Ok(Ok(None)) => error(StatusCode::NOT_FOUND, format!("unknown token {id}")),
        Ok(Err::<_, crate::store::StoreError>(e)) => internal(e),
        Err(e) => internal(e),
    }
}
