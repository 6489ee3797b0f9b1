//! Teams' shares (`--fairness`): what each team is entitled to when quota cannot serve every
//! team, what it got, and the fairness terms that trade cost against the difference.
//!
//! - The **pool** is the accelerators the cost-only plan places (whatever their kind): what
//!   the quotas let the fleet run today.
//! - Each team's **entitlement** is its weighted part of the pool (weight 1 unless the quota
//!   file sets `share`), filled like water: a team that cannot use its part (its jobs, at
//!   their largest, need fewer accelerators) gets what it can use, and the rest goes to the
//!   others by weight.
//! - A team's **share** is the accelerators its placed jobs use over its entitlement: 1 is
//!   exactly its entitlement.
//!
//! With fairness `F` > 0 each accelerator a team falls short of its entitlement costs `F`
//! times what an accelerator of the cost-only plan costs on average (its objective over its
//! pool): at `F` = 1 the plan pays up to the going rate to close a shortfall. Shortfalls
//! trade against cost only: all of them together come to at most `F` times the pool's cost,
//! and the unplaced penalty is raised above `1 + F` times the dearest plan (`model::build`),
//! so placing one job more still comes first. Above both, a guard leaves a team with nothing
//! only when no plan serves as many teams, so any `F` > 0 serves every team that some plan
//! can serve alongside the others.

use std::collections::BTreeMap;

use serde::Serialize;

use super::{Entry, Status};
use crate::input::PlanJob;
use crate::problem::{Assignment, Fairness, TeamTerm};

/// One team in a plan's report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TeamShare {
    pub team: String,
    /// Its weight (`share` in the quota file; 1 by default).
    pub weight: f64,
    pub jobs: usize,
    pub placed: usize,
    /// Accelerators its placed jobs use.
    pub accelerators: f64,
    /// Accelerators it is entitled to out of the pool.
    pub entitled: f64,
    /// `accelerators / entitled`; `null` when it is entitled to nothing (no job it could run).
    pub share: Option<f64>,
}

/// The teams of a plan: which job belongs to which, their weights and what they could use.
pub(super) struct Teams {
    names: Vec<String>,
    weights: Vec<f64>,
    team_of_job: Vec<usize>,
    /// Accelerators each team's jobs could use at most (their largest candidates).
    demand: Vec<f64>,
}

impl Teams {
    pub(super) fn new(
        jobs: &[PlanJob],
        configs: &[Vec<Entry>],
        weights: &BTreeMap<String, f64>,
    ) -> Self {
        let mut names: Vec<String> = jobs.iter().map(|j| j.team.clone()).collect();
        names.sort();
        names.dedup();
        let team_of_job: Vec<usize> = jobs
            .iter()
            .map(|j| names.binary_search(&j.team).expect("every team is listed"))
            .collect();
        let mut demand = vec![0.0; names.len()];
        for (j, list) in configs.iter().enumerate() {
            let largest = list
                .iter()
                .filter(|e| e.1 == Status::Candidate)
                .map(|e| f64::from(e.0.workers))
                .fold(0.0, f64::max);
            demand[team_of_job[j]] += largest;
        }
        Self {
            weights: names
                .iter()
                .map(|n| weights.get(n).copied().unwrap_or(1.0))
                .collect(),
            names,
            team_of_job,
            demand,
        }
    }

    /// Accelerators placed per team by `assignment`, whose options use `accelerators` each.
    pub(super) fn placed(&self, assignment: &Assignment, accelerators: &[f64]) -> Vec<f64> {
        let mut placed = vec![0.0; self.names.len()];
        for (j, c) in assignment.iter().enumerate() {
            if let Some(c) = c {
                placed[self.team_of_job[j]] += accelerators[*c];
            }
        }
        placed
    }

    /// Each team's entitlement out of `pool` accelerators.
    pub(super) fn entitle(&self, pool: f64) -> Vec<f64> {
        water_fill(pool, &self.weights, &self.demand)
    }

    /// Teams that have something they could run.
    pub(super) fn with_demand(&self) -> usize {
        self.demand.iter().filter(|&&d| d > 0.0).count()
    }

    /// The fairness terms: `per_short` per accelerator of shortfall for every team, and a
    /// guard above all the unplaced `penalties` together and any difference in cost and
    /// shortfalls (< `unit`, the penalty at priority 0).
    pub(super) fn terms(
        &self,
        entitled: &[f64],
        per_short: f64,
        penalties: &[f64],
        unit: f64,
        accelerators: Vec<f64>,
    ) -> Fairness {
        let guard = penalties.iter().sum::<f64>() + unit;
        Fairness {
            team_of_job: self.team_of_job.clone(),
            accelerators,
            teams: entitled
                .iter()
                .zip(&self.demand)
                .map(|(&e, &d)| TeamTerm {
                    guard: if d > 0.0 { guard } else { 0.0 },
                    entitled: e,
                    per_short,
                })
                .collect(),
        }
    }

    /// The report's rows: what each team got of its entitlement under `assignment`.
    pub(super) fn report(
        &self,
        assignment: &Assignment,
        accelerators: &[f64],
        entitled: &[f64],
    ) -> Vec<TeamShare> {
        let placed = self.placed(assignment, accelerators);
        (0..self.names.len())
            .map(|t| {
                let mine = || (0..assignment.len()).filter(move |&j| self.team_of_job[j] == t);
                TeamShare {
                    team: self.names[t].clone(),
                    weight: self.weights[t],
                    jobs: mine().count(),
                    placed: mine().filter(|&j| assignment[j].is_some()).count(),
                    accelerators: placed[t],
                    entitled: entitled[t],
                    share: (entitled[t] > 0.0).then(|| placed[t] / entitled[t]),
                }
            })
            .collect()
    }
}

/// Split `pool` by `weights`, no part above its `cap`; what a capped part cannot take goes to
/// the others by weight. Parts sum to `pool` unless every cap is reached.
pub(super) fn water_fill(pool: f64, weights: &[f64], caps: &[f64]) -> Vec<f64> {
    let mut part = vec![0.0; weights.len()];
    let mut open: Vec<usize> = (0..weights.len())
        .filter(|&t| caps[t] > 0.0 && weights[t] > 0.0)
        .collect();
    let mut left = pool.max(0.0);
    while !open.is_empty() && left > 1e-12 {
        let total: f64 = open.iter().map(|&t| weights[t]).sum();
        let full: Vec<usize> = open
            .iter()
            .copied()
            .filter(|&t| left * weights[t] / total >= caps[t])
            .collect();
        if full.is_empty() {
            for &t in &open {
                part[t] = left * weights[t] / total;
            }
            break;
        }
        for &t in &full {
            part[t] = caps[t];
            left -= caps[t];
        }
        open.retain(|t| !full.contains(t));
    }
    part
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn water_fill_gives_what_a_capped_team_cannot_use_to_the_others_by_weight() {
        // 24 accelerators, weights 1:1:2; the first team can use only 2.
        let parts = water_fill(24.0, &[1.0, 1.0, 2.0], &[2.0, 100.0, 100.0]);
        assert_eq!(parts, vec![2.0, 22.0 / 3.0, 44.0 / 3.0]);
        // Nobody capped: by weight.
        assert_eq!(water_fill(12.0, &[1.0, 2.0], &[50.0, 50.0]), vec![4.0, 8.0]);
        // Every cap reached: each gets its cap, the rest of the pool is unused.
        assert_eq!(water_fill(12.0, &[1.0, 1.0], &[3.0, 4.0]), vec![3.0, 4.0]);
        // A team with nothing it could run is entitled to nothing.
        assert_eq!(water_fill(8.0, &[1.0, 1.0], &[0.0, 50.0]), vec![0.0, 8.0]);
    }
}
