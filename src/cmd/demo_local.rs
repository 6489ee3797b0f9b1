//! `tern demo --local-agents`: a real training through a real reclaim, on this machine. A
//! `tern controller --local-agents` runs on the bundled real spot traces from just before one
//! of their reclaims; the demo submits a job whose `[run]` is the small training shipped in
//! `examples/train/train.py` (PyTorch on the CPU when the interpreter has it, plain Python
//! otherwise), prints the controller's decisions and the training's own events as they come,
//! then the job's cost report, stops the controller and checks that nothing is left running.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde::Serialize;
use tern::api::client::Client;
use tern::report::CostQuery;

/// The training `tern demo --local-agents` runs, embedded so the demo runs from anywhere.
const TRAIN_PY: &str = include_str!("../../examples/train/train.py");
/// The demo job's name.
const JOB: &str = "demo-train";
/// The job's work: about 100 s of 0.1-s steps of 32 samples.
const SAMPLES: u64 = 32_000;

/// What `tern demo --local-agents` takes (beside `--json` and `--state`, shared with the
/// simulated demo).
#[derive(Debug, clap::Args)]
pub struct LocalArgs {
    /// With --local-agents: the Python that runs the training (default: the test venv
    /// `scripts/setup --test` makes, when it has PyTorch; else `python3`).
    #[arg(long, value_name = "PATH", requires = "local_agents")]
    python: Option<PathBuf>,
    /// With --local-agents: where in the traces the controller starts (seconds or `94h`).
    /// The default is 160 s before tick 1132 of the bundled us-east-2b trace, where its 16
    /// instances go to none while us-west-2c keeps room.
    #[arg(long, value_name = "DURATION", default_value = "339440", value_parser = super::number::duration, requires = "local_agents")]
    trace_from: f64,
    /// With --local-agents: give up after this long (seconds or `10m`).
    #[arg(long, default_value = "10m", value_parser = super::number::duration, requires = "local_agents")]
    within: f64,
    /// With --local-agents: keep the demo's files here (default: a temporary folder, removed
    /// at the end).
    #[arg(long, value_name = "DIR", requires = "local_agents")]
    folder: Option<PathBuf>,
}

/// The summary `--json` prints as its last line.
#[derive(Debug, Serialize)]
struct LocalSummary {
    job: String,
    state: String,
    /// Where the demo's files are: the controller's state and log, the hosts' folders, the
    /// training's checkpoint and log.
    folder: PathBuf,
    /// `true` when the training ran with PyTorch.
    torch: bool,
    /// Each start of the training: its incarnation and the samples it resumed from.
    starts: Vec<(String, u64)>,
    /// The controller's decisions, by kind, in order.
    decisions: Vec<String>,
    instances: usize,
    cost_usd: f64,
    on_demand_usd: f64,
    /// Processes of the demo's hosts still alive after the controller stopped (0).
    processes_left: usize,
}

pub fn run(args: &LocalArgs, traces: &[PathBuf], json: bool) -> anyhow::Result<()> {
    let (temp, folder) = match &args.folder {
        Some(f) => {
            std::fs::create_dir_all(f).with_context(|| format!("creating {}", f.display()))?;
            (None, f.canonicalize()?)
        }
        None => {
            let t = tern::scratch::TempDir::new("tern-demo-local")?;
            let p = t.path().to_path_buf();
            (Some(t), p)
        }
    };
    let python = args.python.clone().unwrap_or_else(default_python);
    let spec = write_job(&folder, &python)?;
    let token = format!("demo-{}", uuid::Uuid::new_v4().simple());
    let port = free_port()?;
    let server = format!("http://127.0.0.1:{port}");
    let mut controller = start_controller(&folder, port, &token, args.trace_from, traces)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let watched = runtime.block_on(watch(&server, &token, &spec, &folder, args.within, json));
    stop(&mut controller)?;
    let left = hosts_left(&folder);
    let mut summary = watched?;
    summary.processes_left = left;
    if json {
        println!("{}", serde_json::to_string(&summary)?);
    } else {
        let files = match &temp {
            Some(_) => "its files go with the temporary folder (--folder DIR keeps them)".into(),
            None => format!("its files are in {}", folder.display()),
        };
        say!("\nstopped the controller: {left} process(es) of its hosts left; {files}");
    }
    if left > 0 {
        bail!("{left} process(es) of the demo's hosts outlived the controller");
    }
    Ok(())
}

/// The test venv's Python when it has PyTorch, else `python3`.
fn default_python() -> PathBuf {
    let venv = std::env::var_os("TERN_TEST_VENV").map_or_else(
        || {
            dirs::home_dir()
                .unwrap_or_default()
                .join(".cache/tern/torch-venv")
        },
        PathBuf::from,
    );
    let py = venv.join("bin/python");
    let has_torch = Command::new(&py)
        .args(["-c", "import torch"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if has_torch { py } else { "python3".into() }
}

/// The training script and the job spec that runs it, in `folder`; the spec's path.
fn write_job(folder: &Path, python: &Path) -> anyhow::Result<PathBuf> {
    let script = folder.join("train.py");
    std::fs::write(&script, TRAIN_PY)?;
    let command = serde_json::json!([
        python,
        script,
        "--samples",
        SAMPLES.to_string(),
        "--checkpoint",
        folder.join("checkpoint.json"),
        "--log",
        folder.join("train.log"),
    ]);
    let spec = format!(
        "# tern demo --local-agents: examples/train/train.py, about 100 s of work\n\
         name = \"{JOB}\"\nteam = \"research\"\naccelerators = [\"V100\"]\nworkers = 1\n\
         local_batch = 32\ndeadline = \"2h\"\n\n[work]\nsamples = {SAMPLES}\n\n\
         [[observation]]\naccelerator = \"V100\"\ngpus = 1\nlocal_batch = 32\n\
         step_seconds = 0.1\n\n[run]\ncommand = {command}\nlauncher = \"none\"\n"
    );
    let path = folder.join(format!("{JOB}.toml"));
    std::fs::write(&path, spec)?;
    Ok(path)
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// `tern controller --local-agents` on the default traces from `trace_from`, its log in
/// `folder/controller.log`.
fn start_controller(
    folder: &Path,
    port: u16,
    token: &str,
    trace_from: f64,
    traces: &[PathBuf],
) -> anyhow::Result<Child> {
    let log = std::fs::File::create(folder.join("controller.log"))?;
    let mut cmd = Command::new(std::env::current_exe()?);
    cmd.arg("controller")
        .arg("--local-agents")
        .arg("--state")
        .arg(folder.join("controller.db"))
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--trace-from", &trace_from.to_string()])
        .args(["--sim-boot-seconds", "10", "--period", "0.5"]);
    for t in traces {
        cmd.arg("--trace").arg(t);
    }
    cmd.env("TERN_TOKEN", token)
        .env("TERN_AGENT_INTERVAL", "1")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .context("starting `tern controller --local-agents`")
}

/// SIGTERM to the controller (it stops its agents first) and its exit.
fn stop(controller: &mut Child) -> anyhow::Result<()> {
    if let Some(pid) = rustix::process::Pid::from_raw(controller.id() as i32) {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
    }
    let until = Instant::now() + Duration::from_secs(60);
    while controller.try_wait()?.is_none() {
        if Instant::now() >= until {
            let _ = controller.kill();
            bail!("the controller did not stop within 60 s of SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}

/// The demo's hosts' processes still alive.
fn hosts_left(folder: &Path) -> usize {
    tern::sim::hosts::processes_in(&folder.join("controller.db.hosts")).len()
}

/// The training's own events (`--log`), in order.
fn train_events(folder: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(folder.join("train.log"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// One event of the training, as the demo prints it (checkpoints are left out: many).
fn describe(e: &serde_json::Value) -> Option<String> {
    let inc = e["incarnation"].as_str().unwrap_or("?");
    let samples = e["samples"].as_u64().unwrap_or(0);
    match e["event"].as_str()? {
        "start" => Some(format!(
            "training started (incarnation {inc}, {}) from {} samples",
            if e["torch"] == true {
                "PyTorch"
            } else {
                "plain Python"
            },
            e["resumed_from"].as_u64().unwrap_or(0)
        )),
        "stop" => Some(format!(
            "training stopped as asked, checkpoint at {samples} samples"
        )),
        "done" => Some(format!("training done: {samples} samples")),
        _ => None,
    }
}

/// Submit the job, print what happens until it ends, then its cost report.
async fn watch(
    server: &str,
    token: &str,
    spec: &Path,
    folder: &Path,
    within: f64,
    json: bool,
) -> anyhow::Result<LocalSummary> {
    let client = Client::new(
        server,
        Some(token.into()),
        tern::http::client_with_ca(None)?,
    )?;
    let started = Instant::now();
    while let Err(e) = client.jobs().await {
        if started.elapsed() > Duration::from_secs(30) {
            return Err(e).context(format!(
                "the controller never answered (see {})",
                folder.join("controller.log").display()
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    client.submit(&std::fs::read_to_string(spec)?).await?;
    let say = |line: String| {
        if !json {
            say!("{:>5.0} s  {line}", started.elapsed().as_secs_f64());
        }
    };
    say(format!(
        "submitted {JOB} ({}); the controller starts a real `tern agent` per instance",
        spec.display()
    ));
    let (mut decisions, mut events) = (Vec::new(), 0);
    let until = started + Duration::from_secs_f64(within);
    let state = loop {
        let timeline = client.decisions(JOB).await?;
        for d in timeline.decisions.iter().skip(decisions.len()) {
            say(format!("{:<8} {}", d.kind, d.reason));
        }
        decisions = timeline.decisions;
        let seen = train_events(folder);
        for line in seen.iter().skip(events).filter_map(describe) {
            say(line);
        }
        events = seen.len();
        let status = client.job(JOB).await?;
        if ["finished", "failed", "cancelled", "over-budget"].contains(&status.state.as_str()) {
            break status.state;
        }
        if Instant::now() >= until {
            bail!(
                "{JOB} did not end within {within} s (see {})",
                folder.display()
            );
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    let query = CostQuery {
        job: Some(JOB.into()),
        ..CostQuery::default()
    };
    let report = client.costs(&query).await?;
    if !json {
        say!("\n{}", tern::report::render::table_text(&report));
    }
    let seen = train_events(folder);
    let starts = seen
        .iter()
        .filter(|e| e["event"] == "start")
        .map(|e| {
            let inc = e["incarnation"].as_str().unwrap_or_default().to_string();
            (inc, e["resumed_from"].as_u64().unwrap_or(0))
        })
        .collect();
    Ok(LocalSummary {
        job: JOB.into(),
        state,
        folder: folder.to_path_buf(),
        torch: seen.iter().any(|e| e["torch"] == true),
        starts,
        decisions: decisions.into_iter().map(|d| d.kind).collect(),
        instances: report.total.instances,
        cost_usd: report.total.cost,
        on_demand_usd: report.total.on_demand_cost,
        processes_left: 0,
    })
}
