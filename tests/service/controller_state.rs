//! A lost, empty or swapped state store never wipes the fleet (issue 13, defect 3), with the
//! real binary on a `tern sim serve` cloud:
//! - a controller started on an empty state file with the same owner reports the running
//!   instances of the store it replaced and leaves them running;
//! - deleting the state file under a running controller stops it;
//! - a symlink to a state file in use does not make a second leader.

use std::io::Read;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::common;
use common::{free_port, sim_controller, sim_report, start_sim, submit, tern_json, wait_for};

const TOKEN: &str = "state-token";

fn write_job(dir: &std::path::Path) -> std::path::PathBuf {
    let job = dir.join("keep.toml");
    std::fs::write(
        &job,
        tern_cloud::testkit::spec("keep")
            .team("sre")
            .workers("2")
            .deadline(Some("100h"))
            .samples(40_000_000)
            .text(),
    )
    .expect("spec");
    job
}

/// Wait until the job has live instances; how many.
fn running_instances(server: &str) -> u64 {
    let t0 = Instant::now();
    loop {
        let v = tern_json(&["status", "--json", "--server", server], TOKEN);
        let n = v["jobs"][0]["instances"].as_u64().unwrap_or(0);
        if n > 0 && v["jobs"][0]["state"] == "running" {
            return n;
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "job never ran: {v}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn sim_running(sim_url: &str) -> u64 {
    let r = sim_report(sim_url, None, TOKEN);
    r["running_instances"].as_u64().expect("running_instances")
}

/// The body of `GET path` with the token (a plain HTTP/1.1 exchange).
fn get(addr: &str, path: &str) -> Option<String> {
    use std::io::Write;
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    text.split_once("\r\n\r\n")
        .map(|(_, body)| body.to_string())
}

fn metric(addr: &str, name: &str) -> Option<f64> {
    get(addr, "/metrics")?
        .lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[test]
fn an_empty_state_file_reports_the_old_fleet_and_terminates_none_of_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut reaper, sim_url) = start_sim(3);

    let first = dir.path().join("first.db");
    let a_addr = format!("127.0.0.1:{}", free_port());
    let mut a = sim_controller(
        &sim_url,
        first.to_str().expect("utf-8"),
        &a_addr,
        "a",
        TOKEN,
    );
    wait_for(&a_addr);
    submit(&write_job(dir.path()), &format!("http://{a_addr}"), TOKEN);
    let n = running_instances(&format!("http://{a_addr}"));
    a.kill().expect("SIGKILL");
    a.wait().expect("reaped");

    // The state file is lost: the controller restarts on an empty (0-byte) one.
    std::fs::write(&first, b"").expect("empty the state file");
    let b_addr = format!("127.0.0.1:{}", free_port());
    reaper.0.push(sim_controller(
        &sim_url,
        first.to_str().expect("utf-8"),
        &b_addr,
        "b",
        TOKEN,
    ));
    wait_for(&b_addr);
    // 30 s of wall time is 5 virtual hours at 600×: far past the 30 s leak grace.
    let t0 = Instant::now();
    while metric(&b_addr, "tern_foreign_instances") != Some(n as f64) {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the old fleet was not reported: {:?}",
            metric(&b_addr, "tern_foreign_instances")
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        sim_running(&sim_url),
        n,
        "no instance of the old store was touched"
    );
    let events: serde_json::Value =
        serde_json::from_str(&get(&b_addr, "/v1/events").expect("events")).expect("json");
    let foreign = events
        .as_array()
        .expect("events")
        .iter()
        .filter(|e| e["kind"] == "foreign")
        .count();
    assert_eq!(foreign as u64, n, "{events}");
}

#[test]
fn deleting_the_state_file_stops_the_controller() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut reaper, sim_url) = start_sim(3);
    let state = dir.path().join("state.db");
    let addr = format!("127.0.0.1:{}", free_port());
    let mut ctl = common::controller_command(&state, TOKEN)
        .args([
            "--sim-endpoint",
            &sim_url,
            "--listen",
            &addr,
            "--period",
            "0.05",
        ])
        .stderr(Stdio::piped())
        .spawn()
        .expect("controller");
    wait_for(&addr);
    submit(&write_job(dir.path()), &format!("http://{addr}"), TOKEN);
    let n = running_instances(&format!("http://{addr}"));

    std::fs::remove_file(&state).expect("delete the state file");
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = ctl.try_wait().expect("wait") {
            break s;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the controller kept running without its state file"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    ctl.stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut stderr)
        .expect("read");
    assert!(!status.success(), "{stderr}");
    assert!(stderr.contains("state.db is gone"), "{stderr}");
    // It stopped before it could act on an empty copy: the fleet is intact.
    assert_eq!(sim_running(&sim_url), n);
    reaper.0.push(ctl);
}

#[test]
fn a_symlink_to_a_state_file_in_use_waits_as_a_standby() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut reaper, sim_url) = start_sim(3);
    let state = dir.path().join("state.db");
    let link = dir.path().join("alias.db");
    std::os::unix::fs::symlink(&state, &link).expect("symlink");
    let a_addr = format!("127.0.0.1:{}", free_port());
    reaper.0.push(sim_controller(
        &sim_url,
        state.to_str().expect("utf-8"),
        &a_addr,
        "a",
        TOKEN,
    ));
    wait_for(&a_addr);
    let b_addr = format!("127.0.0.1:{}", free_port());
    reaper.0.push(sim_controller(
        &sim_url,
        link.to_str().expect("utf-8"),
        &b_addr,
        "b",
        TOKEN,
    ));
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        std::net::TcpStream::connect(&b_addr).is_err(),
        "a second controller on the same file (through a symlink) must not lead"
    );
}
