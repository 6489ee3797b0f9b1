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
    // The demo's cloud sells every shape the example jobs ask for (T4, V100, A100,
    // A100-80GB, H100): every job runs to the end.
    for j in jobs {
        assert_eq!(j["state"], "finished", "{j}");
        assert!(
            (j["progress"].as_f64().expect("p") - 1.0).abs() < 1e-9,
            "{j}"
        );
        assert!(j["cost_usd"].as_f64().expect("cost") > 0.0, "{j}");
    }
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
    // The simulated cloud's share is part of a pass's CPU, never more (both read the same
    // per-thread clock, so the rounding matches).
    let cloud = f["cloud_cpu_ms"].as_f64().expect("cloud_cpu_ms");
    assert!(cloud >= 0.0 && cloud <= cpu, "{f}");
    assert!(f["wall_ms"].as_f64().expect("wall_ms") > 0.0, "{f}");
    assert!(f["wall_ms_max"].as_f64() >= f["wall_ms"].as_f64(), "{f}");
}

#[test]
fn the_demo_log_prints_state_changes_and_verbose_prints_every_pass() {
    let run = |extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_tern"))
            .arg("demo")
            .args(extra)
            .env("TERN_DATA", data())
            .output()
            .expect("run tern demo");
        assert!(out.status.success());
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let quiet = run(&[]);
    let verbose = run(&["--verbose"]);
    let events = |text: &str| -> Vec<(String, String)> {
        text.lines()
            .filter(|l| l.starts_with("[+"))
            .map(|l| {
                let mut w = l.split_whitespace().skip(1);
                let job = w.next().unwrap_or_default().to_string();
                (job, w.next().unwrap_or_default().to_string())
            })
            .collect()
    };
    let (q, v) = (events(&quiet), events(&verbose));
    assert!(q.len() <= v.len(), "{} vs {} lines", q.len(), v.len());
    // Without --verbose, a job never prints a wait right after a wait with only re-plans
    // and capacity errors between.
    for job in ["bert-large-phase2", "resnet50-imagenet"] {
        let mine: Vec<&str> = q
            .iter()
            .filter(|(j, _)| j == job)
            .map(|(_, k)| k.as_str())
            .filter(|k| !matches!(*k, "plan" | "capacity"))
            .collect();
        assert!(
            !mine.windows(2).any(|w| w == ["wait", "wait"]),
            "{job}: {mine:?}"
        );
    }
    // What was left out is counted (the line is there only when something was).
    let n: usize = quiet
        .lines()
        .find(|l| l.contains("lines of jobs still waiting hidden"))
        .map_or(0, |h| {
            h[1..]
                .split(' ')
                .next()
                .and_then(|n| n.parse().ok())
                .expect("count")
        });
    assert_eq!(q.len() + n, v.len());
    // Both end with the cost report and the HTML report's path.
    for text in [&quiet, &verbose] {
        assert!(text.contains("Cost report after") && text.contains("HTML cost report: "));
    }
}

#[test]
fn the_demo_migrates_when_a_cheaper_pool_opens_and_reports_budgets() {
    let started = std::time::Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(["demo", "--json"])
        .env("TERN_DATA", data())
        .output()
        .expect("run tern demo");
    let wall = started.elapsed().as_secs_f64();
    let s = last_json(&out);
    assert!(wall < 60.0, "{wall} s");
    assert!(s["wall_seconds"].as_f64().expect("wall") < 60.0);
    for j in s["jobs"].as_array().expect("jobs") {
        assert_eq!(j["state"], "finished", "{j}");
    }
    // The scenario's H100 pool opens at half price while the fine-tune has hours of work
    // left: the move rule says move, and the store's bill says it paid.
    let moves = s["migrations"].as_array().expect("migrations");
    assert!(!moves.is_empty(), "{s}");
    for m in moves {
        for field in ["job", "from", "to", "at"] {
            assert!(m[field].as_str().is_some_and(|v| !v.is_empty()), "{m}");
        }
        assert_ne!(m["from"], m["to"], "{m}");
        assert!(
            m["expected_saving"].as_f64().expect("expected") > 0.0,
            "{m}"
        );
        assert!(m["realised_saving"].as_f64().is_some(), "{m}");
    }
    assert!(
        moves
            .iter()
            .any(|m| m["realised_saving"].as_f64().expect("realised") > 0.0),
        "{moves:?}"
    );
    // Every team of the example jobs has a budget, and none is spent.
    let budgets = s["budgets"].as_array().expect("budgets");
    let teams: Vec<&str> = budgets.iter().filter_map(|b| b["team"].as_str()).collect();
    assert_eq!(teams, ["nlp", "research", "vision"], "{budgets:?}");
    for b in budgets {
        let budget = b["budget_usd"].as_f64().expect("a total budget");
        let spent = b["spent"].as_f64().expect("spent");
        assert!(spent > 0.0 && spent < budget, "{b}");
    }
}
