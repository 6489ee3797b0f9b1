//! The MILP of a plan: one option per configuration that survived pruning, a penalty for each
//! job left unplaced, and the shared resources' limits. Also the resource use of its answer,
//! which the explanations compare with the limits.

use super::resources::Resource;
use super::{Entry, Status};
use crate::input::PlanJob;
use crate::problem::{Choice, Problem};
use crate::solve::Solved;

/// The problem, and for each of its options the (job, index in that job's list) it stands for.
pub(super) fn build(
    jobs: &[PlanJob],
    configs: &[Vec<Entry>],
    resources: &[Resource],
) -> (Problem, Vec<(usize, usize)>) {
    let mut problem = Problem {
        unplaced_penalty: unplaced_penalties(jobs, configs),
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
    (problem, option_of)
}

/// Unplaced penalty: larger than every job's most expensive option summed, so placing one
/// more job always beats saving money elsewhere; priority scales it (higher first).
fn unplaced_penalties(jobs: &[PlanJob], configs: &[Vec<Entry>]) -> Vec<f64> {
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
    jobs.iter()
        .map(|j| unit * (1.0 + f64::from(j.priority.clamp(0, 100)) * 0.5))
        .collect()
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
