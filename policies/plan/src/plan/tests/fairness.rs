//! Team fairness: the fair plan against brute force on contended instances, and the cases
//! that pin what a fairness weight may and may not trade.

use super::*;

/// [`small_instance`] made contended: A100 jobs only (with an A100 offer added), no deadline
/// or placement rule, a copy of the first job
/// when there are fewer than three, jobs of 1 or 3 accelerators (so serving a team may cost
/// two placements), an A100 quota of 1 to 4, jobs spread over up to three
/// teams of weight 1 or 2, and a fairness weight.
fn fair_instance() -> impl Strategy<Value = (Vec<PlanJob>, Vec<Offer>, PlanOptions)> {
    (
        small_instance(),
        proptest::collection::vec(
            (0usize..3, prop_oneof![2 => Just(1u32), 1 => Just(3u32)]),
            4,
        ),
        proptest::collection::vec(1u32..=2, 3),
        1u32..=4,
        prop_oneof![Just(0.2), Just(1.0), Just(5.0)],
    )
        .prop_map(
            |((mut jobs, mut offers, mut options), teams, weights, quota, fairness)| {
                offers.push(offer(
                    Cloud::Aws,
                    "use1-az1",
                    "a100",
                    "A100",
                    1,
                    Capacity::OnDemand,
                    4.0,
                ));
                while jobs.len() < 3 {
                    let mut copy = jobs[0].clone();
                    copy.name = format!("j{}", jobs.len());
                    jobs.push(copy);
                }
                let names = ["ml", "cv", "nlp"];
                for (j, (t, size)) in jobs.iter_mut().zip(teams) {
                    j.team = names[t].into();
                    j.workers = WorkerRange {
                        min: size,
                        max: size,
                    };
                    j.accelerators = vec!["A100".into()];
                    j.deadline_s = None;
                    j.constraints = Constraints::default();
                }
                for (n, w) in names.iter().zip(weights) {
                    options.team_weights.insert((*n).into(), f64::from(w));
                }
                options.quotas = vec![Quota {
                    cloud: Cloud::Aws,
                    region: None,
                    family: "A100".into(),
                    capacity: None,
                    limit: quota,
                    unit: crate::QuotaUnit::Accelerators,
                }];
                options.fairness = fairness;
                (jobs, offers, options)
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// With fairness on, the plan is as good as brute force over every configuration under the
    /// same fairness terms (entitlements as the report states them), and it serves as many
    /// teams as any plan can: no team with work it could run is left with nothing where
    /// another plan would serve it too.
    #[test]
    fn fair_plan_matches_brute_force((jobs, offers, options) in fair_instance()) {
        let (report, Unpruned { mut problem, unit, accelerators }, mut value) =
            plan_and_rebuild(&jobs, &offers, &options)?;
        let names: Vec<&str> = report.teams.iter().map(|t| t.team.as_str()).collect();
        let team_of_job: Vec<usize> = jobs.iter().map(|j| names.iter().position(|n| *n == j.team).unwrap()).collect();
        // The planner's tiers: the guard above every penalty together, and those above cost
        // and shortfalls (its unit includes 1 + F).
        let per_short = report.shortfall_per_accelerator;
        let guard = problem.unplaced_penalty.iter().sum::<f64>() + unit;
        let fairness = Fairness {
            team_of_job: team_of_job.clone(),
            accelerators,
            teams: report.teams.iter().map(|t| TeamTerm {
                guard,
                entitled: t.entitled,
                per_short,
            }).collect(),
        };
        // The report's own value under these terms.
        for (t, share) in report.teams.iter().enumerate() {
            let has_options = problem.options.iter().any(|o| team_of_job[o.job] == t);
            if has_options && share.placed == 0 { value += guard; }
            value += fairness.teams[t].per_short * (share.entitled - share.accelerators).max(0.0);
        }
        problem.fairness = Some(fairness);
        let (best, _) = problem.brute_force();
        prop_assert_optimal(value, best)?;

        // As many teams served as any feasible plan serves.
        let mut most = problem.clone();
        most.options.iter_mut().for_each(|o| o.objective = 0.0);
        most.unplaced_penalty.iter_mut().for_each(|p| *p = 0.0);
        for t in &mut most.fairness.as_mut().unwrap().teams { *t = TeamTerm { guard: 1.0, entitled: 0.0, per_short: 0.0 }; }
        let (fewest_unserved, _) = most.brute_force();
        let unserved = (0..names.len())
            .filter(|&t| report.teams[t].placed == 0 && problem.options.iter().any(|o| team_of_job[o.job] == t))
            .count();
        prop_assert_eq!(unserved as f64, fewest_unserved);
    }
}

/// On-demand A100 offers at $3/h, one per zone given.
fn a100s(zones: &[&str]) -> Vec<Offer> {
    zones
        .iter()
        .map(|z| offer(Cloud::Aws, z, "p4", "A100", 1, Capacity::OnDemand, 3.0))
        .collect()
}

/// A job of team `team` on exactly `gpus` A100s, `hours` long on one.
fn team_job(name: &str, team: &str, gpus: u32, hours: f64) -> PlanJob {
    let mut j = job(name, &["A100"], hours * 3600.0, None, &[("A100", 1.0)]);
    j.team = team.into();
    j.workers = WorkerRange {
        min: gpus,
        max: gpus,
    };
    j
}

/// Options with a quota of `limit` A100s and fairness `fairness`.
fn a100_quota(limit: u32, fairness: f64) -> PlanOptions {
    PlanOptions {
        quotas: vec![Quota {
            cloud: Cloud::Aws,
            region: None,
            family: "A100".into(),
            capacity: None,
            limit,
            unit: crate::QuotaUnit::Accelerators,
        }],
        fairness,
        ..PlanOptions::default()
    }
}

fn share(r: &PlanReport, team: &str) -> TeamShare {
    r.teams.iter().find(|t| t.team == team).unwrap().clone()
}

/// Two teams share four A100s; team `cheap`'s jobs cost less, so cost alone gives them every
/// GPU. With any fairness, no team with work waiting gets nothing while the other gets more
/// than its share; and more fairness moves the shares toward the entitlements.
#[test]
fn fairness_leaves_no_team_with_nothing_while_another_is_over_its_share() {
    let offers = a100s(&["use1-az1", "use1-az2"]);
    // The dear team's jobs are longer: more GPU-hours for one job.
    let jobs: Vec<PlanJob> = (0..8)
        .map(|i| match i < 4 {
            true => team_job(&format!("cheap{i}"), "cheap", 1, 2.0),
            false => team_job(&format!("dear{i}"), "dear", 1, 6.0),
        })
        .collect();
    let at = |fairness: f64| plan(&jobs, &offers, &a100_quota(4, fairness));
    let cost_only = at(0.0);
    assert_eq!(share(&cost_only, "cheap").accelerators, 4.0);
    assert_eq!(share(&cost_only, "dear").placed, 0, "the case is contended");
    assert_eq!(share(&cost_only, "dear").entitled, 2.0);
    for f in [0.01, 0.5, 1.0, 10.0] {
        let r = at(f);
        assert_eq!(r.placed, 4, "fairness {f} keeps the quota used");
        for t in &r.teams {
            if t.placed == 0 {
                assert!(
                    r.teams.iter().all(|u| u.share.unwrap_or(0.0) <= 1.0 + 1e-9),
                    "fairness {f}: {:?}",
                    r.teams
                );
            }
        }
        assert!(share(&r, "dear").placed >= 1, "fairness {f}: {:?}", r.teams);
        assert!(r.cost_only_expected_cost.unwrap() <= r.expected_cost + 1e-9);
    }
    // Enough weight on shares gives each team its entitlement.
    let fair = at(10.0);
    assert_eq!(share(&fair, "dear").accelerators, 2.0);
    assert_eq!(share(&fair, "cheap").accelerators, 2.0);
}

/// A team whose only job needs four GPUs against a team of six one-GPU jobs, on a quota of
/// six: serving it costs four placements. Cost alone leaves it with nothing; any fairness,
/// however small, serves it (the guard outranks placements, not only cost).
#[test]
fn any_fairness_serves_a_team_whose_one_job_displaces_several() {
    let offers = a100s(&["use1-az1"]);
    let mut jobs: Vec<PlanJob> = (0..6)
        .map(|i| team_job(&format!("small{i}"), "many", 1, 1.0))
        .collect();
    jobs.push(team_job("big", "one", 4, 4.0));
    assert!(!plan(&jobs, &offers, &a100_quota(6, 0.0)).jobs[6].placed);
    let fair = plan(&jobs, &offers, &a100_quota(6, 0.01));
    assert!(fair.jobs[6].placed, "{:?}", fair.teams);
    assert_eq!(fair.placed, 3);
}

/// Closing a shortfall never costs a placement, however large the fairness: team `y` (weight
/// 3, so entitled to three of the four GPUs) could reach its entitlement only by leaving one
/// job unplaced, and at `F` = 5 the shortfall is worth more than the job's whole cost.
#[test]
fn a_shortfall_never_outweighs_placing_a_job() {
    let offers = a100s(&["use1-az1"]);
    let mut jobs: Vec<PlanJob> = (0..4)
        .map(|i| team_job(&format!("x{i}"), "x", 1, 1.0))
        .collect();
    jobs.push(team_job("y1", "y", 1, 1.0));
    jobs.push(team_job("y2", "y", 2, 2.0));
    let options = PlanOptions {
        team_weights: [("y".to_string(), 3.0)].into_iter().collect(),
        ..a100_quota(4, 5.0)
    };
    let r = plan(&jobs, &offers, &options);
    assert_eq!(r.placed, 4, "{:?}", r.teams);
    let y = share(&r, "y");
    assert_eq!((y.entitled, y.placed), (3.0, 1), "{:?}", r.teams);
}
