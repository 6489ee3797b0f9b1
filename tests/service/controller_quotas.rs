//! The quota file of a running `tern controller` is read again on SIGHUP: a file that does
//! not check leaves the one in force (the log says where it is wrong), one that checks is in
//! force at once (`GET /v1/quotas`).

use std::time::{Duration, Instant};

use crate::common::{controller_command, free_port, wait_for};
use crate::controller_tokens::call;

const TOKEN: &str = "s3cret-quota-token";

fn get_quotas(addr: &str) -> serde_json::Value {
    let (status, quotas) = call(addr, "GET", "/v1/quotas", TOKEN, "");
    assert_eq!(status, 200, "{quotas}");
    quotas
}

fn hangup(pid: u32) {
    let status = std::process::Command::new("kill")
        .args(["-HUP", &pid.to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
}

#[test]
fn sighup_reloads_the_quota_file_and_a_bad_one_keeps_the_old() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("quota.toml");
    std::fs::write(&file, "[team.nlp]\ntotal_usd = 10\n").expect("write");
    let addr = format!("127.0.0.1:{}", free_port());
    let mut child = controller_command(&dir.path().join("state.db"), TOKEN)
        .args(["--provider", "sim", "--speed", "600", "--listen", &addr])
        .arg("--quota")
        .arg(&file)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn controller");
    wait_for(&addr);
    assert_eq!(get_quotas(&addr)["team"]["nlp"]["total_usd"], 10.0);

    std::fs::write(&file, "[team.nlp]\ntotal_usd = -5\n").expect("write");
    hangup(child.id());
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        get_quotas(&addr)["team"]["nlp"]["total_usd"],
        10.0,
        "the bad file is not used"
    );

    std::fs::write(
        &file,
        "fairness = 2\n[team.nlp]\ntotal_usd = 25\non_exhausted = \"drain\"\n",
    )
    .expect("write");
    hangup(child.id());
    let until = Instant::now() + Duration::from_secs(10);
    let now = loop {
        let q = get_quotas(&addr);
        if q["team"]["nlp"]["total_usd"] == 25.0 || Instant::now() > until {
            break q;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(now["team"]["nlp"]["total_usd"], 25.0);
    assert_eq!(now["team"]["nlp"]["on_exhausted"], "drain");
    assert_eq!(now["fairness"], 2.0);
    let _ = child.kill();
    let out = child.wait_with_output().expect("wait");
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(
        log.contains("team.nlp.total_usd") && log.contains("the quota file in force stays"),
        "{log}"
    );
}

#[test]
fn a_quota_no_offer_counts_against_stops_the_controller_at_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("quota.toml");
    std::fs::write(
        &file,
        "[[quota]]\ncloud = \"sim\"\nfamily = \"V1OO\"\nlimit = 4\n",
    )
    .expect("write");
    let addr = format!("127.0.0.1:{}", free_port());
    let out = controller_command(&dir.path().join("state.db"), TOKEN)
        .args(["--provider", "sim", "--listen", &addr])
        .arg("--quota")
        .arg(&file)
        .stderr(std::process::Stdio::piped())
        .output()
        .expect("run controller");
    assert!(
        !out.status.success(),
        "a typo in a quota family was accepted"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("quota.toml: quota[0].family") && err.contains("V100"),
        "{err}"
    );
}

/// `GET /v1/jobs/NAME` as JSON.
fn job(addr: &str, name: &str) -> serde_json::Value {
    call(addr, "GET", &format!("/v1/jobs/{name}"), TOKEN, "").1
}

#[test]
fn a_job_a_team_limit_holds_back_says_why_until_it_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("quota.toml");
    // Nothing of the job's shape costs under a cent an hour.
    std::fs::write(&file, "[team.ml]\nper_hour_usd = 0.01\n").expect("write");
    let addr = format!("127.0.0.1:{}", free_port());
    let child = with_quota_file(&dir.path().join("state.db"), &file, &addr);
    let spec = dir.path().join("held.toml");
    std::fs::write(&spec, tern_cloud::testkit::spec("held").team("ml").text()).expect("spec");
    crate::common::submit(&spec, &format!("http://{addr}"), TOKEN);

    let until = Instant::now() + Duration::from_secs(30);
    let held = loop {
        let j = job(&addr, "held");
        if j["waiting"].is_object() || Instant::now() > until {
            break j;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(held["state"], "pending", "{held}");
    let reason = held["waiting"]["reason"].as_str().expect("a wait reason");
    assert!(
        reason.contains("held back by a limit") && reason.contains("ml"),
        "{reason}"
    );
    assert!(held["waiting"]["since"].is_string(), "{held}");
    // Passes go by; the wait is the same one, since the same moment.
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(
        job(&addr, "held")["waiting"]["since"],
        held["waiting"]["since"]
    );
    let server = format!("http://{addr}");
    let table = crate::common::tern_ok(&["status", "--server", &server], TOKEN);
    let table = String::from_utf8_lossy(&table);
    assert!(
        table.contains("waiting ") && table.contains("held back by a limit"),
        "{table}"
    );

    // The limit raised: the job runs and waits no more.
    std::fs::write(&file, "[team.ml]\nper_hour_usd = 100\n").expect("write");
    hangup(child.id());
    let until = Instant::now() + Duration::from_secs(30);
    let running = loop {
        let j = job(&addr, "held");
        if j["instances"].as_u64() > Some(0) || Instant::now() > until {
            break j;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(running["instances"].as_u64() > Some(0), "{running}");
    assert!(running.get("waiting").is_none(), "{running}");
    stop(child);
}

/// A controller on `state` with `--quota file`, listening at `addr`.
fn with_quota_file(
    state: &std::path::Path,
    file: &std::path::Path,
    addr: &str,
) -> std::process::Child {
    let child = controller_command(state, TOKEN)
        .args(["--provider", "sim", "--speed", "600", "--listen", addr])
        .arg("--quota")
        .arg(file)
        .spawn()
        .expect("spawn controller");
    wait_for(addr);
    child
}

fn stop(mut child: std::process::Child) {
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn a_budget_cut_through_the_api_survives_a_restart_until_the_file_is_reloaded() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (state, file) = (dir.path().join("state.db"), dir.path().join("quota.toml"));
    std::fs::write(&file, "[team.nlp]\ntotal_usd = 100\n").expect("write");
    let addr = format!("127.0.0.1:{}", free_port());
    let child = with_quota_file(&state, &file, &addr);
    let total = |addr: &str| get_quotas(addr)["team"]["nlp"]["total_usd"].clone();
    assert_eq!(total(&addr), 100.0);

    // An operator cuts the team's budget; a bad file is refused and changes nothing.
    let put = |body: &str| call(&addr, "PUT", "/v1/quotas", TOKEN, body);
    assert_eq!(put("[team.nlp]\ntotal_usd = -1\n").0, 400);
    assert_eq!(put("[team.nlp]\ntotal_usd = 1\n").0, 200);
    assert_eq!(total(&addr), 1.0);

    // A deploy restarts the controller with the same --quota file: the cut holds.
    stop(child);
    let addr = format!("127.0.0.1:{}", free_port());
    let child = with_quota_file(&state, &file, &addr);
    assert_eq!(total(&addr), 1.0, "the API's change outlives the restart");

    // The file reloaded by SIGHUP is the later change: it wins, and the API's is forgotten.
    hangup(child.id());
    let until = Instant::now() + Duration::from_secs(10);
    while total(&addr) != 100.0 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(total(&addr), 100.0);
    stop(child);
    let addr = format!("127.0.0.1:{}", free_port());
    let child = with_quota_file(&state, &file, &addr);
    assert_eq!(
        total(&addr),
        100.0,
        "the file's after a reload and a restart"
    );

    // Both changes are in the audit log.
    let (_, rows) = call(&addr, "GET", "/v1/audit", TOKEN, "");
    let calls: Vec<(String, u64)> = rows
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| {
            (
                format!(
                    "{} {}",
                    r["method"].as_str().unwrap_or(""),
                    r["path"].as_str().unwrap_or("")
                ),
                r["status"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    let file_shown = file.display().to_string();
    for want in [
        ("PUT /v1/quotas".to_string(), 400),
        ("PUT /v1/quotas".to_string(), 200),
        (format!("SIGHUP {file_shown}"), 200),
    ] {
        assert!(calls.contains(&want), "{want:?} not in {calls:?}");
    }
    stop(child);
}
