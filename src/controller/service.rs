//! The controller as a long-running service: the reconcile loop on a thread of its own, and
//! what it shares with the API.
//!
//! The API never waits on the cloud. A pass can take minutes when cloud calls are slow, so:
//! - reads (`GET /v1/jobs`) come from the [`View`] the loop publishes after each pass;
//! - writes (submit, cancel, progress) are made durable in the store by the API handler, then
//!   queued as a [`Request`] that the next pass takes into the controller's memory (and that
//!   patches the published view at once, so a client reads its own write);
//! - the loop, its store calls and the MILP run on their own thread and runtime, never on the
//!   API's async workers.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use tern_cloud::ProviderError;
use tokio::sync::{Notify, oneshot, watch};

use super::inputs::Request;
use super::lease::{Lease, LeaseError};
use super::metrics::Metrics;
use super::workload::Workload;
use super::{Controller, Requeue};
use crate::api::wire::JobStatus;
use crate::store::{InstanceRecord, JobRecord, JobState};

/// Where the loop reads the time: the wall clock, or a simulated cloud's virtual clock.
#[async_trait]
pub trait Clock: Send + Sync {
    /// The time now, asking the clock's source if it has one (a remote simulated cloud).
    async fn read(&self) -> Result<DateTime<Utc>, ProviderError>;
    /// The last time read, without waiting (for API handlers).
    fn last(&self) -> DateTime<Utc>;
}

/// Real time.
#[derive(Debug, Clone, Copy, Default)]
pub struct WallClock;

#[async_trait]
impl Clock for WallClock {
    async fn read(&self) -> Result<DateTime<Utc>, ProviderError> {
        Ok(Utc::now())
    }
    fn last(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// One job as the API shows it, plus what a progress reply needs.
#[derive(Debug, Clone)]
pub struct JobView {
    pub status: JobStatus,
    pub drain: bool,
    /// What fencing decides agents' starts and reports on.
    pub fleet: super::protocol::Fleet,
}

/// What the API reads: the jobs as of the last published pass, with the writes queued since.
#[derive(Debug, Clone, Default)]
pub struct View {
    pub jobs: BTreeMap<String, JobView>,
    /// The offers of the latest pass that asked the cloud, prices and availability as the
    /// controller sees them (`GET /v1/offers`).
    pub offers: Arc<Vec<tern_cloud::Offer>>,
}

fn status_of(
    j: &JobRecord,
    mine: &[&InstanceRecord],
    forecast: Option<crate::api::wire::JobForecast>,
    waiting: Option<crate::api::wire::Waiting>,
) -> JobStatus {
    JobStatus {
        waiting,
        forecast,
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
        instance_ids: mine.iter().map(|i| i.id.to_string()).collect(),
        run: j.spec.run.clone(),
    }
}

/// The open moves: the instances they launched wait for the workers they replace.
fn moving_intents(ctl: &Controller) -> std::collections::HashSet<tern_cloud::IntentId> {
    ctl.fleet
        .intents
        .values()
        .filter(|i| matches!(i.kind, tern_cloud::IntentKind::Migrate { .. }))
        .map(|i| i.id)
        .collect()
}

/// One job's fleet as fencing sees it, from the controller itself (the simulated workers ask
/// here; the API reads the same from the published view, built by [`fleet`]).
pub(super) fn fleet_of(ctl: &Controller, job: &str) -> super::protocol::Fleet {
    let mine: Vec<&InstanceRecord> = ctl
        .fleet
        .instances
        .of_job(job)
        .filter(|i| i.state != tern_cloud::InstanceState::Terminated)
        .collect();
    fleet(ctl, job, &mine, &moving_intents(ctl))
}

/// `job`'s fleet: `mine`, its instances that have not ended; `moving`, the open moves.
fn fleet(
    ctl: &Controller,
    job: &str,
    mine: &[&InstanceRecord],
    moving: &std::collections::HashSet<tern_cloud::IntentId>,
) -> super::protocol::Fleet {
    let live = mine
        .iter()
        .map(|i| super::fencing::Live {
            id: i.id.to_string(),
            draining: i.draining,
            moving_in: moving.contains(&i.intent),
            accelerator: i.offer.accelerator().map(|a| a.name.clone()),
            gpus: i.offer.accelerator_units().max(1),
        })
        .collect();
    let stopping = ctl
        .fleet
        .jobs
        .get(job)
        .is_some_and(|e| e.stopping.is_some());
    super::protocol::Fleet { live, stopping }
}

impl View {
    /// The controller's jobs and instances now; one walk over the fleet.
    pub fn of(ctl: &Controller) -> View {
        let mut by_job: BTreeMap<&str, Vec<&InstanceRecord>> = BTreeMap::new();
        for i in ctl
            .instances()
            .filter(|i| i.state != tern_cloud::InstanceState::Terminated)
        {
            by_job.entry(i.job.as_str()).or_default().push(i);
        }
        let moving = moving_intents(ctl);
        let jobs = ctl
            .jobs()
            .map(|j| {
                let mine = by_job.get(j.name()).map(Vec::as_slice).unwrap_or(&[]);
                let view = JobView {
                    status: status_of(
                        j,
                        mine,
                        super::basis::forecast_of(j, ctl.loaded(j.name()), mine),
                        ctl.waiting(j.name()),
                    ),
                    drain: j.drain_requested,
                    fleet: fleet(ctl, j.name(), mine, &moving),
                };
                (j.name().to_string(), view)
            })
            .collect();
        View {
            jobs,
            offers: ctl.latest_offers(),
        }
    }

    /// Show a queued request before the pass has taken it.
    fn patch(&mut self, request: &Request) {
        match request {
            Request::Submitted(a) => {
                let view = JobView {
                    status: status_of(
                        &a.record,
                        &[],
                        super::basis::forecast_of(&a.record, Some(&a.loaded), &[]),
                        None,
                    ),
                    drain: false,
                    fleet: super::protocol::Fleet::default(),
                };
                self.jobs.insert(a.record.name().to_string(), view);
            }
            Request::Cancelled { job, .. } => {
                if let Some(v) = self.jobs.get_mut(job) {
                    v.status.state = JobState::Cancelled.as_str().to_string();
                    v.status.waiting = None;
                    v.status.reason = Some(super::inputs::CANCELLED_BY_USER.to_string());
                }
            }
            Request::Progress { job, progress } => {
                if let Some(v) = self.jobs.get_mut(job) {
                    v.status.done_samples = progress.done_samples;
                    v.status.checkpoint_samples = progress.checkpoint_samples;
                    v.status.progress = progress.done_samples / v.status.total_samples.max(1.0);
                    v.drain &= !progress.clear_drain;
                }
            }
            Request::Failed { job, reason, .. } => {
                if let Some(v) = self.jobs.get_mut(job) {
                    v.status.state = JobState::Failed.as_str().to_string();
                    v.status.reason = Some(reason.clone());
                }
            }
            Request::Observed { .. }
            | Request::Started { .. }
            | Request::Hung { .. }
            | Request::Failing { .. }
            | Request::Limits(_) => {}
        }
    }
}

#[derive(Debug, Default)]
struct Inbox {
    requests: Vec<Request>,
    view: Arc<View>,
}

/// What the loop shares with the API handlers. Its lock is held for microseconds: a push, a
/// swap, or an `Arc` clone.
#[derive(Debug, Default)]
pub struct Shared {
    inbox: Mutex<Inbox>,
    wake: Notify,
    /// Serialises progress writes (read the job, merge, write) among API handlers.
    pub progress: Mutex<()>,
    /// The quota file in force, as the API reads it (cost reports' budgets, reloads).
    limits: Mutex<Arc<crate::limits::Limits>>,
}

impl Shared {
    pub fn new() -> Arc<Shared> {
        Arc::new(Shared::default())
    }

    fn inbox(&self) -> std::sync::MutexGuard<'_, Inbox> {
        self.inbox.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The quota file in force.
    pub fn limits(&self) -> Arc<crate::limits::Limits> {
        self.limits
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Replace the quota file with `text` (named `file` in errors) once it is checked: it
    /// parses, and its quotas name families and regions of the offers last read. A bad file
    /// leaves the one in force and says what is wrong.
    pub fn reload_limits(
        &self,
        text: &str,
        file: &str,
    ) -> Result<Arc<crate::limits::Limits>, crate::limits::LimitsError> {
        Ok(self.use_limits(self.checked_limits(text, file)?))
    }

    /// `text` as a quota file (named `file` in errors), checked as [`Self::reload_limits`]
    /// does, without putting it in force.
    pub fn checked_limits(
        &self,
        text: &str,
        file: &str,
    ) -> Result<crate::limits::Limits, crate::limits::LimitsError> {
        let limits = crate::limits::Limits::parse(text, file)?;
        let offers = self.view().offers.clone();
        if !offers.is_empty() {
            limits.check_against(&offers, file)?;
        }
        Ok(limits)
    }

    /// Put checked `limits` in force: the API's at once, the controller's at its next pass.
    pub fn use_limits(&self, limits: crate::limits::Limits) -> Arc<crate::limits::Limits> {
        let limits = Arc::new(limits);
        *self.limits.lock().unwrap_or_else(|e| e.into_inner()) = limits.clone();
        self.send(Request::Limits(limits.clone()), true);
        limits
    }

    /// The jobs as the API shows them now.
    pub fn view(&self) -> Arc<View> {
        self.inbox().view.clone()
    }

    /// Queue a request already written to the store and show it; `wake` runs a pass now
    /// (a submit, a cancel, a checkpoint taken, work done) instead of at the next period.
    pub fn send(&self, request: Request, wake: bool) {
        {
            let mut inbox = self.inbox();
            Arc::make_mut(&mut inbox.view).patch(&request);
            inbox.requests.push(request);
        }
        if wake {
            self.wake.notify_one();
        }
    }

    /// Wake the loop without a request (a checkpoint or a finished job needs a pass now).
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    fn take(&self) -> Vec<Request> {
        std::mem::take(&mut self.inbox().requests)
    }

    /// Publish a view built from the controller, with the requests queued meanwhile on top.
    fn publish(&self, mut view: View) {
        let mut inbox = self.inbox();
        for r in &inbox.requests {
            view.patch(r);
        }
        inbox.view = Arc::new(view);
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error(transparent)]
    Lease(#[from] LeaseError),
    /// The state store was deleted, replaced or emptied under the controller.
    #[error("{0}; stopping so that nothing acts without the state that accounts for the fleet")]
    Store(#[source] crate::store::StoreError),
    #[error("the reconcile thread stopped unexpectedly")]
    Thread,
    #[error("starting the reconcile thread: {0}")]
    Spawn(#[source] std::io::Error),
}

/// How the loop runs.
#[derive(Debug, Clone)]
pub struct ServiceConfig {
    /// Between periodic passes (a request or a retry comes sooner).
    pub period: Duration,
    /// Which jobs the simulated cloud's workers move forward (from the forecast).
    pub workers: Workers,
}

/// Who moves a job's progress: real agents' reports, or simulated workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workers {
    /// Only agents' reports (a real cloud, or agents started by hand).
    Agents,
    /// Simulated workers for every job.
    Simulated,
    /// Real agents for the jobs that say what they run (`[run]`; `--local-agents`), simulated
    /// workers for the rest.
    SimulatedUnlessRun,
}

/// The reconcile loop and what it owns.
pub struct Service {
    controller: Controller,
    shared: Arc<Shared>,
    clock: Arc<dyn Clock>,
    metrics: Arc<Metrics>,
    leadership: Option<Lease>,
    workload: Option<Workload>,
    period: Duration,
    last: Option<DateTime<Utc>>,
}

impl std::fmt::Debug for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Service")
            .field("controller", &self.controller)
            .field("period", &self.period)
            .finish_non_exhaustive()
    }
}

impl Service {
    pub fn new(
        controller: Controller,
        shared: Arc<Shared>,
        clock: Arc<dyn Clock>,
        metrics: Arc<Metrics>,
        leadership: Option<Lease>,
        config: &ServiceConfig,
    ) -> Service {
        shared.publish(View::of(&controller));
        *shared.limits.lock().unwrap_or_else(|e| e.into_inner()) =
            controller.config().limits.clone();
        Service {
            controller,
            shared,
            clock,
            metrics,
            leadership,
            workload: match config.workers {
                Workers::Agents => None,
                Workers::Simulated => Some(Workload::new()),
                Workers::SimulatedUnlessRun => Some(Workload::new().sparing_jobs_with_run()),
            },
            period: config.period,
            last: None,
        }
    }

    /// One turn of the loop: check the lease, take the queued requests, run a pass, move the
    /// simulated workers, refresh metrics and publish. Returns how long to wait for the next.
    pub async fn turn(&mut self) -> Result<Duration, ServiceError> {
        // Fail-stop: never act without a valid lease (a standby may already lead). The lease's
        // own thread renews it; its store refuses the writes of a pass the loss interrupts.
        self.check_lease()?;
        // Fail-stop too when the store is no longer the one opened (a deleted or swapped
        // state file): a pass on an empty copy would see the fleet as unaccounted for.
        match self.controller.store().verify() {
            Err(e @ crate::store::StoreError::Replaced(_)) => return Err(ServiceError::Store(e)),
            Err(e) => tracing::warn!("checking the state store: {e}"),
            Ok(()) => {}
        }
        let now = match self.clock.read().await {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!("clock unreachable: {e}");
                return Ok(self.period);
            }
        };
        self.take_requests();
        let started = Instant::now();
        let outcome = self.controller.pass(now).await;
        let dt = self
            .last
            .and_then(|l| (now - l).to_std().ok())
            .unwrap_or_default();
        self.last = Some(now);
        if let Some(w) = &mut self.workload
            && let Err(e) = w.step(&mut self.controller, dt, now)
        {
            tracing::error!("simulated progress: {e}");
        }
        if let Err(e) = self
            .metrics
            .update(&self.controller, started.elapsed(), now)
        {
            tracing::error!("metrics: {e}");
        }
        self.check_lease()?;
        self.take_requests();
        self.shared.publish(View::of(&self.controller));
        Ok(match outcome {
            Ok(Requeue::After(d)) => d.min(self.period),
            Ok(Requeue::Periodic) => self.period,
            Err(e) => {
                tracing::error!(retryable = e.is_retryable(), "reconcile pass failed: {e}");
                if e.is_retryable() {
                    self.period
                } else {
                    self.period * 5
                }
            }
        })
    }

    fn check_lease(&self) -> Result<(), LeaseError> {
        self.leadership.as_ref().map_or(Ok(()), Lease::check)
    }

    fn take_requests(&mut self) {
        for request in self.shared.take() {
            let job = request.job().unwrap_or("").to_string();
            if let Err(e) = self.controller.apply(request) {
                tracing::error!(job, "applying a request: {e}");
            }
        }
    }

    /// Turn until `stop` says so (or the lease is lost), waking early on requests.
    pub async fn run(mut self, mut stop: watch::Receiver<bool>) -> Result<(), ServiceError> {
        let shared = self.shared.clone();
        loop {
            let wait = self.turn().await?;
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = shared.wake.notified() => {}
                _ = stop.changed() => {
                    if let Some(lease) = self.leadership.take() {
                        lease.release();
                    }
                    return Ok(());
                }
            }
        }
    }

    /// Run on a thread of its own with a single-threaded runtime: store calls and the MILP
    /// never occupy the API's workers.
    pub fn spawn(self) -> Result<Running, ServiceError> {
        let (stop, stop_rx) = watch::channel(false);
        let (done_tx, done) = oneshot::channel();
        let thread = std::thread::Builder::new()
            .name("tern-reconcile".into())
            .spawn(move || {
                let result = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(ServiceError::Spawn)
                    .and_then(|rt| rt.block_on(self.run(stop_rx)));
                let _ = done_tx.send(result);
            })
            .map_err(ServiceError::Spawn)?;
        Ok(Running { stop, done, thread })
    }
}

/// A service running on its thread.
#[derive(Debug)]
pub struct Running {
    stop: watch::Sender<bool>,
    done: oneshot::Receiver<Result<(), ServiceError>>,
    thread: std::thread::JoinHandle<()>,
}

impl Running {
    /// Resolves when the loop ends by itself (the lease was lost, or the thread died).
    pub async fn finished(&mut self) -> Result<(), ServiceError> {
        (&mut self.done).await.unwrap_or(Err(ServiceError::Thread))
    }

    /// Ask the loop to stop after its current turn, and wait for it.
    pub fn stop(self) -> Result<(), ServiceError> {
        let _ = self.stop.send(true);
        self.thread.join().map_err(|_| ServiceError::Thread)?;
        Ok(())
    }
}
