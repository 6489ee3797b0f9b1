//! Replays the real 45-day, 9-AZ V100 traces (aws-02-15-2023) and checks the claims of issue #6:
//! optimal ≤ tern ≤ up ≤ greedy averaged over the nine zones (optimal ≤ tern on each), tern never
//! misses, and tern across all nine zones beats the best single-zone Uniform Progress. A coarse
//! stride keeps it quick in debug builds; `tern simulate` gives the full-resolution figures.

#![allow(clippy::unwrap_used)] // a test: a failed unwrap is a failed test

use std::path::PathBuf;

use tern_replay::{PolicyKind, Scenario, Summary};
use tern_sim::Trace;

fn traces() -> Vec<Trace> {
    let dir = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/data/catalog/aws/spot-traces/availability/1-node/aws-02-15-2023"
    ));
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    assert_eq!(files.len(), 9);
    files.iter().map(|f| Trace::load(f).unwrap()).collect()
}

fn stride() -> f64 {
    std::env::var("TERN_TEST_STRIDE_HOURS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(if cfg!(debug_assertions) { 96.0 } else { 24.0 })
}

fn run(traces: Vec<Trace>, deadline: f64) -> Vec<Summary> {
    let s = Scenario {
        traces,
        work_hours: 48.0,
        deadline_hours: deadline,
        restart_hours: 0.2,
        on_demand_price: None,
        spot_price: None,
        stride_hours: stride(),
        egress_cost: 0.0,
        nodes: 1,
    };
    s.prepare().unwrap().replay(&PolicyKind::ALL, &|| ())
}

fn by(s: &[Summary], p: PolicyKind) -> &Summary {
    s.iter().find(|x| x.policy == p.name()).unwrap()
}

#[test]
fn orderings_hold_on_average_and_tern_never_misses() {
    let all = traces();
    for deadline in [52.0, 70.0] {
        let mut best_up = f64::INFINITY;
        let mut sum = [0.0; 5];
        for t in &all {
            let zone = t.zone.clone();
            let s = run(vec![t.clone()], deadline);
            let ratios = PolicyKind::ALL.map(|p| by(&s, p).mean_cost_ratio);
            let [od, greedy, up, opt, tern] = ratios;
            eprintln!(
                "D={deadline} {zone:11} od {od:.3} greedy {greedy:.3} up {up:.3} optimal {opt:.3} tern {tern:.3} (gap {:+.1} %) misses greedy {} up {} tern {}",
                (tern / opt - 1.0) * 100.0,
                by(&s, PolicyKind::Greedy).deadline_misses,
                by(&s, PolicyKind::UniformProgress).deadline_misses,
                by(&s, PolicyKind::Tern).deadline_misses
            );
            assert_eq!(
                by(&s, PolicyKind::Tern).deadline_misses,
                0,
                "{zone} D={deadline}"
            );
            assert_eq!(by(&s, PolicyKind::Optimal).deadline_misses, 0, "{zone}");
            assert!(
                opt <= tern + 1e-9,
                "{zone} D={deadline}: optimal {opt} > tern {tern}"
            );
            for (acc, r) in sum.iter_mut().zip(ratios) {
                *acc += r / all.len() as f64;
            }
            best_up = best_up.min(up);
        }
        let [_, greedy, up, opt, tern] = sum;
        eprintln!(
            "D={deadline} average of 9 zones: greedy {greedy:.3} up {up:.3} optimal {opt:.3} tern {tern:.3} (gap {:+.1} %)",
            (tern / opt - 1.0) * 100.0
        );
        assert!(
            opt <= tern && tern <= up && up <= greedy,
            "D={deadline}: {sum:?}"
        );
        let s = run(all.clone(), deadline);
        let tern = by(&s, PolicyKind::Tern);
        eprintln!(
            "D={deadline} all 9 zones together: tern {:.3} (moves {:.1}/window), optimal {:.3}, best single-zone up {best_up:.3}",
            tern.mean_cost_ratio,
            tern.mean_moves,
            by(&s, PolicyKind::Optimal).mean_cost_ratio
        );
        assert_eq!(tern.deadline_misses, 0);
        assert!(
            tern.mean_cost_ratio < best_up,
            "9 zones: tern {} vs best single-zone up {best_up}",
            tern.mean_cost_ratio
        );
    }
}

/// Timing per policy at the CLI's default stride (6 h):
/// `cargo test --release -p tern-sim --test real_traces -- --ignored --nocapture`.
#[test]
#[ignore]
fn timing_per_policy() {
    let all = traces();
    for deadline in [52.0, 70.0] {
        for p in PolicyKind::ALL {
            let t0 = std::time::Instant::now();
            let mut windows = 0;
            for t in &all {
                let s = Scenario {
                    traces: vec![t.clone()],
                    work_hours: 48.0,
                    deadline_hours: deadline,
                    restart_hours: 0.2,
                    on_demand_price: None,
                    spot_price: None,
                    stride_hours: 6.0,
                    egress_cost: 0.0,
                    nodes: 1,
                };
                windows += s.prepare().unwrap().replay(&[p], &|| ())[0].windows;
            }
            eprintln!(
                "D={deadline} {:8} {windows} windows in {:?}",
                p.name(),
                t0.elapsed()
            );
        }
    }
}
