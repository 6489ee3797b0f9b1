//! `PUT /v1/quotas` (a new quota file, TOML, checked, then stored so it outlives a restart,
//! before it replaces the one in force) and
//! `GET /v1/quotas` (the one in force, as JSON). Admin only, as every route the access table
//! does not name; the audit guard records each call.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::{ApiState, error};

/// The quota file in force.
pub async fn read(State(state): State<ApiState>) -> Response {
    axum::Json(&*state.shared.limits()).into_response()
}

/// Replace the quota file. A file that does not parse or check is refused with 400 saying
/// where (line and field); the one in force stays. One that checks is stored before it is put
/// in force, so it outlives a restart (until the file on disk is reloaded).
pub async fn replace(State(state): State<ApiState>, body: String) -> Response {
    let limits = match state.shared.checked_limits(&body, "request body") {
        Ok(l) => l,
        Err(e) => return error(StatusCode::BAD_REQUEST, e.to_string()),
    };
    let (store, text, now) = (state.store.clone(), body, chrono::Utc::now());
    let stored =
        tokio::task::spawn_blocking(move || store.put_setting(crate::store::QUOTAS, &text, now))
            .await;
    match stored {
        Ok(Ok(())) => axum::Json(&*state.shared.use_limits(limits)).into_response(),
        Ok(Err(e)) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("storing the quota file: {e}"),
        ),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}
