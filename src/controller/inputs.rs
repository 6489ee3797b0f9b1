//! What comes into the controller from outside a pass: submitted and cancelled jobs, workers'
//! progress and measured steps. Each is checked and written to the store by its sender
//! first, then applied to the controller's memory as a [`Request`]: directly
//! (`tern demo`, tests), or through the service's inbox at the start of the next pass, so an
//! API call never waits for a pass.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use tern_cloud::{JobSpec, Observation};

use super::events::Event;
use super::{
    Controller, ControllerError, JobEntry, Result, fmt_workers, hours, model_for, observed,
};
use crate::jobs::{LoadedJob, check_new};
use crate::store::{JobRecord, JobState, Progress, Store};

/// Why a cancel happened, as the job's reason says.
pub const CANCELLED_BY_USER: &str = "cancelled by the user";

/// A job that passed validation and forecasting, not yet written.
#[derive(Debug, Clone)]
pub struct Admitted {
    pub record: JobRecord,
    pub loaded: Arc<LoadedJob>,
}

/// Check that `spec` is a sensible new job (known accelerators, a deadline ahead, no profile
/// the controller would have to read from its own disk) and can be forecast. CPU-bound (a
/// forecaster fit): callers on an async runtime run it on a blocking thread. Writes nothing.
pub fn admit(spec: JobSpec, now: DateTime<Utc>) -> Result<Admitted> {
    let refused = |reason: String| ControllerError::Job {
        job: spec.name.clone(),
        reason,
    };
    check_new(&spec, now, &spec.name).map_err(|e| refused(e.to_string()))?;
    let loaded = model_for(&spec, now).map_err(refused)?;
    Ok(Admitted {
        record: JobRecord::new(spec, now),
        loaded,
    })
}

/// Refit `record`'s forecast with the stored observations plus `o`; fails (writing nothing)
/// when the observation makes the job impossible to forecast.
pub fn refit_with(store: &Store, record: &JobRecord, o: &Observation) -> Result<Arc<LoadedJob>> {
    let mut spec = record.spec.clone();
    o.check().map_err(|reason| ControllerError::Job {
        job: o.job.clone(),
        reason,
    })?;
    spec.observations.extend(
        store
            .observations(&o.job)?
            .iter()
            .filter(|s| s.check().is_ok())
            .map(observed),
    );
    spec.observations.push(observed(o));
    model_for(&spec, record.submitted_at).map_err(|reason| ControllerError::Job {
        job: o.job.clone(),
        reason,
    })
}

/// A change already durable in the store, for the controller's memory.
#[derive(Debug, Clone)]
pub enum Request {
    Submitted(Box<Admitted>),
    Cancelled {
        job: String,
        at: DateTime<Utc>,
    },
    /// The training failed for good on a worker; `reason` says how.
    Failed {
        job: String,
        reason: String,
        at: DateTime<Utc>,
    },
    /// An agent started workers (already in the store): only logged as an event.
    Started {
        job: String,
        instance: String,
        incarnation: u64,
        opened: bool,
        at: DateTime<Utc>,
    },
    Progress {
        job: String,
        progress: Progress,
    },
    /// An agent stopped workers that made no progress for its hang timeout (already in the
    /// store as stopped): logged as an event; the agent restarts them.
    Hung {
        job: String,
        instance: String,
        incarnation: u64,
        at: DateTime<Utc>,
    },
    Observed {
        job: String,
        loaded: Arc<LoadedJob>,
        /// The node that measured the step, and the step: for the straggler watch.
        node: Option<(String, f64)>,
        at: DateTime<Utc>,
    },
    /// The workers on `instance` crashed or hung in the last incarnations in a row (already in
    /// the store): the node is quarantined.
    Failing {
        job: String,
        instance: String,
        reason: String,
        at: DateTime<Utc>,
    },
    /// A new quota file, checked (SIGHUP or `PUT /v1/quotas`).
    Limits(Arc<crate::limits::Limits>),
}

impl Request {
    /// The job the request is about; `None` for the quota file.
    pub fn job(&self) -> Option<&str> {
        match self {
            Request::Submitted(a) => Some(a.record.name()),
            Request::Cancelled { job, .. }
            | Request::Failed { job, .. }
            | Request::Started { job, .. }
            | Request::Hung { job, .. }
            | Request::Failing { job, .. }
            | Request::Progress { job, .. }
            | Request::Observed { job, .. } => Some(job),
            Request::Limits(_) => None,
        }
    }
}

impl Controller {
    /// Accept a job. Validates that it can be forecast; writes nothing when it cannot.
    pub fn submit(&mut self, spec: JobSpec, now: DateTime<Utc>) -> Result<()> {
        let admitted = admit(spec, now)?;
        self.store.insert_job(&admitted.record, now)?;
        self.apply(Request::Submitted(Box::new(admitted)))
    }

    /// Stop a job: its instances are terminated on the next pass.
    pub fn cancel(&mut self, name: &str, now: DateTime<Utc>) -> Result<()> {
        self.known(name)?;
        if self.store.cancel_job(name, CANCELLED_BY_USER, now)? {
            self.apply(Request::Cancelled {
                job: name.to_string(),
                at: now,
            })?;
        }
        Ok(())
    }

    /// A measured step from an agent: the job's forecast refitted with it, then stored.
    pub fn observe(&mut self, o: &Observation) -> Result<()> {
        let record = self.known(&o.job)?.clone();
        o.check().map_err(|reason| ControllerError::Job {
            job: o.job.clone(),
            reason,
        })?;
        let loaded = refit_with(&self.store, &record, o)?;
        self.store.add_observation(o)?;
        self.apply(Request::Observed {
            job: o.job.clone(),
            loaded,
            node: None,
            at: o.at,
        })
    }

    /// Progress as the workers (agent) report it: samples done and safe in a checkpoint.
    /// `checkpointed` clears a drain request (the checkpoint it asked for is taken).
    pub fn report_progress(
        &mut self,
        job: &str,
        done: f64,
        checkpoint: f64,
        checkpointed: bool,
        now: DateTime<Utc>,
    ) -> Result<()> {
        let record = self.known(job)?;
        if record.state.is_final() {
            return Ok(());
        }
        let progress = record
            .progress_after(done, checkpoint, checkpointed, now)
            .map_err(|reason| ControllerError::Job {
                job: job.to_string(),
                reason,
            })?
            .progress;
        self.store.set_progress(job, &progress, now)?;
        self.apply(Request::Progress {
            job: job.to_string(),
            progress,
        })
    }

    fn known(&self, name: &str) -> Result<&JobRecord> {
        self.job(name)
            .ok_or_else(|| ControllerError::UnknownJob(name.to_string()))
    }

    /// Take a change that is already in the store into memory.
    pub fn apply(&mut self, request: Request) -> Result<()> {
        match request {
            Request::Submitted(a) => self.adopt_job(*a),
            Request::Limits(limits) => {
                self.set_limits(limits);
                Ok(())
            }
            Request::Cancelled { job, at } => self.cancelled(&job, at),
            Request::Failed { job, reason, at } => self.failed(&job, reason, at),
            Request::Started {
                job,
                instance,
                incarnation,
                opened,
                at,
            } => self.emit(
                at,
                Event::WorkersStarted {
                    job,
                    instance,
                    incarnation,
                    opened,
                },
            ),
            Request::Hung {
                job,
                instance,
                incarnation,
                at,
            } => self.emit(
                at,
                Event::Hung {
                    job,
                    instance,
                    incarnation,
                },
            ),
            Request::Progress { job, progress } => {
                // An ended job takes its workers' last report too (the checkpoint they saved
                // on the way out), as the store did.
                if let Some(e) = self.fleet.jobs.get_mut(&job) {
                    if e.record.state.is_final() {
                        let r = &mut e.record;
                        r.done_samples = r.done_samples.max(progress.done_samples);
                        if progress.checkpoint_samples > r.checkpoint_samples {
                            r.checkpoint_samples = progress.checkpoint_samples;
                            r.checkpoint_at = progress.checkpoint_at;
                        }
                    } else {
                        e.record.apply_progress(&progress);
                        e.dirty |= e.record.work_done();
                    }
                }
                Ok(())
            }
            Request::Observed {
                job,
                loaded,
                node,
                at,
            } => {
                let old = self.fleet.jobs.get(&job).and_then(|e| e.loaded.clone());
                self.basis_changed(&job, old.as_deref(), &loaded, at)?;
                if let Some(e) = self.fleet.jobs.get_mut(&job) {
                    e.loaded = Some(loaded);
                }
                match node {
                    Some((instance, step_s)) => self.watch_step(&job, &instance, step_s, at),
                    None => Ok(()),
                }
            }
            Request::Failing {
                job,
                instance,
                reason,
                at,
            } => self.quarantine(&job, &instance, reason, at),
        }
    }

    fn adopt_job(&mut self, a: Admitted) -> Result<()> {
        let r = &a.record;
        let now = r.submitted_at;
        self.emit(
            now,
            Event::Submitted {
                job: r.name().to_string(),
                samples: r.total_samples,
                workers: fmt_workers(&r.spec),
                accelerators: r.spec.accelerators.clone(),
                due_in_h: r.deadline_at.map(|d| hours(d - now)),
            },
        )?;
        self.fleet.jobs.insert(
            r.name().to_string(),
            JobEntry::new(a.record, Some(a.loaded)),
        );
        Ok(())
    }

    fn failed(&mut self, name: &str, reason: String, at: DateTime<Utc>) -> Result<()> {
        let event = Event::Failed {
            job: name.to_string(),
            reason: reason.clone(),
        };
        self.end(name, JobState::Failed, reason, at, event)
    }

    fn cancelled(&mut self, name: &str, at: DateTime<Utc>) -> Result<()> {
        let event = Event::Cancelled {
            job: name.to_string(),
        };
        // The cancel is in the store already, and the store keeps a cancel against any pass
        // (`Store::update_job`): a job this memory ended a moment before (its finish written
        // after the cancel, and so refused) is cancelled here too, as the store says.
        if let Some(entry) = self.fleet.jobs.get_mut(name)
            && entry.record.state.is_final()
            && entry.record.state != JobState::Cancelled
        {
            entry.record.state = JobState::Cancelled;
            entry.record.reason = Some(CANCELLED_BY_USER.into());
            entry.dirty = true;
            return self.emit(at, event);
        }
        self.end(
            name,
            JobState::Cancelled,
            CANCELLED_BY_USER.into(),
            at,
            event,
        )
    }

    /// End a job that has not ended (its instances are released on the next pass).
    fn end(
        &mut self,
        name: &str,
        state: JobState,
        reason: String,
        at: DateTime<Utc>,
        event: Event,
    ) -> Result<()> {
        let Some(entry) = self.fleet.jobs.get_mut(name) else {
            return Ok(());
        };
        if entry.record.state.is_final() {
            return Ok(());
        }
        entry.record.state = state;
        entry.record.reason = Some(reason);
        entry.record.finished_at = Some(at);
        entry.dirty = true;
        self.emit(at, event)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::controller::{Controller, ControllerConfig};
    use crate::store::Store;

    /// A pass ended the job in memory (finished) and the API's cancel reached the store before
    /// the pass wrote it: the store keeps the cancel, so memory, and what `tern status` shows,
    /// must say cancelled too (the HA soak once saw "finished" after an acknowledged cancel).
    #[test]
    fn a_cancel_the_store_kept_wins_over_a_finish_only_in_memory() {
        let store = Arc::new(Store::in_memory().expect("store"));
        let sim = crate::controller::testkit::sim(Vec::new());
        let config =
            ControllerConfig::new("test-owner", vec![tern_cloud::Region::new("us-west-2")]);
        let mut ctl = Controller::open(store.clone(), sim, config).expect("open");
        let now = crate::controller::testkit::start();
        ctl.submit(tern_cloud::testkit::spec("j").build(), now)
            .expect("submit");
        let entry = ctl.fleet.jobs.get_mut("j").expect("job");
        entry.record.state = JobState::Finished;
        entry.dirty = true;
        assert!(
            store
                .cancel_job("j", CANCELLED_BY_USER, now)
                .expect("cancel")
        );
        ctl.apply(Request::Cancelled {
            job: "j".into(),
            at: now,
        })
        .expect("apply");
        let record = ctl.job("j").expect("job").clone();
        assert_eq!(record.state, JobState::Cancelled);
        store.update_job(&record, now).expect("write");
        let stored = store.job("j").expect("read").expect("job");
        assert_eq!(stored.state, JobState::Cancelled);
    }
}
