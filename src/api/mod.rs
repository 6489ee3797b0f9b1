//! The controller's HTTP API (axum): jobs (submit, list, status, cancel, progress, decisions), events,
//! `/metrics` (Prometheus text format: the fleet's aggregates), `/v1/metrics` (the per-team
//! and per-job series) and `/healthz`.
//!
//! Every `/v1` route needs `Authorization: Bearer <token>` (the scheme in any case) of a role
//! the route allows ([`access`]), and every mutating call or refusal is audited ([`audit`]);
//! `/metrics` and `/healthz` are open so scrapers and probes need no secret, and so name no
//! job and no team ([`Metrics::render`]). Every error
//! answer is `{"error": ...}`, axum's own rejections included ([`crate::serve::errors`]). A request that is rejected (bad token, malformed
//! spec, unknown job, an observation that cannot be fitted) writes nothing to the store.
//!
//! No handler waits on the cloud or on a reconcile pass: reads come from the view the pass
//! publishes, writes go to the store and the service's inbox
//! ([`crate::controller::service`]), and store calls and forecaster fits run on blocking
//! threads.

pub mod access;
mod audit;
pub mod client;
pub mod leader;
mod quotas;
mod tokens;
pub mod wire;
mod workers;

use std::sync::Arc;

use axum::Router;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use serde::Deserialize;

use crate::controller::inputs::{Request as Change, admit};
use crate::controller::metrics::Metrics;
use crate::controller::service::{Clock, Shared};
use crate::controller::{ControllerError, explain, inputs};
use crate::report::{self, ReportError};
use crate::serve;
use crate::store::{Store, StoreError};
use access::{Principal, forbidden};
use audit::AuditNote;
use wire::EventView;
use wire::costs::CostQuery;

/// What the handlers share.
#[derive(Clone)]
pub struct ApiState {
    pub shared: Arc<Shared>,
    pub store: Arc<Store>,
    pub token: Arc<str>,
    pub metrics: Arc<Metrics>,
    pub clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for ApiState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiState").finish_non_exhaustive()
    }
}

#[derive(Debug, Deserialize)]
struct EventQuery {
    #[serde(default)]
    after: i64,
    job: Option<String>,
}

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    serve::errors::json_error(status, message)
}

fn internal(e: impl std::fmt::Display) -> Response {
    error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
}

/// A controller error as an HTTP answer.
fn refused(e: ControllerError) -> Response {
    match e {
        ControllerError::Store(StoreError::Duplicate(n)) => {
            error(StatusCode::CONFLICT, format!("job {n} already exists"))
        }
        ControllerError::UnknownJob(n) => error(StatusCode::NOT_FOUND, format!("unknown job {n}")),
        e @ ControllerError::Job { .. } => error(StatusCode::UNPROCESSABLE_ENTITY, e.to_string()),
        e => internal(e),
    }
}

/// Run synchronous work (store calls, fits) on a blocking thread.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ControllerError> + Send + 'static,
) -> Result<T, Response> {
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => r.map_err(refused),
        Err(e) => Err(internal(e)),
    }
}

async fn submit(
    State(state): State<ApiState>,
    axum::Extension(who): axum::Extension<Principal>,
    body: String,
) -> Response {
    let spec = match tern_cloud::parse_job_spec(&body, "request body") {
        Ok(s) => s,
        Err(e) => return error(StatusCode::BAD_REQUEST, e.to_string()),
    };
    let note = AuditNote {
        job: Some(spec.name.clone()),
        team: Some(spec.team.clone()),
    };
    let mut answer = admit_spec(state, &who, spec).await;
    answer.extensions_mut().insert(note);
    answer
}

/// A parsed spec, checked against the caller's team, admitted and stored.
async fn admit_spec(state: ApiState, who: &Principal, spec: tern_cloud::JobSpec) -> Response {
    if !who.may_team(&spec.team) {
        return forbidden(access::other_team(who, &spec.team));
    }
    let now = state.clock.last();
    let store = state.store.clone();
    let admitted = blocking(move || {
        let admitted = admit(spec, now)?;
        store.insert_job(&admitted.record, now)?;
        Ok(admitted)
    })
    .await;
    match admitted {
        Ok(a) => {
            let name = a.record.name().to_string();
            state.shared.send(Change::Submitted(Box::new(a)), true);
            (
                StatusCode::CREATED,
                axum::Json(serde_json::json!({ "name": name })),
            )
                .into_response()
        }
        Err(r) => r,
    }
}

async fn list(
    State(state): State<ApiState>,
    axum::Extension(who): axum::Extension<Principal>,
) -> Response {
    let view = state.shared.view();
    let jobs: Vec<_> = view
        .jobs
        .values()
        .map(|v| &v.status)
        .filter(|s| who.team_scope().is_none_or(|t| s.team == t))
        .map(|s| s.for_caller(who.may_team(&s.team)))
        .collect();
    axum::Json(jobs).into_response()
}

/// `GET /v1/jobs/{name}`: its team and admins see its `[run]` env values; its agents (which
/// fetch them from `GET /v1/jobs/{name}/run`) see the names only.
async fn status(
    State(state): State<ApiState>,
    axum::Extension(who): axum::Extension<Principal>,
    Path(name): Path<String>,
) -> Response {
    match state.shared.view().jobs.get(&name) {
        Some(v) => axum::Json(v.status.for_caller(who.may_team(&v.status.team))).into_response(),
        None => error(StatusCode::NOT_FOUND, format!("unknown job {name}")),
    }
}

/// The offers the controller last read from its cloud, with its prices and what it knows of
/// their availability: `tern_offers` with `source = "controller"`.
async fn offers(State(state): State<ApiState>) -> Response {
    axum::Json(&*state.shared.view().offers).into_response()
}

/// The spec a job was admitted with, as JSON: what `tern_job` imports compare against. Read
/// from the store, never from the cloud.
async fn spec(State(state): State<ApiState>, Path(name): Path<String>) -> Response {
    let store = state.store.clone();
    let job = name.clone();
    match blocking(move || Ok(store.job(&job)?)).await {
        Ok(Some(record)) => axum::Json(&record.spec).into_response(),
        Ok(None) => error(StatusCode::NOT_FOUND, format!("unknown job {name}")),
        Err(r) => r,
    }
}

/// `GET /v1/jobs/{name}/run`: what the job's workers run (its spec's `[run]`, env values
/// included), for its agents, its team and admins; 404 when the spec has none.
async fn run(State(state): State<ApiState>, Path(name): Path<String>) -> Response {
    let store = state.store.clone();
    let job = name.clone();
    match blocking(move || Ok(store.job(&job)?)).await {
        Ok(Some(record)) => match &record.spec.run {
            Some(r) => axum::Json(r).into_response(),
            None => error(
                StatusCode::NOT_FOUND,
                format!(
                    "job {name} has no [run]: give its agents the command after `--`, or add \
                     a [run] section to its spec"
                ),
            ),
        },
        Ok(None) => error(StatusCode::NOT_FOUND, format!("unknown job {name}")),
        Err(r) => r,
    }
}

/// `GET /v1/jobs/{name}/decisions`: the job's decision timeline from the store's events
/// ([`crate::controller::explain`], the same JSON as `tern explain --json`).
async fn decisions(State(state): State<ApiState>, Path(name): Path<String>) -> Response {
    let store = state.store.clone();
    let job = name.clone();
    let now = state.clock.last();
    let built = tokio::task::spawn_blocking(move || explain::load(&store, &job, now)).await;
    match built {
        Ok(Ok(t)) => axum::Json(t).into_response(),
        // The store's error lists every job: the route says only that this one is unknown.
        Ok(Err(explain::ExplainError::UnknownJob { .. })) => {
            error(StatusCode::NOT_FOUND, format!("unknown job {name}"))
        }
        Ok(Err(e)) => internal(e),
        Err(e) => internal(e),
    }
}

async fn cancel(State(state): State<ApiState>, Path(name): Path<String>) -> Response {
    if !state.shared.view().jobs.contains_key(&name) {
        return error(StatusCode::NOT_FOUND, format!("unknown job {name}"));
    }
    let now = state.clock.last();
    let (store, job) = (state.store.clone(), name.clone());
    let cancelled =
        blocking(move || Ok(store.cancel_job(&job, inputs::CANCELLED_BY_USER, now)?)).await;
    match cancelled {
        Ok(true) => state.shared.send(
            Change::Cancelled {
                job: name.clone(),
                at: now,
            },
            true,
        ),
        Ok(false) => {}
        Err(r) => return r,
    }
    let body = state
        .shared
        .view()
        .jobs
        .get(&name)
        .map(|v| v.status.clone());
    axum::Json(body).into_response()
}

async fn events(
    State(state): State<ApiState>,
    axum::Extension(who): axum::Extension<Principal>,
    Query(q): Query<EventQuery>,
) -> Response {
    let store = state.store.clone();
    let team = who.team_scope().map(str::to_string);
    let listed = blocking(move || {
        Ok(match team {
            None => store.events(q.after, q.job.as_deref())?,
            Some(t) => store.team_events(q.after, q.job.as_deref(), &t)?,
        })
    })
    .await;
    match listed {
        Ok(ev) => {
            let out: Vec<EventView> = ev
                .into_iter()
                .map(|e| EventView {
                    id: e.id,
                    at: e.at,
                    job: e.job,
                    kind: e.kind,
                    message: e.message,
                    fields: e.fields,
                })
                .collect();
            axum::Json(out).into_response()
        }
        Err(r) => r,
    }
}

/// `GET /v1/costs`: the cost report, read from the store on a blocking thread.
async fn costs(
    State(state): State<ApiState>,
    axum::Extension(who): axum::Extension<Principal>,
    query: Result<Query<CostQuery>, QueryRejection>,
) -> Response {
    let Query(mut query) = match query {
        Ok(q) => q,
        Err(e) => return error(StatusCode::BAD_REQUEST, e.body_text()),
    };
    if let Some(own) = who.team_scope() {
        if let Some(t) = query.team.as_deref().filter(|t| *t != own) {
            return forbidden(access::other_team(&who, t));
        }
        query.team = Some(own.to_string());
    }
    let scoped = who.team_scope().is_some();
    let store = state.store.clone();
    let budgets = state.shared.limits().budgets();
    let now = state.clock.last();
    let built = tokio::task::spawn_blocking(move || {
        let ledger = report::Ledger::load(&store, budgets)?;
        report::build(&ledger, &query, now)
    })
    .await;
    match built {
        Ok(Ok(r)) => axum::Json(r).into_response(),
        // The message lists every known job or team: not for a team token's eyes.
        Ok(Err(ReportError::UnknownJob { name, .. })) if scoped => {
            error(StatusCode::NOT_FOUND, format!("no job {name} in your team"))
        }
        Ok(Err(ReportError::UnknownTeam { name, .. })) if scoped => error(
            StatusCode::NOT_FOUND,
            format!("team {name} has no jobs yet"),
        ),
        Ok(Err(e @ (ReportError::UnknownJob { .. } | ReportError::UnknownTeam { .. }))) => {
            error(StatusCode::NOT_FOUND, e.to_string())
        }
        Ok(Err(e)) if e.is_bad_input() => error(StatusCode::BAD_REQUEST, e.to_string()),
        Ok(Err(e)) => internal(e),
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

/// `GET /v1/metrics`: the per-team and per-job series, a team token's own team's only.
async fn metrics_private(
    State(state): State<ApiState>,
    axum::Extension(who): axum::Extension<Principal>,
) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics.render_private(who.team_scope()),
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
        .route("/jobs/{name}/spec", get(spec))
        .route("/jobs/{name}/run", get(run))
        .route("/jobs/{name}/decisions", get(decisions))
        .route("/jobs/{name}/start", post(workers::start))
        .route("/jobs/{name}/progress", post(workers::progress))
        .route("/offers", get(offers))
        .route("/events", get(events))
        .route("/costs", get(costs))
        .route("/tokens", post(tokens::create).get(tokens::list))
        .route("/tokens/{id}", delete(tokens::revoke))
        .route("/audit", get(audit::read))
        .route("/quotas", get(quotas::read).put(quotas::replace))
        .route("/metrics", get(metrics_private))
        .layer(middleware::from_fn_with_state(state.clone(), audit::guard));
    serve::errors::json_errors(
        Router::new()
            .nest("/v1", v1)
            .route("/metrics", get(metrics_text))
            .route("/healthz", get(healthz))
            .layer(middleware::from_fn_with_state(state.clone(), leader::guard))
            .with_state(state),
    )
}

#[cfg(test)]
mod fencing_tests;
#[cfg(test)]
mod tests;
