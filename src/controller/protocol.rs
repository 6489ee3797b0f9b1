//! The worker protocol: an agent asks to start a job's workers on its instance, and reports
//! their progress; both are fenced ([`fencing`]) and answered with what the agent must do
//! (`drain`, `stop`, or a refusal's action). One implementation for the HTTP agents (the API's
//! handlers call it) and the simulated workers ([`super::workload`]): a simulated worker acts
//! on exactly the answers a real agent gets, and reads no job or instance flag.

use std::sync::Mutex;

use chrono::{DateTime, Utc};

use super::ControllerError;
use super::fencing::{self, JobSide, Live, Report, Start};
use super::health::FAILING_IN_A_ROW;
use super::inputs::{Request as Change, refit_with};
use crate::api::wire::{Action, Progress};
use crate::store::{Ended, JobState, Store};

/// Where the protocol's changes go once they are in the store: the service's inbox, or the
/// simulated world's queue that its controller takes in.
pub trait Sink {
    /// Take a change already written; `urgent` runs a pass now.
    fn send(&self, change: Change, urgent: bool);
    /// Serialises the protocol's read-merge-writes of one store.
    fn writers(&self) -> &Mutex<()>;
}

/// A job's fleet as the controller last showed it: what fencing decides on.
#[derive(Debug, Clone, Default)]
pub struct Fleet {
    /// The job's instances that have not ended.
    pub live: Vec<Live>,
    /// The controller is stopping the job (a budget ran out): every instance drains.
    pub stopping: bool,
}

/// What the protocol answered, before it becomes an HTTP answer or a simulated worker's act.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer<T> {
    Done(T),
    /// Refused (409): what the agent must do, and why.
    Refused(Action, String),
}

/// What an accepted report tells its agent.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub drain: bool,
    pub stop: bool,
    pub state: JobState,
    pub clamped: Vec<String>,
}

/// An agent on `instance` (at `address`, when it gave one) asks to start `job`'s workers: the
/// incarnation they start as, and whether it opened a new one.
pub fn start(
    store: &Store,
    sink: &dyn Sink,
    job: &str,
    instance: &str,
    address: Option<&str>,
    fleet: &Fleet,
    now: DateTime<Utc>,
) -> Result<Answer<(u64, bool)>, ControllerError> {
    let record = store
        .job(job)?
        .ok_or_else(|| ControllerError::UnknownJob(job.to_string()))?;
    let _one_writer = sink.writers().lock().unwrap_or_else(|e| e.into_inner());
    let mut current = store.incarnation(job)?;
    // An agent asks only once its workers are gone (it was restarted, or they stopped): its
    // own worker is fenced now, whatever the answer, so the rest of its incarnation hears of
    // it (`stop`) instead of waiting on it while it waits on them.
    if !record.state.is_final() && current.worker(instance).is_some_and(|w| w.running) {
        store.stop_workers(job, current.number, instance, None, None, now)?;
        current = store.incarnation(job)?;
    }
    if !record.state.is_final()
        && let Some(why) = failing(store, sink, job, instance, now)?
    {
        return Ok(Answer::Refused(Action::Wait, format!("quarantined: {why}")));
    }
    let side = JobSide {
        name: job,
        state: record.state,
        live: &fleet.live,
        current: &current,
        workers: record.spec.workers,
        stopping: fleet.stopping,
    };
    let (number, opened) = match fencing::start(&side, instance) {
        Start::Join(n) => (n, false),
        Start::Open(n) => (n, true),
        Start::Wait(why) => return Ok(Answer::Refused(Action::Wait, why)),
        Start::Done(why) => return Ok(Answer::Refused(Action::Done, why)),
        Start::Refuse(why) => return Ok(Answer::Refused(Action::Exit, why)),
    };
    store.start_workers(job, number, instance, address, now)?;
    sink.send(
        Change::Started {
            job: job.to_string(),
            instance: instance.to_string(),
            incarnation: number,
            opened,
            at: now,
        },
        false,
    );
    Ok(Answer::Done((number, opened)))
}

/// Where a started node stands among its incarnation's: its rank (0 for the node that opened
/// it, then in the order they started) and the addresses of the nodes started so far, in rank
/// order, so the first is rank 0's (the address SkyPilot's scripts take as the master).
#[derive(Debug, Clone, PartialEq)]
pub struct Ranks {
    pub rank: u32,
    pub addresses: Vec<String>,
}

pub fn ranks(store: &Store, job: &str, instance: &str) -> Result<Ranks, ControllerError> {
    let mut workers = store.incarnation(job)?.workers;
    workers.sort_by_key(|w| w.rank);
    let rank = workers
        .iter()
        .find(|w| w.instance == instance)
        .map_or(0, |w| w.rank);
    Ok(Ranks {
        rank,
        addresses: workers
            .iter()
            .take_while(|w| w.rank <= rank)
            .filter_map(|w| w.address.clone())
            .collect(),
    })
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

/// A progress report, judged and recorded. Everything is checked before anything is written: a
/// report refused for its fencing, its observation or its numbers leaves the job exactly as it
/// was. Fencing first (a stale worker learns it is stale), and again under the writers' lock.
pub fn report(
    store: &Store,
    shared: &dyn Sink,
    name: &str,
    fleet: &Fleet,
    p: &Progress,
    now: DateTime<Utc>,
) -> Result<Answer<Verdict>, ControllerError> {
    let p = &on_what_it_ran(p.clone(), &fleet.live);
    let record = store
        .job(name)?
        .ok_or_else(|| ControllerError::UnknownJob(name.to_string()))?;
    let workers = record.spec.workers;
    let judge = |state, incarnation: &crate::store::Incarnation| {
        let side = JobSide {
            name,
            state,
            live: &fleet.live,
            current: incarnation,
            workers,
            stopping: fleet.stopping,
        };
        fencing::report(&side, p.instance.as_deref(), p.incarnation, p.stopped)
    };
    match judge(record.state, &store.incarnation(name)?) {
        Report::Refuse { action, why } => return Ok(Answer::Refused(action, why)),
        Report::Last => return record_last(store, shared, name, p, now),
        Report::Accept { .. } => {}
    }
    let loaded = match &p.observation {
        Some(o) => Some(refit_with(store, &record, o)?),
        None => None,
    };
    let _one_writer = shared.writers().lock().unwrap_or_else(|e| e.into_inner());
    let current = store.job(name)?.unwrap_or(record);
    let (drain, stop) = match judge(current.state, &store.incarnation(name)?) {
        Report::Accept { drain, stop } => (drain, stop),
        Report::Refuse { action, why } => return Ok(Answer::Refused(action, why)),
        Report::Last => {
            drop(_one_writer);
            return record_last(store, shared, name, p, now);
        }
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
        let node = p.instance.clone().map(|i| (i, o.step_seconds));
        shared.send(
            Change::Observed {
                job,
                loaded,
                node,
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
        let ended = match (p.hung, p.crashed) {
            (true, _) => Some(Ended::Hung),
            (false, true) => Some(Ended::Crashed),
            (false, false) => None,
        };
        store.stop_workers(name, k, instance, p.failure.as_deref(), ended, now)?;
        if p.hung {
            let hung = Change::Hung {
                job: name.to_string(),
                instance: instance.clone(),
                incarnation: k,
                at: now,
            };
            shared.send(hung, false);
        }
        if let Some(failure) = &p.failure
            && !finished
        {
            fail(store, shared, name, instance, failure, now)?;
        }
    }
    Ok(Answer::Done(Verdict {
        drain,
        stop,
        state: current.state,
        clamped: checked.clamped,
    }))
}

/// The last report of workers that ran when their job ended: the checkpoint they saved on
/// the way out is recorded (the work done only rises to hold it), and their workers are
/// marked stopped. The job's state, observations and events stay as they are.
fn record_last(
    store: &Store,
    shared: &dyn Sink,
    name: &str,
    p: &Progress,
    now: DateTime<Utc>,
) -> Result<Answer<Verdict>, ControllerError> {
    let _one_writer = shared.writers().lock().unwrap_or_else(|e| e.into_inner());
    let current = store
        .job(name)?
        .ok_or_else(|| ControllerError::UnknownJob(name.to_string()))?;
    let done = current.done_samples.max(p.checkpoint_samples);
    let checked = current
        .progress_after(done, p.checkpoint_samples, false, now)
        .map_err(|reason| ControllerError::Job {
            job: name.to_string(),
            reason,
        })?;
    store.set_progress(name, &checked.progress, now)?;
    if let (Some(instance), Some(k)) = (&p.instance, p.incarnation) {
        store.stop_workers(name, k, instance, None, None, now)?;
    }
    shared.send(
        Change::Progress {
            job: name.to_string(),
            progress: checked.progress,
        },
        true,
    );
    Ok(Answer::Done(Verdict {
        drain: false,
        stop: false,
        state: current.state,
        clamped: checked.clamped,
    }))
}

/// Whether `instance` failed its last [`FAILING_IN_A_ROW`] incarnations alone (its workers
/// crashed or hung while another node's were stopped as asked): then it is quarantined (the
/// change is sent) and the reason is returned. Asked at a start, when those incarnations ended.
fn failing(
    store: &Store,
    sink: &dyn Sink,
    job: &str,
    instance: &str,
    now: DateTime<Utc>,
) -> Result<Option<String>, ControllerError> {
    let n = store.failed_alone_in_a_row(job, instance, FAILING_IN_A_ROW)?;
    if n < FAILING_IN_A_ROW {
        return Ok(None);
    }
    let reason = format!(
        "its workers crashed or hung in {n} incarnations in a row while the other nodes' did not"
    );
    let change = Change::Failing {
        job: job.to_string(),
        instance: instance.to_string(),
        reason: reason.clone(),
        at: now,
    };
    sink.send(change, true);
    Ok(Some(reason))
}

/// The workers on `instance` failed for good: the job fails with how.
fn fail(
    store: &Store,
    shared: &dyn Sink,
    job: &str,
    instance: &str,
    failure: &str,
    now: DateTime<Utc>,
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

impl Sink for super::service::Shared {
    fn send(&self, change: Change, urgent: bool) {
        super::service::Shared::send(self, change, urgent);
    }

    fn writers(&self) -> &Mutex<()> {
        &self.progress
    }
}
