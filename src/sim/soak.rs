//! The fault-injection soak behind `tern bench soak`: the real binary's controller against a
//! `tern sim serve` process whose spot capacity flaps, with 10 % of calls throttled, 2 %
//! failing transiently and a fifth of reclaim notices lost and another fifth late. Meanwhile
//! the controller is SIGKILLed and restarted at seeded moments and one "agent" posts garbage
//! progress reports. At the end it counts what must be zero: deadlines missed that on-demand
//! could have met, orphaned instances, duplicate launches, progress lost beyond a checkpoint,
//! launches beyond the budget, garbage accepted and server errors.

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde::Serialize;
use tern_policies::capacity::launch_budget;

use crate::api::client::Client;
use crate::store::Store;

/// What the soak runs.
#[derive(Debug, Clone)]
pub struct SoakConfig {
    /// The `tern` binary whose `sim serve` and `controller` are soaked.
    pub tern: PathBuf,
    /// Wall-clock budget (the run ends earlier once every job is done).
    pub seconds: u64,
    /// Seeds the traces, the cloud's faults, the kill times and the garbage.
    pub seed: u64,
    /// Virtual seconds per wall second.
    pub speed: f64,
}

/// The figures the soak prints; every `*_violations`-like count must be zero.
#[derive(Debug, Clone, Serialize)]
pub struct SoakReport {
    pub wall_seconds: f64,
    pub kills: u32,
    pub jobs: usize,
    /// Jobs that on-demand could finish before their deadline (by construction).
    pub feasible_jobs: usize,
    pub feasible_met_deadline: usize,
    pub orphaned_instances: usize,
    pub duplicate_launches: usize,
    pub launched_instances: usize,
    /// Samples a job's reported progress fell below a checkpoint it had reported.
    pub samples_lost_beyond_checkpoint: f64,
    /// Largest (launches in any hour) ÷ (the job's launch budget), over jobs.
    pub worst_launch_hour_vs_budget: f64,
    pub jobs_over_launch_budget: usize,
    pub garbage_sent: u32,
    pub garbage_refused: u32,
    pub garbage_accepted: u32,
    pub server_errors: u32,
    pub job_states: BTreeMap<String, String>,
}

#[derive(Debug, thiserror::Error)]
pub enum SoakError {
    #[error("soak set-up: {0}")]
    Setup(String),
}

fn setup(what: &str) -> impl Fn(std::io::Error) -> SoakError + '_ {
    move |e| SoakError::Setup(format!("{what}: {e}"))
}

const TOKEN: &str = "soak-token";
const OWNER: &str = "tern";

/// Jobs on V100s: three that on-demand finishes in ~4.3 h against a 30 h deadline, and one
/// that needs ~430 h against 10 h (it must be refused or reported, never chased).
fn jobs() -> Vec<(&'static str, bool, String)> {
    let spec = |name: &str, workers: &str, gang: bool, samples: u64, deadline: &str| {
        format!(
            "name = \"{name}\"\nteam = \"soak\"\naccelerators = [\"V100\"]\nworkers = {workers}\n\
             gang = {gang}\ndeadline = \"{deadline}\"\nlocal_batch = 64\n[work]\nsamples = {samples}\n\
             [checkpoint]\ninterval = \"10m\"\nsize_gb = 1\nsave_seconds = 10\nrestore_seconds = 20\n\
             [[observation]]\naccelerator = \"V100\"\ngpus = 1\nlocal_batch = 64\nstep_seconds = 0.2\n"
        )
    };
    vec![
        ("gang", true, spec("gang", "4", true, 20_000_000, "30h")),
        (
            "elastic",
            true,
            spec("elastic", "{ min = 2, max = 4 }", false, 20_000_000, "30h"),
        ),
        ("single", true, spec("single", "1", false, 5_000_000, "30h")),
        (
            "hopeless",
            false,
            spec("hopeless", "1", false, 500_000_000, "10h"),
        ),
    ]
}

/// Seeded xorshift64.
#[derive(Debug)]
struct Draw(u64);

impl Draw {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// A trace whose capacity is 0 or 8 at random on every 10-minute tick.
fn write_flapping_trace(path: &Path, zone: &str, draw: &mut Draw) -> Result<(), SoakError> {
    let data: Vec<u32> = (0..2000).map(|_| 8 * (draw.next() % 2) as u32).collect();
    let json = serde_json::json!({
        "metadata": {"gap_seconds": 600, "zone": zone, "region": "us-west-2", "cloud": "aws"},
        "data": data,
    });
    std::fs::write(path, json.to_string()).map_err(setup("writing a trace"))
}

fn free_addr() -> Result<SocketAddr, SoakError> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(setup("finding a free port"))?;
    l.local_addr().map_err(setup("finding a free port"))
}

fn wait_listening(addr: SocketAddr, child: &mut Child) -> Result<(), SoakError> {
    let t0 = Instant::now();
    while TcpStream::connect(addr).is_err() {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(SoakError::Setup(format!("{addr}: exited with {status}")));
        }
        if t0.elapsed() > Duration::from_secs(30) {
            return Err(SoakError::Setup(format!("{addr} did not come up in 30 s")));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// Children killed when the soak ends, however it ends.
struct Children(Vec<Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

struct Run {
    config: SoakConfig,
    dir: PathBuf,
    sim_url: String,
    api: SocketAddr,
}

impl Run {
    fn controller(&self) -> Result<Child, SoakError> {
        Command::new(&self.config.tern)
            .args([
                "controller",
                "--sim-endpoint",
                &self.sim_url,
                "--period",
                "0.05",
            ])
            .arg("--listen")
            .arg(self.api.to_string())
            .arg("--state")
            .arg(self.dir.join("state.db"))
            .args(["--id", "soak", "--owner", OWNER])
            .env("TERN_TOKEN", TOKEN)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(setup("starting the controller"))
    }
}

/// Run the soak. Blocking; its HTTP calls run on a runtime of their own.
pub fn run(config: SoakConfig) -> Result<SoakReport, SoakError> {
    let started = Instant::now();
    let dir =
        std::env::temp_dir().join(format!("tern-soak-{}-{}", std::process::id(), config.seed));
    std::fs::create_dir_all(&dir).map_err(setup("creating the soak folder"))?;
    let result = soak_in(&config, &dir, started);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn soak_in(config: &SoakConfig, dir: &Path, started: Instant) -> Result<SoakReport, SoakError> {
    let mut draw = Draw(config.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let traces = [dir.join("us-west-2a.json"), dir.join("us-west-2b.json")];
    write_flapping_trace(&traces[0], "us-west-2a", &mut draw)?;
    write_flapping_trace(&traces[1], "us-west-2b", &mut draw)?;
    let sim_addr = free_addr()?;
    let mut sim = Command::new(&config.tern);
    sim.args(["sim", "serve", "--listen", &sim_addr.to_string()])
        .args(["--speed", &config.speed.to_string()])
        .args(["--seed", &config.seed.to_string()])
        .args(["--throttle", "0.1", "--transient", "0.02"])
        .args(["--lost-notices", "0.2", "--late-notices", "0.2"]);
    for t in &traces {
        sim.arg("--trace").arg(t);
    }
    let mut children = Children(vec![
        sim.stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(setup("starting tern sim serve"))?,
    ]);
    wait_listening(sim_addr, &mut children.0[0])?;
    let run = Run {
        config: config.clone(),
        dir: dir.to_path_buf(),
        sim_url: format!("http://{sim_addr}"),
        api: free_addr()?,
    };
    children.0.push(run.controller()?);
    wait_listening(run.api, &mut children.0[1])?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(setup("starting a runtime"))?;
    let mut report = runtime.block_on(drive(&run, &mut children, &mut draw, started))?;
    // The controller is gone for good: judge the cloud against what its store says.
    children.0[1].kill().ok();
    children.0[1].wait().ok();
    runtime.block_on(judge(&run, &mut report))?;
    report.wall_seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

/// Submit the jobs, then kill and restart the controller, send garbage and watch progress
/// until every job is done and the cloud is empty, or the time is up.
async fn drive(
    run: &Run,
    children: &mut Children,
    draw: &mut Draw,
    started: Instant,
) -> Result<SoakReport, SoakError> {
    let http = crate::http::client().map_err(|e| SoakError::Setup(e.to_string()))?;
    let base = format!("http://{}", run.api);
    let client = Client::new(&base, Some(TOKEN.to_string()), http.clone())
        .map_err(|e| SoakError::Setup(e.to_string()))?;
    let specs = jobs();
    for (name, _, spec) in &specs {
        // The hopeless job may be refused at once; that is an answer too.
        if let Err(e) = client.submit(spec).await
            && e.status() != Some(422)
        {
            return Err(SoakError::Setup(format!("submitting {name}: {e}")));
        }
    }
    let mut report = SoakReport {
        wall_seconds: 0.0,
        kills: 0,
        jobs: specs.len(),
        feasible_jobs: specs.iter().filter(|s| s.1).count(),
        feasible_met_deadline: 0,
        orphaned_instances: 0,
        duplicate_launches: 0,
        launched_instances: 0,
        samples_lost_beyond_checkpoint: 0.0,
        worst_launch_hour_vs_budget: 0.0,
        jobs_over_launch_budget: 0,
        garbage_sent: 0,
        garbage_refused: 0,
        garbage_accepted: 0,
        server_errors: 0,
        job_states: BTreeMap::new(),
    };
    let deadline = started + Duration::from_secs(run.config.seconds);
    let mut next_kill = Instant::now() + Duration::from_millis(4000 + draw.next() % 6000);
    let mut floor: BTreeMap<String, f64> = BTreeMap::new();
    while Instant::now() < deadline {
        if Instant::now() >= next_kill {
            children.0[1].kill().ok();
            children.0[1].wait().ok();
            report.kills += 1;
            children.0[1] = run.controller()?;
            wait_listening(run.api, &mut children.0[1])?;
            next_kill = Instant::now() + Duration::from_millis(4000 + draw.next() % 6000);
        }
        send_garbage(&http, &base, draw, &mut report).await;
        let Ok(jobs) = client.jobs().await else {
            continue;
        };
        for j in &jobs {
            let f = floor.entry(j.name.clone()).or_insert(0.0);
            report.samples_lost_beyond_checkpoint += (*f - j.done_samples).max(0.0);
            *f = f.max(j.checkpoint_samples);
            report.job_states.insert(j.name.clone(), j.state.clone());
        }
        let settled = |s: &str| matches!(s, "finished" | "unplaceable" | "cancelled");
        if jobs.len() + 1 >= specs.len() && jobs.iter().all(|j| settled(&j.state)) {
            let sim = super::RemoteSim::new(run.sim_url.clone(), http.clone());
            if sim
                .report(OWNER)
                .await
                .is_ok_and(|r| r.running_instances == 0)
            {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(report)
}

/// One garbage progress report for the `single` job: each must be refused with a 4xx.
async fn send_garbage(http: &reqwest::Client, base: &str, draw: &mut Draw, r: &mut SoakReport) {
    let bodies: [&[u8]; 6] = [
        b"not json at all",
        b"{\"done_samples\": -1, \"checkpoint_samples\": 0}",
        b"{\"done_samples\": 1e300, \"checkpoint_samples\": 0}",
        b"{\"done_samples\": 10, \"checkpoint_samples\": 5, \"observation\": {\"job\": \"single\", \
          \"accelerator\": \"V100\", \"gpus\": 0, \"nodes\": 1, \"local_batch\": 64, \
          \"step_seconds\": 0.2, \"sync_seconds\": null, \"at\": \"2026-01-01T00:00:00Z\"}}",
        b"{\"done_samples\": \"\xff\xfe\", \"checkpoint_samples\": 0}",
        b"{\"done_samples\": 10, \"checkpoint_samples\": 99999999999}",
    ];
    let body = bodies[(draw.next() % bodies.len() as u64) as usize].to_vec();
    r.garbage_sent += 1;
    let answer = http
        .post(format!("{base}/v1/jobs/single/progress"))
        .bearer_auth(TOKEN)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await;
    match answer.map(|a| a.status().as_u16()) {
        Ok(s) if (400..500).contains(&s) => r.garbage_refused += 1,
        Ok(s) if s >= 500 => r.server_errors += 1,
        Ok(_) => r.garbage_accepted += 1,
        // The controller was being restarted: nobody answered.
        Err(_) => r.garbage_sent -= 1,
    }
}

/// Count orphans and duplicate launches, deadlines met and the launch budget, from the
/// simulated cloud's ledger and the controller's store.
async fn judge(run: &Run, r: &mut SoakReport) -> Result<(), SoakError> {
    let http = crate::http::client().map_err(|e| SoakError::Setup(e.to_string()))?;
    let sim = super::RemoteSim::new(run.sim_url.clone(), http);
    let ledger = sim
        .report(OWNER)
        .await
        .map_err(|e| SoakError::Setup(format!("the simulated cloud's report: {e}")))?;
    let store = Store::read_only(&crate::store::StoreUrl::Sqlite(run.dir.join("state.db")))
        .map_err(|e| SoakError::Setup(format!("reading the state store: {e}")))?;
    let snapshot = store
        .load()
        .map_err(|e| SoakError::Setup(format!("reading the state store: {e}")))?;
    r.orphaned_instances = super::server::orphans(&ledger, &snapshot);
    r.duplicate_launches = ledger.duplicate_launches;
    r.launched_instances = ledger.launched_instances;
    let usage = store
        .usage()
        .map_err(|e| SoakError::Setup(format!("reading usage: {e}")))?;
    for (name, feasible, _) in jobs() {
        let Ok(Some(job)) = store.job(name) else {
            continue;
        };
        let met = job.finished_at.is_some()
            && matches!((job.finished_at, job.deadline_at), (Some(f), Some(d)) if f <= d);
        if feasible && met {
            r.feasible_met_deadline += 1;
        }
        let worst = f64::from(crate::store::most_started_in_an_hour(&usage, name));
        let ratio = worst / f64::from(launch_budget(job.spec.workers.max));
        r.worst_launch_hour_vs_budget = r.worst_launch_hour_vs_budget.max(ratio);
        if ratio > 1.0 {
            r.jobs_over_launch_budget += 1;
        }
    }
    Ok(())
}
