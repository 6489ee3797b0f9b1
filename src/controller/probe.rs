//! Cold start: a job whose step time nobody has measured runs a short, bounded probe on the
//! cheapest shape that holds its smallest worker count, the agents' real step times refit its
//! forecast, and then it is planned like any other job, from the probe's checkpoint.
//!
//! The decisions are pure functions ([`probe_offer`], [`verdict`], [`start_choice`]); the
//! controller carries them out in [`Controller::start_probe`] and [`Controller::settle_probes`].

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tern_cloud::{Availability, Capacity, IntentKind, Offer, ProbeSpec};
use tern_plan::{JobPlan, Throughput, ThroughputModel};

use super::events::Event;
use super::{Controller, Result, fallbacks};
use crate::store::{InstanceRecord, ProbeRecord};
use tern_cloud::InstanceState;

/// A probe's bounds: seconds of running capacity and dollars.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProbeBounds {
    pub max_seconds: f64,
    pub max_usd: f64,
}

impl Default for ProbeBounds {
    /// 15 minutes or $10: a few hundred steps of most jobs, and a minute of the agent's reports
    /// many times over, on capacity that costs $40/h at most before the money bound bites.
    fn default() -> Self {
        ProbeBounds {
            max_seconds: 900.0,
            max_usd: 10.0,
        }
    }
}

impl ProbeBounds {
    /// The spec's `[probe]` over the controller's defaults.
    pub fn of(spec: &ProbeSpec, defaults: ProbeBounds) -> ProbeBounds {
        ProbeBounds {
            max_seconds: spec.max_seconds.unwrap_or(defaults.max_seconds),
            max_usd: spec.max_usd.unwrap_or(defaults.max_usd),
        }
    }
}

/// Reports of a measured step after which a probe has what it came for: the agent reports the
/// mean step of each interval, so three agree on the step time within their own noise.
pub const MIN_REPORTS: usize = 3;

/// Whether `offer` carries one of `accelerators` (the planner's matching: the name, any case).
fn carries(offer: &Offer, accelerators: &[String]) -> bool {
    offer
        .accelerator()
        .is_some_and(|a| accelerators.iter().any(|n| n.eq_ignore_ascii_case(&a.name)))
}

/// Where a probe runs: the cheapest available offer of an allowed accelerator, on as few nodes
/// as hold `min_workers` accelerators (one node where any shape holds them), on-demand only
/// when `on_demand` (a deadline that cannot afford a reclaimed probe). Ties go to the first
/// offer key, so the choice is deterministic.
pub fn probe_offer(
    offers: &[Offer],
    accelerators: &[String],
    min_workers: u32,
    on_demand: bool,
) -> Option<(Offer, u32)> {
    offers
        .iter()
        .filter(|o| !matches!(o.availability, Availability::Unavailable))
        .filter(|o| carries(o, accelerators) && o.accelerator_units() > 0)
        .filter(|o| !on_demand || o.capacity == Capacity::OnDemand)
        .map(|o| (o, min_workers.max(1).div_ceil(o.accelerator_units())))
        .min_by(|(a, na), (b, nb)| {
            (*na > 1)
                .cmp(&(*nb > 1))
                .then(
                    (a.price_per_hour * f64::from(*na))
                        .total_cmp(&(b.price_per_hour * f64::from(*nb))),
                )
                .then_with(|| a.key().cmp(&b.key()))
        })
        .map(|(o, n)| (o.clone(), n))
}

/// Why a probe ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// [`MIN_REPORTS`] measured steps came in.
    Measured,
    /// Its time bound (or its money bound, whichever comes first) is reached by the next pass.
    Bound,
}

impl Ended {
    pub fn as_str(self) -> &'static str {
        match self {
            Ended::Measured => "measured",
            Ended::Bound => "bound reached",
        }
    }
}

/// What a pass does with an open probe.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Verdict {
    /// Keep probing; look again within this long (before the bound).
    Continue(Duration),
    End(Ended),
}

/// Seconds a probe may run: its time bound, or what its money buys at the probe's rate.
pub fn limit_seconds(p: &ProbeRecord) -> f64 {
    let rate = p.price_per_hour * f64::from(p.nodes.max(1));
    let by_money = if rate > 0.0 {
        p.max_usd / rate * 3600.0
    } else {
        f64::INFINITY
    };
    p.max_seconds.min(by_money).max(0.0)
}

/// Whether an open probe ends at this pass. `reports`: measured steps on the probe's
/// accelerator so far; `gap_s`: the longest a pass may follow this one. A probe ends at the
/// last pass before its bound, never after it: it ends now when the next pass could come too
/// late, and otherwise asks for a pass no later than the bound minus the gap. The bound counts
/// from when the probe's capacity ran (`running_at`; billing starts there).
pub fn verdict(p: &ProbeRecord, reports: usize, now: DateTime<Utc>, gap_s: f64) -> Verdict {
    if reports >= MIN_REPORTS {
        return Verdict::End(Ended::Measured);
    }
    let limit = limit_seconds(p);
    let ran = p.seconds(now);
    if ran + gap_s >= limit {
        return Verdict::End(Ended::Bound);
    }
    Verdict::Continue(Duration::from_secs_f64((limit - gap_s - ran).max(0.0)))
}

/// How a job nobody has measured starts.
#[derive(Debug, Clone, PartialEq)]
pub enum Start {
    /// Probe, on-demand only when the deadline cannot afford a reclaimed probe.
    Probe { on_demand: bool, why: String },
    /// Plan now on the hint's pessimistic bound (no room for a probe, or probing is off).
    Plan { why: String },
    /// Nothing to plan on and probing is off.
    Refuse(String),
}

/// The pure choice between probing and planning on the hint. `hinted`: the spec has a hint;
/// `enabled`: probing is allowed; `deadline`: the job has one; `after_probe`: whether a plan
/// that starts only after the longest probe (and gives the probe's progress no credit) still
/// meets the deadline at the hint's pessimistic bound (`None` without a hint or a deadline).
pub fn start_choice(
    hinted: bool,
    enabled: bool,
    deadline: bool,
    after_probe: Option<bool>,
) -> Start {
    match (enabled, hinted, deadline, after_probe) {
        (false, true, _, _) => Start::Plan {
            why: "probing is off for this job: planned on its hint".into(),
        },
        (false, false, _, _) => Start::Refuse(
            "no step time measured, no [hint], and [probe] enabled = false: nothing to plan on"
                .into(),
        ),
        (true, true, true, Some(false)) => Start::Plan {
            why: "the deadline leaves no room for a probe: planned on the hint's pessimistic bound"
                .into(),
        },
        (true, false, true, _) => Start::Probe {
            on_demand: true,
            why: "no step time measured and no hint; on-demand, since the deadline cannot \
                  afford a reclaimed probe"
                .into(),
        },
        _ => Start::Probe {
            on_demand: false,
            why: "no step time measured".into(),
        },
    }
}

impl Controller {
    /// Whether job `name` starts with a probe rather than a plan: nobody has measured it (or
    /// its probe ended before a step was measured).
    pub(super) fn unmeasured(&self, name: &str) -> bool {
        self.fleet
            .jobs
            .get(name)
            .and_then(|e| e.loaded.as_ref())
            .is_some_and(|l| !l.measured())
    }

    /// Place a job nobody has measured: a probe, or a plan on its hint when the deadline
    /// leaves no room for one (said so in the plan's event). True when the job goes on to the
    /// planner.
    pub(super) async fn start_cold(
        &mut self,
        name: &str,
        offers: &[Offer],
        now: DateTime<Utc>,
    ) -> Result<bool> {
        let Some(e) = self.fleet.jobs.get(name) else {
            return Ok(false);
        };
        let spec = &e.record.spec;
        let hinted = spec.hint.is_some();
        let enabled = spec.probe.enabled != Some(false);
        let deadline = e.record.deadline_at.is_some();
        let bounds = ProbeBounds::of(&spec.probe, self.config.probe);
        let after_probe = if hinted && deadline && enabled {
            Some(self.fits_after(name, offers, bounds.max_seconds, now).await)
        } else {
            None
        };
        match start_choice(hinted, enabled, deadline, after_probe) {
            Start::Probe { on_demand, why } => {
                self.start_probe(name, offers, on_demand, bounds, why, now)
                    .await?;
                Ok(false)
            }
            Start::Plan { why } => {
                let Some(e) = self.fleet.jobs.get_mut(name) else {
                    return Ok(false);
                };
                if e.cold_plan.is_none() {
                    e.cold_plan = Some(why.clone());
                    self.emit(
                        now,
                        Event::ColdStart {
                            job: name.to_string(),
                            why,
                        },
                    )?;
                }
                Ok(true)
            }
            Start::Refuse(why) => {
                self.mark_unplaceable(name, &why, now)?;
                Ok(false)
            }
        }
    }

    /// A measured job with a deadline that was never probed: whether a probe of an allowed
    /// accelerator whose speed is still a prior is expected to cost less than planning now
    /// ([`Self::second_probe`]); starts it when it is. True when it started one.
    pub(super) async fn probe_if_it_pays(
        &mut self,
        name: &str,
        offers: &[Offer],
        now: DateTime<Utc>,
    ) -> Result<bool> {
        let Some(e) = self.fleet.jobs.get(name) else {
            return Ok(false);
        };
        if e.record.probe.is_some()
            || e.second_probe_weighed
            || e.record.deadline_at.is_none()
            || e.record.spec.accelerators.len() < 2
            || e.record.spec.probe.enabled == Some(false)
            || self.unmeasured(name)
        {
            return Ok(false);
        }
        // Weighed once per job (each weighing solves the plan six times per accelerator).
        if let Some(e) = self.fleet.jobs.get_mut(name) {
            e.second_probe_weighed = true;
        }
        let Some((value, offer, nodes)) = self.second_probe(name, offers, None, now).await else {
            return Ok(false);
        };
        let Some(e) = self.fleet.jobs.get(name) else {
            return Ok(false);
        };
        let bounds = ProbeBounds::of(&e.record.spec.probe, self.config.probe);
        let why = format!(
            "{} is still a prior, and measuring it is expected to pay: ${:.2} with a probe \
             (${:.2} of it) against ${:.2} without",
            value.accelerator, value.after_usd, value.probe_usd, value.now_usd
        );
        let allowed = self.allowed_offers(name, offers).into_owned();
        self.launch_probe(name, &allowed, offer, nodes, bounds, why, now)
            .await?;
        Ok(true)
    }

    /// What a plan's event says of the forecast it stands on, when that is not a measurement.
    pub(super) fn basis_note(
        &self,
        name: &str,
        accelerator: &str,
        gpus: u32,
        nodes: u32,
    ) -> Option<String> {
        let e = self.fleet.jobs.get(name)?;
        let (basis, p) = e.loaded.as_ref()?.forecast_at(accelerator, gpus, nodes);
        if basis == crate::jobs::ForecastBasis::Measured {
            return None;
        }
        let mut note = match p {
            Some(p) => format!(
                "{basis}, {:.3} s/step ({:.3}–{:.3} at 90 %)",
                p.step_s, p.step_low_s, p.step_high_s
            ),
            None => basis.to_string(),
        };
        if let Some(why) = &e.cold_plan {
            note = format!("{note}; {why}");
        }
        Some(note)
    }

    /// Whether the job, started only after a probe of `probe_s` (its progress not counted),
    /// still has a plan that meets the deadline at the hint's pessimistic bound.
    async fn fits_after(
        &self,
        name: &str,
        offers: &[Offer],
        probe_s: f64,
        now: DateTime<Utc>,
    ) -> bool {
        let Some(mut job) = self.plan_job(name, now) else {
            return false;
        };
        let restart_s = self.restart_hours(name) * 3600.0;
        job.deadline_s = job.deadline_s.map(|d| d - probe_s - restart_s);
        if job.deadline_s.is_some_and(|d| d <= 0.0) {
            return false;
        }
        let offers = self.allowed_offers(name, offers).into_owned();
        let report = super::provision::solve(vec![job], offers, self.config.plan.clone()).await;
        report.jobs.first().is_some_and(|j| j.placed)
    }

    async fn start_probe(
        &mut self,
        name: &str,
        offers: &[Offer],
        on_demand: bool,
        bounds: ProbeBounds,
        why: String,
        now: DateTime<Utc>,
    ) -> Result<()> {
        let allowed = self.allowed_offers(name, offers).into_owned();
        let Some(e) = self.fleet.jobs.get(name) else {
            return Ok(());
        };
        let spec = &e.record.spec;
        let Some((offer, nodes)) =
            probe_offer(&allowed, &spec.accelerators, spec.workers.min, on_demand)
        else {
            return self.wait(name, super::events::WaitReason::NoCapacity, now);
        };
        self.launch_probe(name, &allowed, offer, nodes, bounds, why, now)
            .await
    }

    /// Launch a probe of `nodes` × `offer` for job `name` and record it.
    #[allow(clippy::too_many_arguments)]
    async fn launch_probe(
        &mut self,
        name: &str,
        allowed: &[Offer],
        offer: Offer,
        nodes: u32,
        bounds: ProbeBounds,
        why: String,
        now: DateTime<Utc>,
    ) -> Result<()> {
        let Some(e) = self.fleet.jobs.get(name) else {
            return Ok(());
        };
        let spec = &e.record.spec;
        let probe = ProbeRecord {
            accelerator: offer
                .accelerator()
                .map(|a| a.name.clone())
                .unwrap_or_default(),
            instance_type: offer.instance_type.name.clone(),
            offer: offer.key(),
            nodes,
            price_per_hour: offer.price_per_hour,
            max_seconds: bounds.max_seconds,
            max_usd: bounds.max_usd,
            started_at: now,
            running_at: None,
            probing_since: None,
            ended_at: None,
            outcome: None,
        };
        let gang = spec.gang;
        if let Some(e) = self.fleet.jobs.get_mut(name) {
            e.record.target_offer = Some(offer.key());
            e.record.target_count = nodes;
            e.record.planned_count = nodes;
            e.record.probe = Some(probe);
            e.waiting = None;
            e.estimate_unsaved = false;
            self.store.update_job(&e.record, now)?;
        }
        self.emit(
            now,
            Event::Probing {
                job: name.to_string(),
                nodes,
                instance_type: offer.instance_type.name.clone(),
                capacity: offer.capacity,
                zone: offer.zone.clone(),
                max_seconds: bounds.max_seconds,
                max_usd: bounds.max_usd,
                why,
            },
        )?;
        let mut list = vec![offer.clone()];
        if !gang {
            list.extend(fallbacks(allowed, &offer));
        }
        let kind = IntentKind::Launch {
            offers: list,
            count: nodes,
        };
        self.act(name, kind, now).await
    }

    /// Open probes whose capacity runs: which end at this pass (they measured enough, or
    /// the next pass could come after their bound), and how soon the others need a pass.
    pub(super) fn due_probes(
        &mut self,
        now: DateTime<Utc>,
    ) -> Result<(Vec<String>, Option<Duration>)> {
        let open: Vec<String> = self
            .fleet
            .jobs
            .iter()
            .filter(|(_, e)| !e.record.state.is_final())
            .filter(|(_, e)| e.record.probe.as_ref().is_some_and(ProbeRecord::is_open))
            .map(|(n, _)| n.clone())
            .collect();
        let mut soonest: Option<Duration> = None;
        let mut ending = Vec::new();
        for name in open {
            let Some(p) = self.running_probe(&name, now)? else {
                continue;
            };
            let reports = self
                .fleet
                .jobs
                .get(&name)
                .and_then(|e| e.loaded.as_ref())
                .map_or(0, |l| l.observations_on(&p.accelerator));
            match verdict(&p, reports, now, self.config.pass_gap.as_secs_f64()) {
                Verdict::Continue(d) => soonest = Some(soonest.map_or(d, |s| s.min(d))),
                Verdict::End(why) => {
                    if let Some(e) = self.fleet.jobs.get_mut(&name) {
                        e.ending_probe = Some(why);
                    }
                    ending.push(name);
                }
            }
        }
        Ok((ending, soonest))
    }

    /// End the probes [`Self::due_probes`] found due, and plan their jobs.
    pub(super) async fn settle_probes(
        &mut self,
        names: &[String],
        offers: &[Offer],
        now: DateTime<Utc>,
    ) -> Result<()> {
        for name in names {
            let Some(e) = self.fleet.jobs.get_mut(name) else {
                continue;
            };
            let (Some(why), Some(p)) = (e.ending_probe.take(), e.record.probe.clone()) else {
                continue;
            };
            self.end_probe(name, p, why, offers, now).await?;
        }
        Ok(())
    }

    /// The job's open probe once its capacity runs, its clock started at the first pass that
    /// saw it running (written then, so a restart keeps it).
    fn running_probe(&mut self, name: &str, now: DateTime<Utc>) -> Result<Option<ProbeRecord>> {
        let Some(shape) = self
            .fleet
            .jobs
            .get(name)
            .and_then(|e| e.record.probe.as_ref())
            .map(|p| p.instance_type.clone())
        else {
            return Ok(None);
        };
        // The probe's own shape: a second probe's job still runs on the first's meanwhile.
        let running = self
            .live_of(name)
            .iter()
            .any(|i| i.state == InstanceState::Running && i.offer.instance_type.name == shape);
        let Some(e) = self.fleet.jobs.get_mut(name) else {
            return Ok(None);
        };
        let Some(p) = e.record.probe.as_mut().filter(|p| p.is_open()) else {
            return Ok(None);
        };
        if !running {
            return Ok(None);
        }
        if p.running_at.is_none() {
            // First seen running: the bound counts from here.
            p.running_at = Some(now);
            let p = p.clone();
            self.store.update_job(&e.record, now)?;
            return Ok(Some(p));
        }
        Ok(Some(p.clone()))
    }

    /// End a probe: record it, then plan the job on what was measured, keeping the probe's
    /// capacity when the plan chooses it and moving from it otherwise.
    async fn end_probe(
        &mut self,
        name: &str,
        mut p: ProbeRecord,
        why: Ended,
        offers: &[Offer],
        now: DateTime<Utc>,
    ) -> Result<()> {
        let seconds = p.seconds(now);
        let usd = seconds / 3600.0 * p.price_per_hour * f64::from(p.nodes);
        if p.probing_since.is_none()
            && !self.unmeasured(name)
            && let Some(next) = self
                .second_probe(name, offers, Some(&p.accelerator), now)
                .await
        {
            return self.probe_next(name, p, why, next, offers, now).await;
        }
        let plan = if self.unmeasured(name) {
            None
        } else {
            self.plan_one(name, offers, now).await
        };
        let fleet: Vec<InstanceRecord> = self.live_of(name).into_iter().cloned().collect();
        let outcome = match plan
            .as_ref()
            .and_then(|jp| jp.choice.as_ref().filter(|_| jp.placed))
        {
            None if self.unmeasured(name) => {
                "no step was measured: the job keeps running on the probe's capacity".to_string()
            }
            None => format!(
                "no plan meets the job's constraints now ({}); it keeps the probe's capacity",
                plan.and_then(|jp| jp.reason).unwrap_or_default()
            ),
            Some(c) if fleet.first().is_some_and(|i| i.offer.key() == c.offer) => {
                self.retarget(name, &c.offer, c.nodes, now)?;
                format!(
                    "the plan keeps {}× {} (expected ${:.2})",
                    c.nodes, c.instance_type, c.expected_cost
                )
            }
            Some(c) => {
                let c = c.clone();
                self.move_from_probe(name, &fleet, &c, offers, now).await?;
                format!(
                    "moving to {}× {} {} (expected ${:.2}) from the probe's checkpoint",
                    c.nodes, c.instance_type, c.capacity, c.expected_cost
                )
            }
        };
        p.ended_at = Some(now);
        p.outcome = Some(outcome.clone());
        if let Some(e) = self.fleet.jobs.get_mut(name) {
            e.record.probe = Some(p);
            e.last_migrate_check = None;
            self.store.update_job(&e.record, now)?;
        }
        self.emit(
            now,
            Event::Probed {
                job: name.to_string(),
                why: why.as_str().to_string(),
                seconds,
                usd,
                outcome,
            },
        )
    }

    /// End probe `p` and start one of another accelerator, moving the job there from the
    /// first probe's checkpoint; both are one window of probe spend.
    async fn probe_next(
        &mut self,
        name: &str,
        mut p: ProbeRecord,
        why: Ended,
        (value, offer, nodes): (SecondProbe, Offer, u32),
        offers: &[Offer],
        now: DateTime<Utc>,
    ) -> Result<()> {
        let seconds = p.seconds(now);
        let usd = spent(&p, now);
        let outcome = format!(
            "probing {} next: expected ${:.2} with it (${:.2} of probe) against ${:.2} without",
            value.accelerator, value.after_usd, value.probe_usd, value.now_usd
        );
        let since = p.probing_since.or(p.running_at).unwrap_or(now);
        p.ended_at = Some(now);
        p.outcome = Some(outcome.clone());
        let bounds = ProbeBounds {
            max_seconds: p.max_seconds,
            max_usd: p.max_usd,
        };
        let next = ProbeRecord {
            accelerator: value.accelerator.clone(),
            instance_type: offer.instance_type.name.clone(),
            offer: offer.key(),
            nodes,
            price_per_hour: offer.price_per_hour,
            max_seconds: bounds.max_seconds,
            max_usd: bounds.max_usd,
            started_at: now,
            running_at: None,
            probing_since: Some(since),
            ended_at: None,
            outcome: None,
        };
        let fleet: Vec<InstanceRecord> = self.live_of(name).into_iter().cloned().collect();
        if let Some(e) = self.fleet.jobs.get_mut(name) {
            e.record.probe = Some(next);
            self.store.update_job(&e.record, now)?;
        }
        self.emit(
            now,
            Event::Probed {
                job: name.to_string(),
                why: why.as_str().to_string(),
                seconds,
                usd,
                outcome,
            },
        )?;
        self.emit(
            now,
            Event::Probing {
                job: name.to_string(),
                nodes,
                instance_type: offer.instance_type.name.clone(),
                capacity: offer.capacity,
                zone: offer.zone.clone(),
                max_seconds: bounds.max_seconds,
                max_usd: bounds.max_usd,
                why: format!(
                    "{} is still a prior, and measuring it is expected to pay: ${:.2} with a \
                     probe against ${:.2} without",
                    value.accelerator, value.after_usd, value.now_usd
                ),
            },
        )?;
        let allowed = self.allowed_offers(name, offers).into_owned();
        let mut list = vec![offer.clone()];
        let gang = self
            .fleet
            .jobs
            .get(name)
            .is_some_and(|e| e.record.spec.gang);
        if !gang {
            list.extend(fallbacks(&allowed, &offer));
        }
        let kind = IntentKind::Migrate {
            from: fleet.iter().map(|i| i.id.clone()).collect(),
            to: list,
            count: nodes,
        };
        self.act(name, kind, now).await
    }

    /// The planner's answer for one job alone, on the allowed offers.
    /// Where no plan meets the deadline at the pessimistic bound, the plan at the expected
    /// speed (the best the job can do; its reason says so).
    async fn plan_one(&self, name: &str, offers: &[Offer], now: DateTime<Utc>) -> Option<JobPlan> {
        let job = self.plan_job(name, now)?;
        let offers = self.allowed_offers(name, offers).into_owned();
        let opts = self.config.plan.clone();
        let first = super::provision::solve(vec![job.clone()], offers.clone(), opts.clone())
            .await
            .jobs
            .into_iter()
            .next()?;
        if first.placed {
            return Some(first);
        }
        let mut exact = job;
        exact.model = Arc::new(super::Exact(exact.model));
        let best = super::provision::solve(vec![exact], offers, opts)
            .await
            .jobs
            .into_iter()
            .next()
            .filter(|j| j.placed)?;
        Some(JobPlan {
            reason: Some(format!(
                "no plan meets the deadline at the pessimistic bound ({}); planned at the expected speed",
                first.reason.unwrap_or_default()
            )),
            ..best
        })
    }

    /// The job aims at `nodes` of `offer` from now on (the probe's own capacity kept).
    fn retarget(&mut self, name: &str, offer: &str, nodes: u32, now: DateTime<Utc>) -> Result<()> {
        if let Some(e) = self.fleet.jobs.get_mut(name) {
            e.record.target_offer = Some(offer.to_string());
            e.record.target_count = nodes;
            e.record.planned_count = nodes;
            self.store.update_job(&e.record, now)?;
        }
        Ok(())
    }

    /// Move the whole probe fleet onto the plan's choice: the new nodes come up, the job
    /// checkpoints, the probe's nodes go (a migration; the job is retargeted when it ends).
    async fn move_from_probe(
        &mut self,
        name: &str,
        fleet: &[InstanceRecord],
        choice: &tern_plan::Config,
        offers: &[Offer],
        now: DateTime<Utc>,
    ) -> Result<()> {
        let allowed = self.allowed_offers(name, offers).into_owned();
        let Some(to) = allowed.iter().find(|o| o.key() == choice.offer).cloned() else {
            return Ok(());
        };
        let gang = self
            .fleet
            .jobs
            .get(name)
            .is_some_and(|e| e.record.spec.gang);
        let from_rate: f64 = fleet.iter().map(|i| i.offer.price_per_hour).sum();
        let lead = fleet.first().map(|i| i.offer.clone());
        let work_h = self
            .throughput(name, &to, choice.nodes)
            .map_or(0.0, |(expected, _)| self.work_hours(name, expected));
        if let Some(lead) = lead {
            self.emit(
                now,
                Event::Migrating {
                    job: name.to_string(),
                    moved: fleet.len() as u32,
                    of: fleet.len() as u32,
                    from_capacity: lead.capacity,
                    from_price: lead.price_per_hour,
                    from_zone: lead.zone.clone(),
                    to_capacity: to.capacity,
                    to_price: to.price_per_hour,
                    to_zone: to.zone.clone(),
                    net_saving: 0.0,
                    work_h,
                    budget: 1.0,
                    policy: Some(format!(
                        "the probe measured the job; the plan wants {}× {} instead of {:.2} $/h",
                        choice.nodes, choice.instance_type, from_rate
                    )),
                },
            )?;
        }
        let mut list = vec![to.clone()];
        if !gang {
            list.extend(fallbacks(&allowed, &to));
        }
        let kind = IntentKind::Migrate {
            from: fleet.iter().map(|i| i.id.clone()).collect(),
            to: list,
            count: choice.nodes,
        };
        self.act(name, kind, now).await
    }
}

/// Dollars a probe spent so far.
pub fn spent(p: &ProbeRecord, now: DateTime<Utc>) -> f64 {
    p.seconds(now) / 3600.0 * p.price_per_hour * f64::from(p.nodes)
}

/// Quintile midpoints of a standard normal (p = 0.1, 0.3, 0.5, 0.7, 0.9): five equally likely
/// outcomes of what a probe could measure, for the expected cost of probing.
const QUINTILES: [f64; 5] = [-1.2816, -0.5244, 0.0, 0.5244, 1.2816];

/// The job's model with one accelerator's speed as a probe there might find it: its expected
/// throughput scaled by `factor`, and as narrow a pessimistic bound as a measurement gives
/// (`narrow`: pessimistic ÷ expected of a measured accelerator).
#[derive(Debug)]
struct AsMeasured {
    inner: Arc<dyn ThroughputModel>,
    accelerator: String,
    factor: f64,
    narrow: f64,
}

impl ThroughputModel for AsMeasured {
    fn throughput(&self, accelerator: &str, per_node: u32, nodes: u32) -> Option<Throughput> {
        let t = self.inner.throughput(accelerator, per_node, nodes)?;
        if !accelerator.eq_ignore_ascii_case(&self.accelerator) {
            return Some(t);
        }
        let expected = t.expected * self.factor;
        Some(Throughput {
            expected,
            pessimistic: expected * self.narrow,
            prior: false,
        })
    }
}

/// What probing a second accelerator is worth, by expected cost.
#[derive(Debug, Clone, PartialEq)]
pub struct SecondProbe {
    pub accelerator: String,
    /// Expected cost of going on with the plan made now, over what the probe could find.
    pub now_usd: f64,
    /// Expected cost of the plan after the probe (over five equally likely outcomes of what it
    /// measures), plus the probe's own cost at its bound.
    pub after_usd: f64,
    pub probe_usd: f64,
}

impl SecondProbe {
    /// Probing pays when it is expected to save more than 1 % (or a dollar) of the plan.
    pub fn pays(&self) -> bool {
        self.after_usd < self.now_usd - (0.01 * self.now_usd).max(1.0)
    }
}

impl Controller {
    /// Expected cost of `job`'s plan and the accelerator it chooses; where no plan meets its
    /// deadline at the pessimistic bound, of the plan at its expected speed (what the
    /// controller would then run). `None` when neither places it.
    async fn plan_cost(&self, job: &tern_plan::PlanJob, offers: &[Offer]) -> Option<(f64, String)> {
        let placed = |r: tern_plan::PlanReport| {
            r.jobs
                .into_iter()
                .next()
                .and_then(|j| j.choice.filter(|_| j.placed))
                .map(|c| (c.expected_cost, c.accelerator))
        };
        let opts = self.config.plan.clone();
        let r = super::provision::solve(vec![job.clone()], offers.to_vec(), opts.clone()).await;
        if let Some(c) = placed(r) {
            return Some(c);
        }
        let mut exact = job.clone();
        exact.model = Arc::new(super::Exact(job.model.clone()));
        placed(super::provision::solve(vec![exact], offers.to_vec(), opts).await)
    }

    /// Whether a probe of another allowed accelerator, whose speed is still a prior, is
    /// expected to cost less than going on without it (`measured`: the accelerator just
    /// measured, else any the job was measured on). Decided by expected cost, over five equally
    /// likely speeds the probe could find: the plan made now, run at that speed, against the
    /// plan made knowing it, plus the probe at its bound. It pays when the answer could
    /// change the plan by more than the probe costs: a deadline the prior's pessimistic bound
    /// rules the accelerator out of, or a choice between accelerators the prior cannot
    /// settle.
    async fn second_probe(
        &self,
        name: &str,
        offers: &[Offer],
        measured: Option<&str>,
        now: DateTime<Utc>,
    ) -> Option<(SecondProbe, Offer, u32)> {
        let e = self.fleet.jobs.get(name)?;
        let loaded = e.loaded.clone()?;
        e.record.deadline_at?;
        let job = self.plan_job(name, now)?;
        let allowed = self.allowed_offers(name, offers).into_owned();
        let (now_usd, now_on) = self.plan_cost(&job, &allowed).await?;
        // How narrow a measurement leaves the bound: as on the accelerator measured.
        let measured = measured.map(str::to_string).or_else(|| {
            e.record
                .spec
                .accelerators
                .iter()
                .find(|a| loaded.forecast_at(a, 1, 1).0 == crate::jobs::ForecastBasis::Measured)
                .cloned()
        })?;
        let narrow = job
            .model
            .throughput(&measured, 1, 1)
            .map_or(1.0, |t| t.pessimistic / t.expected);
        let mut best: Option<(SecondProbe, Offer, u32)> = None;
        for b in &e.record.spec.accelerators {
            let (basis, Some(p)) = loaded.forecast_at(b, 1, 1) else {
                continue;
            };
            if b.eq_ignore_ascii_case(&measured) || basis == crate::jobs::ForecastBasis::Measured {
                continue;
            }
            let Some((offer, nodes)) = probe_offer(
                &allowed,
                std::slice::from_ref(b),
                e.record.spec.workers.min,
                false,
            ) else {
                continue;
            };
            let bounds = ProbeBounds::of(&e.record.spec.probe, self.config.probe);
            let probe_usd = (offer.price_per_hour * f64::from(nodes) * bounds.max_seconds / 3600.0)
                .min(bounds.max_usd);
            // Each equally likely speed the probe could find: what the plan made now costs
            // at that speed (slower work on `b` costs more hours), against the plan made
            // knowing it, which never costs more than going on with the plan now.
            let (mut now_mean, mut after_mean) = (0.0, 0.0);
            let n = QUINTILES.len() as f64;
            for z in QUINTILES {
                // A slower step (z > 0) is a lower throughput.
                let sd = if z > 0.0 { p.spread.up } else { p.spread.down };
                let factor = (-z * sd).exp();
                // The plan names its accelerator as `NAME:COUNT`.
                let on_b = now_on
                    .split(':')
                    .next()
                    .is_some_and(|a| a.eq_ignore_ascii_case(b));
                let now_cost = if on_b { now_usd / factor } else { now_usd };
                let mut j = job.clone();
                j.model = Arc::new(AsMeasured {
                    inner: job.model.clone(),
                    accelerator: b.clone(),
                    factor,
                    narrow,
                });
                let after = self
                    .plan_cost(&j, &allowed)
                    .await
                    .map_or(now_cost, |(c, _)| c.min(now_cost));
                now_mean += now_cost / n;
                after_mean += after / n;
            }
            let value = SecondProbe {
                accelerator: b.clone(),
                now_usd: now_mean,
                after_usd: after_mean + probe_usd,
                probe_usd,
            };
            if best
                .as_ref()
                .is_none_or(|(v, _, _)| value.after_usd < v.after_usd)
            {
                best = Some((value, offer, nodes));
            }
        }
        best.filter(|(v, _, _)| v.pays())
    }
}
