//! `tern demo` and `tern bench reconcile` end to end, through the binary.

use std::process::Command;

fn last_json(out: &std::process::Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout.lines().last().expect("some output");
    serde_json::from_str(line).expect("last line is JSON")
}

fn data() -> String {
    concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/data").to_string()
}

#[test]
fn demo_runs_every_job_to_an_end_and_saves_against_on_demand() {
    let out = Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(["demo", "--json"])
        .env("TERN_DATA", data())
        .output()
        .expect("run tern demo");
    let s = last_json(&out);
    assert!(s["wall_seconds"].as_f64().expect("wall") < 60.0);
    let jobs = s["jobs"].as_array().expect("jobs");
    assert_eq!(jobs.len(), 4);
    for j in jobs {
        match j["state"].as_str() {
            Some("finished") => assert!((j["progress"].as_f64().expect("p") - 1.0).abs() < 1e-9),
            Some("unplaceable") => {
                assert!(
                    j["reason"].as_str().is_some_and(|r| r.contains("no offer")),
                    "{j}"
                )
            }
            other => panic!("job neither finished nor explained: {other:?} {j}"),
        }
    }
    let finished = jobs.iter().filter(|j| j["state"] == "finished").count();
    assert_eq!(finished, 2, "the two V100 jobs run on the V100 sim");
    assert_eq!(s["instances_left"], 0, "nothing left running");
    assert_eq!(s["leaks_collected"], 0);
    let cost = s["cost_usd"].as_f64().expect("cost");
    let od = s["on_demand_usd"].as_f64().expect("od");
    assert!(cost > 0.0 && cost < od, "spot saves: {cost} vs {od}");
    assert!(
        s["notices"].as_u64().expect("notices") > 0,
        "the real trace reclaims nodes"
    );
    // Same seed, same run: the demo is deterministic.
    let again = Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(["demo", "--json"])
        .env("TERN_DATA", data())
        .output()
        .expect("run tern demo");
    assert_eq!(last_json(&again)["cost_usd"], s["cost_usd"]);
}

#[test]
fn bench_reconcile_reports_cpu_time() {
    let out = Command::new(env!("CARGO_BIN_EXE_tern"))
        .args([
            "bench",
            "reconcile",
            "--jobs",
            "40",
            "--instances",
            "400",
            "--passes",
            "3",
            "--json",
        ])
        .output()
        .expect("run bench");
    let f = last_json(&out);
    assert_eq!(f["jobs"], 40);
    assert_eq!(f["instances"], 400, "every job got its workers");
    // CPU time comes from the kernel's per-thread accounting, which advances in scheduler
    // ticks: three small passes may read 0. Wall time is always measured.
    let cpu = f["cpu_ms"].as_f64().expect("cpu_ms");
    assert!(cpu.is_finite() && cpu >= 0.0, "{f}");
    assert!(f["wall_ms"].as_f64().expect("wall_ms") > 0.0, "{f}");
    assert!(f["wall_ms_max"].as_f64() >= f["wall_ms"].as_f64(), "{f}");
}
