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

/// A cold start measured by its real steps.
#[path = "agent_training/cold.rs"]
mod cold;
mod common;
/// The README's agent examples and the Python helper's own tests.
#[path = "agent_training/docs.rs"]
mod docs;
/// A two-node elastic job that loses a node to a notice.
#[path = "agent_training/elastic.rs"]
mod elastic;
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
/// Every stop path ends the whole tree; stale incarnations; a command that cannot start.
#[path = "agent_training/tree.rs"]
mod tree;

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

/// The controller's events of the cluster's job, as (kind, message).
fn job_events(c: &Cluster) -> Vec<(String, String)> {
    let (rt, client) = api(c);
    rt.block_on(client.events(0, Some(&c.job)))
        .expect("events")
        .into_iter()
        .map(|e| (e.kind, e.message))
        .collect()
}
