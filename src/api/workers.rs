//! The agents' routes: `POST /v1/jobs/{name}/start` (start workers as an incarnation) and
//! `POST /v1/jobs/{name}/progress` (a report from running workers). Both are the worker
//! protocol ([`crate::controller::protocol`]), fenced: only the current incarnation's running
//! workers write.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::wire::{Action, ErrorBody, Progress, ProgressReply, StartReply, StartRequest};
use super::{ApiState, blocking, error};
use crate::controller::fencing::Live;
use crate::controller::protocol::{self, Answer, Fleet};

/// A 409 that tells the agent what to do with its workers.
fn fenced(action: Action, why: String) -> Response {
    let body = ErrorBody {
        error: why,
        action: Some(action),
        leader: None,
    };
    (StatusCode::CONFLICT, axum::Json(body)).into_response()
}

/// The job's fleet as the last pass published it.
fn fleet_of(state: &ApiState, name: &str) -> Fleet {
    state
        .shared
        .view()
        .jobs
        .get(name)
        .map(|v| v.fleet.clone())
        .unwrap_or_default()
}

/// The accelerator the controller launched `instance` with, and how many it has.
fn shape_of(live: &[Live], instance: &str) -> (Option<String>, Option<u32>) {
    live.iter()
        .find(|l| l.id == instance)
        .map_or((None, None), |l| (l.accelerator.clone(), Some(l.gpus)))
}

pub(super) async fn start(
    State(state): State<ApiState>,
    Path(name): Path<String>,
    axum::Json(req): axum::Json<StartRequest>,
) -> Response {
    if tern_cloud::name::check_label(&req.instance).is_err() || req.instance.is_empty() {
        return error(
            StatusCode::BAD_REQUEST,
            "instance: expected a non-empty instance id without control characters",
        );
    }
    if req
        .address
        .as_deref()
        .is_some_and(|a| a.is_empty() || a.len() > 255 || tern_cloud::name::check_label(a).is_err())
    {
        return error(
            StatusCode::BAD_REQUEST,
            "address: expected a host address without control characters, at most 255 bytes",
        );
    }
    let fleet = fleet_of(&state, &name);
    let (accelerator, gpus_per_node) = shape_of(&fleet.live, &req.instance);
    let now = state.clock.last();
    let (store, shared) = (state.store.clone(), state.shared.clone());
    let (instance, address) = (req.instance.clone(), req.address.clone());
    let decided = blocking(move || {
        let answer = protocol::start(
            &store,
            &*shared,
            &name,
            &instance,
            address.as_deref(),
            &fleet,
            now,
        )?;
        let Answer::Done((incarnation, _)) = answer else {
            return Ok(Err(answer));
        };
        let ranks = protocol::ranks(&store, &name, &instance)?;
        let workers = store.job(&name)?.map(|r| r.spec.workers);
        let nodes = workers
            .zip(gpus_per_node)
            .map(|(w, g)| crate::controller::fencing::max_nodes(w, g));
        Ok(Ok((incarnation, ranks, nodes)))
    })
    .await;
    match decided {
        Ok(Ok((incarnation, ranks, nodes))) => axum::Json(StartReply {
            incarnation,
            accelerator,
            gpus_per_node,
            node_rank: ranks.rank,
            nodes,
            node_addresses: ranks.addresses,
        })
        .into_response(),
        Ok(Err(Answer::Refused(action, why))) => fenced(action, why),
        Ok(Err(Answer::Done(_))) => unreachable!("a start that was done is answered above"),
        Err(r) => r,
    }
}

/// Why a progress report is malformed, if it is (answered 400).
fn invalid_progress(p: &Progress, name: &str) -> Option<&'static str> {
    if !(p.done_samples.is_finite()
        && p.checkpoint_samples.is_finite()
        && p.done_samples >= 0.0
        && p.checkpoint_samples >= 0.0)
    {
        return Some("done_samples and checkpoint_samples must be finite and >= 0");
    }
    if let Some(o) = &p.observation
        && (o.job != name || !(o.step_seconds.is_finite() && o.step_seconds > 0.0))
    {
        return Some("observation: job must match the URL and step_seconds must be > 0");
    }
    if let Some(o) = &p.observation
        && tern_cloud::name::check_label(&o.accelerator).is_err()
    {
        return Some("observation: accelerator must be a name without control characters");
    }
    if p.failure.as_ref().is_some_and(|f| f.len() > 16 * 1024) {
        return Some("failure: at most 16 KiB");
    }
    None
}

pub(super) async fn progress(
    State(state): State<ApiState>,
    Path(name): Path<String>,
    axum::Json(p): axum::Json<Progress>,
) -> Response {
    if let Some(why) = invalid_progress(&p, &name) {
        return error(StatusCode::BAD_REQUEST, why);
    }
    let fleet = fleet_of(&state, &name);
    let now = state.clock.last();
    let (store, shared) = (state.store.clone(), state.shared.clone());
    let reply = blocking(move || protocol::report(&store, &*shared, &name, &fleet, &p, now)).await;
    match reply {
        Ok(Answer::Done(v)) => axum::Json(ProgressReply {
            drain: v.drain,
            state: v.state.as_str().to_string(),
            clamped: v.clamped,
            stop: v.stop,
        })
        .into_response(),
        Ok(Answer::Refused(action, why)) => fenced(action, why),
        Err(r) => r,
    }
}
