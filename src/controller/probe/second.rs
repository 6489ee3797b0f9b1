//! Probing a second accelerator: whether measuring an allowed accelerator whose speed is still
//! a prior is expected to cost less than going on without it, and the probe that follows.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use tern_cloud::Offer;
use tern_plan::{Throughput, ThroughputModel};

use super::steps::with_fallbacks;
use super::{Ended, ProbeBounds, ProbeEnd, ProbeStart, probe_offer};
use crate::controller::decide::Decision;
use crate::controller::{Controller, Result};
use crate::store::ProbeRecord;

impl Controller {
    /// A measured job with a deadline that was never probed: whether a probe of an allowed
    /// accelerator whose speed is still a prior is expected to cost less than planning now
    /// ([`Self::second_probe`]); starts it when it is. True when it started one.
    pub(in crate::controller) async fn probe_if_it_pays(
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
        let start = ProbeStart {
            offers: with_fallbacks(&allowed, offer, self.is_gang(name)),
            nodes,
            bounds,
            why,
            from: Vec::new(),
            since: None,
        };
        self.carry_out(name, Decision::Probe(Box::new(start)), now)
            .await?;
        Ok(true)
    }

    /// End probe `p` and start one of another accelerator, moving the job there from the
    /// first probe's checkpoint; both are one window of probe spend.
    pub(super) fn probe_next(
        &self,
        name: &str,
        p: ProbeRecord,
        why: Ended,
        (value, offer, nodes): (SecondProbe, Offer, u32),
        offers: &[Offer],
        now: DateTime<Utc>,
    ) -> Decision {
        let outcome = format!(
            "probing {} next: expected ${:.2} with it (${:.2} of probe) against ${:.2} without",
            value.accelerator, value.after_usd, value.probe_usd, value.now_usd
        );
        let since = Some(p.probing_since.or(p.running_at).unwrap_or(now));
        let bounds = ProbeBounds {
            max_seconds: p.max_seconds,
            max_usd: p.max_usd,
        };
        let why_next = format!(
            "{} is still a prior, and measuring it is expected to pay: ${:.2} with a probe \
             against ${:.2} without",
            value.accelerator, value.after_usd, value.now_usd
        );
        let allowed = self.allowed_offers(name, offers).into_owned();
        let next = ProbeStart {
            offers: with_fallbacks(&allowed, offer, self.is_gang(name)),
            nodes,
            bounds,
            why: why_next,
            from: self.live_of(name).iter().map(|i| i.id.clone()).collect(),
            since,
        };
        Decision::EndProbe(Box::new(ProbeEnd {
            probe: p,
            why,
            outcome,
            planned: None,
            retarget: None,
            then: Some(Decision::Probe(Box::new(next))),
        }))
    }
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
    /// Over each equally likely speed a probe of `b` could find (its prior `p`'s quintiles):
    /// the mean cost of the plan made now (`job`, costing `now_usd` on `now_on`) run at that
    /// speed, where slower work on `b` costs more hours, and the mean cost of the plan made
    /// knowing it, which never costs more than going on with the plan now.
    async fn weigh(
        &self,
        (job, now_usd, now_on): (&tern_plan::PlanJob, f64, &str),
        allowed: &[Offer],
        b: &str,
        p: &tern_policies::forecast::Prediction,
        narrow: f64,
    ) -> (f64, f64) {
        // The plan names its accelerator as `NAME:COUNT`.
        let on_b = now_on
            .split(':')
            .next()
            .is_some_and(|a| a.eq_ignore_ascii_case(b));
        let (mut now_mean, mut after_mean) = (0.0, 0.0);
        let n = QUINTILES.len() as f64;
        for z in QUINTILES {
            // A slower step (z > 0) is a lower throughput.
            let sd = if z > 0.0 { p.spread.up } else { p.spread.down };
            let factor = (-z * sd).exp();
            let now_cost = if on_b { now_usd / factor } else { now_usd };
            let mut j = job.clone();
            j.model = Arc::new(AsMeasured {
                inner: job.model.clone(),
                accelerator: b.to_string(),
                factor,
                narrow,
            });
            let after = self
                .plan_cost(&j, allowed)
                .await
                .map_or(now_cost, |(c, _)| c.min(now_cost));
            now_mean += now_cost / n;
            after_mean += after / n;
        }
        (now_mean, after_mean)
    }

    /// Expected cost of `job`'s plan and the accelerator it chooses; where no plan meets its
    /// deadline at the pessimistic bound, of the plan at its expected speed (what the
    /// controller would then run). `None` when neither places it.
    async fn plan_cost(&self, job: &tern_plan::PlanJob, offers: &[Offer]) -> Option<(f64, String)> {
        let plan = crate::controller::provision::solve_alone(
            job.clone(),
            offers.to_vec(),
            self.plan_options(&[job.name.as_str()]),
        )
        .await?;
        plan.choice
            .filter(|_| plan.placed)
            .map(|c| (c.expected_cost, c.accelerator))
    }

    /// Whether a probe of another allowed accelerator, whose speed is still a prior, is
    /// expected to cost less than going on without it (`measured`: the accelerator just
    /// measured, else any the job was measured on). Decided by expected cost, over five equally
    /// likely speeds the probe could find: the plan made now, run at that speed, against the
    /// plan made knowing it, plus the probe at its bound. It pays when the answer could
    /// change the plan by more than the probe costs: a deadline the prior's pessimistic bound
    /// rules the accelerator out of, or a choice between accelerators the prior cannot
    /// settle.
    pub(super) async fn second_probe(
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
            let now_plan = (&job, now_usd, now_on.as_str());
            let (now_mean, after_mean) = self.weigh(now_plan, &allowed, b, &p, narrow).await;
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
