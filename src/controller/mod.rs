//! The reconcile loop: diff each job's desired fleet against what runs, and act through
//! persisted intents.
//!
//! One [`Controller::pass`] does, in order: take interruption notices (start the job's drain,
//! mark the node as leaving), sync the fleet with the provider (adopt instances of open intents,
//! collect leaks, time out launches that never came up), resume open intents, then reconcile
//! each job (place it with the planner, replace lost nodes, migrate off on-demand when spot is
//! back, terminate what a finished or cancelled job holds). Every action is an [`Intent`]
//! written to the [`Store`] before the cloud is called; launch requests carry the idempotency
//! key derived from the intent, so a controller that crashes anywhere and restarts repeats
//! the same requests and the cloud answers with what it already did.
//!
//! Passes are sequential, so one job is never reconciled twice at once. The service loop
//! ([`Controller::run`]) runs a pass periodically and at once when an event arrives.

pub mod lease;
pub mod remote;
pub mod workload;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{BuildHasher, Hasher};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use tern_cloud::{
    Capacity, Instance, InstanceId, InstanceState, Intent, IntentId, IntentKind, IntentState,
    InterruptionKind, JobSpec, LaunchRequest, Offer, Provider, ProviderError, Region, Tags, tag,
};
use tern_plan::{PlanJob, PlanOptions, ThroughputModel};
use tern_policies::migrate::{self, MoveCandidate, MoveRule};

use crate::jobs::LoadedJob;
use crate::store::{InstanceRecord, JobRecord, JobState, Store, StoreError};

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
}

type Result<T> = std::result::Result<T, ControllerError>;

/// Safety constants (DESIGN.md §5, after Karpenter) and policy knobs.
#[derive(Debug, Clone)]
pub struct ControllerConfig {
    /// Value of the `tern:owner` tag; the leak collector touches only these instances.
    pub owner: String,
    /// Regions whose offers the planner sees.
    pub regions: Vec<Region>,
    /// How long an offer that failed with a capacity error is avoided.
    pub capacity_memory: Duration,
    /// A launched instance not running after this is terminated and its offer avoided.
    pub launch_timeout: Duration,
    /// An owned instance nobody accounts for is terminated after this grace.
    pub leak_grace: Duration,
    /// Fraction of a job's workers one migration may move at once (at least one).
    pub disruption_budget: f64,
    /// How often a running job is checked for a cheaper move.
    pub migrate_check: Duration,
    /// How often an unplaced job is planned again when nothing happened.
    pub replan: Duration,
    pub plan: PlanOptions,
}

impl ControllerConfig {
    pub fn new(owner: impl Into<String>, regions: Vec<Region>) -> ControllerConfig {
        ControllerConfig {
            owner: owner.into(),
            regions,
            capacity_memory: Duration::from_secs(180),
            launch_timeout: Duration::from_secs(300),
            leak_grace: Duration::from_secs(30),
            disruption_budget: 0.25,
            migrate_check: Duration::from_secs(1800),
            replan: Duration::from_secs(300),
            plan: PlanOptions {
                time_limit: Duration::from_secs(2),
                ..PlanOptions::default()
            },
        }
    }
}

/// Counters the metrics endpoint and the benchmark read.
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
    /// Last "waiting" reason printed, so a wait is reported once, not every pass.
    waiting: Option<String>,
}

/// The controller: in-memory working copy of the store plus the provider it acts through.
pub struct Controller {
    store: Arc<Store>,
    provider: Arc<dyn Provider>,
    config: ControllerConfig,
    jobs: BTreeMap<String, JobEntry>,
    instances: HashMap<InstanceId, InstanceRecord>,
    intents: BTreeMap<IntentId, Intent>,
    /// Offer key → avoid until.
    capacity_errors: HashMap<String, DateTime<Utc>>,
    /// Owned instances nobody accounts for → first seen.
    unaccounted: HashMap<InstanceId, DateTime<Utc>>,
    /// (zone, instance type) → on-demand $/h, from the latest offers.
    on_demand: HashMap<(String, String), f64>,
    /// Offer key → spot $/h last seen: a change is an event that re-checks running jobs for a
    /// cheaper place at once.
    spot_prices: HashMap<String, f64>,
    /// Per-process randomness in intent ids, so a restarted controller never reuses one.
    salt: u64,
    seq: u64,
    stats: Stats,
}

impl std::fmt::Debug for Controller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Controller")
            .field("owner", &self.config.owner)
            .field("jobs", &self.jobs.len())
            .field("instances", &self.instances.len())
            .field("intents", &self.intents.len())
            .finish()
    }
}

fn model_for(spec: &JobSpec, at: DateTime<Utc>) -> std::result::Result<Arc<LoadedJob>, String> {
    LoadedJob::from_spec(spec.clone(), Path::new("."), &spec.name, at)
        .map(Arc::new)
        .map_err(|e| format!("{e:#}"))
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

fn delta(d: Duration) -> TimeDelta {
    TimeDelta::from_std(d).unwrap_or(TimeDelta::MAX)
}

fn hours(d: TimeDelta) -> f64 {
    d.num_milliseconds() as f64 / 3_600_000.0
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
                // Observations the agents reported refit the model on every restart.
                let mut spec = record.spec.clone();
                spec.observations
                    .extend(store.observations(record.name())?.iter().map(observed));
                model_for(&spec, record.submitted_at).ok()
            };
            jobs.insert(
                record.name().to_string(),
                JobEntry {
                    record,
                    loaded,
                    last_plan: None,
                    last_migrate_check: None,
                    dirty: true,
                    waiting: None,
                },
            );
        }
        let salt = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish();
        Ok(Controller {
            store,
            provider,
            config,
            jobs,
            instances: snapshot
                .instances
                .into_iter()
                .map(|i| (i.id.clone(), i))
                .collect(),
            intents: snapshot.intents.into_iter().map(|i| (i.id, i)).collect(),
            capacity_errors: HashMap::new(),
            unaccounted: HashMap::new(),
            on_demand: HashMap::new(),
            spot_prices: HashMap::new(),
            salt,
            seq: 0,
            stats: Stats::default(),
        })
    }

    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    pub fn job(&self, name: &str) -> Option<&JobRecord> {
        self.jobs.get(name).map(|e| &e.record)
    }

    pub fn jobs(&self) -> impl Iterator<Item = &JobRecord> {
        self.jobs.values().map(|e| &e.record)
    }

    /// Live (not ended) instances the controller tracks.
    pub fn instances(&self) -> impl Iterator<Item = &InstanceRecord> {
        self.instances.values()
    }

    pub fn open_intents(&self) -> usize {
        self.intents.len()
    }

    /// The job's throughput model (for the simulated workload and forecasts).
    pub fn model(&self, job: &str) -> Option<Arc<dyn ThroughputModel>> {
        let e = self.jobs.get(job)?;
        let loaded = e.loaded.as_ref()?;
        Some(
            loaded
                .plan_job(e.record.submitted_at, e.record.submitted_at, 0.0)
                .model,
        )
    }

    /// Accept a job. Validates that it can be forecast; writes nothing when it cannot.
    pub fn submit(&mut self, spec: JobSpec, now: DateTime<Utc>) -> Result<()> {
        let name = spec.name.clone();
        let loaded = model_for(&spec, now).map_err(|reason| ControllerError::Job {
            job: name.clone(),
            reason,
        })?;
        let record = JobRecord::new(spec, now);
        self.store.insert_job(&record, now)?;
        self.event(
            now,
            Some(&name),
            "submit",
            &format!(
                "{} samples on {} × [{}]{}",
                record.total_samples,
                fmt_workers(&record.spec),
                record.spec.accelerators.join(", "),
                record
                    .deadline_at
                    .map(|d| format!(", due in {:.1} h", hours(d - now)))
                    .unwrap_or_default()
            ),
        )?;
        self.jobs.insert(
            name,
            JobEntry {
                record,
                loaded: Some(loaded),
                last_plan: None,
                last_migrate_check: None,
                dirty: true,
                waiting: None,
            },
        );
        Ok(())
    }

    /// Stop a job: its instances are terminated on the next pass.
    pub fn cancel(&mut self, name: &str, now: DateTime<Utc>) -> Result<()> {
        let entry = self
            .jobs
            .get_mut(name)
            .ok_or_else(|| ControllerError::UnknownJob(name.to_string()))?;
        if entry.record.state.is_final() {
            return Ok(());
        }
        entry.record.state = JobState::Cancelled;
        entry.record.reason = Some("cancelled by the user".into());
        entry.record.finished_at = Some(now);
        entry.dirty = true;
        self.store.update_job(&entry.record, now)?;
        self.event(now, Some(name), "cancel", "cancelled by the user")
    }

    /// A measured step from an agent: stored, and the job's forecast refitted with it.
    pub fn observe(&mut self, o: &tern_cloud::Observation) -> Result<()> {
        let entry = self
            .jobs
            .get_mut(&o.job)
            .ok_or_else(|| ControllerError::UnknownJob(o.job.clone()))?;
        self.store.add_observation(o)?;
        let mut spec = entry.record.spec.clone();
        spec.observations
            .extend(self.store.observations(&o.job)?.iter().map(observed));
        entry.loaded = Some(
            model_for(&spec, entry.record.submitted_at).map_err(|reason| ControllerError::Job {
                job: o.job.clone(),
                reason,
            })?,
        );
        Ok(())
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
        let entry = self
            .jobs
            .get_mut(job)
            .ok_or_else(|| ControllerError::UnknownJob(job.to_string()))?;
        let r = &mut entry.record;
        if r.state.is_final() {
            return Ok(());
        }
        r.done_samples = done.min(r.total_samples);
        if checkpoint > r.checkpoint_samples || checkpointed {
            r.checkpoint_samples = checkpoint.min(r.done_samples);
            r.checkpoint_at = Some(now);
        }
        if checkpointed {
            r.drain_requested = false;
        }
        if r.done_samples >= r.total_samples {
            entry.dirty = true;
        }
        self.store.update_job(r, now)?;
        Ok(())
    }

    /// Record a decision in the event log (what `tern demo` prints and `/v1/events` serves)
    /// and emit it as a structured log line.
    fn event(&self, at: DateTime<Utc>, job: Option<&str>, kind: &str, msg: &str) -> Result<()> {
        let id = self.store.add_event(at, job, kind, msg)?;
        tracing::info!(event = id, at = %at, job = job.unwrap_or("-"), kind, "{msg}");
        Ok(())
    }

    fn cloud_error(&mut self, e: &ProviderError) {
        tracing::warn!(
            kind = e.kind(),
            retryable = e.is_retryable(),
            "cloud API error: {e}"
        );
        *self.stats.cloud_errors.entry(e.kind()).or_default() += 1;
    }

    fn new_intent(&mut self, job: &str, kind: IntentKind, now: DateTime<Utc>) -> Result<Intent> {
        self.seq += 1;
        let name = format!(
            "{}/{job}/{}/{}/{}",
            self.config.owner,
            now.timestamp_millis(),
            self.salt,
            self.seq
        );
        let intent = Intent {
            id: IntentId::from_uuid(uuid::Uuid::new_v5(
                &uuid::Uuid::NAMESPACE_OID,
                name.as_bytes(),
            )),
            job: job.to_string(),
            kind,
            state: IntentState::Pending,
            attempt: 0,
            created_at: now,
        };
        // Persisted before anything is asked of the cloud: the crash-safety anchor.
        self.store.insert_intent(&intent)?;
        self.intents.insert(intent.id, intent.clone());
        Ok(intent)
    }

    fn close_intent(
        &mut self,
        id: IntentId,
        state: IntentState,
        reason: Option<&str>,
        now: DateTime<Utc>,
    ) -> Result<()> {
        self.store.set_intent_state(id, state, reason, now)?;
        self.intents.remove(&id);
        Ok(())
    }

    /// One reconcile pass at `now`.
    pub async fn pass(&mut self, now: DateTime<Utc>) -> Result<Requeue> {
        let started = std::time::Instant::now();
        self.stats.passes += 1;
        let mut requeue = Requeue::Periodic;
        self.take_notices(now).await?;
        if !self.sync_fleet(now).await? {
            self.stats.last_pass = started.elapsed();
            return Ok(Requeue::After(Duration::from_secs(2)));
        }
        // Oldest first, ties by job: intent ids are random, so their order must not decide
        // which job gets scarce capacity first (runs with the same seed stay identical).
        let mut open: Vec<Intent> = self.intents.values().cloned().collect();
        open.sort_by(|a, b| (a.created_at, &a.job).cmp(&(b.created_at, &b.job)));
        for intent in open {
            if !self.execute(intent, now).await? {
                requeue = Requeue::After(Duration::from_secs(2));
            }
        }
        self.reconcile_jobs(now).await?;
        self.capacity_errors.retain(|_, until| *until > now);
        self.stats.last_pass = started.elapsed();
        Ok(requeue)
    }

    /// Notices start the job's drain (checkpoint now) in this very pass and take the node out
    /// of the job's fleet, so its replacement is requested in the same pass.
    async fn take_notices(&mut self, now: DateTime<Utc>) -> Result<()> {
        let notices = match self.provider.interruptions().await {
            Ok(n) => n,
            Err(e) => {
                self.cloud_error(&e);
                return Ok(());
            }
        };
        // Grouped per job and zone so one reclaimed pool is one line in the event log.
        let mut noticed: BTreeMap<(String, String), (Vec<String>, Option<i64>)> = BTreeMap::new();
        let mut lost: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for n in notices {
            let Some(inst) = self.instances.get_mut(&n.instance) else {
                continue;
            };
            let job = inst.job.clone();
            match n.kind {
                InterruptionKind::SpotNotice | InterruptionKind::Maintenance => {
                    if inst.draining {
                        continue;
                    }
                    inst.draining = true;
                    self.store.set_instance_state(&inst.id, inst.state, true)?;
                    self.stats.notices += 1;
                    // A notice means the pool is being drained: avoid it like a capacity error.
                    self.capacity_errors
                        .insert(inst.offer.key(), now + delta(self.config.capacity_memory));
                    let entry = noticed
                        .entry((
                            job.clone(),
                            format!("{} {}", inst.offer.capacity, inst.offer.zone),
                        ))
                        .or_default();
                    entry.0.push(inst.id.to_string());
                    entry.1 = n.deadline.map(|d| (d - now).num_seconds().max(0));
                    if let Some(e) = self.jobs.get_mut(&job) {
                        e.record.drain_requested = true;
                        e.dirty = true;
                        self.store.update_job(&e.record, now)?;
                    }
                }
                InterruptionKind::Preempted => {
                    let id = inst.id.clone();
                    self.store
                        .end_instance(&id, n.deadline.unwrap_or(now).min(now))?;
                    self.instances.remove(&id);
                    if let Some(e) = self.jobs.get_mut(&job) {
                        e.dirty = true;
                    }
                    lost.entry(job).or_default().push(id.to_string());
                }
                InterruptionKind::Rebalance => {}
            }
        }
        for ((job, pool), (ids, secs)) in noticed {
            let what = format!(
                "{} node(s) ({pool}: {}) will be reclaimed{}: checkpoint now, replacement requested",
                ids.len(),
                ids.join(", "),
                secs.map(|s| format!(" in {s} s")).unwrap_or_default()
            );
            self.event(now, Some(&job), "notice", &what)?;
        }
        for (job, ids) in lost {
            let what = format!(
                "{} node(s) reclaimed by the cloud: {}",
                ids.len(),
                ids.join(", ")
            );
            self.event(now, Some(&job), "preempted", &what)?;
        }
        Ok(())
    }

    /// Compare the store's fleet with the cloud's. Returns false when the cloud could not be
    /// listed (then nothing else is done this pass: acting blind is how leaks happen).
    async fn sync_fleet(&mut self, now: DateTime<Utc>) -> Result<bool> {
        let cloud = match self.provider.list(&self.config.owner).await {
            Ok(c) => c,
            Err(e) => {
                self.cloud_error(&e);
                return Ok(false);
            }
        };
        let mut seen: HashSet<InstanceId> = HashSet::with_capacity(cloud.len());
        let grace = delta(self.config.leak_grace);
        for inst in cloud {
            seen.insert(inst.id.clone());
            if let Some(known) = self.instances.get_mut(&inst.id) {
                if known.state != inst.state {
                    known.state = inst.state;
                    self.store
                        .set_instance_state(&known.id, known.state, known.draining)?;
                }
                continue;
            }
            // Launched by an intent whose outcome we did not record (a crash between the
            // cloud call and the store write): adopt it.
            if let Some(intent) = inst.intent_id().filter(|id| self.intents.contains_key(id)) {
                let od = self.on_demand_price(&inst.offer);
                self.store.record_instances(
                    intent,
                    inst.job().unwrap_or_default(),
                    std::slice::from_ref(&inst),
                    od,
                    false,
                    now,
                )?;
                self.adopt(intent, inst);
                continue;
            }
            let first = *self.unaccounted.entry(inst.id.clone()).or_insert(now);
            if now - first >= grace {
                match self.provider.terminate(&inst.id).await {
                    Ok(()) => {
                        self.unaccounted.remove(&inst.id);
                        self.stats.leaks_collected += 1;
                        self.stats.terminations += 1;
                        self.event(
                            now,
                            inst.job(),
                            "leak",
                            &format!(
                                "terminated {}: tagged as ours but owned by no open intent or live job",
                                inst.id
                            ),
                        )?;
                    }
                    Err(e) => self.cloud_error(&e),
                }
            }
        }
        self.unaccounted.retain(|id, _| seen.contains(id));
        // Tracked instances the cloud no longer lists are gone (preempted, terminated).
        let gone: Vec<InstanceId> = self
            .instances
            .keys()
            .filter(|id| !seen.contains(*id))
            .cloned()
            .collect();
        for id in gone {
            self.store.end_instance(&id, now)?;
            if let Some(i) = self.instances.remove(&id)
                && let Some(e) = self.jobs.get_mut(&i.job)
            {
                e.dirty = true;
            }
        }
        // Launch timeout: never came up.
        let timeout = delta(self.config.launch_timeout);
        let mut stuck: Vec<InstanceRecord> = self
            .instances
            .values()
            .filter(|i| i.state == InstanceState::Pending && now - i.launched_at > timeout)
            .cloned()
            .collect();
        stuck.sort_by(|a, b| a.id.cmp(&b.id));
        for i in stuck {
            match self.provider.terminate(&i.id).await {
                Ok(()) => {
                    self.store.end_instance(&i.id, now)?;
                    self.instances.remove(&i.id);
                    self.capacity_errors
                        .insert(i.offer.key(), now + delta(self.config.capacity_memory));
                    self.event(
                        now,
                        Some(&i.job),
                        "timeout",
                        &format!(
                            "{} did not come up within {:?}; terminated, {} avoided for 3 min",
                            i.id,
                            self.config.launch_timeout,
                            i.offer.key()
                        ),
                    )?;
                    if let Some(e) = self.jobs.get_mut(&i.job) {
                        e.dirty = true;
                    }
                }
                Err(e) => self.cloud_error(&e),
            }
        }
        Ok(true)
    }

    fn adopt(&mut self, intent: IntentId, inst: Instance) {
        let job = inst.job().unwrap_or_default().to_string();
        self.instances.insert(
            inst.id.clone(),
            InstanceRecord {
                id: inst.id,
                job,
                intent,
                offer: inst.offer,
                state: inst.state,
                draining: false,
                launched_at: inst.launched_at,
                ended_at: None,
            },
        );
    }

    fn on_demand_price(&self, offer: &Offer) -> Option<f64> {
        if offer.capacity == Capacity::OnDemand {
            return Some(offer.price_per_hour);
        }
        self.on_demand
            .get(&(offer.zone.to_string(), offer.instance_type.name.clone()))
            .copied()
    }

    fn tags(&self, intent: IntentId, job: &str) -> Tags {
        let mut tags = Tags::new();
        tags.insert(tag::OWNER.into(), self.config.owner.clone());
        tags.insert(tag::INTENT.into(), intent.to_string());
        tags.insert(tag::JOB.into(), job.to_string());
        tags
    }

    /// Carry out (or resume) one open intent. Returns false when it must be retried later.
    async fn execute(&mut self, intent: Intent, now: DateTime<Utc>) -> Result<bool> {
        let job_live = self
            .jobs
            .get(&intent.job)
            .is_some_and(|e| !e.record.state.is_final());
        let starts_capacity = matches!(
            intent.kind,
            IntentKind::Launch { .. } | IntentKind::Migrate { .. }
        );
        if starts_capacity && !job_live {
            // Re-validation: the job ended while the launch or move was open. Anything it may
            // have started is collected as a leak.
            self.close_intent(
                intent.id,
                IntentState::Cancelled,
                Some("job no longer active"),
                now,
            )?;
            return Ok(true);
        }
        match intent.kind.clone() {
            IntentKind::Launch { offers, count } => {
                self.launch(&intent, offers, count, true, now).await
            }
            IntentKind::Migrate { from, to, count } => {
                let launched: Vec<&InstanceRecord> = self
                    .instances
                    .values()
                    .filter(|i| i.intent == intent.id)
                    .collect();
                if launched.is_empty() {
                    return self.launch(&intent, to, count, false, now).await;
                }
                if launched.iter().any(|i| i.state != InstanceState::Running) {
                    return Ok(true);
                }
                // New nodes are up: checkpoint, then release the old ones.
                let Some(entry) = self.jobs.get_mut(&intent.job) else {
                    return Ok(true);
                };
                let leaving: Vec<InstanceId> = from
                    .iter()
                    .filter(|id| self.instances.get(*id).is_some_and(|i| !i.draining))
                    .cloned()
                    .collect();
                if !leaving.is_empty() {
                    entry.record.drain_requested = true;
                    self.store.update_job(&entry.record, now)?;
                    for id in &leaving {
                        if let Some(i) = self.instances.get_mut(id) {
                            i.draining = true;
                            self.store.set_instance_state(id, i.state, true)?;
                        }
                    }
                    return Ok(true);
                }
                if entry.record.drain_requested {
                    return Ok(true);
                }
                entry.record.last_move_at = Some(now);
                self.store.update_job(&entry.record, now)?;
                if self.terminate_all(&from, now).await? {
                    self.close_intent(intent.id, IntentState::Done, None, now)?;
                    self.stats.migrations += 1;
                    self.event(
                        now,
                        Some(&intent.job),
                        "migrated",
                        &format!("released {} old node(s) after checkpoint", from.len()),
                    )?;
                    Ok(true)
                } else {
                    Ok(false)
                }
            }
            IntentKind::Terminate { instances } => {
                if self.terminate_all(&instances, now).await? {
                    self.close_intent(intent.id, IntentState::Done, None, now)?;
                    Ok(true)
                } else {
                    Ok(false)
                }
            }
            IntentKind::Resize { count } => {
                // The fleet size the job aims for; launches and terminations follow from it
                // (`replace` tops a job up to its target). Repeating it after a crash is harmless.
                if let Some(e) = self.jobs.get_mut(&intent.job) {
                    e.record.target_count = count;
                    self.store.update_job(&e.record, now)?;
                }
                self.close_intent(intent.id, IntentState::Done, None, now)?;
                Ok(true)
            }
        }
    }

    async fn terminate_all(&mut self, ids: &[InstanceId], now: DateTime<Utc>) -> Result<bool> {
        let mut all = true;
        for id in ids {
            if !self.instances.contains_key(id) {
                continue;
            }
            match self.provider.terminate(id).await {
                Ok(()) => {
                    self.store.end_instance(id, now)?;
                    self.instances.remove(id);
                    self.stats.terminations += 1;
                }
                Err(e) if e.is_not_found() => {
                    self.store.end_instance(id, now)?;
                    self.instances.remove(id);
                }
                Err(e) => {
                    self.cloud_error(&e);
                    all = false;
                }
            }
        }
        Ok(all)
    }

    /// Send the launch of `intent`. `close` marks the intent done with its instances (a plain
    /// launch); a migration stays open until the old nodes are released.
    async fn launch(
        &mut self,
        intent: &Intent,
        offers: Vec<Offer>,
        count: u32,
        close: bool,
        now: DateTime<Utc>,
    ) -> Result<bool> {
        let gang = self
            .jobs
            .get(&intent.job)
            .is_some_and(|e| e.record.spec.gang);
        let request = LaunchRequest {
            key: intent.idempotency_key(),
            intent: intent.id,
            job: intent.job.clone(),
            offers,
            count,
            min_count: if gang { count } else { 1 },
            single_zone: gang,
            tags: self.tags(intent.id, &intent.job),
            template: None,
        };
        let outcome = match self.provider.launch(&request).await {
            Ok(o) => o,
            Err(e) => {
                self.cloud_error(&e);
                if e.is_retryable() {
                    // Same intent, same attempt, same key next time.
                    return Ok(false);
                }
                self.close_intent(intent.id, IntentState::Failed, Some(&e.to_string()), now)?;
                self.event(now, Some(&intent.job), "launch-failed", &e.to_string())?;
                if let Some(entry) = self.jobs.get_mut(&intent.job) {
                    entry.dirty = true;
                }
                return Ok(true);
            }
        };
        for (key, err) in &outcome.errors {
            self.cloud_error(err);
            if err.is_capacity() || err.is_quota() {
                self.capacity_errors
                    .insert(key.clone(), now + delta(self.config.capacity_memory));
                self.event(
                    now,
                    Some(&intent.job),
                    "capacity",
                    &format!("{key}: {err}; avoided for 3 min"),
                )?;
            }
        }
        let od = outcome
            .instances
            .first()
            .and_then(|i| self.on_demand_price(&i.offer));
        if outcome.instances.is_empty() {
            self.close_intent(
                intent.id,
                IntentState::Failed,
                Some("no offer had capacity"),
                now,
            )?;
            if let Some(entry) = self.jobs.get_mut(&intent.job) {
                entry.dirty = true;
            }
            return Ok(true);
        }
        self.store
            .record_instances(intent.id, &intent.job, &outcome.instances, od, close, now)?;
        if close {
            self.intents.remove(&intent.id);
        }
        self.stats.launches += outcome.instances.len() as u64;
        let first = outcome.instances[0].offer.clone();
        self.event(
            now,
            Some(&intent.job),
            "launched",
            &format!(
                "{}× {} {} in {} at ${:.2}/h each",
                outcome.instances.len(),
                first.instance_type.name,
                first.capacity,
                first.zone,
                first.price_per_hour
            ),
        )?;
        for inst in outcome.instances {
            // A replayed launch returns instances we may already track (and may have marked
            // as draining since): keep what we know.
            if !self.instances.contains_key(&inst.id) {
                self.adopt(intent.id, inst);
            }
        }
        if let Some(e) = self.jobs.get_mut(&intent.job) {
            let mut changed = false;
            if e.record.state == JobState::Pending {
                e.record.state = JobState::Running;
                e.record.reason = None;
                changed = true;
            }
            if e.record.target_offer.is_none() {
                // An intent resumed after a crash that came before its plan was recorded:
                // what it launched is the fleet to keep.
                e.record.target_offer = Some(first.key());
                e.record.target_count = count;
                e.record.planned_count = count;
                changed = true;
            }
            if changed {
                self.store.update_job(&e.record, now)?;
            }
        }
        Ok(true)
    }

    /// Fresh offers from every configured region, with remembered capacity errors marked
    /// unavailable (re-validation of the plan against what the cloud says now).
    async fn offers(&mut self, now: DateTime<Utc>) -> Option<Vec<Offer>> {
        let mut all = Vec::new();
        for region in self.config.regions.clone() {
            match self.provider.offers(&region).await {
                Ok(o) => all.extend(o),
                Err(e) => {
                    self.cloud_error(&e);
                    return None;
                }
            }
        }
        let mut price_moved = false;
        for o in &mut all {
            if o.capacity == Capacity::Spot {
                let old = self.spot_prices.insert(o.key(), o.price_per_hour);
                price_moved |= old.is_some_and(|p| (p - o.price_per_hour).abs() > 0.01 * p);
            }
            if o.capacity == Capacity::OnDemand {
                self.on_demand.insert(
                    (o.zone.to_string(), o.instance_type.name.clone()),
                    o.price_per_hour,
                );
            }
            if self.capacity_errors.get(&o.key()).is_some_and(|t| *t > now) {
                o.availability = tern_cloud::Availability::Unavailable;
            }
        }
        if price_moved {
            for e in self.jobs.values_mut() {
                e.last_migrate_check = None;
            }
        }
        Some(all)
    }

    /// The job's instances that count toward its fleet, in id order (deterministic).
    fn live_of(&self, job: &str) -> Vec<&InstanceRecord> {
        let mut v: Vec<&InstanceRecord> = self
            .instances
            .values()
            .filter(|i| i.job == job && !i.draining)
            .collect();
        v.sort_by(|a, b| a.id.cmp(&b.id));
        v
    }

    async fn reconcile_jobs(&mut self, now: DateTime<Utc>) -> Result<()> {
        // Jobs per instance count, computed once (the pass must stay linear in the fleet).
        let mut live: HashMap<&str, u32> = HashMap::new();
        let mut held: HashMap<&str, u32> = HashMap::new();
        for i in self.instances.values() {
            *held.entry(i.job.as_str()).or_default() += 1;
            if !i.draining {
                *live.entry(i.job.as_str()).or_default() += 1;
            }
        }
        let busy: HashSet<&str> = self.intents.values().map(|i| i.job.as_str()).collect();
        let mut to_place = Vec::new();
        let mut to_replace = Vec::new();
        let mut to_release = Vec::new();
        let mut to_check = Vec::new();
        let mut to_grow = Vec::new();
        for (name, e) in &self.jobs {
            let r = &e.record;
            let n_live = live.get(name.as_str()).copied().unwrap_or(0);
            let n_held = held.get(name.as_str()).copied().unwrap_or(0);
            if busy.contains(name.as_str()) {
                continue;
            }
            let finished = r.done_samples >= r.total_samples;
            if r.state.is_final() || finished {
                if n_held > 0 || (finished && r.state != JobState::Finished) {
                    to_release.push(name.clone());
                }
                continue;
            }
            let due = e.dirty
                || e.last_plan
                    .is_none_or(|t| now - t >= delta(self.config.replan));
            if r.target_offer.is_none() || n_live == 0 {
                if due {
                    to_place.push(name.clone());
                }
            } else if n_live < r.target_count {
                if due {
                    to_replace.push(name.clone());
                }
            } else if r.target_count < r.planned_count && due {
                to_grow.push(name.clone());
            } else if e
                .last_migrate_check
                .is_none_or(|t| now - t >= delta(self.config.migrate_check))
            {
                to_check.push(name.clone());
            }
        }
        for name in to_release {
            self.release(&name, now).await?;
        }
        if to_place.is_empty() && to_replace.is_empty() && to_check.is_empty() && to_grow.is_empty()
        {
            return Ok(());
        }
        let Some(offers) = self.offers(now).await else {
            return Ok(());
        };
        if !to_place.is_empty() {
            self.place(&to_place, &offers, now).await?;
        }
        for name in to_replace {
            self.replace(&name, &offers, now).await?;
        }
        for name in to_grow {
            self.grow(&name, &offers, now).await?;
        }
        if !to_check.is_empty() {
            // One walk over the fleet for all the jobs checked (the pass stays linear).
            let checked: HashSet<&str> = to_check.iter().map(String::as_str).collect();
            let mut fleets: HashMap<String, Vec<InstanceRecord>> = HashMap::new();
            for i in self.instances.values() {
                if !i.draining && checked.contains(i.job.as_str()) {
                    fleets.entry(i.job.clone()).or_default().push(i.clone());
                }
            }
            let price_now: HashMap<String, f64> =
                offers.iter().map(|o| (o.key(), o.price_per_hour)).collect();
            for name in to_check {
                let mut fleet = fleets.remove(&name).unwrap_or_default();
                fleet.sort_by(|a, b| a.id.cmp(&b.id));
                self.consider_move(&name, fleet, &offers, &price_now, now)
                    .await?;
            }
        }
        Ok(())
    }

    /// Terminate what a finished or cancelled job holds; mark it finished.
    async fn release(&mut self, name: &str, now: DateTime<Utc>) -> Result<()> {
        let ids: Vec<InstanceId> = self
            .instances
            .values()
            .filter(|i| i.job == name)
            .map(|i| i.id.clone())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        if let Some(e) = self.jobs.get_mut(name)
            && !e.record.state.is_final()
        {
            e.record.state = JobState::Finished;
            e.record.finished_at = Some(now);
            e.record.reason = match e.record.deadline_at {
                Some(d) if now > d => Some(format!(
                    "finished {:.1} h after its deadline",
                    hours(now - d)
                )),
                _ => None,
            };
            self.store.update_job(&e.record, now)?;
            let msg = match &e.record.reason {
                Some(r) => format!("all work done; {r}"),
                None => format!(
                    "all work done in {:.1} h",
                    hours(now - e.record.submitted_at)
                ),
            };
            self.event(now, Some(name), "finished", &msg)?;
        }
        if ids.is_empty() {
            return Ok(());
        }
        let intent = self.new_intent(name, IntentKind::Terminate { instances: ids }, now)?;
        self.execute(intent, now).await?;
        Ok(())
    }

    fn plan_job(&self, name: &str, now: DateTime<Utc>) -> Option<PlanJob> {
        let e = self.jobs.get(name)?;
        let loaded = e.loaded.as_ref()?;
        let remaining = (e.record.total_samples - e.record.checkpoint_samples).max(0.0);
        let mut job = loaded.plan_job(e.record.submitted_at, now, remaining);
        if let Some(d) = e.record.deadline_at {
            job.deadline_s = Some(((d - now).num_milliseconds() as f64 / 1e3).max(0.0));
        }
        Some(job)
    }

    /// Place jobs that hold nothing, all in one MILP so they share the available capacity.
    async fn place(
        &mut self,
        names: &[String],
        offers: &[Offer],
        now: DateTime<Utc>,
    ) -> Result<()> {
        let mut pjobs = Vec::new();
        for name in names {
            if let Some(e) = self.jobs.get_mut(name) {
                e.last_plan = Some(now);
                e.dirty = false;
            }
            match self.plan_job(name, now) {
                Some(j) => pjobs.push(j),
                None => {
                    self.mark_unplaceable(
                        name,
                        "its spec cannot be forecast (no observations or local_batch)",
                        now,
                    )?;
                }
            }
        }
        if pjobs.is_empty() {
            return Ok(());
        }
        let report = tern_plan::plan(&pjobs, offers, &self.config.plan);
        for jp in report.jobs {
            let Some(choice) = jp.choice.filter(|_| jp.placed) else {
                let reason = jp
                    .reason
                    .unwrap_or_else(|| "no feasible configuration".into());
                self.mark_unplaceable(&jp.job, &reason, now)?;
                continue;
            };
            let Some(offer) = offers.iter().find(|o| o.key() == choice.offer).cloned() else {
                continue;
            };
            if offer.capacity != Capacity::Spot
                && let Some(wait) = self.spot_wait_reason(&jp.job, choice.finish_high_h, now)
            {
                self.wait(&jp.job, &wait, now)?;
                continue;
            }
            let why = format!(
                "planner ({}): {}× {} {} in {}, expected ${:.0} total, finish in {:.1} h{}{}",
                report.solver_family,
                choice.nodes,
                choice.instance_type,
                choice.capacity,
                choice.zone,
                choice.expected_cost,
                choice.finish_h,
                jp.deadline_h
                    .map(|d| format!(" (deadline {d:.1} h)"))
                    .unwrap_or_default(),
                jp.versus_cheapest_per_accelerator_hour
                    .map(|v| format!("; {v}"))
                    .unwrap_or_default()
            );
            let gang = self.jobs.get(&jp.job).is_some_and(|e| e.record.spec.gang);
            let mut list = vec![offer.clone()];
            if !gang {
                list.extend(fallbacks(offers, &offer));
            }
            if let Some(e) = self.jobs.get_mut(&jp.job) {
                e.record.target_offer = Some(choice.offer.clone());
                e.record.target_count = choice.nodes;
                e.record.planned_count = choice.nodes;
                e.waiting = None;
                self.store.update_job(&e.record, now)?;
            }
            self.event(now, Some(&jp.job), "plan", &why)?;
            let intent = self.new_intent(
                &jp.job,
                IntentKind::Launch {
                    offers: list,
                    count: choice.nodes,
                },
                now,
            )?;
            self.execute(intent, now).await?;
        }
        Ok(())
    }

    fn mark_unplaceable(&mut self, name: &str, reason: &str, now: DateTime<Utc>) -> Result<()> {
        let Some(e) = self.jobs.get_mut(name) else {
            return Ok(());
        };
        if e.record.state == JobState::Unplaceable && e.record.reason.as_deref() == Some(reason) {
            return Ok(());
        }
        e.record.state = JobState::Unplaceable;
        e.record.reason = Some(reason.to_string());
        self.store.update_job(&e.record, now)?;
        self.event(now, Some(name), "unplaceable", reason)
    }

    fn wait(&mut self, name: &str, reason: &str, now: DateTime<Utc>) -> Result<()> {
        let Some(e) = self.jobs.get_mut(name) else {
            return Ok(());
        };
        if e.waiting.as_deref() == Some(reason) {
            return Ok(());
        }
        e.waiting = Some(reason.to_string());
        self.event(now, Some(name), "wait", reason)
    }

    /// Why the job should wait for spot instead of paying for on-demand, or `None` when its
    /// deadline needs on-demand now. tern's rule (a variant of Uniform Progress, DESIGN.md
    /// §4.4): waiting is allowed while the slack (time left − pessimistic work − two restarts)
    /// stays above a reserve of a quarter of the job's window; the straight-line test of plain
    /// Uniform Progress would leave spot at the first minute without capacity.
    fn spot_wait_reason(&self, name: &str, work_h: f64, now: DateTime<Utc>) -> Option<String> {
        let e = self.jobs.get(name)?;
        let r = &e.record;
        let Some(deadline) = r.deadline_at else {
            return Some(
                "no spot capacity now; without a deadline tern never pays on-demand".into(),
            );
        };
        let c = &r.spec.checkpoint;
        let restart_h = (self.config.plan.provision_s + c.save_s + c.restore_s) / 3600.0;
        let left_h = hours(deadline - now);
        let reserve_h = 0.25 * hours(deadline - r.submitted_at).max(0.0);
        let slack_h = left_h - work_h - 2.0 * restart_h;
        if slack_h <= reserve_h {
            return None;
        }
        Some(format!(
            "no spot capacity now; waiting: slack {slack_h:.1} h ({left_h:.1} h left, {work_h:.1} h of work) is above the {reserve_h:.1} h reserve"
        ))
    }

    /// Replace lost nodes of a running job: same shape, spot first; on-demand only when the
    /// deadline needs it. A gang stays in its zone.
    async fn replace(&mut self, name: &str, offers: &[Offer], now: DateTime<Utc>) -> Result<()> {
        let live = self.live_of(name);
        let n_live = live.len() as u32;
        let Some(first) = live.first().map(|i| i.offer.clone()) else {
            return Ok(());
        };
        let Some(e) = self.jobs.get_mut(name) else {
            return Ok(());
        };
        e.last_plan = Some(now);
        e.dirty = false;
        let gang = e.record.spec.gang;
        let missing = e.record.target_count.saturating_sub(n_live);
        if missing == 0 {
            return Ok(());
        }
        let same_shape = |o: &&Offer| {
            o.instance_type.name == first.instance_type.name
                && !matches!(o.availability, tern_cloud::Availability::Unavailable)
                && (!gang || o.zone == first.zone)
        };
        let mut list: Vec<Offer> = offers
            .iter()
            .filter(same_shape)
            .filter(|o| o.capacity == Capacity::Spot)
            .cloned()
            .collect();
        list.sort_by(|a, b| a.price_per_hour.total_cmp(&b.price_per_hour));
        let thr = self
            .model(name)
            .and_then(|m| {
                let acc = first.accelerator()?.name.clone();
                m.throughput(
                    &acc,
                    first.accelerator_units().max(1),
                    self.jobs.get(name)?.record.target_count,
                )
            })
            .map_or(0.0, |t| t.pessimistic);
        let work_h = self.jobs.get(name).map_or(0.0, |e| {
            (e.record.total_samples - e.record.checkpoint_samples).max(0.0) / thr.max(1e-9) / 3600.0
        });
        let mut why = "replacing lost node(s) with spot".to_string();
        if list.is_empty() {
            match self.spot_wait_reason(name, work_h, now) {
                Some(wait) => {
                    let surviving = format!("{wait}; running on {n_live} survivor(s)");
                    if gang {
                        // A gang cannot run short: give the zone back and place it anew.
                        let ids: Vec<InstanceId> = self
                            .instances
                            .values()
                            .filter(|i| i.job == name)
                            .map(|i| i.id.clone())
                            .collect::<std::collections::BTreeSet<_>>()
                            .into_iter()
                            .collect();
                        if let Some(e) = self.jobs.get_mut(name) {
                            e.record.target_offer = None;
                            e.record.target_count = 0;
                            self.store.update_job(&e.record, now)?;
                        }
                        self.event(now, Some(name), "regroup", &format!("gang cannot be completed in {}: releasing {} node(s) to place the whole gang again", first.zone, ids.len()))?;
                        let intent =
                            self.new_intent(name, IntentKind::Terminate { instances: ids }, now)?;
                        self.execute(intent, now).await?;
                        return Ok(());
                    }
                    // An elastic job runs on at least its minimum: resize it down to the
                    // survivors (the agents' torchrun re-rendezvous at the smaller size) and
                    // grow it back when spot returns (`grow`).
                    let min_nodes = self.jobs.get(name).map_or(u32::MAX, |e| {
                        e.record
                            .spec
                            .workers
                            .min
                            .div_ceil(first.accelerator_units().max(1))
                    });
                    if n_live >= min_nodes.max(1) {
                        self.event(
                            now,
                            Some(name),
                            "resize",
                            &format!(
                                "{} → {n_live} node(s): {wait}; the job goes on at the smaller size",
                                n_live + missing
                            ),
                        )?;
                        let intent =
                            self.new_intent(name, IntentKind::Resize { count: n_live }, now)?;
                        self.execute(intent, now).await?;
                    }
                    return self.wait(name, &surviving, now);
                }
                None => {
                    list = offers
                        .iter()
                        .filter(same_shape)
                        .filter(|o| o.capacity == Capacity::OnDemand)
                        .cloned()
                        .collect();
                    list.sort_by(|a, b| a.price_per_hour.total_cmp(&b.price_per_hour));
                    why = "no spot capacity and the deadline needs the work now: on-demand".into();
                }
            }
        }
        if list.is_empty() {
            return self.wait(name, "no capacity of the job's shape anywhere", now);
        }
        if let Some(e) = self.jobs.get_mut(name) {
            e.waiting = None;
        }
        self.event(
            now,
            Some(name),
            "replace",
            &format!("{missing} node(s) missing: {why}"),
        )?;
        let intent = self.new_intent(
            name,
            IntentKind::Launch {
                offers: list,
                count: missing,
            },
            now,
        )?;
        self.execute(intent, now).await?;
        Ok(())
    }

    /// An elastic job resized below its planned size grows back once spot capacity of its
    /// shape is offered again: a `Resize` to the planned size, then `replace` launches the rest.
    async fn grow(&mut self, name: &str, offers: &[Offer], now: DateTime<Utc>) -> Result<()> {
        let Some(first) = self.live_of(name).first().map(|i| i.offer.clone()) else {
            return Ok(());
        };
        let Some(e) = self.jobs.get_mut(name) else {
            return Ok(());
        };
        e.last_plan = Some(now);
        e.dirty = false;
        let (from, to) = (e.record.target_count, e.record.planned_count);
        let back = offers.iter().any(|o| {
            o.capacity == Capacity::Spot
                && o.instance_type.name == first.instance_type.name
                && !matches!(o.availability, tern_cloud::Availability::Unavailable)
        });
        if !back || to <= from {
            return Ok(());
        }
        self.event(
            now,
            Some(name),
            "resize",
            &format!("{from} → {to} node(s): spot capacity of the shape is offered again"),
        )?;
        let intent = self.new_intent(name, IntentKind::Resize { count: to }, now)?;
        self.execute(intent, now).await?;
        self.replace(name, offers, now).await
    }

    /// Move nodes to cheaper spot capacity when the saving beats the cost of moving
    /// (DESIGN.md §4.3), a disruption budget's worth of nodes at a time: on-demand nodes to
    /// spot once spot is back, and spot nodes to another zone's spot when prices there have
    /// fallen well below (a price change triggers the check). Never onto on-demand: replacing
    /// spot with dearer capacity happens only through `replace`, when the deadline needs it.
    async fn consider_move(
        &mut self,
        name: &str,
        fleet: Vec<InstanceRecord>,
        offers: &[Offer],
        price_now: &HashMap<String, f64>,
        now: DateTime<Utc>,
    ) -> Result<()> {
        let n = fleet.len() as u32;
        let current = |i: &InstanceRecord| {
            price_now
                .get(&i.offer.key())
                .copied()
                .unwrap_or(i.offer.price_per_hour)
        };
        // Dearest first: those are the nodes worth moving.
        let mut running: Vec<(InstanceRecord, f64)> = fleet
            .into_iter()
            .filter(|i| i.state == InstanceState::Running)
            .map(|i| {
                let p = current(&i);
                (i, p)
            })
            .collect();
        running.sort_by(|a, b| {
            (b.0.offer.capacity == Capacity::OnDemand, b.1)
                .partial_cmp(&(a.0.offer.capacity == Capacity::OnDemand, a.1))
                .unwrap_or(std::cmp::Ordering::Equal)
        });
        let Some(e) = self.jobs.get_mut(name) else {
            return Ok(());
        };
        e.last_migrate_check = Some(now);
        let Some((first, _)) = running.first().cloned() else {
            return Ok(());
        };
        let r = e.record.clone();
        let gang = r.spec.gang;
        let mut spot: Vec<Offer> = offers
            .iter()
            .filter(|o| {
                o.capacity == Capacity::Spot
                    && o.instance_type.name == first.offer.instance_type.name
                    && !matches!(o.availability, tern_cloud::Availability::Unavailable)
                    && (!gang || o.zone == first.offer.zone)
            })
            .cloned()
            .collect();
        spot.sort_by(|a, b| a.price_per_hour.total_cmp(&b.price_per_hour));
        let Some(best) = spot.first().cloned() else {
            return Ok(());
        };
        let movers: Vec<&(InstanceRecord, f64)> = running
            .iter()
            .filter(|(i, price)| i.offer.key() != best.key() && *price > best.price_per_hour)
            .collect();
        let budget = ((f64::from(n) * self.config.disruption_budget).floor() as u32).max(1);
        let room = match best.availability {
            tern_cloud::Availability::Available(Some(k)) => k,
            _ => u32::MAX,
        };
        let k = budget.min(movers.len() as u32).min(room);
        if k == 0 || (gang && k < running.len() as u32) {
            return Ok(());
        }
        let movers = &movers[..k as usize];
        let Some(thr) = self.model(name).and_then(|m| {
            let acc = first.offer.accelerator()?.name.clone();
            m.throughput(&acc, first.offer.accelerator_units().max(1), n)
        }) else {
            return Ok(());
        };
        let c = &r.spec.checkpoint;
        let restart_h = (c.save_s + self.config.plan.provision_s + c.restore_s) / 3600.0;
        let work_h =
            (r.total_samples - r.checkpoint_samples).max(0.0) / thr.expected.max(1e-9) / 3600.0;
        let slack = r
            .deadline_at
            .map_or(f64::INFINITY, |d| hours(d - now) - work_h);
        let egress = if movers.iter().any(|(i, _)| i.offer.region != best.region) {
            c.size_gb * 0.02
        } else {
            0.0
        };
        let current_rate: f64 = movers.iter().map(|(_, p)| p).sum();
        let candidate = MoveCandidate {
            remaining_work_hours: work_h,
            current_rate,
            candidate_rate: best.price_per_hour * f64::from(k),
            restart_hours: restart_h,
            held_rate: current_rate,
            lost_progress_cost: 0.0,
            egress,
            slack_hours: slack,
            hours_since_last_move: r.last_move_at.map(|t| hours(now - t)),
        };
        let od_rate = self
            .on_demand_price(&first.offer)
            .unwrap_or(first.offer.price_per_hour);
        let rule = MoveRule::for_job(restart_h, od_rate);
        let decision = migrate::decide(&rule, &candidate);
        let migrate::Decision::Move { net_saving } = decision else {
            return Ok(());
        };
        let (from_cap, from_zone) = (movers[0].0.offer.capacity, movers[0].0.offer.zone.clone());
        let from: Vec<InstanceId> = movers.iter().map(|(i, _)| i.id.clone()).collect();
        let mut to = vec![best.clone()];
        if !gang {
            to.extend(fallbacks(offers, &best));
        }
        self.event(
            now,
            Some(name),
            "migrate",
            &format!(
                "{k} of {n} node(s) {from_cap} ${:.2}/h in {from_zone} → spot ${:.2}/h in {}: net saving ${net_saving:.0} over {work_h:.1} h of work (disruption budget {:.0} %)",
                current_rate / f64::from(k),
                best.price_per_hour,
                best.zone,
                self.config.disruption_budget * 100.0
            ),
        )?;
        let intent = self.new_intent(name, IntentKind::Migrate { from, to, count: k }, now)?;
        self.execute(intent, now).await?;
        Ok(())
    }
}

/// Other available offers of the same shape and capacity, cheapest first: where a launch may
/// land when the first choice has no capacity.
fn fallbacks<'a>(offers: &'a [Offer], chosen: &'a Offer) -> impl Iterator<Item = Offer> + 'a {
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

fn fmt_workers(spec: &JobSpec) -> String {
    if spec.workers.is_elastic() {
        format!("{}..{}", spec.workers.min, spec.workers.max)
    } else {
        spec.workers.min.to_string()
    }
}

#[cfg(test)]
mod tests;
