//! The replay engine against brute force, the omniscient optimum and its own invariants.

use super::*;
use std::path::PathBuf;

fn trace(zone: &str, data: Vec<u32>) -> Trace {
    Trace {
        source: PathBuf::from(format!("{zone}.json")),
        cloud: tern_cloud::Cloud::Aws,
        region: tern_sim::trace::region_of(zone),
        zone: zone.into(),
        gap_seconds: 3600,
        available: data,
        prices: None,
        spot_price: None,
        on_demand_price: None,
    }
}

#[test]
fn each_zone_bills_its_own_on_demand_price_and_on_demand_goes_to_the_cheapest() {
    // No spot anywhere; zone b (another region) sells on-demand at 2.0, zone a at 3.0.
    let mut a = trace("us-east-1a", vec![0; 40]);
    a.on_demand_price = Some(3.0);
    let mut b = trace("us-west-2a", vec![0; 40]);
    b.on_demand_price = Some(2.0);
    let mut sc = scenario(vec![a, b]);
    sc.on_demand_price = None;
    sc.egress_cost = 5.0;
    let p = sc.prepare().expect("prepare");
    assert_eq!(
        p.on_demand_price, 2.0,
        "the cheapest zone is the job's on-demand price"
    );
    assert_eq!(p.on_demand_prices(), &[3.0, 2.0]);
    let od = p.run_window(PolicyKind::OnDemand, 0);
    // 10 h of work + 1 h restart at 2.0 $/h; no checkpoint yet, so no egress.
    assert!((od.cost - 22.0).abs() < 1e-9, "{od:?}");
    let best = p.run_window(PolicyKind::Optimal, 0);
    assert!((best.cost - 22.0).abs() < 1e-9, "{best:?}");
    // The ratio's denominator is C hours at the cheapest on-demand price.
    let s = p.summarise(PolicyKind::OnDemand.name(), std::iter::once(od));
    assert!((s.mean_cost_ratio - 1.1).abs() < 1e-9, "{s:?}");
}

#[test]
fn on_demand_stays_with_the_checkpoint_when_moving_it_costs_more_than_it_saves() {
    // Spot in zone a (region 0) for the first 3 hours, then nothing; on-demand is 0.1 $/h
    // cheaper in zone b's region, but moving the checkpoint there costs 5 $.
    let mut a = trace("us-east-1a", [vec![1; 3], vec![0; 37]].concat());
    a.on_demand_price = Some(1.0);
    let mut b = trace("us-west-2a", vec![0; 40]);
    b.on_demand_price = Some(0.9);
    let mut sc = scenario(vec![a, b]);
    sc.on_demand_price = None;
    sc.egress_cost = 5.0;
    let p = sc.prepare().expect("prepare");
    let g = p.run_window(PolicyKind::Greedy, 0);
    // 3 ticks of spot (1 boot + 2 work) at 0.3, then on-demand in region 0 at 1.0: a restart
    // plus 8 ticks of work left = 9 ticks; staying beats 9 × 0.9 + 5.
    assert!((g.cost - (3.0 * 0.3 + 9.0 * 1.0)).abs() < 1e-9, "{g:?}");
    assert!(g.finished);
    let best = p.run_window(PolicyKind::Optimal, 0);
    assert!(best.cost <= g.cost + 1e-9);
}

fn scenario(traces: Vec<Trace>) -> Scenario {
    Scenario {
        traces,
        work_hours: 10.0,
        deadline_hours: 16.0,
        restart_hours: 1.0,
        on_demand_price: Some(1.0),
        spot_price: Some(0.3),
        stride_hours: 4.0,
        egress_cost: 0.0,
        nodes: 1,
    }
}

#[test]
fn on_demand_costs_work_plus_one_restart() {
    let p = scenario(vec![trace("us-east-1a", vec![0; 40])])
        .prepare()
        .unwrap();
    let s = p.replay(&[PolicyKind::OnDemand], &|| ());
    assert_eq!(s[0].windows, 7); // starts 0, 4, ..., 24
    assert!((s[0].mean_cost_ratio - 1.1).abs() < 1e-9);
    assert_eq!(s[0].deadline_misses, 0);
    assert_eq!(s[0].spot_share, 0.0);
}

#[test]
fn always_available_spot_costs_the_spot_price() {
    let p = scenario(vec![trace("us-east-1a", vec![1; 40])])
        .prepare()
        .unwrap();
    for s in p.replay(
        &[
            PolicyKind::Greedy,
            PolicyKind::UniformProgress,
            PolicyKind::Optimal,
        ],
        &|| (),
    ) {
        assert!((s.mean_cost_ratio - 0.33).abs() < 1e-9, "{s:?}");
        assert_eq!(s.spot_share, 1.0);
    }
}

#[test]
fn policy_names_round_trip_and_bad_ones_are_named() {
    for p in PolicyKind::ALL.into_iter().chain([PolicyKind::Informed]) {
        assert_eq!(p.name().parse::<PolicyKind>().unwrap(), p);
    }
    assert!(
        "cheap"
            .parse::<PolicyKind>()
            .unwrap_err()
            .to_string()
            .contains("cheap")
    );
}

#[test]
fn infeasible_deadlines_and_mixed_ticks_are_rejected() {
    let mut s = scenario(vec![trace("a1", vec![1; 40])]);
    s.deadline_hours = 10.5;
    assert!(s.prepare().unwrap_err().to_string().contains("cannot fit"));
    let mut other = trace("b1", vec![1; 40]);
    other.gap_seconds = 60;
    let s = scenario(vec![trace("a1", vec![1; 40]), other]);
    assert!(s.prepare().unwrap_err().to_string().contains("tick length"));
}

#[test]
fn informed_learns_from_its_windows_own_ticks_and_sees_the_real_present() {
    let data: Vec<u32> = (0..40).map(|i| u32::from(i % 3 == 0)).collect();
    let p = scenario(vec![trace("us-east-1a", data.clone())])
        .prepare()
        .unwrap();
    let d = p.job.deadline as usize;
    for &start in &p.starts {
        let told = p.told(start);
        let o = told.offset.expect("informed reads at an offset");
        assert_eq!(o, d);
        let seen = &told.avail[0];
        // Everything before the window's first tick is the window itself ...
        assert_eq!(&seen[..d], &data[start..start + d]);
        // ... and at window tick t the policy sees the trace's own tick start + t.
        for t in 0..d {
            assert_eq!(seen[o + t], data[start + t], "start {start}, tick {t}");
        }
    }
    // Online policies see the trace itself.
    let past = p.past();
    assert_eq!(past.offset, None);
    assert_eq!(&*past.avail[0], data.as_slice());
}

#[test]
fn informed_is_told_what_a_calm_past_hides() {
    // Spot was always there before the window, and in the window it lasts one tick in three:
    // each start (one tick of restart) is lost before it does any work. `tern`, learning
    // from the calm past, tries spot and burns slack; told the window's own rates,
    // `informed` does no worse (and never misses).
    let past = vec![1u32; 48];
    let window: Vec<u32> = (0..16).map(|i| u32::from(i % 3 == 0)).collect();
    let mut sc = scenario(vec![trace("us-east-1a", [past, window].concat())]);
    sc.stride_hours = 48.0;
    let p = sc.prepare().unwrap();
    assert_eq!(p.starts, vec![0, 48]);
    let tern = p.run_window(PolicyKind::Tern, 48);
    let informed = p.run_window(PolicyKind::Informed, 48);
    let best = p.run_window(PolicyKind::Optimal, 48);
    assert!(tern.finished && informed.finished);
    assert!(best.cost <= informed.cost + 1e-9);
    assert!(
        informed.cost < tern.cost,
        "informed {informed:?} against tern {tern:?}"
    );
}

/// A multi-node trace from a seeded LCG: runs of random length at random counts 0..=k.
fn lumpy(seed: u64, len: usize, k: u32) -> Vec<u32> {
    let mut rng = tern_sim::testkit::Lcg::new(seed);
    let mut next = move || rng.next_u32();
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        let level = next() % (k + 1);
        let run = 1 + next() % 8;
        out.extend(std::iter::repeat_n(level, run as usize));
    }
    out.truncate(len);
    out
}

#[test]
fn elastic_optimum_is_never_beaten_and_online_policies_never_miss() {
    for seed in 0..12u64 {
        let k = 2 + (seed % 3) as u32;
        let zones = 1 + (seed % 2) as usize;
        let traces: Vec<Trace> = (0..zones)
            .map(|z| {
                let name = ["us-east-1a", "us-west-2b"][z];
                let mut t = trace(name, lumpy(seed * 7 + z as u64, 60, k));
                // Per-zone on-demand prices on odd seeds (region b cheaper).
                t.on_demand_price = (seed % 2 == 1).then_some([1.0, 0.8][z]);
                t
            })
            .collect();
        let mut sc = scenario(traces);
        if seed % 2 == 1 {
            sc.on_demand_price = None;
        }
        sc.nodes = k;
        sc.egress_cost = 0.5;
        let table: Vec<f64> = (0..=k)
            .map(|n| (f64::from(n) / f64::from(k)).sqrt())
            .collect();
        for (min_nodes, rel) in [(1, None), (k - 1, Some(table.clone())), (k, None)] {
            let p = sc
                .prepare_elastic(&Elasticity {
                    min_nodes,
                    relative_throughput: rel.clone(),
                })
                .unwrap();
            for &start in &p.starts {
                let best = p.run_window(PolicyKind::Optimal, start);
                assert!(best.finished);
                for policy in [
                    PolicyKind::OnDemand,
                    PolicyKind::Greedy,
                    PolicyKind::UniformProgress,
                    PolicyKind::Tern,
                    PolicyKind::Informed,
                ] {
                    let r = p.run_window(policy, start);
                    assert!(
                        r.finished,
                        "{} missed: seed {seed}, M {min_nodes}",
                        policy.name()
                    );
                    assert!(
                        best.cost <= r.cost + 1e-9,
                        "{} {} < optimal {}: seed {seed}, M {min_nodes}, {rel:?}",
                        policy.name(),
                        r.cost,
                        best.cost
                    );
                }
            }
        }
    }
}

#[test]
fn elastic_job_runs_on_partial_capacity_and_bills_what_it_holds() {
    // Three of four nodes, always: the gang pays on-demand, the linear elastic job runs on
    // three spot nodes at 3/4 speed (10 h of work → 14 h, within 16 h with a 1 h start).
    let mut sc = scenario(vec![trace("us-east-1a", vec![3; 40])]);
    sc.nodes = 4;
    let gang = sc.prepare().unwrap();
    let el = sc
        .prepare_elastic(&Elasticity {
            min_nodes: 2,
            relative_throughput: None,
        })
        .unwrap();
    assert_eq!((el.job.unit, el.job.min_nodes), (4, 2));
    for p in [PolicyKind::Greedy, PolicyKind::Optimal] {
        let g = gang.run_window(p, 0);
        assert!((g.cost - 44.0).abs() < 1e-9, "{g:?}"); // 11 h × 4 nodes × $1
        let e = el.run_window(p, 0);
        // 1 h boot + ceil(40 units / 3 per hour) = 14 h, on 3 nodes at $0.3.
        assert!(
            (e.cost - 0.3 * 3.0 * 15.0).abs() < 1e-9,
            "{} {e:?}",
            p.name()
        );
        assert_eq!((e.spot_ticks, e.on_demand_ticks), (45, 0));
    }
    let err = sc
        .prepare_elastic(&Elasticity {
            min_nodes: 5,
            relative_throughput: None,
        })
        .unwrap_err()
        .to_string();
    assert!(err.contains("min nodes"), "{err}");
}

#[test]
fn percentile_is_nearest_rank() {
    let v: Vec<f64> = (1..=10).map(f64::from).collect();
    assert_eq!(percentile(&v, 0.9), 9.0);
    assert_eq!(percentile(&v, 1.0), 10.0);
    assert!(percentile(&[], 0.5).is_nan());
}

/// A 1-second-tick trace with a 52 h deadline asked for 62 GB and aborted; it is refused
/// with the figures, and the policies without tables still replay it.
#[test]
fn oversized_tables_are_refused_before_any_allocation() {
    let mut t = trace("us-east-1a", vec![1; 60 * 3600]);
    t.gap_seconds = 1;
    let mut s = scenario(vec![t]);
    (s.work_hours, s.deadline_hours, s.restart_hours) = (40.0, 52.0, 0.2);
    s.stride_hours = 1.0;
    let p = s.prepare().expect("prepares");
    let e = p
        .check_memory(&PolicyKind::ALL)
        .expect_err("too big")
        .to_string();
    assert!(e.contains("GiB") && e.contains("coarser ticks"), "{e}");
    assert!(p.table_bytes(&[PolicyKind::Optimal]) > MAX_TABLE_BYTES / 8);
    let cheap = [
        PolicyKind::OnDemand,
        PolicyKind::Greedy,
        PolicyKind::UniformProgress,
    ];
    assert_eq!(p.table_bytes(&cheap), 0);
    assert!(p.check_memory(&cheap).is_ok());
    // The usual hour-tick scenario is far below the limit.
    let small = scenario(vec![trace("a1", vec![1; 40])])
        .prepare()
        .expect("small");
    assert!(small.check_memory(&PolicyKind::ALL).is_ok());
}

#[test]
fn nonsense_spot_prices_are_refused() {
    for bad in [-1.0, f64::NAN, f64::INFINITY] {
        let mut s = scenario(vec![trace("a1", vec![1; 40])]);
        s.spot_price = Some(bad);
        let e = s.prepare().expect_err("bad price").to_string();
        assert!(e.contains("spot price"), "{bad}: {e}");
    }
}
