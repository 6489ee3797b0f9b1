//! The agents' routes: `POST /v1/jobs/{name}/start` (start workers as an incarnation) and
//! `POST /v1/jobs/{name}/progress` (a report from running workers). Both are fenced
//! ([`crate::controller::fencing`]): only the current incarnation's running workers write.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::wire::{Action, ErrorBody, Progress, ProgressReply, StartReply, StartRequest};
use super::{ApiState, blocking, error};
use crate::controller::ControllerError;
use crate::controller::fencing::{self, JobSide, Live, Report, Start};
use crate::controller::inputs::{Request as Change, refit_with};
use crate::store::JobState;

/// A 409 that tells the agent what to do with its workers.
fn fenced(action: Action, why: String) -> Response {
    let body = ErrorBody {
        error: why,
        action: Some(action),
    };
    (StatusCode::CONFLICT, axum::Json(body)).into_response()
}

/// What a fenced handler decided, before it becomes an answer.
enum Outcome<T> {
    Done(T),
    Refused(Action, String),
}

/// The job's instances that have not ended, as the last pass published them.
fn live_of(state: &ApiState, name: &str) -> Vec<Live> {
    state
        .shared
        .view()
        .jobs
        .get(name)
        .map(|v| v.live.clone())
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
    let live = live_of(&state, &name);
    let (accelerator, gpus_per_node) = shape_of(&live, &req.instance);
    let now = state.clock.last();
    let (store, shared) = (state.store.clone(), state.shared.clone());
    let instance = req.instance.clone();
    let job = name.clone();
    let decided = blocking(move || {
        let record = store
            .job(&job)?
            .ok_or_else(|| ControllerError::UnknownJob(job.clone()))?;
        let _one_writer = shared.progress.lock().unwrap_or_else(|e| e.into_inner());
        let current = store.incarnation(&job)?;
        let side = JobSide {
            name: &job,
            state: record.state,
            live: &live,
            current: &current,
        };
        let (number, opened) = match fencing::start(&side, &instance) {
            Start::Join(n) => (n, false),
            Start::Open(n) => (n, true),
            Start::Wait(why) => return Ok(Outcome::Refused(Action::Wait, why)),
            Start::Done(why) => return Ok(Outcome::Refused(Action::Done, why)),
            Start::Refuse(why) => return Ok(Outcome::Refused(Action::Exit, why)),
        };
        if current.worker(&instance).is_some_and(|w| w.running) {
            store.stop_workers(&job, current.number, &instance, None, now)?;
        }
        store.start_workers(&job, number, &instance, now)?;
        shared.send(
            Change::Started {
                job: job.clone(),
                instance: instance.clone(),
                incarnation: number,
                opened,
                at: now,
            },
            false,
        );
        Ok(Outcome::Done(number))
    })
    .await;
    match decided {
        Ok(Outcome::Done(incarnation)) => axum::Json(StartReply {
            incarnation,
            accelerator,
            gpus_per_node,
        })
        .into_response(),
        Ok(Outcome::Refused(action, why)) => fenced(action, why),
        Err(r) => r,
    }
}

/// A measured step is filed under the accelerator of the instance that reported it, as the
/// cloud sold it: a script that names its device itself (`NVIDIA A100-SXM4-80GB`, as
/// `torch.cuda.get_device_name()` says) would otherwise start a series under a name the
/// planner never asks about.
fn on_what_it_ran(mut p: Progress, live: &[Live]) -> Progress {
    let sold = p
        .instance
        .as_deref()
        .and_then(|id| live.iter().find(|l| l.id == id))
        .and_then(|l| l.accelerator.clone());
    if let (Some(o), Some(a)) = (p.observation.as_mut(), sold) {
        o.accelerator = a;
    }
    p
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

/// What an accepted report tells its agent.
struct Verdict {
    drain: bool,
    stop: bool,
    state: JobState,
    clamped: Vec<String>,
}

pub(super) async fn progress(
    State(state): State<ApiState>,
    Path(name): Path<String>,
    axum::Json(p): axum::Json<Progress>,
) -> Response {
    if let Some(why) = invalid_progress(&p, &name) {
        return error(StatusCode::BAD_REQUEST, why);
    }
    let live = live_of(&state, &name);
    let p = on_what_it_ran(p, &live);
    let now = state.clock.last();
    let (store, shared) = (state.store.clone(), state.shared.clone());
    let reply = blocking(move || record_progress(&store, &shared, &name, &live, &p, now)).await;
    match reply {
        Ok(Outcome::Done(v)) => axum::Json(ProgressReply {
            drain: v.drain,
            state: v.state.as_str().to_string(),
            clamped: v.clamped,
            stop: v.stop,
        })
        .into_response(),
        Ok(Outcome::Refused(action, why)) => fenced(action, why),
        Err(r) => r,
    }
}

/// A progress report, judged and recorded. Everything is checked before anything is written: a
/// report refused for its fencing, its observation or its numbers leaves the job exactly as it
/// was. Fencing first (a stale worker learns it is stale), and again under the writers' lock.
fn record_progress(
    store: &crate::store::Store,
    shared: &crate::controller::service::Shared,
    name: &str,
    live: &[Live],
    p: &Progress,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<Outcome<Verdict>, ControllerError> {
    let record = store
        .job(name)?
        .ok_or_else(|| ControllerError::UnknownJob(name.to_string()))?;
    let judge = |state, incarnation: &crate::store::Incarnation| {
        let side = JobSide {
            name,
            state,
            live,
            current: incarnation,
        };
        fencing::report(&side, p.instance.as_deref(), p.incarnation)
    };
    if let Report::Refuse { action, why } = judge(record.state, &store.incarnation(name)?) {
        return Ok(Outcome::Refused(action, why));
    }
    let loaded = match &p.observation {
        Some(o) => Some(refit_with(store, &record, o)?),
        None => None,
    };
    let _one_writer = shared.progress.lock().unwrap_or_else(|e| e.into_inner());
    let current = store.job(name)?.unwrap_or(record);
    let (drain, stop) = match judge(current.state, &store.incarnation(name)?) {
        Report::Accept { drain, stop } => (drain, stop),
        Report::Refuse { action, why } => return Ok(Outcome::Refused(action, why)),
    };
    let checked = current
        .progress_after(p.done_samples, p.checkpoint_samples, p.checkpointed, now)
        .map_err(|reason| ControllerError::Job {
            job: name.to_string(),
            reason,
        })?;
    if let (Some(o), Some(loaded)) = (&p.observation, loaded) {
        store.add_observation(o)?;
        let job = name.to_string();
        shared.send(
            Change::Observed {
                job,
                loaded,
                at: now,
            },
            false,
        );
    }
    store.set_progress(name, &checked.progress, now)?;
    let finished = checked.progress.done_samples >= current.total_samples;
    // A finished job or a taken checkpoint is an event: release or move on now.
    let progress = checked.progress;
    let urgent = finished || p.checkpointed || p.stopped;
    shared.send(
        Change::Progress {
            job: name.to_string(),
            progress,
        },
        urgent,
    );
    if p.stopped
        && let (Some(instance), Some(k)) = (&p.instance, p.incarnation)
    {
        store.stop_workers(name, k, instance, p.failure.as_deref(), now)?;
        if let Some(failure) = &p.failure
            && !finished
        {
            fail(store, shared, name, instance, failure, now)?;
        }
    }
    Ok(Outcome::Done(Verdict {
        drain,
        stop,
        state: current.state,
        clamped: checked.clamped,
    }))
}

/// The workers on `instance` failed for good: the job fails with how.
fn fail(
    store: &crate::store::Store,
    shared: &crate::controller::service::Shared,
    job: &str,
    instance: &str,
    failure: &str,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<(), ControllerError> {
    let reason = format!("training failed on {instance}: {failure}");
    if store.end_job(job, JobState::Failed, &reason, now)? {
        shared.send(
            Change::Failed {
                job: job.to_string(),
                reason,
                at: now,
            },
            true,
        );
    }
    Ok(())
}
