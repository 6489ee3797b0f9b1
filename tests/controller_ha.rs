//! High availability on a real PostgreSQL server: two controllers share one store and one
//! simulated cloud (`tern sim serve`). Only the leader acts and serves the API; when it is
//! killed with SIGKILL the standby takes over within 30 s (default 15 s lease), carries on
//! with the leader's jobs from the shared store, and nothing is leaked or launched twice. A
//! leader paused past its lease (SIGSTOP) writes nothing once it resumes, alone and in a seeded
//! soak of pauses with submits and cancels in flight. A standby answers every request with a
//! 503 naming the leader, and the CLI and `tern agent` follow it: no load balancer is needed.

use std::net::TcpStream;
use std::time::{Duration, Instant};

mod common;
use tern::store::pg_cluster;

use common::{
    Reaper, free_port, sim_controller, sim_report_when_empty, start_sim, submit, tern_json,
    wait_for,
};

const TOKEN: &str = "ha-token";

/// One raw HTTP/1.1 exchange with the API token (no client that follows a leader): the whole
/// answer, or "" when the server closed the connection without one.
fn exchange(addr: &str, method: &str, path: &str, body: &str) -> String {
    use std::io::{Read, Write};
    let Ok(mut s) = TcpStream::connect(addr) else {
        return String::new();
    };
    let sent = write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {TOKEN}\r\n\
         Content-Type: application/toml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut answer = String::new();
    if sent.is_ok() {
        let _ = s.read_to_string(&mut answer);
    }
    answer
}

/// Whether the controller at `addr` leads: a standby, a deposed leader and a dead one do not
/// answer `/healthz` with 200.
fn leads(addr: &str) -> bool {
    exchange(addr, "GET", "/healthz", "").starts_with("HTTP/1.1 200")
}

/// Wait up to 60 s for the controller at `addr` to lead.
fn wait_leading(addr: &str) {
    let t0 = Instant::now();
    while !leads(addr) {
        assert!(t0.elapsed() < Duration::from_secs(60), "{addr} never led");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The controller at `addr` does not lead and names `leader` (its id and URL) in a 503. A
/// standby that has just started answers before it first reads the lease, when it knows no
/// leader yet: it is asked again for up to 10 s.
fn points_at(addr: &str, leader: &str, url: &str) {
    let names =
        |answer: &str| answer.contains(leader) && answer.contains(&format!("\"leader\":\"{url}\""));
    let t0 = Instant::now();
    let mut answer = exchange(addr, "GET", "/v1/jobs", "");
    while !names(&answer) && t0.elapsed() < Duration::from_secs(10) {
        assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
        std::thread::sleep(Duration::from_millis(100));
        answer = exchange(addr, "GET", "/v1/jobs", "");
    }
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(names(&answer), "{answer}");
}

/// What every test here starts from: a private PostgreSQL server with one database (`state`,
/// its URL), a temporary folder, and a `tern sim serve` at `sim_url` seeded with `seed`, reaped
/// with the controllers pushed onto `reaper`. Bind its fields in this order: the reaper drops
/// first, then the folder, then the server.
struct Ha {
    _pg: pg_cluster::PgCluster,
    state: String,
    dir: tempfile::TempDir,
    sim_url: String,
    reaper: Reaper,
}

impl Ha {
    fn start(db: &str, seed: u64) -> Ha {
        let pg = pg_cluster::PgCluster::start().expect("PostgreSQL for the HA test");
        let state = pg.create_db(db).expect("database");
        let (reaper, sim_url) = start_sim(seed);
        Ha {
            _pg: pg,
            state,
            dir: tempfile::tempdir().expect("tempdir"),
            sim_url,
            reaper,
        }
    }
}

#[test]
fn standby_takes_over_within_30_s_of_the_leader_dying() {
    let Ha {
        _pg,
        state,
        dir,
        sim_url,
        mut reaper,
    } = Ha::start("ha", 5);

    let a_addr = format!("127.0.0.1:{}", free_port());
    let b_addr = format!("127.0.0.1:{}", free_port());
    let mut a = sim_controller(&sim_url, &state, &a_addr, "ctl-a", TOKEN);
    wait_leading(&a_addr);
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
    // The standby acts on nothing and answers every request with the leader's address.
    wait_for(&b_addr);
    points_at(&b_addr, "ctl-a", &a_url);

    // SIGKILL the leader: no clean hand-over, the lease has to expire.
    a.kill().expect("SIGKILL");
    a.wait().expect("reaped");
    let killed = Instant::now();
    while !leads(&b_addr) {
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
    // The restarted controller stays standby while the other leads.
    wait_for(&a_addr);
    points_at(&a_addr, "ctl-b", &b_url);

    let report = sim_report_when_empty(&sim_url, &state, TOKEN);
    eprintln!("ha: {report}");
    assert_eq!(report["orphaned_instances"], 0, "{report}");
    assert_eq!(report["duplicate_launches"], 0, "{report}");
    assert!(report["billed_dollars"].as_f64() > Some(0.0), "{report}");
}

/// `tern controller` on the simulated cloud at `sim` with a 3 s lease (the probe's set-up),
/// logging to `log`.
fn short_lease_controller(
    sim: &str,
    state: &str,
    addr: &str,
    id: &str,
    log: &std::path::Path,
) -> std::process::Child {
    common::sim_controller_command(sim, state, addr, id, TOKEN)
        .args(["--lease-seconds", "3"])
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(log).expect("log file"))
        .spawn()
        .expect("controller")
}

/// The last lines of a log, for a failure message.
fn tail(log: &std::path::Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

fn signal(child: &std::process::Child, sig: &str) {
    let ok = std::process::Command::new("kill")
        .args([sig, &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(ok.success(), "kill {sig}");
}

/// The body of `GET path` at `addr` with the API token (a plain HTTP/1.1 exchange).
fn http_get(addr: &str, path: &str) -> String {
    let answer = exchange(addr, "GET", path, "");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    answer
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_string())
        .unwrap_or_default()
}

/// `tern ARGS` started now against a server; its output is read when it ends.
fn tern_in_background(args: &[&str]) -> std::process::Child {
    std::process::Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(args)
        .env("TERN_TOKEN", TOKEN)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("tern")
}

fn spec_file(dir: &std::path::Path, name: &str) -> std::path::PathBuf {
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(
        &path,
        tern_cloud::testkit::spec(name)
            .team("sre")
            .workers("1")
            .deadline(Some("24h"))
            .samples(8_000_000)
            .section("[checkpoint]\ninterval = \"10m\"\nsize_gb = 1\nsave_seconds = 10\nrestore_seconds = 20")
            .text(),
    )
    .expect("spec");
    path
}

/// The probe's defect: SIGSTOP the leader, let the standby take over, queue a submit and a
/// cancel at the paused leader (raw HTTP, so no client carries them on to the new leader),
/// SIGCONT it. Neither may be acknowledged or written: the
/// resumed leader's writes are fenced (its answer is 503 naming the leader, or it has already
/// stopped), the new leader never sees the submitted job, the job the user tried to cancel
/// keeps running under the new leader, and the old leader exits.
#[test]
fn a_paused_leader_writes_nothing_after_it_resumes() {
    let Ha {
        _pg,
        state,
        dir,
        sim_url,
        mut reaper,
    } = Ha::start("pause", 7);
    let a_addr = format!("127.0.0.1:{}", free_port());
    let b_addr = format!("127.0.0.1:{}", free_port());
    let a_url = format!("http://{a_addr}");
    let b_url = format!("http://{b_addr}");
    let a_log = dir.path().join("a.log");
    let mut a = short_lease_controller(&sim_url, &state, &a_addr, "ctl-a", &a_log);
    wait_leading(&a_addr);
    reaper.0.push(short_lease_controller(
        &sim_url,
        &state,
        &b_addr,
        "ctl-b",
        &dir.path().join("b.log"),
    ));
    submit(&spec_file(dir.path(), "kept"), &a_url, TOKEN);
    let t0 = Instant::now();
    while tern_json(&["status", "--json", "--server", &a_url], TOKEN)["jobs"][0]["instances"]
        .as_u64()
        .unwrap_or(0)
        == 0
    {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "kept never ran: {}",
            tail(&a_log)
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    signal(&a, "-STOP");
    let paused = Instant::now();
    while !leads(&b_addr) {
        assert!(paused.elapsed() < Duration::from_secs(20), "no takeover");
        std::thread::sleep(Duration::from_millis(100));
    }
    let late = std::fs::read_to_string(spec_file(dir.path(), "late")).expect("spec");
    let queued = [
        ("POST", "/v1/jobs", late),
        ("DELETE", "/v1/jobs/kept", String::new()),
    ]
    .map(|(method, path, body)| {
        let addr = a_addr.clone();
        std::thread::spawn(move || exchange(&addr, method, path, &body))
    });
    std::thread::sleep(Duration::from_millis(500));
    signal(&a, "-CONT");
    for q in queued {
        let answer = q.join().expect("request");
        // Either the 503 that names the leader, or no answer at all (it already stopped).
        assert!(
            answer.is_empty() || (answer.starts_with("HTTP/1.1 503") && answer.contains("ctl-b")),
            "a paused leader answered a write after it was deposed: {answer}"
        );
        eprintln!("refused: {}", answer.lines().last().unwrap_or("no answer"));
    }
    let t0 = Instant::now();
    let exited = loop {
        if let Some(status) = a.try_wait().expect("wait") {
            break status;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "the old leader did not stop"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(!exited.success(), "a deposed leader stops with an error");

    // The new leader's view, and the shared store, after a few passes.
    std::thread::sleep(Duration::from_secs(1));
    let v = tern_json(&["status", "--json", "--server", &b_url], TOKEN);
    let jobs = v["jobs"].as_array().expect("jobs");
    assert_eq!(jobs.len(), 1, "only the acknowledged job exists: {v}");
    assert_eq!(jobs[0]["name"], "kept");
    assert_ne!(jobs[0]["state"], "cancelled", "{v}");
    assert!(jobs[0]["instances"].as_u64() > Some(0), "{v}");
    let events = http_get(&b_addr, "/v1/events");
    assert!(events.contains("kept"), "{events}");
    assert!(
        !events.to_string().contains("late"),
        "the old leader logged for the refused job: {events}"
    );
    let out = tern_in_background(&["cancel", "kept", "--server", &b_url])
        .wait_with_output()
        .expect("cancel");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = sim_report_when_empty(&sim_url, &state, TOKEN);
    assert_eq!(report["orphaned_instances"], 0, "{report}");
    assert_eq!(report["duplicate_launches"], 0, "{report}");
}

/// HA without a load balancer (issue 52, item 4): a job's agent and the CLI hold the first
/// leader's address. The leader is paused past its lease, the standby takes over, the old one
/// resumes, stops, and comes back as a standby on the same address. A submit, a cancel and the
/// agent's progress reports sent there reach the new leader (each says so on stderr), and the
/// job trains to its end under it.
#[test]
fn clients_and_agents_sent_to_a_deposed_leader_reach_the_new_one() {
    let Ha {
        _pg,
        state,
        dir,
        sim_url,
        mut reaper,
    } = Ha::start("follow", 11);
    let addrs = [0, 1].map(|_| format!("127.0.0.1:{}", free_port()));
    let [a_url, b_url] = addrs.clone().map(|a| format!("http://{a}"));
    // Only the agent's reports move the job: no simulated workers.
    let start = |i: usize, log: &str| {
        let log = std::fs::File::create(dir.path().join(log)).expect("log");
        common::sim_controller_command(&sim_url, &state, &addrs[i], &format!("ctl-{i}"), TOKEN)
            .args(["--lease-seconds", "3", "--no-simulated-workers"])
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .spawn()
            .expect("controller")
    };
    let mut a = start(0, "a.log");
    wait_leading(&addrs[0]);
    reaper.0.push(start(1, "b.log"));

    let samples = 60_000;
    let job = dir.path().join("followed.toml");
    let spec = tern_cloud::testkit::spec("followed")
        .team("sre")
        .workers("1")
        .deadline(Some("24h"))
        .samples(samples)
        .top("capacity = \"on-demand-only\"")
        .section("[checkpoint]\ninterval = \"10m\"\nsize_gb = 1\nsave_seconds = 10\nrestore_seconds = 20");
    std::fs::write(&job, spec.text()).expect("spec");
    submit(&job, &a_url, TOKEN);
    let t0 = Instant::now();
    while tern_json(&["status", "followed", "--json", "--server", &a_url], TOKEN)["jobs"][0]
        ["instance_ids"][0]
        .is_null()
    {
        assert!(t0.elapsed() < Duration::from_secs(60), "no instance");
        std::thread::sleep(Duration::from_millis(100));
    }
    // A training of 60 steps, 0.4 s each, checkpointing every step.
    let p = dir.path().join("progress.json").display().to_string();
    let script = (1..=60)
        .map(|i| {
            let done = samples * i / 60;
            format!("echo '{{\"samples\": {done}, \"checkpoint_samples\": {done}}}' > {p}")
        })
        .collect::<Vec<_>>()
        .join("; sleep 0.4; ");
    let agent = common::agent_started(dir.path(), "followed", &script, &a_url, TOKEN);
    let t0 = Instant::now();
    while tern_json(&["status", "followed", "--json", "--server", &a_url], TOKEN)["jobs"][0]
        ["done_samples"]
        .as_f64()
        .unwrap_or(0.0)
        == 0.0
    {
        assert!(t0.elapsed() < Duration::from_secs(30), "no report reached the leader");
        std::thread::sleep(Duration::from_millis(100));
    }

    signal(&a, "-STOP");
    let paused = Instant::now();
    while !leads(&addrs[1]) {
        assert!(paused.elapsed() < Duration::from_secs(20), "no takeover");
        std::thread::sleep(Duration::from_millis(100));
    }
    signal(&a, "-CONT");
    let t0 = Instant::now();
    while a.try_wait().expect("wait").is_none() {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "the old leader did not stop"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // A supervisor restarts it, as the standby, on the address everyone holds.
    reaper.0.push(start(0, "a-again.log"));
    wait_for(&addrs[0]);
    points_at(&addrs[0], "ctl-1", &b_url);

    let followed = format!("sending to the leader at {b_url}");
    let late = spec_file(dir.path(), "late");
    let late = late.to_str().expect("utf-8 path");
    for args in [vec!["submit", late], vec!["cancel", "late"]] {
        let mut args = args.clone();
        args.extend(["--server", &a_url]);
        let out = tern_in_background(&args).wait_with_output().expect("tern");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{args:?}: {stderr}");
        assert!(stderr.contains(&followed), "{args:?}: {stderr}");
    }
    let out = agent.wait_with_output().expect("agent");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "agent: {stderr}");
    assert!(stderr.contains(&followed), "agent: {stderr}");
    let v = tern_json(&["status", "--json", "--server", &b_url], TOKEN);
    let jobs: std::collections::BTreeMap<&str, &serde_json::Value> = v["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .map(|j| (j["name"].as_str().unwrap_or(""), j))
        .collect();
    assert_eq!(jobs["followed"]["done_samples"], samples as f64, "{v}");
    assert_eq!(jobs["late"]["state"], "cancelled", "{v}");
    let report = sim_report_when_empty(&sim_url, &state, TOKEN);
    assert_eq!(report["orphaned_instances"], 0, "{report}");
    assert_eq!(report["duplicate_launches"], 0, "{report}");
}

/// How one soak request ended.
struct Sent {
    job: String,
    cancel: bool,
    acknowledged: bool,
    /// A cancel answered "had already ended": the job ended before it, as it was.
    too_late: bool,
}

/// `tern submit` or `tern cancel` to whichever of `urls` answers; acknowledged on a 2xx.
fn send(dir: &std::path::Path, job: &str, cancel: bool, urls: &[String]) -> Sent {
    let spec = (!cancel).then(|| soak_spec(dir, job));
    let (mut acknowledged, mut too_late) = (false, false);
    for url in urls {
        let mut args = vec![if cancel { "cancel" } else { "submit" }];
        match &spec {
            Some(path) => args.push(path.to_str().expect("utf-8 path")),
            None => args.push(job),
        }
        args.extend(["--server", url.as_str()]);
        let out = tern_in_background(&args).wait_with_output().expect("tern");
        if out.status.success() {
            acknowledged = true;
            too_late = String::from_utf8_lossy(&out.stdout).contains("had already ended");
            break;
        }
    }
    Sent {
        job: job.to_string(),
        cancel,
        acknowledged,
        too_late,
    }
}

fn soak_spec(dir: &std::path::Path, name: &str) -> std::path::PathBuf {
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(
        &path,
        tern_cloud::testkit::spec(name)
            .team("soak")
            .workers("1")
            .deadline(Some("24h"))
            .samples(1_500_000)
            .section("[checkpoint]\ninterval = \"10m\"\nsize_gb = 1\nsave_seconds = 10\nrestore_seconds = 20")
            .text(),
    )
    .expect("spec");
    path
}

/// The jobs the leader at one of `urls` shows, by name.
fn jobs_at(urls: &[String]) -> Option<std::collections::BTreeMap<String, serde_json::Value>> {
    for url in urls {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_tern"))
            .args(["status", "--json", "--server", url])
            .env("TERN_TOKEN", TOKEN)
            .output()
            .expect("tern");
        if !out.status.success() {
            continue;
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let v: serde_json::Value =
            serde_json::from_str(text.lines().last().unwrap_or("{}")).expect("json");
        let jobs = v["jobs"].as_array().cloned().unwrap_or_default();
        return Some(
            jobs.into_iter()
                .map(|j| (j["name"].as_str().unwrap_or("").to_string(), j))
                .collect(),
        );
    }
    None
}

/// The HA soak: two controllers on one PostgreSQL store and one simulated cloud, 3 s leases.
/// Each round submits two jobs and cancels an earlier one while the leader is paused
/// (SIGSTOP) for 0.5–5 s, seeded: past its lease the standby takes over and the resumed leader
/// must stop (a supervisor restarts it as the standby); short of it, it goes on. At the end
/// every acknowledged submit has run, every acknowledged cancel ended its job's instances, and
/// the cloud shows no duplicate launches and no orphans. The seed is printed (replay with
/// TERN_HA_SOAK_SEED=N); 8 rounds.
#[test]
fn ha_soak_pauses_the_leader_with_writes_in_flight() {
    const ROUNDS: u32 = 8;
    let seed = std::env::var("TERN_HA_SOAK_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| u64::from(d.subsec_nanos() % 10_000))
        });
    eprintln!("ha soak: {ROUNDS} rounds, seed {seed}");
    let mut draw = tern_sim::testkit::Lcg::new(seed);
    let Ha {
        _pg,
        state,
        dir,
        sim_url,
        reaper: _sim,
    } = Ha::start("soak", seed);
    let addrs = [
        format!("127.0.0.1:{}", free_port()),
        format!("127.0.0.1:{}", free_port()),
    ];
    let urls: Vec<String> = addrs.iter().map(|a| format!("http://{a}")).collect();
    let start = |i: usize| {
        let log = dir.path().join(format!("ctl-{i}.log"));
        short_lease_controller(&sim_url, &state, &addrs[i], &format!("ctl-{i}"), &log)
    };
    let mut ctl = Pair([Some(start(0)), None]);
    wait_leading(&addrs[0]);
    ctl.0[1] = Some(start(1));
    let mut sent: Vec<Sent> = Vec::new();
    let (mut takeovers, mut pauses) = (0, 0);
    for round in 0..ROUNDS {
        let leader = (0..2).find(|&i| leads(&addrs[i])).expect("a leader serves");
        let submits: Vec<String> = (0..2).map(|k| format!("r{round}-{k}")).collect();
        let cancel = sent
            .iter()
            .filter(|s| !s.cancel && s.acknowledged)
            .map(|s| s.job.clone())
            .nth(draw.next_u32() as usize % sent.len().max(1));
        let pause = Duration::from_millis(500 + u64::from(draw.next_u32() % 4_500));
        signal(ctl.0[leader].as_ref().expect("running"), "-STOP");
        pauses += 1;
        let in_flight: Vec<_> = submits
            .iter()
            .map(|j| (j.clone(), false))
            .chain(cancel.map(|j| (j, true)))
            .map(|(job, is_cancel)| {
                let urls = urls.clone();
                let dir = dir.path().to_path_buf();
                std::thread::spawn(move || send(&dir, &job, is_cancel, &urls))
            })
            .collect();
        std::thread::sleep(pause);
        signal(ctl.0[leader].as_ref().expect("running"), "-CONT");
        for t in in_flight {
            sent.push(t.join().expect("request"));
        }
        // A deposed leader stops; a supervisor would restart it, as the standby.
        std::thread::sleep(Duration::from_millis(300));
        let c = ctl.0[leader].as_mut().expect("running");
        if c.try_wait().expect("wait").is_some() {
            takeovers += 1;
            ctl.0[leader] = Some(start(leader));
        }
        let t0 = Instant::now();
        while !addrs.iter().any(|a| leads(a)) {
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "round {round}: no leader"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    eprintln!(
        "ha soak: {pauses} pauses, {takeovers} takeovers, {} requests, {} acknowledged, {} \
         cancels after their job had ended",
        sent.len(),
        sent.iter().filter(|s| s.acknowledged).count(),
        sent.iter().filter(|s| s.too_late).count()
    );

    // Every acknowledged submit runs (or ran), every acknowledged cancel ends its job (one
    // that came after the job finished says so and leaves it finished).
    let cancelled: std::collections::BTreeSet<&str> = sent
        .iter()
        .filter(|s| s.cancel && s.acknowledged && !s.too_late)
        .map(|s| s.job.as_str())
        .collect();
    let t0 = Instant::now();
    loop {
        let jobs = jobs_at(&urls).unwrap_or_default();
        let waiting: Vec<String> = sent
            .iter()
            .filter(|s| !s.cancel && s.acknowledged)
            .filter_map(|s| {
                let j = jobs.get(&s.job);
                let state = j.map_or("missing", |j| j["state"].as_str().unwrap_or(""));
                let ok = if cancelled.contains(s.job.as_str()) {
                    state == "cancelled" && j.is_some_and(|j| j["instances"] == 0)
                } else {
                    state == "finished"
                };
                (!ok).then(|| format!("{}: {state}", s.job))
            })
            .collect();
        if waiting.is_empty() {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "seed {seed}: not done: {waiting:?}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let report = sim_report_when_empty(&sim_url, &state, TOKEN);
    eprintln!("ha soak: {report}");
    assert_eq!(report["orphaned_instances"], 0, "seed {seed}: {report}");
    assert_eq!(report["duplicate_launches"], 0, "seed {seed}: {report}");
}

/// The soak's two controllers, killed and reaped however the test ends (they are replaced as
/// they stop, so they cannot live in a `Reaper`).
struct Pair([Option<std::process::Child>; 2]);

impl Drop for Pair {
    fn drop(&mut self) {
        for c in self.0.iter_mut().flatten() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
