//! Every error answer is JSON, `{"error": "..."}`: the handlers write it themselves, and this
//! layer rewrites what axum answers on its own in plain text or with no body (a body over the
//! size limit (413), a body that is not UTF-8 or not the expected JSON, an unknown route,
//! a wrong method), so clients parse one shape.

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

/// The largest plain-text error body that is carried over into the JSON message.
const MAX_MESSAGE: usize = 4096;

/// An error answer: `status` with `{"error": message}`.
pub fn json_error(status: StatusCode, message: impl Into<String>) -> Response {
    (
        status,
        axum::Json(serde_json::json!({ "error": message.into() })),
    )
        .into_response()
}

fn is_json(response: &Response) -> bool {
    response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"))
}

/// Rewrite a non-JSON error answer as JSON; the text it carried becomes the message (or the
/// status's reason when it had none).
async fn to_json(response: Response) -> Response {
    let status = response.status();
    if !(status.is_client_error() || status.is_server_error()) || is_json(&response) {
        return response;
    }
    let (parts, body) = response.into_parts();
    let text = match axum::body::to_bytes(body, MAX_MESSAGE).await {
        Ok(b) => String::from_utf8_lossy(&b).trim().to_string(),
        Err(_) => String::new(),
    };
    let message = if text.is_empty() {
        status.canonical_reason().unwrap_or("error").to_string()
    } else {
        text
    };
    let mut answer = json_error(status, message);
    // Keep what the client needs to act on (e.g. `Allow` on 405), not the old body's framing.
    for (name, value) in &parts.headers {
        if name != header::CONTENT_TYPE && name != header::CONTENT_LENGTH {
            answer.headers_mut().append(name.clone(), value.clone());
        }
    }
    answer
}

/// `router` with every error answer in JSON, unknown routes included.
pub fn json_errors(router: Router) -> Router {
    router
        .fallback(|| async { json_error(StatusCode::NOT_FOUND, "no such route") })
        .layer(axum::middleware::map_response(to_json))
}
