//! The reconcile loop: diff each job's desired fleet against what runs, and act through
//! persisted intents.
//!
//! One [`Controller::pass`] runs the phases in order, one module each:
//! 1. [`notices`]: interruption notices start the job's drain and take the node out of its fleet;
//! 2. [`sync`]: the cloud's list of our instances against the store's (adopt instances of open
//!    intents, end what is gone, time out launches that never came up, collect leaks);
//! 3. [`intents`]: resume every open intent (launch, terminate, migrate, resize);
//! 4. [`provision`]: triage the jobs, release what finished or cancelled jobs hold, and place
//!    jobs that hold nothing with one MILP over all of them;
//! 5. [`disruption`]: replace lost nodes, resize elastic jobs, migrate to cheaper capacity.
//!
//! Every action is an [`Intent`] written to the [`Store`] before the cloud is called; launch
//! requests carry the idempotency key derived from the intent, so a controller that crashes
//! anywhere and restarts repeats the same requests and the cloud answers with what it already
//! did. What the controller decides comes from `tern_policies` (the wait rule, the move rule);
//! what it reports is an [`Event`] ([`events`]). Requests from the API ([`inputs`]) reach a pass
//! through the [`service`]'s inbox; the API reads the view a pass publishes, never the
//! controller itself.

mod basis;
mod budget;
mod carry_out;
mod decide;
mod disruption;
pub mod events;
pub mod explain;
pub mod fencing;
pub mod health;
pub mod inputs;
mod instances;
mod intents;
pub mod lease;
pub mod metrics;
mod notices;
mod policy;
pub mod probe;
pub mod protocol;
mod provision;
mod quotas;
mod room;
pub mod service;
mod spend;
mod sync;
mod view;
pub mod workload;
pub mod world;

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasher, Hasher};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use tern_cloud::{InstanceId, Intent, IntentId, JobSpec, Offer, Provider, ProviderError, Region};
use tern_plan::{PlanOptions, ThroughputModel};
use tern_policies::fleet;

use crate::jobs::LoadedJob;
use crate::store::{InstanceRecord, JobRecord, Store, StoreError};

pub use events::{Event, WaitReason};
pub use inputs::Admitted;
pub use policy::LOOKBACK_TICKS as POLICY_LOOKBACK_TICKS;

#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Provider(#[from] ProviderError),
    #[error("job {job}: {reason}")]
    Job { job: String, reason: String },
    #[error("unknown job {0}")]
    UnknownJob(String),
}

impl ControllerError {
    pub fn is_retryable(&self) -> bool {
        match self {
            ControllerError::Store(e) => e.is_retryable(),
            ControllerError::Provider(e) => e.is_retryable(),
            _ => false,
        }
    }

    /// Whether the error ends the whole pass rather than one job's step: a deposed leader's
    /// fence or a replaced store means nothing more may be written for any job.
    pub fn ends_pass(&self) -> bool {
        matches!(
            self,
            ControllerError::Store(StoreError::Fenced(_) | StoreError::Replaced(_))
        )
    }

    /// The label a failed job step is counted under (`tern_job_step_errors`).
    fn kind(&self) -> &'static str {
        match self {
            ControllerError::Store(_) => "store",
            ControllerError::Provider(e) => e.kind(),
            ControllerError::Job { .. } | ControllerError::UnknownJob(_) => "job",
        }
    }
}

type Result<T> = std::result::Result<T, ControllerError>;

/// Safety constants (DESIGN.md §5, after Karpenter) and policy knobs.
#[derive(Debug, Clone)]
pub struct ControllerConfig {
    /// Value of the `tern:owner` tag; the leak collector touches only these instances.
    pub owner: String,
    /// Regions whose offers the planner sees.
    pub regions: Vec<Region>,
    /// How long an offer that failed with a capacity error is avoided after one failure;
    /// each further failure within 2 h doubles it, up to an hour.
    pub capacity_memory: Duration,
    /// A launched instance not running after this is terminated and its offer avoided.
    pub launch_timeout: Duration,
    /// An owned instance nobody accounts for is terminated after this grace.
    pub leak_grace: Duration,
    /// Collect instances with our owner tag but another store's cluster id (or none) like our
    /// own leaks. Off by default: such instances are reported, never terminated.
    pub adopt_foreign: bool,
    /// Fraction of a job's workers one migration may move at once (at least one).
    pub disruption_budget: f64,
    /// How often a running job is checked for a cheaper move.
    pub migrate_check: Duration,
    /// Read offers (prices, capacity) at least this often while any job is active; `None`:
    /// once per policy tick. A spot price that moved re-checks every running job for a move.
    pub offers_every: Option<Duration>,
    /// How often an unplaced job is planned again when nothing happened.
    pub replan: Duration,
    /// Tick of the deadline policy: spot availability is sampled once per tick, and a job's
    /// deadline, work and restart are counted in ticks (`controller::policy`).
    pub policy_tick: Duration,
    /// Treat forecasts as exact (pessimistic = expected). Only the closed-loop replay sets it:
    /// there the simulated workers run at exactly the expected speed, as the replay's job does.
    pub exact_forecast: bool,
    /// Default bounds of a cold-start probe (a spec's `[probe]` overrides them).
    pub probe: probe::ProbeBounds,
    /// The longest a pass may follow the one before (the service's period, in the clock's
    /// time): a probe ends at the last pass before its bound.
    pub pass_gap: Duration,
    /// The base of every plan; the quota file ([`ControllerConfig::limits`]) adds to it.
    pub plan: PlanOptions,
    /// The quota file: quotas, team budgets and shares, fairness (`tern controller --quota`;
    /// replaced by a reload).
    pub limits: Arc<crate::limits::Limits>,
    /// `--fairness`, which wins over the file's.
    pub fairness: Option<f64>,
    /// How long before a budget runs out its jobs are asked to checkpoint and stop.
    pub budget_lead: Duration,
    /// How long a quota the cloud refused a launch with is kept (the quotas the cloud lists
    /// are read again every hour).
    pub quota_memory: Duration,
}

impl ControllerConfig {
    pub fn new(owner: impl Into<String>, regions: Vec<Region>) -> ControllerConfig {
        ControllerConfig {
            owner: owner.into(),
            regions,
            capacity_memory: Duration::from_secs(180),
            launch_timeout: Duration::from_secs(300),
            leak_grace: Duration::from_secs(30),
            adopt_foreign: false,
            disruption_budget: fleet::DISRUPTION_BUDGET,
            migrate_check: Duration::from_secs(1800),
            offers_every: None,
            replan: Duration::from_secs(300),
            policy_tick: Duration::from_secs(300),
            exact_forecast: false,
            probe: probe::ProbeBounds::default(),
            pass_gap: Duration::from_secs(10),
            plan: PlanOptions {
                time_limit: Duration::from_secs(2),
                ..PlanOptions::default()
            },
            limits: Arc::default(),
            fairness: None,
            budget_lead: Duration::from_secs(120),
            quota_memory: Duration::from_secs(3600),
        }
    }
}

/// Counters the metrics endpoint, the benchmark and the closed-loop replay read. The decision
/// counts are derived from the events emitted ([`events::Tally`]); passes, the last pass's
/// time and cloud API errors are the loop's own measures.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    pub passes: u64,
    pub notices: u64,
    pub launches: u64,
    pub terminations: u64,
    pub leaks_collected: u64,
    pub migrations: u64,
    /// Cloud API errors by [`ProviderError::kind`].
    pub cloud_errors: BTreeMap<&'static str, u64>,
    /// Job steps that failed and were left to their job ([`Controller::contain`]), by kind.
    pub job_errors: BTreeMap<&'static str, u64>,
    pub last_pass: Duration,
}

/// What one pass asks of the loop: when to run the next one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Requeue {
    /// Nothing pending beyond the periodic check.
    Periodic,
    /// The cloud throttled us or an intent is waiting: come back after this long.
    After(Duration),
}

#[derive(Debug)]
struct JobEntry {
    record: JobRecord,
    /// The forecaster-backed model; `None` when the spec cannot be forecast (reason kept).
    loaded: Option<Arc<LoadedJob>>,
    last_plan: Option<DateTime<Utc>>,
    last_migrate_check: Option<DateTime<Utc>>,
    /// Set by events (notice, loss, capacity error) to reconcile now, not at the next period.
    dirty: bool,
    /// The job's current wait: reported once as an event, its text kept up to date.
    waiting: Option<events::Current>,
    /// `record.planned_cost` was set in memory and not written yet (the next write of the
    /// record carries it; a job that waits writes it then).
    estimate_unsaved: bool,
    /// The probe ends at this pass, for this reason (set and taken within one pass).
    ending_probe: Option<probe::Ended>,
    /// Why a job nobody measured was planned without a probe (for the plan's event).
    cold_plan: Option<String>,
    /// Whether a probe of a second accelerator was weighed for this job (once per process).
    second_probe_weighed: bool,
    /// Stopping because a budget runs out ([`budget`]).
    stopping: Option<budget::Stop>,
    /// Its nodes' measured steps, for finding a straggler ([`health`]).
    watch: health::Watch,
}

/// What the controller manages: its jobs, their live instances and the open intents.
#[derive(Debug, Default)]
struct Fleet {
    jobs: BTreeMap<String, JobEntry>,
    instances: instances::Instances,
    intents: BTreeMap<IntentId, Intent>,
}

/// What the controller has learned from the cloud and keeps in memory only (a restart starts
/// it empty; ARCHITECTURE.md says what that costs).
#[derive(Debug, Default)]
struct CloudMemory {
    /// Offer key → avoid until.
    capacity_errors: HashMap<String, DateTime<Utc>>,
    /// Offer key → strikes in a row and when the last came (`tern_policies::capacity`).
    strikes: HashMap<String, (u32, DateTime<Utc>)>,
    /// Owned instances nobody accounts for → first seen.
    unaccounted: HashMap<InstanceId, DateTime<Utc>>,
    /// Instances with our owner tag but another store's cluster id, as last listed: reported
    /// (once each), never collected unless `adopt_foreign`.
    foreign: HashMap<InstanceId, Option<String>>,
    /// Instance type → zone → on-demand $/h, from the latest offers. By type first: the
    /// policy asks for a type's cheapest zone once per job and pass.
    on_demand: HashMap<String, HashMap<String, f64>>,
    /// Offer key → spot $/h last seen: a change is an event that re-checks running jobs for a
    /// cheaper place at once.
    spot_prices: HashMap<String, f64>,
    /// The latest offers of every region, as `GET /v1/offers` shows them, and when read.
    offers: Arc<Vec<Offer>>,
    offers_at: Option<DateTime<Utc>>,
    /// Quotas the cloud refused a launch with, until when they are kept.
    refused_quotas: Vec<(tern_plan::Quota, DateTime<Utc>)>,
    /// Quotas the cloud lists, by region, and when they were read.
    listed_quotas: BTreeMap<String, Vec<tern_plan::Quota>>,
    quotas_read_at: Option<DateTime<Utc>>,
}

/// Intent ids: per-process randomness plus a counter, so a restarted controller never reuses
/// one.
#[derive(Debug)]
struct IntentIds {
    salt: u64,
    seq: u64,
}

/// The controller: in-memory working copy of the store plus the provider it acts through.
pub struct Controller {
    store: Arc<Store>,
    provider: Arc<dyn Provider>,
    config: ControllerConfig,
    fleet: Fleet,
    cloud: CloudMemory,
    ids: IntentIds,
    /// Passes, the last pass's time and cloud errors (the rest of [`Stats`] is the tally).
    stats: Stats,
    tally: Mutex<events::Tally>,
    /// Spot availability per pool and tick, what the deadline policy learns from.
    pools: policy::Pools,
    /// Offer key → the last price persisted for it (`prices` table): only changes are written.
    prices: BTreeMap<String, f64>,
    /// The last policy tick sampled.
    sampled: Option<i64>,
    /// The deadline policy's objects (learned counts, value table, histories), one per class
    /// of jobs it cannot tell apart.
    policies: policy::PolicyCache,
    /// Dollars each job has spent, kept while a budget is set.
    spend: spend::Spend,
    /// What the limits leave this pass.
    room: room::Room,
    /// Budgets warned about (`job NAME`, `team NAME`), so each warns once.
    warned: std::collections::HashSet<String>,
    /// Teams whose budget ran out, with that budget: held until it is raised.
    exhausted: BTreeMap<String, f64>,
}

impl std::fmt::Debug for Controller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Controller")
            .field("owner", &self.config.owner)
            .field("jobs", &self.fleet.jobs.len())
            .field("instances", &self.fleet.instances.len())
            .field("intents", &self.fleet.intents.len())
            .finish()
    }
}

fn model_for(spec: &JobSpec, at: DateTime<Utc>) -> std::result::Result<Arc<LoadedJob>, String> {
    LoadedJob::from_spec(spec.clone(), None, &spec.name, at)
        .map(Arc::new)
        .map_err(|e| e.to_string())
}

fn observed(o: &tern_cloud::Observation) -> tern_cloud::ObservedStep {
    tern_cloud::ObservedStep {
        accelerator: o.accelerator.clone(),
        gpus: o.gpus,
        nodes: o.nodes,
        local_batch: o.local_batch,
        step_seconds: o.step_seconds,
        sync_seconds: o.sync_seconds,
    }
}

/// A model whose pessimistic throughput is its expected one.
#[derive(Debug)]
struct Exact(Arc<dyn ThroughputModel>);

impl ThroughputModel for Exact {
    fn throughput(
        &self,
        accelerator: &str,
        per_node: u32,
        nodes: u32,
    ) -> Option<tern_plan::Throughput> {
        self.0
            .throughput(accelerator, per_node, nodes)
            .map(|t| tern_plan::Throughput {
                pessimistic: t.expected,
                ..t
            })
    }
}

fn delta(d: Duration) -> TimeDelta {
    TimeDelta::from_std(d).unwrap_or(TimeDelta::MAX)
}

fn hours(d: TimeDelta) -> f64 {
    d.num_milliseconds() as f64 / 3_600_000.0
}

impl JobEntry {
    fn new(record: JobRecord, loaded: Option<Arc<LoadedJob>>) -> JobEntry {
        JobEntry {
            record,
            loaded,
            last_plan: None,
            last_migrate_check: None,
            dirty: true,
            waiting: None,
            estimate_unsaved: false,
            ending_probe: None,
            cold_plan: None,
            second_probe_weighed: false,
            stopping: None,
            watch: health::Watch::default(),
        }
    }
}

impl Controller {
    /// Rebuild the controller from the store: jobs, open intents and live instances.
    pub fn open(
        store: Arc<Store>,
        provider: Arc<dyn Provider>,
        config: ControllerConfig,
    ) -> Result<Controller> {
        let snapshot = store.load()?;
        let mut jobs = BTreeMap::new();
        for record in snapshot.jobs {
            let loaded = if record.state.is_final() {
                None
            } else {
                // Observations the agents reported refit the model on every restart; one
                // that an older tern stored without checking is skipped, not fatal.
                let mut spec = record.spec.clone();
                spec.observations.extend(
                    store
                        .observations(record.name())?
                        .iter()
                        .filter(|o| o.check().is_ok())
                        .map(observed),
                );
                model_for(&spec, record.submitted_at).ok()
            };
            jobs.insert(record.name().to_string(), JobEntry::new(record, loaded));
        }
        let fleet = Fleet {
            jobs,
            instances: snapshot.instances.into_iter().collect(),
            intents: snapshot.intents.into_iter().map(|i| (i.id, i)).collect(),
        };
        let salt = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish();
        let pools = policy::Pools::from_samples(store.pool_samples_since(i64::MIN)?);
        let prices = store.latest_prices()?;
        Ok(Controller {
            store,
            provider,
            config,
            fleet,
            cloud: CloudMemory::default(),
            ids: IntentIds { salt, seq: 0 },
            stats: Stats::default(),
            tally: Mutex::new(events::Tally::default()),
            pools,
            prices,
            sampled: None,
            policies: policy::PolicyCache::default(),
            spend: spend::Spend::default(),
            room: room::Room::default(),
            warned: Default::default(),
            exhausted: BTreeMap::new(),
        })
    }

    pub fn stats(&self) -> Stats {
        let tally = self.tally.lock().unwrap_or_else(|e| e.into_inner());
        Stats {
            notices: tally.notices,
            launches: tally.launches,
            terminations: tally.terminations,
            leaks_collected: tally.leaks_collected,
            migrations: tally.migrations,
            ..self.stats.clone()
        }
    }

    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    pub fn config(&self) -> &ControllerConfig {
        &self.config
    }

    pub fn job(&self, name: &str) -> Option<&JobRecord> {
        self.fleet.jobs.get(name).map(|e| &e.record)
    }

    pub fn jobs(&self) -> impl Iterator<Item = &JobRecord> {
        self.fleet.jobs.values().map(|e| &e.record)
    }

    /// Why `name` waits now and since when, as the last pass saw it; `None` once it runs.
    pub fn waiting(&self, name: &str) -> Option<crate::api::wire::Waiting> {
        let e = self.fleet.jobs.get(name)?;
        let w = e.waiting.as_ref().filter(|_| !e.record.state.is_final())?;
        Some(crate::api::wire::Waiting {
            reason: w.reason.clone(),
            since: w.since,
        })
    }

    /// Live (not ended) instances the controller tracks.
    /// The offers of the latest pass that asked the cloud (empty before the first).
    pub fn latest_offers(&self) -> Arc<Vec<Offer>> {
        self.cloud.offers.clone()
    }

    pub fn instances(&self) -> impl Iterator<Item = &InstanceRecord> {
        self.fleet.instances.values()
    }

    /// Instances with this controller's owner tag that another state store launched (or that
    /// carry no store id), as the last listing found them.
    pub fn foreign_instances(&self) -> usize {
        self.cloud.foreign.len()
    }

    pub fn open_intents(&self) -> usize {
        self.fleet.intents.len()
    }

    /// The job's throughput model (for the simulated workload and forecasts).
    pub fn model(&self, job: &str) -> Option<Arc<dyn ThroughputModel>> {
        let e = self.fleet.jobs.get(job)?;
        Some(self.shaped(e.loaded.as_ref()?.model()))
    }

    /// Whether a step of the job was measured (its spec's or its agents'): false for a job
    /// that starts with a probe.
    pub fn measured(&self, job: &str) -> bool {
        !self.unmeasured(job)
    }

    /// The model as this controller uses it ([`ControllerConfig::exact_forecast`]).
    fn shaped(&self, model: Arc<dyn ThroughputModel>) -> Arc<dyn ThroughputModel> {
        if self.config.exact_forecast {
            Arc::new(Exact(model))
        } else {
            model
        }
    }

    fn cloud_error(&mut self, e: &ProviderError) {
        tracing::warn!(
            kind = e.kind(),
            retryable = e.is_retryable(),
            "cloud API error: {e}"
        );
        *self.stats.cloud_errors.entry(e.kind()).or_default() += 1;
    }

    /// Leave `r`, the outcome of one job's step, to that job: a failure is logged and counted,
    /// the job's record is read back from the store (memory may be ahead of what was written)
    /// and it is reconciled again at the next pass, while this pass goes on with the others.
    /// An error that [ends the pass](ControllerError::ends_pass) is returned.
    pub(super) fn contain<T>(&mut self, job: &str, r: Result<T>) -> Result<Option<T>> {
        let e = match r {
            Ok(v) => return Ok(Some(v)),
            Err(e) if e.ends_pass() => return Err(e),
            Err(e) => e,
        };
        tracing::error!(job, retryable = e.is_retryable(), "job step failed: {e}");
        *self.stats.job_errors.entry(e.kind()).or_default() += 1;
        let stored = self.store.job(job);
        if let Some(entry) = self.fleet.jobs.get_mut(job) {
            if let Ok(Some(record)) = stored {
                entry.record = record;
            }
            entry.dirty = true;
        }
        Ok(None)
    }

    /// One reconcile pass at `now`: the phases in order (module docs).
    pub async fn pass(&mut self, now: DateTime<Utc>) -> Result<Requeue> {
        let started = std::time::Instant::now();
        self.stats.passes += 1;
        let requeue = self.phases(now).await;
        self.cloud.capacity_errors.retain(|_, until| *until > now);
        self.stats.last_pass = started.elapsed();
        requeue
    }

    async fn phases(&mut self, now: DateTime<Utc>) -> Result<Requeue> {
        let budgeted = self.keep_spend(now)?;
        self.take_notices(now).await?;
        if !self.sync_fleet(now).await? {
            // Acting blind is how leaks happen: nothing else until the cloud can be listed.
            return Ok(Requeue::After(Duration::from_secs(2)));
        }
        let requeue = self.resume_intents(now).await?;
        self.read_quotas(now).await;
        self.watch_budgets(budgeted, now).await?;
        let probe = self.reconcile_jobs(now).await?;
        Ok(match (requeue, probe) {
            (Requeue::After(a), Some(b)) => Requeue::After(a.min(b)),
            (Requeue::Periodic, Some(b)) => Requeue::After(b),
            (r, None) => r,
        })
    }
}

impl Controller {
    /// The offers job `name`'s placement constraints allow: what every launch, replacement,
    /// fallback and move for it chooses from.
    /// Borrowed as they are when the job has no constraints (the common case, on a hot path).
    pub(super) fn allowed_offers<'a>(
        &self,
        name: &str,
        offers: &'a [Offer],
    ) -> std::borrow::Cow<'a, [Offer]> {
        match self
            .fleet
            .jobs
            .get(name)
            .map(|e| &e.record.spec.constraints)
        {
            Some(c) if !c.is_empty() => offers.iter().filter(|o| c.allows(o)).cloned().collect(),
            _ => std::borrow::Cow::Borrowed(offers),
        }
    }
}

/// Other available offers of the same shape and capacity, cheapest first: where a launch may
/// land when the first choice has no capacity.
pub(crate) fn fallbacks<'a>(
    offers: &'a [Offer],
    chosen: &'a Offer,
) -> impl Iterator<Item = Offer> + 'a {
    let mut v: Vec<&Offer> = offers
        .iter()
        .filter(move |o| {
            o.key() != chosen.key()
                && o.capacity == chosen.capacity
                && o.instance_type.name == chosen.instance_type.name
                && !matches!(o.availability, tern_cloud::Availability::Unavailable)
        })
        .collect();
    v.sort_by(|a, b| a.price_per_hour.total_cmp(&b.price_per_hour));
    v.into_iter().cloned()
}

pub(crate) fn fmt_workers(spec: &JobSpec) -> String {
    if spec.workers.is_elastic() {
        format!("{}..{}", spec.workers.min, spec.workers.max)
    } else {
        spec.workers.min.to_string()
    }
}

#[cfg(test)]
mod budget_tests;
#[cfg(test)]
mod flapping_tests;
#[cfg(test)]
mod health_tests;
#[cfg(test)]
mod limits_tests;
#[cfg(test)]
mod policy_tests;
#[cfg(test)]
mod probe_steps_tests;
#[cfg(test)]
mod probe_tests;
#[cfg(test)]
mod testkit;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod twin_tests;
#[cfg(test)]
mod view_tests;
