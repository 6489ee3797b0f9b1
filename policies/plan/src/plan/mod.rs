//! From jobs and offers to an explained plan: generate configurations, prune, solve, explain.
//!
//! [`plan`] is the pipeline; each stage has its own module: `candidates` (every configuration
//! of every job, with the shared resources it uses, numbered in `resources`), `cost` (what one
//! configuration costs and when it finishes), `prune` (drop configurations no optimal plan
//! needs), `model` (the MILP over what is left) and `explain` (the report, in sentences).

use serde::Serialize;
use tern_cloud::{Capacity, Offer};

use crate::input::{Objective, PlanJob, PlanOptions};
use crate::solve::{SolverKind, solve};

mod candidates;
mod cost;
mod explain;
mod model;
mod prune;
mod resources;
#[cfg(test)]
mod tests;

pub use candidates::sizes_between;

use candidates::OfferIndex;
use cost::{Cost, Why};
use explain::Explainer;
use prune::{digest, prune};
use resources::Resources;

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
    pub jobs: Vec<JobPlan>,
}

/// A configuration, its status, its use of shared resources, and its objective value.
type Entry = (Cost, Status, Vec<(usize, f64)>, f64);

/// Plan `jobs` on `offers`. Always answers: jobs that cannot be placed say why.
pub fn plan(jobs: &[PlanJob], offers: &[Offer], options: &PlanOptions) -> PlanReport {
    plan_with(jobs, offers, options, true)
}

/// [`plan`], keeping each job's whole list of configurations when `trim` is false (the tests
/// check that trimming to the [`digest`] changes nothing in the report).
fn plan_with(jobs: &[PlanJob], offers: &[Offer], options: &PlanOptions, trim: bool) -> PlanReport {
    let mut resources = Resources::new(&options.quotas);
    let index = OfferIndex::new(offers, options);
    let mut counts = CandidateCounts::default();
    // Per job: every configuration with its status and MILP usage.
    let configs: Vec<Vec<Entry>> = jobs
        .iter()
        .map(|job| {
            let mut list = candidates::of_job(job, offers, &index, &mut resources, options);
            counts.generated += list.len();
            prune(&mut list, options.max_candidates_per_job, &mut counts);
            if trim {
                digest(list, options.alternatives, offers)
            } else {
                list
            }
        })
        .collect();
    let (problem, option_of) = model::build(jobs, &configs, &resources.list);
    counts.considered = problem.options.len();
    let solved = solve(&problem, options.time_limit, options.use_milp);
    let used = model::used(&problem, &solved, resources.list.len());
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
    explain::report(options.objective, solved, offers.len(), counts, job_plans)
}
