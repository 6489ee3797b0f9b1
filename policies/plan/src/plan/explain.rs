//! Explaining a solved plan: each job's choice, its best alternatives and why each lost, why a
//! job stays unplaced, and why the choice is not the cheapest offer per accelerator-hour. The
//! planner makes strings for people only here, and only for what the report shows.

use tern_cloud::Offer;

use super::cost::{Cost, Why};
use super::resources::Resource;
use super::{Alternative, CandidateCounts, Config, Entry, FairReport, JobPlan, PlanReport, Status};
use crate::input::{Objective, PlanJob};
use crate::solve::Solved;

/// The report of a solved plan, from the plans of its jobs.
pub(super) fn report(
    objective: Objective,
    solved: Solved,
    offers: usize,
    candidates: CandidateCounts,
    jobs: Vec<JobPlan>,
    fair: FairReport,
) -> PlanReport {
    let placed = jobs.iter().filter(|p| p.placed).count();
    // A fold from +0.0, not `sum()` (which starts from -0.0): a plan with nothing placed
    // reports 0.
    let expected_cost = jobs
        .iter()
        .filter_map(|p| p.choice.as_ref())
        .fold(0.0, |total, c| total + c.expected_cost);
    PlanReport {
        objective,
        solver: solved.solver,
        solver_family: solved.solver.family(),
        fallback_reason: solved.fallback_reason,
        gap: solved.gap,
        components: solved.components,
        milp_columns: solved.milp_columns,
        solve_ms: solved.solve_time.as_secs_f64() * 1e3,
        offers,
        candidates,
        expected_cost,
        placed,
        unplaced: jobs.len() - placed,
        fairness: fair.fairness,
        shortfall_per_accelerator: fair.shortfall_per_accelerator,
        teams: fair.teams,
        cost_only_expected_cost: fair.cost_only_expected_cost,
        jobs,
    }
}

/// The full, printable configuration.
fn config(c: &Cost, offers: &[Offer]) -> Config {
    let offer = &offers[c.offer];
    let acc_name = offer.accelerator().map_or("", |a| a.name.as_str());
    Config {
        offer: offer.key(),
        cloud: offer.cloud.to_string(),
        region: offer.region.0.clone(),
        zone: offer.zone.0.clone(),
        instance_type: offer.instance_type.name.clone(),
        capacity: offer.capacity,
        accelerator: format!("{acc_name}:{}", offer.accelerator_units()),
        nodes: c.nodes,
        workers: c.workers,
        price_per_hour: offer.price_per_hour,
        hourly: c.hourly,
        price_per_accelerator_hour: price_per_accelerator_hour(offer),
        expected_cost: c.expected_cost,
        finish_h: c.finish_h,
        finish_high_h: c.finish_high_h,
        hazard_per_hour: c.hazard_per_hour,
        prior: c.prior,
        egress_usd: c.egress,
    }
}

fn price_per_accelerator_hour(offer: &Offer) -> f64 {
    offer.price_per_accelerator_hour().unwrap_or(f64::INFINITY)
}

/// Turns the numbers of a solved plan into sentences.
pub(super) struct Explainer<'a> {
    pub(super) offers: &'a [Offer],
    pub(super) resources: &'a [Resource],
    /// Resource use of the chosen plan.
    pub(super) used: &'a [f64],
    pub(super) objective: Objective,
}

impl Explainer<'_> {
    /// The plan of one job: the configuration at `chosen` in `list`, or why there is none, and
    /// the best `alternatives` others with why each lost.
    pub(super) fn job_plan(
        &self,
        job: &PlanJob,
        list: &[Entry],
        chosen: Option<usize>,
        alternatives: usize,
    ) -> JobPlan {
        let reason = if chosen.is_some() {
            None
        } else {
            Some(self.unplaced_reason(job, list))
        };
        let mut order: Vec<usize> = (0..list.len()).filter(|k| Some(*k) != chosen).collect();
        order.sort_by(|a, b| list[*a].3.total_cmp(&list[*b].3));
        let alternatives = order
            .iter()
            .take(alternatives)
            .map(|&k| Alternative {
                config: config(&list[k].0, self.offers),
                why_not: self.why_not(list, k, chosen),
            })
            .collect();
        JobPlan {
            job: job.name.clone(),
            team: job.team.clone(),
            placed: chosen.is_some(),
            choice: chosen.map(|k| config(&list[k].0, self.offers)),
            reason,
            deadline_h: job.deadline_s.map(|s| s / 3600.0),
            alternatives,
            versus_cheapest_per_accelerator_hour: chosen
                .and_then(|c| self.versus_cheapest(&list[c], list)),
        }
    }

    fn describe(&self, why: &Why) -> String {
        why.describe(|r| self.resources[r].label.as_str())
    }

    fn name(&self, e: &Entry) -> String {
        format!("{} x{}", self.offers[e.0.offer].key(), e.0.nodes)
    }

    /// Why `list[k]` lost to the chosen configuration (or why nothing was chosen).
    fn why_not(&self, list: &[Entry], k: usize, chosen: Option<usize>) -> String {
        let alt = &list[k];
        let chosen = chosen.map(|c| &list[c]);
        match &alt.1 {
            Status::Infeasible(r) => self.describe(r),
            Status::Dominated(by) => match chosen {
                Some(c) if alt.3 > c.3 => {
                    format!("{} (and finishes no sooner)", self.worse_by(alt, c))
                }
                _ => format!(
                    "dominated by {}: no cheaper, no faster, uses no less quota",
                    self.name(&list[*by])
                ),
            },
            Status::Truncated => {
                "not considered: beyond the cheapest configurations kept per job".into()
            }
            Status::Candidate => {
                let Some(c) = chosen else {
                    return self.exceeded(alt, None).unwrap_or_else(|| {
                        "not chosen: resources were given to other jobs".into()
                    });
                };
                if alt.3 > c.3 {
                    self.worse_by(alt, c)
                } else {
                    self.exceeded(alt, Some(c))
                        .unwrap_or_else(|| "equally good; the solver kept the other".into())
                }
            }
        }
    }

    /// How much worse `alt` is than the chosen configuration, in the objective's terms.
    fn worse_by(&self, alt: &Entry, c: &Entry) -> String {
        match self.objective {
            Objective::Cost => {
                let (a, b) = (&alt.0, &c.0);
                let egress = if (a.egress - b.egress).abs() >= 0.005 {
                    format!("; egress ${:.2} vs ${:.2}", a.egress, b.egress)
                } else {
                    String::new()
                };
                format!(
                    "costs ${:.2} more in total (${:.2} vs ${:.2}{egress})",
                    a.expected_cost - b.expected_cost,
                    a.expected_cost,
                    b.expected_cost
                )
            }
            Objective::Time => format!(
                "finishes {:.1} h later ({:.1} h vs {:.1} h)",
                alt.0.finish_h - c.0.finish_h,
                alt.0.finish_h,
                c.0.finish_h
            ),
        }
    }

    /// The shared limits that `alt` would break if it replaced `chosen` in the plan.
    fn exceeded(&self, alt: &Entry, chosen: Option<&Entry>) -> Option<String> {
        let over: Vec<&str> = alt
            .2
            .iter()
            .filter(|&&(r, a)| {
                let freed = chosen.map_or(0.0, |c| {
                    c.2.iter().filter(|(r2, _)| *r2 == r).map(|(_, a)| a).sum()
                });
                self.used[r] - freed + a > self.resources[r].limit + 1e-9
            })
            .map(|&(r, _)| self.resources[r].label.as_str())
            .collect();
        (!over.is_empty()).then(|| format!("would exceed {} given the other jobs", over.join(", ")))
    }

    fn unplaced_reason(&self, job: &PlanJob, list: &[Entry]) -> String {
        if list.is_empty() {
            return format!(
                "no offer has an allowed accelerator ({}) with a VM size that fits {}..{} workers",
                job.accelerators.join(", "),
                job.workers.min,
                job.workers.max
            );
        }
        if let Some(best) = list
            .iter()
            .filter(|e| {
                matches!(
                    e.1,
                    Status::Candidate | Status::Dominated(_) | Status::Truncated
                )
            })
            .min_by(|a, b| a.3.total_cmp(&b.3))
        {
            return self.exceeded(best, None).unwrap_or_else(|| {
                "left unplaced: placing it would cost more than its penalty".into()
            });
        }
        // Everything infeasible: report the closest miss.
        self.closest_miss(list)
    }

    /// Why every configuration of a job is infeasible: the kinds of reasons, and the reason of
    /// the one that would finish soonest.
    fn closest_miss(&self, list: &[Entry]) -> String {
        let fastest = list
            .iter()
            .min_by(|a, b| a.0.finish_high_h.total_cmp(&b.0.finish_high_h));
        let mut kinds: Vec<String> = list
            .iter()
            .filter_map(|e| match &e.1 {
                Status::Infeasible(r) => Some(r),
                _ => None,
            })
            .map(|r| {
                let text = self.describe(r);
                text.split(':').next().unwrap_or(&text).to_string()
            })
            .collect();
        kinds.sort_unstable();
        kinds.dedup();
        match fastest {
            Some(f) => format!(
                "every configuration is infeasible ({}); the fastest, {}: {}",
                kinds.join("; "),
                self.name(f),
                match &f.1 {
                    Status::Infeasible(r) => self.describe(r),
                    _ => String::new(),
                }
            ),
            None => "no configuration".into(),
        }
    }

    /// "Cheapest $/GPU-hour" is what simpler tools pick; say why this plan differs, when it does.
    fn versus_cheapest(&self, chosen: &Entry, list: &[Entry]) -> Option<String> {
        let per_acc = |e: &Entry| price_per_accelerator_hour(&self.offers[e.0.offer]);
        let cheapest = list
            .iter()
            .min_by(|a, b| per_acc(a).total_cmp(&per_acc(b)).then(a.3.total_cmp(&b.3)))?;
        // Only a real difference (over 1 %) is worth a note.
        if per_acc(cheapest) >= per_acc(chosen) * 0.99 {
            return None;
        }
        // The best configuration on that same offer.
        let same_offer = list
            .iter()
            .filter(|e| e.0.offer == cheapest.0.offer)
            .min_by(|a, b| a.3.total_cmp(&b.3))?;
        let why = match &same_offer.1 {
            Status::Infeasible(r) => self.describe(r),
            _ => match self.objective {
                Objective::Cost => format!(
                    "but the job would cost ${:.2} in total there vs ${:.2} here ({:.1} h vs {:.1} h)",
                    same_offer.0.expected_cost,
                    chosen.0.expected_cost,
                    same_offer.0.finish_h,
                    chosen.0.finish_h
                ),
                Objective::Time => format!(
                    "but it would finish in {:.1} h vs {:.1} h here",
                    same_offer.0.finish_h, chosen.0.finish_h
                ),
            },
        };
        let offer = &self.offers[cheapest.0.offer];
        Some(format!(
            "cheapest per accelerator-hour is {} ({}:{}) at ${:.4}/acc-h vs ${:.4} here: {why}",
            offer.key(),
            offer.accelerator().map_or("", |a| a.name.as_str()),
            offer.accelerator_units(),
            per_acc(cheapest),
            per_acc(chosen)
        ))
    }
}
