//! End-to-end tests of `tern forecast` on the shared profiles and the example job specs.

// Test helpers may panic on broken fixtures; that is a test failure, as intended.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::common::tern_output;

fn last_json(o: &Output) -> serde_json::Value {
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "tern failed: {}\n{out}",
        String::from_utf8_lossy(&o.stderr)
    );
    let line = out.lines().last().expect("some output");
    serde_json::from_str(line).unwrap_or_else(|e| panic!("last line is not JSON ({e}): {line}"))
}

fn profiles(rel: &str) -> String {
    format!(
        "{}/../shared/data/profiles/{rel}",
        env!("CARGO_MANIFEST_DIR")
    )
}

fn rows_in(files: &[String]) -> (usize, usize) {
    // (all rows, multi-node rows), counted independently of the parser under test.
    let (mut all, mut multi) = (0, 0);
    for f in files {
        let text = std::fs::read_to_string(f).expect("profile");
        let mut lines = text.lines();
        let head: Vec<&str> = lines.next().expect("header").split(',').collect();
        let col = |n: &str| head.iter().position(|h| *h == n);
        for l in lines.filter(|l| !l.trim().is_empty()) {
            let cells: Vec<&str> = l.split(',').collect();
            let nodes = match (col("placement"), col("num_nodes")) {
                (Some(p), _) => cells[p].chars().filter(|c| *c != '0').count(),
                (_, Some(n)) => cells[n].parse::<f64>().expect("nodes") as usize,
                _ => panic!("unknown layout"),
            };
            all += 1;
            multi += usize::from(nodes > 1);
        }
    }
    (all, multi)
}

fn evaluate(dir: &str, extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["forecast", "evaluate", "--profile", dir, "--json"];
    args.extend_from_slice(extra);
    last_json(&tern_output(&args))
}

fn mape(v: &serde_json::Value) -> f64 {
    v["mape"].as_f64().expect("mape")
}

#[test]
fn fit_on_all_is_within_ten_percent_on_the_pollux_profiles() {
    for app in ["cifar10", "imagenet"] {
        let dir = profiles(&format!("pollux-t4/{app}"));
        let v = evaluate(&dir, &["--fit-on", "all"]);
        let (all, _) = rows_in(&[
            format!("{dir}/placements.csv"),
            format!("{dir}/scalability.csv"),
        ]);
        assert_eq!(v["n_fit"].as_u64(), Some(all as u64));
        assert_eq!(v["n_eval"].as_u64(), Some(all as u64));
        assert!(mape(&v) <= 10.0, "{app}: {v}");
        // A 90 % interval should cover roughly 90 % of rows in-sample.
        let cov = v["coverage"].as_f64().expect("coverage");
        assert!((0.8..=1.0).contains(&cov), "{app}: coverage {cov}");
    }
}

/// A Pollux-layout folder does not name its hardware; it is read as the Pollux testbed's nodes
/// (as Sia's `aws`), and --accelerator still overrides that.
#[test]
fn a_pollux_layout_profile_is_read_as_the_pollux_testbed() {
    let dir = profiles("pollux-t4/cifar10");
    let plain = evaluate(&dir, &["--fit-on", "single-node"]);
    assert_eq!(
        plain["node_type"].as_str(),
        Some("g4dn.12xlarge"),
        "{plain}"
    );
    assert_eq!(plain["accelerator"].as_str(), Some("T4"), "{plain}");
    let sia = evaluate(
        &profiles("sia-multigpu/cifar10"),
        &["--gpu", "aws", "--fit-on", "all"],
    );
    assert_eq!(plain["cross_ratio_prior"], sia["cross_ratio_prior"]);
    let named = evaluate(&dir, &["--fit-on", "single-node", "--accelerator", "A100"]);
    assert_eq!(named["accelerator"].as_str(), Some("A100"), "{named}");
    assert!(named["node_type"].is_null(), "{named}");
    assert_ne!(named["cross_ratio_prior"], plain["cross_ratio_prior"]);
}

#[test]
fn single_node_and_probe_fits_predict_every_other_multi_node_row() {
    let dir = profiles("sia-multigpu/imagenet");
    let files = [
        format!("{dir}/placements-aws.csv"),
        format!("{dir}/scalability-aws.csv"),
    ];
    let (all, multi) = rows_in(&files);
    let single = evaluate(&dir, &["--gpu", "aws", "--fit-on", "single-node"]);
    assert_eq!(single["n_fit"].as_u64(), Some((all - multi) as u64));
    assert_eq!(single["n_eval"].as_u64(), Some(multi as u64));
    assert!(mape(&single) <= 35.0, "{single}");
    let probes = evaluate(&dir, &["--gpu", "aws", "--fit-on", "probes"]);
    let chosen = probes["probes"].as_array().expect("probes");
    assert!(!chosen.is_empty() && chosen.len() <= 2, "{probes}");
    assert!(chosen.iter().all(|p| p["nodes"].as_u64() > Some(1)));
    let n_fit = probes["n_fit"].as_u64().expect("n_fit") as usize;
    let n_eval = probes["n_eval"].as_u64().expect("n_eval") as usize;
    assert!(n_fit > all - multi && n_fit + n_eval == all, "{probes}");
    assert!(mape(&probes) <= 15.0, "{probes}");
    // Learning from the probes narrows the interval.
    assert!(probes["mean_interval_ratio"].as_f64() < single["mean_interval_ratio"].as_f64());
}

/// On Sia's Azure nodes CIFAR-10's intra-node sync is small next to compute, so single-node
/// rows fit a large sync hidden under compute as well as a small exposed one; the hidden reading
/// multiplied by the cross-node ratio predicted steps 2.2× too slow (121 % MAPE).
#[test]
fn a_single_node_fit_carries_across_only_the_sync_it_saw() {
    let dir = profiles("sia-multigpu/cifar10");
    let v = evaluate(&dir, &["--gpu", "azure", "--fit-on", "single-node"]);
    assert!(mape(&v) <= 30.0, "{v}");
    let gamma = v["params"]["gamma"].as_f64().expect("gamma");
    assert!(gamma < 1.3, "γ {gamma}: {v}");
}

#[test]
fn bootstrap_predicts_the_target_multi_gpu_rows() {
    let dir = profiles("sia-multigpu/cifar10");
    let v = evaluate(&dir, &["--gpu", "dgx", "--bootstrap-from", "aws"]);
    let (all, _) = rows_in(&[
        format!("{dir}/placements-dgx.csv"),
        format!("{dir}/scalability-dgx.csv"),
    ]);
    let singles = std::fs::read_to_string(format!("{dir}/placements-dgx.csv"))
        .expect("profile")
        .lines()
        .filter(|l| l.ends_with(",1"))
        .count();
    assert_eq!(v["n_eval"].as_u64(), Some((all - singles) as u64));
    assert!(v["mape"].as_f64().is_some_and(f64::is_finite), "{v}");
    // Each group of the error breakdown is reported.
    assert!(v["groups"].as_array().is_some_and(|g| g.len() >= 2), "{v}");
}

/// DGX-A100 overlaps ResNet-50's tiny all-reduce with compute; its fit may put a large sync
/// under a strong overlap. Carried to a T4 node's slower network, only the sync the DGX left
/// exposed may grow, not the hidden part.
#[test]
fn a_transfer_carries_only_the_sync_the_source_left_exposed() {
    let dir = profiles("sia-multigpu/imagenet");
    let v = evaluate(
        &dir,
        &[
            "--gpu",
            "aws",
            "--bootstrap-from",
            "dgx",
            "--bootstrap-method",
            "transfer",
        ],
    );
    // Scaling the hidden sync too: 344 %.
    assert!(mape(&v) <= 40.0, "{v}");
}

fn scratch(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tern-forecast-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(dir.join("placements.csv"), text).expect("write");
    dir
}

#[test]
fn bad_profiles_are_reported_with_file_and_line() {
    for (name, text, want) in [
        (
            "nan",
            "placement,local_bsz,step_time\n1,32,0.1\n2,32,NaN\n",
            "placements.csv:3",
        ),
        (
            "zero",
            "placement,local_bsz,step_time\n1,0,0.1\n",
            "placements.csv:2",
        ),
        (
            "cols",
            "placement,step_time\n1,0.1\n",
            "missing column `local_bsz`",
        ),
        ("empty", "", "empty file"),
    ] {
        let dir = scratch(name, text);
        let o = tern_output(&[
            "forecast",
            "evaluate",
            "--profile",
            dir.to_str().expect("utf8"),
        ]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && err.contains(want), "{name}: {err}");
        std::fs::remove_dir_all(dir).ok();
    }
}

fn example_jobs() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/jobs");
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("examples/jobs")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    v.sort();
    v
}

#[test]
fn every_example_job_parses_validates_and_forecasts() {
    let jobs = example_jobs();
    assert!(jobs.len() >= 3);
    for path in jobs {
        let text = std::fs::read_to_string(&path).expect("read");
        let shown = path.display().to_string();
        let spec = tern_cloud::parse_job_spec(&text, &shown).expect("valid example");
        let v = last_json(&tern_output(&["forecast", "--job", &shown, "--json"]));
        assert_eq!(v["job"].as_str(), Some(spec.name.as_str()));
        let rows = v["forecasts"].as_array().expect("forecasts");
        for acc in &spec.accelerators {
            assert!(
                rows.iter().any(|r| r["accelerator"].as_str() == Some(acc)),
                "{shown}: no forecast for {acc}: {v}"
            );
        }
        for r in rows {
            let (lo, mid, hi) = (
                r["runtime_low_s"].as_f64().expect("low"),
                r["runtime_s"].as_f64().expect("mid"),
                r["runtime_high_s"].as_f64().expect("high"),
            );
            assert!(0.0 < lo && lo <= mid && mid <= hi, "{shown}: {r}");
        }
    }
}

#[test]
fn a_typo_in_a_job_spec_names_file_line_and_field() {
    let path = example_jobs().into_iter().next().expect("an example");
    let text = std::fs::read_to_string(&path)
        .expect("read")
        .replacen("priority", "priorty", 1);
    let dir = std::env::temp_dir().join(format!("tern-forecast-{}-typo", std::process::id()));
    std::fs::create_dir_all(&dir).expect("mkdir");
    let bad = dir.join("job.toml");
    std::fs::write(&bad, &text).expect("write");
    let o = tern_output(&["forecast", "--job", bad.to_str().expect("utf8")]);
    let err = String::from_utf8_lossy(&o.stderr);
    let line = text
        .lines()
        .position(|l| l.starts_with("priorty"))
        .expect("typo line")
        + 1;
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains(&format!("job.toml:{line}")) && err.contains("`priorty`"),
        "{err}"
    );
    std::fs::remove_dir_all(dir).ok();
}

/// CIFAR-10 on DGX from T4 nodes: Sia's ratio carries the T4's slow TCP sync over (94 %), the
/// transfer scales it down by bandwidth (16 %). Blending whole steps also averaged the compute
/// both agree on and landed at 46 %; blending only the sync lands nearer the better estimate.
#[test]
fn the_bootstrap_blend_averages_the_sync_not_the_compute() {
    let dir = profiles("sia-multigpu/cifar10");
    let v = evaluate(&dir, &["--gpu", "dgx", "--bootstrap-from", "aws"]);
    assert_eq!(v["mode"].as_str(), Some("bootstrap-blend"), "{v}");
    assert!(mape(&v) <= 36.0, "{v}");
}

/// Several donors pool their estimates: on every Sia target of `shared/data`, all other node
/// types together do at least as well as the average single donor, and the rows of every
/// donor are fitted.
#[test]
fn a_bootstrap_from_several_node_types_pools_them() {
    let types = ["aws", "azure", "dgx", "rtx", "quad"];
    let (mut pooled, mut single) = (Vec::new(), Vec::new());
    for app in ["cifar10", "imagenet"] {
        let dir = profiles(&format!("sia-multigpu/{app}"));
        for target in ["aws", "dgx", "rtx"] {
            let donors: Vec<&str> = types.iter().copied().filter(|t| *t != target).collect();
            let list = donors.join(",");
            let v = evaluate(&dir, &["--gpu", target, "--bootstrap-from", &list]);
            assert_eq!(v["bootstrap_from"].as_str(), Some(list.as_str()), "{v}");
            let singles: Vec<f64> = donors
                .iter()
                .map(|d| mape(&evaluate(&dir, &["--gpu", target, "--bootstrap-from", d])))
                .collect();
            pooled.push(mape(&v));
            single.push(singles.iter().sum::<f64>() / singles.len() as f64);
            let files: Vec<String> = donors
                .iter()
                .flat_map(|d| {
                    [
                        format!("{dir}/placements-{d}.csv"),
                        format!("{dir}/scalability-{d}.csv"),
                    ]
                })
                .collect();
            let (donor_rows, _) = rows_in(&files);
            assert!(v["n_fit"].as_u64() > Some(donor_rows as u64), "{v}");
        }
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    assert!(
        mean(&pooled) < mean(&single),
        "pooled {pooled:?} vs single {single:?}"
    );
}

#[test]
fn a_bootstrap_source_list_is_checked() {
    let dir = profiles("sia-multigpu/cifar10");
    for (list, want) in [
        ("aws,,dgx", "empty node type"),
        ("dgx", "is the target"),
        ("aws,aws", "listed twice"),
    ] {
        let o = tern_output(&[
            "forecast",
            "evaluate",
            "--profile",
            &dir,
            "--gpu",
            "dgx",
            "--bootstrap-from",
            list,
        ]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && err.contains(want), "{list}: {err}");
    }
}
