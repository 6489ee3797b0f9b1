//! From jobs and offers to an explained plan: generate configurations, prune, solve, explain.

use std::collections::HashMap;

use serde::Serialize;
use tern_cloud::{Capacity, Offer};

use crate::input::{Objective, PlanJob, PlanOptions, Throughput, notice_seconds};
use crate::problem::{Choice, Problem};
use crate::solve::{SolverKind, solve};

/// One way to run one job: `nodes` VMs of one offer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Config {
    pub offer: String,
    pub cloud: String,
    pub region: String,
    pub zone: String,
    pub instance_type: String,
    pub capacity: Capacity,
    pub accelerator: String,
    pub nodes: u32,
    pub workers: u32,
    /// Price of one VM, $/h.
    pub price_per_hour: f64,
    /// All VMs together, $/h.
    pub hourly: f64,
    pub price_per_accelerator_hour: f64,
    /// Expected cost to finish, including provisioning and expected spot restarts.
    pub expected_cost: f64,
    /// Expected hours from now to the end of the work.
    pub finish_h: f64,
    /// Pessimistic finish (low throughput; for spot, also one restart more than expected).
    pub finish_high_h: f64,
    /// Spot interruptions per hour for the whole gang (0 for on-demand).
    pub hazard_per_hour: f64,
    /// Throughput comes from a prior, not from observations of this job.
    pub prior: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "status", content = "detail")]
enum Status {
    Candidate,
    Infeasible(String),
    /// By the configuration at this index of the same job's list.
    Dominated(usize),
    Truncated,
}

#[derive(Debug, Clone, Serialize)]
pub struct Alternative {
    #[serde(flatten)]
    pub config: Config,
    pub why_not: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct JobPlan {
    pub job: String,
    pub team: String,
    pub placed: bool,
    pub choice: Option<Config>,
    /// Why the job is not placed.
    pub reason: Option<String>,
    pub deadline_h: Option<f64>,
    pub alternatives: Vec<Alternative>,
    /// Set when the choice is not the cheapest offer per accelerator-hour, saying why.
    pub versus_cheapest_per_accelerator_hour: Option<String>,
}

#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct CandidateCounts {
    pub generated: usize,
    pub infeasible: usize,
    pub dominated: usize,
    pub truncated: usize,
    /// Configurations in the MILP.
    pub considered: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct PlanReport {
    pub objective: Objective,
    pub solver: SolverKind,
    /// "milp" or "greedy".
    pub solver_family: &'static str,
    pub fallback_reason: Option<String>,
    pub solve_ms: f64,
    pub offers: usize,
    pub candidates: CandidateCounts,
    pub expected_cost: f64,
    pub placed: usize,
    pub unplaced: usize,
    pub jobs: Vec<JobPlan>,
}

/// A resource the MILP shares between jobs, with a label for explanations.
struct Resource {
    label: String,
    limit: f64,
}

/// Plan `jobs` on `offers`. Always answers: jobs that cannot be placed say why.
pub fn plan(jobs: &[PlanJob], offers: &[Offer], options: &PlanOptions) -> PlanReport {
    let mut resources: Vec<Resource> = Vec::new();
    let add_resource = |resources: &mut Vec<Resource>, label: String, limit: f64| {
        resources.push(Resource { label, limit });
        resources.len() - 1
    };
    // Quotas: one resource each, and the offers each applies to (computed once per offer).
    let quota_ids: Vec<usize> = options
        .quotas
        .iter()
        .map(|q| {
            let label = format!(
                "quota {}/{}/{}/{} ({} accelerators)",
                q.cloud,
                q.region.as_deref().unwrap_or("*"),
                q.family,
                q.capacity.map_or("any", |c| c.as_str()),
                q.limit
            );
            add_resource(&mut resources, label, f64::from(q.limit))
        })
        .collect();
    let mut cap_ids: HashMap<usize, usize> = HashMap::new();
    let mut team_resources: HashMap<&str, (Option<usize>, Option<usize>)> = HashMap::new();

    // Offers by lower-cased accelerator name, so each job scans only what it may use; and the
    // per-offer facts every configuration on it shares.
    let mut by_accelerator: HashMap<String, Vec<usize>> = HashMap::new();
    let mut offer_quotas: Vec<Vec<usize>> = vec![Vec::new(); offers.len()];
    let mut offer_hazard: Vec<f64> = vec![0.0; offers.len()];
    for (i, o) in offers.iter().enumerate() {
        if matches!(o.availability, tern_cloud::Availability::Unavailable) {
            continue;
        }
        let Some(a) = o.accelerator() else { continue };
        by_accelerator
            .entry(a.name.to_ascii_lowercase())
            .or_default()
            .push(i);
        if !options.quotas.is_empty() {
            let family = a.family();
            offer_quotas[i] = options
                .quotas
                .iter()
                .enumerate()
                .filter(|(_, q)| {
                    q.cloud == o.cloud
                        && q.region.as_deref().is_none_or(|r| r == o.region.as_str())
                        && q.family.eq_ignore_ascii_case(&family)
                        && q.capacity.is_none_or(|c| c == o.capacity)
                })
                .map(|(k, _)| k)
                .collect();
        }
        if o.capacity.is_preemptible() {
            offer_hazard[i] = if options.hazards.is_empty() {
                options.default_spot_hazard_per_hour
            } else {
                options
                    .hazards
                    .get(&(o.zone.0.clone(), o.instance_type.name.clone()))
                    .copied()
                    .unwrap_or(options.default_spot_hazard_per_hour)
            };
        }
    }

    let mut counts = CandidateCounts::default();
    // Per job: every configuration with its status and MILP usage.
    let mut configs: Vec<Vec<Entry>> = Vec::with_capacity(jobs.len());
    for job in jobs {
        // One pair of budget resources per team, shared by all its jobs.
        let team_ids = options.team_budgets.get(&job.team).map(|b| {
            *team_resources.entry(job.team.as_str()).or_insert_with(|| {
                let total = b.total_usd.map(|t| {
                    add_resource(
                        &mut resources,
                        format!("team {} budget (${t:.2})", job.team),
                        t,
                    )
                });
                let hourly = b.per_hour_usd.map(|h| {
                    add_resource(
                        &mut resources,
                        format!("team {} budget (${h:.2}/h)", job.team),
                        h,
                    )
                });
                (total, hourly)
            })
        });
        // Throughput depends on the shape, not on the zone or price: forecast each shape once.
        let mut throughputs: HashMap<(&str, u32, u32), Option<Throughput>> = HashMap::new();
        let mut list = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for name in &job.accelerators {
            if !seen.insert(name.to_ascii_lowercase()) {
                continue;
            }
            for &i in by_accelerator
                .get(&name.to_ascii_lowercase())
                .into_iter()
                .flatten()
            {
                let offer = &offers[i];
                let per_node = offer.accelerator_units();
                let acc = offer.accelerator().map_or("", |a| a.name.as_str());
                for nodes in node_counts(job, per_node) {
                    let thr = *throughputs
                        .entry((acc, per_node, nodes))
                        .or_insert_with(|| job.model.throughput(acc, per_node, nodes));
                    let (cost, infeasible) =
                        evaluate_with(job, i, offer, nodes, offer_hazard[i], thr, options);
                    let mut usage = Vec::new();
                    let mut over = None;
                    for &q in &offer_quotas[i] {
                        let limit = options.quotas[q].limit;
                        if cost.workers > limit {
                            over.get_or_insert_with(|| {
                                format!(
                                    "over {}: needs {}",
                                    resources[quota_ids[q]].label, cost.workers
                                )
                            });
                        }
                        usage.push((quota_ids[q], f64::from(cost.workers)));
                    }
                    if let tern_cloud::Availability::Available(Some(cap)) = offer.availability {
                        let id = *cap_ids.entry(i).or_insert_with(|| {
                            let label = format!("availability of {} ({cap} VMs)", offer.key());
                            add_resource(&mut resources, label, f64::from(cap))
                        });
                        if nodes > cap {
                            over.get_or_insert_with(|| {
                                format!("over {}: needs {nodes}", resources[id].label)
                            });
                        }
                        usage.push((id, f64::from(nodes)));
                    }
                    if let Some((total, hourly)) = team_ids {
                        if let Some(id) = total {
                            usage.push((id, cost.expected_cost));
                        }
                        if let Some(id) = hourly {
                            usage.push((id, cost.hourly));
                        }
                    }
                    let objective = match options.objective {
                        Objective::Cost => cost.expected_cost,
                        Objective::Time => cost.finish_h,
                    };
                    let status = match infeasible.or(over) {
                        Some(reason) => Status::Infeasible(reason),
                        None => Status::Candidate,
                    };
                    list.push((cost, status, usage, objective));
                }
            }
        }
        counts.generated += list.len();
        prune(&mut list, options.max_candidates_per_job, &mut counts);
        configs.push(list);
    }

    // Unplaced penalty: larger than every job's most expensive option summed, so placing one
    // more job always beats saving money elsewhere; priority scales it (higher first).
    let worst: f64 = configs
        .iter()
        .map(|l| {
            l.iter()
                .filter(|c| c.1 == Status::Candidate)
                .map(|c| c.3)
                .fold(0.0, f64::max)
        })
        .sum();
    let unit = worst + 1.0;
    let mut problem = Problem {
        unplaced_penalty: jobs
            .iter()
            .map(|j| unit * (1.0 + f64::from(j.priority.clamp(0, 100)) * 0.5))
            .collect(),
        options: Vec::new(),
        limits: resources.iter().map(|r| r.limit).collect(),
    };
    let mut option_of: Vec<(usize, usize)> = Vec::new();
    for (j, list) in configs.iter().enumerate() {
        for (k, (_, status, usage, objective)) in list.iter().enumerate() {
            if *status == Status::Candidate {
                problem.options.push(Choice {
                    job: j,
                    objective: *objective,
                    usage: usage.clone(),
                });
                option_of.push((j, k));
            }
        }
    }
    counts.considered = problem.options.len();
    let solved = solve(&problem, options.time_limit, options.use_milp);

    // Resource use of the chosen plan, for "would exceed" explanations.
    let mut used = vec![0.0; resources.len()];
    for c in solved.assignment.iter().flatten() {
        for &(r, a) in &problem.options[*c].usage {
            used[r] += a;
        }
    }

    let cx = Explainer {
        offers,
        resources: &resources,
        used: &used,
        objective: options.objective,
    };
    let mut job_plans = Vec::with_capacity(jobs.len());
    let mut expected_cost = 0.0;
    for (j, job) in jobs.iter().enumerate() {
        let list = &configs[j];
        let chosen = solved.assignment[j].map(|c| option_of[c].1);
        let choice = chosen.map(|k| config(&list[k].0, offers));
        if let Some(c) = &choice {
            expected_cost += c.expected_cost;
        }
        let reason = if chosen.is_some() {
            None
        } else {
            Some(cx.unplaced_reason(job, list))
        };
        let mut order: Vec<usize> = (0..list.len()).filter(|k| Some(*k) != chosen).collect();
        order.sort_by(|a, b| list[*a].3.total_cmp(&list[*b].3));
        let alternatives = order
            .iter()
            .take(options.alternatives)
            .map(|&k| Alternative {
                config: config(&list[k].0, offers),
                why_not: cx.why_not(list, k, chosen),
            })
            .collect();
        let versus = chosen.and_then(|c| cx.versus_cheapest(&list[c], list));
        job_plans.push(JobPlan {
            job: job.name.clone(),
            team: job.team.clone(),
            placed: chosen.is_some(),
            choice,
            reason,
            deadline_h: job.deadline_s.map(|s| s / 3600.0),
            alternatives,
            versus_cheapest_per_accelerator_hour: versus,
        });
    }
    let placed = job_plans.iter().filter(|p| p.placed).count();
    PlanReport {
        objective: options.objective,
        solver: solved.solver,
        solver_family: solved.solver.family(),
        fallback_reason: solved.fallback_reason,
        solve_ms: solved.solve_time.as_secs_f64() * 1e3,
        offers: offers.len(),
        candidates: counts,
        expected_cost,
        placed,
        unplaced: jobs.len() - placed,
        jobs: job_plans,
    }
}

/// Node counts worth considering: those whose accelerators fit `workers`, thinned to the
/// ends of the range and the powers of two between (throughput is smooth in the count, and
/// data-parallel jobs are usually sized in powers of two).
fn node_counts(job: &PlanJob, per_node: u32) -> Vec<u32> {
    if per_node == 0 {
        return Vec::new();
    }
    let lo = job.workers.min.div_ceil(per_node).max(1);
    let hi = job.workers.max / per_node;
    sizes_between(lo, hi)
}

/// `lo`, `hi` and the powers of two strictly between them, ascending; empty when `lo > hi`.
pub fn sizes_between(lo: u32, hi: u32) -> Vec<u32> {
    if lo > hi {
        return Vec::new();
    }
    let mut out = vec![lo];
    let mut p = 1u32;
    while p < hi {
        if p > lo {
            out.push(p);
        }
        p = p.saturating_mul(2);
    }
    if hi > lo {
        out.push(hi);
    }
    out
}

/// Cost and time of one configuration, and why it is infeasible (if it is) for this job alone.
/// The numbers of one configuration: `nodes` VMs of `offers[offer]`. Strings for people are
/// made only for what is shown ([`config`]); a plan over the whole catalog costs hundreds of
/// thousands of these.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Cost {
    offer: usize,
    nodes: u32,
    workers: u32,
    hourly: f64,
    expected_cost: f64,
    finish_h: f64,
    finish_high_h: f64,
    hazard_per_hour: f64,
    prior: bool,
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
    }
}

fn price_per_accelerator_hour(offer: &Offer) -> f64 {
    offer.price_per_accelerator_hour().unwrap_or(f64::INFINITY)
}

/// Cost and time of one configuration, and why it is infeasible (if it is) for this job alone.
/// `hazard_per_node` is the offer's interruptions per node-hour (0 for on-demand).
fn evaluate_with(
    job: &PlanJob,
    offer_index: usize,
    offer: &Offer,
    nodes: u32,
    hazard_per_node: f64,
    thr: Option<Throughput>,
    options: &PlanOptions,
) -> (Cost, Option<String>) {
    let workers = offer.accelerator_units() * nodes;
    let hourly = offer.price_per_hour * f64::from(nodes);
    // Any node's loss interrupts the gang (all workers restart together).
    let hazard = hazard_per_node * f64::from(nodes);
    // Cost of one interruption: a new VM, restore, and the progress since the last checkpoint
    // (none if the checkpoint can be written within the cloud's notice).
    let cp = &job.checkpoint;
    let lost = if cp.save_s <= notice_seconds(offer.cloud) {
        0.0
    } else {
        cp.interval_s / 2.0
    };
    let restart_s = options.provision_s + cp.restore_s + lost;
    let mut cost = Cost {
        offer: offer_index,
        nodes,
        workers,
        hourly,
        expected_cost: f64::INFINITY,
        finish_h: f64::INFINITY,
        finish_high_h: f64::INFINITY,
        hazard_per_hour: hazard,
        prior: false,
    };
    let Some(thr) = thr.filter(|t| t.expected > 0.0 && t.pessimistic > 0.0) else {
        let acc_name = offer.accelerator().map_or("", |a| a.name.as_str());
        return (
            cost,
            Some(format!("no throughput forecast for {acc_name} x{workers}")),
        );
    };
    cost.prior = thr.prior;
    let run_s = job.remaining_samples / thr.expected;
    let run_high_s = job.remaining_samples / thr.pessimistic.min(thr.expected);
    // Expected interruptions over the run stretch it by hazard × restart time per hour.
    let stretch = 1.0 + hazard * restart_s / 3600.0;
    let finish_s = options.provision_s + run_s * stretch;
    let extra = if hazard > 0.0 { restart_s } else { 0.0 };
    let finish_high_s = options.provision_s + run_high_s * stretch + extra;
    cost.finish_h = finish_s / 3600.0;
    cost.finish_high_h = finish_high_s / 3600.0;
    cost.expected_cost = hourly * finish_s / 3600.0;

    let mut why = None;
    if let Some(d) = job.deadline_s
        && finish_high_s > d
    {
        why = Some(format!(
            "misses the deadline: finishes in {:.1} h at worst ({:.1} h expected), deadline in {:.1} h",
            cost.finish_high_h,
            cost.finish_h,
            d / 3600.0
        ));
    }
    if why.is_none()
        && let Some(total) = job.budget.total_usd
        && cost.expected_cost > total
    {
        why = Some(format!(
            "over the job budget: ${:.2} > ${total:.2}",
            cost.expected_cost
        ));
    }
    if why.is_none()
        && let Some(per_hour) = job.budget.per_hour_usd
        && hourly > per_hour
    {
        why = Some(format!(
            "over the job budget: ${hourly:.2}/h > ${per_hour:.2}/h"
        ));
    }
    (cost, why)
}

/// [`evaluate_with`] for one offer on its own, with the default hazard handling (tests).
#[cfg(test)]
fn evaluate(
    job: &PlanJob,
    offer: &Offer,
    nodes: u32,
    options: &PlanOptions,
) -> (Cost, Option<String>) {
    let acc = offer.accelerator().map_or("", |a| a.name.as_str());
    let hazard = if offer.capacity.is_preemptible() {
        options
            .hazards
            .get(&(offer.zone.0.clone(), offer.instance_type.name.clone()))
            .copied()
            .unwrap_or(options.default_spot_hazard_per_hour)
    } else {
        0.0
    };
    let thr = job.model.throughput(acc, offer.accelerator_units(), nodes);
    evaluate_with(job, 0, offer, nodes, hazard, thr, options)
}

/// A configuration, its status, its use of shared resources, and its objective value.
type Entry = (Cost, Status, Vec<(usize, f64)>, f64);

/// Drop dominated configurations, then keep the `keep` best. `a` dominates `b` when it uses
/// the same shared resources, no more of any, and is no worse in objective and pessimistic
/// finish: then no optimal plan needs `b`, so pruning cannot change the optimum.
fn prune(list: &mut [Entry], keep: usize, counts: &mut CandidateCounts) {
    let mut idx: Vec<usize> = (0..list.len())
        .filter(|&k| list[k].1 == Status::Candidate)
        .collect();
    counts.infeasible += list.len() - idx.len();
    idx.sort_by(|a, b| list[*a].3.total_cmp(&list[*b].3).then(a.cmp(b)));
    let mut survivors: Vec<usize> = Vec::new();
    for &k in &idx {
        let dominator = survivors
            .iter()
            .copied()
            .find(|&s| dominates(&list[s], &list[k]));
        match dominator {
            Some(s) => {
                list[k].1 = Status::Dominated(s);
                counts.dominated += 1;
            }
            None => survivors.push(k),
        }
    }
    for &k in survivors.iter().skip(keep) {
        list[k].1 = Status::Truncated;
        counts.truncated += 1;
    }
}

fn dominates(a: &Entry, b: &Entry) -> bool {
    a.3 <= b.3
        && a.0.finish_high_h <= b.0.finish_high_h
        && a.2.len() == b.2.len()
        && a.2
            .iter()
            .all(|&(r, amount)| b.2.iter().any(|&(r2, a2)| r2 == r && amount <= a2))
}

/// Turns the numbers of a solved plan into sentences.
struct Explainer<'a> {
    offers: &'a [Offer],
    resources: &'a [Resource],
    /// Resource use of the chosen plan.
    used: &'a [f64],
    objective: Objective,
}

impl Explainer<'_> {
    fn name(&self, e: &Entry) -> String {
        format!("{} x{}", self.offers[e.0.offer].key(), e.0.nodes)
    }

    /// Why `list[k]` lost to the chosen configuration (or why nothing was chosen).
    fn why_not(&self, list: &[Entry], k: usize, chosen: Option<usize>) -> String {
        let alt = &list[k];
        let chosen = chosen.map(|c| &list[c]);
        match &alt.1 {
            Status::Infeasible(r) => r.clone(),
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
            Objective::Cost => format!(
                "costs ${:.2} more in total (${:.2} vs ${:.2})",
                alt.0.expected_cost - c.0.expected_cost,
                alt.0.expected_cost,
                c.0.expected_cost
            ),
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
        let fastest = list
            .iter()
            .min_by(|a, b| a.0.finish_high_h.total_cmp(&b.0.finish_high_h));
        let mut kinds: Vec<&str> = list
            .iter()
            .filter_map(|e| match &e.1 {
                Status::Infeasible(r) => Some(r.split(':').next().unwrap_or(r)),
                _ => None,
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
                    Status::Infeasible(r) => r.as_str(),
                    _ => "",
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
            Status::Infeasible(r) => r.clone(),
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

#[cfg(test)]
mod tests;
