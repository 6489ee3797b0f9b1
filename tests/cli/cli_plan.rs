//! End-to-end tests of `tern plan` and `tern bench plan` on the example specs and the bundled
//! catalog.

// Test helpers may panic on broken fixtures; that is a test failure, as intended.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::Output;

use crate::common::{last_json, tern_output};

fn examples() -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/jobs");
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path().display().to_string())
        .filter(|p| p.ends_with(".toml"))
        .collect();
    v.sort();
    v
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

const JOB: &str = r#"
name = "NAME"
team = "ml"
accelerators = ["ACC"]
workers = 1
deadline = "DEADLINE"
[work]
samples = 3600000
[[observation]]
accelerator = "V100"
gpus = 1
local_batch = 32
step_seconds = 0.032
"#;

fn job(name: &str, acc: &str, deadline: &str) -> String {
    JOB.replace("NAME", name)
        .replace("ACC", acc)
        .replace("DEADLINE", deadline)
}

#[test]
fn every_example_is_planned_by_the_milp_with_explanations() {
    let mut args = vec!["plan".to_string()];
    args.extend(examples());
    args.push("--json".into());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = tern_output(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v = last_json(&o);
    assert_eq!(v["solver_family"], "milp");
    let jobs = v["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), examples().len());
    for j in jobs {
        // An example whose absolute deadline has passed is reported, never silently dropped.
        if j["placed"] == false {
            assert!(j["reason"].as_str().unwrap().contains("deadline"), "{j}");
            continue;
        }
        let c = &j["choice"];
        assert!(c["expected_cost"].as_f64().unwrap() > 0.0);
        assert!(c["finish_high_h"].as_f64().unwrap() >= c["finish_h"].as_f64().unwrap());
        if let Some(d) = j["deadline_h"].as_f64() {
            assert!(c["finish_high_h"].as_f64().unwrap() <= d);
        }
        assert!(!j["alternatives"].as_array().unwrap().is_empty());
        assert!(j["alternatives"][0]["why_not"].as_str().unwrap().len() > 5);
    }
    let c = &v["candidates"];
    assert!(c["generated"].as_u64().unwrap() > c["considered"].as_u64().unwrap());

    // The text report says the same in words.
    let mut args = vec!["plan".to_string()];
    args.extend(examples());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let text = String::from_utf8_lossy(&tern_output(&args).stdout).into_owned();
    assert!(
        text.contains("expected $") && text.contains("instead of") && text.contains("solver: Milp"),
        "{text}"
    );
}

#[test]
fn infeasible_jobs_say_why_per_job() {
    let dir = tempfile::tempdir().unwrap();
    // 1000 s of V100 work: fine with 3 days, impossible in 10 minutes.
    let ok = write(dir.path(), "ok.toml", &job("ok", "V100", "3d"));
    let short = write(dir.path(), "short.toml", &job("short", "V100", "10m"));
    let none = write(dir.path(), "none.toml", &job("no-offer", "MI300X", "3d"));
    let quota = write(
        dir.path(),
        "quota.toml",
        "[[quota]]\ncloud = \"aws\"\nfamily = \"V100\"\nlimit = 0\n\n[[quota]]\ncloud = \"gcp\"\nfamily = \"V100\"\nlimit = 0\n",
    );
    let o = tern_output(&["plan", &ok, &short, &none, "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v = last_json(&o);
    let by_name = |n: &str| {
        v["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|j| j["job"] == n)
            .unwrap()
            .clone()
    };
    assert_eq!(by_name("ok")["placed"], true);
    assert_eq!(by_name("short")["placed"], false);
    assert!(
        by_name("short")["reason"]
            .as_str()
            .unwrap()
            .contains("misses the deadline")
    );
    assert_eq!(by_name("no-offer")["placed"], false);
    assert!(
        by_name("no-offer")["reason"]
            .as_str()
            .unwrap()
            .contains("no offer has an allowed accelerator")
    );

    let o = tern_output(&["plan", &ok, "--quota", &quota, "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v = last_json(&o);
    assert_eq!(v["jobs"][0]["placed"], false);
    assert!(
        v["jobs"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("over quota"),
        "{}",
        v["jobs"][0]
    );
}

#[test]
fn bad_quota_and_spec_files_name_the_place() {
    let dir = tempfile::tempdir().unwrap();
    let ok = write(dir.path(), "ok.toml", &job("ok", "V100", "3d"));
    let bad = write(
        dir.path(),
        "q.toml",
        "[[quota]]\ncloud = \"aws\"\nfamily = \"V100\"\nlimit = -1\n",
    );
    let o = tern_output(&["plan", &ok, "--quota", &bad]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("q.toml:4"), "{err}");

    let typo = write(
        dir.path(),
        "t.toml",
        "[[quota]]\ncloud = \"aws\"\nfamly = \"V100\"\nlimit = 1\n",
    );
    let err =
        String::from_utf8_lossy(&tern_output(&["plan", &ok, "--quota", &typo]).stderr).into_owned();
    assert!(err.contains("t.toml:") && err.contains("famly"), "{err}");

    let spec = write(
        dir.path(),
        "s.toml",
        &job("s", "V100", "3d").replace("workers = 1", "workers = 0"),
    );
    let o = tern_output(&["plan", &spec]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("s.toml") && err.contains("workers"), "{err}");

    let twice = tern_output(&["plan", &ok, &ok]);
    assert!(String::from_utf8_lossy(&twice.stderr).contains("unique"));
}

#[test]
fn bench_plan_prints_a_json_summary() {
    let o = tern_output(&[
        "bench",
        "plan",
        "--jobs",
        "10",
        "--iterations",
        "1",
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v = last_json(&o);
    assert_eq!(v["jobs"], 10);
    assert!(v["offers"].as_u64().unwrap() > 50_000);
    assert_eq!(v["solver"], "milp");
    assert!(v["p95_ms"].as_f64().unwrap() >= v["p50_ms"].as_f64().unwrap());
}

#[test]
fn availability_history_sets_the_spot_hazard() {
    let dir = tempfile::tempdir().unwrap();
    let spec = write(dir.path(), "j.toml", &job("j", "V100", "30d"));
    let plan = |extra: &[&str]| {
        let mut args = vec!["plan", spec.as_str(), "--json", "--alternatives", "0"];
        args.extend_from_slice(extra);
        let o = tern_output(&args);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        last_json(&o)["jobs"][0]["choice"].clone()
    };
    let base = plan(&[]);
    assert_eq!(base["capacity"], "spot");
    // A trace that loses capacity every other tick makes that offer far riskier.
    let flaky = dir.path().join("flaky.json");
    let data: Vec<String> = (0..200).map(|i| (i % 2).to_string()).collect();
    std::fs::write(
        &flaky,
        format!(
            "{{\"metadata\": {{\"gap_seconds\": 600}}, \"data\": [{}]}}",
            data.join(",")
        ),
    )
    .unwrap();
    let key = format!(
        "{}:{}={}",
        base["zone"].as_str().unwrap(),
        base["instance_type"].as_str().unwrap(),
        flaky.display()
    );
    let with = plan(&["--availability", &key]);
    assert_ne!(
        with["offer"], base["offer"],
        "the flaky offer should lose: {with}"
    );

    let o = tern_output(&["plan", spec.as_str(), "--availability", "nonsense"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("ZONE:TYPE=FILE"));
}

#[test]
fn unknown_quota_families_regions_and_teams_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let ok = write(dir.path(), "ok.toml", &job("ok", "V100", "3d"));
    for (name, text, wants) in [
        (
            "family.toml",
            "[[quota]]\ncloud = \"aws\"\nfamily = \"V1OO\"\nlimit = 4\n",
            &["family.toml: quota[0].family", "\"V1OO\"", "V100"][..],
        ),
        (
            "region.toml",
            "[[quota]]\ncloud = \"aws\"\nregion = \"us-east-9\"\nfamily = \"V100\"\nlimit = 4\n",
            &["region.toml: quota[0].region", "\"us-east-9\"", "us-east-1"][..],
        ),
        (
            "team.toml",
            "[team.\"a\\u001b[2J\"]\ntotal_usd = 5\n",
            &["team.toml: team name", "1–63 characters"][..],
        ),
    ] {
        let q = write(dir.path(), name, text);
        let o = tern_output(&["plan", &ok, "--quota", &q]);
        assert!(!o.status.success(), "{name} accepted");
        let err = String::from_utf8_lossy(&o.stderr);
        for w in wants {
            assert!(err.contains(w), "{name}: {err} lacks {w}");
        }
        assert!(!err.contains('\u{1b}'), "{err}");
    }
}

#[test]
fn availability_for_an_unknown_zone_or_type_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let spec = write(dir.path(), "j.toml", &job("j", "V100", "30d"));
    let trace = write(
        dir.path(),
        "t.json",
        r#"{"metadata": {"gap_seconds": 600}, "data": [1, 0, 1]}"#,
    );
    for (key, want) in [
        (
            format!("use1-az99:p3.2xlarge={trace}"),
            "no offer of the catalog is in that zone",
        ),
        (format!("use1-az1:p9.huge={trace}"), "types offered there"),
    ] {
        let o = tern_output(&["plan", spec.as_str(), "--availability", &key]);
        assert!(!o.status.success(), "{key} accepted");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("--availability") && err.contains(want),
            "{err}"
        );
    }
}

/// Placement constraints: the plan honours them, and a region name the catalog does not know
/// is refused with the closest names.
#[test]
fn placement_constraints_steer_the_plan_and_typos_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let choice = |extra: &str| -> serde_json::Value {
        let text = job("fenced", "V100", "48h")
            .replace("workers = 1\n", &format!("workers = 1\n{extra}\n"));
        let spec = write(dir.path(), "fenced.toml", &text);
        let o = tern_output(&["plan", spec.as_str(), "--json"]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        last_json(&o)["jobs"][0]["choice"].clone()
    };
    let free = choice("");
    let region = free["region"].as_str().unwrap().to_string();
    // Exclude the region it chose, and it goes elsewhere.
    let fenced = choice(&format!("exclude = [\"{region}\"]"));
    assert_ne!(fenced["region"], free["region"], "{fenced}");
    // On-demand only, under a price cap, in us-* regions.
    let od = choice("capacity = \"on-demand-only\"\nregions = [\"us-*\"]\nmax_price_per_hour = 10");
    assert_eq!(od["capacity"], "on-demand", "{od}");
    assert!(od["region"].as_str().unwrap().starts_with("us-"), "{od}");
    assert!(od["price_per_hour"].as_f64().unwrap() <= 10.0, "{od}");

    let text = job("typo", "V100", "48h")
        .replace("workers = 1\n", "workers = 1\nregions = [\"us-est-1\"]\n");
    let spec = write(dir.path(), "typo.toml", &text);
    let o = tern_output(&["plan", spec.as_str()]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("`regions[0]`: no region named \"us-est-1\"") && err.contains("us-east-1"),
        "{err}"
    );
}

/// Two teams compete for three V100s: team ml's jobs are short (cheap), team cv's long. Cost
/// alone gives every GPU to ml; `--fairness` gives cv its part, reports each team's share and
/// what fairness costs; `share` in the quota file weighs the teams.
#[test]
fn fairness_shares_a_contended_quota_between_teams() {
    let dir = tempfile::tempdir().unwrap();
    let mut specs = Vec::new();
    for (team, n, samples) in [("ml", 4, "3600000"), ("cv", 2, "36000000")] {
        for i in 0..n {
            let text = job(&format!("{team}{i}"), "V100", "200h")
                .replace("team = \"ml\"", &format!("team = \"{team}\""))
                .replace("samples = 3600000", &format!("samples = {samples}"));
            specs.push(write(dir.path(), &format!("{team}{i}.toml"), &text));
        }
    }
    let limits = "[[quota]]\ncloud = \"aws\"\nfamily = \"V100\"\nlimit = 3\n\n[[quota]]\ncloud = \"gcp\"\nfamily = \"V100\"\nlimit = 0\n";
    let quota = write(dir.path(), "quota.toml", limits);
    let run = |quota: &str, extra: &[&str]| -> Output {
        let mut args: Vec<&str> = vec!["plan"];
        args.extend(specs.iter().map(String::as_str));
        args.extend(["--quota", quota]);
        args.extend(extra);
        tern_output(&args)
    };
    let team = |r: &serde_json::Value, name: &str| -> serde_json::Value {
        r["teams"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["team"] == name)
            .unwrap()
            .clone()
    };
    let cost_only = last_json(&run(&quota, &["--json"]));
    assert_eq!(cost_only["fairness"], 0.0);
    assert_eq!(
        team(&cost_only, "cv")["placed"],
        0,
        "{}",
        cost_only["teams"]
    );
    assert_eq!(team(&cost_only, "ml")["accelerators"], 3.0);
    assert_eq!(team(&cost_only, "ml")["entitled"], 1.5);
    assert!(cost_only["cost_only_expected_cost"].is_null());

    let o = run(&quota, &["--fairness", "1", "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let fair = last_json(&o);
    assert_eq!(fair["placed"], 3);
    let teams = fair["teams"].as_array().unwrap();
    for t in teams {
        if t["placed"] == 0 {
            assert!(
                teams
                    .iter()
                    .all(|u| u["share"].as_f64().unwrap() <= 1.0 + 1e-9),
                "{teams:?}"
            );
        }
    }
    assert!(
        team(&fair, "cv")["placed"].as_u64().unwrap() >= 1,
        "{teams:?}"
    );
    let cost = fair["expected_cost"].as_f64().unwrap();
    assert!(fair["cost_only_expected_cost"].as_f64().unwrap() < cost);

    let text = String::from_utf8_lossy(&run(&quota, &["--fairness", "1"]).stdout).into_owned();
    assert!(text.contains("teams (fairness 1):"), "{text}");
    assert!(
        text.contains("    cv (weight 1): ")
            && text.contains("fairness changes the expected cost by $+"),
        "{text}"
    );

    // Weight 2 for cv: two of the three GPUs are its entitlement.
    let weighted = write(
        dir.path(),
        "weighted.toml",
        &format!("{limits}\n[team.cv]\nshare = 2\n"),
    );
    let r = last_json(&run(&weighted, &["--fairness", "1", "--json"]));
    assert_eq!(team(&r, "cv")["entitled"], 2.0);
    assert_eq!(team(&r, "cv")["weight"], 2.0);

    let bad = write(
        dir.path(),
        "bad.toml",
        &format!("{limits}\n[team.cv]\nshare = 0\n"),
    );
    let o = run(&bad, &["--fairness", "1"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("bad.toml:11: team.cv.share: expected a weight > 0, got 0"),
        "{err}"
    );
    let o = run(&quota, &["--fairness", "-1"]);
    assert!(!o.status.success());
}
