//! `tern controller --local-agents`: the simulated cloud's instances are real `tern agent`s on
//! this machine, each running its job's own `[run]`; a reclaim from a real trace is survived
//! from the checkpoint; stopping the controller leaves no process behind.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use super::{Cluster, Referee, TOKEN, events, observed, python, serial, write_spec};

const REPO: &str = env!("CARGO_MANIFEST_DIR");

/// The three real AWS V100 zones the demo replays (`../shared/data`).
fn real_traces(_: &Path) -> Vec<PathBuf> {
    let dir = Path::new(REPO)
        .join("../shared/data/catalog/aws/spot-traces/availability/16-node/aws-08-27-2023");
    ["us-east-2b", "us-west-2a", "us-west-2c"]
        .iter()
        .map(|z| dir.join(format!("{z}_v100_1.json")))
        .collect()
}

/// Tick 1132 of the real us-east-2b trace (5-min ticks) takes its 16 instances to 0 while
/// us-west-2c keeps one or two: starting 160 s before it, a job placed on us-east-2b (the
/// cheapest zone) hears its notice about 40 s in and has spot elsewhere to go to.
const BEFORE_A_RECLAIM: &str = "339440";

/// A one-node job whose `[run]` trains `examples/train/train.py` with PyTorch (about 100 s of
/// steps), checkpointing to `dir/ckpt.json` and logging to `dir/train.log`.
fn train_spec(dir: &Path, name: &str) -> PathBuf {
    let command = format!(
        "[{py:?}, \"{REPO}/examples/train/train.py\", \"--samples\", \"32000\", \
         \"--checkpoint\", {ckpt:?}, \"--log\", {log:?}]",
        py = python(),
        ckpt = dir.join("ckpt.json"),
        log = dir.join("train.log"),
    );
    let tail = format!(
        "[[observation]]\naccelerator = \"V100\"\ngpus = 1\nlocal_batch = 32\n\
         step_seconds = 0.1\n[run]\ncommand = {command}\nlauncher = \"none\"\n"
    );
    let text = format!(
        "name = \"{name}\"\nteam = \"ml\"\naccelerators = [\"V100\"]\nworkers = 1\n\
         local_batch = 32\ndeadline = \"2h\"\n[work]\nsamples = 32000\n{tail}"
    );
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, text).expect("spec");
    path
}

/// Every live process of the hosts in `c`'s state folder.
fn hosts_processes(c: &Cluster) -> Vec<i32> {
    tern::sim::hosts::processes_in(&c.dir.path().join("state.db.hosts"))
        .into_iter()
        .collect()
}

/// SIGTERM to the controller, and its exit within `within`.
fn stop_controller(c: &mut Cluster, within: Duration) -> std::process::ExitStatus {
    super::signal(c.controller.id(), "-TERM");
    let until = Instant::now() + within;
    loop {
        if let Some(s) = c.controller.try_wait().expect("wait") {
            return s;
        }
        assert!(Instant::now() < until, "the controller ran past {within:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Kills whatever the hosts left if a test fails before stopping its controller.
struct Sweep(PathBuf);

impl Drop for Sweep {
    fn drop(&mut self) {
        let left = tern::sim::hosts::processes_in(&self.0);
        tern::agent::tree::signal_all(&left, rustix::process::Signal::KILL);
    }
}

fn wait_for_state(c: &Cluster, job: &str, state: &str, within: Duration) -> serde_json::Value {
    let until = Instant::now() + within;
    loop {
        let s = c.status_of(job);
        if s["state"] == state {
            return s;
        }
        assert!(Instant::now() < until, "{job} never {state}: {s}");
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
fn a_real_training_on_local_agents_survives_a_reclaim_from_a_real_trace() {
    let _one = serial();
    let flags = ["--local-agents", "--trace-from", BEFORE_A_RECLAIM];
    let mut c = Cluster::start_on(
        "local-reclaim",
        real_traces,
        |d| train_spec(d, "local-reclaim"),
        &flags,
    );
    let _sweep = Sweep(c.dir.path().join("state.db.hosts"));
    let referee = Referee::watch(&c);
    wait_for_state(&c, "local-reclaim", "finished", Duration::from_secs(300));
    let ckpt: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(c.dir.path().join("ckpt.json")).expect("checkpoint"),
    )
    .expect("checkpoint json");
    referee.finish(&c, ckpt["samples"].as_f64());
    // The first start trained from nothing, stopped at the notice with a checkpoint, and the
    // second (another instance) went on from exactly that checkpoint to the end, in PyTorch.
    let ev = events(&c.dir.path().join("train.log"));
    let of = |e: &str| ev.iter().filter(|v| v["event"] == e).collect::<Vec<_>>();
    let (starts, stops, done) = (of("start"), of("stop"), of("done"));
    assert_eq!(starts.len(), 2, "{ev:?}");
    assert!(starts.iter().all(|s| s["torch"] == true), "{ev:?}");
    assert_eq!(starts[0]["resumed_from"], 0, "{ev:?}");
    assert_eq!(stops.len(), 1, "{ev:?}");
    assert!(stops[0]["samples"].as_f64() > Some(0.0), "{ev:?}");
    assert_eq!(starts[1]["resumed_from"], stops[0]["samples"], "{ev:?}");
    assert_ne!(starts[0]["incarnation"], starts[1]["incarnation"], "{ev:?}");
    assert_eq!(done.len(), 1, "{ev:?}");
    assert_eq!(done[0]["samples"], 32000, "{ev:?}");
    // Two instances, each with its own folder and agent.
    let hosts: Vec<String> = std::fs::read_dir(c.dir.path().join("state.db.hosts"))
        .expect("hosts")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().to_string())
        .collect();
    assert_eq!(hosts.len(), 2, "{hosts:?}");
    // `tern explain` says what happened: a launch, the notice, a launch elsewhere.
    let out = c.tern(&["explain", "local-reclaim"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let kinds: Vec<&str> = text
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .filter(|k| ["launch", "notice", "finish"].contains(k))
        .collect();
    assert_eq!(kinds, ["launch", "notice", "launch", "finish"], "{text}");
    // The cost report bills both instances and puts the extra on the interruption.
    let out = c.tern(&["cost-report", "--job", "local-reclaim", "--json"]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("cost report json");
    let row = &report["rows"][0];
    assert_eq!(row["instances"], 2, "{report}");
    assert!(row["cost"].as_f64() > Some(0.0), "{report}");
    assert!(
        row["attribution"]["interruptions"].as_f64() > Some(0.0),
        "{report}"
    );
    assert!(stop_controller(&mut c, Duration::from_secs(40)).success());
    assert_eq!(hosts_processes(&c), Vec::<i32>::new());
}

/// A one-node spot job whose `[run]` is `command` (a shell line), on the test's trace.
fn shell_spec(dir: &Path, name: &str, command: &str) -> PathBuf {
    let tail = format!(
        "{obs}[run]\ncommand = {command:?}\nlauncher = \"none\"\n",
        obs = observed(2.0, 2.1)
    );
    let top = "deadline = \"70m\"\ncapacity = \"spot-only\"\n";
    write_spec(dir, name, "1", top, 100, &tail)
}

/// A trace with room for eight spot instances all along.
fn roomy_trace(dir: &Path) -> Vec<PathBuf> {
    let body = serde_json::json!({
        "metadata": {"gap_seconds": 60, "zone": "us-west-2a", "region": "us-west-2",
                     "cloud": "aws", "price_info": {"price": 0.9, "on_demand_price": 3.06}},
        "data": vec![8; 500],
    });
    let path = dir.join("us-west-2a_v100_8.json");
    std::fs::write(&path, body.to_string()).expect("trace");
    vec![path]
}

#[test]
fn jobs_on_local_agents_run_their_own_programs_and_stopping_the_controller_stops_them_all() {
    let _one = serial();
    // Each job's program says who it is, in its own file, and reports its work done; the
    // third never ends by itself.
    let done = |who: &str| {
        format!(
            "echo {who} > \"$OUT/{who}.txt\"; \
             printf '{{\"samples\": 100, \"checkpoint_samples\": 100}}' > \"$TERN_PROGRESS_FILE\""
        )
    };
    let mut c = Cluster::start_on(
        "job-a",
        roomy_trace,
        |d| shell_spec(d, "job-a", &format!("OUT={}; {}", d.display(), done("a"))),
        &["--local-agents"],
    );
    let _sweep = Sweep(c.dir.path().join("state.db.hosts"));
    let dir = c.dir.path().to_path_buf();
    for (name, command) in [
        ("job-b", format!("OUT={}; {}", dir.display(), done("b"))),
        ("job-c", "exec sleep 600".to_string()),
    ] {
        let spec = shell_spec(&dir, name, &command);
        let out = c.tern(&["submit", spec.to_str().expect("utf-8")]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // A job that does not say what it runs is left to the simulated workers: no host.
    let top = "deadline = \"70m\"\ncapacity = \"spot-only\"\n";
    let plain = write_spec(&dir, "job-d", "1", top, 100, &observed(2.0, 2.1));
    let out = c.tern(&["submit", plain.to_str().expect("utf-8")]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_for_state(&c, "job-a", "finished", Duration::from_secs(60));
    wait_for_state(&c, "job-b", "finished", Duration::from_secs(60));
    wait_for_state(&c, "job-d", "finished", Duration::from_secs(90));
    let hosts = std::fs::read_dir(dir.join("state.db.hosts"))
        .expect("hosts")
        .count();
    assert_eq!(hosts, 3, "a host for job-d, which has no [run]");
    let said = |who: &str| std::fs::read_to_string(dir.join(format!("{who}.txt")));
    assert_eq!(said("a").expect("job-a ran its program").trim(), "a");
    assert_eq!(said("b").expect("job-b ran its program").trim(), "b");
    // job-c's training runs, under an agent that holds the job's own token, not the admin's.
    let c_running = Instant::now() + Duration::from_secs(60);
    while !hosts_processes(&c).iter().any(|pid| {
        std::fs::read_to_string(format!("/proc/{pid}/cmdline"))
            .is_ok_and(|l| l.contains("sleep\u{0}600"))
    }) {
        assert!(Instant::now() < c_running, "job-c's program never ran");
        std::thread::sleep(Duration::from_millis(200));
    }
    let host_env = hosts_processes(&c)
        .iter()
        .filter_map(|pid| std::fs::read(format!("/proc/{pid}/environ")).ok())
        .collect::<Vec<_>>();
    assert!(
        host_env.iter().all(|e| !e
            .split(|b| *b == 0)
            .any(|kv| kv == format!("TERN_TOKEN={TOKEN}").as_bytes())),
        "a host process holds the controller's admin token"
    );
    let status = stop_controller(&mut c, Duration::from_secs(60));
    assert!(status.success(), "{status}");
    assert_eq!(hosts_processes(&c), Vec::<i32>::new());
    assert!(super::training_processes("job-c").is_empty());
}

#[test]
fn the_local_agents_demo_trains_through_a_reclaim_and_leaves_nothing_running() {
    let _one = serial();
    let folder = tempfile::tempdir().expect("tempdir");
    let out = Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(["demo", "--local-agents", "--json", "--folder"])
        .arg(folder.path())
        .arg("--python")
        .arg(python())
        .env("TERN_DATA", format!("{REPO}/../shared/data"))
        .output()
        .expect("tern demo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let log = std::fs::read_to_string(folder.path().join("controller.log")).unwrap_or_default();
    assert!(
        out.status.success(),
        "{stdout}\n{}\n{log}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s: serde_json::Value =
        serde_json::from_str(stdout.lines().last().unwrap_or_default()).expect("summary json");
    assert_eq!(s["state"], "finished", "{s}");
    assert_eq!(s["torch"], true, "{s}");
    let starts = s["starts"].as_array().expect("starts");
    assert_eq!(starts.len(), 2, "{s}");
    assert_eq!(starts[0][1], 0, "{s}");
    // The second start went on from the checkpoint the first made at its notice.
    let stop = events(&folder.path().join("train.log"))
        .into_iter()
        .find(|e| e["event"] == "stop")
        .expect("a stop at the notice");
    assert!(stop["samples"].as_u64() > Some(0), "{s}");
    assert_eq!(starts[1][1], stop["samples"], "{s}");
    let kinds: Vec<&str> = s["decisions"]
        .as_array()
        .expect("decisions")
        .iter()
        .filter_map(|k| k.as_str())
        .collect();
    assert!(kinds.contains(&"notice"), "{s}");
    assert_eq!(kinds.last(), Some(&"finish"), "{s}");
    assert_eq!(s["instances"], 2, "{s}");
    assert!(s["cost_usd"].as_f64() > Some(0.0), "{s}");
    assert_eq!(s["processes_left"], 0, "{s}");
}

#[test]
fn a_two_node_job_on_local_agents_trains_as_one_world() {
    let _one = serial();
    let spec = |d: &Path| {
        let command = format!(
            "[{py:?}, \"{REPO}/tests/training/train_ddp.py\", \"--ckpt\", {ckpt:?}, \
             \"--total-samples\", \"6000\", \"--batch\", \"32\", \"--step-sleep\", \"0.05\", \
             \"--log-file\", {log:?}]",
            py = python(),
            ckpt = d.join("ckpt.pt"),
            log = d.join("train.jsonl"),
        );
        let tail = format!(
            "{obs}[run]\ncommand = {command}\nnproc_per_node = 1\n\
             rdzv_conf = \"last_call_timeout=2\"\n[run.env]\nPYTHONPATH = \"{REPO}/python\"\n",
            obs = observed(2.0, 2.1)
        );
        let top = "deadline = \"70m\"\ncapacity = \"spot-only\"\n";
        write_spec(d, "local-pair", "2", top, 6000, &tail)
    };
    let mut c = Cluster::start_on("local-pair", roomy_trace, spec, &["--local-agents"]);
    let _sweep = Sweep(c.dir.path().join("state.db.hosts"));
    let referee = Referee::watch(&c);
    wait_for_state(&c, "local-pair", "finished", Duration::from_secs(240));
    referee.finish(&c, None);
    // The two nodes' torchruns met at the job's rendezvous: one world of two ranks, not two
    // trainings of one.
    let ev = events(&c.dir.path().join("train.jsonl"));
    let starts: Vec<_> = ev.iter().filter(|e| e["event"] == "start").collect();
    assert_eq!(starts.len(), 2, "{ev:?}");
    assert!(starts.iter().all(|e| e["world_size"] == 2), "{ev:?}");
    assert!(ev.iter().any(|e| e["event"] == "done"), "{ev:?}");
    assert!(stop_controller(&mut c, Duration::from_secs(40)).success());
    assert_eq!(hosts_processes(&c), Vec::<i32>::new());
}

#[test]
fn a_skypilot_task_on_local_agents_runs_its_bash_setup_and_its_nodes_learn_each_other() {
    let _one = serial();
    // The run script records what SkyPilot's variables say on each node, then waits for the
    // other node's record, as a rendezvous would, and reports the work done.
    let spec = |d: &Path| {
        let task = format!(
            "name: sky-pair\nnum_nodes: 2\nresources:\n  accelerators: V100:1\n  \
             infra: aws/us-west-2\nenvs:\n  OUT: {out}\nsecrets:\n  GREETING: hello\n\
             setup: |\n  [[ -n \"$GREETING\" ]] && echo \"$GREETING from bash\" > \"$OUT/setup-$$.txt\"\n\
             run: |\n  printf 'rank=%s nodes=%s gpus=%s ips=%s\\n' \"$SKYPILOT_NODE_RANK\" \
             \"$SKYPILOT_NUM_NODES\" \"$SKYPILOT_NUM_GPUS_PER_NODE\" \
             \"$(echo \"$SKYPILOT_NODE_IPS\" | paste -sd,)\" > \"$OUT/node-$SKYPILOT_NODE_RANK.txt\"\n  \
             for i in $(seq 1 600); do\n    \
             [ -e \"$OUT/node-0.txt\" ] && [ -e \"$OUT/node-1.txt\" ] && break\n    sleep 0.1\n  done\n  \
             printf '{{\"samples\": 100, \"checkpoint_samples\": 100}}' > \"$TERN_PROGRESS_FILE\"\n",
            out = d.display()
        );
        let yaml = d.join("sky-pair.yaml");
        std::fs::write(&yaml, task).expect("task");
        let out = Command::new(env!("CARGO_BIN_EXE_tern"))
            .args(["convert", "skypilot"])
            .arg(&yaml)
            .args(["--samples", "100", "--deadline", "70m", "--team", "ml"])
            .output()
            .expect("tern convert");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        // Measured beforehand, so the planner places it without a probe.
        let toml = format!(
            "{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            observed(2.0, 2.1)
        );
        let path = d.join("sky-pair.toml");
        std::fs::write(&path, toml).expect("spec");
        path
    };
    let mut c = Cluster::start_on("sky-pair", roomy_trace, spec, &["--local-agents"]);
    let _sweep = Sweep(c.dir.path().join("state.db.hosts"));
    wait_for_state(&c, "sky-pair", "finished", Duration::from_secs(120));
    let dir = c.dir.path();
    let node = |rank: u32| {
        std::fs::read_to_string(dir.join(format!("node-{rank}.txt")))
            .unwrap_or_else(|e| panic!("node {rank} never ran: {e}"))
    };
    assert_eq!(node(0).trim(), "rank=0 nodes=2 gpus=1 ips=127.0.0.1");
    assert_eq!(
        node(1).trim(),
        "rank=1 nodes=2 gpus=1 ips=127.0.0.1,127.0.0.1"
    );
    // The setup ran under bash (`[[` is not sh's), once per node, with the task's secret.
    let setups: Vec<String> = std::fs::read_dir(dir)
        .expect("dir")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("setup-"))
        .map(|e| std::fs::read_to_string(e.path()).expect("setup file"))
        .collect();
    assert_eq!(setups.len(), 2, "{setups:?}");
    assert!(
        setups.iter().all(|s| s.trim() == "hello from bash"),
        "{setups:?}"
    );
    assert!(stop_controller(&mut c, Duration::from_secs(40)).success());
    assert_eq!(hosts_processes(&c), Vec::<i32>::new());
}
