use proptest::prelude::*;

use super::*;
use crate::problem::{Choice, Fairness, TeamTerm};

/// Problems of up to `jobs` jobs, `options` options and `resources` shared resources.
fn problem(jobs: usize, options: usize, resources: usize) -> impl Strategy<Value = Problem> {
    (1usize..=jobs, 0usize..=resources).prop_flat_map(move |(jobs, resources)| {
        let option = (
            0..jobs,
            1.0f64..500.0,
            proptest::collection::vec((0..resources.max(1), 1.0f64..40.0), 0..=resources),
        );
        (
            proptest::collection::vec(option, 0..=options),
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
                fairness: None,
            })
    })
}

fn instance() -> impl Strategy<Value = Problem> {
    problem(4, 30, 4)
}

/// An instance where some jobs are copies of others (same penalty, same options), so the
/// solver merges them into classes, and where resources may tie jobs into components or not.
fn instance_with_twins() -> impl Strategy<Value = Problem> {
    problem(3, 10, 3).prop_flat_map(|p| {
        let jobs = p.jobs();
        (Just(p), proptest::collection::vec(0..jobs, 0..=3)).prop_map(|(mut p, twins)| {
            for of in twins {
                let twin = p.jobs();
                p.unplaced_penalty.push(p.unplaced_penalty[of]);
                let copies: Vec<Choice> = p
                    .options
                    .iter()
                    .filter(|o| o.job == of)
                    .map(|o| Choice {
                        job: twin,
                        ..o.clone()
                    })
                    .collect();
                p.options.extend(copies);
            }
            p
        })
    })
}

/// An instance (twins included) whose jobs belong to up to three teams with fairness terms:
/// guards that may outweigh everything else, entitlements and shortfall prices.
fn instance_with_teams() -> impl Strategy<Value = Problem> {
    instance_with_twins().prop_flat_map(|p| {
        let jobs = p.jobs();
        let options = p.options.len();
        let term = (
            prop_oneof![Just(0.0), Just(5000.0)],
            0.0f64..16.0,
            prop_oneof![Just(0.0), 1.0f64..200.0],
        )
            .prop_map(|(guard, entitled, per_short)| TeamTerm {
                guard,
                entitled: entitled.round(),
                per_short: per_short.round(),
            });
        (
            Just(p),
            proptest::collection::vec(0usize..3, jobs),
            proptest::collection::vec(1u32..=8, options),
            proptest::collection::vec(term, 3),
        )
            .prop_map(|(mut p, team_of_job, accelerators, teams)| {
                p.fairness = Some(Fairness {
                    team_of_job,
                    accelerators: accelerators.into_iter().map(f64::from).collect(),
                    teams,
                });
                p
            })
    })
}

/// Solves `p` and checks the answer is proved optimal, respects every limit and equals
/// exhaustive search's value, which it returns.
fn prop_assert_exact(p: &Problem) -> Result<f64, TestCaseError> {
    let (best, _) = p.brute_force();
    let solved = solve(p, Duration::from_secs(10), true);
    prop_assert_eq!(solved.solver, SolverKind::Milp);
    prop_assert_eq!(solved.gap, Some(0.0));
    prop_assert!(p.is_feasible(&solved.assignment));
    prop_assert!(
        (solved.objective - best).abs() <= 1e-6 * best.abs().max(1.0),
        "milp {} vs brute force {}",
        solved.objective,
        best
    );
    Ok(best)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Fairness terms (team guards and shortfalls) keep the MILP exact: its value equals
    /// exhaustive search's, and greedy stays feasible and no better.
    #[test]
    fn fairness_terms_keep_the_optimum(p in instance_with_teams()) {
        let best = prop_assert_exact(&p)?;
        let g = greedy(&p);
        prop_assert!(p.is_feasible(&g));
        prop_assert!(p.value(&g) >= best - 1e-9);
    }

    /// With interchangeable jobs merged into classes and components solved apart, the
    /// optimum still equals exhaustive search over the original problem.
    #[test]
    fn classes_and_components_keep_the_optimum(p in instance_with_twins()) {
        prop_assert_exact(&p)?;
    }

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
        fairness: None,
    };
    let s = solve(&p, Duration::from_secs(1), false);
    assert_eq!(s.solver, SolverKind::Greedy);
    assert_eq!(s.assignment, vec![Some(0)]);
    assert!(s.fallback_reason.is_some());
}

/// A hard packing problem: many jobs, each with options of distinct sizes on a few shared
/// quotas, no two alike.
fn knapsack(jobs: usize) -> Problem {
    // A fixed linear congruential sequence: the same instance every run, no seed to pick.
    let mut x: u64 = 12345;
    let mut next = move || {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (x >> 33) as f64 / f64::from(1u32 << 31)
    };
    let mut options = Vec::new();
    for job in 0..jobs {
        for r in 0..3 {
            options.push(Choice {
                job,
                objective: (100.0 + 900.0 * next()).round(),
                usage: vec![(r, (1.0 + 30.0 * next()).round())],
            });
        }
    }
    Problem {
        unplaced_penalty: vec![5000.0; jobs],
        options,
        limits: vec![200.0, 300.0, 250.0],
        fairness: None,
    }
}

/// Whatever the time limit, the answer is feasible, no worse than greedy's, and the gap it
/// states is a true bound: the proven optimum is never below `objective - gap`.
#[test]
fn a_time_limited_answer_states_a_true_gap() {
    let p = knapsack(120);
    let optimum = solve(&p, Duration::from_secs(60), true);
    assert_eq!(optimum.solver, SolverKind::Milp);
    for limit_ms in [1, 5, 20] {
        let s = solve(&p, Duration::from_millis(limit_ms), true);
        assert!(p.is_feasible(&s.assignment));
        assert!(s.objective <= p.value(&greedy(&p)) + 1e-6);
        let gap = s.gap.expect("the MILP answered");
        assert_eq!(s.solver == SolverKind::Milp, gap == 0.0);
        assert!(s.objective >= optimum.objective - 1e-6);
        assert!(
            s.objective * (1.0 - gap) <= optimum.objective + 1e-6,
            "{limit_ms} ms: objective {} gap {gap}, optimum {}",
            s.objective,
            optimum.objective
        );
    }
}

#[test]
fn jobs_that_share_nothing_are_solved_without_a_milp() {
    let p = Problem {
        unplaced_penalty: vec![100.0, 100.0],
        options: vec![
            Choice {
                job: 0,
                objective: 5.0,
                usage: vec![],
            },
            Choice {
                job: 0,
                objective: 3.0,
                usage: vec![(0, 2.0)],
            },
            Choice {
                job: 1,
                objective: 7.0,
                usage: vec![(1, 1.0)],
            },
        ],
        limits: vec![1.0, 1.0],
        fairness: None,
    };
    let s = solve(&p, Duration::from_secs(1), true);
    // Job 0's cheaper option needs 2 of a resource that has 1.
    assert_eq!(s.assignment, vec![Some(0), Some(2)]);
    assert_eq!(
        (s.solver, s.gap, s.components, s.milp_columns),
        (SolverKind::Milp, Some(0.0), 2, 0)
    );
}
