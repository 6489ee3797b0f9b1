//! `PUT /v1/quotas` (a new quota file, TOML, checked before it replaces the one in force) and
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
/// where (line and field); the one in force stays.
pub async fn replace(State(state): State<ApiState>, body: String) -> Response {
    match state.shared.reload_limits(&body, "request body") {
        Ok(limits) => axum::Json(&*limits).into_response(),
        Err(e) => error(StatusCode::BAD_REQUEST, e.to_string()),
    }
}
