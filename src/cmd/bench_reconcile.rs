//! `tern bench reconcile`: CPU time of one reconcile pass over N jobs and M instances on the
//! simulated cloud (target: ≤ 100 ms for 1,000 jobs / 10,000 instances).
//!
//! Setup (not measured): N elastic V100 jobs of M/N workers each are submitted and placed, and
//! the fleet boots. Measured: steady-state passes, where the controller takes notices, lists
//! and diffs the whole fleet, checks open intents and every job. CPU time is the main thread's
//! on-CPU time from `/proc/thread-self/schedstat` (the runtime is single-threaded), so other
//! processes on the machine do not inflate it.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context;
use async_trait::async_trait;
use chrono::{TimeZone, Utc};
use tern_cloud::{
    Cloud, Instance, InstanceId, Interruption, LaunchOutcome, LaunchRequest, Offer, Provider,
    ProviderError, Region, parse_job_spec,
};
use tern_sim::cloud::SimConfig;
use tern_sim::{Delayed, SimCloud, Trace};

use super::output::print_json_line;
use tern::controller::{Controller, ControllerConfig};
use tern::store::Store;

/// The size of a benchmark fleet (`bench reconcile`, `bench api`).
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct FleetArgs {
    #[arg(long, default_value_t = 1000)]
    pub jobs: u32,
    #[arg(long, default_value_t = 10_000)]
    pub instances: u32,
}

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub fleet: FleetArgs,
    /// Measured passes (the figure is their mean).
    #[arg(long, default_value_t = 40)]
    pub passes: usize,
    /// Also measure with this quota file in force (quotas, team budgets and shares; offers of
    /// the simulated cloud are `cloud = "sim"`), beside the run without it, in one process.
    #[arg(long, value_name = "FILE")]
    pub quota: Option<PathBuf>,
    /// Fairness of the run with limits (wins over the file's).
    #[arg(long, value_name = "F", value_parser = super::number::non_negative, allow_negative_numbers = true)]
    pub fairness: Option<f64>,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, serde::Serialize)]
struct Figure {
    jobs: u32,
    instances: usize,
    passes: usize,
    /// Mean CPU ms of a steady-state pass.
    cpu_ms: f64,
    /// Median and slowest wall-clock ms of a pass.
    wall_ms: f64,
    wall_ms_max: f64,
    /// CPU ms of the first pass, which plans and launches every job (MILP included).
    placement_cpu_ms: f64,
    /// Of `cpu_ms`, the CPU spent inside the simulated cloud's calls (building the list of
    /// every instance, its clock): work a real cloud does on its own machines.
    cloud_cpu_ms: f64,
}

/// Counts the CPU time spent inside a provider's calls while switched on: the simulated cloud
/// runs on the controller's thread, and this tells its share of a pass.
#[derive(Debug, Clone)]
struct Metered {
    inner: Delayed,
    on: Arc<AtomicBool>,
    ns: Arc<AtomicU64>,
}

impl Metered {
    async fn time<T>(&self, call: impl std::future::Future<Output = T>) -> T {
        if !self.on.load(Ordering::Relaxed) {
            return call.await;
        }
        let c0 = thread_cpu_ns().unwrap_or(0);
        let out = call.await;
        let spent = thread_cpu_ns().unwrap_or(0).saturating_sub(c0);
        self.ns.fetch_add(spent, Ordering::Relaxed);
        out
    }
}

#[async_trait]
impl Provider for Metered {
    fn cloud(&self) -> Cloud {
        self.inner.cloud()
    }

    async fn offers(&self, region: &Region) -> Result<Vec<Offer>, ProviderError> {
        self.time(self.inner.offers(region)).await
    }

    async fn launch(&self, request: &LaunchRequest) -> Result<LaunchOutcome, ProviderError> {
        self.time(self.inner.launch(request)).await
    }

    async fn terminate(&self, id: &InstanceId) -> Result<(), ProviderError> {
        self.time(self.inner.terminate(id)).await
    }

    async fn list(&self, owner: &str) -> Result<Vec<Instance>, ProviderError> {
        self.time(self.inner.list(owner)).await
    }

    async fn interruptions(&self) -> Result<Vec<Interruption>, ProviderError> {
        self.time(self.inner.interruptions()).await
    }
}

/// Nanoseconds this thread has run on a CPU.
fn thread_cpu_ns() -> anyhow::Result<u64> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat")
        .context("reading /proc/thread-self/schedstat (Linux only)")?;
    text.split_whitespace()
        .next()
        .and_then(|v| v.parse().ok())
        .context("unexpected /proc/thread-self/schedstat format")
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(bench(args))
}

/// A simulated cloud with ten zones (behind a [`Delayed`] wrapper) of plenty and a controller with `jobs` elastic V100 jobs of
/// `instances / jobs` workers each, submitted but not yet placed.
pub(crate) fn bench_fleet(size: FleetArgs) -> anyhow::Result<(Arc<SimCloud>, Delayed, Controller)> {
    let (sim, cloud, ctl, _) = metered_fleet(size, Limited::default())?;
    Ok((sim, cloud, ctl))
}

/// The quota file and fairness a run is measured with (none by default).
#[derive(Debug, Clone, Default)]
struct Limited {
    limits: tern::limits::Limits,
    fairness: Option<f64>,
}

/// [`bench_fleet`], with the meter of the cloud's calls.
fn metered_fleet(
    size: FleetArgs,
    limited: Limited,
) -> anyhow::Result<(Arc<SimCloud>, Delayed, Controller, Metered)> {
    let FleetArgs { jobs, instances } = size;
    anyhow::ensure!(
        jobs > 0 && instances >= jobs,
        "need --jobs > 0 and --instances >= --jobs"
    );
    let per_job = instances / jobs;
    let zones: Vec<Trace> = "abcdefghij"
        .chars()
        .map(|c| Trace {
            source: PathBuf::from(format!("bench-{c}.json")),
            cloud: Cloud::Aws,
            region: "us-west-2".into(),
            zone: format!("us-west-2{c}"),
            gap_seconds: 300,
            available: vec![instances; 100],
            prices: None,
            spot_price: Some(0.9 + f64::from(u32::from(c) - u32::from('a')) * 0.01),
            on_demand_price: Some(3.06),
        })
        .collect();
    let start = Utc
        .with_ymd_and_hms(2026, 11, 23, 0, 0, 0)
        .single()
        .context("time")?;
    let sim = Arc::new(SimCloud::new(
        zones,
        SimConfig {
            start,
            boot: Duration::from_secs(60),
            ..SimConfig::default()
        },
    ));
    let store = Arc::new(Store::in_memory()?);
    let mut config = ControllerConfig::new("tern-bench", vec![Region::new("us-west-2")]);
    config.plan.time_limit = Duration::from_secs(10);
    config.limits = Arc::new(limited.limits);
    config.fairness = limited.fairness;
    // No delay unless a benchmark sets one (`bench api` measures with a slow cloud).
    let cloud = Delayed::new(sim.clone(), Duration::ZERO);
    let meter = Metered {
        inner: cloud.clone(),
        on: Arc::new(AtomicBool::new(false)),
        ns: Arc::new(AtomicU64::new(0)),
    };
    let mut ctl = Controller::open(store, Arc::new(meter.clone()), config)?;
    for j in 0..jobs {
        let text = format!(
            "name = \"bench-{j:05}\"\nteam = \"t{}\"\naccelerators = [\"V100\"]\nworkers = {per_job}\n\
             deadline = \"400h\"\nlocal_batch = 64\n[work]\nsamples = 100_000_000\n\
             [[observation]]\naccelerator = \"V100\"\ngpus = 1\nlocal_batch = 64\nstep_seconds = 0.2\n",
            j % 10
        );
        ctl.submit(parse_job_spec(&text, "bench.toml")?, start)?;
    }
    Ok((sim, cloud, ctl, meter))
}

async fn bench(args: Args) -> anyhow::Result<()> {
    let plain = measure(&args, Limited::default()).await?;
    let Some(path) = &args.quota else {
        return show(&plain, None, args.json);
    };
    let limited = Limited {
        limits: tern::limits::Limits::load(path)?,
        fairness: args.fairness,
    };
    let with = measure(&args, limited).await?;
    show(&plain, Some(&with), args.json)
}

/// Print the figure, and the one with limits beside it (with the ratio of their CPU).
fn show(plain: &Figure, with: Option<&Figure>, json: bool) -> anyhow::Result<()> {
    if json {
        return match with {
            None => print_json_line(plain),
            Some(w) => print_json_line(&serde_json::json!({
                "without_limits": plain,
                "with_limits": w,
                "cpu_ratio": w.cpu_ms / plain.cpu_ms.max(1e-9),
            })),
        };
    }
    for (label, f) in [("", Some(plain)), ("with the quota file: ", with)] {
        let Some(figure) = f else { continue };
        say!(
            "{label}one reconcile pass over {} jobs / {} instances: {:.1} ms CPU (mean of {}; {:.1} ms of it inside the simulated cloud's calls), {:.1} ms wall (median; max {:.1}); first pass (plan + launch everything): {:.0} ms CPU",
            figure.jobs,
            figure.instances,
            figure.cpu_ms,
            figure.passes,
            figure.cloud_cpu_ms,
            figure.wall_ms,
            figure.wall_ms_max,
            figure.placement_cpu_ms
        );
    }
    if let Some(w) = with {
        say!(
            "with / without the quota file: {:.2}× CPU per steady pass",
            w.cpu_ms / plain.cpu_ms.max(1e-9)
        );
    }
    Ok(())
}

async fn measure(args: &Args, limited: Limited) -> anyhow::Result<Figure> {
    let (sim, _, mut ctl, meter) = metered_fleet(args.fleet, limited)?;
    let t0 = thread_cpu_ns()?;
    ctl.pass(sim.now()).await?;
    let placement = (thread_cpu_ns()? - t0) as f64 / 1e6;
    // Boot, then let the controller see everything running.
    sim.advance(Duration::from_secs(120));
    ctl.pass(sim.now()).await?;
    // The kernel updates a thread's run time at scheduler ticks (a few ms), so one pass's
    // reading is coarse; the figure is the sum of per-pass readings over many passes divided
    // by their number (the rounding errors average out). Advancing the simulated cloud
    // between passes is not counted.
    let mut wall = Vec::new();
    let passes = args.passes.max(1);
    let mut cpu_ns = 0u64;
    meter.on.store(true, Ordering::Relaxed);
    for _ in 0..passes {
        sim.advance(Duration::from_secs(60));
        let (c0, w0) = (thread_cpu_ns()?, std::time::Instant::now());
        ctl.pass(sim.now()).await?;
        wall.push(w0.elapsed().as_secs_f64() * 1e3);
        cpu_ns += thread_cpu_ns()?.saturating_sub(c0);
    }
    meter.on.store(false, Ordering::Relaxed);
    let cpu_total = cpu_ns as f64 / 1e6;
    if ctl.instances().next().is_none() {
        for e in ctl.store().events(0, None)?.iter().rev().take(3) {
            say_err!("{:?} {}: {}", e.job, e.kind, e.message);
        }
        anyhow::bail!("the benchmark fleet did not launch (events above)");
    }
    wall.sort_by(f64::total_cmp);
    let figure = Figure {
        jobs: args.fleet.jobs,
        instances: ctl.instances().count(),
        passes,
        cpu_ms: cpu_total / passes as f64,
        wall_ms: wall[wall.len() / 2],
        wall_ms_max: wall[wall.len() - 1],
        placement_cpu_ms: placement,
        cloud_cpu_ms: meter.ns.load(Ordering::Relaxed) as f64 / 1e6 / passes as f64,
    };
    Ok(figure)
}
