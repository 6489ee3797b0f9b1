//! From jobs and offers to an explained plan: generate configurations, prune, solve, explain.
//!
//! [`plan`] is the pipeline; each stage has its own module: `candidates` (every configuration
//! of every job, with the shared resources it uses, numbered in `resources`), `cost` (what one
//! configuration costs and when it finishes), `prune` (drop configurations no optimal plan
//! needs), `model` (the MILP over what is left) and `explain` (the report, in sentences).

use std::time::Instant;

use serde::Serialize;
use tern_cloud::{Capacity, Offer};

use crate::input::{Objective, PlanJob, PlanOptions};
use crate::problem::Assignment;
use crate::solve::{Solved, SolverKind, solve};

mod candidates;
mod cost;
mod explain;
mod model;
mod prune;
mod replicas;
mod resources;
mod shares;
#[cfg(test)]
mod tests;

pub use candidates::sizes_between;
pub use cost::interruption_seconds;
pub use shares::TeamShare;

use candidates::OfferIndex;
use cost::{Cost, Why};
use explain::Explainer;
use prune::{digest, prune};
use replicas::Replicas;
use resources::Resources;
use shares::Teams;

// The tests reach these through `super::*`.
#[cfg(test)]
use crate::problem::{Choice, Problem};
#[cfg(test)]
use candidates::node_counts;
#[cfg(test)]
use cost::evaluate;

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
    /// Egress in `expected_cost`: the job's data read from another region at each expected
    /// start, and its checkpoint brought from another region once.
    pub egress_usd: f64,
}

#[derive(Debug, Clone, PartialEq)]
enum Status {
    Candidate,
    Infeasible(Why),
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

impl CandidateCounts {
    /// What was counted after `before` was.
    fn since(self, before: CandidateCounts) -> CandidateCounts {
        CandidateCounts {
            generated: self.generated - before.generated,
            infeasible: self.infeasible - before.infeasible,
            dominated: self.dominated - before.dominated,
            truncated: self.truncated - before.truncated,
            considered: self.considered - before.considered,
        }
    }

    fn add(&mut self, other: CandidateCounts) {
        self.generated += other.generated;
        self.infeasible += other.infeasible;
        self.dominated += other.dominated;
        self.truncated += other.truncated;
        self.considered += other.considered;
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct PlanReport {
    pub objective: Objective,
    pub solver: SolverKind,
    /// "milp" or "greedy".
    pub solver_family: &'static str,
    pub fallback_reason: Option<String>,
    /// The optimality gap HiGHS proved, relative to the plan's objective (expected $, or hours
    /// for the time objective, plus the penalties of unplaced jobs): 0 with solver `milp`,
    /// positive with `milp-time-limit`, `null` for greedy (nothing proved).
    pub gap: Option<f64>,
    /// Independent groups of jobs (sharing no quota, cap or budget) solved apart.
    pub components: usize,
    /// Integer columns of the MILPs, after identical jobs were merged into classes.
    pub milp_columns: usize,
    pub solve_ms: f64,
    pub offers: usize,
    pub candidates: CandidateCounts,
    pub expected_cost: f64,
    pub placed: usize,
    pub unplaced: usize,
    /// How much teams' shares weighed against cost (`--fairness`; 0 = cost only).
    pub fairness: f64,
    /// What each accelerator a team fell short of its entitlement cost in the objective:
    /// `fairness` times the cost-only plan's objective per accelerator ($, or hours for the
    /// time objective).
    pub shortfall_per_accelerator: f64,
    /// Each team's accelerators against its entitlement.
    pub teams: Vec<TeamShare>,
    /// What the cost-only plan was expected to cost, when fairness changed the plan.
    pub cost_only_expected_cost: Option<f64>,
    pub jobs: Vec<JobPlan>,
}

/// A configuration, its status, its use of shared resources, and its objective value.
type Entry = (Cost, Status, Vec<(usize, f64)>, f64);

/// Plan `jobs` on `offers`. Always answers: jobs that cannot be placed say why.
pub fn plan(jobs: &[PlanJob], offers: &[Offer], options: &PlanOptions) -> PlanReport {
    plan_with(jobs, offers, options, true).0
}

/// [`plan`], keeping each job's whole list of configurations when `trim` is false (the tests
/// check that trimming to the [`digest`] changes nothing in the report); also the unplaced
/// penalty at priority 0, which the tests' brute force uses.
fn plan_with(
    jobs: &[PlanJob],
    offers: &[Offer],
    options: &PlanOptions,
    trim: bool,
) -> (PlanReport, f64) {
    let mut resources = Resources::new(&options.quotas);
    let index = OfferIndex::new(offers, options);
    let mut counts = CandidateCounts::default();
    // Per job: every configuration with its status and MILP usage.
    // Teams' shares count accelerators: then a larger configuration is never dominated.
    let shares = options.fairness > 0.0;
    // Replicas (a sweep, copies of one spec) have the same configurations: make them once.
    let mut replicas = Replicas::default();
    let mut configs: Vec<Vec<Entry>> = Vec::with_capacity(jobs.len());
    for (j, job) in jobs.iter().enumerate() {
        if let Some((first, made)) = replicas.of(jobs, j) {
            counts.add(made);
            configs.push(configs[first].clone());
            continue;
        }
        let before = counts;
        let mut list = candidates::of_job(job, offers, &index, &mut resources, options);
        counts.generated += list.len();
        prune(
            &mut list,
            options.max_candidates_per_job,
            shares,
            &mut counts,
        );
        configs.push(if trim {
            digest(list, options.alternatives, offers)
        } else {
            list
        });
        replicas.keep(jobs, j, counts.since(before));
    }
    let mut model = model::build(jobs, &configs, &resources.list, options.fairness);
    counts.considered = model.problem.options.len();
    let (solved, fair) = solve_fairly(&mut model, jobs, &configs, options);
    let (problem, option_of) = (&model.problem, &model.option_of);
    let used = model::used(problem, &solved, resources.list.len());
    let cx = Explainer {
        offers,
        resources: &resources.list,
        used: &used,
        objective: options.objective,
    };
    let job_plans = jobs
        .iter()
        .zip(&configs)
        .enumerate()
        .map(|(j, (job, list))| {
            let chosen = solved.assignment[j].map(|c| option_of[c].1);
            cx.job_plan(job, list, chosen, options.alternatives)
        })
        .collect();
    let report = explain::report(
        options.objective,
        solved,
        offers.len(),
        counts,
        job_plans,
        fair,
    );
    (report, model.unit)
}

/// What fairness adds to a report: its weight, each team's share, and what the plan would
/// have cost without it.
#[derive(Debug, Clone, Default)]
struct FairReport {
    fairness: f64,
    shortfall_per_accelerator: f64,
    teams: Vec<TeamShare>,
    cost_only_expected_cost: Option<f64>,
}

/// Solve cost only; then, with fairness on and teams left short of their entitlements out of
/// that plan's pool, again with the fairness terms.
fn solve_fairly(
    model: &mut model::Model,
    jobs: &[PlanJob],
    configs: &[Vec<Entry>],
    options: &PlanOptions,
) -> (Solved, FairReport) {
    let started = Instant::now();
    let cost_only = solve(&model.problem, options.time_limit, options.use_milp);
    let teams = Teams::new(jobs, configs, &options.team_weights);
    let pool: f64 = teams
        .placed(&cost_only.assignment, &model.accelerators)
        .iter()
        .sum();
    let entitled = teams.entitle(pool);
    // The cost-only plan's objective per accelerator it places: the going rate.
    let spent: f64 = cost_only
        .assignment
        .iter()
        .flatten()
        .map(|&c| model.problem.options[c].objective)
        .sum();
    let per_short = if pool > 0.0 {
        options.fairness * spent / pool
    } else {
        0.0
    };
    let expected_cost = |a: &Assignment| -> f64 {
        a.iter()
            .flatten()
            .map(|&c| {
                let (j, k) = model.option_of[c];
                configs[j][k].0.expected_cost
            })
            .sum()
    };
    let mut fair = FairReport {
        fairness: options.fairness,
        shortfall_per_accelerator: per_short,
        ..FairReport::default()
    };
    let terms = (options.fairness > 0.0 && teams.with_demand() > 1).then(|| {
        teams.terms(
            &entitled,
            per_short,
            &model.problem.unplaced_penalty,
            model.unit,
            model.accelerators.clone(),
        )
    });
    // The cost-only optimum, when it leaves nobody short, is also the fair optimum.
    let terms = terms.filter(|t| {
        cost_only.gap != Some(0.0) || t.value(&model.problem, &cost_only.assignment) > 0.0
    });
    let solved = if let Some(terms) = terms {
        fair.cost_only_expected_cost = Some(expected_cost(&cost_only.assignment));
        model.problem.fairness = Some(terms);
        let left = options.time_limit.saturating_sub(started.elapsed());
        let mut solved = solve(
            &model.problem,
            left.max(options.time_limit / 4),
            options.use_milp,
        );
        solved.solve_time = started.elapsed();
        solved
    } else {
        cost_only
    };
    fair.teams = teams.report(&solved.assignment, &model.accelerators, &entitled);
    (solved, fair)
}
