//! SkyPilot task files: tern reads them as SkyPilot does. Each hand-written task in
//! `skypilot/tasks/` is read twice, by SkyPilot's own package (`sky.Task.from_yaml`, offline,
//! on the shared catalogs) and by `tern convert skypilot --json`, and the two must agree on
//! every candidate (cloud, region, zone, accelerator and count, spot, instance type, vCPUs,
//! memory), the node count, `run`, `setup`, `envs` and `secrets`. Then what a task becomes is
//! submitted to a controller, and bad tasks are refused, naming the field, with nothing sent.
//!
//! Needs the virtual environment `scripts/setup --test` makes with SkyPilot in it: its
//! interpreter is `TERN_TEST_SKYPILOT_PYTHON`, by default `bin/python` in
//! `TERN_TEST_SKYPILOT_VENV` (`~/.cache/tern/skypilot-venv`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::common::{Reaper, controller_command, free_port, tern_json, wait_for};

const TASKS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/cli/skypilot/tasks");
const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/data");

fn skypilot_python() -> PathBuf {
    let venv = || {
        std::env::var_os("TERN_TEST_SKYPILOT_VENV").map_or_else(
            || {
                let home = std::env::var_os("HOME").unwrap_or_default();
                PathBuf::from(home).join(".cache/tern/skypilot-venv")
            },
            PathBuf::from,
        )
    };
    let path = std::env::var_os("TERN_TEST_SKYPILOT_PYTHON")
        .map_or_else(|| venv().join("bin/python"), PathBuf::from);
    assert!(
        path.exists(),
        "{} is missing: run `bash scripts/setup --test` (it installs SkyPilot in that venv)",
        path.display()
    );
    path
}

fn tasks() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(TASKS)
        .expect("tasks folder")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    out.sort();
    assert!(out.len() >= 8, "{out:?}");
    out
}

/// SkyPilot's reading of every task, by file name. HOME is a fresh folder whose
/// `.sky/catalogs` holds the shared catalogs, so SkyPilot looks nothing up on the network.
fn skypilot_reading(tasks: &[PathBuf]) -> BTreeMap<String, Value> {
    let home = tempfile::tempdir().expect("home");
    for (cloud, file) in [("aws", "vms.excerpt.csv"), ("gcp", "vms.csv")] {
        let dir = home.path().join(".sky/catalogs/v8").join(cloud);
        std::fs::create_dir_all(&dir).expect("catalog folder");
        std::fs::copy(
            Path::new(DATA).join("catalog").join(cloud).join(file),
            dir.join("vms.csv"),
        )
        .expect("catalog");
    }
    let out = Command::new(skypilot_python())
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/cli/skypilot/sky_candidates.py"
        ))
        .args(tasks)
        .current_dir(TASKS)
        .env("HOME", home.path())
        .env("SKYPILOT_DISABLE_USAGE_COLLECTION", "1")
        .output()
        .expect("python");
    assert!(
        out.status.success(),
        "SkyPilot could not read the tasks: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let all: BTreeMap<String, Value> = serde_json::from_slice(&out.stdout).expect("json");
    all.into_iter()
        .map(|(path, v)| (file_name(Path::new(&path)), v))
        .collect()
}

fn file_name(p: &Path) -> String {
    p.file_name().expect("name").to_string_lossy().into_owned()
}

/// `tern convert skypilot TASK --json`, run where the task is (relative workdirs).
fn tern_reading(task: &Path) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(["convert", "skypilot"])
        .arg(task)
        .args(["--samples", "1000", "--team", "ml", "--json"])
        .current_dir(TASKS)
        .output()
        .expect("tern");
    assert!(
        out.status.success(),
        "{}: {}",
        task.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("json")
}

/// A candidate as a sortable string. SkyPilot fills an instance type's vCPUs and memory from
/// its catalog; tern's instance type pins them already, so they are compared only without one.
fn normal(c: &Value) -> String {
    let mut c = c.clone();
    if !c["instance_type"].is_null() {
        c["cpus"] = Value::Null;
        c["memory"] = Value::Null;
    }
    serde_json::to_string(&c).expect("json")
}

fn sorted(list: &Value) -> Vec<String> {
    let mut v: Vec<String> = list.as_array().expect("list").iter().map(normal).collect();
    v.sort();
    v
}

#[test]
fn tern_reads_every_task_as_skypilot_does() {
    let tasks = tasks();
    let theirs = skypilot_reading(&tasks);
    for task in &tasks {
        let name = file_name(task);
        let sky = &theirs[&name];
        let ours = tern_reading(task);
        assert_eq!(
            sorted(&ours["candidates"]),
            sorted(&sky["candidates"]),
            "{name}: candidates"
        );
        let spec = tern_cloud::parse_job_spec(ours["spec"].as_str().expect("spec"), &name)
            .expect("the printed spec parses");
        let per_node = spec.constraints.gpus_per_node.expect("gpus_per_node");
        assert_eq!(
            u64::from(spec.workers.max / per_node),
            sky["num_nodes"].as_u64().expect("num_nodes"),
            "{name}: nodes"
        );
        let run = spec.run.as_ref().expect("[run]");
        assert_eq!(
            run.command,
            ["bash", "-c", sky["run"].as_str().expect("run")],
            "{name}"
        );
        assert_eq!(run.setup.as_deref(), sky["setup"].as_str(), "{name}: setup");
        assert_eq!(run.node_env.as_deref(), Some("skypilot"), "{name}");
        let mut env: BTreeMap<String, String> = BTreeMap::new();
        for part in ["envs", "secrets"] {
            for (k, v) in sky[part].as_object().expect("map") {
                env.insert(k.clone(), v.as_str().expect("string").to_string());
            }
        }
        assert_eq!(run.env, env, "{name}: envs and secrets");
        assert_eq!(
            spec.disk_gb.map(u64::from),
            sky["disk_size"].as_u64(),
            "{name}: disk_size"
        );
        assert_eq!(spec.team, "ml");
    }
}

#[test]
fn warnings_name_what_is_not_applied() {
    let ours = tern_reading(&Path::new(TASKS).join("instance_type.yaml"));
    let fields: Vec<&str> = ours["warnings"]
        .as_array()
        .expect("warnings")
        .iter()
        .map(|w| w["field"].as_str().expect("field"))
        .collect();
    for f in ["resources.job_recovery", "workdir"] {
        assert!(fields.contains(&f), "{f} in {fields:?}");
    }
    let ours = tern_reading(&Path::new(TASKS).join("set_spot_fallback.yaml"));
    let spec = ours["spec"].as_str().expect("spec");
    // Spot with on-demand fallback is tern's own rule; restarts carry over.
    assert!(spec.contains("capacity = \"any\""), "{spec}");
    assert!(spec.contains("max_restarts = 3"), "{spec}");
    assert!(spec.contains("gang = true"), "{spec}");
}

#[test]
fn a_task_is_submitted_as_its_spec_and_bad_tasks_are_refused_before_anything_is_sent() {
    let dir = tempfile::tempdir().expect("dir");
    let addr = format!("127.0.0.1:{}", free_port());
    let child = controller_command(&dir.path().join("state.db"), "skypilot-token")
        .args(["--provider", "sim", "--listen", &addr])
        .spawn()
        .expect("controller");
    let _reaper = Reaper(vec![child]);
    wait_for(&addr);
    let url = format!("http://{addr}");
    let url = url.as_str();
    let submit = |task: &Path, extra: &[&str]| {
        let mut args = vec!["submit", task.to_str().expect("path"), "--server", url];
        args.extend_from_slice(extra);
        crate::common::tern_as("skypilot-token", Some(Path::new(TASKS)), &args)
    };
    let one = Path::new(TASKS).join("one_gpu.yaml");
    let (ok, out, err) = submit(
        &one,
        &["--samples", "5000", "--deadline", "2d", "--team", "ml"],
    );
    assert!(ok, "{out}{err}");
    assert!(out.contains("submitted one-gpu"), "{out}");
    let status = tern_json(
        &["status", "one-gpu", "--json", "--server", url],
        "skypilot-token",
    );
    let job = &status["jobs"][0];
    assert_eq!(job["name"], "one-gpu");
    assert_eq!(job["run"]["node_env"], "skypilot", "{job}");
    assert_eq!(job["run"]["shell"], "bash", "{job}");

    // Work is required; a TOML spec takes none of the task flags.
    let (ok, _, err) = submit(&one, &["--name", "no-work"]);
    assert!(!ok && err.contains("--samples"), "{err}");
    let toml = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/jobs/resnet.toml");
    let (ok, _, err) = submit(&toml, &["--samples", "5"]);
    assert!(!ok && err.contains("for SkyPilot tasks"), "{err}");

    // Each refused field is named with its line; nothing reaches the controller.
    let bad = [
        (
            "file_mounts:\n  /data: s3://bucket\n",
            "`file_mounts` is not supported",
        ),
        ("service:\n  replicas: 2\n", "`service` is not supported"),
        (
            "resources:\n  accelerators: A100:1\n  image_id: docker:pytorch\n",
            "`resources.image_id` is not supported",
        ),
        (
            "resources:\n  accelerators: A100:1\n  ports: 8080\n",
            "`resources.ports` is not supported",
        ),
        (
            "resources:\n  infra: k8s/my-context\n  accelerators: A100:1\n",
            "`resources.infra` is not supported: Kubernetes",
        ),
        (
            "resources:\n  accelerators: A100:1\n  volumes:\n    - path: /d\n",
            "`resources.volumes` is not supported",
        ),
        (
            "resources:\n  accelerators: A100:1\n  any_of:\n    - infra: azure\n",
            "`resources.any_of[0].infra` is not supported",
        ),
        (
            "resources:\n  accelerators: A100:1\n  colour: blue\n",
            "unknown field `resources.colour`",
        ),
        (
            "resources:\n  accelerators: A100:1\nenvs:\n  BAD-NAME: x\n",
            "`envs.BAD-NAME`: expected a variable name",
        ),
        (
            "resources:\n  accelerators: A100:1\nenvs:\n  TOKEN:\n",
            "missing field `envs.TOKEN`",
        ),
        (
            "resources:\n  accelerators: A100:0.5\n",
            "a whole number of accelerators",
        ),
        ("resources:\n  accelerators: {V100:1, A100:8}\n", "one size"),
        (
            "resources:\n  cpus: 4\n",
            "`resources.accelerators` is not supported: tern places accelerator jobs",
        ),
    ];
    for (i, (body, message)) in bad.iter().enumerate() {
        let path = dir.path().join(format!("bad{i}.yaml"));
        std::fs::write(&path, format!("name: bad{i}\n{body}run: python train.py\n"))
            .expect("write");
        let (ok, _, err) = submit(&path, &["--samples", "10"]);
        assert!(!ok, "{body}");
        assert!(err.contains(message), "{body}: {err}");
        assert!(err.contains(&format!("bad{i}.yaml:")), "a line: {err}");
    }
    let all = tern_json(&["status", "--json", "--server", url], "skypilot-token");
    let names: Vec<&str> = all["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .map(|j| j["name"].as_str().expect("name"))
        .collect();
    assert_eq!(names, ["one-gpu"], "refused tasks wrote nothing");
}
