//! Cold start: a job whose step time nobody has measured runs a short, bounded probe on the
//! cheapest shape that holds its smallest worker count, the agents' real step times refit its
//! forecast, and then it is planned like any other job, from the probe's checkpoint.
//!
//! The decisions are pure functions ([`probe_offer`], [`verdict`], [`start_choice`]); the
//! controller carries them out in [`Controller::start_cold`], [`Controller::due_probes`] and
//! [`Controller::settle_probes`].

use std::time::Duration;

use chrono::{DateTime, Utc};
use tern_cloud::{Availability, Capacity, InstanceState, Offer, ProbeSpec};
use tern_plan::JobPlan;

use super::decide::Decision;
use super::events::Placement;
use super::{Controller, Result};
use crate::store::{InstanceRecord, ProbeRecord};

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
    /// Its capacity went before it measured (reclaimed, or never launched).
    Lost,
}

impl Ended {
    pub fn as_str(self) -> &'static str {
        match self {
            Ended::Measured => "measured",
            Ended::Bound => "bound reached",
            Ended::Lost => "its capacity was lost",
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
    let rate = rate(p);
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

/// What a cold start says at once, for the starts that need no offers: a plan on the hint
/// (said once: `said`, it was said before) or the refusal, which makes the job unplaceable.
/// `None` for a probe, which is started on the offers ([`steps::start`]).
pub(in crate::controller) fn cold_said(start: Start, said: bool) -> Option<Decision> {
    match start {
        Start::Plan { why } if !said => Some(Decision::PlanCold { why }),
        Start::Refuse(reason) => Some(Decision::Unplaceable { reason }),
        Start::Plan { .. } | Start::Probe { .. } => None,
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
        let start = start_choice(hinted, enabled, deadline, after_probe);
        if let Start::Probe { on_demand, why } = start {
            self.start_probe(name, offers, on_demand, bounds, why, now)
                .await?;
            return Ok(false);
        }
        let planned = matches!(start, Start::Plan { .. });
        let said = self
            .fleet
            .jobs
            .get(name)
            .is_some_and(|e| e.cold_plan.is_some());
        if let Some(decision) = cold_said(start, said) {
            self.carry_out(name, decision, now).await?;
        }
        Ok(planned)
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
        // The planner names a VM's accelerators `NAME:COUNT`; the forecaster knows `NAME`.
        let accelerator = accelerator.split_once(':').map_or(accelerator, |(a, _)| a);
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
        let options = self.plan_options(&[name]);
        let report = super::provision::solve(vec![job], offers, options).await;
        report.jobs.first().is_some_and(|j| j.placed)
    }

    /// A first probe of the job on its allowed offers, or a wait when none can hold it.
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
        let job = (&spec.accelerators[..], spec.workers.min, spec.gang);
        let decision = steps::start(&allowed, job, on_demand, bounds, why);
        self.carry_out(name, decision, now).await
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
            // A launch or move of the job in flight: its capacity is on the way.
            if self.fleet.intents.values().any(|i| i.job == name) {
                continue;
            }
            if !self.holds_probe_shape(&name) {
                // Its capacity is gone (reclaimed, or never launched: a crash between
                // recording a probe and its intent). End it; the plan takes over.
                if let Some(e) = self.fleet.jobs.get_mut(&name) {
                    e.ending_probe = Some(Ended::Lost);
                }
                ending.push(name);
                continue;
            }
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
            let r = self.end_probe(name, p, why, offers, now).await;
            self.contain(name, r)?;
        }
        Ok(())
    }

    /// Whether the job holds an instance (in any state) of its probe's shape.
    fn holds_probe_shape(&self, name: &str) -> bool {
        let Some(shape) = self
            .fleet
            .jobs
            .get(name)
            .and_then(|e| e.record.probe.as_ref())
            .map(|p| p.instance_type.as_str())
        else {
            return false;
        };
        self.fleet
            .instances
            .of_job(name)
            .any(|i| i.offer.instance_type.name == shape)
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
        p: ProbeRecord,
        why: Ended,
        offers: &[Offer],
        now: DateTime<Utc>,
    ) -> Result<()> {
        let decision = self.probe_end(name, p, why, offers, now).await;
        self.carry_out(name, decision, now).await
    }

    /// What ends probe `p`: the next probe where measuring another accelerator pays, else
    /// the plan made on what it measured, kept or moved to.
    async fn probe_end(
        &self,
        name: &str,
        p: ProbeRecord,
        why: Ended,
        offers: &[Offer],
        now: DateTime<Utc>,
    ) -> Decision {
        let unmeasured = self.unmeasured(name);
        if p.probing_since.is_none()
            && !unmeasured
            && let Some(next) = self
                .second_probe(name, offers, Some(&p.accelerator), now)
                .await
        {
            return self.probe_next(name, p, why, next, offers, now);
        }
        let plan = match unmeasured {
            true => None,
            false => self.plan_one(name, offers, now).await,
        };
        let fleet: Vec<InstanceRecord> = self.live_of(name).into_iter().cloned().collect();
        let placed = plan.as_ref().filter(|jp| jp.placed);
        let stay = match placed.and_then(|jp| jp.choice.as_ref()) {
            Some(c) if !steps::keeps(&fleet, c) && !fleet.is_empty() => {
                self.staying_pays(name, &fleet, c, now)
            }
            _ => None,
        };
        let planned = placed.and_then(|jp| self.placement_after_probe(jp));
        let gathered = (plan.as_ref(), &fleet[..], unmeasured, stay);
        steps::end((p, why), gathered, planned, |c| {
            self.move_off_probe(name, &fleet, c, offers)
        })
    }

    /// The `plan` event's placement of the plan made at a probe's end.
    fn placement_after_probe(&self, jp: &JobPlan) -> Option<Placement> {
        let c = jp.choice.as_ref()?;
        Some(Placement {
            solver: "milp".to_string(),
            nodes: c.nodes,
            instance_type: c.instance_type.clone(),
            capacity: c.capacity,
            zone: c.zone.clone(),
            expected_cost: c.expected_cost,
            egress_usd: c.egress_usd,
            finish_h: c.finish_h,
            deadline_h: jp.deadline_h,
            versus_cheapest: jp.versus_cheapest_per_accelerator_hour.clone(),
            policy: None,
            basis: self.basis_note(&jp.job, &c.accelerator, c.workers, c.nodes),
        })
    }

    /// The job's plan alone on its allowed offers ([`super::provision::solve_alone`]).
    async fn plan_one(&self, name: &str, offers: &[Offer], now: DateTime<Utc>) -> Option<JobPlan> {
        let job = self.plan_job(name, now)?;
        let offers =
            super::decide::with_own_room(&self.allowed_offers(name, offers), &self.live_of(name));
        let options = self.plan_options(&[name]);
        super::provision::solve_alone(job, offers, options).await
    }

    /// Moving the whole probe fleet onto the plan's choice: the new nodes come up, the job
    /// checkpoints, the probe's nodes go (a migration; the job is retargeted when it ends).
    /// `None` when the choice is no longer among the job's offers.
    fn move_off_probe(
        &self,
        name: &str,
        fleet: &[InstanceRecord],
        choice: &tern_plan::Config,
        offers: &[Offer],
    ) -> Option<Decision> {
        let allowed = self.allowed_offers(name, offers).into_owned();
        let to = allowed.iter().find(|o| o.key() == choice.offer).cloned()?;
        let work_h = self
            .throughput(name, &to, choice.nodes)
            .map_or(0.0, |(expected, _)| self.work_hours(name, expected));
        let gang = self.is_gang(name);
        Some(steps::move_off(
            name,
            fleet,
            (choice, to),
            (&allowed, gang),
            work_h,
        ))
    }

    /// Whether the job's nodes must stay together (no fallbacks in another zone).
    pub(super) fn is_gang(&self, name: &str) -> bool {
        self.fleet
            .jobs
            .get(name)
            .is_some_and(|e| e.record.spec.gang)
    }
}

/// Dollars a probe spent so far.
pub fn spent(p: &ProbeRecord, now: DateTime<Utc>) -> f64 {
    p.seconds(now) / 3600.0 * rate(p)
}

/// $/h of a probe's capacity, all its nodes.
fn rate(p: &ProbeRecord) -> f64 {
    p.price_per_hour * f64::from(p.nodes.max(1))
}

mod second;
mod stay;
pub(in crate::controller) mod steps;
pub use second::SecondProbe;
pub(in crate::controller) use steps::{ProbeEnd, ProbeStart};
