use std::collections::HashMap;
use std::sync::Arc;

use proptest::prelude::*;
use tern_cloud::{
    Accelerator, Availability, Budget, Capacity, CapacityRule, CheckpointSpec, Cloud, Constraints,
    DataLocation, InstanceType, Offer, PriceComponent, Region, WorkerRange, Zone,
};

use super::*;
use crate::input::{Quota, Throughput, ThroughputModel};
use crate::problem::{Fairness, TeamTerm};

/// Samples/s per accelerator by name, scaling linearly with count (a test's stand-in for the
/// fitted forecaster; the planner only sees the trait).
#[derive(Debug)]
struct Table(HashMap<String, f64>);

impl ThroughputModel for Table {
    fn throughput(&self, accelerator: &str, per_node: u32, nodes: u32) -> Option<Throughput> {
        let per = *self.0.get(accelerator)?;
        let t = per * f64::from(per_node * nodes);
        Some(Throughput {
            expected: t,
            pessimistic: t * 0.9,
            prior: false,
        })
    }
}

fn offer(
    cloud: Cloud,
    zone: &str,
    ty: &str,
    acc: &str,
    count: u32,
    capacity: Capacity,
    price: f64,
) -> Offer {
    Offer {
        cloud,
        region: Region::new(
            zone.trim_end_matches(|c: char| c.is_ascii_alphabetic())
                .trim_end_matches('-'),
        ),
        zone: Zone::new(zone),
        instance_type: InstanceType {
            name: ty.into(),
            vcpus: 8.0,
            memory_gib: 64.0,
            accelerator: Some(Accelerator::new(acc, count)),
        },
        capacity,
        price_per_hour: price,
        observed_at: None,
        breakdown: vec![PriceComponent {
            label: ty.into(),
            price_per_hour: price,
        }],
        availability: Availability::Unknown,
    }
}

fn job(
    name: &str,
    accs: &[&str],
    samples: f64,
    deadline_h: Option<f64>,
    speeds: &[(&str, f64)],
) -> PlanJob {
    PlanJob {
        name: name.into(),
        team: "ml".into(),
        remaining_samples: samples,
        deadline_s: deadline_h.map(|h| h * 3600.0),
        accelerators: accs.iter().map(|s| s.to_string()).collect(),
        workers: WorkerRange { min: 1, max: 1 },
        gang: true,
        checkpoint: CheckpointSpec {
            interval_s: 1800.0,
            size_gb: 5.0,
            save_s: 60.0,
            restore_s: 120.0,
        },
        budget: Budget::default(),
        priority: 0,
        model: Arc::new(Table(
            speeds.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        )),
        constraints: Default::default(),
    }
}

#[test]
fn three_times_faster_at_twice_the_price_wins() {
    let offers = vec![
        offer(
            Cloud::Aws,
            "use1-az1",
            "t4.box",
            "T4",
            1,
            Capacity::OnDemand,
            1.0,
        ),
        offer(
            Cloud::Aws,
            "use1-az1",
            "a100.box",
            "A100",
            1,
            Capacity::OnDemand,
            2.0,
        ),
    ];
    // 10 h on T4, 3.3 h on A100.
    let j = job(
        "resnet",
        &["T4", "A100"],
        36_000.0,
        None,
        &[("T4", 1.0), ("A100", 3.0)],
    );
    let r = plan(&[j], &offers, &PlanOptions::default());
    let c = r.jobs[0].choice.as_ref().unwrap();
    assert_eq!(c.accelerator, "A100:1");
    assert_eq!(r.solver, SolverKind::Milp);
    // The explanation names the cheaper-per-GPU-hour option and why it lost.
    let v = r.jobs[0]
        .versus_cheapest_per_accelerator_hour
        .as_ref()
        .unwrap();
    assert!(v.contains("t4.box") && v.contains("in total"), "{v}");
    assert!(r.jobs[0].alternatives[0].why_not.contains("more in total"));
}

#[test]
fn loose_deadline_goes_to_spot_tight_one_to_on_demand() {
    let offers = vec![
        offer(
            Cloud::Aws,
            "use1-az1",
            "p3.2xlarge",
            "V100",
            1,
            Capacity::OnDemand,
            3.06,
        ),
        offer(
            Cloud::Aws,
            "use1-az1",
            "p3.2xlarge",
            "V100",
            1,
            Capacity::Spot,
            0.92,
        ),
    ];
    // 48 h of work.
    let samples = 48.0 * 3600.0;
    let loose = job("loose", &["V100"], samples, Some(70.0), &[("V100", 1.0)]);
    let r = plan(&[loose], &offers, &PlanOptions::default());
    assert_eq!(r.jobs[0].choice.as_ref().unwrap().capacity, Capacity::Spot);

    // Pessimistic on-demand finish: 300 s + 48 h / 0.9 = 53.4 h. Spot adds expected
    // interruptions and one more restart: infeasible at 54 h, so on-demand.
    let tight = job("tight", &["V100"], samples, Some(54.0), &[("V100", 1.0)]);
    let r = plan(&[tight], &offers, &PlanOptions::default());
    let j = &r.jobs[0];
    assert_eq!(
        j.choice.as_ref().unwrap().capacity,
        Capacity::OnDemand,
        "{j:#?}"
    );
    assert!(
        j.alternatives
            .iter()
            .any(|a| a.config.capacity == Capacity::Spot
                && a.why_not.contains("misses the deadline"))
    );
}

#[test]
fn infeasible_inputs_are_reported_per_job() {
    let offers = vec![offer(
        Cloud::Aws,
        "use1-az1",
        "p3.2xlarge",
        "V100",
        1,
        Capacity::OnDemand,
        3.06,
    )];
    let no_offer = job("no-offer", &["H100"], 1000.0, None, &[("H100", 1.0)]);
    let too_short = job(
        "too-short",
        &["V100"],
        100.0 * 3600.0,
        Some(10.0),
        &[("V100", 1.0)],
    );
    let no_quota = job("no-quota", &["V100"], 1000.0, None, &[("V100", 1.0)]);
    let options = PlanOptions {
        quotas: vec![Quota {
            cloud: Cloud::Aws,
            region: None,
            family: "V100".into(),
            capacity: None,
            limit: 0,
            unit: crate::QuotaUnit::Accelerators,
        }],
        ..Default::default()
    };
    let r = plan(
        &[no_offer.clone(), too_short],
        &offers,
        &PlanOptions::default(),
    );
    assert_eq!(r.placed, 0);
    assert!(
        r.jobs[0]
            .reason
            .as_ref()
            .unwrap()
            .contains("no offer has an allowed accelerator")
    );
    assert!(
        r.jobs[1]
            .reason
            .as_ref()
            .unwrap()
            .contains("misses the deadline"),
        "{:?}",
        r.jobs[1].reason
    );
    let r = plan(&[no_quota], &offers, &options);
    assert!(!r.jobs[0].placed);
    assert!(
        r.jobs[0].reason.as_ref().unwrap().contains("over quota"),
        "{:?}",
        r.jobs[0].reason
    );
    // Empty input is still an answer.
    let r = plan(&[], &offers, &PlanOptions::default());
    assert_eq!((r.placed, r.unplaced), (0, 0));
}

#[test]
fn quota_contention_moves_a_job_and_says_why() {
    let offers = vec![
        offer(
            Cloud::Aws,
            "use1-az1",
            "a100.box",
            "A100",
            1,
            Capacity::OnDemand,
            2.0,
        ),
        offer(
            Cloud::Gcp,
            "us-central1-a",
            "a2-highgpu-1g",
            "A100",
            1,
            Capacity::OnDemand,
            2.5,
        ),
    ];
    let mut a = job("a", &["A100"], 36_000.0, None, &[("A100", 1.0)]);
    a.priority = 1;
    let b = job("b", &["A100"], 36_000.0, None, &[("A100", 1.0)]);
    let options = PlanOptions {
        quotas: vec![Quota {
            cloud: Cloud::Aws,
            region: None,
            family: "A100".into(),
            capacity: None,
            limit: 1,
            unit: crate::QuotaUnit::Accelerators,
        }],
        ..Default::default()
    };
    let r = plan(&[a, b], &offers, &options);
    assert_eq!(r.placed, 2);
    let clouds: Vec<&str> = r
        .jobs
        .iter()
        .map(|j| j.choice.as_ref().unwrap().cloud.as_str())
        .collect();
    assert!(clouds.contains(&"aws") && clouds.contains(&"gcp"));
    let moved = r
        .jobs
        .iter()
        .find(|j| j.choice.as_ref().unwrap().cloud == "gcp")
        .unwrap();
    assert!(
        moved
            .alternatives
            .iter()
            .any(|a| a.why_not.contains("would exceed quota")),
        "{moved:#?}"
    );
}

#[test]
fn team_budget_limits_total_spend() {
    let offers = vec![
        offer(
            Cloud::Aws,
            "use1-az1",
            "fast",
            "A100",
            1,
            Capacity::OnDemand,
            10.0,
        ),
        offer(
            Cloud::Aws,
            "use1-az1",
            "slow",
            "T4",
            1,
            Capacity::OnDemand,
            1.0,
        ),
    ];
    // Fast: 1 h x $10 (+provisioning); slow: 2 h x $1. Time objective wants fast, budget forbids.
    let j = job(
        "j",
        &["A100", "T4"],
        7200.0,
        None,
        &[("A100", 2.0), ("T4", 1.0)],
    );
    let mut options = PlanOptions {
        objective: Objective::Time,
        ..Default::default()
    };
    let r = plan(std::slice::from_ref(&j), &offers, &options);
    assert_eq!(r.jobs[0].choice.as_ref().unwrap().instance_type, "fast");
    options.team_budgets.insert(
        "ml".into(),
        Budget {
            total_usd: Some(5.0),
            per_hour_usd: None,
        },
    );
    let r = plan(&[j], &offers, &options);
    assert_eq!(r.jobs[0].choice.as_ref().unwrap().instance_type, "slow");
}

#[test]
fn greedy_fallback_is_marked() {
    let offers = vec![offer(
        Cloud::Aws,
        "use1-az1",
        "p3.2xlarge",
        "V100",
        1,
        Capacity::OnDemand,
        3.06,
    )];
    let j = job("j", &["V100"], 3600.0, None, &[("V100", 1.0)]);
    let r = plan(
        &[j],
        &offers,
        &PlanOptions {
            use_milp: false,
            ..Default::default()
        },
    );
    assert_eq!(r.solver, SolverKind::Greedy);
    assert_eq!(r.solver_family, "greedy");
    assert!(r.fallback_reason.is_some());
    assert!(r.jobs[0].placed);
}

#[test]
fn node_counts_cover_the_range() {
    let mut j = job("j", &["V100"], 1.0, None, &[]);
    j.workers = WorkerRange { min: 2, max: 16 };
    assert_eq!(node_counts(&j, 1), vec![2, 4, 8, 16]);
    assert_eq!(node_counts(&j, 8), vec![1, 2]);
    j.workers = WorkerRange { min: 3, max: 12 };
    assert_eq!(node_counts(&j, 1), vec![3, 4, 8, 12]);
    assert_eq!(node_counts(&j, 4), vec![1, 2, 3]);
    assert!(node_counts(&j, 16).is_empty());
}

fn small_instance() -> impl Strategy<Value = (Vec<PlanJob>, Vec<Offer>, PlanOptions)> {
    let offer_s = (
        0usize..3,
        0usize..2,
        prop::bool::ANY,
        0.5f64..5.0,
        prop::option::of(1u32..3),
    );
    let job_s = (
        0usize..3,
        1.0f64..30.0,
        prop::option::of(2.0f64..40.0),
        0i32..2,
        (
            0usize..3,
            0usize..4,
            prop::option::of(1.0f64..8.0),
            any::<bool>(),
        ),
    );
    (
        proptest::collection::vec(offer_s, 1..6),
        proptest::collection::vec(job_s, 1..4),
        prop::option::of(1u32..4),
        prop::option::of(5.0f64..60.0),
    )
        .prop_map(|(offers, jobs, quota, budget)| {
            let names = ["T4", "V100", "A100"];
            let offers: Vec<Offer> = offers
                .into_iter()
                .enumerate()
                .map(|(i, (acc, zone, spot, price, cap))| {
                    let mut o = offer(
                        Cloud::Aws,
                        ["use1-az1", "use1-az2"][zone],
                        &format!("type{i}"),
                        names[acc],
                        1,
                        if spot {
                            Capacity::Spot
                        } else {
                            Capacity::OnDemand
                        },
                        price,
                    );
                    o.availability =
                        cap.map_or(Availability::Unknown, |c| Availability::Available(Some(c)));
                    o
                })
                .collect();
            let jobs: Vec<PlanJob> = jobs
                .into_iter()
                .enumerate()
                .map(
                    |(i, (acc, hours, deadline, prio, (rule, exclude, max_price, far_data)))| {
                        let mut j = job(
                            &format!("j{i}"),
                            &names[acc..],
                            hours * 3600.0,
                            deadline,
                            &[("T4", 1.0), ("V100", 2.0), ("A100", 4.0)],
                        );
                        j.priority = prio;
                        j.workers = WorkerRange { min: 1, max: 2 };
                        j.constraints = Constraints {
                            capacity: CapacityRule::ALL[rule],
                            exclude: match exclude {
                                1 => vec!["use1-az2".into()],
                                2 => vec!["type1*".into()],
                                _ => vec![],
                            },
                            max_price_per_hour: max_price,
                            data: far_data.then(|| DataLocation {
                                region: "us-west-2".into(),
                                size_gb: 500.0,
                            }),
                            ..Constraints::default()
                        };
                        j
                    },
                )
                .collect();
            let mut options = PlanOptions::default();
            if let Some(limit) = quota {
                options.quotas.push(Quota {
                    cloud: Cloud::Aws,
                    region: None,
                    family: "A100".into(),
                    capacity: None,
                    limit,
                    unit: crate::QuotaUnit::Accelerators,
                });
            }
            if let Some(b) = budget {
                options.team_budgets.insert(
                    "ml".into(),
                    Budget {
                        total_usd: Some(b),
                        per_hour_usd: None,
                    },
                );
            }
            (jobs, offers, options)
        })
}

/// The plan's problem rebuilt by hand from every configuration, none pruned: quotas, caps and
/// each team's budget as resources, and the unplaced penalties of the planner's rule from its
/// `unit` (the penalty at priority 0).
fn unpruned_problem(
    jobs: &[PlanJob],
    offers: &[Offer],
    options: &PlanOptions,
    unit: f64,
) -> Unpruned {
    let unpruned = PlanOptions {
        max_candidates_per_job: usize::MAX,
        ..options.clone()
    };
    let mut problem = Problem::default();
    let mut labels: Vec<String> = Vec::new();
    let mut limits: Vec<f64> = Vec::new();
    let mut rid = |l: String, lim: f64| match labels.iter().position(|x| *x == l) {
        Some(i) => i,
        None => {
            labels.push(l);
            limits.push(lim);
            labels.len() - 1
        }
    };
    let mut accelerators = Vec::new();
    for (j, job) in jobs.iter().enumerate() {
        for o in offers {
            let acc = o.accelerator().unwrap();
            if !job.accelerators.iter().any(|a| a == &acc.name) {
                continue;
            }
            if !job.constraints.allows(o) {
                continue;
            }
            for n in node_counts(job, 1) {
                let (c, infeasible) = evaluate(job, o, n, &unpruned);
                if infeasible.is_some() {
                    continue;
                }
                let mut usage = Vec::new();
                let mut over = false;
                for q in &unpruned.quotas {
                    if q.family == acc.family() {
                        over |= c.workers > q.limit;
                        usage.push((rid("q".into(), f64::from(q.limit)), f64::from(c.workers)));
                    }
                }
                if let Availability::Available(Some(cap)) = o.availability {
                    over |= n > cap;
                    usage.push((rid(o.key(), f64::from(cap)), f64::from(n)));
                }
                if let Some(b) = unpruned
                    .team_budgets
                    .get(&job.team)
                    .and_then(|b| b.total_usd)
                {
                    usage.push((rid(format!("budget {}", job.team), b), c.expected_cost));
                }
                if over {
                    continue;
                }
                problem.options.push(Choice {
                    job: j,
                    objective: c.expected_cost,
                    usage,
                });
                accelerators.push(f64::from(c.workers));
            }
        }
    }
    problem.unplaced_penalty = jobs
        .iter()
        .map(|j| unit * (1.0 + f64::from(j.priority.clamp(0, 100)) * 0.5))
        .collect();
    problem.limits = limits;
    Unpruned {
        problem,
        unit,
        accelerators,
    }
}

/// The plan of a small instance (proved optimal by HiGHS), its problem rebuilt without pruning,
/// and the plan's value there without fairness terms: placed costs plus unplaced penalties.
fn plan_and_rebuild(
    jobs: &[PlanJob],
    offers: &[Offer],
    options: &PlanOptions,
) -> Result<(PlanReport, Unpruned, f64), TestCaseError> {
    let (report, unit) = plan_with(jobs, offers, options, true);
    prop_assert_eq!(report.solver, SolverKind::Milp);
    let unpruned = unpruned_problem(jobs, offers, options, unit);
    let value = report
        .jobs
        .iter()
        .enumerate()
        .map(|(i, jp)| {
            jp.choice
                .as_ref()
                .map_or(unpruned.problem.unplaced_penalty[i], |c| c.expected_cost)
        })
        .sum();
    Ok((report, unpruned, value))
}

/// `value` equals the brute-force optimum, to rounding.
fn prop_assert_optimal(value: f64, best: f64) -> Result<(), TestCaseError> {
    prop_assert!(
        (value - best).abs() <= 1e-6 * best.abs().max(1.0),
        "plan {value} vs brute force {best}"
    );
    Ok(())
}

struct Unpruned {
    problem: Problem,
    /// The unplaced penalty at priority 0.
    unit: f64,
    /// Accelerators of each option.
    accelerators: Vec<f64>,
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// End to end on small instances: the plan (after pruning, on HiGHS) is as good as brute
    /// force over every feasible configuration, and respects quotas, caps and budgets.
    #[test]
    fn plan_matches_brute_force_over_unpruned_configurations((jobs, offers, options) in small_instance()) {
        let (report, Unpruned { problem, .. }, value) = plan_and_rebuild(&jobs, &offers, &options)?;
        let (best, _) = problem.brute_force();
        prop_assert_optimal(value, best)?;

        // No configuration a job's placement constraints rule out is chosen.
        for (job, jp) in jobs.iter().zip(&report.jobs) {
            if let Some(c) = &jp.choice {
                let o = offers.iter().find(|o| o.key() == c.offer).expect("chosen offer");
                prop_assert!(job.constraints.allows(o), "{} on {}", job.name, c.offer);
            }
        }

        // Every constraint holds in the answer.
        let mut a100 = 0;
        let mut spend = 0.0;
        let mut per_offer: HashMap<&str, u32> = HashMap::new();
        for c in report.jobs.iter().filter_map(|j| j.choice.as_ref()) {
            if c.accelerator.starts_with("A100") { a100 += c.workers; }
            spend += c.expected_cost;
            *per_offer.entry(c.offer.as_str()).or_default() += c.nodes;
        }
        if let Some(q) = options.quotas.first() { prop_assert!(a100 <= q.limit); }
        if let Some(b) = options.team_budgets.get("ml").and_then(|b| b.total_usd) { prop_assert!(spend <= b + 1e-6); } // every job is team ml's
        for o in &offers {
            if let Availability::Available(Some(cap)) = o.availability {
                prop_assert!(per_offer.get(o.key().as_str()).copied().unwrap_or(0) <= cap);
            }
        }
    }
}

#[test]
fn a_job_goes_where_its_data_is_and_never_where_it_may_not() {
    let spot =
        |zone: &str, price: f64| offer(Cloud::Aws, zone, "p4d", "A100", 8, Capacity::Spot, price);
    // ap-south-1 is a little cheaper, but the 800 GB of data live in us-east-1.
    let offers = vec![spot("ap-south-1a", 9.0), spot("us-east-1a", 9.2)];
    let mut j = job(
        "bert",
        &["A100"],
        8.0 * 4.0 * 3600.0,
        None,
        &[("A100", 1.0)],
    );
    j.workers = WorkerRange { min: 8, max: 8 };
    let free = plan(std::slice::from_ref(&j), &offers, &PlanOptions::default());
    assert_eq!(free.jobs[0].choice.as_ref().unwrap().offer, offers[0].key());
    j.constraints.data = Some(DataLocation {
        region: "us-east-1".into(),
        size_gb: 800.0,
    });
    let near = plan(std::slice::from_ref(&j), &offers, &PlanOptions::default());
    assert_eq!(
        near.jobs[0].choice.as_ref().unwrap().offer,
        offers[1].key(),
        "egress of $16 per start outweighs $0.2/h"
    );
    // Excluded everywhere: unplaced, with a reason.
    j.constraints.exclude = vec!["*-1a".into()];
    let none = plan(std::slice::from_ref(&j), &offers, &PlanOptions::default());
    assert!(!none.jobs[0].placed);
    assert!(none.jobs[0].reason.is_some());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Keeping only each job's digest of configurations (what the MILP and the report use)
    /// gives the very report the whole lists give: choices, alternatives and every reason.
    #[test]
    fn trimmed_lists_give_the_same_report(
        (jobs, offers, mut options) in small_instance(),
        alternatives in 0usize..4,
        keep in 1usize..4,
    ) {
        options.alternatives = alternatives;
        options.max_candidates_per_job = keep;
        let json = |r: PlanReport| {
            let mut v = serde_json::to_value(r).unwrap();
            v.as_object_mut().unwrap().remove("solve_ms");
            v
        };
        let trimmed = json(plan_with(&jobs, &offers, &options, true).0);
        let whole = json(plan_with(&jobs, &offers, &options, false).0);
        prop_assert_eq!(trimmed, whole);
    }
}

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
