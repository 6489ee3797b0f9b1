//! `tern simulate` end to end: real traces in, one JSON object keyed by policy out.

use std::process::Command;

use crate::common::tern;

const TRACES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../shared/data/catalog/aws/spot-traces/availability/1-node/aws-02-15-2023"
);

/// The last stdout line of a successful run, parsed, and as text.
fn last_json(out: &std::process::Output) -> (serde_json::Value, String) {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().expect("some output").to_string();
    (
        serde_json::from_str(&last).expect("the last line is JSON"),
        last,
    )
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

const GANG16: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../shared/data/catalog/aws/spot-traces/availability/16-node/aws-08-27-2023/us-east-2b_v100_1.json"
);

fn json_of(out: &std::process::Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().expect("some output");
    serde_json::from_str(last).expect("the last line is JSON")
}

fn sixteen_nodes(extra: &[&str]) -> std::process::Output {
    tern()
        .args(["simulate", "--trace", GANG16, "--nodes", "16"])
        .args(["--work-hours", "24", "--deadline-hours", "30"])
        .args(["--restart-hours", "0.2", "--stride-hours", "12"])
        .args(["--policy", "optimal,up,tern", "--json"])
        .args(extra)
        .output()
        .expect("tern runs")
}

#[test]
fn elastic_job_costs_no_more_than_the_gang_on_a_16_node_trace() {
    let gang = json_of(&sixteen_nodes(&[]));
    let linear = sixteen_nodes(&["--min-nodes", "8"]);
    let stderr = String::from_utf8_lossy(&linear.stderr).to_string();
    assert!(
        stderr.contains("runs on 8..=16 nodes") && stderr.contains("linear"),
        "{stderr}"
    );
    let linear = json_of(&linear);
    let curve = sixteen_nodes(&[
        "--min-nodes",
        "8",
        "--profile",
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../shared/data/profiles/pollux-t4/imagenet"
        ),
    ]);
    let stderr = String::from_utf8_lossy(&curve.stderr).to_string();
    assert!(stderr.contains("forecast from"), "{stderr}");
    let curve = json_of(&curve);
    let ratio = |v: &serde_json::Value, p: &str| v[p]["mean_cost_ratio"].as_f64().unwrap();
    for elastic in [&linear, &curve] {
        assert_eq!(elastic["tern"]["windows"], gang["tern"]["windows"]);
        // The elastic job may do everything the gang does, and more.
        assert!(
            ratio(elastic, "optimal") <= ratio(&gang, "optimal") + 1e-9,
            "gang {gang} elastic {elastic}"
        );
        assert_eq!(elastic["tern"]["deadline_misses"], 0, "{elastic}");
        assert_eq!(elastic["up"]["deadline_misses"], 0, "{elastic}");
        for p in ["up", "tern"] {
            assert!(
                ratio(elastic, "optimal") <= ratio(elastic, p) + 1e-9,
                "{elastic}"
            );
        }
    }
    // This trace often has some but not all 16: partial capacity is worth a lot.
    assert!(ratio(&linear, "optimal") < ratio(&gang, "optimal") - 0.01);
}

#[test]
fn min_nodes_outside_one_to_k_is_an_error_naming_the_flag() {
    for bad in ["0", "17"] {
        let out = sixteen_nodes(&["--min-nodes", bad]);
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("--min-nodes must be between 1 and --nodes (16)") && err.contains(bad),
            "{err}"
        );
    }
    let out = sixteen_nodes(&["--min-nodes", "4", "--profile", "/nonexistent/profile"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/profile"));
}

#[test]
fn nonsense_numbers_are_refused_by_flag() {
    let trace = format!("{TRACES}/us-east-1c_v100_1.json");
    for (flag, bad) in [
        ("--spot-price", "-1"),
        ("--spot-price", "NaN"),
        ("--spot-price", "inf"),
        ("--on-demand-price", "0"),
        ("--egress-per-gb", "-0.5"),
    ] {
        let out = job_args(&mut tern())
            .args(["--trace", &trace, flag, bad])
            .output()
            .unwrap();
        assert!(!out.status.success(), "{flag} {bad} accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(flag) && err.contains("expected a finite number"),
            "{err}"
        );
    }
}

/// Every other command's float flags go through the same parsers.
#[test]
fn nonsense_numbers_are_refused_by_every_command() {
    for args in [
        &["demo", "--throttle", "NaN"][..],
        &["demo", "--hours", "-5"],
        &["controller", "--speed", "inf", "--token", "t"],
        &["controller", "--period", "-1", "--token", "t"],
        &["sim", "serve", "--lost-notices", "1.5"],
        &["sim", "serve", "--throttle", "-0.1"],
        &[
            "agent",
            "--interval",
            "0",
            "--job",
            "j",
            "--progress-file",
            "p",
        ],
        &["bench", "soak", "--speed", "nan"],
    ] {
        let out = tern().args(args).output().unwrap();
        assert!(!out.status.success(), "{args:?} accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        let flag = args.iter().find(|a| a.starts_with("--")).unwrap();
        assert!(
            err.contains(flag) && err.contains("expected a"),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn per_trace_rows_of_one_zone_do_not_overwrite_each_other() {
    let trace = format!("{TRACES}/us-east-1c_v100_1.json");
    let out = job_args(&mut tern())
        .args(["--trace", &trace, &trace, "--per-trace", "--policy", "up"])
        .arg("--json")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let v: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    let zones = v["up"]["zones"].as_object().unwrap();
    let keys: Vec<&str> = zones.keys().map(String::as_str).collect();
    assert_eq!(keys, ["us-east-1c#1", "us-east-1c#2"], "{stdout}");
    assert_eq!(
        v["up"]["windows"],
        zones["us-east-1c#1"]["windows"].as_u64().unwrap() * 2
    );
}

#[test]
fn one_second_ticks_are_refused_with_the_memory_they_would_need() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("us-east-1a_v100_1.json");
    let data = vec!["1"; 60 * 3600].join(",");
    std::fs::write(
        &file,
        format!(r#"{{"metadata": {{"gap_seconds": 1}}, "data": [{data}]}}"#),
    )
    .unwrap();
    let out = tern()
        .args(["simulate", "--work-hours", "40", "--deadline-hours", "52"])
        .args(["--restart-hours", "0.2", "--trace"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("GiB") && err.contains("coarser ticks"),
        "{err}"
    );
}

/// `--policy POLICIES` on two V100 zones, with `--json`: the last line, parsed and as text.
fn on_two_zones(policies: &str) -> (serde_json::Value, String) {
    let out = job_args(&mut tern())
        .args(["--policy", policies])
        .arg("--trace")
        .arg(format!("{TRACES}/us-east-1c_v100_1.json"))
        .arg(format!("{TRACES}/us-west-2a_v100_1.json"))
        .arg("--json")
        .output()
        .expect("tern simulate starts");
    last_json(&out)
}

#[test]
fn the_controller_in_a_closed_loop_reports_like_the_replayed_policies() {
    let (v, last) = on_two_zones("optimal,tern,controller");
    let keys = |p: &str| -> Vec<String> {
        let mut k: Vec<String> = v[p].as_object().unwrap().keys().cloned().collect();
        k.sort();
        k
    };
    assert_eq!(keys("controller"), keys("tern"), "{last}");
    assert_eq!(v["controller"]["windows"], v["tern"]["windows"]);
    assert_eq!(v["controller"]["deadline_misses"], 0, "{last}");
    let ratio = |p: &str| v[p]["mean_cost_ratio"].as_f64().unwrap();
    // The controller finishes every window, so it cannot beat the omniscient optimum, and on
    // these traces spot is up most of the time: it must stay well below on-demand.
    assert!(ratio("optimal") <= ratio("controller") + 1e-9, "{last}");
    assert!(ratio("controller") < 0.8, "{last}");
}

/// `informed` (tern told each window's own statistics) is asked for by name, reports like the
/// others, never misses and cannot beat the omniscient optimum.
#[test]
fn informed_is_a_yardstick_named_like_the_other_policies() {
    let (v, last) = on_two_zones("optimal,tern,informed");
    assert_eq!(v["informed"]["windows"], v["tern"]["windows"], "{last}");
    assert_eq!(v["informed"]["deadline_misses"], 0, "{last}");
    let ratio = |p: &str| v[p]["mean_cost_ratio"].as_f64().unwrap();
    assert!(ratio("optimal") <= ratio("informed") + 1e-9, "{last}");
}

/// `--report FILE`: each window of each online policy is a job of the policy's team, billed by
/// the cost report's billing; a policy's total over its windows is its mean cost ratio times
/// the windows times the one reference cost (C hours at the cheapest on-demand price).
#[test]
fn the_replay_report_bills_what_the_replay_billed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("replay.json");
    let out = job_args(&mut tern())
        .arg("--trace")
        .arg(format!("{TRACES}/us-east-1c_v100_1.json"))
        .arg(format!("{TRACES}/us-west-2a_v100_1.json"))
        .args(["--policy", "od,up,tern,optimal", "--json", "--report"])
        .arg(&path)
        .output()
        .expect("simulate");
    let (v, _) = last_json(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("not in it: optimal"), "{stderr}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("report")).expect("json");
    let rows = report["rows"].as_array().expect("rows");
    let windows = v["od"]["windows"].as_u64().expect("windows") as usize;
    assert_eq!(rows.len(), 3 * windows);
    let mut references = Vec::new();
    for policy in ["od", "up", "tern"] {
        let mine: Vec<&serde_json::Value> = rows
            .iter()
            .filter(|r| {
                r["key"]
                    .as_str()
                    .is_some_and(|k| k.starts_with(&format!("{policy}-w")))
            })
            .collect();
        assert_eq!(mine.len(), windows, "{policy}");
        let total: f64 = mine.iter().map(|r| r["cost"].as_f64().expect("cost")).sum();
        let ratios = v[policy]["mean_cost_ratio"].as_f64().expect("ratio") * windows as f64;
        references.push(total / ratios);
        let misses = mine.iter().filter(|r| r["state"] != "finished").count();
        assert_eq!(
            misses as u64,
            v[policy]["deadline_misses"].as_u64().expect("misses")
        );
    }
    for r in &references {
        assert!((r / references[0] - 1.0).abs() < 1e-9, "{references:?}");
    }
    // The reference is C hours at the cheapest on-demand price of the zone set.
    assert!((references[0] - 10.0 * 3.06).abs() < 1e-6, "{references:?}");
}
