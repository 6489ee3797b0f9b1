//! Solving a [`Problem`]: split it into independent components and classes of
//! interchangeable jobs (`split`), solve each component's MILP on HiGHS (`milp`) within the
//! time limit, and fall back to greedy when it cannot answer.

use std::time::{Duration, Instant};

use serde::Serialize;

use crate::problem::{Assignment, Problem};

mod milp;
mod split;
#[cfg(test)]
mod tests;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SolverKind {
    /// HiGHS proved the answer optimal (`gap` 0).
    Milp,
    /// HiGHS hit its time limit before proving optimality: the best answer it had, at least
    /// as good as greedy's, and `gap` says how far from the optimum it may be.
    MilpTimeLimit,
    /// The MILP failed or was disabled; a greedy answer.
    Greedy,
}

impl SolverKind {
    /// "milp" or "greedy", the coarse label benchmarks and scripts read.
    pub fn family(self) -> &'static str {
        match self {
            SolverKind::Milp | SolverKind::MilpTimeLimit => "milp",
            SolverKind::Greedy => "greedy",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Solved {
    pub assignment: Assignment,
    pub objective: f64,
    pub solver: SolverKind,
    /// Why the MILP did not answer, when the greedy did.
    pub fallback_reason: Option<String>,
    /// The optimality gap HiGHS proved, relative: the optimum's objective (penalties of
    /// unplaced jobs included) is at least `objective × (1 − gap)`. 0 when proved optimal,
    /// `None` for greedy (nothing proved).
    pub gap: Option<f64>,
    /// Components solved (jobs that share no resource with each other are solved apart).
    pub components: usize,
    /// Integer columns of the MILPs, after interchangeable jobs were merged into classes.
    pub milp_columns: usize,
    pub solve_time: Duration,
}

/// Solve within `time_limit`: exactly when HiGHS proves it in time, else its best answer with
/// the gap it proved, or greedy's when it cannot answer.
pub fn solve(problem: &Problem, time_limit: Duration, use_milp: bool) -> Solved {
    let start = Instant::now();
    let greedy_answer = greedy(problem);
    let fallback = |reason: String| Solved {
        objective: problem.value(&greedy_answer),
        assignment: greedy_answer.clone(),
        solver: SolverKind::Greedy,
        fallback_reason: Some(reason),
        gap: None,
        components: 0,
        milp_columns: 0,
        solve_time: start.elapsed(),
    };
    if !use_milp {
        return fallback("MILP disabled".into());
    }
    match exact(problem, &greedy_answer, start + time_limit) {
        Ok(found) if !problem.is_feasible(&found.assignment) => {
            fallback("the MILP answer violated a constraint".into())
        }
        // HiGHS is started from greedy's answer; should it refuse that start and stop at its
        // time limit with something worse, greedy's stands.
        Ok(found) if problem.value(&found.assignment) > problem.value(&greedy_answer) + 1e-9 => {
            fallback("the MILP hit its time limit with a worse answer".into())
        }
        Ok(found) => {
            let objective = problem.value(&found.assignment);
            Solved {
                objective,
                assignment: found.assignment,
                solver: if found.gap > 0.0 {
                    SolverKind::MilpTimeLimit
                } else {
                    SolverKind::Milp
                },
                fallback_reason: None,
                gap: Some(if found.gap > 0.0 {
                    (found.gap / objective.abs().max(1e-9)).min(1.0)
                } else {
                    0.0
                }),
                components: found.components,
                milp_columns: found.columns,
                solve_time: start.elapsed(),
            }
        }
        Err(e) => fallback(format!("the MILP did not answer: {e}")),
    }
}

struct Found {
    assignment: Assignment,
    gap: f64,
    components: usize,
    columns: usize,
}

/// Every component solved: a job alone takes its best option that fits; a group goes to
/// HiGHS with what is left of the time.
fn exact(problem: &Problem, warm: &Assignment, deadline: Instant) -> Result<Found, String> {
    let by_job = problem.options_by_job();
    let components = split::components(problem);
    let mut found = Found {
        assignment: vec![None; problem.jobs()],
        gap: 0.0,
        components: components.len(),
        columns: 0,
    };
    for jobs in &components {
        if let [job] = jobs[..] {
            found.assignment[job] = best_alone(problem, job, &by_job[job]);
            continue;
        }
        let classes = split::classes(problem, jobs, &by_job);
        found.columns += classes.iter().map(|c| c.width()).sum::<usize>();
        let left = deadline.saturating_duration_since(Instant::now());
        let answer = milp::solve(problem, &classes, warm, left)?;
        for (job, option) in answer.chosen {
            found.assignment[job] = Some(option);
        }
        found.gap += answer.gap;
    }
    Ok(found)
}

/// The best option of a job that shares no resource with any other: the one of least value
/// (its objective, and its team's terms when it is its team's only job) that fits the limits
/// on its own and beats leaving the job unplaced.
fn best_alone(problem: &Problem, job: usize, options: &[usize]) -> Option<usize> {
    let unplaced = alone_value(problem, job, None);
    options
        .iter()
        .map(|&i| (i, alone_value(problem, job, Some(i))))
        .filter(|&(i, value)| value < unplaced && fits_alone(problem, i))
        .min_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)))
        .map(|(i, _)| i)
}

/// What a job alone in its component adds to the objective with `option` (or unplaced).
fn alone_value(problem: &Problem, job: usize, option: Option<usize>) -> f64 {
    let base = option.map_or(problem.unplaced_penalty[job], |o| {
        problem.options[o].objective
    });
    let Some(fair) = &problem.fairness else {
        return base;
    };
    let term = fair.teams[fair.team_of_job[job]];
    let placed = option.map_or(0.0, |o| fair.accelerators[o]);
    let guard = if option.is_none() { term.guard } else { 0.0 };
    base + guard + term.per_short * (term.entitled - placed).max(0.0)
}

fn fits_alone(problem: &Problem, option: usize) -> bool {
    let usage = &problem.options[option].usage;
    usage.iter().all(|&(r, _)| {
        // Added up first: one option may list a resource more than once.
        let total: f64 = usage.iter().filter(|u| u.0 == r).map(|u| u.1).sum();
        problem.within(r, total)
    })
}

/// Greedy: with fairness terms, first each team in turn places its first job (highest
/// penalty first) that fits; then jobs with the highest unplaced penalty (priority) first,
/// each takes its best option that still fits. Always answers; not optimal.
pub fn greedy(problem: &Problem) -> Assignment {
    let mut order: Vec<usize> = (0..problem.jobs()).collect();
    order.sort_by(|a, b| {
        problem.unplaced_penalty[*b]
            .total_cmp(&problem.unplaced_penalty[*a])
            .then(a.cmp(b))
    });
    let mut by_job = problem.options_by_job();
    for options in &mut by_job {
        options.sort_by(|a, b| {
            problem.options[*a]
                .objective
                .total_cmp(&problem.options[*b].objective)
        });
    }
    let mut fill = Fill {
        problem,
        used: vec![0.0; problem.limits.len()],
        assignment: vec![None; problem.jobs()],
    };
    if let Some(fair) = &problem.fairness {
        for t in (0..fair.teams.len()).filter(|&t| fair.teams[t].guard > 0.0) {
            let mut mine = order.iter().filter(|&&j| fair.team_of_job[j] == t);
            // Served once one job fits; the guard outweighs any job's penalty.
            mine.find(|&&j| fill.place(j, &by_job[j], true));
        }
    }
    for j in order {
        if fill.assignment[j].is_none() {
            fill.place(j, &by_job[j], false);
        }
    }
    fill.assignment
}

/// A greedy answer being built: resources used so far and the choices made.
struct Fill<'a> {
    problem: &'a Problem,
    used: Vec<f64>,
    assignment: Assignment,
}

impl Fill<'_> {
    /// Give job `j` its first option (cheapest first) that still fits and, unless `any`,
    /// beats leaving it unplaced. Whether one was placed.
    fn place(&mut self, j: usize, options: &[usize], any: bool) -> bool {
        for &i in options {
            let o = &self.problem.options[i];
            if !any && o.objective >= self.problem.unplaced_penalty[j] {
                return false;
            }
            // Add up first: one option may list a resource more than once.
            let mut tentative = self.used.clone();
            for &(r, a) in &o.usage {
                tentative[r] += a;
            }
            let fits = o
                .usage
                .iter()
                .all(|&(r, _)| tentative[r] <= self.problem.limits[r] + 1e-9);
            if fits {
                self.used = tentative;
                self.assignment[j] = Some(i);
                return true;
            }
        }
        false
    }
}
