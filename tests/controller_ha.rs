//! High availability on a real PostgreSQL server: two controllers share one store and one
//! simulated cloud (`tern sim serve`). Only the leader acts and serves the API; when it is
//! killed with SIGKILL the standby takes over within 30 s (default 15 s lease), carries on
//! with the leader's jobs from the shared store, and nothing is leaked or launched twice.

use std::net::TcpStream;
use std::time::{Duration, Instant};

mod common;
use tern::store::pg_cluster;

use common::{
    Reaper, free_port, sim_controller, sim_report_when_empty, sim_serve, submit, tern_json,
    wait_for,
};

const TOKEN: &str = "ha-token";

fn listening(addr: &str) -> bool {
    TcpStream::connect(addr).is_ok()
}

#[test]
fn standby_takes_over_within_30_s_of_the_leader_dying() {
    let pg = pg_cluster::PgCluster::start().expect("PostgreSQL for the HA test");
    let state = pg.create_db("ha").expect("database");
    let dir = tempfile::tempdir().expect("tempdir");
    let sim_addr = format!("127.0.0.1:{}", free_port());
    let sim_url = format!("http://{sim_addr}");
    let mut reaper = Reaper(Vec::new());
    reaper.0.push(sim_serve(&sim_addr, 5));
    wait_for(&sim_addr);

    let a_addr = format!("127.0.0.1:{}", free_port());
    let b_addr = format!("127.0.0.1:{}", free_port());
    let mut a = sim_controller(&sim_url, &state, &a_addr, "ctl-a", TOKEN);
    wait_for(&a_addr);
    let b = sim_controller(&sim_url, &state, &b_addr, "ctl-b", TOKEN);
    reaper.0.push(b);

    let job = dir.path().join("ha.toml");
    std::fs::write(
        &job,
        tern_cloud::testkit::spec("ha")
            .team("sre")
            .workers("2")
            .deadline(Some("24h"))
            .samples(4_000_000)
            .section("[checkpoint]\ninterval = \"10m\"\nsize_gb = 1\nsave_seconds = 10\nrestore_seconds = 20")
            .text(),
    )
    .expect("spec");
    let a_url = format!("http://{a_addr}");
    submit(&job, &a_url, TOKEN);

    // The leader runs the job; the standby does not serve (it is not the leader).
    let t0 = Instant::now();
    let before = loop {
        let v = tern_json(&["status", "--json", "--server", &a_url], TOKEN);
        let j = v["jobs"][0].clone();
        if j["instances"].as_u64().unwrap_or(0) > 0 && j["done_samples"].as_f64() > Some(0.0) {
            break j;
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "job never ran: {v}");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(!listening(&b_addr), "the standby must not act or serve");

    // SIGKILL the leader: no clean hand-over, the lease has to expire.
    a.kill().expect("SIGKILL");
    a.wait().expect("reaped");
    let killed = Instant::now();
    while !listening(&b_addr) {
        assert!(
            killed.elapsed() < Duration::from_secs(30),
            "the standby did not take over within 30 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let takeover = killed.elapsed();
    eprintln!(
        "ha: standby took over {:.1} s after SIGKILL",
        takeover.as_secs_f64()
    );

    // The old leader comes back (same id as before): now it is the standby.
    let a_again = sim_controller(&sim_url, &state, &a_addr, "ctl-a", TOKEN);
    reaper.0.push(a_again);

    // The new leader knows the job from the shared store and finishes it.
    let b_url = format!("http://{b_addr}");
    let t0 = Instant::now();
    let after = loop {
        let v = tern_json(&["status", "--json", "--server", &b_url], TOKEN);
        let j = v["jobs"][0].clone();
        assert_eq!(j["name"], "ha", "{v}");
        assert!(
            j["done_samples"].as_f64() >= before["checkpoint_samples"].as_f64(),
            "progress lost beyond the last checkpoint: {j} (before: {before})"
        );
        if j["state"] == "finished" {
            break j;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(90),
            "job did not finish: {v}"
        );
        std::thread::sleep(Duration::from_millis(300));
    };
    assert_eq!(after["progress"], 1.0, "{after}");
    assert!(
        !listening(&a_addr),
        "the restarted controller must stay standby while the other leads"
    );

    let report = sim_report_when_empty(&sim_url, &state, TOKEN);
    eprintln!("ha: {report}");
    assert_eq!(report["orphaned_instances"], 0, "{report}");
    assert_eq!(report["duplicate_launches"], 0, "{report}");
    assert!(report["billed_dollars"].as_f64() > Some(0.0), "{report}");
}
