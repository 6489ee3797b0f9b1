//! Phase 4 (`reconcile_jobs`): triage every job, release what finished or cancelled jobs hold, and
//! place jobs that hold nothing, all in one MILP so they share the available capacity. The jobs
//! that already run go on to [`super::disruption`].

use std::collections::{BTreeMap, HashMap, HashSet};

use chrono::{DateTime, Utc};
use tern_cloud::{Availability, Capacity, InstanceId, Offer};
use tern_plan::{JobPlan, PlanJob, PlanOptions, PlanReport};

use super::decide::{self, Decision};
use super::events::{Placement, WaitReason};
use super::view::{self, JobView, Need};
use super::{Controller, Result, delta};
use crate::store::{InstanceRecord, JobState};

/// How long a cancelled or over-budget job's instances are kept for its agents to save a
/// checkpoint and say their workers stopped: the agent's default grace on AWS (100 s), its
/// report interval and a margin.
pub const STOP_GRACE: chrono::TimeDelta = chrono::TimeDelta::seconds(150);

/// How old the offers `GET /v1/offers` shows may grow while the controller is idle.
const OFFERS_MAX_AGE: std::time::Duration = std::time::Duration::from_secs(3600);

/// What each job needs this pass.
#[derive(Debug, Default)]
struct Triage {
    release: Vec<String>,
    place: Vec<String>,
    replace: Vec<String>,
    grow: Vec<String>,
    check_move: Vec<String>,
    /// Draining instances that have not ended, by job: released once their workers stopped.
    drained: BTreeMap<String, Vec<InstanceId>>,
    /// Jobs whose probe ends at this pass.
    probe_end: Vec<String>,
}

impl Triage {
    fn needs_offers(&self) -> bool {
        !(self.place.is_empty()
            && self.replace.is_empty()
            && self.check_move.is_empty()
            && self.grow.is_empty()
            && self.probe_end.is_empty())
    }
}

impl Controller {
    /// Returns how soon an open probe needs the next pass, if one does.
    pub(super) async fn reconcile_jobs(
        &mut self,
        now: DateTime<Utc>,
    ) -> Result<Option<std::time::Duration>> {
        let (ending, soonest) = self.due_probes(now)?;
        let mut triage = self.triage(now);
        triage.check_move.retain(|n| !ending.contains(n));
        triage.probe_end = ending;
        for name in &triage.release {
            let r = self.release(name, now).await;
            self.contain(name, r)?;
        }
        self.release_drained(std::mem::take(&mut triage.drained), now)
            .await?;
        self.drop_policies();
        // The deadline policy learns from one availability sample per pool and tick while
        // any job is active.
        let active = self.fleet.jobs.values().any(|e| !e.record.state.is_final());
        let sample = self.sampled != Some(self.policy_tick(now)) && active;
        // An idle controller still reads offers now and then, so `GET /v1/offers` (what
        // `tern_offers` with `source = "controller"` shows) is never empty nor old; an active
        // one as often as it was told to.
        let older = |age| self.cloud.offers_at.is_none_or(|t| now - t >= delta(age));
        let stale =
            older(OFFERS_MAX_AGE) || (active && self.config.offers_every.is_some_and(older));
        if !(triage.needs_offers() || sample || stale) {
            return Ok(soonest);
        }
        let Some(offers) = self.offers(now).await else {
            return Ok(soonest);
        };
        self.observe_pools(&offers, now)?;
        self.record_prices(&offers, now)?;
        self.sampled = Some(self.policy_tick(now));
        if !triage.place.is_empty() {
            self.place(&triage.place, &offers, now).await?;
        }
        for name in &triage.replace {
            let r = self.replace(name, &offers, now).await;
            self.contain(name, r)?;
        }
        for name in &triage.grow {
            let r = self.grow(name, &offers, now).await;
            self.contain(name, r)?;
        }
        self.settle_probes(&triage.probe_end, &offers, now).await?;
        self.check_moves(&triage.check_move, &offers, now).await?;
        Ok(soonest)
    }

    /// Sort the jobs by what they need; one walk over the fleet (the pass stays linear).
    fn triage(&self, now: DateTime<Utc>) -> Triage {
        // What each job holds comes from the fleet's index by job; only the few draining
        // instances are counted here.
        let mut draining: HashMap<&str, usize> = HashMap::new();
        let mut t = Triage::default();
        for i in self.fleet.instances.draining() {
            *draining.entry(i.job.as_str()).or_default() += 1;
            if i.state != tern_cloud::InstanceState::Terminated {
                let ids = t.drained.entry(i.job.clone()).or_default();
                ids.push(i.id.clone());
            }
        }
        let busy: HashSet<&str> = self
            .fleet
            .intents
            .values()
            .map(|i| i.job.as_str())
            .collect();
        let since =
            |last: Option<DateTime<Utc>>, every| last.is_none_or(|t| now - t >= delta(every));
        for (name, e) in &self.fleet.jobs {
            let held = self.fleet.instances.count_of(name);
            let view = JobView {
                record: &e.record,
                stopping: e.stopping.as_ref(),
                held,
                live: held - draining.get(name.as_str()).copied().unwrap_or(0),
                busy: busy.contains(name.as_str()),
                due_plan: e.dirty || since(e.last_plan, self.config.replan),
                due_move: since(e.last_migrate_check, self.config.migrate_check),
            };
            let list = match view::need(&view) {
                Need::Nothing => continue,
                Need::Release => &mut t.release,
                Need::Place => &mut t.place,
                Need::Replace => &mut t.replace,
                Need::Grow => &mut t.grow,
                Need::CheckMove => &mut t.check_move,
            };
            list.push(name.clone());
        }
        t
    }

    /// Fresh offers from every configured region, with remembered capacity errors marked
    /// unavailable (re-validation of the plan against what the cloud says now). A spot price
    /// that moved more than 1 % re-checks every running job for a cheaper place.
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
                let old = self.cloud.spot_prices.insert(o.key(), o.price_per_hour);
                price_moved |= old.is_some_and(|p| (p - o.price_per_hour).abs() > 0.01 * p);
            }
            if o.capacity == Capacity::OnDemand {
                self.cloud
                    .on_demand
                    .entry(o.instance_type.name.clone())
                    .or_default()
                    .insert(o.zone.to_string(), o.price_per_hour);
            }
            if self
                .cloud
                .capacity_errors
                .get(&o.key())
                .is_some_and(|t| *t > now)
            {
                o.availability = Availability::Unavailable;
            }
        }
        self.cloud.offers = std::sync::Arc::new(all.clone());
        self.cloud.offers_at = Some(now);
        if price_moved {
            for e in self.fleet.jobs.values_mut() {
                e.last_migrate_check = None;
            }
        }
        Some(all)
    }

    /// The planner's first estimate of what the job will cost (the cost report's plan column),
    /// kept from the first plan after submission, whether the job then starts or waits. Set
    /// here; written with the record's next write (placement), or by [`Self::wait`].
    pub(super) fn remember_plan_estimate(&mut self, job: &str, dollars: f64) {
        if let Some(e) = self
            .fleet
            .jobs
            .get_mut(job)
            .filter(|e| e.record.planned_cost.is_none())
        {
            e.record.planned_cost = Some(dollars);
            e.estimate_unsaved = true;
        }
    }

    /// Persist the prices that changed since the last pass (cost reports bill usage at the
    /// prices that held over it). Offers the cloud marks unavailable still carry its price.
    fn record_prices(&mut self, offers: &[Offer], now: DateTime<Utc>) -> Result<()> {
        let changed: Vec<(String, f64)> = offers
            .iter()
            .map(|o| (o.key(), o.price_per_hour))
            .filter(|(k, p)| self.prices.get(k) != Some(p))
            .collect();
        if !changed.is_empty() {
            self.store.record_prices(now, &changed)?;
            self.prices.extend(changed);
        }
        Ok(())
    }

    /// The job's instances that count toward its fleet, in id order (deterministic).
    pub(super) fn live_of(&self, job: &str) -> Vec<&InstanceRecord> {
        self.fleet
            .instances
            .of_job(job)
            .filter(|i| !i.draining)
            .collect()
    }

    /// Every instance the job holds, draining or not, in id order.
    pub(super) fn held_by(&self, job: &str) -> Vec<InstanceId> {
        self.fleet
            .instances
            .of_job(job)
            .map(|i| i.id.clone())
            .collect()
    }

    /// Mark a job whose work is done finished; terminate what it (or a cancelled one) holds,
    /// once its workers' last reports are in.
    async fn release(&mut self, name: &str, now: DateTime<Utc>) -> Result<()> {
        let Some(e) = self.fleet.jobs.get(name) else {
            return Ok(());
        };
        let r = &e.record;
        let finishing = !r.state.is_final();
        let held = self.held_by(name);
        // A job finishing now ends now: within the grace, its workers saving.
        let ended = finishing
            || matches!(
                r.state,
                JobState::Finished | JobState::Cancelled | JobState::OverBudget
            );
        let in_grace = finishing || r.finished_at.is_some_and(|t| now - t < STOP_GRACE);
        let ending = decide::Ending {
            finishing,
            deadline_at: r.deadline_at,
            submitted_at: r.submitted_at,
            saving: ended && in_grace && self.workers_run_on(name, &held)?,
            held,
            now,
        };
        self.carry_out(name, decide::end(&ending), now).await
    }

    /// Whether a worker of the job's current incarnation still runs on one of `ids` (a job
    /// that ended while its workers run: their agents are told the job is over, and the
    /// training saves on the way out; at the job's end, its final checkpoint, the trained
    /// model, which a terminated instance could cut off mid-write). Its instances are kept
    /// until every worker said it stopped, for at most [`STOP_GRACE`] after the job ended (an
    /// agent that never answers does not hold them longer).
    fn workers_run_on(&self, name: &str, ids: &[InstanceId]) -> Result<bool> {
        if ids.is_empty() {
            return Ok(false);
        }
        let current = self.store.incarnation(name)?;
        Ok(current
            .workers
            .iter()
            .any(|w| w.running && ids.iter().any(|id| id.as_str() == w.instance)))
    }

    /// Drained instances (a notice, a move, a stop; `drained`, by job, from the triage's walk)
    /// whose agent reported its workers stopped are released now, by intent, rather than
    /// billed until the reclaim or the move's end. Those an open move or termination will end
    /// are left to it.
    async fn release_drained(
        &mut self,
        drained: BTreeMap<String, Vec<InstanceId>>,
        now: DateTime<Utc>,
    ) -> Result<()> {
        let leaving: HashSet<&InstanceId> = self
            .fleet
            .intents
            .values()
            .flat_map(|i| match &i.kind {
                tern_cloud::IntentKind::Migrate { from, .. } => from.as_slice(),
                tern_cloud::IntentKind::Terminate { instances } => instances.as_slice(),
                _ => &[],
            })
            .collect();
        let drained: Vec<(String, Vec<InstanceId>)> = drained
            .into_iter()
            .map(|(job, ids)| {
                (
                    job,
                    ids.into_iter().filter(|id| !leaving.contains(id)).collect(),
                )
            })
            .filter(|(_, ids): &(String, Vec<InstanceId>)| !ids.is_empty())
            .collect();
        for (job, ids) in drained {
            let r = self.release_stopped(&job, ids, now).await;
            self.contain(&job, r)?;
        }
        Ok(())
    }

    /// Release those of `ids` (job `job`'s drained nodes) whose workers said they stopped.
    async fn release_stopped(
        &mut self,
        job: &str,
        ids: Vec<InstanceId>,
        now: DateTime<Utc>,
    ) -> Result<()> {
        let current = self.store.incarnation(job)?;
        let stopped: Vec<InstanceId> = ids
            .into_iter()
            .filter(|id| current.worker(id.as_str()).is_some_and(|w| !w.running))
            .collect();
        if stopped.is_empty() {
            return Ok(());
        }
        self.carry_out(job, Decision::Release { ids: stopped }, now)
            .await
    }

    pub(super) fn plan_job(&self, name: &str, now: DateTime<Utc>) -> Option<PlanJob> {
        let e = self.fleet.jobs.get(name)?;
        let loaded = e.loaded.as_ref()?;
        let remaining = (e.record.total_samples - e.record.checkpoint_samples).max(0.0);
        let mut job = loaded.plan_job(e.record.submitted_at, now, remaining);
        // What the job has spent comes off its own total.
        if let Some(total) = &mut job.budget.total_usd {
            *total = (*total - self.spend.of(name)).max(0.0);
        }
        job.model = self.shaped(job.model);
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
        let mut jobs = Vec::new();
        for name in names {
            if let Some(e) = self.fleet.jobs.get_mut(name) {
                e.last_plan = Some(now);
                e.dirty = false;
            }
            let r = self.ready_to_plan(name, offers, now).await;
            if let Some(Some(job)) = self.contain(name, r)? {
                jobs.push(job);
            }
        }
        if jobs.is_empty() {
            return Ok(());
        }
        let names: Vec<&str> = jobs.iter().map(|j| j.name.as_str()).collect();
        let options = self.plan_options(&names);
        let report = solve(jobs, offers.to_vec(), options).await;
        for jp in report.jobs {
            let name = jp.job.clone();
            let r = self
                .take_answer(jp, report.solver_family, offers, now)
                .await;
            self.contain(&name, r)?;
        }
        Ok(())
    }

    /// Job `name` as the joint plan takes it, or `None` when it starts cold, probes, or
    /// cannot be forecast (each carried out here).
    async fn ready_to_plan(
        &mut self,
        name: &str,
        offers: &[Offer],
        now: DateTime<Utc>,
    ) -> Result<Option<PlanJob>> {
        if self.unmeasured(name) && !self.start_cold(name, offers, now).await? {
            return Ok(None);
        }
        if self.probe_if_it_pays(name, offers, now).await? {
            return Ok(None);
        }
        let job = self.plan_job(name, now);
        if job.is_none() {
            let reason = "its spec cannot be forecast (no observations or local_batch)";
            let unplaceable = Decision::Unplaceable {
                reason: reason.into(),
            };
            self.carry_out(name, unplaceable, now).await?;
        }
        Ok(job)
    }

    /// Carry out the joint plan's answer for one job: a placement, or why it waits.
    async fn take_answer(
        &mut self,
        mut jp: JobPlan,
        solver: &'static str,
        offers: &[Offer],
        now: DateTime<Utc>,
    ) -> Result<()> {
        if !jp.placed
            && let Some(best) = self.at_expected_speed(&jp.job, offers, now).await
        {
            jp = best;
        }
        if !jp.placed && self.short_of_own_budget(&jp.job, offers, now).await? {
            return Ok(());
        }
        if !jp.placed && self.held_by_limits(&jp.job, offers, now).await {
            let limit = jp.reason.clone().unwrap_or_else(|| "the limits".into());
            let wait = Decision::Wait(WaitReason::Limit { limit });
            return self.carry_out(&jp.job, wait, now).await;
        }
        self.take_plan(jp, solver, offers, now).await
    }

    /// The planner's options for placing `planned` together: the base, the quota file and
    /// `--fairness`, with what the limits leave ([`super::room`]). Every plan the controller
    /// makes reads them, and `tern plan` builds the same from the same file.
    pub(super) fn plan_options(&self, planned: &[&str]) -> PlanOptions {
        let base = self
            .config
            .limits
            .plan_options(self.config.plan.clone(), self.config.fairness);
        let planned: Vec<_> = planned.iter().filter_map(|j| self.job_use(j)).collect();
        self.room.plan_options(base, &planned)
    }

    /// `job` (of `name`) planned alone on its allowed offers with no quota or team budget:
    /// what it would do if no limit held it back.
    async fn plan_without_limits(
        &self,
        name: &str,
        job: PlanJob,
        offers: &[Offer],
    ) -> Option<JobPlan> {
        let offers = self.allowed_offers(name, offers).into_owned();
        let free = PlanOptions {
            quotas: Vec::new(),
            team_budgets: Default::default(),
            ..self.config.plan.clone()
        };
        solve_alone(job, offers, free).await
    }

    /// Whether the limits alone keep `name` unplaced: planned alone without them, it places.
    async fn held_by_limits(&self, name: &str, offers: &[Offer], now: DateTime<Utc>) -> bool {
        if !self.room.limits_anything() {
            return false;
        }
        let Some(job) = self.plan_job(name, now) else {
            return false;
        };
        self.plan_without_limits(name, job, offers)
            .await
            .is_some_and(|j| j.placed)
    }

    /// A job that has run and that the rest of its own budget cannot finish (its plan without
    /// that budget costs more than is left) ends `over-budget` with the figures. Whether it
    /// did.
    async fn short_of_own_budget(
        &mut self,
        name: &str,
        offers: &[Offer],
        now: DateTime<Utc>,
    ) -> Result<bool> {
        let spent = self.spend.of(name);
        let Some(total) = self.job(name).and_then(|r| r.spec.budget.total_usd) else {
            return Ok(false);
        };
        let Some(mut job) = self.plan_job(name, now).filter(|_| spent > 0.0) else {
            return Ok(false);
        };
        job.budget.total_usd = None;
        let Some(rest) = self
            .plan_without_limits(name, job, offers)
            .await
            .filter(|j| j.placed)
            .and_then(|j| j.choice)
            .map(|c| c.expected_cost)
        else {
            return Ok(false);
        };
        let Some(end) = super::budget::short_of_own(name, spent, rest, total) else {
            return Ok(false);
        };
        self.carry_out(name, end, now).await?;
        Ok(true)
    }

    /// A job planned on its hint whose deadline no plan meets at the hint's pessimistic
    /// bound: the plan at its expected speed instead (the best it can do; the plan's event
    /// says so). `None` for any other job.
    async fn at_expected_speed(
        &mut self,
        name: &str,
        offers: &[Offer],
        now: DateTime<Utc>,
    ) -> Option<JobPlan> {
        let e = self.fleet.jobs.get_mut(name)?;
        let why = e.cold_plan.as_mut()?;
        const AT_EXPECTED: &str = "no plan meets the deadline at that bound, so it is planned at the hint's expected speed";
        if !why.contains(AT_EXPECTED) {
            *why = format!("{why}; {AT_EXPECTED}");
        }
        let job = self.plan_job(name, now)?;
        let offers = self.allowed_offers(name, offers).into_owned();
        let options = self.plan_options(&[name]);
        solve_at_expected(job, offers, options).await
    }

    /// Act on the planner's answer for one job: launch it, let it wait for spot, or say why
    /// it cannot be placed.
    async fn take_plan(
        &mut self,
        jp: JobPlan,
        solver: &str,
        offers: &[Offer],
        now: DateTime<Utc>,
    ) -> Result<()> {
        let choice = match decide::chosen(&jp) {
            Ok(c) => c.clone(),
            Err(unplaceable) => return self.carry_out(&jp.job, unplaceable, now).await,
        };
        let offers = &self.allowed_offers(&jp.job, offers)[..];
        let Some(offer) = offers.iter().find(|o| o.key() == choice.offer).cloned() else {
            return Ok(());
        };
        self.remember_plan_estimate(&jp.job, choice.expected_cost);
        let policy = self.ask_policy(&jp.job, &offer, choice.nodes, now);
        let shape = offer.instance_type.name.clone();
        let view = decide::Launching {
            gang: self.is_gang(&jp.job),
            nodes: choice.nodes,
            spot_wait: self.spot_wait(&jp.job, choice.finish_high_h, now),
            on_demand: match policy.as_ref().map(|c| c.step.placement) {
                Some(tern_policies::deadline::Placement::OnDemand) => {
                    let pick = self.on_demand_pool(&jp.job, offers, &shape, None);
                    pick.into_iter().cloned().collect()
                }
                _ => Vec::new(),
            },
            planned: offer,
            offers,
            policy,
        };
        let mut decision = decide::launch(&view);
        if let Decision::Launch {
            offers: list,
            why,
            planned,
            ..
        } = &mut decision
        {
            let offer = &list[0];
            *planned = Some(Box::new(Placement {
                solver: solver.to_string(),
                nodes: choice.nodes,
                instance_type: choice.instance_type.clone(),
                capacity: offer.capacity,
                zone: offer.zone.to_string(),
                expected_cost: choice.expected_cost,
                egress_usd: choice.egress_usd,
                finish_h: choice.finish_h,
                deadline_h: jp.deadline_h,
                versus_cheapest: jp.versus_cheapest_per_accelerator_hour.clone(),
                policy: why.clone(),
                basis: self.basis_note(&jp.job, &choice.accelerator, choice.workers, choice.nodes),
            }));
        }
        self.carry_out(&jp.job, decision, now).await
    }
}

/// The MILP runs on a blocking thread: a solve can take seconds, and the async workers serve
/// the API meanwhile.
pub(super) async fn solve(
    jobs: Vec<PlanJob>,
    offers: Vec<Offer>,
    options: PlanOptions,
) -> PlanReport {
    let run = move || tern_plan::plan(&jobs, &offers, &options);
    match tokio::runtime::Handle::try_current() {
        Ok(_) => match tokio::task::spawn_blocking(run).await {
            Ok(report) => report,
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        },
        Err(_) => run(),
    }
}

/// `job`'s plan alone at its expected speed (pessimistic = expected), if that places it: the
/// best a job can do when no plan meets its deadline at its pessimistic bound.
pub(super) async fn solve_at_expected(
    mut job: PlanJob,
    offers: Vec<Offer>,
    options: PlanOptions,
) -> Option<JobPlan> {
    job.model = std::sync::Arc::new(super::Exact(job.model));
    solve(vec![job], offers, options)
        .await
        .jobs
        .into_iter()
        .next()
        .filter(|j| j.placed)
}

/// `job`'s plan alone; where no plan meets its deadline at the pessimistic bound, the plan at
/// its expected speed ([`solve_at_expected`]), its reason saying so; where neither places it,
/// the planner's answer with its reason.
pub(super) async fn solve_alone(
    job: PlanJob,
    offers: Vec<Offer>,
    options: PlanOptions,
) -> Option<JobPlan> {
    let first = solve(vec![job.clone()], offers.clone(), options.clone())
        .await
        .jobs
        .into_iter()
        .next()?;
    if first.placed {
        return Some(first);
    }
    let Some(best) = solve_at_expected(job, offers, options).await else {
        return Some(first);
    };
    Some(JobPlan {
        reason: Some(format!(
            "no plan meets the deadline at the pessimistic bound ({}); planned at the expected speed",
            first.reason.unwrap_or_default()
        )),
        ..best
    })
}
