//! The MILP of a plan: one option per configuration that survived pruning, a penalty for each
//! job left unplaced, and the shared resources' limits. Also the resource use of its answer,
//! which the explanations compare with the limits.

use super::resources::Resource;
use super::{Entry, Status};
use crate::input::PlanJob;
use crate::problem::{Choice, Problem};
use crate::solve::Solved;

/// A plan's MILP and how to read its answer.
pub(super) struct Model {
    pub(super) problem: Problem,
    /// For each option, the (job, index in that job's list) it stands for.
    pub(super) option_of: Vec<(usize, usize)>,
    /// Accelerators of each option.
    pub(super) accelerators: Vec<f64>,
    /// The unplaced penalty of a job at priority 0.
    pub(super) unit: f64,
}

/// The problem (cost only), one option per candidate configuration. The unplaced penalty at
/// priority 0 is above the sum of every job's dearest candidate, so placing one more job
/// always beats saving money elsewhere (priority scales it: higher first). With fairness `F`
/// it is above `1 + F` times that sum, which bounds cost and shortfalls together (see
/// `shares`), so no shortfall outweighs placing a job either.
pub(super) fn build(
    jobs: &[PlanJob],
    configs: &[Vec<Entry>],
    resources: &[Resource],
    fairness: f64,
) -> Model {
    let worst: f64 = configs
        .iter()
        .map(|l| {
            l.iter()
                .filter(|c| c.1 == Status::Candidate)
                .map(|c| c.3)
                .fold(0.0, f64::max)
        })
        .sum();
    let unit = worst * (1.0 + fairness) + 1.0;
    let mut problem = Problem {
        unplaced_penalty: jobs
            .iter()
            .map(|j| unit * (1.0 + f64::from(j.priority.clamp(0, 100)) * 0.5))
            .collect(),
        options: Vec::new(),
        limits: resources.iter().map(|r| r.limit).collect(),
        fairness: None,
    };
    let mut option_of: Vec<(usize, usize)> = Vec::new();
    let mut accelerators = Vec::new();
    for (j, list) in configs.iter().enumerate() {
        for (k, (cost, status, usage, objective)) in list.iter().enumerate() {
            if *status == Status::Candidate {
                accelerators.push(f64::from(cost.workers));
                problem.options.push(Choice {
                    job: j,
                    objective: *objective,
                    usage: usage.clone(),
                });
                option_of.push((j, k));
            }
        }
    }
    Model {
        problem,
        option_of,
        accelerators,
        unit,
    }
}

/// Resource use of the chosen plan, for "would exceed" explanations.
pub(super) fn used(problem: &Problem, solved: &Solved, resources: usize) -> Vec<f64> {
    let mut used = vec![0.0; resources];
    for c in solved.assignment.iter().flatten() {
        for &(r, a) in &problem.options[*c].usage {
            used[r] += a;
        }
    }
    used
}
