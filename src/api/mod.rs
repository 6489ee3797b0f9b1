//! The controller's HTTP API (axum): jobs (submit, list, status, cancel, progress), events,
//! `/metrics` (Prometheus text format) and `/healthz`.
//!
//! Every `/v1` route needs `Authorization: Bearer <token>`; `/metrics` and `/healthz` are open
//! so scrapers and probes need no secret. A request that is rejected (bad token, malformed
//! spec, unknown job) writes nothing to the store: validation happens before `submit`.

pub mod client;
pub mod metrics;

use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, Query, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tokio::sync::{Mutex, Notify};

use crate::controller::{Controller, ControllerError};
use crate::store::{JobRecord, StoreError};
use metrics::Metrics;

/// Reads the controller's clock (wall time, or the simulated cloud's virtual time).
pub type Clock = Arc<dyn Fn() -> DateTime<Utc> + Send + Sync>;

/// What the handlers share with the reconcile loop.
#[derive(Clone)]
pub struct ApiState {
    pub controller: Arc<Mutex<Controller>>,
    pub token: Arc<str>,
    /// Wakes the reconcile loop: a submit or cancel is reconciled at once, not at the period.
    pub wake: Arc<Notify>,
    pub metrics: Arc<Metrics>,
    pub clock: Clock,
}

impl std::fmt::Debug for ApiState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiState").finish_non_exhaustive()
    }
}

/// A job as the API shows it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobStatus {
    pub name: String,
    pub team: String,
    pub state: String,
    pub reason: Option<String>,
    pub progress: f64,
    pub done_samples: f64,
    pub checkpoint_samples: f64,
    pub total_samples: f64,
    pub submitted_at: DateTime<Utc>,
    pub deadline_at: Option<DateTime<Utc>>,
    pub instances: usize,
    pub spot_instances: usize,
    pub dollars_per_hour: f64,
}

fn status_of(ctl: &Controller, j: &JobRecord) -> JobStatus {
    let mine: Vec<_> = ctl.instances().filter(|i| i.job == j.name()).collect();
    JobStatus {
        name: j.name().to_string(),
        team: j.spec.team.clone(),
        state: j.state.as_str().to_string(),
        reason: j.reason.clone(),
        progress: j.done_samples / j.total_samples.max(1.0),
        done_samples: j.done_samples,
        checkpoint_samples: j.checkpoint_samples,
        total_samples: j.total_samples,
        submitted_at: j.submitted_at,
        deadline_at: j.deadline_at,
        instances: mine.len(),
        spot_instances: mine
            .iter()
            .filter(|i| i.offer.capacity.is_preemptible())
            .count(),
        dollars_per_hour: mine.iter().map(|i| i.offer.price_per_hour).sum::<f64>() + 0.0,
    }
}

/// Progress reported by a worker agent.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Progress {
    pub done_samples: f64,
    pub checkpoint_samples: f64,
    /// True when this report follows a checkpoint the controller asked for (drain).
    #[serde(default)]
    pub checkpointed: bool,
    /// A measured step (step time at a shape): refits the job's throughput forecast.
    #[serde(default)]
    pub observation: Option<tern_cloud::Observation>,
}

/// What the controller answers a progress report with: whether to checkpoint now.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProgressReply {
    pub drain: bool,
    pub state: String,
}

#[derive(Debug, Deserialize)]
struct EventQuery {
    #[serde(default)]
    after: i64,
    job: Option<String>,
}

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (
        status,
        axum::Json(serde_json::json!({ "error": message.into() })),
    )
        .into_response()
}

fn internal(e: impl std::fmt::Display) -> Response {
    error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
}

async fn auth(State(state): State<ApiState>, request: Request, next: Next) -> Response {
    let ok = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .is_some_and(|t| constant_time_eq(t.as_bytes(), state.token.as_bytes()));
    if !ok {
        return error(
            StatusCode::UNAUTHORIZED,
            "missing or wrong bearer token (Authorization: Bearer <token>)",
        );
    }
    next.run(request).await
}

/// Compare without an early exit, so the time taken does not reveal a token's prefix.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn submit(State(state): State<ApiState>, body: String) -> Response {
    let spec = match tern_cloud::parse_job_spec(&body, "request body") {
        Ok(s) => s,
        Err(e) => return error(StatusCode::BAD_REQUEST, e.to_string()),
    };
    let name = spec.name.clone();
    let mut ctl = state.controller.lock().await;
    match ctl.submit(spec, (state.clock)()) {
        Ok(()) => {
            drop(ctl);
            state.wake.notify_one();
            (
                StatusCode::CREATED,
                axum::Json(serde_json::json!({ "name": name })),
            )
                .into_response()
        }
        Err(ControllerError::Store(StoreError::Duplicate(n))) => {
            error(StatusCode::CONFLICT, format!("job {n} already exists"))
        }
        Err(e @ ControllerError::Job { .. }) => {
            error(StatusCode::UNPROCESSABLE_ENTITY, e.to_string())
        }
        Err(e) => internal(e),
    }
}

async fn list(State(state): State<ApiState>) -> Response {
    let ctl = state.controller.lock().await;
    let jobs: Vec<JobStatus> = ctl.jobs().map(|j| status_of(&ctl, j)).collect();
    axum::Json(jobs).into_response()
}

async fn status(State(state): State<ApiState>, Path(name): Path<String>) -> Response {
    let ctl = state.controller.lock().await;
    match ctl.job(&name) {
        Some(j) => axum::Json(status_of(&ctl, j)).into_response(),
        None => error(StatusCode::NOT_FOUND, format!("unknown job {name}")),
    }
}

async fn cancel(State(state): State<ApiState>, Path(name): Path<String>) -> Response {
    let mut ctl = state.controller.lock().await;
    match ctl.cancel(&name, (state.clock)()) {
        Ok(()) => {
            let body = ctl.job(&name).map(|j| status_of(&ctl, j));
            drop(ctl);
            state.wake.notify_one();
            axum::Json(body).into_response()
        }
        Err(ControllerError::UnknownJob(n)) => {
            error(StatusCode::NOT_FOUND, format!("unknown job {n}"))
        }
        Err(e) => internal(e),
    }
}

async fn progress(
    State(state): State<ApiState>,
    Path(name): Path<String>,
    axum::Json(p): axum::Json<Progress>,
) -> Response {
    if !(p.done_samples.is_finite()
        && p.checkpoint_samples.is_finite()
        && p.done_samples >= 0.0
        && p.checkpoint_samples >= 0.0)
    {
        return error(
            StatusCode::BAD_REQUEST,
            "done_samples and checkpoint_samples must be finite and >= 0",
        );
    }
    let mut ctl = state.controller.lock().await;
    let now = (state.clock)();
    if let Some(o) = &p.observation {
        if o.job != name || !(o.step_seconds.is_finite() && o.step_seconds > 0.0) {
            return error(
                StatusCode::BAD_REQUEST,
                "observation: job must match the URL and step_seconds must be > 0",
            );
        }
        match ctl.observe(o) {
            Ok(()) => {}
            Err(ControllerError::UnknownJob(n)) => {
                return error(StatusCode::NOT_FOUND, format!("unknown job {n}"));
            }
            Err(e @ ControllerError::Job { .. }) => {
                return error(StatusCode::UNPROCESSABLE_ENTITY, e.to_string());
            }
            Err(e) => return internal(e),
        }
    }
    match ctl.report_progress(
        &name,
        p.done_samples,
        p.checkpoint_samples,
        p.checkpointed,
        now,
    ) {
        Ok(()) => {
            let job = ctl.job(&name);
            // A finished job or a taken checkpoint is an event: release or move on now.
            let event = p.checkpointed || job.is_some_and(|j| j.done_samples >= j.total_samples);
            let reply = job.map(|j| ProgressReply {
                drain: j.drain_requested,
                state: j.state.as_str().to_string(),
            });
            drop(ctl);
            if event {
                state.wake.notify_one();
            }
            axum::Json(reply).into_response()
        }
        Err(ControllerError::UnknownJob(n)) => {
            error(StatusCode::NOT_FOUND, format!("unknown job {n}"))
        }
        Err(e) => internal(e),
    }
}

async fn events(State(state): State<ApiState>, Query(q): Query<EventQuery>) -> Response {
    let ctl = state.controller.lock().await;
    match ctl.store().events(q.after, q.job.as_deref()) {
        Ok(ev) => {
            let out: Vec<_> = ev
                .into_iter()
                .map(|e| {
                    serde_json::json!({
                        "id": e.id, "at": e.at, "job": e.job, "kind": e.kind, "message": e.message
                    })
                })
                .collect();
            axum::Json(out).into_response()
        }
        Err(e) => internal(e),
    }
}

async fn metrics_text(State(state): State<ApiState>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics.render(),
    )
        .into_response()
}

async fn healthz() -> &'static str {
    "ok\n"
}

/// The API's routes.
pub fn router(state: ApiState) -> Router {
    let v1 = Router::new()
        .route("/jobs", post(submit).get(list))
        .route("/jobs/{name}", get(status).delete(cancel))
        .route("/jobs/{name}/progress", post(progress))
        .route("/events", get(events))
        .layer(middleware::from_fn_with_state(state.clone(), auth));
    Router::new()
        .nest("/v1", v1)
        .route("/metrics", get(metrics_text))
        .route("/healthz", get(healthz))
        .with_state(state)
}
