use std::collections::HashMap;
use std::sync::Arc;

use proptest::prelude::*;
use tern_cloud::{
    Availability, Budget, Capacity, CapacityRule, CheckpointSpec, Cloud, Constraints, DataLocation,
    Offer, WorkerRange,
};

use super::*;
use crate::input::{Quota, Throughput, ThroughputModel};
use crate::problem::{Fairness, TeamTerm};

/// Samples/s per accelerator by name, scaling linearly with count (a test's stand-in for the
/// fitted forecaster; the planner only sees the trait).
#[derive(Debug)]
pub(super) struct Table(pub(super) HashMap<String, f64>);

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

pub(super) fn offer(
    cloud: Cloud,
    zone: &str,
    ty: &str,
    acc: &str,
    count: u32,
    capacity: Capacity,
    price: f64,
) -> Offer {
    tern_cloud::testkit::offer(ty, zone, capacity)
        .cloud(cloud)
        .gpus(acc, count)
        .price(price)
        .itemised()
        .availability(Availability::Unknown)
        .build()
}

/// An AWS quota of `limit` accelerators of `family`, every region and capacity together.
pub(super) fn aws_quota(family: &str, limit: u32) -> Quota {
    Quota {
        cloud: Cloud::Aws,
        region: None,
        family: family.into(),
        capacity: None,
        limit,
        unit: crate::QuotaUnit::Accelerators,
    }
}

pub(super) fn job(
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
        checkpoint_region: None,
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
        quotas: vec![aws_quota("V100", 0)],
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
        quotas: vec![aws_quota("A100", 1)],
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

/// Spot p4d in ap-south-1 at $9/h and in us-east-1 at $9.2/h, and a 4-hour job on 8 A100s.
fn two_regions() -> (Vec<Offer>, PlanJob) {
    let spot =
        |zone: &str, price: f64| offer(Cloud::Aws, zone, "p4d", "A100", 8, Capacity::Spot, price);
    let offers = vec![spot("ap-south-1a", 9.0), spot("us-east-1a", 9.2)];
    let mut j = job(
        "bert",
        &["A100"],
        8.0 * 4.0 * 3600.0,
        None,
        &[("A100", 1.0)],
    );
    j.workers = WorkerRange { min: 8, max: 8 };
    (offers, j)
}

#[test]
fn a_job_goes_where_its_data_is_and_never_where_it_may_not() {
    // ap-south-1 is a little cheaper, but the 800 GB of data live in us-east-1.
    let (offers, mut j) = two_regions();
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

#[test]
fn a_restart_weighs_bringing_its_checkpoint_from_another_region() {
    // ap-south-1 is $0.20/h cheaper over a 4-hour run; the 4,000 GB checkpoint is in us-east-1.
    let (offers, mut j) = two_regions();
    j.checkpoint.size_gb = 4000.0;
    let fresh = plan(std::slice::from_ref(&j), &offers, &PlanOptions::default());
    let choice = fresh.jobs[0].choice.as_ref().unwrap();
    assert_eq!(choice.offer, offers[0].key(), "nothing to bring over yet");
    assert_eq!(choice.egress_usd, 0.0);

    j.checkpoint_region = Some("us-east-1".into());
    let resumed = plan(std::slice::from_ref(&j), &offers, &PlanOptions::default());
    let r = &resumed.jobs[0];
    let choice = r.choice.as_ref().unwrap();
    assert_eq!(
        choice.offer,
        offers[1].key(),
        "$80 of egress outweighs $0.80"
    );
    assert_eq!(choice.egress_usd, 0.0);
    let away = r
        .alternatives
        .iter()
        .find(|a| a.config.offer == offers[0].key());
    let away = away.expect("the other region is listed");
    assert!((away.config.egress_usd - 4000.0 * 0.02).abs() < 1e-9);
    // The move's price is paid once, not at each expected restart.
    let hazard = away.config.hazard_per_hour * away.config.finish_h;
    assert!(hazard > 0.0, "spot restarts are expected");
    assert!(
        away.why_not.contains("egress $80.00 vs $0.00"),
        "{}",
        away.why_not
    );
    // Its price is the rate the options give.
    let no_egress = PlanOptions {
        egress_per_gb: 0.0,
        ..PlanOptions::default()
    };
    let free = plan(std::slice::from_ref(&j), &offers, &no_egress);
    assert_eq!(free.jobs[0].choice.as_ref().unwrap().offer, offers[0].key());
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

mod fairness;
