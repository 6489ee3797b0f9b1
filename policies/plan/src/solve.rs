//! Solving a [`Problem`]: the MILP on HiGHS, with a time limit, and a greedy fallback.

use std::time::{Duration, Instant};

use good_lp::solvers::highs::highs;
use good_lp::{
    Expression, ProblemVariables, ResolutionError, Solution, SolutionStatus, SolverModel, Variable,
    variable,
};
use serde::Serialize;

use crate::problem::{Assignment, Problem};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SolverKind {
    /// HiGHS proved the answer optimal.
    Milp,
    /// HiGHS hit its time limit; the best solution it had (or greedy, whichever is better).
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
    pub solve_time: Duration,
}

/// Solve with HiGHS within `time_limit`; fall back to greedy when it cannot answer.
pub fn solve(problem: &Problem, time_limit: Duration, use_milp: bool) -> Solved {
    let start = Instant::now();
    let greedy_answer = greedy(problem);
    if !use_milp {
        return Solved {
            objective: problem.value(&greedy_answer),
            assignment: greedy_answer,
            solver: SolverKind::Greedy,
            fallback_reason: Some("MILP disabled".into()),
            solve_time: start.elapsed(),
        };
    }
    match milp(problem, time_limit) {
        Ok((assignment, timed_out)) if problem.is_feasible(&assignment) => {
            let (mut assignment, mut solver) = (
                assignment,
                if timed_out {
                    SolverKind::MilpTimeLimit
                } else {
                    SolverKind::Milp
                },
            );
            // At a time limit HiGHS may hold a worse incumbent than greedy: keep the better.
            if timed_out && problem.value(&greedy_answer) < problem.value(&assignment) {
                assignment = greedy_answer;
                solver = SolverKind::Greedy;
            }
            Solved {
                objective: problem.value(&assignment),
                assignment,
                solver,
                fallback_reason: (solver == SolverKind::Greedy)
                    .then(|| "the MILP hit its time limit with a worse answer".into()),
                solve_time: start.elapsed(),
            }
        }
        Ok(_) => Solved {
            objective: problem.value(&greedy_answer),
            assignment: greedy_answer,
            solver: SolverKind::Greedy,
            fallback_reason: Some("the MILP answer violated a constraint".into()),
            solve_time: start.elapsed(),
        },
        Err(e) => Solved {
            objective: problem.value(&greedy_answer),
            assignment: greedy_answer,
            solver: SolverKind::Greedy,
            fallback_reason: Some(format!("the MILP did not answer: {e}")),
            solve_time: start.elapsed(),
        },
    }
}

/// The MILP: binary y per option; Σ y ≤ 1 per job; Σ usage·y ≤ limit per resource;
/// minimise Σ (objective − penalty of its job)·y, i.e. objective plus penalties of unplaced
/// jobs minus a constant. Returns the assignment and whether the time limit was hit.
fn milp(problem: &Problem, time_limit: Duration) -> Result<(Assignment, bool), ResolutionError> {
    let jobs = problem.jobs();
    if problem.options.is_empty() {
        return Ok((vec![None; jobs], false));
    }
    let mut vars = ProblemVariables::new();
    let y: Vec<Variable> = problem
        .options
        .iter()
        .map(|_| vars.add(variable().binary()))
        .collect();
    let objective: Expression = problem
        .options
        .iter()
        .zip(&y)
        .map(|(o, v)| (o.objective - problem.unplaced_penalty[o.job]) * *v)
        .sum();
    let mut model = vars
        .minimise(objective)
        .using(highs)
        .set_time_limit(time_limit.as_secs_f64().max(0.001))
        // Penalties make objective values large; the default relative gap (1e-4) would then
        // allow dollars of suboptimality. Ask for a proof of optimality instead.
        .set_mip_rel_gap(0.0)
        .map_err(|e| ResolutionError::Str(e.to_string()))?
        .set_mip_abs_gap(1e-7)
        .map_err(|e| ResolutionError::Str(e.to_string()))?;
    let mut per_job: Vec<Expression> = vec![Expression::default(); jobs];
    let mut per_resource: Vec<Expression> = vec![Expression::default(); problem.limits.len()];
    let mut resource_used = vec![false; problem.limits.len()];
    for (o, v) in problem.options.iter().zip(&y) {
        per_job[o.job] += *v;
        for &(r, amount) in &o.usage {
            per_resource[r] += amount * *v;
            resource_used[r] = true;
        }
    }
    for (j, e) in per_job.into_iter().enumerate() {
        if problem.options.iter().any(|o| o.job == j) {
            model = model.with(e.leq(1.0));
        }
    }
    for (r, e) in per_resource.into_iter().enumerate() {
        if resource_used[r] {
            model = model.with(e.leq(problem.limits[r]));
        }
    }
    let solution = model.solve()?;
    // HiGHS stops with "optimal" once the gap is within the tolerances set above (relative
    // 0, absolute 1e-7); good_lp then reports `GapLimit` for any non-zero gap left. That is
    // optimal to the tolerance asked for: only a time (or other) limit means "not proven".
    let timed_out = matches!(solution.status(), SolutionStatus::TimeLimit);
    let mut assignment = vec![None; jobs];
    for (i, (o, v)) in problem.options.iter().zip(&y).enumerate() {
        if solution.value(*v) > 0.5 {
            assignment[o.job] = Some(i);
        }
    }
    Ok((assignment, timed_out))
}

/// Greedy: jobs with the highest unplaced penalty (priority) first, each takes its best
/// option that still fits. Always answers; not optimal.
pub fn greedy(problem: &Problem) -> Assignment {
    let mut order: Vec<usize> = (0..problem.jobs()).collect();
    order.sort_by(|a, b| {
        problem.unplaced_penalty[*b]
            .total_cmp(&problem.unplaced_penalty[*a])
            .then(a.cmp(b))
    });
    let mut by_job: Vec<Vec<usize>> = vec![Vec::new(); problem.jobs()];
    for (i, o) in problem.options.iter().enumerate() {
        by_job[o.job].push(i);
    }
    let mut used = vec![0.0; problem.limits.len()];
    let mut assignment = vec![None; problem.jobs()];
    for j in order {
        let mut options = by_job[j].clone();
        options.sort_by(|a, b| {
            problem.options[*a]
                .objective
                .total_cmp(&problem.options[*b].objective)
        });
        for i in options {
            let o = &problem.options[i];
            if o.objective >= problem.unplaced_penalty[j] {
                break;
            }
            // Add up first: one option may list a resource more than once.
            let mut tentative = used.clone();
            for &(r, a) in &o.usage {
                tentative[r] += a;
            }
            let fits = o
                .usage
                .iter()
                .all(|&(r, _)| tentative[r] <= problem.limits[r] + 1e-9);
            if fits {
                used = tentative;
                assignment[j] = Some(i);
                break;
            }
        }
    }
    assignment
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::problem::Choice;

    fn instance() -> impl Strategy<Value = Problem> {
        (1usize..=4, 0usize..=4).prop_flat_map(|(jobs, resources)| {
            let option = (
                0..jobs,
                1.0f64..500.0,
                proptest::collection::vec((0..resources.max(1), 1.0f64..40.0), 0..=resources),
            );
            (
                proptest::collection::vec(option, 0..=30),
                proptest::collection::vec(10.0f64..80.0, resources),
                proptest::collection::vec(600.0f64..2000.0, jobs),
            )
                .prop_map(move |(options, limits, penalties)| Problem {
                    unplaced_penalty: penalties,
                    options: options
                        .into_iter()
                        .map(|(job, objective, usage)| Choice {
                            job,
                            objective: objective.round(),
                            usage: if limits.is_empty() { vec![] } else { usage },
                        })
                        .collect(),
                    limits: limits.clone(),
                })
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        /// The MILP optimum equals exhaustive search, and its answer respects every limit.
        #[test]
        fn milp_matches_brute_force(p in instance()) {
            let (best, _) = p.brute_force();
            let solved = solve(&p, Duration::from_secs(10), true);
            prop_assert_eq!(solved.solver, SolverKind::Milp);
            prop_assert!(p.is_feasible(&solved.assignment));
            prop_assert!((solved.objective - best).abs() <= 1e-6 * best.abs().max(1.0),
                "milp {} vs brute force {}", solved.objective, best);
        }

        /// Greedy is always feasible and never better than the optimum.
        #[test]
        fn greedy_is_feasible_and_bounded_by_the_optimum(p in instance()) {
            let (best, _) = p.brute_force();
            let a = greedy(&p);
            prop_assert!(p.is_feasible(&a));
            prop_assert!(p.value(&a) >= best - 1e-9);
        }
    }

    #[test]
    fn disabled_milp_falls_back_to_greedy_and_says_so() {
        let p = Problem {
            unplaced_penalty: vec![100.0],
            options: vec![Choice {
                job: 0,
                objective: 5.0,
                usage: vec![],
            }],
            limits: vec![],
        };
        let s = solve(&p, Duration::from_secs(1), false);
        assert_eq!(s.solver, SolverKind::Greedy);
        assert_eq!(s.assignment, vec![Some(0)]);
        assert!(s.fallback_reason.is_some());
    }
}
