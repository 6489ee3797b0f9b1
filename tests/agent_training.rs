//! `tern agent` with real PyTorch: torchrun, gloo on CPU, the `tern_train` helper, against a
//! controller on the simulated cloud at real-time speed. Every test enumerates the training's
//! processes in `/proc` (by the `TERN_JOB` every one of them carries) after the agent is done.
//!
//! Needs the virtual environment `scripts/setup --test` makes (PyTorch, Lightning); its
//! interpreter is `TERN_TEST_PYTHON`, by default `~/.cache/tern/torch-venv/bin/python`.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

mod common;
/// `tern controller --local-agents`: real agents for the simulated cloud's instances.
#[path = "agent_training/local.rs"]
mod local;
/// Moves of a one-node job: the new node waits for the old one's workers, never beside them.
#[path = "agent_training/moves.rs"]
mod moves;
/// What every stop path must hold, watched for a whole test.
#[path = "agent_training/referee.rs"]
mod referee;
/// A job's own `[run]`, fetched and run by an agent with no command.
#[path = "agent_training/runs.rs"]
mod runs;
/// More stop paths: the checkpoint a cancel saves, a training that exits early, one that hangs.
#[path = "agent_training/stops.rs"]
mod stops;

use common::answers::{self, of_agent_log};
use common::{free_port, wait_for};
use referee::Referee;

const TOKEN: &str = "agent-training-token";
const REPO: &str = env!("CARGO_MANIFEST_DIR");

/// The torch tests run one at a time: two cores hold one two-node job, not three.
fn serial() -> MutexGuard<'static, ()> {
    static ONE: Mutex<()> = Mutex::new(());
    ONE.lock().unwrap_or_else(|e| e.into_inner())
}

/// The test interpreter, with PyTorch: `TERN_TEST_PYTHON`, else the venv `scripts/setup
/// --test` made (`TERN_TEST_VENV`, by default `~/.cache/tern/torch-venv`).
pub fn python() -> PathBuf {
    let venv = || {
        std::env::var_os("TERN_TEST_VENV").map_or_else(
            || {
                let home = std::env::var_os("HOME").unwrap_or_default();
                PathBuf::from(home).join(".cache/tern/torch-venv")
            },
            PathBuf::from,
        )
    };
    let path = std::env::var_os("TERN_TEST_PYTHON")
        .map_or_else(|| venv().join("bin/python"), PathBuf::from);
    assert!(
        path.exists(),
        "{} is missing: run `bash scripts/setup --test` (it installs PyTorch in that venv)",
        path.display()
    );
    path
}

/// PATH with the venv's `bin` first, so `python`, `python3` and `torchrun` are the venv's.
fn venv_path() -> String {
    let bin = python().parent().expect("bin").to_path_buf();
    format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// The pids of every live process whose environment says it works for `job`.
pub fn training_processes(job: &str) -> Vec<i32> {
    let mark = format!("TERN_JOB={job}");
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let zombie = stat
            .rfind(')')
            .is_some_and(|i| stat[i + 1..].trim_start().starts_with('Z'));
        let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        if !zombie && env.split(|b| *b == 0).any(|kv| kv == mark.as_bytes()) {
            out.push(pid);
        }
    }
    out
}

/// Wait until no process of `job` is left; the pids left after `within` otherwise.
fn gone(job: &str, within: Duration) -> Result<(), Vec<i32>> {
    let until = Instant::now() + within;
    loop {
        let left = training_processes(job);
        if left.is_empty() {
            return Ok(());
        }
        if Instant::now() >= until {
            return Err(left);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A spot availability trace: `before` ticks of 2 instances, then 1 (a reclaim with AWS's
/// 120 s notice, delivered 120 s before the drop), `gap` seconds a tick.
fn trace(dir: &Path, gap: u32, before: usize) -> PathBuf {
    let mut data = vec![2; before];
    data.extend(std::iter::repeat_n(1, 2000));
    let body = serde_json::json!({
        "metadata": {"gap_seconds": gap, "zone": "us-west-2a", "region": "us-west-2",
                     "cloud": "aws", "price_info": {"price": 0.9, "on_demand_price": 3.06}},
        "data": data,
    });
    let path = dir.join("us-west-2a_v100_2.json");
    std::fs::write(&path, body.to_string()).expect("trace");
    path
}

/// A job spec of team `ml` on V100s, written into `dir`: `workers` and `top` (more top-level
/// keys) as TOML, `samples` of work, a 1-minute checkpoint interval, `tail` appended (the
/// observations, a `[probe]` section).
fn write_spec(
    dir: &Path,
    name: &str,
    workers: &str,
    top: &str,
    samples: u64,
    tail: &str,
) -> PathBuf {
    let text = format!(
        "name = \"{name}\"\nteam = \"ml\"\naccelerators = [\"V100\"]\nworkers = {workers}\n\
         local_batch = 16\n{top}[work]\nsamples = {samples}\n\
         [checkpoint]\ninterval = \"1m\"\nsave_seconds = 2\nrestore_seconds = 5\n{tail}"
    );
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, text).expect("spec");
    path
}

/// Observations of one node and of two, at these step times (local batch 16).
fn observed(one: f64, two: f64) -> String {
    format!(
        "[[observation]]\naccelerator = \"V100\"\ngpus = 1\nlocal_batch = 16\nstep_seconds = {one}\n\
         [[observation]]\naccelerator = \"V100\"\ngpus = 2\nnodes = 2\nlocal_batch = 16\n\
         step_seconds = {two}\n"
    )
}

/// A job the planner puts on two spot nodes (one node misses the deadline at the spec's
/// slow step time; the real steps are much faster).
fn job_spec(dir: &Path, name: &str, samples: u64) -> PathBuf {
    let top = "deadline = \"70m\"\ncapacity = \"spot-only\"\n";
    let workers = "{ min = 1, max = 2 }";
    write_spec(dir, name, workers, top, samples, &observed(2.0, 2.1))
}

/// The instance ids of one job's status (`tern status --json`'s `jobs[i]`).
fn ids_in(status: &serde_json::Value) -> Vec<String> {
    status["instance_ids"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// A controller on the in-process simulated cloud at real-time speed, and its job.
struct Cluster {
    controller: Child,
    server: String,
    dir: tempfile::TempDir,
    job: String,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self.controller.kill();
        let _ = self.controller.wait();
        if std::thread::panicking() {
            let log = std::fs::read(self.dir.path().join("controller.log")).unwrap_or_default();
            let log = String::from_utf8_lossy(&log);
            let lines: Vec<&str> = log.lines().collect();
            eprintln!(
                "controller log (last lines):\n{}",
                lines[lines.len().saturating_sub(30)..].join("\n")
            );
        }
    }
}

impl Cluster {
    /// `before`: 5-s ticks of two spot instances before one is reclaimed.
    fn start(job: &str, samples: u64, before: usize) -> Cluster {
        Cluster::start_with(job, before, |dir| job_spec(dir, job, samples))
    }

    /// As [`Cluster::start`], submitting the spec `spec` writes into the cluster's folder.
    fn start_with(job: &str, before: usize, spec: impl FnOnce(&Path) -> PathBuf) -> Cluster {
        Cluster::start_on(job, |dir| vec![trace(dir, 5, before)], spec, &[])
    }

    /// A cluster on the traces `traces` writes into its folder, and the job `spec` writes;
    /// `flags` go to `tern controller`. Only agents move jobs (`--no-simulated-workers`),
    /// except with `--local-agents`, which runs as users run it: its agents for the jobs
    /// with a `[run]`, simulated workers for the rest.
    fn start_on(
        job: &str,
        traces: impl FnOnce(&Path) -> Vec<PathBuf>,
        spec: impl FnOnce(&Path) -> PathBuf,
        flags: &[&str],
    ) -> Cluster {
        let dir = tempfile::tempdir().expect("tempdir");
        let addr = format!("127.0.0.1:{}", free_port());
        let traces = traces(dir.path());
        let log = std::fs::File::create(dir.path().join("controller.log")).expect("log");
        let mut controller = Command::new(env!("CARGO_BIN_EXE_tern"));
        controller
            .arg("controller")
            .arg("--state")
            .arg(dir.path().join("state.db"))
            .args(["--listen", &addr, "--speed", "1", "--sim-boot-seconds", "1"])
            .args(["--period", "0.5"]);
        if !flags.contains(&"--local-agents") {
            controller.arg("--no-simulated-workers");
        }
        for t in &traces {
            controller.arg("--trace").arg(t);
        }
        controller.args(flags);
        let controller = controller
            .env("TERN_TOKEN", TOKEN)
            .env("TERN_DATA", format!("{REPO}/../shared/data"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("controller");
        wait_for(&addr);
        let c = Cluster {
            controller,
            server: format!("http://{addr}"),
            dir,
            job: job.to_string(),
        };
        let spec = spec(c.dir.path());
        let out = c.tern(&["submit", spec.to_str().expect("utf-8")]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        c
    }

    fn tern(&self, args: &[&str]) -> std::process::Output {
        Command::new(env!("CARGO_BIN_EXE_tern"))
            .args(args)
            .args(["--server", &self.server])
            .env("TERN_TOKEN", TOKEN)
            .output()
            .expect("tern")
    }

    fn status(&self) -> serde_json::Value {
        self.status_of(&self.job)
    }

    /// `tern status JOB --json` of any job on this controller.
    fn status_of(&self, job: &str) -> serde_json::Value {
        let out = self.tern(&["status", job, "--json"]);
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let v: serde_json::Value =
            serde_json::from_str(text.lines().last().unwrap_or("{}")).expect("status json");
        v["jobs"][0].clone()
    }

    /// The job's live instances, once the controller launched `n`.
    fn instances(&self, n: usize) -> Vec<String> {
        let until = Instant::now() + Duration::from_secs(30);
        loop {
            let ids = ids_in(&self.status());
            if ids.len() >= n {
                return ids;
            }
            assert!(
                Instant::now() < until,
                "no {n} instances: {}",
                self.status()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// `tern agent` for this job on `instance`, in `workdir`, with the venv on PATH and
    /// `python/` on PYTHONPATH; `args` go before `--`, `command` after.
    fn agent(&self, instance: &str, workdir: &Path, args: &[&str], command: &[&str]) -> Agent {
        self.agent_of(&self.job, instance, workdir, args, command)
    }

    /// As [`Cluster::agent`], for any job on this controller.
    fn agent_of(
        &self,
        job: &str,
        instance: &str,
        workdir: &Path,
        args: &[&str],
        command: &[&str],
    ) -> Agent {
        let log_path = workdir.join(format!("agent-{instance}.log"));
        let log = std::fs::File::create(&log_path).expect("agent log");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tern"));
        // Told the instance, unless it is to read it from the metadata server.
        if !args.contains(&"--metadata-url") {
            cmd.env("TERN_INSTANCE_ID", instance);
        }
        let child = cmd
            .args(["agent", "--job", job, "--server", &self.server])
            .args(args)
            .arg("--")
            .args(command)
            .current_dir(workdir)
            .env("TERN_TOKEN", TOKEN)
            .env("TERN_NOTICE", "none")
            .env("TERN_AGENT_INTERVAL", "0.5")
            .env("PATH", venv_path())
            .env("PYTHONPATH", format!("{REPO}/python:{REPO}/tests/training"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("agent");
        Agent {
            child,
            log: log_path,
        }
    }
}

struct Agent {
    child: Child,
    log: PathBuf,
}

impl Agent {
    fn wait(&mut self, within: Duration) -> ExitStatus {
        let until = Instant::now() + within;
        loop {
            if let Some(s) = self.child.try_wait().expect("wait") {
                return s;
            }
            if Instant::now() >= until {
                let _ = self.child.kill();
                panic!("the agent ran past {within:?}:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Wait until the agent's log shows `text`.
    fn wait_for_log(&self, text: &str, within: Duration) {
        let until = Instant::now() + within;
        while !self.log().contains(text) {
            assert!(
                Instant::now() < until,
                "agent log never showed {text:?}:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The JSON lines `train_ddp.py --log-file` wrote.
fn events(path: &Path) -> Vec<serde_json::Value> {
    let Ok(f) = std::fs::File::open(path) else {
        return Vec::new();
    };
    BufReader::new(f)
        .lines()
        .map_while(Result::ok)
        .filter_map(|l| serde_json::from_str(&l).ok())
        .collect()
}

/// The progress file once the training reported `at_least` samples.
fn wait_for_samples(progress: &Path, at_least: f64, within: Duration, agent: &Agent) {
    let until = Instant::now() + within;
    loop {
        let samples = std::fs::read_to_string(progress)
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .and_then(|v| v["samples"].as_f64())
            .unwrap_or(0.0);
        if samples >= at_least {
            return;
        }
        assert!(
            Instant::now() < until,
            "no {at_least} samples yet:\n{}",
            agent.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn train_ddp() -> String {
    format!("{REPO}/tests/training/train_ddp.py")
}

#[test]
fn a_two_node_elastic_job_loses_a_node_to_a_notice_and_finishes_on_the_other() {
    let _one = serial();
    // The reclaim is 35 ticks of 5 s away: its 120 s notice comes ~55 s after the start,
    // well after the training started even on a busy machine, well before it ends.
    let c = Cluster::start("elastic", 30_000, 35);
    let referee = Referee::watch(&c);
    let ids = c.instances(2);
    let work = c.dir.path();
    let ckpt = work.join("ckpt.pt");
    let log = work.join("train.jsonl");
    let endpoint = format!("127.0.0.1:{}", free_port());
    let run = |id: &str| {
        let progress = work.join(format!("progress-{id}.json"));
        let p = progress.to_str().expect("utf-8").to_string();
        c.agent(
            id,
            work,
            &[
                "--progress-file",
                &p,
                "--nnodes",
                "1:2",
                "--nproc-per-node",
                "1",
                "--rdzv-endpoint",
                &endpoint,
                "--rdzv-conf",
                "last_call_timeout=2",
                "--stop-grace",
                "30",
            ],
            &[
                "python3",
                &train_ddp(),
                "--ckpt",
                ckpt.to_str().expect("utf-8"),
                "--total-samples",
                "30000",
                "--batch",
                "32",
                "--step-sleep",
                "0.15",
                "--checkpoint-every",
                "25",
                "--log-file",
                log.to_str().expect("utf-8"),
            ],
        )
    };
    let mut a = run(&ids[0]);
    let mut b = run(&ids[1]);
    let (leaving, staying) = after_the_notice(&c, &mut a, &mut b, &log);
    // The answers the simulated workers get for the same notice and regroup (`twin_tests`).
    assert_eq!(of_agent_log(&leaving), answers::LEAVING, "{leaving}");
    assert_eq!(of_agent_log(&staying), answers::REGROUPED, "{staying}");
    let saved = events(&log)
        .iter()
        .filter(|e| e["event"] == "checkpoint")
        .filter_map(|e| e["samples"].as_f64())
        .next_back();
    referee.finish(&c, saved);
}

/// The two-node test from the notice on: one agent drains, the other finishes the job. The
/// leaving and the staying agent's logs.
fn after_the_notice(c: &Cluster, a: &mut Agent, b: &mut Agent, log: &Path) -> (String, String) {
    // Which node the cloud reclaims is its choice: the one whose agent drains.
    let until = Instant::now() + Duration::from_secs(150);
    let (leaving, staying) = loop {
        if a.log().contains("drain: sending") {
            break (a, b);
        }
        if b.log().contains("drain: sending") {
            break (b, a);
        }
        assert!(
            Instant::now() < until,
            "no drain:\nA: {}\nB: {}",
            a.log(),
            b.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let status = leaving.wait(Duration::from_secs(60));
    assert!(status.success(), "the leaving agent: {}", leaving.log());
    // The drain's checkpoint is the one the controller recorded, no further.
    let ev = events(log);
    let stop = ev
        .iter()
        .find(|e| e["event"] == "stop")
        .cloned()
        .expect("the drain's stop");
    let saved = ev
        .iter()
        .filter(|e| e["event"] == "checkpoint")
        .filter_map(|e| e["samples"].as_f64())
        .next_back()
        .expect("a checkpoint");
    assert_eq!(stop["samples"].as_f64(), Some(saved), "{ev:?}");
    let s = c.status();
    assert_eq!(s["checkpoint_samples"].as_f64(), Some(saved), "{s}");
    let status = staying.wait(Duration::from_secs(150));
    assert!(status.success(), "the staying agent: {}", staying.log());
    assert_eq!(gone(&c.job, Duration::from_secs(10)), Ok(()));
    assert_eq!(c.status()["state"], "finished", "{}", c.status());
    // The survivor resumed from the drain's checkpoint, at one worker instead of two.
    let ev = events(log);
    let starts: Vec<&serde_json::Value> = ev.iter().filter(|e| e["event"] == "start").collect();
    assert!(starts.iter().any(|e| e["world_size"] == 2), "{ev:?}");
    let resumed = starts
        .iter()
        .find(|e| e["world_size"] == 1)
        .expect("a one-worker start");
    assert_eq!(resumed["resumed_from"].as_f64(), Some(saved), "{ev:?}");
    assert_eq!(resumed["incarnation"], 2, "{ev:?}");
    (leaving.log(), staying.log())
}

/// A fake AWS instance-metadata server (IMDSv2): the instance id `id`, and no notice until
/// `notice` is set.
fn fake_metadata(id: &str, notice: Arc<AtomicBool>) -> String {
    let id = id.to_string();
    common::respond(move |r| {
        let token = r.has_header("x-aws-ec2-metadata-token: tok");
        if r.line.starts_with("PUT /latest/api/token") {
            (200, "tok".to_string())
        } else if !token {
            (401, String::new())
        } else if r.path() == "/latest/meta-data/instance-id" {
            (200, id.clone())
        } else if r.path().ends_with("/spot/instance-action") && notice.load(Ordering::SeqCst) {
            (
                200,
                r#"{"action":"terminate","time":"2026-11-27T00:02:00Z"}"#.into(),
            )
        } else {
            (404, String::new())
        }
    })
}

/// One node, two workers under torchrun (each in a session of its own), on the first
/// instance of a fresh cluster watched by a referee; `extra` agent flags. Returns once the
/// training reported.
fn one_node(job: &str, samples: u64, extra: &[&str]) -> (Cluster, Referee, Agent, PathBuf) {
    let c = Cluster::start(job, samples, 5000);
    let referee = Referee::watch(&c);
    let id = c.instances(1)[0].clone();
    let (agent, progress) = run_on(&c, &id, "train_ddp.py", "2", extra);
    (c, referee, agent, progress)
}

/// `tests/training/SCRIPT` under the agent on `id`, `nproc` workers; returns once the
/// training reported.
fn run_on(c: &Cluster, id: &str, script: &str, nproc: &str, extra: &[&str]) -> (Agent, PathBuf) {
    run_with(c, id, script, nproc, extra, &[])
}

/// As [`run_on`], with `script_args` after the script's own.
fn run_with(
    c: &Cluster,
    id: &str,
    script: &str,
    nproc: &str,
    extra: &[&str],
    script_args: &[&str],
) -> (Agent, PathBuf) {
    let samples = c.status()["total_samples"].as_f64().expect("total") as u64;
    let work = c.dir.path().to_path_buf();
    let progress = work.join("progress.json");
    let p = progress.to_str().expect("utf-8").to_string();
    let ckpt = work.join("ckpt.pt");
    let mut args = vec!["--progress-file", p.as_str(), "--nproc-per-node", nproc];
    args.extend_from_slice(extra);
    let train = format!("{REPO}/tests/training/{script}");
    let samples = samples.to_string();
    let mut command = vec![
        train.as_str(),
        "--ckpt",
        ckpt.to_str().expect("utf-8"),
        "--total-samples",
        &samples,
        "--step-sleep",
        "0.05",
    ];
    command.extend_from_slice(script_args);
    let agent = c.agent(id, &work, &args, &command);
    wait_for_samples(&progress, 1.0, Duration::from_secs(90), &agent);
    (agent, progress)
}

fn checkpoint_in(progress: &Path) -> f64 {
    let text = std::fs::read_to_string(progress).expect("progress file");
    let v: serde_json::Value = serde_json::from_str(&text).expect("json");
    v["checkpoint_samples"]
        .as_f64()
        .expect("checkpoint_samples")
}

fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .expect("kill");
    assert!(ok.success());
}

#[test]
fn every_stop_path_ends_the_whole_tree() {
    let _one = serial();
    // A cloud notice (AWS metadata): checkpoint, stop, report, exit 0.
    // The agent reads its instance id from the metadata server too.
    let c = Cluster::start("by-notice", 30_000, 5000);
    let referee = Referee::watch(&c);
    let id = c.instances(1)[0].clone();
    let noticed = Arc::new(AtomicBool::new(false));
    let url = fake_metadata(&id, noticed.clone());
    let notice = ["--notice", "aws", "--metadata-url", &url];
    let (mut agent, progress) = run_on(&c, &id, "train_ddp.py", "2", &notice);
    assert!(
        training_processes("by-notice").len() >= 3,
        "torchrun and two workers"
    );
    noticed.store(true, Ordering::SeqCst);
    assert!(
        agent.wait(Duration::from_secs(60)).success(),
        "{}",
        agent.log()
    );
    assert_eq!(gone("by-notice", Duration::ZERO), Ok(()), "{}", agent.log());
    let on_disk = checkpoint_in(&progress);
    assert!(on_disk > 0.0, "{}", agent.log());
    referee.finish(&c, Some(on_disk));
    drop(c);

    // A cancel: the next report is refused, the agent stops the training and exits 0.
    let (c, referee, mut agent, progress) = one_node("by-cancel", 30_000, &[]);
    assert!(c.tern(&["cancel", "by-cancel"]).status.success());
    assert!(
        agent.wait(Duration::from_secs(60)).success(),
        "{}",
        agent.log()
    );
    assert_eq!(gone("by-cancel", Duration::ZERO), Ok(()), "{}", agent.log());
    assert_eq!(of_agent_log(&agent.log()), answers::CANCEL);
    referee.finish(&c, Some(checkpoint_in(&progress)));
    drop(c);

    // SIGTERM to the agent: it drains and exits 0. The script speaks the contract without
    // the helper (its own SIGTERM handler and progress file).
    let c = Cluster::start("by-sigterm", 30_000, 5000);
    let referee = Referee::watch(&c);
    let id = c.instances(1)[0].clone();
    let (mut agent, progress) = run_on(&c, &id, "plain_loop.py", "1", &[]);
    signal(agent.child.id(), "-TERM");
    assert!(
        agent.wait(Duration::from_secs(60)).success(),
        "{}",
        agent.log()
    );
    assert_eq!(
        gone("by-sigterm", Duration::ZERO),
        Ok(()),
        "{}",
        agent.log()
    );
    let on_disk = checkpoint_in(&progress);
    assert!(on_disk > 0.0, "{}", agent.log());
    referee.finish(&c, Some(on_disk));
    drop(c);

    // A Lightning job saving on SIGUSR1 (as Lightning's SLURM support does), through
    // torchrun, with the helper's callback; SIGTERM to the agent stops it.
    let c = Cluster::start("by-usr1", 30_000, 5000);
    let referee = Referee::watch(&c);
    let id = c.instances(1)[0].clone();
    let usr1 = ["--checkpoint-signal", "SIGUSR1"];
    let (mut agent, progress) = run_on(&c, &id, "lightning_train.py", "1", &usr1);
    signal(agent.child.id(), "-TERM");
    assert!(
        agent.wait(Duration::from_secs(90)).success(),
        "{}",
        agent.log()
    );
    assert!(agent.log().contains("sending SIGUSR1"), "{}", agent.log());
    assert!(agent.log().contains("durable"), "{}", agent.log());
    assert_eq!(gone("by-usr1", Duration::ZERO), Ok(()), "{}", agent.log());
    let on_disk = checkpoint_in(&progress);
    assert!(on_disk > 0.0, "{}", agent.log());
    referee.finish(&c, Some(on_disk));
    drop(c);

    // SIGKILL to the agent: its watchdog ends the tree (the agent restarted after it is
    // `an_agent_killed_and_restarted_never_trains_beside_its_old_tree`).
    let (c, referee, mut agent, _) = one_node("by-sigkill", 30_000, &["--stop-grace", "5"]);
    signal(agent.child.id(), "-KILL");
    let _ = agent.wait(Duration::from_secs(5));
    assert_eq!(gone("by-sigkill", Duration::from_secs(20)), Ok(()));
    referee.finish(&c, None);
    drop(c);

    // The training ends by itself: the job is done, the agent exits 0.
    let (c, referee, mut agent, progress) = one_node("by-itself", 3_000, &[]);
    assert!(
        agent.wait(Duration::from_secs(120)).success(),
        "{}",
        agent.log()
    );
    assert_eq!(gone("by-itself", Duration::ZERO), Ok(()), "{}", agent.log());
    assert_eq!(c.status()["state"], "finished");
    // The answers the simulated workers get at the job's end (`twin_tests`).
    assert_eq!(
        of_agent_log(&agent.log()),
        answers::JOB_END,
        "{}",
        agent.log()
    );
    referee.finish(&c, Some(checkpoint_in(&progress)));
}

/// The controller's API from the test, as another agent would call it.
fn api(c: &Cluster) -> (tokio::runtime::Runtime, tern::api::client::Client) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let http = tern::http::client().expect("http");
    let client =
        tern::api::client::Client::new(&c.server, Some(TOKEN.into()), http).expect("client");
    (rt, client)
}

/// The pids of `job`'s processes started as incarnation `k`.
fn of_incarnation(job: &str, k: u64) -> Vec<i32> {
    let mark = format!("TERN_INCARNATION={k}");
    training_processes(job)
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .unwrap_or_default()
                .split(|b| *b == 0)
                .any(|kv| kv == mark.as_bytes())
        })
        .collect()
}

#[test]
fn a_stale_incarnation_is_refused_and_its_workers_killed() {
    let _one = serial();
    // Two incarnations overlap here on purpose (a stale one, refused): no referee's verdict.
    let (c, _referee, mut agent, _) = one_node("stale", 30_000, &[]);
    assert!(!of_incarnation("stale", 1).is_empty());
    let id = c.instances(1)[0].clone();
    let before = c.status()["checkpoint_samples"].as_f64();
    let (rt, api) = api(&c);
    // Another start on the same instance (an agent restarted beside a paused one): a new
    // incarnation opens, and incarnation 1 is stale from now on.
    let started = rt.block_on(api.start("stale", &id, None)).expect("start");
    assert_eq!(started.incarnation, 2);
    let stale = tern::api::wire::Progress {
        done_samples: 29_000.0,
        checkpoint_samples: 29_000.0,
        checkpointed: true,
        observation: None,
        incarnation: Some(1),
        instance: Some(id.clone()),
        stopped: false,
        failure: None,
        hung: false,
        crashed: false,
    };
    let err = rt
        .block_on(api.progress("stale", &stale))
        .expect_err("stale");
    assert_eq!(err.status(), Some(409), "{err}");
    assert_eq!(err.action(), Some(tern::api::wire::Action::Stop), "{err}");
    assert!(err.to_string().contains("stale"), "{err}");
    assert_eq!(
        c.status()["checkpoint_samples"].as_f64(),
        before,
        "moved nothing"
    );
    // The running agent's next report is refused the same way: it kills its workers at
    // once and starts again as a newer incarnation.
    agent.wait_for_log("killing the workers now", Duration::from_secs(20));
    let until = Instant::now() + Duration::from_secs(15);
    while !of_incarnation("stale", 1).is_empty() {
        assert!(Instant::now() < until, "{}", agent.log());
        std::thread::sleep(Duration::from_millis(100));
    }
    agent.wait_for_log("incarnation 3 on", Duration::from_secs(20));
    assert!(c.tern(&["cancel", "stale"]).status.success());
    assert!(
        agent.wait(Duration::from_secs(60)).success(),
        "{}",
        agent.log()
    );
    assert_eq!(gone("stale", Duration::ZERO), Ok(()));
}

#[test]
fn a_command_that_cannot_start_fails_the_job_within_a_minute_and_says_why() {
    let _one = serial();
    let c = Cluster::start("broken", 3_000, 5000);
    let id = c.instances(1)[0].clone();
    let work = c.dir.path().to_path_buf();
    let t0 = Instant::now();
    let mut agent = c.agent(
        &id,
        &work,
        &["--progress-file", "progress.json", "--max-restarts", "2"],
        &["python3", "no_such_script.py", "--epochs", "3"],
    );
    let status = agent.wait(Duration::from_secs(60));
    assert!(!status.success(), "{}", agent.log());
    assert!(t0.elapsed() < Duration::from_secs(60));
    let log = agent.log();
    assert_eq!(log.matches("starting python3").count(), 3, "{log}");
    let s = c.status();
    assert_eq!(s["state"], "failed", "{s}");
    let reason = s["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("exit status"), "{reason}");
    assert!(reason.contains("no_such_script.py"), "{reason}");
    assert_eq!(gone("broken", Duration::ZERO), Ok(()));
}

/// The fenced block after `marker` in the README.
fn readme_block(marker: &str) -> String {
    let readme = std::fs::read_to_string(format!("{REPO}/README.md")).expect("README");
    let at = readme
        .find(marker)
        .unwrap_or_else(|| panic!("README has no {marker}"));
    let rest = &readme[at..];
    let open = rest.find("```").expect("a fenced block");
    let body = &rest[open..];
    let body = &body[body.find('\n').expect("fence line") + 1..];
    body[..body.find("```").expect("closing fence")].to_string()
}

#[test]
fn the_readme_agent_examples_run_verbatim() {
    let _one = serial();
    let train = readme_block("<!-- readme-test: train.py -->");
    let commands: Vec<String> = readme_block("<!-- readme-test: agent -->")
        .lines()
        .filter(|l| l.starts_with("tern agent "))
        .map(String::from)
        .collect();
    assert_eq!(commands.len(), 5, "{commands:?}");
    for command in commands {
        let job = command
            .split_whitespace()
            .skip_while(|w| *w != "--job")
            .nth(1)
            .expect("--job NAME");
        let samples: u64 = command
            .split_whitespace()
            .last()
            .and_then(|w| w.parse().ok())
            .expect("the example ends with its sample count");
        let c = Cluster::start(job, samples, 5000);
        let id = c.instances(1)[0].clone();
        let work = c.dir.path();
        std::fs::write(work.join("train.py"), &train).expect("train.py");
        // `tern` on PATH is the binary under test.
        let bin = Path::new(env!("CARGO_BIN_EXE_tern"))
            .parent()
            .expect("bin dir")
            .display()
            .to_string();
        let out = Command::new("sh")
            .arg("-c")
            .arg(&command)
            .current_dir(work)
            .env("TERN_SERVER", &c.server)
            .env("TERN_TOKEN", TOKEN)
            .env("TERN_INSTANCE_ID", &id)
            .env("TERN_NOTICE", "none")
            .env("TERN_AGENT_INTERVAL", "0.5")
            .env("PATH", format!("{bin}:{}", venv_path()))
            .env("PYTHONPATH", format!("{REPO}/python"))
            .output()
            .expect("sh");
        let log = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{command}:\n{log}");
        let s = c.status();
        assert_eq!(s["state"], "finished", "{command}: {s}\n{log}");
        assert_eq!(s["done_samples"].as_f64(), Some(samples as f64), "{s}");
        assert_eq!(gone(job, Duration::ZERO), Ok(()), "{command}");
    }
}

#[test]
fn the_python_helper_and_its_lightning_callback_pass_their_tests() {
    let _one = serial();
    let out = Command::new(python())
        .args(["-m", "unittest", "discover", "-s", "tests"])
        .current_dir(format!("{REPO}/python"))
        .output()
        .expect("python");
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("\nOK"), "{text}");
    assert!(!text.contains("skipped"), "Lightning must be there: {text}");
}

/// A job nobody has measured: no observation, no profile, no hint.
fn cold_spec(dir: &Path, name: &str, samples: u64) -> PathBuf {
    write_spec(
        dir,
        name,
        "1",
        "",
        samples,
        "[probe]\nmax_duration = \"3m\"\n",
    )
}

/// The controller's events of the cluster's job, as (kind, message).
fn job_events(c: &Cluster) -> Vec<(String, String)> {
    let (rt, client) = api(c);
    rt.block_on(client.events(0, Some(&c.job)))
        .expect("events")
        .into_iter()
        .map(|e| (e.kind, e.message))
        .collect()
}

#[test]
fn a_cold_start_job_probes_is_measured_by_its_real_steps_and_planned() {
    let _one = serial();
    let job = "cold";
    let c = Cluster::start_with(job, 5000, |dir| cold_spec(dir, job, 6000));
    let id = c.instances(1)[0].clone();
    assert!(
        job_events(&c).iter().any(|(k, _)| k == "probe"),
        "{:?}",
        job_events(&c)
    );
    let before = c.status()["forecast"].clone();
    assert_eq!(before["basis"], "none", "{before}");

    let work = c.dir.path().to_path_buf();
    let progress = work.join("progress.json");
    let steps = work.join("steps.jsonl");
    let ckpt = work.join("ckpt.pt");
    let train = format!("{REPO}/tests/training/train_ddp.py");
    let p = progress.to_str().expect("utf-8");
    let mut agent = c.agent(
        &id,
        &work,
        &["--progress-file", p, "--nproc-per-node", "1"],
        &[
            &train,
            "--ckpt",
            ckpt.to_str().expect("utf-8"),
            "--total-samples",
            "6000",
            "--step-sleep",
            "0.05",
            "--log-file",
            steps.to_str().expect("utf-8"),
            "--log-steps",
        ],
    );
    // Measured within a minute of real steps.
    let until = Instant::now() + Duration::from_secs(90);
    let measured = loop {
        let f = c.status()["forecast"].clone();
        if f["basis"] == "measured" {
            break f;
        }
        assert!(
            Instant::now() < until,
            "never measured: {f}\n{}",
            agent.log()
        );
        std::thread::sleep(Duration::from_millis(300));
    };
    // Within 10 % of the mean of the steps it ran (the first two warm up, untimed by the
    // helper too).
    let ran: Vec<f64> = events(&steps)
        .iter()
        .filter(|e| e["event"] == "step")
        .filter_map(|e| e["seconds"].as_f64())
        .skip(2)
        .collect();
    assert!(!ran.is_empty(), "no steps logged");
    let mean = ran.iter().sum::<f64>() / ran.len() as f64;
    let step = measured["step_seconds"].as_f64().expect("step_seconds");
    eprintln!(
        "cold start: forecast {step:.4} s/step on {} after {} report(s); the {} steps so far \
         averaged {mean:.4} s",
        measured["accelerator"],
        measured["observations"],
        ran.len()
    );
    assert!(
        (step - mean).abs() / mean <= 0.10,
        "forecast {step} s vs mean {mean} s"
    );
    // The probe ends and the plan takes over on what was measured.
    let until = Instant::now() + Duration::from_secs(60);
    while !job_events(&c).iter().any(|(k, _)| k == "probed") {
        assert!(Instant::now() < until, "{:?}", job_events(&c));
        std::thread::sleep(Duration::from_millis(300));
    }
    let ev = job_events(&c);
    let probed = ev.iter().find(|(k, _)| k == "probed").expect("probed");
    assert!(probed.1.contains("measured"), "{probed:?}");
    assert!(
        ev.iter()
            .any(|(k, m)| k == "basis" && m.contains("none → measured")),
        "{ev:?}"
    );
    assert!(
        agent.wait(Duration::from_secs(120)).success(),
        "{}",
        agent.log()
    );
    let until = Instant::now() + Duration::from_secs(30);
    while c.status()["state"] != "finished" {
        assert!(Instant::now() < until, "{}", c.status());
        std::thread::sleep(Duration::from_millis(300));
    }
}
