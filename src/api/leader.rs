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
//!
//! A standby answers the same way from the moment it starts ([`Gate`]): it listens before it
//! leads, so a client or agent that holds its address is pointed at the leader instead of
//! being refused a connection, and no load balancer is needed in front of the pair.

use std::sync::{Arc, OnceLock};

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tower::ServiceExt;

use super::ApiState;
use crate::controller::lease::LeaderSeen;
use crate::store::LeaseHolder;

/// The outermost layer of the API.
pub async fn guard(State(state): State<ApiState>, request: Request, next: Next) -> Response {
    const DEPOSED: &str = "this controller no longer leads";
    if let Some(leader) = state.store.deposed() {
        return not_leader(DEPOSED, leader);
    }
    let answer = next.run(request).await;
    if !answer.status().is_success()
        && let Some(leader) = state.store.deposed()
    {
        return not_leader(DEPOSED, leader);
    }
    answer
}

/// The API of a controller that may not lead yet: every route answers 503 with the leader
/// the standby last saw, until [`Gate::open`] puts the leader's routes behind it.
#[derive(Debug, Clone)]
pub struct Gate {
    routes: Arc<OnceLock<Router>>,
    seen: LeaderSeen,
}

impl Gate {
    pub fn new(seen: LeaderSeen) -> Gate {
        Gate {
            routes: Arc::default(),
            seen,
        }
    }

    /// This controller leads: from now on `routes` answer.
    pub fn open(&self, routes: Router) {
        let _ = self.routes.set(routes);
    }

    /// Whether the leader's routes are not open yet.
    pub fn is_closed(&self) -> bool {
        self.routes.get().is_none()
    }

    /// What the server serves, before and after [`Gate::open`].
    pub fn router(&self) -> Router {
        Router::new().fallback(through).with_state(self.clone())
    }
}

async fn through(State(gate): State<Gate>, request: Request) -> Response {
    match gate.routes.get() {
        Some(routes) => match routes.clone().oneshot(request).await {
            Ok(answer) => answer,
            Err(never) => match never {},
        },
        None => not_leader("this controller is on standby", gate.seen.get()),
    }
}

fn not_leader(why: &str, leader: Option<LeaseHolder>) -> Response {
    let (message, address) = match &leader {
        Some(LeaseHolder {
            holder,
            address: Some(a),
            ..
        }) => (format!("{why}; {holder} leads, at {a}"), Some(a.clone())),
        Some(l) => (format!("{why}; {} leads", l.holder), None),
        None => (format!("{why}; no leader is known yet"), None),
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
