//! Flapping spot capacity (issue 13, defect 1): availability that comes and goes at random on
//! every tick must not make the controller launch without bound. Synthetic traces of several
//! tick lengths and seeds; the bound checked is the one `tern_policies::capacity` states:
//! no job starts more than `launch_budget(max workers)` instances in any 60 minutes, every job
//! finishes, and nothing is left running.

use std::path::PathBuf;

use chrono::TimeZone;
use tern_cloud::Cloud;
use tern_policies::capacity::launch_budget;
use tern_sim::cloud::SimConfig;
use tern_sim::{SimCloud, Trace};

use super::testkit::Scenario;
use super::world::SimWorld;
use super::*;
use crate::store::{JobState, most_started_in_an_hour as worst_hour};

/// Random 0/`k` availability per tick (xorshift; the seed is the test's parameter).
fn flapping(zone: &str, seed: u64, gap_seconds: u32, ticks: usize, k: u32) -> Trace {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let available = (0..ticks)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if x.is_multiple_of(2) { k } else { 0 }
        })
        .collect();
    Trace {
        source: PathBuf::from(format!("{zone}-flap-{seed}.json")),
        cloud: Cloud::Aws,
        region: "us-west-2".into(),
        zone: zone.into(),
        gap_seconds,
        available,
        prices: None,
        spot_price: Some(0.9),
        on_demand_price: Some(3.06),
    }
}

fn spec(name: &str, workers: &str, gang: bool, samples: u64) -> JobSpec {
    tern_cloud::testkit::spec(name)
        .workers(workers)
        .gang(gang)
        .deadline(Some("60h"))
        .samples(samples)
        .section("[checkpoint]\ninterval = \"10m\"\nsize_gb = 1\nsave_seconds = 10\nrestore_seconds = 20")
        .build()
}

async fn run_flapping(gap_seconds: u32, seed: u64) -> String {
    let hours = 72;
    let ticks = (hours * 3600 / gap_seconds as usize) + 10;
    let start = Utc
        .with_ymd_and_hms(2026, 11, 23, 0, 0, 0)
        .single()
        .expect("time");
    let sim = Arc::new(SimCloud::new(
        vec![
            flapping("us-west-2a", seed, gap_seconds, ticks, 8),
            flapping("us-west-2b", seed + 100, gap_seconds, ticks, 8),
        ],
        SimConfig {
            start,
            boot: Duration::from_secs(90),
            ..SimConfig::default()
        },
    ));
    let (store, mut ctl) = Scenario::on(&sim, "flap").controller();
    let jobs = [
        spec("elastic", "{ min = 2, max = 4 }", false, 20_000_000),
        spec("gang", "4", true, 20_000_000),
    ];
    for j in &jobs {
        ctl.submit(j.clone(), sim.now()).expect("submit");
    }
    let workers = Some(workload::Workload::new());
    let minute = Duration::from_secs(60);
    let mut world = SimWorld::new(sim.clone(), ctl, minute).with_workers(workers);
    world
        .run(hours * 60, SimWorld::settled)
        .await
        .expect("pass");
    let ctl = world.ctl;
    let case = format!("tick {gap_seconds} s, seed {seed}");
    let usage = store.usage().expect("usage");
    let mut summary = vec![case.clone()];
    for j in ctl.jobs() {
        assert_eq!(
            j.state,
            JobState::Finished,
            "{case}: {} ended {:?} at {:.3} ({:?})",
            j.name(),
            j.state,
            j.done_samples / j.total_samples,
            j.reason
        );
        let worst = worst_hour(&usage, j.name());
        let bound = launch_budget(j.spec.workers.max);
        assert!(
            worst <= bound,
            "{case}: {} started {worst} in an hour (bound {bound})",
            j.name()
        );
        // The launch budget is asked before anything is said: no plan, replacement or move
        // is announced that it then holds back.
        let events = ctl.typed_events(Some(j.name())).expect("events");
        for pair in events.windows(2) {
            let held = matches!(
                &pair[1],
                Event::Waiting {
                    reason: WaitReason::LaunchBudget { .. } | WaitReason::Limit { .. },
                    ..
                }
            );
            let announced = matches!(
                &pair[0],
                Event::Planned { .. } | Event::Replacing { .. } | Event::Migrating { .. }
            );
            assert!(
                !(held && announced),
                "{case}: {:?} then {:?}",
                pair[0],
                pair[1]
            );
        }
        let held = events
            .iter()
            .filter(|e| {
                matches!(
                    e,
                    Event::Waiting {
                        reason: WaitReason::LaunchBudget { .. },
                        ..
                    }
                )
            })
            .count();
        let all = usage.iter().filter(|u| u.job == j.name()).count();
        summary.push(format!(
            "{}: {all} launches, worst hour {worst}/{bound}, {held} launch-budget waits",
            j.name()
        ));
    }
    assert!(
        sim.list("flap").await.expect("list").is_empty(),
        "{case}: instances left running"
    );
    summary.join("; ")
}

#[tokio::test]
async fn flapping_capacity_stays_within_the_launch_bound_and_every_job_finishes() {
    for gap in [60, 600, 1800] {
        for seed in [1, 2] {
            let summary = run_flapping(gap, seed).await;
            eprintln!("flapping: {summary}");
        }
    }
}
