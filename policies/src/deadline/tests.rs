use super::*;
use proptest::prelude::*;

fn job(work: u32, deadline: u32, restart: u32) -> Job {
    Job::gang(work, deadline, restart, 1)
}

/// Exhaustive search over every sequence of choices, straight from the model's rules (not
/// from [`Job::working`]): spot nodes are a stack of start ticks (joiners pushed, the
/// youngest popped when capacity shrinks), a node works once it has been held `restart`
/// ticks, a change of the working count is a tick without progress, and every node held is
/// billed. Besides idle / spot / on-demand, a spot job may restart in place (a new start,
/// which pays `restart` again but makes the next working tick a run's first): the optimum
/// may stop and start again in the same tick, and for an elastic job that can beat two
/// re-rendezvous in a row.
fn brute(job: &Job, avail: &[u32], spot: f64, od: f64) -> f64 {
    #[derive(Clone, Copy, PartialEq)]
    enum P {
        Idle,
        Spot,
        Od,
    }
    #[derive(Clone)]
    struct S {
        t: u32,
        done: u32,
        p: P,
        boot: u32,
        /// Start tick of every spot node held, oldest first.
        stack: Vec<u32>,
        /// Nodes that worked at the previous tick of this spot run.
        working: u32,
    }
    fn go(job: &Job, avail: &[u32], spot: f64, od: f64, s: &S) -> f64 {
        if s.done >= job.total() {
            return 0.0;
        }
        if s.t >= job.deadline {
            return INF;
        }
        let a = avail[s.t as usize];
        let up = a >= job.min_nodes;
        // Preemption at the start of the tick.
        let p = if s.p == P::Spot && !up { P::Idle } else { s.p };
        let mut best = INF;
        for (want, restart) in [
            (P::Idle, false),
            (P::Spot, false),
            (P::Od, false),
            (P::Spot, true),
        ] {
            if want == P::Spot && !up || restart && p != P::Spot {
                continue;
            }
            let mut n = S {
                t: s.t + 1,
                done: s.done,
                p: want,
                boot: 0,
                stack: Vec::new(),
                working: 0,
            };
            let fresh = want != p || restart;
            let boot = if fresh { job.restart } else { s.boot };
            let cost = match want {
                P::Idle => 0.0,
                P::Od => {
                    if boot > 0 {
                        n.boot = boot - 1;
                    } else {
                        n.done += job.unit;
                    }
                    od * f64::from(job.nodes)
                }
                P::Spot => {
                    n.stack = if fresh { Vec::new() } else { s.stack.clone() };
                    let held = a.min(job.nodes) as usize;
                    n.stack.truncate(held);
                    while n.stack.len() < held {
                        n.stack.push(s.t);
                    }
                    if boot > 0 {
                        n.boot = boot - 1;
                    } else {
                        let w = n
                            .stack
                            .iter()
                            .filter(|&&st| st + job.restart <= s.t)
                            .count() as u32;
                        if s.working == 0 || s.working == w {
                            n.done += job.speed[w as usize];
                        }
                        n.working = w;
                    }
                    spot * held as f64
                }
            };
            best = best.min(cost + go(job, avail, spot, od, &n));
        }
        best
    }
    let start = S {
        t: 0,
        done: 0,
        p: P::Idle,
        boot: 0,
        stack: Vec::new(),
        working: 0,
    };
    go(job, avail, spot, od, &start)
}

fn zone<'a>(a: &'a [u32], p: &'a [f64]) -> [ZoneFuture<'a>; 1] {
    [ZoneFuture {
        available: a,
        spot_price: p,
        region: 0,
    }]
}

/// Runs an online policy on one zone the way the replay engine does (on-demand $1/h per
/// node, one-hour ticks); returns units done and dollars spent.
fn replay_online(p: &mut dyn DeadlinePolicy, j: &Job, avail: &[u32], spot: f64) -> (u32, f64) {
    let mut s = JobProgress::new();
    let mut cost = 0.0;
    for t in 0..j.deadline {
        if s.done >= j.total() {
            break;
        }
        let views = [ZoneView {
            history: &avail[..=t as usize],
            spot_price: spot,
            region: 0,
        }];
        let obs = TickView {
            tick: t,
            zones: &views,
            on_demand_price: 1.0,
            tick_hours: 1.0,
            egress_cost: 0.0,
        };
        if matches!(s.placement, Placement::Spot(_)) && !views[0].up(j.min_nodes) {
            s.placement = Placement::Idle;
            s.booting = 0;
        }
        let want = p.decide(j, &s, &obs);
        let act = safe(j, &s, &obs, want);
        if act == Placement::Idle {
            s.placement = Placement::Idle;
            s.booting = 0;
            continue;
        }
        if act != s.placement {
            s.placement = act;
            s.booting = j.restart;
            s.working = 0;
        }
        cost += match act {
            Placement::OnDemand => f64::from(j.nodes),
            _ => spot * f64::from(j.held(avail[t as usize])),
        };
        j.advance(&mut s, act, &views);
    }
    (s.done, cost)
}

/// An elastic job from proptest inputs: `k` nodes, `m` = 1 + `m_off` mod k, speeds from
/// `fr` (or linear).
fn elastic_job(base: Job, m_off: u32, fr: &[f64], linear: bool) -> Job {
    let k = base.nodes;
    let mut table = vec![0.0];
    table.extend(fr.iter().take(k as usize - 1));
    table.push(1.0);
    let m = 1 + m_off % k;
    base.elastic(m, (!linear).then_some(&table[..]))
        .expect("valid elastic job")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]
    #[test]
    fn optimum_matches_brute_force(
        avail in proptest::collection::vec(0u32..2, 9..10),
        work in 1u32..6,
        extra in 0u32..4,
        restart in 1u32..3,
        spot in 0.1f64..0.9,
    ) {
        let j = job(work, (work + restart + extra).min(9), restart);
        prop_assume!(j.feasible());
        let prices = vec![spot; avail.len()];
        let z = zone(&avail, &prices);
        let dp = optimal(&j, &z, 1.0, 1.0, 0.0);
        let bf = brute(&j, &avail, spot, 1.0);
        prop_assert!((dp.cost - bf).abs() < 1e-9, "dp {} vs brute {}", dp.cost, bf);
        prop_assert!(dp.finished);
        let billed = f64::from(dp.spot_ticks) * spot + f64::from(dp.on_demand_ticks);
        prop_assert!((billed - dp.cost).abs() < 1e-9);
    }

    /// Elastic jobs (K ≤ 3, any M ≤ K, random or linear speed tables, availability 0..=K):
    /// the DP on the quantised grid equals brute force on the same grid.
    #[test]
    fn elastic_optimum_matches_brute_force(
        k in 1u32..4,
        m_off in 0u32..3,
        raw in proptest::collection::vec(0u32..4, 8..9),
        work in 1u32..5,
        extra in 0u32..4,
        restart in 1u32..3,
        spot in 0.1f64..0.9,
        fr in proptest::collection::vec(0.0f64..1.0, 2),
        linear in any::<bool>(),
    ) {
        let avail: Vec<u32> = raw.iter().map(|&a| a.min(k)).collect();
        let base = Job::gang(work, (work + restart + extra).min(8), restart, k);
        prop_assume!(base.feasible());
        let j = elastic_job(base, m_off, &fr, linear);
        let prices = vec![spot; avail.len()];
        let z = zone(&avail, &prices);
        let dp = optimal(&j, &z, 1.0, 1.0, 0.0);
        let bf = brute(&j, &avail, spot, 1.0);
        prop_assert!((dp.cost - bf).abs() < 1e-9, "dp {} vs brute {} for {:?}", dp.cost, bf, j);
        prop_assert!(dp.finished);
        let billed = f64::from(dp.spot_ticks) * spot + f64::from(dp.on_demand_ticks);
        prop_assert!((billed - dp.cost).abs() < 1e-9, "{dp:?}");
        // Never worse than on-demand alone.
        prop_assert!(dp.cost <= f64::from(k * (j.work + j.restart)) + 1e-9);
    }

    #[test]
    fn online_policies_never_miss_a_feasible_deadline(
        avail in proptest::collection::vec(0u32..2, 40..80),
        work in 5u32..30,
        extra in 0u32..20,
        restart in 1u32..4,
    ) {
        let j = job(work, work + restart + extra, restart);
        prop_assume!((j.deadline as usize) <= avail.len());
        let mut policies: Vec<Box<dyn DeadlinePolicy>> = vec![
            Box::new(OnDemandOnly), Box::new(Greedy), Box::new(UniformProgress), Box::new(Tern::new()),
        ];
        for p in &mut policies {
            let (done, _) = replay_online(p.as_mut(), &j, &avail, 0.3);
            prop_assert!(done >= j.total(), "{} missed", p.name());
        }
    }

    /// The same for elastic jobs on multi-level availability, and every online policy costs
    /// at least the optimum.
    #[test]
    fn elastic_online_policies_never_miss_and_never_beat_the_optimum(
        raw in proptest::collection::vec(0u32..4, 40..80),
        m_off in 0u32..3,
        work in 5u32..30,
        extra in 0u32..20,
        restart in 1u32..4,
        fr in proptest::collection::vec(0.0f64..1.0, 2),
        linear in any::<bool>(),
    ) {
        let avail: Vec<u32> = raw.iter().map(|&a| a.min(3)).collect();
        let base = Job::gang(work, work + restart + extra, restart, 3);
        prop_assume!((base.deadline as usize) <= avail.len());
        let j = elastic_job(base, m_off, &fr, linear);
        let mut policies: Vec<Box<dyn DeadlinePolicy>> = vec![
            Box::new(OnDemandOnly), Box::new(Greedy), Box::new(UniformProgress), Box::new(Tern::new()),
        ];
        let prices = vec![0.3; avail.len()];
        let best = optimal(&j, &zone(&avail, &prices), 1.0, 1.0, 0.0);
        prop_assert!(best.finished);
        for p in &mut policies {
            let (done, cost) = replay_online(p.as_mut(), &j, &avail, 0.3);
            prop_assert!(done >= j.total(), "{} missed", p.name());
            prop_assert!(best.cost <= cost + 1e-9, "{} {cost} beats the optimum {}", p.name(), best.cost);
        }
    }
}

#[test]
fn elastic_jobs_validate_and_build_their_speed_table() {
    let gang = Job::gang(10, 14, 2, 4);
    for bad in [0, 5] {
        let err = gang.clone().elastic(bad, None).unwrap_err();
        assert!(
            err.contains("between 1 and") && err.contains(&bad.to_string()),
            "{err}"
        );
    }
    // M = K is the gang, whatever the table.
    assert_eq!(
        gang.clone().elastic(4, Some(&[0.0, 0.1, 0.2, 0.3, 1.0])),
        Ok(gang.clone())
    );
    // Linear by default: node-ticks, exact.
    let lin = gang.clone().elastic(2, None).unwrap();
    assert_eq!((lin.unit, &lin.speed[..]), (4, &[0, 0, 2, 3, 4][..]));
    assert_eq!(lin.total(), 40);
    assert_eq!(lin.ticks_left(37), 1);
    // A linear table given explicitly is recognised.
    let same = gang
        .clone()
        .elastic(2, Some(&[0.0, 0.25, 0.5, 0.75, 1.0]))
        .unwrap();
    assert_eq!(same, lin);
    // Sub-linear: quantised down to 1/32 of a tick; above 1 is capped.
    let sub = gang
        .clone()
        .elastic(1, Some(&[0.0, 0.3, 0.55, 1.2, 1.0]))
        .unwrap();
    assert_eq!(sub.unit, 32);
    assert_eq!(&sub.speed[..], &[0, 9, 17, 32, 32][..]); // 9.6 → 9, 17.6 → 17
    // Tables of the wrong length or with junk are rejected.
    assert!(gang.clone().elastic(2, Some(&[0.0, 1.0])).is_err());
    let err = gang
        .elastic(2, Some(&[0.0, 0.0, f64::NAN, 0.5, 1.0]))
        .unwrap_err();
    assert!(err.contains("2 node(s)"), "{err}");
}

#[test]
fn joining_nodes_boot_and_resizes_pause_one_tick() {
    let j = Job::gang(10, 30, 2, 4).elastic(2, None).unwrap();
    assert_eq!((j.held(1), j.held(2), j.held(7)), (0, 2, 4));
    // Capacity rose from 2 to 4 two ticks ago: the new nodes still boot (restart 2).
    assert_eq!(j.working(&[2, 2, 4, 4]), 2);
    assert_eq!(j.working(&[2, 4, 4, 4]), 4);
    // A loss counts at once.
    assert_eq!(j.working(&[4, 4, 4, 3]), 3);
    assert_eq!(j.spot_gain(3, 0), 3); // first working tick of a run
    assert_eq!(j.spot_gain(3, 3), 3);
    assert_eq!(j.spot_gain(3, 4), 0); // re-rendezvous
}

#[test]
fn elastic_job_uses_partial_capacity_a_gang_cannot() {
    // Two of four nodes all the time: the gang must pay on-demand, the elastic job runs on
    // spot at half speed and finishes within the deadline for less.
    let avail = [2u32; 30];
    let prices = [0.3; 30];
    let z = zone(&avail, &prices);
    let gang = Job::gang(10, 30, 2, 4);
    let g = optimal(&gang, &z, 1.0, 1.0, 0.0);
    assert!((g.cost - 4.0 * 12.0).abs() < 1e-9, "{g:?}");
    let el = gang.elastic(2, None).unwrap();
    let e = optimal(&el, &z, 1.0, 1.0, 0.0);
    // 2 boot ticks + 20 half-speed ticks on 2 nodes at 0.3.
    assert!((e.cost - 0.3 * 2.0 * 22.0).abs() < 1e-9, "{e:?}");
    assert_eq!((e.spot_ticks, e.on_demand_ticks), (44, 0));
    let (done, cost) = replay_online(&mut Greedy, &el, &avail, 0.3);
    assert_eq!(done, el.total(), "greedy finishes too");
    assert!(cost >= e.cost - 1e-9);
}

#[test]
fn relative_throughput_follows_the_forecasters_scaling_curve() {
    let now = chrono::Utc::now();
    let mut f = Forecaster::new();
    for (gpus, nodes, step) in [
        (1, 1, 0.40),
        (4, 1, 0.42),
        (8, 2, 0.55),
        (16, 4, 0.60),
        (32, 8, 0.70),
    ] {
        f.observe(&tern_cloud::Observation {
            job: "j".into(),
            accelerator: "T4".into(),
            gpus,
            nodes,
            local_batch: 64,
            step_seconds: step,
            sync_seconds: None,
            at: now,
        })
        .unwrap();
    }
    f.refit().unwrap();
    let r = relative_throughput(&f, "j", "T4", 4, 64.0, 4).unwrap();
    assert_eq!(r.len(), 5);
    assert_eq!(r[0], 0.0);
    assert!((r[4] - 1.0).abs() < 1e-12);
    for pair in r[1..].windows(2) {
        assert!(pair[0] > 0.0 && pair[0] < pair[1], "{r:?}");
    }
    // Sub-linear: one node of four does more than a quarter of the work (sync is cheaper).
    assert!(r[1] > 0.25, "{r:?}");
    let j = Job::gang(10, 20, 1, 4).elastic(1, Some(&r)).unwrap();
    for (units, rel) in j.speed.iter().zip(&r).skip(1) {
        assert!(f64::from(*units) <= rel * f64::from(j.unit) + 1e-9);
    }
    assert!(relative_throughput(&f, "other", "T4", 4, 64.0, 4).is_err());
}

#[test]
fn optimum_waits_for_cheap_spot_when_slack_allows() {
    // Spot comes up at tick 3 and stays; 4 ticks of work, deadline 10, restart 1.
    let avail = [0, 0, 0, 1, 1, 1, 1, 1, 1, 1];
    let prices = [0.3; 10];
    let z = zone(&avail, &prices);
    let out = optimal(&job(4, 10, 1), &z, 1.0, 1.0, 0.0);
    assert!((out.cost - 5.0 * 0.3).abs() < 1e-9);
    assert_eq!((out.spot_ticks, out.on_demand_ticks), (5, 0));
}

#[test]
fn optimum_moves_zones_and_pays_egress_only_across_regions() {
    let a = [1, 1, 0, 0, 0, 0, 0, 0];
    let b = [0, 1, 1, 1, 1, 1, 1, 1];
    let prices = [0.2; 8];
    let same = [
        ZoneFuture {
            available: &a,
            spot_price: &prices,
            region: 0,
        },
        ZoneFuture {
            available: &b,
            spot_price: &prices,
            region: 0,
        },
    ];
    let out = optimal(&job(5, 8, 1), &same, 1.0, 1.0, 10.0);
    assert!(out.cost < 1.5, "{out:?}");
    let far = [
        ZoneFuture {
            available: &a,
            spot_price: &prices,
            region: 0,
        },
        ZoneFuture {
            available: &b,
            spot_price: &prices,
            region: 1,
        },
    ];
    let out_far = optimal(&job(5, 8, 1), &far, 1.0, 1.0, 10.0);
    // Starting in the far region from the beginning avoids the egress: same cost.
    assert!((out_far.cost - out.cost).abs() < 1e-9, "{out_far:?}");
}

#[test]
fn safety_forces_on_demand_at_the_last_safe_moment() {
    let j = job(10, 14, 2);
    let avail = [1u32; 14];
    let views = [ZoneView {
        history: &avail,
        spot_price: 0.3,
        region: 0,
    }];
    let obs = |tick| TickView {
        tick,
        zones: &views,
        on_demand_price: 1.0,
        tick_hours: 1.0,
        egress_cost: 0.0,
    };
    let idle = JobProgress::new();
    // 14 ticks left, 10 work, restart 2: idling one tick leaves 13 ≥ 10 + 2.
    assert_eq!(safe(&j, &idle, &obs(0), Placement::Idle), Placement::Idle);
    // 12 ticks left: idling leaves 11 < 12.
    assert_eq!(
        safe(&j, &idle, &obs(2), Placement::Idle),
        Placement::OnDemand
    );
    let running = JobProgress {
        done: 3,
        placement: Placement::Spot(0),
        ..JobProgress::new()
    };
    // 9 left, 7 work: continuing spot leaves 8 ≥ 6 + 2.
    assert_eq!(
        safe(&j, &running, &obs(5), Placement::Spot(0)),
        Placement::Spot(0)
    );
    assert_eq!(
        safe(&j, &running, &obs(6), Placement::Spot(0)),
        Placement::OnDemand
    );
}

#[test]
fn job_rounding_is_conservative() {
    let j = Job::from_hours(48.0, 52.0, 0.2, 195, 1);
    assert_eq!(j.work, 887); // 48 h / 195 s = 886.15 → 887
    assert_eq!(j.deadline, 960); // 52 h / 195 s = 960.0
    assert_eq!(j.restart, 4); // 0.2 h / 195 s = 3.69 → 4
    assert!(j.feasible());
}
