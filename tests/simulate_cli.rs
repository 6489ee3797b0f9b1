//! `tern simulate` end to end: real traces in, one JSON object keyed by policy out.

use std::process::Command;

const TRACES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../shared/data/catalog/aws/spot-traces/availability/1-node/aws-02-15-2023"
);

fn tern() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tern"))
}

fn job_args(cmd: &mut Command) -> &mut Command {
    cmd.args(["simulate", "--work-hours", "10", "--deadline-hours", "14"])
        .args(["--restart-hours", "0.2", "--stride-hours", "48"])
}

#[test]
fn json_last_line_is_keyed_by_policy() {
    let out = job_args(&mut tern())
        .arg("--trace")
        .arg(format!("{TRACES}/us-east-1c_v100_1.json"))
        .arg(format!("{TRACES}/us-west-2a_v100_1.json"))
        .arg("--json")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let last = stdout.lines().last().unwrap();
    let v: serde_json::Value = serde_json::from_str(last).unwrap();
    let ratio = |p: &str| v[p]["mean_cost_ratio"].as_f64().unwrap();
    for p in ["od", "greedy", "up", "optimal", "tern"] {
        for key in [
            "mean_cost_ratio",
            "p90_cost_ratio",
            "deadline_misses",
            "windows",
        ] {
            assert!(v[p].get(key).is_some(), "{p}.{key} missing in {last}");
        }
        assert!(
            ratio("optimal") <= ratio(p) + 1e-9,
            "{p} beats the optimum: {last}"
        );
    }
    // 45.5 days, a window every 48 h that must end inside the trace.
    assert_eq!(v["tern"]["windows"], 23);
    assert_eq!(v["tern"]["deadline_misses"], 0);
    assert!(ratio("od") > 1.0 && ratio("tern") < ratio("od"));
    assert!(String::from_utf8_lossy(&out.stderr).contains("replayed in"));
}

#[test]
fn per_trace_table_lists_every_zone_and_the_average() {
    let out = job_args(&mut tern())
        .arg("--trace")
        .arg(format!("{TRACES}/us-east-2a_v100_1.json"))
        .arg(format!("{TRACES}/us-west-2b_v100_1.json"))
        .args(["--per-trace", "--policy", "up,tern"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    for want in [
        "us-east-2a",
        "us-west-2b",
        "average",
        "mean cost/OD",
        "tern",
        "up",
    ] {
        assert!(stdout.contains(want), "{want} missing:\n{stdout}");
    }
    assert!(!stdout.contains("greedy"));
}

#[test]
fn bad_trace_is_rejected_with_file_and_reason() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("broken_zone.json");
    std::fs::write(
        &bad,
        r#"{"metadata": {"gap_seconds": 60}, "data": [1, "x"]}"#,
    )
    .unwrap();
    let out = job_args(&mut tern())
        .arg("--trace")
        .arg(&bad)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("broken_zone.json") && err.contains("data[1]"),
        "{err}"
    );
}

#[test]
fn impossible_deadline_and_unknown_policy_are_errors() {
    let trace = format!("{TRACES}/us-east-1c_v100_1.json");
    let out = tern()
        .args([
            "simulate",
            "--trace",
            &trace,
            "--work-hours",
            "10",
            "--deadline-hours",
            "10",
        ])
        .args(["--restart-hours", "0.2"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot fit"));
    let out = job_args(&mut tern())
        .args(["--trace", &trace, "--policy", "cheapest"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown policy 'cheapest'"));
}
