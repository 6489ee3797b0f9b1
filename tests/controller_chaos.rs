//! Chaos: the simulated cloud runs as its own process (`tern sim serve`) while the controller
//! process is killed with SIGKILL at 12 seeded points and restarted on the same state file.
//! At the end: every job finished (or is reported unplaceable with a reason), the cloud holds
//! no orphaned instance, no intent launched twice, and no job's progress is below its last
//! checkpoint. The same run on a real PostgreSQL store (a private cluster), where the restarted
//! controller reclaims its own lease (same `--id`) at once.

use std::time::{Duration, Instant};

mod common;
use tern::store::pg_cluster;

use common::{
    Reaper, free_port, sim_controller_logged, sim_report_when_empty, sim_serving, submit,
    tern_json, wait_for_child,
};

const TOKEN: &str = "chaos-token";

fn spec(name: &str, workers: &str, gang: bool, samples: u64) -> String {
    tern_cloud::testkit::spec(name)
        .team("chaos")
        .workers(workers)
        .gang(gang)
        .deadline(Some("24h"))
        .samples(samples)
        .section("[checkpoint]\ninterval = \"10m\"\nsize_gb = 1\nsave_seconds = 10\nrestore_seconds = 20")
        .text()
}

#[test]
fn sigkilled_controller_leaks_nothing_and_launches_nothing_twice() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("state.db");
    chaos(&dir, &state.display().to_string());
}

#[test]
fn sigkilled_controller_on_postgres_leaks_nothing_and_launches_nothing_twice() {
    let pg = pg_cluster::PgCluster::start().expect("PostgreSQL for the chaos test");
    let state = pg.create_db("chaos").expect("database");
    let dir = tempfile::tempdir().expect("tempdir");
    chaos(&dir, &state);
}

fn chaos(dir: &tempfile::TempDir, state: &str) {
    let (sim, sim_url) = sim_serving(&["--speed", "1800", "--seed", "3", "--throttle", "0.05"]);
    let _reaper = Reaper(vec![sim]);
    let ctl_addr = format!("127.0.0.1:{}", free_port());
    let server = format!("http://{ctl_addr}");
    // Every start's stderr goes to one log, shown when a start fails.
    let log = dir.path().join("controller.log");
    let mut ctl = sim_controller_logged(&sim_url, state, &ctl_addr, "chaos", TOKEN, &log);
    wait_for_child(&ctl_addr, &mut ctl, &log);
    for (name, workers, gang, samples) in [
        ("gang", "4", true, 5_000_000u64),
        ("elastic", "{ min = 2, max = 6 }", false, 6_000_000),
        ("single", "1", false, 1_500_000),
    ] {
        let path = dir.path().join(format!("{name}.toml"));
        std::fs::write(&path, spec(name, workers, gang, samples)).expect("write spec");
        submit(&path, &server, TOKEN);
    }

    // Twelve SIGKILLs at seeded moments, each followed by a restart on the same state.
    let mut rng: u64 = 0x7e57_c4a0;
    for _ in 0..12 {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        std::thread::sleep(Duration::from_millis(150 + rng % 700));
        ctl.kill().expect("SIGKILL");
        ctl.wait().expect("reaped");
        ctl = sim_controller_logged(&sim_url, state, &ctl_addr, "chaos", TOKEN, &log);
        wait_for_child(&ctl_addr, &mut ctl, &log);
    }

    // Let it finish.
    let t0 = Instant::now();
    let jobs = loop {
        let v = tern_json(&["status", "--json", "--server", &server], TOKEN);
        let jobs = v["jobs"].as_array().expect("jobs").clone();
        if jobs
            .iter()
            .all(|j| j["state"] == "finished" || j["state"] == "unplaceable")
        {
            break jobs;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(90),
            "jobs did not finish: {v}"
        );
        std::thread::sleep(Duration::from_millis(300));
    };
    for j in &jobs {
        if j["state"] == "unplaceable" {
            assert!(j["reason"].as_str().is_some_and(|r| !r.is_empty()), "{j}");
        } else {
            assert_eq!(j["progress"], 1.0, "{j}");
        }
        assert!(
            j["done_samples"].as_f64() >= j["checkpoint_samples"].as_f64(),
            "progress below its checkpoint: {j}"
        );
    }
    // Finished jobs release their instances; then nothing of ours may remain.
    let report = sim_report_when_empty(&sim_url, state, TOKEN);
    ctl.kill().expect("stop");
    let _ = ctl.wait();
    eprintln!("chaos: after 12 SIGKILLs: {report}; jobs: {jobs:?}");
    assert_eq!(report["orphaned_instances"], 0, "{report}");
    assert_eq!(report["duplicate_launches"], 0, "{report}");
    assert!(
        report["launched_instances"].as_u64().expect("launched") >= 4,
        "{report}"
    );
    assert!(
        report["billed_dollars"].as_f64().expect("billed") > 0.0,
        "{report}"
    );
}
