//! A deposed leader answers nothing but where the leader is.
//!
//! Once this controller's reign is over (its lease renewal or a fenced write found another
//! holder), every route answers `503 Service Unavailable` with `{"error", "leader"}` and a
//! `Retry-After`, so a client or load balancer goes to the leader; `/healthz` too, so probes
//! take it out of rotation. A handler whose write was refused by the fence would have answered
//! an error of its own (500, or a 4xx where it reads the store's error as the request's): any
//! unsuccessful answer given once the store is deposed is replaced the same way, so a client
//! reads a refusal for leadership as such. A write that committed before the takeover keeps
//! its 2xx: the new leader loaded it.

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::ApiState;
use crate::store::LeaseHolder;

/// The outermost layer of the API.
pub async fn guard(State(state): State<ApiState>, request: Request, next: Next) -> Response {
    if let Some(leader) = state.store.deposed() {
        return not_leader(leader);
    }
    let answer = next.run(request).await;
    if !answer.status().is_success()
        && let Some(leader) = state.store.deposed()
    {
        return not_leader(leader);
    }
    answer
}

fn not_leader(leader: Option<LeaseHolder>) -> Response {
    let (message, address) = match &leader {
        Some(LeaseHolder {
            holder,
            address: Some(a),
            ..
        }) => (
            format!("this controller no longer leads; {holder} leads, at {a}"),
            Some(a.clone()),
        ),
        Some(l) => (
            format!("this controller no longer leads; {} leads", l.holder),
            None,
        ),
        None => (
            "this controller no longer leads; no leader is known yet".to_string(),
            None,
        ),
    };
    let mut answer = (
        StatusCode::SERVICE_UNAVAILABLE,
        axum::Json(serde_json::json!({ "error": message, "leader": address })),
    )
        .into_response();
    answer
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    answer
}
